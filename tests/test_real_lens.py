"""The lens features on the real embedded model: word lists, highlighted insults, the style meter."""

from __future__ import annotations

import json

import pytest
from conftest import EXAMPLES, all_threads, lines
from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

import lmswitch as ls
from lmswitch.harness.datasets import load_dataset
from lmswitch.harness.highlight_report import DATASET_OF, planted_texts
from lmswitch.io.resources import examples_dir
from lmswitch.lenses.meter import measure
from lmswitch.lenses.spans import DEFAULT_EPS, highlight, token_changes
from lmswitch.lenses.svd import WordDelta, WordScore, promoted_words, svd_dimensions
from lmswitch.lenses.vocab import word_forms

pytestmark = [pytest.mark.real_model, pytest.mark.usefixtures("real_model_threads")]

LEXICON = SentimentIntensityAnalyzer().lexicon  # ~7.5k words with human valence ratings, bundled with vaderSentiment


def polarity_counts(words: list[WordScore] | list[WordDelta]) -> tuple[int, int, int]:
    """(words rated by vader, rated positive, rated negative)."""
    rated = [LEXICON[w.word.lower()] for w in words if w.word.lower() in LEXICON]
    return len(rated), sum(v > 0 for v in rated), sum(v < 0 for v in rated)


def test_promoted_words_are_positive_and_suppressed_words_negative(lm, sentiment):
    """Among the vocabulary's readable words that vader rates, 52% are positive, so a list with no
    sentiment signal would be about half positive. We require ≥ 90% of the rated words among the top 50
    to have the right polarity, with at least 10 rated words per list: by chance (p = 0.52) that has a
    probability below 1e-3. Measured on 2026-11-21: 22/22 positive and 22/22 negative."""
    words = promoted_words(lm, sentiment, words=50)
    n, positive, _ = polarity_counts(words.promoted)
    assert n >= 10 and positive / n >= 0.9, words.promoted
    n, _, negative = polarity_counts(words.suppressed)
    assert n >= 10 and negative / n >= 0.9, words.suppressed


def test_strongest_svd_direction_is_the_sentiment_axis(lm, sentiment):
    """The direction with the largest effect over real contexts reads as positive ↑ / negative ↓ (same bar)."""
    dims = svd_dimensions(lm, sentiment, dims=10, words=50).dimensions
    top = max(dims, key=lambda d: d.strength)
    n, positive, _ = polarity_counts(top.promoted)
    assert n >= 10 and positive / n >= 0.9, top.promoted
    n, _, negative = polarity_counts(top.suppressed)
    assert n >= 10 and negative / n >= 0.8, top.suppressed
    assert top.agreement > 0.9  # it pushes the same way in nearly every context


def test_word_fragments_are_not_listed_as_words_and_contractions_read_whole(lm):
    """A contraction's stem was listed as "wouldn", "hadn" (detox's promoted words): it reads as the contraction."""
    tokens = ["Ġstrugg", "Ġaffili", "Ġinadequ", "Ġgood", "Ġdelightful", "Ġcostly", "Ġwouldn", "Ġhadn", "Ġdon"]
    ids = lm.tokenizer.convert_tokens_to_ids(tokens)
    assert word_forms(lm, ids) == [None, None, None, "good", "delightful", "costly", "wouldn't", "hadn't", "don't"]


@pytest.fixture(scope="module")
def detox(lm) -> ls.Switch:
    """Paper convention: positive eps = less toxic. 40 + 40 project-written comments (assets/examples)."""
    with all_threads():
        return ls.train_switch(lm, lines(EXAMPLES / "civil_comments.txt"), lines(EXAMPLES / "toxic_comments.txt"), name="detox",
                               positive_label="non-toxic", negative_label="toxic")


# held-out insulting sentences (not in the training data), each with the words that make it an insult
INSULTS = {
    "You are such a worthless idiot, nobody wants to hear from you.": {"worthless", "idiot"},
    "The meeting notes were shared on Monday, and honestly whoever wrote them is a stupid moron.": {"stupid", "moron"},
    "Thanks for the update on the bus times; the driver yesterday was a rude jerk though.": {"rude", "jerk"},
    "I read your whole proposal and it is pure garbage from a clueless fool.": {"garbage", "clueless", "fool"},
    "The garden looks great this year, but my neighbour is a lazy, filthy slob.": {"lazy", "filthy", "slob"},
    "Shut up, you pathetic loser.": {"shut", "pathetic", "loser"},
    "What a dumb clown, he parked across three spaces again.": {"dumb", "clown"},
    "The new library opened downtown and the staff there are total idiots.": {"idiots"},
    "The train was late again, and the conductor was an arrogant, ignorant twit.": {"arrogant", "ignorant", "twit"},
    "I bought the blue one in the end; the salesman was a greedy, lying creep.": {"greedy", "lying", "creep"},
    "Your comment about the budget is the dumbest thing I have read all week.": {"dumbest"},
    "The soup was fine, but the chef is a disgusting pig.": {"disgusting", "pig"},
    "Only an absolute imbecile would park a truck in front of the fire station.": {"imbecile"},
    "We finished the report on time, no thanks to that useless idiot from accounting.": {"useless", "idiot"},
    "Please stop posting, you brainless troll.": {"brainless", "troll"},
    "The weather was lovely all weekend, and my cousin is still a whiny little brat.": {"whiny", "brat"},
    "Nobody asked for your opinion, you ugly, stupid fool.": {"ugly", "stupid", "fool"},
    "The museum closes at six, so tell that idiotic tour guide to hurry up.": {"idiotic"},
    "Honestly the mayor is a corrupt, spineless coward and everyone knows it.": {"corrupt", "spineless", "coward"},
    "I fixed the printer myself because the technician was an incompetent buffoon.": {"incompetent", "buffoon"},
}


def test_highlight_finds_the_insult(lm, detox):
    """At negative eps (toward toxic) the best span of ≤ 5 tokens contains an insulting word. A random switch of the
    same norm does that for 7 of these 20 sentences (short ones are easy to hit); ≥ 13 by chance at that rate
    (binomial, p = 0.35) has a probability below 0.01. Measured on 2026-11-26: 17/20 (the first 8 alone, the test
    until then: 6, where the random switch gets 5)."""
    hits = []
    for text, insult in INSULTS.items():
        span = highlight(lm, detox, text, eps=-5.0, max_span=5).spans[0]  # the setting the chance bound was worked out for
        hits.append(any(word in span.text.lower() for word in insult))
    assert sum(hits) >= 13, list(zip(INSULTS, hits, strict=True))


@pytest.mark.parametrize("name", DATASET_OF)
def test_highlight_finds_a_planted_sentence_of_each_shipped_style(lm, name):
    """At the default setting, the span lands mostly inside the one sentence of the side looked for, planted between two
    of the other side's (eval --highlight's texts, its first 16 test texts). A span placed at random does so about a third
    of the time; ≥ 12 of 16 at that rate has a probability near 1e-3. Measured on 2026-11-29: sentiment 16, detox 15, formality 14 of 16 (float32: 16, 14, 14)."""
    texts = planted_texts(*load_dataset(DATASET_OF[name]).heldout("test"))[:16]
    switch = ls.load_switch(name, lm)
    spans = [highlight(lm, switch, p.text, eps=p.side * DEFAULT_EPS).spans[0] for p in texts]
    inside = [p.inside(s.start, s.end) for p, s in zip(texts, spans, strict=True)]
    assert sum(share >= 0.5 for share in inside) >= 12, [(p.text, s.text) for p, s in zip(texts, spans, strict=True)]


def test_the_app_examples_highlight_what_they_show(lm):
    """Each example of the Highlight tab, at its own settings, puts its best span on the words it is there to show."""
    for example in json.loads((examples_dir() / "highlight.json").read_text(encoding="utf-8")):
        h = highlight(lm, ls.load_switch(example["switch"], lm), example["text"], eps=example["eps"],
                      max_span=example["max_span"], n_spans=example["n_spans"])
        assert example["finds"] in h.spans[0].text, (example["finds"], [s.text for s in h.spans])


def test_real_tokenizer_offsets_are_exact_for_unicode(lm, sentiment):
    text = "Café 😀 was lovely — 日本語, naïve\r\n\tbut the 👩‍👩‍👧 family hated it!  "
    h = highlight(lm, sentiment, text, n_spans=3, max_span=3)
    assert "".join(t.text for t in h.tokens) == text
    assert "".join(p for p, _ in h.highlighted) == text
    assert "".join(w for w, _ in h.word_heatmap()) == text
    assert all(text[s.start : s.end] == s.text for s in h.spans)


def test_token_changes_explain_a_steered_generation(lm, sentiment):
    """For a positive-steered generation, the switch raised its tokens' log-probability on balance."""
    prompt = "My weekend was"
    text = ls.generate(lm, prompt, [(sentiment, 5.0)], max_new_tokens=20, seed=0)[0]
    rows = token_changes(lm, [(sentiment, 5.0)], text, prompt=prompt)
    assert rows[0].scored and sum(r.delta for r in rows) > 0
    assert all(len(r.promoted) == 5 and len(r.demoted) == 5 for r in rows)


def test_style_meter_classifies_held_out_sentences(lm, sentiment):
    """The sign of the best eps on the 10 + 10 held-out example sentences agrees with their label.
    Required ≥ 15/20 (chance: p = 0.02); measured 18/20 on 2026-11-21."""
    pos = lines(EXAMPLES / "sentiment_positive.txt")[30:]
    neg = lines(EXAMPLES / "sentiment_negative.txt")[30:]
    right = [measure(lm, sentiment, t).switches[0].best_eps > 0 for t in pos]
    right += [measure(lm, sentiment, t).switches[0].best_eps < 0 for t in neg]
    assert sum(right) >= 15, right


PLAIN = ["The weather is nice today and the children played happily in the park with their friends.",
         "Please find attached the quarterly report for your review. Let me know if you have any questions.",
         "The meeting is scheduled for Tuesday at 10 am in the main conference room.",
         "I bought a new pair of shoes yesterday; they fit well and were on sale.",
         "The recipe calls for two cups of flour, one egg and a pinch of salt.",
         "Our train was delayed by twenty minutes because of maintenance work on the line."]


def test_a_plain_sentences_toxic_span_is_weak_and_the_examples_spans_are_not(lm):
    """A text always has a best span; in a plain sentence, read toward toxic by the shipped detox switch (the Highlight
    tab's), it is marked weak (the tab labelled "and the children played" toxic). Measured on 2026-12-02 (bfloat16):
    these plain sentences 0.21–0.79 nats, and 67 of 69 sentences of lmswitch/data/reference.txt below the 1-nat line
    (at most 1.09); the tab's examples 1.41–3.89 (float32, 2026-11-30).

    The line is the shipped switch's: a switch trained here from the 40 + 40 example comments reads 30 of those 69
    neutral sentences above it (33 of 69 before the ridge path carried its curvature), and these six at 0.31–1.07."""
    detox = ls.load_switch("detox", lm)
    plain = [highlight(lm, detox, text, eps=-DEFAULT_EPS) for text in PLAIN]
    assert all(h.spans and h.spans[0].weak for h in plain), [[(s.text, s.score) for s in h.spans] for h in plain]
    assert {label for h in plain for _, label in h.highlighted if label} == {"toxic (weak)"}
    for item in json.loads((examples_dir() / "highlight.json").read_text(encoding="utf-8")):
        [span] = highlight(lm, ls.load_switch(item["switch"], lm), item["text"], eps=item["eps"], max_span=item["max_span"]).spans
        assert not span.weak and item["finds"] in span.text, (item["finds"], span.text, span.score)
