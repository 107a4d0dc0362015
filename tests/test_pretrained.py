"""Shipped switches: deterministic rebuilds (tiny model), files that match the embedded model, and real effects."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import tiny_style_data

from lmswitch.core.options import SAMPLING
from lmswitch.core.switch import load_switch
from lmswitch.harness.evaluate import Protocol, evaluate_sweep
from lmswitch.harness.options import load_prompts
from lmswitch.harness.pretrained import CALIBRATION, PRETRAINED_DIR, SPECS, build_pretrained, get_spec, load_pretrained


def test_build_is_deterministic_and_cards_are_complete(tmp_path, llama_lm, monkeypatch):
    tiny_style_data(tmp_path / "data")
    # a tiny model trains in a few steps; keep each spec's other settings
    monkeypatch.setattr("lmswitch.harness.pretrained.SPECS", tuple(replace(s, train=replace(s.train, steps=20)) for s in SPECS))
    messages = []
    monkeypatch.setattr("lmswitch.harness.pretrained.CALIBRATION", replace(CALIBRATION, prompts=2, samples=1, max_new_tokens=4, strengths=(4.0, 8.0)))
    first = build_pretrained(llama_lm, tmp_path / "a", names=["sentiment", "detox"], data_dir=tmp_path / "data", eval_prompts=0, log=messages.append,
                             fluent=False)
    second = build_pretrained(llama_lm, tmp_path / "b", names=["sentiment", "detox"], data_dir=tmp_path / "data", eval_prompts=0)
    assert [p.name for p in first] == ["sentiment.safetensors", "detox.safetensors"]
    for a, b in zip(first, second, strict=True):
        sa, sb = load_switch(a, llama_lm), load_switch(b, llama_lm)
        assert torch.equal(sa.W, sb.W)  # same data and seed → the same switch, bit for bit
    detox = load_switch(first[1], llama_lm)
    assert (detox.positive_label, detox.negative_label) == ("non-toxic", "toxic")  # positive ε = less toxic
    card = detox.card
    assert card["data"]["train_pairs"] == 18 and card["data"]["heldout_pairs"] == 2
    assert card["data"]["files"] == ["lmswitch/data/styles/toxicity/civil.txt", "lmswitch/data/styles/toxicity/toxic.txt"]
    assert card["steps"] <= 20 and card["lr"] == SPECS[1].train.lr and card["rank"] == SPECS[1].train.rank  # the spec's config
    assert card["recommended_eps"] == get_spec("detox").recommended_eps
    assert 0 <= card["heldout_meter_accuracy"] <= 1 and card["heldout_gain"] is not None
    assert any("saved" in m for m in messages)
    calibrated = load_switch(second[1], llama_lm).card  # the default build probes the fluent range on dev prompts
    low, high = calibrated.fluent_eps
    assert low in (0.0, -4.0, -8.0) and high in (0.0, 4.0, 8.0)
    assert calibrated.recommended_eps == (high or -low or get_spec("detox").recommended_eps)
    with pytest.raises(ValueError, match="no shipped switch"):
        build_pretrained(llama_lm, tmp_path / "c", names=["poetry"], data_dir=tmp_path / "data")


def test_recalibrate_keeps_the_weights_and_measures_the_card_again(tmp_path, llama_lm, monkeypatch):
    tiny_style_data(tmp_path / "data")
    monkeypatch.setattr("lmswitch.harness.pretrained.SPECS", tuple(replace(s, train=replace(s.train, steps=5)) for s in SPECS))
    monkeypatch.setattr("lmswitch.harness.pretrained.CALIBRATION", replace(CALIBRATION, prompts=2, samples=1, max_new_tokens=4, strengths=(4.0, 8.0)))
    [path] = build_pretrained(llama_lm, tmp_path, names=["formality"], data_dir=tmp_path / "data", eval_prompts=0, fluent=False)
    before = load_switch(path, llama_lm)
    assert before.card.fluent_eps is None
    [again] = build_pretrained(llama_lm, tmp_path, names=["formality"], eval_prompts=2, samples=1, recalibrate=True)
    after = load_switch(again, llama_lm)
    assert torch.equal(before.W, after.W)  # the weights stay; only the card is measured again
    low, high = after.card.fluent_eps
    r = after.card.recommended_eps
    assert low in (0.0, -4.0, -8.0) and high in (0.0, 4.0, 8.0) and r == (high or -low or get_spec("formality").recommended_eps)
    assert set(after.card["evaluation"]["by_eps"]) == {f"{-r:+g}", "+0", f"{r:+g}"} and after.eps_range == (-2 * r, 2 * r)
    assert after.card["steps"] == before.card["steps"] and "recalibrated_with" in after.card  # the training record is kept
    assert "fluent ε" in (tmp_path / "README.md").read_text(encoding="utf-8")
    with pytest.raises(FileNotFoundError, match=f"build it first .*--only formality --out {tmp_path / 'empty'}"):
        build_pretrained(llama_lm, tmp_path / "empty", names=["formality"], recalibrate=True)


# --- the shipped files and the embedded model -------------------------------------------------------



def test_the_index_lists_the_shipped_switches_only_and_keeps_a_readme_that_is_not_one(tmp_path, llama_lm):
    from conftest import random_switch
    from safetensors.torch import save_file

    from lmswitch.harness.pretrained import INDEX_TITLE, write_index

    random_switch(llama_lm, seed=0, name="sentiment").save(tmp_path / "sentiment.safetensors")
    save_file({"w": torch.zeros(2)}, str(tmp_path / "adapter_model.safetensors"))  # an export beside them: not read
    random_switch(llama_lm, seed=1, name="mine").save(tmp_path / "mine.safetensors")
    index = write_index(tmp_path)
    text = index.read_text(encoding="utf-8")
    assert text.startswith(INDEX_TITLE) and "`sentiment.safetensors`" in text and "mine" not in text and "adapter" not in text
    index.write_text("# my notes\n")
    assert write_index(tmp_path) is None and index.read_text() == "# my notes\n"


@pytest.mark.real_model
def test_shipped_files_match_the_embedded_model(lm):
    switches = load_pretrained(lm)
    assert set(switches) == {s.name for s in SPECS}
    for spec in SPECS:
        s = switches[spec.name]
        assert s.model_fingerprint == lm.fingerprint and s.dim == lm.hidden_size
        card = s.card
        for key in ("data", "steps", "heldout_gain", "recommended_eps", "recommended_eps_range", "heldout_meter_accuracy", "evaluation"):
            assert key in card, f"{spec.name} card lacks {key}"
        root = PRETRAINED_DIR.parents[2]  # the data it names is in this checkout (two cards named assets/data/, long gone)
        assert all((root / f).is_file() for f in card["data"]["files"]), card["data"]["files"]
        assert card["heldout_gain"] > 0, f"{spec.name} does not explain held-out text better than the base model"
        assert card["heldout_meter_accuracy"] >= 0.75
        r = card["recommended_eps"]
        assert set(card["evaluation"]["by_eps"]) == {f"{-r:+g}", "+0", f"{r:+g}"}
        low, high = card.fluent_eps  # calibrated on the dev prompts; the recommended strength lies inside it
        assert low <= 0 < r <= high
        # at the length the app and the command line write: a tic that shows at 40 tokens passed at 25 (detox's ";")
        assert card["fluent_eps_probe"] == CALIBRATION.record | {"prompt_set": spec.prompts}
        assert card["fluent_eps_probe"]["max_new_tokens"] == SAMPLING.max_new_tokens
    assert (PRETRAINED_DIR / "README.md").is_file()


# a graded version of each switch's metric (shares move in coarse steps), and the least change required
# between the ends of the fluent range (or between unsteered and +ε where the −ε side has no fluent setting)
GRADED = {"positive_share": ("mean_sentiment", 0.15), "toxicity_prob": ("avg_max_toxicity", 0.05), "formal_share": ("formal_share", 0.3)}


@pytest.mark.real_model
@pytest.mark.usefixtures("real_model_threads")
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_each_shipped_switch_moves_its_own_scorer_inside_its_fluent_range(lm, spec):
    """At the ends of the card's calibrated fluent range (the app's default slider), on prompts and seeds the card
    did not use, the switch's scorer moves the stated way, step by step, and no sample loops."""
    switch = load_pretrained(lm)[spec.name]
    low, high = switch.card.fluent_eps
    prompts = load_prompts(spec.prompts, split="test")  # 50 prompts the calibration (dev) did not use; 100 samples per ε:
    eps = [e for e in (low, 0.0, high) if e != 0] + [0.0]  # sentiment's −6 end is weak, 36 samples did not separate it
    evals = dict(zip(eps, evaluate_sweep(lm, switch, eps, prompts, Protocol(samples=2, max_new_tokens=20, seed=100)), strict=True))
    metric, spread = GRADED[spec.metric]
    values = [getattr(evals[e], metric) * spec.direction for e in sorted(evals)]
    assert values == sorted(values) and len(set(values)) == len(values), (spec.name, metric, sorted(evals), values)
    assert values[-1] - values[0] >= spread, (spec.name, metric, sorted(evals), values)
    # at the very ends of the range a stray looping sample is sampling noise (the old recommended ε looped in 56% of samples);
    # the fluency rules themselves are checked on the test prompts by `eval --frontier … --sliders` (EVALUATION.md)
    assert all(ev.repetition <= 1 / 12 for ev in evals.values()), {e: ev.repetition for e, ev in evals.items()}
    # nor does one word come back three times in a sample much more often than unsteered (the formality switch's old −6
    # end sprinkled "'s" and emoji: +13 points on the test prompts at 25 tokens)
    rise = {e: ev.sprinkle - evals[0.0].sprinkle for e, ev in evals.items()}
    assert all(r <= 0.08 for r in rise.values()), rise
