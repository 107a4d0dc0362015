"""``eval --highlight``: the planted texts, the hit rule, the scorer baseline, dev → test, the common default."""

from __future__ import annotations

import json

import pytest
from conftest import random_switch

from lmswitch.cli import main
from lmswitch.harness import highlight_report as hr
from lmswitch.harness.datasets import DATASETS
from lmswitch.lenses.spans import DEFAULT_EPS, DEFAULT_MAX_SPAN

POSITIVE = ["The food was wonderful.", "What a lovely, happy day.", "I love this great town.", "The staff were kind."]
NEGATIVE = ["The food was awful.", "What a horrible, sad day.", "I hate this ugly town.", "The staff were rude."]


def test_each_text_plants_one_sentence_of_its_side_among_the_other_sides():
    texts = hr.planted_texts(POSITIVE, NEGATIVE)
    assert len(texts) == 2 * len(POSITIVE)
    for k, p in enumerate(texts):
        i, own, other = k // 2, *((POSITIVE, NEGATIVE) if p.side == 1 else (NEGATIVE, POSITIVE))
        assert p.text[p.start:p.end] == own[i]
        assert other[(i + 1) % 4] in p.text and other[(i + 2) % 4] in p.text
        assert p.text.find(own[i]) == [0, len(other[(i + 1) % 4]) + 1, len(p.text) - len(own[i])][i % 3]  # its place rotates
        assert 0.2 < p.chance < 0.5
        assert p.inside(p.start, p.end) == 1.0 and p.inside(0, 0) == 0.0
        outside = (p.end + 1, len(p.text)) if p.start == 0 else (0, p.start - 1)
        assert p.inside(*outside) == 0.0
    with pytest.raises(ValueError, match="at least 3 pairs"):
        hr.planted_texts(POSITIVE[:2], NEGATIVE[:2])


def test_a_span_half_inside_hits_and_chance_counts_characters_not_spaces():
    p = hr.PlantedText("aa bb cc dd", 3, 8, +1)  # "bb cc": 4 of the 8 visible characters
    assert p.chance == 0.5
    assert p.inside(0, 5) == 0.5  # "aa bb": half inside
    assert p.inside(6, 11) == 0.5  # "cc dd"


def test_the_scorer_baseline_finds_vader_words():
    texts = hr.planted_texts(POSITIVE, NEGATIVE)
    rate = hr.scorer_hits("sentiment", texts, max_words=3)
    assert rate.hits_positive == rate.hits_negative == 1.0 and rate.texts == len(texts)
    assert rate.eps is None  # the scorer has no ε, shown as "—"
    assert f"| — | 3 | {len(texts)} |" in hr._row("baseline", rate)


def rate(eps: float, span: int, hits: float) -> hr.HitRate:
    return hr.HitRate(eps, span, hits, hits, hits, 0.33, 10)


def test_one_default_is_the_best_mean_over_switches_on_dev():
    a = [rate(1.0, 5, 0.9), rate(1.0, 8, 0.8), rate(4.0, 5, 0.7)]
    b = [rate(1.0, 5, 0.6), rate(1.0, 8, 0.95), rate(4.0, 5, 1.0)]
    results = [hr.SwitchHitRates(name, dev, *[dev[0]] * 4) for name, dev in (("a", a), ("b", b))]
    assert hr.common_choice(results) == (1.0, 8, pytest.approx(0.875))
    # 0.85 both, though (0.8 + 0.9) / 2 and (0.7 + 1.0) / 2 differ in the last bit: the tie goes to the weaker ε
    b[1] = rate(1.0, 8, 0.9)
    assert hr.common_choice(results)[:2] == (1.0, 8)
    a[1], a[2] = rate(1.0, 8, 0.7), rate(4.0, 5, 0.6)
    assert hr.common_choice(results)[:2] == (1.0, 8)  # (0.7 + 0.9) / 2 against (0.6 + 1.0) / 2: 0.8 both


@pytest.fixture
def tiny_data(tmp_path):
    """Seventy pairs of each shipped dataset's files, in tiny-model words (seven of them held out)."""
    for spec in DATASETS.values():
        folder = tmp_path / spec.folder
        folder.mkdir()
        pos, neg = [], []
        for i in range(70):  # held out: every tenth pair, so 7 pairs: 4 dev (8 texts) and 3 test (6 texts)
            pos.append(f"the kind one is good and kind number {i}")
            neg.append(f"the cruel one is bad and cruel number {i}")
        (folder / spec.positive_file).write_text("\n".join(pos) + "\n", encoding="utf-8")
        (folder / spec.negative_file).write_text("\n".join(neg) + "\n", encoding="utf-8")
    return tmp_path


def test_the_report_chooses_on_dev_and_scores_test(gpt2_lm, tiny_data):
    switch = random_switch(gpt2_lm, seed=3, scale=0.5, name="detox")
    logged = []
    [result] = hr.run_highlight_report(gpt2_lm, {"detox": switch}, data_dir=tiny_data, log=logged.append)
    assert len(result.dev) == len(hr.STRENGTHS) * len(hr.SPAN_LENGTHS) and all(r.texts == 8 for r in result.dev)
    best = max(result.dev, key=lambda r: (round(r.hits, 9), -r.eps, -r.max_span))
    assert (result.chosen.eps, result.chosen.max_span) == (best.eps, best.max_span)
    assert result.chosen.texts == result.default.texts == result.previous_default.texts == result.scorer.texts == 6  # test
    assert (result.default.eps, result.default.max_span) == (DEFAULT_EPS, DEFAULT_MAX_SPAN)
    assert (result.previous_default.eps, result.previous_default.max_span) == hr.PREVIOUS_DEFAULT
    assert logged == [f"detox: chose |ε| {best.eps:g}, max span {best.max_span} on dev ({best.hits:.0%} hits)"]
    text = hr.markdown([result])
    assert "detox: chosen on dev" in text and "detox: baseline" in text and "One setting for every switch" in text
    json.dumps(hr.to_dict([result]), allow_nan=False)  # strict JSON
    with pytest.raises(ValueError, match="no planted-text data for mystery"):
        hr.run_highlight_report(gpt2_lm, {"mystery": switch}, data_dir=tiny_data)


def test_eval_highlight_under_accelerate_is_refused(monkeypatch, capsys):
    monkeypatch.setattr("lmswitch.cli.evaluate.world", lambda: (0, 2))
    assert main(["eval", "--highlight"]) == 2
    assert "under accelerate launch" in capsys.readouterr().err
