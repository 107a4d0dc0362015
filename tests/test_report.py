"""EVALUATION.md from harness/report.py on tiny models: the full report (targets, checks, frontier, figures, JSON)
and the transfer section (verdict consistent with its numbers, replaced on a rerun)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from conftest import random_switch, tiny_style_data

from lmswitch.core.card import Card
from lmswitch.harness.pretrained import SPECS, build_pretrained


@pytest.mark.browser  # writes PNG figures (rendered in chromium)
def test_report_end_to_end_on_a_tiny_model(tmp_path, llama_lm, monkeypatch):
    """The report runs every section, writes figures, JSON and a targets table whose verdicts match its numbers."""
    import json

    from lmswitch.harness.report import QUICK, run_report

    tiny_style_data(tmp_path / "data")
    monkeypatch.setattr("lmswitch.harness.pretrained.SPECS", tuple(replace(s, train=replace(s.train, steps=10)) for s in SPECS))
    build_pretrained(llama_lm, tmp_path / "switches", data_dir=tmp_path / "data", eval_prompts=0, fluent=False)  # the calibrated build: test_pretrained
    assert (tmp_path / "switches" / "README.md").read_text(encoding="utf-8").count(".safetensors`") == 3
    report = run_report(llama_lm, tmp_path / "EVALUATION.md", figures=tmp_path / "fig", suite=QUICK, switch_dir=tmp_path / "switches",
                        command="python -m lmswitch eval --report EVALUATION.md --quick")
    results = report.to_dict()
    text = (tmp_path / "EVALUATION.md").read_text(encoding="utf-8")
    assert "python -m lmswitch eval --report EVALUATION.md --quick" in text
    assert len(report.checks) == 6 and [c.to_dict() for c in report.checks] == results["checks"]
    for check in results["checks"]:
        assert f"| {check['target']} | {check['measured']} | {'**met**' if check['met'] else '**missed**'} |" in text
    assert list(results) == ["suite", "protocol", "model", "fingerprint", "sentiment", "detox", "formality", "efficiency", "grid",
                             "checks", "frontier", "seconds"]
    r = SPECS[0].recommended_eps  # the sweep adds ±the recommended ε, which the checks read
    assert [e["setting"].get("sentiment", 0.0) for e in results["sentiment"]] == sorted({*QUICK.sentiment_eps, -r, r})
    assert len(results["grid"]) == len(QUICK.grid_eps)
    assert len(results["frontier"]) == 5 and set(results["efficiency"]) == {"pairs", "card", "evals"}
    for png in ("sentiment_sweep.png", "detox_sweep.png", "formality_sweep.png", "composition.png"):
        assert (tmp_path / "fig" / png).read_bytes()[:4] == b"\x89PNG"
    saved = json.loads((tmp_path / "fig" / "results.json").read_text(encoding="utf-8"))
    assert saved["checks"] == results["checks"]
    with pytest.raises(ValueError, match="build-pretrained"):
        run_report(llama_lm, tmp_path / "E2.md", suite=QUICK, switch_dir=tmp_path / "data")


@pytest.mark.slow  # about 9 s: the full transfer report, twice
def test_transfer_report_section_is_written_and_replaced(tmp_path, llama_lm, make_lm):
    """The EVALUATION.md section on tiny models: every switch probed on dev before it is scored on test, along its
    range (the transferred one also at its scaled ε), the verdict from the dev-chosen ends; rerunning replaces it."""
    from lmswitch.harness.frontier import Probe
    from lmswitch.harness.transfer_report import TransferSuite, eps_key, run_transfer_report, summary

    target = make_lm("gpt2", hidden=24)
    switches = tmp_path / "switches"
    switches.mkdir()
    random_switch(llama_lm, seed=5, name="sentiment").save(switches / "sentiment.safetensors")  # no fluent range on its card
    out = tmp_path / "EVAL.md"
    out.write_text("# Evaluation\n\n## Earlier section\n\nkept\n")
    tiny_style_data(tmp_path / "data")  # the trained-on-target reference learns from these, not the shipped 1,491 pairs
    suite = TransferSuite(prompts=2, samples=1, probe=Probe(prompts=2, samples=1, max_new_tokens=4), min_anchors=20)
    with torch.random.fork_rng():
        report = run_transfer_report(llama_lm, target, out, suite=suite, switch_dir=switches, data_dir=tmp_path / "data")
        run_transfer_report(llama_lm, target, out, suite=suite, switch_dir=switches, data_dir=tmp_path / "data")
    text = out.read_text()
    assert text.count("## Transfer: the sentiment switch on") == 1 and "## Earlier section\n\nkept" in text
    data = report.cards["direct"]["data"]
    assert data["train_pairs"] + data["heldout_pairs"] == 20  # the reference trained on data_dir's pairs
    for name, sweep in (("source", report.source), ("transferred", report.transferred), ("direct", report.direct)):
        card = report.cards[name]
        assert card.fluent_eps is not None and sweep.fluent_eps == card.fluent_eps  # probed before it was scored
        scored = [sweep.eps(ev) for ev in sweep.evals]
        assert scored == sorted(set(scored)) and {0.0, *card.fluent_eps} <= set(scored)
        assert sweep.move.low_eps == card.fluent_eps[0] and sweep.move.high_eps == card.fluent_eps[1]
    assert eps_key(report.cards["transferred"]["transfer"]["scaled_eps"]) in [report.transferred.eps(ev) for ev in report.transferred.evals]
    assert ("**met**" in text) == report.met and summary(report).startswith("met " if report.met else "MISSED")
    saved = json.loads((tmp_path / "docs" / "evaluation" / f"transfer-{target.name}.json").read_text())
    assert saved["met"] == report.met and saved["cards"]["transferred"]["fluent_eps"] == list(report.cards["transferred"].fluent_eps)


def _ev(eps: float, share: float, **kw):
    from lmswitch.harness.evaluate import Evaluation

    base = dict(prompts=1, samples=1, negative_share=0.2, mean_sentiment=0.0, avg_max_toxicity=0.1, toxicity_prob=0.1,
                mean_toxicity=0.1, perplexity=10.0, dist1=0.9, dist2=0.9, dist3=1.0, formal_share=0.5, repetition=0.0, seconds=0.0, sprinkle=0.0)
    return Evaluation(setting={"s": eps}, positive_share=share, **{**base, **kw})


def _report(source, moved):
    from lmswitch.harness.evaluate import PROTOCOL
    from lmswitch.harness.transfer_report import ProbedSweep, TransferReport, TransferSuite

    def sweep(evals, ends):
        return ProbedSweep("s", evals, Card.from_dict({"fluent_eps": ends}))

    return TransferReport("a", "b", TransferSuite(), PROTOCOL, "", sweep(*source), sweep(*moved), sweep(*moved), 0.0)


def test_the_transfer_verdict_is_taken_at_the_ends_chosen_on_dev_and_a_looping_end_is_a_miss():
    source = ([_ev(-4, 0.1), _ev(0, 0.5), _ev(4, 0.9)], (-4.0, 4.0))  # moves the positive share by 0.8
    kept = ([_ev(-2, 0.3), _ev(0, 0.5), _ev(2, 0.8), _ev(3.882, 1.0, repetition=0.3)], (-2.0, 2.0))
    report = _report(source, kept)
    assert report.transferred.move.shift == pytest.approx(0.5) and report.met  # 0.5 ≥ half of 0.8; the looping +3.882 is not an end
    assert report.transferred.broken() == ["ε +3.882 (30% of samples loop)"]
    looping_end = ([_ev(-2, 0.3), _ev(0, 0.5), _ev(2, 0.9, repetition=0.05)], (-2.0, 2.0))
    report = _report(source, looping_end)
    assert not report.met and report.transferred.move.problems == ["ε +2: 5% of samples loop"]
    weak = ([_ev(-2, 0.45), _ev(0, 0.5), _ev(2, 0.6)], (-2.0, 2.0))
    assert not _report(source, weak).met  # 0.15 < 0.4
    still = ([_ev(-4, 0.5), _ev(0, 0.5), _ev(4, 0.5)], (-4.0, 4.0))
    assert not _report(still, kept).met  # a source that does not move is no yardstick
    unsteered_loops = ([_ev(-2, 0.3), _ev(0, 0.5, repetition=0.05), _ev(2, 0.8)], (-2.0, 2.0))
    assert _report(source, unsteered_loops).transferred.broken() == []  # the unsteered row is the yardstick, not a setting
    assert _report(source, ([_ev(0, 0.5)], None)).transferred.move is None and not _report(source, ([_ev(0, 0.5)], None)).met


def test_transfer_rows_share_one_unsteered_row_and_keep_their_order(monkeypatch, llama_lm):
    """``_sweeps``: one batched call, the unsteered row once and first, each switch's rows back in its order."""
    from lmswitch.harness import transfer_report as tr

    a, b = random_switch(llama_lm, seed=1, name="a"), random_switch(llama_lm, seed=2, name="b")
    calls = []

    def fake(lm, settings, prompts, protocol):
        calls.append(settings)
        return [_ev(0.0, sum(e for _, e in s)) for s in settings]  # each row's ε as its positive share

    monkeypatch.setattr(tr, "evaluate_settings", fake)
    got = tr._sweeps(llama_lm, [(a, [-2.0, 0.0, 1.0, 2.0]), (b, [0.0, 3.0])], ["p"], None, tr.FluencyRules())
    assert len(calls) == 1 and calls[0][0] == [] and len(calls[0]) == 5
    assert [[s.eps(ev) for ev in s.evals] for s in got] == [[-2.0, 0.0, 1.0, 2.0], [0.0, 3.0]]
    assert [[ev.setting for ev in s.evals][1] for s in got] == [{"a": 0.0}, {"b": 3.0}]
    assert [[ev.positive_share for ev in s.evals] for s in got] == [[-2.0, 0.0, 1.0, 2.0], [0.0, 3.0]]  # each row its own
    assert got[0].base is not got[1].base and [s.switch for s in got] == ["a", "b"]


def test_a_report_replaces_its_own_sections_and_keeps_the_rest_of_the_file(tmp_path):
    """``eval --report`` into a file other commands wrote sections of (EVALUATION.md): theirs, the notes above the first
    section, and a deeper heading named like one of its own stay; a new file gets a title."""
    from lmswitch.harness.report import TITLE, write_sections

    path = tmp_path / "E.md"
    path.write_text("# E\n\nnotes\n\n## Targets\n\nold\n\n### Targets\n\nkept deeper\n\n## Stance\n\nkept\n")
    write_sections(path, "## Targets\n\nnew\n\n## Sentiment\n\nadded\n")
    assert path.read_text() == "# E\n\nnotes\n\n## Targets\n\nnew\n\n## Stance\n\nkept\n\n## Sentiment\n\nadded\n"
    write_sections(tmp_path / "new.md", "## Targets\n\nnew\n")
    assert (tmp_path / "new.md").read_text() == f"{TITLE}\n\n## Targets\n\nnew\n"


def test_a_replaced_section_keeps_its_place_and_the_blank_line_before_the_next(tmp_path):
    from lmswitch.harness.report import replace_section

    path = tmp_path / "E.md"
    path.write_text("# E\n\n## A\n\nold\n\n## B\n\nkept\n")
    replace_section(path, "## A", "new\n")
    replace_section(path, "## C", "added")
    assert path.read_text() == "# E\n\n## A\n\nnew\n\n## B\n\nkept\n\n## C\n\nadded\n"
