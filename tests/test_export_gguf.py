"""GGUF export: the merged GGUF and the llama.cpp LoRA, loaded by the real llama.cpp (llama-cpp-python) on the embedded model."""

from __future__ import annotations

import shutil

import gguf
import numpy as np
import pytest
import torch
from conftest import random_switch
from llama_cpp import Llama

import lmswitch as ls
from lmswitch.core.export import BEYOND_FLUENT_EXPORT, export, lora_factors, merged_head
from lmswitch.core.export_gguf import ADAPTER_FILE, BASE_FILE, MERGED_FILE
from lmswitch.io.resources import shipped_switch_path

PROMPT = "My weekend was"


def test_a_model_not_loaded_from_gguf_is_refused_with_the_way_forward(llama_lm, tmp_path):
    s = random_switch(llama_lm, seed=1, scale=20.0)
    for fmt in ("gguf", "gguf-lora"):
        with pytest.raises(ValueError, match="not loaded from a GGUF file.*--format merged"):
            export(llama_lm, [(s, 2.0)], tmp_path / fmt, format=fmt)
    with pytest.raises(ValueError, match=r"rank \(--rank\) applies to LoRA"):
        export(llama_lm, [(s, 2.0)], tmp_path / "g", format="gguf", rank=2)
    assert not any(tmp_path.iterdir())




@pytest.fixture(scope="module")
def exported(lm32, tmp_path_factory):
    """The shipped sentiment switch at ε 6 as a merged GGUF and as a llama.cpp LoRA (with its untied base), asked at a rank
    above the steering's own (the full rank, as by default, and a note)."""
    sentiment = ls.load_switch(shipped_switch_path("sentiment"), lm32)
    folder = tmp_path_factory.mktemp("gguf")
    merged = export(lm32, [(sentiment, 6.0)], folder / "merged", format="gguf")
    lora = export(lm32, [(sentiment, 6.0)], folder / "lora", format="gguf-lora", rank=1000)
    yield sentiment, folder, merged, lora
    shutil.rmtree(folder, ignore_errors=True)  # ~430 MB: gone with the module, not kept to the run's end


def llama(path, lora=None, scale: float = 1.0) -> Llama:
    return Llama(model_path=str(path), lora_path=str(lora) if lora else None, lora_scale=scale, n_ctx=256, logits_all=True,
                 n_threads=2, seed=0, verbose=False)


def llama_logits(model: Llama, ids: list[int]) -> np.ndarray:
    model.reset()
    model.eval(ids)
    return np.array(model.scores[: len(ids)])


def lmswitch_logits(lm, ids: list[int], setting) -> np.ndarray:
    with torch.no_grad(), ls.steer(lm, setting):
        return lm.model(torch.tensor([ids])).logits[0].float().numpy()


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.real_model
@pytest.mark.slow
def test_the_merged_gguf_head_is_exact_whatever_dtype_the_model_was_loaded_in(lm, tmp_path):
    """The head is written in F32: from a bfloat16 model it was rounded to bfloat16 first (5.9e-2 of the steering's
    change, with no note), where the float32 model's is exact."""
    sentiment = ls.load_switch(shipped_switch_path("sentiment"), lm)
    report = export(lm, [(sentiment, 6.0)], tmp_path / "g", format="gguf")
    assert report.relative_logit_error < 1e-5  # and its one note is that +6 is past the card's fluent range, no rounding's
    assert report.notes == (f"'sentiment': ε +6 is beyond its fluent range {sentiment.card.fluent_text}: expect text that reads "
                            f"less well; {BEYOND_FLUENT_EXPORT}",)


@pytest.mark.real_model
@pytest.mark.slow
def test_another_formats_export_is_refused_not_replaced(lm32, exported, monkeypatch):
    """README: an earlier export *of the same format* is replaced whole; a gguf-lora folder is not a gguf one. Refused
    before the export's work."""
    sentiment, folder, _, _ = exported
    before = sorted(p.name for p in (folder / "lora").iterdir())
    for work in ("lora_factors", "merged_head", "full_rank"):
        monkeypatch.setattr(f"lmswitch.core.export_gguf.{work}", lambda *args, _work=work, **kwargs: pytest.fail(f"{_work} ran before the refusal"))
    with pytest.raises(ValueError, match="already holds other files"):
        export(lm32, [(sentiment, 2.0)], folder / "lora", format="gguf")
    with pytest.raises(ValueError, match="already holds other files"):
        export(lm32, [(sentiment, 2.0)], folder / "merged", format="gguf-lora")
    assert sorted(p.name for p in (folder / "lora").iterdir()) == before


@pytest.mark.real_model
@pytest.mark.slow
def test_the_gguf_files_hold_exactly_what_was_asked(lm32, exported):
    sentiment, folder, merged, lora = exported
    assert merged.format == "gguf" and merged.relative_logit_error < 1e-5 and lora.rank == lora.full_rank
    assert any("rank 1000 is above the steering's full rank" in note for note in lora.notes)  # as peft's export says it
    source = gguf.GGUFReader(lm32.gguf_path)
    names = {t.name for t in source.tensors}
    assert "output.weight" not in names  # SmolLM2 ties its head to the token embedding
    model = gguf.GGUFReader(str(folder / "merged" / MERGED_FILE))
    head = next(t for t in model.tensors if t.name == "output.weight")
    assert np.array_equal(head.data, merged_head(lm32, [(sentiment, 6.0)]).numpy())
    assert {t.name for t in model.tensors} == names | {"output.weight"}
    base = {t.name: t for t in gguf.GGUFReader(str(folder / "lora" / BASE_FILE)).tensors}
    assert np.array_equal(base["output.weight"].data, base["token_embd.weight"].data)  # the same head, untied: a byte copy
    adapter = {t.name: t for t in gguf.GGUFReader(str(folder / "lora" / ADAPTER_FILE)).tensors}
    lora = lora_factors(lm32, [(sentiment, 6.0)])
    assert np.array_equal(adapter["output.weight.lora_a"].data, lora.A.numpy())
    assert np.array_equal(adapter["output.weight.lora_b"].data, lora.B.numpy())


@pytest.mark.real_model
@pytest.mark.slow
def test_llama_cpp_steers_like_lmswitch_with_the_lora_and_the_merged_gguf(lm32, exported):
    sentiment, folder, _, _ = exported
    ids = lm32.tokenizer(PROMPT + " great, and the food").input_ids
    ours, ours_half, ours_base = (lmswitch_logits(lm32, ids, s) for s in ([(sentiment, 6.0)], [(sentiment, 3.0)], []))
    original = llama_logits(llama(lm32.gguf_path), ids)
    untied = llama_logits(llama(folder / "lora" / BASE_FILE), ids)
    assert np.array_equal(untied, original)  # the untied base is the same model
    quantisation = rel(original, ours_base)  # llama.cpp's quantised arithmetic vs lmswitch's dequantised weights, unsteered
    assert quantisation < 0.1
    lora = llama_logits(llama(folder / "lora" / BASE_FILE, folder / "lora" / ADAPTER_FILE), ids)
    half = llama_logits(llama(folder / "lora" / BASE_FILE, folder / "lora" / ADAPTER_FILE, scale=0.5), ids)
    merged = llama_logits(llama(folder / "merged" / MERGED_FILE), ids)
    assert rel(lora - untied, ours - ours_base) < 0.05  # the adapter's logit change is the switch's
    assert rel(half - untied, ours_half - ours_base) < 0.05  # adapter scale ½ = ε/2
    for theirs in (lora, merged):  # no error beyond the quantisation the unsteered model already has
        assert rel(theirs, ours) < 1.5 * quantisation
        assert np.array_equal(theirs.argmax(-1), ours.argmax(-1))


@pytest.mark.real_model
@pytest.mark.slow
def test_llama_cpp_greedy_text_with_the_exported_switch_is_lmswitch_text(lm32, exported):
    sentiment, folder, _, _ = exported
    want = ls.generate(lm32, PROMPT, [(sentiment, 6.0)], max_new_tokens=8, temperature=0, repeat_guard=0)[0]  # an export is plain steering
    for model in (llama(folder / "merged" / MERGED_FILE), llama(folder / "lora" / BASE_FILE, folder / "lora" / ADAPTER_FILE)):
        assert model.create_completion(PROMPT, max_tokens=8, temperature=0.0)["choices"][0]["text"] == want
