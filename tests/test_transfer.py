"""Transfer of a switch to another model: the closed-form map, its identities, its errors, and Gemma-3-270M for real."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from conftest import PAD_ID, SCALED_FAMILIES, all_threads, build_lm, random_switch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

import lmswitch as ls
from lmswitch.cli import main
from lmswitch.core.switch import SwitchFileError
from lmswitch.core.transfer import fit_text, shared_anchors, strength_advice, transfer
from lmswitch.harness.evaluate import PROTOCOL, evaluate_settings
from lmswitch.harness.options import load_prompts
from lmswitch.io.resources import shipped_switch_path

FEW = dict(min_anchors=20)  # the tiny vocabularies share 42 readable words


def test_transfer_to_the_same_model_returns_the_same_switch(llama_lm):
    s = random_switch(llama_lm, seed=1, name="orig")
    t = transfer(s, llama_lm, llama_lm, **FEW)
    assert torch.allclose(t.W, s.W, rtol=0, atol=1e-3 * float(s.W.abs().max()))
    record = t.card.transfer
    assert record.heldout_r2 > 0.999 and record.heldout_top1 == 1.0 and record.eps_scale == pytest.approx(1.0, rel=1e-3)
    assert t.model_fingerprint == llama_lm.fingerprint and record.source_switch == "orig"
    assert t.card["transfer"] == record.to_dict() and list(record.to_dict())[:2] == ["source_switch", "source_model"]
    # the fit as the CLI, the app and the report say it (written once)
    said = fit_text(record, 2)
    assert said.startswith(f"fitted on {record.anchors:,} shared words (e.g. {', '.join(record.example_anchors[:2])}); on ")
    assert f"R² {record.heldout_r2}, nearest-word accuracy 100.0%" in said and "(e.g." not in fit_text(record)


def test_planted_linear_relation_is_recovered_and_logit_changes_carry_over(make_lm):
    """Target output embeddings E_t = E_s A: the map is exact, and at the context e_t(j) the target's logit
    changes equal the source's at e_s(j) (H maps one onto the other)."""
    source, target = make_lm("llama", hidden=16), make_lm("gpt2", hidden=24)  # 24 < 38 fitted anchors
    g = torch.Generator().manual_seed(0)
    A = torch.randn(16, 24, generator=g)
    with torch.no_grad():
        target.head.weight.copy_(source.head.weight.detach() @ A)
    s = random_switch(source, seed=2)
    t = transfer(s, source, target, method="ridge", **FEW)
    assert t.W.shape == (24, 24) and t.card["transfer"]["heldout_r2"] > 0.999 and t.card["transfer"]["heldout_top1"] == 1.0
    ids_s, ids_t, _ = shared_anchors(source, target)
    assert ids_s == ids_t  # same tokenizer
    E_s, E_t = source.head.weight.detach().double()[ids_s], target.head.weight.detach().double()[ids_t]
    target_change = E_t[:5] @ t.W.double().T @ E_t.T
    source_change = E_s[:5] @ s.W.double().T @ E_s.T
    assert torch.allclose(target_change, source_change, rtol=1e-3, atol=1e-3 * float(source_change.abs().max()))


def test_procrustes_recovers_a_planted_scaled_rotation(make_lm):
    """E_t = 3·E_s Q with orthonormal rows Q: Procrustes finds H = Q/3 exactly (the ridge map would too, but stretches elsewhere)."""
    source, target = make_lm("llama", hidden=16), make_lm("gpt2", hidden=24)
    Q = torch.linalg.qr(torch.randn(24, 16, generator=torch.Generator().manual_seed(1)))[0].T  # (16, 24), orthonormal rows
    with torch.no_grad():
        target.head.weight.copy_(3.0 * source.head.weight.detach() @ Q)
    t = transfer(random_switch(source, seed=2), source, target, **FEW)
    assert t.card["transfer"]["method"] == "procrustes" and t.card["transfer"]["heldout_r2"] > 0.999
    ids_s, ids_t, _ = shared_anchors(source, target)
    E_s, E_t = source.head.weight.detach().double()[ids_s], target.head.weight.detach().double()[ids_t]
    from lmswitch.core.transfer import fit_procrustes

    assert torch.allclose(fit_procrustes(E_s, E_t), Q.double() / 3, atol=1e-5)


def _foreign_tokenizer() -> PreTrainedTokenizerFast:
    words = [f"q{a}{b}x" for a in "abcdefgh" for b in "abcdefgh"][:61]
    vocab = {w: i for i, w in enumerate(["[UNK]", "[PAD]", "[EOS]", *words])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")
    assert tok.pad_token_id == PAD_ID
    return tok


def test_bad_transfers_are_refused_clearly(llama_lm, gpt2_lm):
    s = random_switch(llama_lm, seed=3)
    with pytest.raises(SwitchFileError, match="made for|hidden size"):
        transfer(s, gpt2_lm, llama_lm, **FEW)  # the switch is not for the stated source model
    foreign = build_lm("gpt2", tokenizer=_foreign_tokenizer())
    with pytest.raises(ValueError, match="share no readable word tokens"):
        transfer(s, llama_lm, foreign, **FEW)
    with pytest.raises(ValueError, match=r"only \d+ word tokens are shared"):
        transfer(s, llama_lm, gpt2_lm, min_anchors=1000)
    with pytest.raises(ValueError, match="anchors 30 is below min_anchors 200"):  # fewer used than a reliable map needs
        transfer(s, llama_lm, gpt2_lm, anchors=30)
    with pytest.raises(ValueError, match=r"anchors must be an integer ≥ 10 \(one in ten is held out"):  # (a crash before)
        transfer(s, llama_lm, gpt2_lm, anchors=5, min_anchors=5)
    assert transfer(s, llama_lm, gpt2_lm, anchors=10, min_anchors=10).card["transfer"]["heldout_anchors"] == 1
    with pytest.raises(ValueError, match="ridge"):
        transfer(s, llama_lm, gpt2_lm, method="ridge", ridge=float("nan"), **FEW)
    with pytest.raises(ValueError, match="method"):
        transfer(s, llama_lm, gpt2_lm, method="sgd", **FEW)


def test_the_strength_advice_says_what_the_probe_found(llama_lm):
    moved = transfer(random_switch(llama_lm, seed=1), llama_lm, llama_lm, **FEW)
    scaled = f"= {moved.card['transfer']['scaled_eps']:+g} (the same typical logit change)"
    assert "not probed, so it may read less well on T" in strength_advice(moved, "T") and scaled in strength_advice(moved, "T")
    probed = moved.card.calibrated(-4.0, 2.0, share=0.75)
    moved.card = probed
    assert strength_advice(moved, "T").startswith("Fluent ε on T: -4 … +2 (probed on its dev prompts), recommended ε +1.5;")
    moved.card = probed.calibrated(-4.0, 0.0)
    assert "no +ε read fluently, so none is recommended" in strength_advice(moved, "T")
    moved.card = moved.card.updated(fluent_eps=None, calibration_error="RuntimeError: out of memory")
    assert "the fluent-range probe failed (RuntimeError: out of memory)" in strength_advice(moved, "T")


def test_a_source_that_recommends_no_eps_passes_none_on(llama_lm):
    """A source probed with no fluent +ε recommends none: the transfer used to invent half its ε range (+5) and say "the
    source's +5"."""
    source = random_switch(llama_lm, seed=1)
    source.card = source.card.calibrated(-4.0, 0.0)
    moved = transfer(source, llama_lm, llama_lm, **FEW)
    t = moved.card.transfer
    assert moved.card.recommended_eps is None and t.source_recommended_eps is None and t.scaled_eps is None
    assert "Recommended ε none from the source, which recommends none (no +ε read fluently on it; its ε × " in strength_advice(moved, "T")
    from lmswitch.cli.commands import _card_eps

    with pytest.raises(ValueError, match="has no recommended ε in its card; give one: --switch moved.safetensors=EPS$"):
        _card_eps(moved, None, "moved.safetensors", fallback=5.0)  # the CLI's +5 would invent one again
    unprobed = transfer(random_switch(llama_lm, seed=1), llama_lm, llama_lm, **FEW).card.transfer  # half its widest ε
    assert unprobed.source_recommended_eps == 5.0 and unprobed.scaled_eps == round(5.0 * unprobed.eps_scale, 3)


def test_cli_transfer_writes_a_loadable_switch(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LMSWITCH_CACHE", str(tmp_path / "cache"))
    folders = {}
    for family, hidden in (("llama", 32), ("gpt2", 48)):
        lm = build_lm(family, hidden=hidden)
        folders[family] = tmp_path / family
        lm.model.save_pretrained(folders[family])
        lm.tokenizer.save_pretrained(folders[family])
    source = ls.load_model(str(folders["llama"]), dtype="float32")
    src_file = random_switch(source, seed=4, name="mood").save(tmp_path / "mood.safetensors")
    out = tmp_path / "moved.safetensors"
    code = main(["--model", str(folders["llama"]), "--dtype", "float32", "transfer", "--switch", str(src_file), "--to",
                 str(folders["gpt2"]), "--out", str(out), "--min-anchors", "20"])
    stdout = capsys.readouterr().out
    assert code == 0 and "held-out words R²" in stdout and "Fluent ε on" in stdout
    target = ls.load_model(str(folders["gpt2"]), dtype="float32")
    moved = ls.load_switch(out, target)
    assert moved.W.shape == (48, 48) and moved.card["transfer"]["source_switch"] == "mood"
    low, high = moved.card.fluent_eps  # probed on the target, and the recommended ε inside it
    assert f"Fluent ε on {target.name}: {moved.card.fluent_text}" in stdout and 0 < moved.card.recommended_eps <= high
    assert main(["--model", str(folders["llama"]), "--dtype", "float32", "transfer", "--switch", str(src_file), "--to",
                 str(folders["gpt2"]), "--out", str(out), "--min-anchors", "20", "--force", "--no-calibrate"]) == 0
    unprobed = ls.load_switch(out, target)
    assert "not probed, so it may read less well" in capsys.readouterr().out and unprobed.card.fluent_eps is None
    assert main(["--model", str(folders["llama"]), "--dtype", "float32", "--json", "transfer", "--switch", str(src_file), "--to",
                 str(folders["gpt2"]), "--out", str(out), "--min-anchors", "20", "--force", "--no-calibrate"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["out"] == str(out) and printed["card"]["transfer"]["source_switch"] == "mood"  # train's key for its file
    assert unprobed.card.recommended_eps == moved.card["transfer"]["scaled_eps"]  # the scaled ε, as the library gives it
    # generating with it at that ε says it was never probed here (it steered at the scaled ε without a word)
    assert main(["--model", str(folders["gpt2"]), "--dtype", "float32", "generate", "--prompt", "Hi", "--max-new-tokens", "3",
                 "--switch", str(out)]) == 0
    assert "was transferred and it was never probed on this model" in capsys.readouterr().err
    code = main(["--model", str(folders["gpt2"]), "--dtype", "float32", "transfer", "--switch", str(src_file), "--to",
                 str(folders["llama"]), "--out", str(tmp_path / "x.safetensors")])
    assert code != 0 and "made for" in capsys.readouterr().err  # the switch is not for the stated source


# --- the real second model -------------------------------------------------------------------


@pytest.fixture(scope="module")
def gemma():
    with all_threads():
        return ls.load_model("gemma3-270m")


@pytest.mark.real_model
def test_a_switch_transferred_to_gemma_is_probed_there_where_its_scaled_eps_reads_worse(lm, gemma):
    """The shipped sentiment switch of the embedded model, mapped to Gemma-3-270M, makes Gemma more positive. The ε the
    transfer scales from the source (+3.88) reads at over 1.5× Gemma's unsteered perplexity on test prompts; the probed
    card recommends an ε inside Gemma's fluent range, which keeps that rule."""
    moved = transfer(ls.load_switch(shipped_switch_path("sentiment"), lm), lm, gemma)
    t = moved.card["transfer"]
    assert t["anchors"] >= 3000 and t["heldout_top1"] > 0.8  # the two vocabularies share thousands of words
    with all_threads():
        moved.card = ls.calibrated_card(gemma, moved)
        r, scaled = moved.card.recommended_eps, moved.card["transfer"]["scaled_eps"]
        assert 0 < r <= moved.card.fluent_eps[1] < scaled
        protocol = replace(PROTOCOL, samples=2, max_new_tokens=25)
        base, at_scaled, at_r = evaluate_settings(gemma, [[], [(moved, scaled)], [(moved, r)]],
                                                  load_prompts("neutral", 8, split="test"), protocol)
    ratios = at_scaled.perplexity / base.perplexity, at_r.perplexity / base.perplexity
    assert ratios[0] > 1.5 >= ratios[1], ratios
    assert at_r.positive_share > base.positive_share, (at_r.positive_share, base.positive_share)


@pytest.mark.parametrize("family", ["llama", *SCALED_FAMILIES])
def test_a_switchs_strength_is_the_spread_of_the_models_own_logit_change(make_lm, monkeypatch, family):
    """Transfer matches strengths by the typical logit change of ``W``: the model's own, after-head scale included."""
    from lmswitch.core import transfer as module

    lm = make_lm(family, init=0.2)
    C = torch.randn(6, lm.hidden_size, generator=torch.Generator().manual_seed(5))
    monkeypatch.setattr(module, "reference_hidden", lambda _lm: C)
    W = random_switch(lm, seed=3).W
    with torch.no_grad():
        change = lm.logits_from_hidden(C + C @ W.T) - lm.logits_from_hidden(C)
    assert module._strength(lm, W) == pytest.approx(float(change.double().std(dim=1).mean()), rel=1e-4)
