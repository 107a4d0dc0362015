"""The fluent frontier: fluency rules, dev/test split, choosing on dev and reporting on test."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import random_switch

from lmswitch.harness.evaluate import PICTOGRAPH, PROTOCOL, Evaluation, loops, repetition_share, sprinkle_share, sprinkled
from lmswitch.harness.frontier import FluencyRules, Frontier, FrontierSpec, _best, markdown, run_frontier, target_checks
from lmswitch.harness.options import load_prompts


def evaluation(**kw) -> Evaluation:
    base = dict(setting={}, prompts=1, samples=1, positive_share=0.5, negative_share=0.2, mean_sentiment=0.0, avg_max_toxicity=0.1,
                toxicity_prob=0.1, mean_toxicity=0.1, perplexity=10.0, dist1=0.9, dist2=0.9, dist3=1.0, formal_share=0.5,
                repetition=0.0, seconds=0.0, sprinkle=0.0)
    return Evaluation(**{**base, **kw})


def test_loops_and_repetition_share():
    assert loops("great great great") and loops("Cramped, cramped, CRAMPED!") and not loops("great great. fine great")
    assert repetition_share(["a a a", "a b c", "", "x y x y"]) == 0.25 and repetition_share([]) == 0.0


def test_a_sprinkled_token_is_a_content_token_or_uncommon_mark_written_three_times():
    assert sprinkled("a mission's 7-day-long expedition's test in 24 hours's") == ["'s"]
    assert sprinkled("Dogs, dogs and more DOGS; cats, cats") == ["dogs"]
    assert sprinkled("My weekend was a huge success! 🌼️🌺 🌍 and more") == [PICTOGRAPH]  # different emoji are one thing strung
    assert sprinkled("it's fine, that's it, he's here") == []  # contractions, not possessives
    assert sprinkled("I've seen, I've heard, I've done; don't, don't, DON'T") == []  # contractions are function words
    assert sprinkled("you know you can, you will, and the the the") == []  # stop words
    assert sprinkled("I I I a a a 3 3 3 ... !!! Why? How? When? - -- —, \"'") == []  # single letters, digits, prose's marks
    assert sprinkled("so; but to do so would be immoral; so imagine; would they") == [";"]  # a mark prose rarely strings
    # HTML tags are markup, not words or marks of the text (Gemma wraps words in <em> and <strong>)
    assert sprinkled("<em>Sun</em> and <strong>sea</strong>, <h3>Tips</h3> and <a href='x'>one</a>") == []
    assert sprinkled("<em>Sun</em>; sun; <b>SUN</b>; sand") == ["sun", ";"]
    assert sprinkle_share(["x's y's z's", "a calm day", "", "rain, rain and rain"]) == 0.5 and sprinkle_share([]) == 0.0


def test_fluency_rules_see_a_sprinkled_word_beyond_the_unsteered_rate():
    rules, base = FluencyRules(), evaluation(prompts=50, samples=2, sprinkle=0.1)
    assert rules.problems(evaluation(prompts=50, samples=2, sprinkle=0.14), base) == []  # +4 points: within the rule
    assert rules.problems(evaluation(prompts=50, samples=2, sprinkle=0.16), base) == [
        "16% of samples sprinkle one word or mark (unsteered 10%; at most +5 points)"]
    small = evaluation(prompts=4, samples=2)  # the app's probe: 8 samples, one of them is noise, two are not
    assert rules.problems(evaluation(prompts=4, samples=2, sprinkle=0.125), small) == []
    assert len(rules.problems(evaluation(prompts=4, samples=2, sprinkle=0.25), small)) == 1


def test_fluency_rules_name_what_breaks():
    rules, base = FluencyRules(), evaluation()
    assert rules.problems(evaluation(perplexity=15.0, dist3=0.95), base) == []
    problems = rules.problems(evaluation(perplexity=15.1, dist3=0.94, repetition=0.03), base)
    assert len(problems) == 3 and "1.51×" in problems[0] and "Dist-3" in problems[1] and "3% of samples loop" in problems[2]


def test_the_strongest_fluent_setting_wins_and_repetition_disqualifies():
    spec = FrontierSpec("s", "neutral", "positive_share", (+1,), +1)
    base = evaluation()
    dev = [(4.0, evaluation(positive_share=0.7)), (8.0, evaluation(positive_share=0.8)), (12.0, evaluation(positive_share=0.95, repetition=0.3))]
    assert _best(spec, +1, dev, base) == 8.0  # 95% reached through loops does not count
    assert _best(spec, +1, [(12.0, evaluation(perplexity=99.0))], base) is None
    down = FrontierSpec("s", "neutral", "positive_share", (-1,), +1)
    assert _best(down, -1, [(-4.0, evaluation(positive_share=0.3)), (-8.0, evaluation(positive_share=0.1))], base) == -8.0


def test_prompt_sets_split_into_disjoint_dev_and_test():
    every = load_prompts("neutral")
    dev, test = load_prompts("neutral", split="dev"), load_prompts("neutral", split="test")
    assert dev == every[0::2] and test == every[1::2] and not set(dev) & set(test)
    assert load_prompts("neutral", 5, split="test") == test[:5]
    with pytest.raises(ValueError, match="split must be one of dev, test"):
        load_prompts("neutral", split="train")


def test_frontier_chooses_on_dev_and_reports_on_test(llama_lm, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(["the happy one was", "she was kind and", "the sad one was", "he was cruel and"] * 2))
    switch = random_switch(llama_lm, seed=3, scale=30.0, name="s")
    spec = FrontierSpec("s", str(prompts), "positive_share", (+1, -1), +1, FluencyRules(perplexity_ratio=100.0, dist3_ratio=0.0,
                        max_repetition=1.0, max_sprinkle_rise=1.0), strengths=(1.0, 3.0))
    protocol = replace(PROTOCOL, samples=1, max_new_tokens=4, generation_budget=0.5)  # (eval --frontier --generation-budget)
    frontier = run_frontier(llama_lm, switch, spec, methods=("switch", "switch+adaptive"), protocol=protocol)
    assert frontier.dev_prompts == frontier.test_prompts == 4 and frontier.protocol.generation_budget == 0.5
    plain = run_frontier(llama_lm, switch, spec, methods=("switch",), protocol=replace(protocol, generation_budget=None))
    assert [t.text for t in plain.rows[0].test.texts] == [t.text for t in frontier.rows[0].test.texts]  # the budget: adaptive rows' only
    assert frontier.protocol.score_from_decode  # every row decoded by the unchanged body: scored from its decode
    assert [(r.method, r.side) for r in frontier.rows] == [("switch", 1), ("switch", -1), ("switch+adaptive", 1), ("switch+adaptive", -1)]
    for row in frontier.rows:
        assert row.choice in [row.side * s for s in spec.strengths] and row.test is not None and row.test.prompts == 4
        assert [t.prompt for t in row.test.texts] == load_prompts(str(prompts), split="test")  # reported on test prompts only
    data = frontier.to_dict()
    assert data["rows"][0]["test"]["strength"] == frontier.rows[0].choice and "perplexity_ratio" in data["rows"][0]["dev"][0]
    assert "| switch | + |" in markdown(frontier) and target_checks(frontier) == []  # no targets for an unnamed switch


def test_prompting_needs_a_chat_template(llama_lm, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("the happy one\nthe sad one\n")
    spec = FrontierSpec("s", str(prompts), "positive_share", (+1,), +1)
    with pytest.raises(ValueError, match="no chat template"):
        run_frontier(llama_lm, random_switch(llama_lm, seed=1), spec, methods=("prompting",), protocol=replace(PROTOCOL, samples=1, max_new_tokens=2))
    with pytest.raises(ValueError, match="unknown method"):
        run_frontier(llama_lm, random_switch(llama_lm, seed=1), spec, methods=("magic",))


class _FailingAt:
    """Fluency rules that fail exactly the given ε (evaluations are faked as their ε)."""

    def __init__(self, failing: set[float]) -> None:
        self.failing = failing

    def problems(self, ev: float, base: float) -> list[str]:
        assert base == 0.0
        return ["breaks"] if ev in self.failing else []


class _Model:
    """A stand-in for the model of a faked calibration (it keys the probe's kept unsteered rows)."""


@pytest.fixture
def probed(monkeypatch) -> list[float]:
    """Calibration with each evaluation faked as its ε (no model): the ε probed, in order, the unsteered rows as 0."""
    from lmswitch.harness import frontier

    seen: list[float] = []

    def fake_evaluate(lm, settings, prompts, protocol):
        eps = [s[0][1] if s else 0.0 for s in settings]
        seen.extend(eps)
        return eps

    monkeypatch.setattr(frontier, "evaluate_settings", fake_evaluate)
    return seen


@pytest.mark.parametrize("strengths", [(2.0,), (2.0, 4.0, 6.0), (2.0, 4.0, 6.0, 9.0, 12.0, 16.0)])
def test_calibration_walks_each_side_to_its_first_failure_whatever_the_batching(probed, strengths):
    """Every pass/fail pattern of each side: the fluent limit is the last strength before the side's first failure (a
    later pass is not trusted), and a side is not probed past its failure."""
    import itertools

    from lmswitch.harness import frontier

    patterns = list(itertools.product([False, True], repeat=len(strengths)))
    for neg_fails, pos_fails in itertools.product(patterns, patterns):
        failing = {-s for s, f in zip(strengths, neg_fails, strict=True) if f} | {s for s, f in zip(strengths, pos_fails, strict=True) if f}

        probed.clear()
        got = frontier.calibrate(_Model(), "switch", frontier.Probe(strengths=strengths, rules=_FailingAt(failing), inner=()))
        expected = []
        for side, fails in ((-1, neg_fails), (+1, pos_fails)):
            first = next((k for k, f in enumerate(fails) if f), len(strengths))
            expected.append(side * strengths[first - 1] if first else 0.0)
            limit = min(len(strengths), (first // frontier.STEPS_PER_CALL + 1) * frontier.STEPS_PER_CALL)
            assert {abs(e) for e in probed if e * side > 0} <= set(strengths[:limit])  # not probed past the failure's call
        assert got == tuple(expected), (neg_fails, pos_fails)


def test_a_side_that_breaks_at_the_first_strength_is_probed_inside_it(probed):
    """A strong switch can be fluent at ε 1 and not at 2: that side is walked through the inner strengths instead of
    getting no slider, with the outer walk's rule (the last strength before the first failure)."""
    from lmswitch.harness import frontier

    probe, model = frontier.Probe(strengths=(2.0, 4.0), inner=(0.5, 1.0)), _Model()
    assert frontier.calibrate(model, "switch", replace(probe, rules=_FailingAt({-2.0, -1.0, 4.0}))) == (-0.5, 2.0)
    assert not {0.5, 1.0} & set(probed)  # the side that passed 2 is not probed inside it
    assert frontier.calibrate(model, "switch", replace(probe, rules=_FailingAt({-2.0, -0.5, 2.0}))) == (0.0, 1.0)


def test_the_unsteered_rows_are_sampled_once_per_model_and_probe(probed):
    """Every switch a model probes compares with the same unsteered rows (same prompts and seeds): they are sampled in
    the first probe's first call and kept for the model; another model, or other prompts or lengths, samples its own."""
    from lmswitch.harness import frontier

    probe, model = frontier.Probe(strengths=(2.0, 4.0), rules=_FailingAt(set())), _Model()
    for _ in range(3):
        assert frontier.calibrate(model, "switch", probe) == (-4.0, 4.0)
    assert probed.count(0.0) == 1
    frontier.calibrate(model, "switch", replace(probe, max_new_tokens=20))
    frontier.calibrate(model, "switch", replace(probe, prompts=3))
    frontier.calibrate(_Model(), "switch", probe)
    assert probed.count(0.0) == 4


def test_calibration_stores_the_fluent_range_in_the_card(llama_lm):
    from lmswitch.core.switch import Switch
    from lmswitch.harness.frontier import Probe, calibrate, calibrated_card

    probe = Probe(prompts=2, samples=1, max_new_tokens=6, strengths=(2.0, 8.0))
    zero = Switch(W=torch.zeros(llama_lm.hidden_size, llama_lm.hidden_size), name="zero", model_fingerprint=llama_lm.fingerprint)
    assert calibrate(llama_lm, zero, probe) == (-8.0, 8.0)  # no change at all: every probed ε is fluent
    wild = random_switch(llama_lm, seed=1, scale=3000.0, name="wild")
    strict = replace(probe, rules=FluencyRules(perplexity_ratio=1.01, dist3_ratio=1.0, max_repetition=0.0))
    low, high = calibrate(llama_lm, wild, strict)
    assert low <= 0 <= high and (low, high) != (-8.0, 8.0)  # a wild switch breaks the rules somewhere
    gentle = random_switch(llama_lm, seed=2, scale=0.01, name="gentle")  # steers, too little to break a rule
    card = calibrated_card(llama_lm, gentle, probe)
    assert card.fluent_eps == (-8.0, 8.0) and card.recommended_eps == 6.0  # recommended from inside the probe's limit (3/4)
    assert card["fluent_eps_probe"] == {"prompt_set": "neutral", "split": "dev", "prompts": 2, "samples": 1, "max_new_tokens": 6}
    assert calibrated_card(llama_lm, gentle, replace(probe, recommend=1.0)).recommended_eps == 8.0
    with pytest.raises(ValueError, match="'zero' is all zeros"):  # a card's range for it would read as a switch that steers
        calibrated_card(llama_lm, zero, probe)


def test_a_transferred_switch_is_probed_on_more_prompts_than_a_trained_one(llama_lm, monkeypatch):
    from lmswitch.core.transfer import transfer
    from lmswitch.harness import frontier

    used = []  # the probe each call gets (calibrate itself is tested above, for real)
    monkeypatch.setattr(frontier, "calibrate", lambda lm, switch, probe: used.append(probe) or (-2.0, 2.0))
    trained = random_switch(llama_lm, seed=2)
    moved = transfer(trained, llama_lm, llama_lm, min_anchors=20)
    assert frontier.calibrated_card(llama_lm, trained).recommended_eps == 1.5
    assert frontier.calibrated_card(llama_lm, moved).fluent_eps == (-2.0, 2.0)
    assert used == [frontier.Probe(), frontier.TRANSFER_PROBE] and frontier.TRANSFER_PROBE.prompts > frontier.Probe().prompts
    frontier.calibrated_card(llama_lm, moved, frontier.Probe())  # a probe given is the probe used
    assert used[-1] == frontier.Probe()


def test_activation_addition_baseline_runs_on_the_switch_training_pairs(llama_lm, tmp_path):
    from lmswitch.harness.frontier import CAA_STRENGTHS

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(["the happy one was", "she was kind and", "the sad one was", "he was cruel and"]))
    switch = random_switch(llama_lm, seed=3, name="sentiment")  # named like the shipped switch: CAA fits on its dataset
    spec = replace(FrontierSpec.for_switch("sentiment"), prompts=str(prompts), rules=FluencyRules(perplexity_ratio=1e9, dist3_ratio=0.0,
                                                                                                  max_repetition=1.0, max_sprinkle_rise=1.0))
    frontier = run_frontier(llama_lm, switch, spec, methods=("caa",), protocol=replace(PROTOCOL, samples=1, max_new_tokens=4))
    assert [(r.method, r.side) for r in frontier.rows] == [("caa", 1), ("caa", -1)]
    assert not frontier.protocol.score_from_decode  # a body changed while sampling: every row, unsteered too, by a body pass
    for row in frontier.rows:
        assert [s for s, _ in row.dev] == [row.side * a for a in CAA_STRENGTHS] and row.test is not None
    assert [t.prompt for t in frontier.rows[0].test.texts] == load_prompts(str(prompts), split="test")


def test_slider_check_scores_every_whole_eps_of_the_default_range_on_test_prompts(llama_lm, tmp_path):
    from lmswitch.harness.frontier import check_sliders

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(["the happy one was", "she was kind and", "the sad one was", "he was cruel and"]))
    switch = random_switch(llama_lm, seed=3, scale=30.0, name="s")
    switch.card = switch.card.updated(fluent_eps=[-2.5, 1.5])
    assert switch.slider_range() == (-2.0, 1.0) and switch.slider_range(wide=True) == (-4.0, 4.0)  # whole ε inside the range
    spec = FrontierSpec("s", str(prompts), "positive_share", (+1, -1), +1, FluencyRules(max_repetition=0.0))
    check = check_sliders(llama_lm, switch, spec, replace(PROTOCOL, samples=1, max_new_tokens=12))
    assert [eps for eps, _ in check.points] == [-2.0, -1.0, 1.0]  # 0 is the base model itself
    assert all([t.prompt for t in ev.texts] == load_prompts(str(prompts), split="test") for _, ev in check.points)
    looping = [eps for eps, ev in check.points if any(loops(t.text) for t in ev.texts)]
    assert check.looping() == looping and check.to_dict()["looping"] == looping
    assert ("no position loops" in check.markdown()) == (not looping)
    switch.card = switch.card.updated(fluent_eps=None)
    switch.eps_range = (-14.2, 14.2)
    assert switch.slider_range() == (-15.0, 15.0)  # uncalibrated: the recommended range, at least ±10


def test_targets_cover_only_the_sides_that_were_run():
    spec = replace(FrontierSpec.for_switch("sentiment"), sides=(+1,))
    checks = target_checks(Frontier(spec, PROTOCOL, 0, 0, []))
    assert [c.target for c in checks] == ["sentiment: ≥ 90% positive at +ε, fluent"]  # −ε was not run: not a miss
    both = target_checks(Frontier(FrontierSpec.for_switch("sentiment"), PROTOCOL, 0, 0, []))
    assert len(both) == 2 and not any(c.met for c in both)
    assert both[0].line().startswith("MISSED  sentiment: ≥ 90% positive") and both[0].bullet().startswith("- **missed** sentiment")
