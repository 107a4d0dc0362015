"""PEFT export: the adapter, loaded by the real ``peft`` on a fresh copy of the model, gives lmswitch's steered logits."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import FAMILIES, random_ids, random_switch
from peft import PeftModel
from peft.helpers import rescale_adapter_scale

import lmswitch as ls
from lmswitch.cli import main
from lmswitch.core.export import export_peft, lora_factors
from lmswitch.io.resources import shipped_switch_path


def steered_logits(lm, ids, setting) -> torch.Tensor:
    with torch.no_grad(), ls.steer(lm, setting):
        return lm.model(ids).logits.float()


def adapter_model(lm, folder) -> PeftModel:
    """The real PEFT loader on an untouched copy of the base model."""
    return PeftModel.from_pretrained(copy.deepcopy(lm.model), str(folder)).eval()


@pytest.mark.parametrize("family", FAMILIES)
def test_exported_adapter_equals_the_steered_model_and_scales_like_eps(make_lm, family, tmp_path):
    lm = make_lm(family, init=0.2)
    s = random_switch(lm, seed=1, scale=20.0, name="mood")
    report = export_peft(lm, [(s, 6.0)], tmp_path / "mood")
    assert report.rank == report.full_rank == lm.hidden_size and report.kept_energy == pytest.approx(1.0)
    assert report.relative_logit_error < 1e-4
    ids = random_ids(lm, 2, 10, seed=3)
    peft_model = adapter_model(lm, tmp_path / "mood")
    with torch.no_grad():
        got = peft_model(ids).logits.float()
        with rescale_adapter_scale(peft_model, 0.5):
            half = peft_model(ids).logits.float()
    assert torch.allclose(got, steered_logits(lm, ids, [(s, 6.0)]), atol=1e-4, rtol=1e-4)
    assert torch.allclose(half, steered_logits(lm, ids, [(s, 3.0)]), atol=1e-4, rtol=1e-4)  # adapter scale × ½ = ε / 2
    assert not torch.allclose(got, lm.model(ids).logits.float(), atol=1e-2)  # it does steer
    if lm.model.config.tie_word_embeddings:  # the input embedding is untouched: only the head changes
        assert torch.equal(peft_model.get_input_embeddings().weight, lm.model.get_input_embeddings().weight)


def test_two_adapters_together_compose_like_switches(llama_lm, tmp_path):
    a, b = random_switch(llama_lm, seed=1, scale=20.0, name="a"), random_switch(llama_lm, seed=2, scale=20.0, name="b")
    export_peft(llama_lm, [(a, 4.0)], tmp_path / "a")
    export_peft(llama_lm, [(b, -3.0)], tmp_path / "b")
    peft_model = adapter_model(llama_lm, tmp_path / "a")
    peft_model.load_adapter(str(tmp_path / "b"), adapter_name="b")
    peft_model.base_model.set_adapter(["default", "b"])
    ids = random_ids(llama_lm, 2, 8, seed=5)
    with torch.no_grad():
        both = peft_model(ids).logits.float()
    assert torch.allclose(both, steered_logits(llama_lm, ids, [(a, 4.0), (b, -3.0)]), atol=1e-4, rtol=1e-4)


def test_rank_truncation_reports_what_it_keeps(llama_lm, tmp_path):
    s = random_switch(llama_lm, seed=4, scale=20.0)
    A, B, full, kept = lora_factors(llama_lm, [(s, 5.0)], rank=4)
    assert A.shape == (4, llama_lm.hidden_size) and B.shape == (llama_lm.vocab_size, 4) and full == llama_lm.hidden_size
    singular = torch.linalg.svdvals(s.W.double())
    assert kept == pytest.approx(float((singular[:4] ** 2).sum() / (singular**2).sum()), rel=1e-6)
    report = export_peft(llama_lm, [(s, 5.0)], tmp_path / "r4", rank=4)
    assert report.rank == 4 and 0.05 < report.relative_logit_error < 1  # a random switch loses a lot at rank 4, and says so
    low = random_switch(llama_lm, seed=4, scale=20.0)
    u, sv, vh = torch.linalg.svd(low.W)
    low.W = (u[:, :3] * sv[:3]) @ vh[:3]  # a planted rank-3 switch is exported exactly at rank 3
    exact = export_peft(llama_lm, [(low, 5.0)], tmp_path / "r3", rank=8)
    assert exact.full_rank == 3 and exact.rank == 3 and exact.relative_logit_error < 1e-4


def test_bad_exports_are_refused(llama_lm, tmp_path):
    s = random_switch(llama_lm, seed=1)
    with pytest.raises(ValueError, match="nothing to export"):
        export_peft(llama_lm, [(s, 0.0)], tmp_path / "zero")
    with pytest.raises(ValueError, match="rank must be a positive integer"):
        export_peft(llama_lm, [(s, 2.0)], tmp_path / "bad", rank=0)
    assert not (tmp_path / "zero").exists() and not (tmp_path / "bad").exists()


def test_cli_export_writes_an_adapter_and_prints_its_fidelity(llama_lm, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "model"
    llama_lm.model.save_pretrained(folder)
    llama_lm.tokenizer.save_pretrained(folder)
    monkeypatch.setenv("LMSWITCH_CACHE", str(tmp_path / "cache"))
    lm = ls.load_model(str(folder), dtype="float32")
    path = random_switch(lm, seed=1, scale=20.0, name="mood").save(tmp_path / "mood.safetensors")
    code = main(["--model", str(folder), "--dtype", "float32", "export", "--switch", f"{path}=5", "--format", "peft",
                 "--out", str(tmp_path / "out"), "--rank", "8"])
    out = capsys.readouterr()
    assert code == 0 and (tmp_path / "out" / "adapter_config.json").is_file(), out.err
    assert "rank 8 of 32" in out.out and "relative logit error" in out.out
    code = main(["--model", str(folder), "export", "--switch", f"{path}=5", "--format", "gguf-lora", "--out", str(tmp_path / "g")])
    assert code == 2 and "peft" in capsys.readouterr().err


@pytest.mark.real_model
def test_shipped_switch_as_an_adapter_on_the_embedded_model(lm, tmp_path):
    """The shipped sentiment switch at its recommended ε, exported and loaded by peft on SmolLM2: same logits, same greedy text."""
    sentiment = ls.load_switch(shipped_switch_path("sentiment"), lm)
    eps = sentiment.card.recommended_eps
    report = export_peft(lm, [(sentiment, eps)], tmp_path / "sentiment")
    assert report.target_module == "lm_head" and report.relative_logit_error < 1e-4
    peft_model = adapter_model(lm, tmp_path / "sentiment")
    ids = lm.tokenizer("My weekend was", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(peft_model(ids).logits.float(), steered_logits(lm, ids, [(sentiment, eps)]), atol=1e-3, rtol=1e-4)
        greedy = peft_model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=lm.tokenizer.pad_token_id)
    text = lm.tokenizer.decode(greedy[0, ids.shape[1]:], skip_special_tokens=True)
    assert text == ls.generate(lm, "My weekend was", [(sentiment, eps)], max_new_tokens=12, temperature=0)[0]
