"""EVALUATION.md from harness/report.py on tiny models: the full report (targets, checks, frontier, figures, JSON)
and the transfer section (verdict consistent with its numbers, replaced on a rerun)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import random_switch, tiny_style_data

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
    """The EVALUATION.md section on tiny models: verdict consistent with its numbers, rerunning replaces it."""
    from lmswitch.harness.report import TRANSFER_KEEP, TransferSuite, run_transfer_report

    target = make_lm("gpt2", hidden=24)
    switches = tmp_path / "switches"
    switches.mkdir()
    random_switch(llama_lm, seed=5, name="sentiment").save(switches / "sentiment.safetensors")
    out = tmp_path / "EVAL.md"
    out.write_text("# Evaluation\n\n## Earlier section\n\nkept\n")
    tiny_style_data(tmp_path / "data")  # the trained-on-target reference learns from these, not the shipped 1,491 pairs
    suite = TransferSuite(prompts=2, samples=1, multiples=(1.0,), direct_eps=(3.0,), min_anchors=20)
    with torch.random.fork_rng():
        report = run_transfer_report(llama_lm, target, out, suite=suite, switch_dir=switches, data_dir=tmp_path / "data")
        run_transfer_report(llama_lm, target, out, suite=suite, switch_dir=switches, data_dir=tmp_path / "data")
    text = out.read_text()
    assert text.count("## Transfer: the sentiment switch on") == 1 and "## Earlier section\n\nkept" in text
    data = report.direct_card["data"]
    assert data["train_pairs"] + data["heldout_pairs"] == 20  # the reference trained on data_dir's pairs
    first = report.to_dict()
    best = first["best_transfer"]
    assert first["met"] == (best is not None and best[1] > 0 and best[1] >= TRANSFER_KEEP * first["source_spread"])
    assert ("**met**" in text) == first["met"]
    assert (tmp_path / "docs" / "evaluation" / f"transfer-{target.name}.json").exists()
