"""The stance evaluation: its bundled data meets its documented rules, and its measures compute what they say."""

from __future__ import annotations

import random
import re

import pytest
from conftest import FILLER, WORDS_A, WORDS_B, build_lm
from tiny import sample_texts

from lmswitch.harness.evaluate import Protocol
from lmswitch.harness.stance import (
    PER_TOKENS,
    Shift,
    StanceReport,
    StanceRow,
    Topic,
    _chosen,
    evaluate_topic,
    lexicon_score,
    load_topics,
    markdown,
    pairwise_accuracy,
)

TOPICS = load_topics()


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower().replace("-", " "))


def test_topics_are_split_dev_and_test():
    assert {t.split for t in TOPICS} == {"dev", "test"}
    assert len(load_topics("test")) >= 3 and len(load_topics("dev")) >= 1
    with pytest.raises(ValueError, match="split must be"):
        load_topics("train")
    assert [t.name for t in load_topics(names=[TOPICS[1].name, TOPICS[0].name])] == [TOPICS[0].name, TOPICS[1].name]
    dev = load_topics("dev")[0].name
    with pytest.raises(ValueError, match=f"no test topic named {dev}; choose from"):  # a dev topic is not a test one
        load_topics("test", [dev])


@pytest.mark.parametrize("topic", TOPICS, ids=[t.name for t in TOPICS])
def test_topic_data_follows_the_rules(topic):
    for article in (topic.article_a, topic.article_b):
        assert 400 <= len(article.split()) <= 600
    assert len(topic.statements_a) >= 10 and len(topic.statements_b) >= 10 and len(topic.prompts) >= 10
    assert not set(topic.lexicon_a) & set(topic.lexicon_b)
    # held-out statements share no 5-word sequence with either article
    grams = {tuple(w[i : i + 5]) for a in (topic.article_a, topic.article_b) for w in [_words(a)] for i in range(len(w) - 4)}
    for statement in topic.statements_a + topic.statements_b:
        w = _words(statement)
        assert not {tuple(w[i : i + 5]) for i in range(len(w) - 4)} & grams, statement


class _WordTokenizer:
    def __call__(self, text, add_special_tokens=False):
        return type("Enc", (), {"input_ids": text.split()})()


class _LM:
    tokenizer = _WordTokenizer()


def test_lexicon_score_counts_hits_per_25_tokens():
    texts = ["a fair and modern plan", "an unfair plan, sadly unfair"]  # 5 + 5 words: A 2 hits, B 2 hits → 0
    assert lexicon_score(_LM(), texts, ["fair", "modern"], ["unfair"]) == 0.0
    assert lexicon_score(_LM(), ["fair fair fair fair fair"], ["fair"], ["unfair"]) == PER_TOKENS * 5 / 5
    assert lexicon_score(_LM(), ["Unfairness is not unfair-ish"], ["fair"], ["unfair"]) == PER_TOKENS * -1 / 4  # whole words only


def test_pairwise_accuracy():
    assert pairwise_accuracy([3, 4], [1, 2]) == 1.0
    assert pairwise_accuracy([1], [2]) == 0.0
    assert pairwise_accuracy([1, 2], [1, 2]) == 0.5


# --- the harness itself, on a tiny model whose two "sides" are two word lists -----------------------------


def _article(rng, side: list[str]) -> str:
    return ". ".join(" ".join(rng.choice(side + FILLER[:8]) for _ in range(10)) for _ in range(12)) + "."


@pytest.fixture(scope="module")
def tiny_topic():
    rng = random.Random(0)
    return Topic(name="tiny", title="the tiny question", side_a="for", side_b="against", split="dev",
                 article_a=_article(rng, WORDS_A), article_b=_article(rng, WORDS_B),
                 statements_a=tuple(sample_texts(rng, WORDS_A, 4, length=8, p_style=0.8)),
                 statements_b=tuple(sample_texts(rng, WORDS_B, 4, length=8, p_style=0.8)),
                 prompts=("the", "she was"), lexicon_a=tuple(WORDS_A), lexicon_b=tuple(WORDS_B))


def test_evaluate_topic_measures_what_its_row_says(tokenizer, tiny_topic):
    """The one-article switches rank their own side's statements first (a planted signal), and each lexicon shift is
    the score of its continuations against the unsteered ones, toward A at +ε and toward B at −ε."""
    lm = build_lm("gpt2", init=0.3, tokenizer=tokenizer)
    protocol = Protocol(samples=1, max_new_tokens=12)  # 2 prompts × 1 sample: every continuation is in the row's samples
    row = evaluate_topic(lm, tiny_topic, "plain", [6.0], protocol=protocol)
    assert row.meter_accuracy >= 0.75 and row.meter_accuracy_ab >= 0.75, row
    assert (row.topic, row.split, row.method) == ("tiny", "dev", "plain") and row.train_seconds > 0
    (shift,) = row.shifts
    score = {k: lexicon_score(lm, texts, tiny_topic.lexicon_a, tiny_topic.lexicon_b) for k, texts in shift.samples.items()}
    assert len(shift.samples["0"]) == 2 and shift.eps == 6.0
    assert shift.toward_a == pytest.approx(score["+6"] - score["0"]) and shift.toward_b == pytest.approx(score["0"] - score["−6"])
    assert shift.toward_a > 0 and shift.toward_b > 0  # the A-vs-B switch moves the words both ways
    assert shift.fluent == (not shift.problems)


def _row(method: str, fluent: dict[float, bool], split: str = "dev") -> StanceRow:
    shifts = [Shift(e, 0.5, -0.25, ok, [] if ok else [f"+{e:g}: perplexity"], {}) for e, ok in fluent.items()]
    return StanceRow("t", split, method, 0.625, 0.75, 1.5, shifts)


def test_the_chosen_eps_is_the_largest_fluent_on_every_dev_topic_and_the_report_shows_its_shift():
    rows = [_row("plain", {2.0: True, 4.0: True, 8.0: False}), _row("plain", {2.0: True, 4.0: False, 8.0: True}),
            _row("self-contrast", {2.0: False, 4.0: False, 8.0: False})]
    assert _chosen(rows, "plain") == 2.0 and _chosen(rows, "self-contrast") is None
    assert _chosen(rows[:1], "plain") == 4.0
    report = StanceReport(dev=rows[:1], test=[_row("plain", {4.0: True}, "test")], chosen_eps={"plain": 4.0})
    table = markdown(report)
    assert "| dev | t | plain | 62% | 75% | 1.5 | 4 | +0.50 | -0.25 | yes |" in table, table
    assert "| test | t | plain | 62% | 75% | 1.5 | 4 | +0.50 | -0.25 | yes |" in table
    assert "Test mean, plain: one-article meter accuracy 62% (target ≥ 85%)." in table
    unfluent = StanceReport(dev=[], test=[_row("plain", {8.0: False})], chosen_eps={"plain": 8.0})
    assert "| 8 | +0.50 | -0.25 | +8: perplexity |" in markdown(unfluent)
    assert "| — | — | — | — |" in markdown(StanceReport(dev=[], test=[_row("plain", {})], chosen_eps={"plain": None}))
