"""Export a steering setting for runtimes that know nothing of lmswitch: a PEFT LoRA adapter, or a merged model.

A setting steers the head input, ``logits = E (c + M c)`` with ``M = Σ εᵢ ε0ᵢ Wᵢ``,
so the change of the logits is ``E M c``: a low-rank change of the head itself. (A family that scales the head's
output, Granite or Cohere, scales the change with it, in whatever runtime loads the export.)

- ``peft``: with ``M = U S Vᵀ`` (rank ``r``) it is exactly a LoRA on the head,
  ``A = Vᵀ`` (r × d) and ``B = E U S`` (V × r), with scaling 1. Scaling the
  adapter scales ε; two adapters active together add their changes, as switches
  do. A tied input embedding is not touched: the adapter's matrices are separate.
  ``rank`` truncates ``M`` to its top singular directions (runtimes cap LoRA ranks);
  the report says how much of the logit change that keeps.
- ``merged``: a full model folder whose head is ``E' = E (I + M)``, untied from
  the input embedding, for runtimes with no adapter support (any
  ``from_pretrained``). ε is baked in.

Either is plain steering: the repeat guard (:mod:`lmswitch.core.guard`) is a rule of lmswitch's decoding, not a
weight, so an exported model writes what ``repeat_guard=0`` writes.

Nothing is written into a folder that holds anything but an earlier export of
the same format (a model folder with an adapter beside it would load steered
without anyone asking); files are written to a temporary folder next to it and
moved in when complete.

>>> report = export(lm, [(sentiment, 6.0)], "sentiment-peft")          # doctest: +SKIP
>>> PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(...), "sentiment-peft")   # doctest: +SKIP
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from lmswitch.core.models import LanguageModel
from lmswitch.core.options import EXPORT_FORMAT
from lmswitch.core.options import EXPORT_FORMATS as FORMATS
from lmswitch.core.steering import Setting, beyond_fluent, check_setting, steering_matrix
from lmswitch.io.atomic import as_new_files, as_os_error, new_folder_beside

LORA_FORMATS = ("peft", "gguf-lora")  # the formats that write a LoRA adapter beside the model
ADAPTER_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
MERGED_MARKER = "lmswitch_setting.json"  # marks a merged export (a folder an export may replace)
FIDELITY_TEXT = ("The committee met on Tuesday to talk about the new rules for parking near the market, and most of the people "
                 "who came said the plan was fair, though a few worried about the cost for small shops.")


@dataclass(frozen=True)
class ExportReport:
    """What an export wrote and how faithful it is at the exported ε."""

    out: str
    format: str  # one of FORMATS
    rank: int  # the rank of the logit change written (the adapter's rank)
    full_rank: int  # the rank of the steering matrix before truncation
    kept_energy: float  # share of ‖M‖²_F (the steering matrix, not the logits) kept by the truncation; 1.0: exact
    relative_logit_error: float  # ‖Δlogits_written − Δlogits_switch‖ / ‖Δlogits_switch‖ over a reference text
    max_logit_error: float  # the largest |logit_written − logit_switch| on that text (float32 rounding of a merged head shows here)
    promoted_words_kept: float  # share of the switch's TOP_WORDS most promoted tokens on that text still among the written change's
    target_module: str  # the head's name in the model
    setting: list[tuple[str, float]]  # (switch name, ε), in the order given
    notes: tuple[str, ...] = ()  # anything the user should know (a rank above the full rank, …)

    @property
    def is_lora(self) -> bool:
        """Whether it wrote a LoRA adapter (a logit change beside the model) rather than a model with the change baked in."""
        return self.format in LORA_FORMATS

    @classmethod
    def of(cls, out: str | os.PathLike, format: str, rank: int, full_rank: int, kept_energy: float, errors: LogitErrors,
           target_module: str, setting: Setting, notes: tuple[str, ...] = ()) -> ExportReport:
        """The report of an export written to ``out``, its fidelity from :func:`logit_errors`."""
        return cls(str(out), format, rank, full_rank, round(kept_energy, 6), **asdict(errors), target_module=target_module,
                   setting=setting_names(setting), notes=notes)

    def to_dict(self) -> dict:
        return asdict(self)


def head_module_name(lm: LanguageModel) -> str:
    """The dotted name of the output head inside the model (PEFT's ``target_modules``)."""
    if not isinstance(lm.head, torch.nn.Linear):
        raise ValueError(f"the output head of '{lm.name}' is a {type(lm.head).__name__}, not a Linear layer; "
                         "LoRA adapters and merged heads need a plain Linear head")
    for name, module in lm.model.named_modules():
        if module is lm.head:
            return name
    raise ValueError(f"model '{lm.name}' has no named output head module; it cannot take a LoRA adapter")


def _steering(lm: LanguageModel, setting: Setting) -> torch.Tensor:
    """The setting's steering matrix ``M``, float64, with clear errors when there is nothing to export."""
    setting = check_setting(lm, setting)
    M = steering_matrix(setting)
    if M is None:
        said = "no switch was given" if not setting else "every ε is 0"
        raise ValueError(f"{said}: there is nothing to export (the adapter would be the base model)")
    scale = sum(abs(float(e)) * s.eps0 * float(s.W.norm()) for s, e in setting)
    if float(M.norm()) <= 1e-6 * scale:
        raise ValueError("these switches cancel at these ε (their sum is zero): there is nothing to export")
    return M.double()


def _rank(singular: torch.Tensor, shape: torch.Size) -> int:
    """The rank of a steering matrix from its singular values: those above float32 noise (switches are stored in float32)."""
    return int((singular > singular.max() * max(shape) * torch.finfo(torch.float32).eps).sum())


def full_rank(lm: LanguageModel, setting: Setting) -> int:
    """The rank of ``setting``'s steering matrix (what an exact export writes)."""
    M = _steering(lm, setting)
    return _rank(torch.linalg.svdvals(M), M.shape)


@dataclass(frozen=True)
class LoraFactors:
    """A LoRA pair for the head: ``B @ A`` is a setting's logit change ``E M``, truncated to ``rank``."""

    A: torch.Tensor  # (rank, d), float32
    B: torch.Tensor  # (V, rank), float32
    full_rank: int  # the rank of M before truncation
    kept_energy: float  # share of ‖M‖²_F kept by the truncation; 1.0: exact

    @property
    def rank(self) -> int:
        return self.A.shape[0]

    def written(self, c: torch.Tensor) -> torch.Tensor:
        """The logit change the adapter writes for head inputs ``c``, in float64 (for :func:`logit_errors`)."""
        return (c @ self.A.double().T) @ self.B.double().T


def lora_factors(lm: LanguageModel, setting: Setting, rank: int | None = None) -> LoraFactors:
    """``setting``'s logit change as a LoRA pair, truncated to ``rank`` (its full rank by default)."""
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or rank < 1):
        raise ValueError(f"rank must be a positive integer; got {rank!r}")
    M = _steering(lm, setting)
    U, S, Vh = torch.linalg.svd(M)
    full = _rank(S, M.shape)
    r = min(rank or full, full)
    kept = float((S[:r] ** 2).sum() / (S**2).sum())
    E = lm.head_weight().detach().to("cpu", torch.float64)
    A = Vh[:r]  # (r, d)
    B = E @ (U[:, :r] * S[:r])  # (V, r)
    return LoraFactors(A.float().contiguous(), B.float().contiguous(), full, kept)


def merged_head(lm: LanguageModel, setting: Setting, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The steered head ``E (I + M)`` ``(V, d)`` in ``dtype`` (by default the head's), on the CPU: ``E' c = E (c + M c)``."""
    M = _steering(lm, setting)
    E = lm.head_weight().detach().to("cpu", torch.float64)
    return (E + E @ M).to(dtype or lm.head.weight.dtype)


def rank_notes(rank: int | None, full: int) -> tuple[str, ...]:
    """What a LoRA export says when the rank asked for is above the steering's own."""
    return (f"rank {rank} is above the steering's full rank {full}; the adapter has rank {full}",) if rank and rank > full else ()


def _reference_states(lm: LanguageModel) -> torch.Tensor:
    ids = lm.tokenizer(FIDELITY_TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        return lm.final_hidden(ids)[0].detach().to("cpu", torch.float64)


TOP_WORDS = 50  # the promoted words whose survival a truncated export reports


@dataclass(frozen=True)
class LogitErrors:
    """How far an export's logit change is from the switch's (:class:`ExportReport` carries the same fields)."""

    relative_logit_error: float  # ‖Δlogits_written − Δlogits_switch‖ / ‖Δlogits_switch‖
    max_logit_error: float  # the largest |logit_written − logit_switch|
    # of the TOP_WORDS tokens the switch raises most on average over the text, the share still among the written change's
    # top TOP_WORDS: the effect a user sees
    promoted_words_kept: float


def logit_errors(lm: LanguageModel, setting: Setting, written: Callable[[torch.Tensor], torch.Tensor]) -> LogitErrors:
    """How far the written logit change ``written(c)`` is from the switch's ``E M c`` over a reference text, in float64."""
    c = _reference_states(lm)
    E = lm.head_weight().detach().to("cpu", torch.float64)
    want = (c @ _steering(lm, setting).T) @ E.T
    got = written(c)
    diff = got - want
    top = min(TOP_WORDS, want.shape[-1])
    wanted, kept = (set(x.mean(0).topk(top).indices.tolist()) for x in (want, got))
    largest = float(diff.abs().max()) * abs(lm.logit_scale)  # in logits: the runtime scales the head's output as the family does
    return LogitErrors(float(diff.norm() / want.norm().clamp_min(1e-300)), largest, len(wanted & kept) / top)


def setting_names(setting: Setting) -> list[tuple[str, float]]:
    return [(switch.name, float(eps)) for switch, eps in setting]


def _check_out(folder: Path, ours: Callable[[Path], bool], force: bool, model_files: tuple[str, ...] = ()) -> None:
    """Refuse to write into a folder that holds anything but an earlier export of this format (unless ``force``), and
    ever into the folder of the model's own files (``model_files``)."""
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file; give a folder to write the export into")
    for path in filter(None, model_files):
        model = Path(path).resolve()
        if folder.resolve() in (model, model.parent):
            raise ValueError(f"{folder} holds the model itself ({path}); write the export to a new folder")
    if folder.is_dir() and any(folder.iterdir()) and not ours(folder) and not force:
        shown = ", ".join(sorted(p.name for p in folder.iterdir())[:4])
        raise ValueError(f"{folder} already holds other files ({shown} …); choose a new or empty folder, "
                         "or pass force=True (--force) to write beside them")
    here = Path.cwd().resolve()
    if folder.is_dir() and not force and (here == folder or folder in here.parents):  # _publish swaps the folder whole
        raise ValueError(f"{folder} is the folder you are in (or holds it): an export replaces its folder whole, "
                         "which would leave you in a removed one; write it to a new folder, e.g. out='adapter' (--out adapter)")


def _publish(tmp: Path, folder: Path, force: bool) -> None:
    """Put the finished export ``tmp`` in place: a rename, swapping out an earlier export; with ``force``, file by file."""
    if folder.is_dir() and force:
        for path in tmp.iterdir():
            os.replace(path, folder / path.name)
        tmp.rmdir()
        return
    old = None
    if folder.exists():
        old = folder.with_name(f"{tmp.name}.old")
        folder.rename(old)
    tmp.rename(folder)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _ours(format: str) -> Callable[[Path], bool]:
    """Whether a folder holds an earlier export of ``format`` (which a new one replaces whole)."""
    if format in ("gguf", "gguf-lora"):
        from lmswitch.core.export_gguf import owned_by  # it builds on this module

        return owned_by(format)
    return {"peft": _is_adapter, "merged": _is_merged}[format]


def model_files(lm: LanguageModel) -> tuple[str | None, ...]:
    """Where ``lm`` was loaded from (its GGUF file, its folder or hub id): an export never writes there."""
    return lm.gguf_path, lm.pretrained_id


def checked_out(out: str | os.PathLike, format: str, force: bool, model: tuple[str | None, ...] = ()) -> Path:
    """``out`` resolved, once :func:`_check_out` lets an export of ``format`` write there (and not into ``model``, the
    model's :func:`model_files`). The command line asks before it loads the model and an export before its work, so
    that a refusal comes at once; the export asks again just before it writes."""
    if not str(out).strip():  # (Path("") is the current folder)
        raise ValueError("the export's folder (out, --out) is empty: give the folder to write it into, e.g. out='adapter' (--out adapter)")
    folder = Path(out).expanduser().resolve()
    _check_out(folder, _ours(format), force, model)
    return folder


def write_folder(out: str | os.PathLike, format: str, force: bool, write: Callable[[Path], None], lm: LanguageModel) -> None:
    """Write an export of ``lm`` in ``format`` into ``out`` through a temporary folder beside it (see :func:`_check_out`
    for what is refused)."""
    folder = checked_out(out, format, force, model_files(lm))
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = new_folder_beside(folder)
    try:
        write(tmp)
        as_new_files(tmp)
        _publish(tmp, folder, force)
    except SafetensorError as err:  # a full disk, in the model's or the adapter's weights
        shutil.rmtree(tmp, ignore_errors=True)
        raise as_os_error(err, folder) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _is_adapter(folder: Path) -> bool:
    """An earlier peft export of lmswitch: only its two files, the weights marked with lmswitch's setting."""
    if not all(p.name in (ADAPTER_FILE, CONFIG_FILE) for p in folder.iterdir()) or not (folder / ADAPTER_FILE).is_file():
        return False
    try:
        with safe_open(str(folder / ADAPTER_FILE), "pt") as f:
            return "lmswitch_setting" in (f.metadata() or {})
    except Exception:  # not a safetensors file we can read: not ours
        return False


def _is_merged(folder: Path) -> bool:
    """An earlier merged export of lmswitch: its marker, and only the files the marker lists (anything a user added
    there would go with the folder when it is replaced)."""
    try:
        written = set(json.loads((folder / MERGED_MARKER).read_text(encoding="utf-8"))["files"])
    except (OSError, ValueError, KeyError, TypeError):  # no marker, or one from before it listed its files
        return False
    return all(p.name in written | {MERGED_MARKER} for p in folder.iterdir())


def _peft_config(lm: LanguageModel, target: str, r: int) -> dict:
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": lm.pretrained_id or lm.name,
            "r": r, "lora_alpha": r, "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False, "target_modules": [target],
            "inference_mode": True, "use_rslora": False, "use_dora": False, "init_lora_weights": True}


def export_peft(lm: LanguageModel, setting: Setting, out: str | os.PathLike, *, rank: int | None = None,
                force: bool = False) -> ExportReport:
    """Write ``setting`` as a PEFT LoRA adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``)."""
    checked_out(out, "peft", force, model_files(lm))
    target = head_module_name(lm)
    lora = lora_factors(lm, setting, rank)

    def write(tmp: Path) -> None:
        tensors = {f"base_model.model.{target}.lora_A.weight": lora.A, f"base_model.model.{target}.lora_B.weight": lora.B}
        save_file(tensors, str(tmp / ADAPTER_FILE), metadata={"format": "pt", "lmswitch_setting": json.dumps(setting_names(setting))})
        (tmp / CONFIG_FILE).write_text(json.dumps(_peft_config(lm, target, lora.rank), indent=2), encoding="utf-8")

    write_folder(out, "peft", force, write, lm)
    return ExportReport.of(out, "peft", lora.rank, lora.full_rank, lora.kept_energy, logit_errors(lm, setting, lora.written),
                           target, setting, rank_notes(rank, lora.full_rank))


def _untied_config(lm: LanguageModel):
    config = copy.deepcopy(lm.model.config)
    for c in {id(config): config, id(config.get_text_config()): config.get_text_config()}.values():
        c.tie_word_embeddings = False
    return config


def export_merged(lm: LanguageModel, setting: Setting, out: str | os.PathLike, *, force: bool = False) -> ExportReport:
    """Write a full model folder (weights, config, tokenizer) with the steered head ``E (I + M)`` baked in, untied.

    The model's own weights are shared, not copied: only the new head takes memory.
    """
    checked_out(out, "merged", force, model_files(lm))
    target = head_module_name(lm)
    head = merged_head(lm, setting)
    full = full_rank(lm, setting)

    def write(tmp: Path) -> None:
        state = dict(lm.model.state_dict())
        state[f"{target}.weight"] = head
        lm.model.save_pretrained(tmp, state_dict=state)
        _untied_config(lm).save_pretrained(tmp)
        lm.tokenizer.save_pretrained(tmp)
        files = sorted(p.name for p in tmp.iterdir())  # what a later export into this folder may replace
        (tmp / MERGED_MARKER).write_text(json.dumps({"setting": setting_names(setting), "base": lm.pretrained_id or lm.name,
                                                     "files": files}, indent=2), encoding="utf-8")

    write_folder(out, "merged", force, write, lm)
    E = lm.head_weight().detach().to("cpu", torch.float64)
    errors = logit_errors(lm, setting, lambda c: c @ (head.double() - E).T)
    notes = () if head.dtype == torch.float32 else (
        f"the merged head is stored in {str(head.dtype).removeprefix('torch.')}, like the model, and its rounding moves logits by up "
        f"to {errors.max_logit_error:.1e}; load the model with --dtype float32 for an exact head",)
    return ExportReport.of(out, "merged", full, full, 1.0, errors, target, setting, notes)


# what an ε beyond its switch's fluent range means in an export (the command line and the library say it alike)
BEYOND_FLUENT_EXPORT = ("an exported model steers every token with plain steering (no repeat guard, no adaptive strength), so "
                        "expect word loops there; export a smaller ε")


def export(lm: LanguageModel, setting: Setting, out: str | os.PathLike, *, format: str = EXPORT_FORMAT, rank: int | None = None,
           force: bool = False) -> ExportReport:
    """Export ``setting`` in ``format`` (:data:`FORMATS`) to the folder ``out``. The report's notes say where an ε lies
    beyond its switch's fluent range (:data:`BEYOND_FLUENT_EXPORT`)."""
    setting = check_setting(lm, setting)
    report = _export(lm, setting, out, format, rank, force)
    beyond = tuple(f"'{name}': {note}; {BEYOND_FLUENT_EXPORT}" for name, note in beyond_fluent(setting).items())
    return replace(report, notes=beyond + report.notes)


def _export(lm: LanguageModel, setting: Setting, out: str | os.PathLike, format: str, rank: int | None, force: bool) -> ExportReport:
    if format == "peft":
        return export_peft(lm, setting, out, rank=rank, force=force)
    if format in ("merged", "gguf") and rank is not None:
        raise ValueError("rank (--rank) applies to LoRA adapters (format peft or gguf-lora); a merged head is always exact")
    if format == "merged":
        return export_merged(lm, setting, out, force=force)
    if format in ("gguf", "gguf-lora"):
        from lmswitch.core.export_gguf import export_gguf_lora, export_gguf_merged  # it builds on this module

        if format == "gguf":
            return export_gguf_merged(lm, setting, out, force=force)
        return export_gguf_lora(lm, setting, out, rank=rank, force=force)
    raise ValueError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}")
