"""Export a steering setting for llama.cpp (llama-server, llama-cpp-python, Ollama): a merged GGUF, or a GGUF LoRA.

Both start from the GGUF file the model was loaded from (a bundled alias or
``--model FILE.gguf``), whose tensors are copied byte for byte:

- ``gguf``: the model's GGUF with an ``output.weight`` head ``E (I + M)`` in F32
  added (or replaced); llama.cpp uses it instead of the tied token embedding.
- ``gguf-lora``: a llama.cpp LoRA adapter on ``output.weight`` (``A = Vᵀ``,
  ``B = E U S``, alpha = rank, so the runtime's scale is 1 at the exported ε and
  ``--lora-scaled adapter.gguf 0.5`` is ε/2). llama.cpp finds no ``output.weight``
  in a model whose head is tied to the token embedding, and a LoRA on the
  embedding would change the input too; so for such a model the export also
  writes ``base.gguf``: the model with an untied ``output.weight`` that is a byte
  copy of the token embedding (the same head, unsteered), to load the adapter on.

>>> export_gguf(lm, [(sentiment, 6.0)], "out", lora=False)   # doctest: +SKIP
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import torch

from lmswitch.core.export import (
    ExportReport,
    checked_out,
    full_rank,
    head_module_name,
    logit_errors,
    lora_factors,
    merged_head,
    model_files,
    rank_notes,
    setting_names,
    write_folder,
)
from lmswitch.core.models import LanguageModel
from lmswitch.core.steering import Setting

HEAD = "output.weight"
EMBEDDING = "token_embd.weight"
MERGED_FILE = "model.gguf"
BASE_FILE = "base.gguf"
ADAPTER_FILE = "adapter.gguf"
SETTING_KEY = "lmswitch.setting"  # in every file lmswitch writes: how a folder is known as an earlier export


def source_gguf(lm: LanguageModel) -> Path:
    """The GGUF file ``lm`` was loaded from, or a clear error when it came from elsewhere."""
    if not lm.gguf_path or not Path(lm.gguf_path).is_file():
        raise ValueError(f"model '{lm.name}' was not loaded from a GGUF file, so there is no GGUF to add the head to; load it "
                         "from one (a bundled alias such as smollm2-135m, or --model FILE.gguf), or export --format merged and "
                         "convert that folder with llama.cpp's convert_hf_to_gguf.py")
    return Path(lm.gguf_path)


def _arch(reader: gguf.GGUFReader) -> str:
    return reader.fields[gguf.Keys.General.ARCHITECTURE].contents()


def _copy_metadata(reader: gguf.GGUFReader, writer: gguf.GGUFWriter, extra: dict[str, str]) -> None:
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer writes these itself
        kind = field.types[0]
        writer.add_key_value(field.name, field.contents(), kind, sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    for key, value in extra.items():
        writer.add_string(key, value)


def _write_model(reader: gguf.GGUFReader, path: Path, head: Callable[[], tuple[np.ndarray, gguf.GGMLQuantizationType]],
                 extra: dict[str, str]) -> None:
    """The reader's model with its ``output.weight`` set to ``head()`` (raw data and type), every other tensor copied."""
    writer = gguf.GGUFWriter(str(path), _arch(reader), endianess=reader.endianess)
    alignment = reader.fields.get(gguf.Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = int(alignment.contents())  # tensor offsets follow the source's alignment
    _copy_metadata(reader, writer, extra)
    tensors = [t for t in reader.tensors if t.name != HEAD]
    data, kind = head()
    for t in tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.add_tensor_info(HEAD, data.shape, data.dtype, data.nbytes, kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in tensors:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.write_tensor_data(data)
    writer.close()


def _tensor(reader: gguf.GGUFReader, name: str):
    return next((t for t in reader.tensors if t.name == name), None)


def _check_head(lm: LanguageModel, reader: gguf.GGUFReader) -> None:
    """The GGUF's head (or tied embedding) must have the model's shape, or the file is not this model's."""
    head_module_name(lm)
    t = _tensor(reader, HEAD) or _tensor(reader, EMBEDDING)
    want = (lm.head.weight.shape[1], lm.head.weight.shape[0])  # ggml order: (d, V)
    if t is None or tuple(int(x) for x in t.shape[:2]) != want:
        raise ValueError(f"{lm.gguf_path} has no head of shape {want[::-1]} (V × d); it is not the file this model was loaded from")


def _setting_note(setting: Setting) -> dict[str, str]:
    return {SETTING_KEY: ", ".join(f"{n}={e:+g}" for n, e in setting_names(setting))}


def export_gguf_merged(lm: LanguageModel, setting: Setting, out: str | os.PathLike, *, force: bool = False) -> ExportReport:
    """``out/model.gguf``: the model's GGUF with the steered head ``E (I + M)`` (F32) as its own ``output.weight``."""
    checked_out(out, "gguf", force, model_files(lm))
    reader = gguf.GGUFReader(str(source_gguf(lm)))
    _check_head(lm, reader)
    head = merged_head(lm, setting, torch.float32)  # written as F32: not rounded to a bfloat16 model's dtype first
    full = full_rank(lm, setting)

    def write(tmp: Path) -> None:
        _write_model(reader, tmp / MERGED_FILE, lambda: (head.numpy(), gguf.GGMLQuantizationType.F32), _setting_note(setting))

    write_folder(out, "gguf", force, write, lm)
    E = lm.head_weight().detach().to("cpu", torch.float64)
    errors = logit_errors(lm, setting, lambda c: c @ (head.double() - E).T)
    return ExportReport.of(out, "gguf", full, full, 1.0, errors, "output.weight", setting)


def export_gguf_lora(lm: LanguageModel, setting: Setting, out: str | os.PathLike, *, rank: int | None = None,
                     force: bool = False) -> ExportReport:
    """``out/adapter.gguf`` (a llama.cpp LoRA on ``output.weight``), and ``out/base.gguf`` when the model's head is tied."""
    checked_out(out, "gguf-lora", force, model_files(lm))
    reader = gguf.GGUFReader(str(source_gguf(lm)))
    _check_head(lm, reader)
    lora = lora_factors(lm, setting, rank)
    tied = _tensor(reader, HEAD) is None

    def write(tmp: Path) -> None:
        if tied:
            embedding = _tensor(reader, EMBEDDING)
            _write_model(reader, tmp / BASE_FILE, lambda: (embedding.data, embedding.tensor_type),
                         {**_setting_note(setting),
                          "lmswitch.note": "the head untied from the token embedding (a byte copy), for lmswitch's LoRA adapters"})
        writer = gguf.GGUFWriter(str(tmp / ADAPTER_FILE), _arch(reader))
        writer.add_type(gguf.GGUFType.ADAPTER)
        writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(lora.rank))  # llama.cpp scales by alpha / rank: 1
        for key, value in _setting_note(setting).items():
            writer.add_string(key, value)
        writer.add_tensor(f"{HEAD}.lora_a", lora.A.numpy())
        writer.add_tensor(f"{HEAD}.lora_b", lora.B.numpy())
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()

    write_folder(out, "gguf-lora", force, write, lm)
    notes = (f"the model's head is tied to its token embedding: load {BASE_FILE} (the same model with an untied head) with "
             f"{ADAPTER_FILE}",) if tied else (f"load {ADAPTER_FILE} on {lm.gguf_path}",)
    notes += rank_notes(rank, lora.full_rank)
    return ExportReport.of(out, "gguf-lora", lora.rank, lora.full_rank, lora.kept_energy, logit_errors(lm, setting, lora.written),
                           HEAD, setting, notes)


def owned_by(format: str) -> Callable[[Path], bool]:
    """Whether a folder holds an earlier export of the GGUF ``format`` ("gguf" or "gguf-lora")."""
    return functools.partial(_is_ours, names={"gguf": (MERGED_FILE,), "gguf-lora": (ADAPTER_FILE, BASE_FILE)}[format])


def _is_ours(folder: Path, names: tuple[str, ...]) -> bool:
    """An earlier GGUF export of lmswitch in the format that writes ``names``: only such files, each carrying lmswitch's
    setting in its metadata (another format's export is refused, not replaced: README's "of the same format")."""
    files = list(folder.iterdir())
    if not files or not all(p.name in names for p in files):
        return False
    try:
        return all(SETTING_KEY in gguf.GGUFReader(str(p)).fields for p in files)
    except Exception:  # not a GGUF file we can read: not ours
        return False
