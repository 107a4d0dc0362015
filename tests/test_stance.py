"""The stance evaluation: its bundled data meets its documented rules, and its measures compute what they say."""

from __future__ import annotations

import re

import pytest

from lmswitch.harness.stance import PER_TOKENS, lexicon_score, load_topics, pairwise_accuracy

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
