"""Highlighting: the exact span DP, Δ per token against full steered forward passes, offsets, token changes."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch
from conftest import CONTEXT, random_switch
from hypothesis import given, settings
from hypothesis import strategies as st

import lmswitch as ls
from lmswitch.core.hidden import encode_text
from lmswitch.lenses import spans as spans_module
from lmswitch.lenses.options import WEAK_EVIDENCE_NATS, WEAK_QUANTILE
from lmswitch.lenses.spans import Highlight, _char_span, _spans, best_spans, highlight, neutral_sentences, token_changes, weak_line


def brute_force(scores: list[float], max_span: int, n_spans: int) -> float:
    """Best total over every set of exactly min(n_spans, n) non-overlapping spans of length ≤ max_span."""
    n = len(scores)
    k = min(n_spans, n)
    spans = [(a, b) for a in range(n) for b in range(a + 1, min(n, a + max_span) + 1)]
    best = -math.inf
    for combo in itertools.combinations(spans, k):
        ordered = sorted(combo)
        if all(ordered[i][1] <= ordered[i + 1][0] for i in range(k - 1)):
            best = max(best, sum(sum(scores[a:b]) for a, b in ordered))
    return best


def test_two_spans_widened_into_one_word_are_shown_as_one_span_with_both_scores():
    """ " id" and "iot" chosen as two spans both widen to "idiot": one span over both, never an empty one."""
    import numpy as np

    text = "you total idiot"
    bounds = [0, 3, 9, 12, 15]  # "you", " total", " id", "iot"
    delta = np.array([0.0, 0.1, 0.8, 0.3])
    spans = _spans(text, bounds, delta, max_span=1, n_spans=3, line=1.0)
    assert [(s.text, s.tokens) for s in spans] == [("total", [1, 2]), ("idiot", [2, 4])]  # the best three, two of one word
    assert spans[-1].score == pytest.approx(1.1) and all(s.text for s in spans)
    assert [s.weak for s in spans] == [True, False]  # the merged span is weighed by its summed score


@settings(max_examples=300, deadline=None)
@given(
    scores=st.lists(st.floats(-10, 10, allow_nan=False, width=32), min_size=1, max_size=11),
    max_span=st.integers(1, 4),
    n_spans=st.integers(1, 3),
)
def test_dp_equals_brute_force(scores, max_span, n_spans):
    spans = best_spans(scores, max_span, n_spans)
    assert len(spans) == min(n_spans, len(scores))
    for (a, b, total), nxt in zip(spans, spans[1:] + [(len(scores), None, None)], strict=True):
        assert 0 <= a < b <= nxt[0] and b - a <= max_span
        assert total == pytest.approx(sum(scores[a:b]), abs=1e-6)
    assert sum(t for _, _, t in spans) == pytest.approx(brute_force(scores, max_span, n_spans), abs=1e-6)


@pytest.mark.parametrize("seed", range(20))
def test_planted_span_is_found(seed):
    rng = np.random.default_rng(seed)
    n, L = int(rng.integers(20, 200)), int(rng.integers(1, 8))
    scores = rng.normal(0, 0.3, n)
    start = int(rng.integers(0, n - L + 1))
    scores[start : start + L] += 5.0
    assert best_spans(scores.tolist(), max_span=L) == [(start, start + L, pytest.approx(scores[start : start + L].sum()))]


def test_several_planted_spans_are_found():
    scores = [0.0] * 40
    for a in (3, 17, 30):
        scores[a : a + 2] = [4.0, 4.0]
    assert [(a, b) for a, b, _ in best_spans(scores, max_span=2, n_spans=3)] == [(3, 5), (17, 19), (30, 32)]


@pytest.mark.parametrize("bad", [dict(max_span=0), dict(max_span=-1), dict(n_spans=0), dict(max_span=2.5), dict(max_span=65),
                                 dict(n_spans=51), dict(n_spans=10**9), dict(max_span=True)])
def test_bad_span_arguments_are_refused(bad):
    with pytest.raises(ValueError, match="max_span|n_spans"):
        best_spans([1.0, 2.0], **bad)


def test_non_finite_scores_are_refused():
    with pytest.raises(ValueError, match="finite"):
        best_spans([1.0, float("nan")])
    with pytest.raises(ValueError, match="scores must be a flat sequence of finite numbers"):  # was NumPy's "could not convert"
        best_spans([1.0, "x"])


def test_a_run_is_typed_and_still_unpacks_as_a_tuple():
    (run,) = best_spans([0.1, -2, 3, 1, -1, 2], max_span=2)
    start, end, total = run
    assert (run.start, run.end, run.total) == (start, end, total) == (2, 4, 4.0) and run == (2, 4, 4.0)


def _text(words: list[str]) -> str:
    return " ".join(words)


TEXT = "the kind and warm people smile with joy , but the cold and cruel one was bitter"


def _deltas_by_forward(lm, setting, text):
    """Δ_i from two full forward passes (no cached states): the reference for the lens code."""
    ids = lm.tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        base = torch.log_softmax(lm.model(ids).logits.float(), -1)
        with ls.steer(lm, setting):
            steered = torch.log_softmax(lm.model(ids).logits.float(), -1)
    tgt = ids[0, 1:]
    rows = torch.arange(len(tgt))
    return [0.0] + (steered[0, rows, tgt] - base[0, rows, tgt]).tolist()


def test_token_deltas_match_full_steered_forward(tiny_lm):
    switch = random_switch(tiny_lm, seed=3, scale=2.0)
    h = highlight(tiny_lm, switch, TEXT, eps=40.0)
    expected = _deltas_by_forward(tiny_lm, [(switch, 40.0)], TEXT)
    assert [t.delta for t in h.tokens] == pytest.approx(expected, abs=1e-4)
    assert not h.tokens[0].scored and all(t.scored for t in h.tokens[1:])
    assert max(abs(x) for x in expected) > 1e-2  # the switch really changes something


def test_an_encoded_text_is_highlighted_without_another_pass(tiny_lm, monkeypatch):
    switch = random_switch(tiny_lm, seed=3, scale=2.0)
    fresh = highlight(tiny_lm, switch, TEXT, eps=40.0, n_spans=2)
    encoded = encode_text(tiny_lm, TEXT)
    monkeypatch.setattr(tiny_lm, "final_hidden", lambda *a, **k: pytest.fail("the model ran again"))
    assert highlight(tiny_lm, switch, encoded, eps=40.0, n_spans=2) == fresh


def test_planted_switch_highlights_the_promoted_word(gpt2_lm):
    """W = u vᵀ with u the output embedding of 'cruel' and v the mean context → 'cruel' lights up."""
    lm = gpt2_lm
    target = lm.tokenizer.convert_tokens_to_ids("cruel")
    E = lm.head.weight.detach()
    ids = lm.tokenizer(TEXT, return_tensors="pt").input_ids
    c = lm.final_hidden(ids)[0]
    W = 2000 * torch.outer(E[target] / E[target].norm(), c.mean(0) / c.mean(0).norm())
    switch = ls.Switch(W=W, name="cruel", model_name=lm.name, model_fingerprint=lm.fingerprint)
    h = highlight(lm, switch, TEXT, eps=20.0, max_span=1)
    assert h.spans[0].text == "cruel" and not h.spans[0].weak, h.spans[0].score
    assert h.highlighted == [(TEXT[: TEXT.index("cruel")], None), ("cruel", "positive"), (TEXT[TEXT.index("cruel") + 5 :], None)]
    faint = highlight(lm, switch, TEXT, eps=5.0, max_span=1)  # a quarter of the push: under a nat, said to be weak
    assert faint.spans[0].text == "cruel" and faint.spans[0].weak, faint.spans[0].score
    assert ("cruel", "positive (weak)") in faint.highlighted
    assert h.weak_line == faint.weak_line == WEAK_EVIDENCE_NATS  # ordinary sentences have no "cruel" to push: 1 nat


def _pushes(lm, word: str, scale: float) -> ls.Switch:
    """A rank-1 switch that raises ``word`` wherever the context looks like the mean context of TEXT."""
    target = lm.tokenizer.convert_tokens_to_ids(word)
    E = lm.head.weight.detach()
    c = lm.final_hidden(lm.tokenizer(TEXT, return_tensors="pt").input_ids)[0].mean(0)
    W = scale * torch.outer(E[target] / E[target].norm(), c / c.norm())
    return ls.Switch(W=W, name=word, model_name=lm.name, model_fingerprint=lm.fingerprint)


def test_a_switch_that_pushes_an_everyday_word_gets_its_own_weak_line(gpt2_lm, monkeypatch):
    """A span is weak under the score the switch's best span reaches on WEAK_QUANTILE of ordinary sentences: a switch
    raising "the" (in this random model, with the words whose output embeddings its direction meets) reads several nats
    in most of them, so a span of several nats is no evidence, where a fixed 1-nat line would call it so."""
    lm = gpt2_lm
    the = _pushes(lm, "the", 2000.0)
    line = weak_line(lm, the, 20.0, max_span=1)
    best = [max([s.score for s in highlight(lm, the, t, eps=20.0, max_span=1).spans] + [0.0]) for t in neutral_sentences()]
    assert line == pytest.approx(max(WEAK_EVIDENCE_NATS, float(np.quantile(best, WEAK_QUANTILE))), rel=1e-3)
    assert line > 3 * WEAK_EVIDENCE_NATS, line  # the planted push: several nats on ordinary text
    h = highlight(lm, the, "we walked to the station in the rain and the sun was bright", eps=20.0, max_span=1)
    assert h.weak_line == line and WEAK_EVIDENCE_NATS < h.spans[0].score < line, h.spans  # evidence at 1 nat, not here
    assert h.spans[0].weak and "no more than ordinary text does" in h.weak_text()
    cruel = _pushes(lm, "cruel", 2000.0)
    monkeypatch.setattr(lm, "final_hidden", lambda *a, **k: pytest.fail("the neutral sentences were read again"))
    assert weak_line(lm, the, 20.0, max_span=1) == line  # once per model, switch, ε and span length
    assert weak_line(lm, cruel, 20.0, max_span=1) == WEAK_EVIDENCE_NATS  # a new switch: no body pass either


@pytest.mark.parametrize(("eps", "max_span"), [(0.0, 8), (math.nan, 8), (1.0, 0), (1.0, 10**6)])
def test_weak_line_refuses_what_highlight_refuses(tiny_lm, eps, max_span):
    switch = random_switch(tiny_lm, seed=0)
    with pytest.raises(ValueError) as weak:
        weak_line(tiny_lm, switch, eps, max_span)
    with pytest.raises(ValueError) as lit:
        highlight(tiny_lm, switch, "a short text to read", eps=eps, max_span=max_span)
    assert str(weak.value) == str(lit.value)
    assert not spans_module._LINES.get(tiny_lm)  # nothing computed, nothing kept


def test_only_spans_that_read_toward_the_side_are_shown(gpt2_lm):
    """The same planted switch, asked for three spans: 'cruel' is the text's one token that reads toward it; spans whose
    summed Δ is not positive (the unscored first token, words it pushes down) are not shown as the side's."""
    lm = gpt2_lm
    target = lm.tokenizer.convert_tokens_to_ids("cruel")
    E = lm.head.weight.detach()
    c = lm.final_hidden(lm.tokenizer(TEXT, return_tensors="pt").input_ids)[0]
    W = 2000 * torch.outer(E[target] / E[target].norm(), c.mean(0) / c.mean(0).norm())
    switch = ls.Switch(W=W, name="cruel", model_name=lm.name, model_fingerprint=lm.fingerprint)
    every = len(TEXT.split())  # one span per word asked (each word here is one token)
    for eps in (5.0, -5.0):
        h = highlight(lm, switch, TEXT, eps=eps, max_span=1, n_spans=every)
        toward = [t.text.strip() for t in h.tokens if t.scored and t.delta > 0]
        assert 1 <= len(toward) < every and [s.text.strip() for s in h.spans] == toward  # fewer than asked: those alone
        assert ("cruel" in toward) == (eps > 0) and "the" != h.spans[0].text  # the unscored first word is not one
        assert [p.strip() for p, label in h.highlighted if label] == toward


@pytest.mark.parametrize("text", ["Hi", "cruel"])
def test_a_text_without_a_scored_token_is_refused(gpt2_lm, text):
    switch = ls.Switch(W=torch.zeros(gpt2_lm.hidden_size, gpt2_lm.hidden_size), name="z", model_name=gpt2_lm.name,
                       model_fingerprint=gpt2_lm.fingerprint)
    with pytest.raises(ValueError, match="needs at least two"):
        highlight(gpt2_lm, switch, text, eps=1.0)


SHOWN = "Honestly, you are a pathetic idiot, but the meeting is at noon. Sh"
PIECES = ["Honestly", ",", " you", " are", " a", " pathetic", " id", "iot", ",", " but", " the", " meeting", " is", " at",
          " noon", ".", " Sh"]


@pytest.mark.parametrize(("a", "b", "shown"), [
    (1, 9, "you are a pathetic idiot"),  # the commas that join it to its neighbours stay outside
    (7, 10, "idiot, but"),  # widened to the whole word; a comma inside is kept
    (12, 16, "is at noon."),  # a span keeps its own full stop
    (15, 17, "Sh"),  # and the full stop before it is shown outside
    (8, 9, ","),  # a span of punctuation alone is shown as it is
])
def test_a_span_is_shown_without_the_punctuation_that_joins_it(a, b, shown):
    bounds = [sum(map(len, PIECES[:i])) for i in range(len(PIECES) + 1)]
    assert "".join(PIECES) == SHOWN
    start, end = _char_span(SHOWN, bounds, a, b)
    assert SHOWN[start:end] == shown


TRICKY = [
    "  the kind 😀 one  ",
    "héllo wörld — the 日本語 text\r\nwith\ttabs and ｆｕｌｌｗｉｄｔｈ",
    "e\u0301 (combining accent) and the 👩‍👩‍👧 family, kind",
    "mixed عربي and עברית with the kind one",
]


@pytest.mark.parametrize("text", TRICKY)
def test_offsets_reassemble_the_exact_text(gpt2_lm, text):
    switch = random_switch(gpt2_lm, seed=1, scale=0.5)
    h = highlight(gpt2_lm, switch, text, n_spans=2, max_span=2)
    assert "".join(t.text for t in h.tokens) == text
    assert "".join(p for p, _ in h.highlighted) == text
    assert "".join(p for p, _ in h.heatmap) == text
    assert "".join(w for w, _ in h.word_heatmap()) == text
    for s in h.spans:
        assert text[s.start : s.end] == s.text
    assert all(-1 <= v <= 1 for _, v in h.heatmap)


def test_long_text_is_scored_in_windows(gpt2_lm):
    """A text longer than the context: every token still gets its exact Δ (each window has full context)."""
    switch = random_switch(gpt2_lm, seed=2)
    words = (TEXT.split() * 12)[: CONTEXT * 3]
    text = _text(words)
    h = highlight(gpt2_lm, switch, text, eps=20.0)
    assert h.windows > 1 and len(h.tokens) == len(words)
    assert all(math.isfinite(t.delta) for t in h.tokens)
    # the first window's tokens equal a direct forward pass on that prefix
    head = _text(words[: CONTEXT - 1])
    expected = _deltas_by_forward(gpt2_lm, [(switch, 20.0)], head)
    assert [t.delta for t in h.tokens[: len(expected)]] == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize(
    ("text", "kwargs", "match"),
    [
        ("", {}, "empty"),
        ("   \n ", {}, "empty"),
        ("the kind\x00 one", {}, "NUL"),
        (TEXT, {"max_span": 0}, "max_span"),
        (TEXT, {"n_spans": 0}, "n_spans"),
        (TEXT, {"eps": float("nan")}, "ε must be a finite non-zero number"),
        (TEXT, {"eps": 0.0}, "ε must be a finite non-zero number"),
        (TEXT, {"eps": 5000.0}, "out of range"),
    ],
)
def test_bad_highlight_input_is_refused(gpt2_lm, text, kwargs, match):
    with pytest.raises(ValueError, match=match):
        highlight(gpt2_lm, random_switch(gpt2_lm, seed=0), text, **kwargs)


def test_switch_for_another_model_is_refused(gpt2_lm, llama_lm):
    with pytest.raises(ValueError, match="made for"):
        highlight(llama_lm, random_switch(gpt2_lm, seed=0), TEXT)


def test_token_changes_match_forward_and_rank_alternatives(tiny_lm):
    switch = random_switch(tiny_lm, seed=5, scale=2.0)
    setting = [(switch, 40.0)]
    rows = token_changes(tiny_lm, setting, TEXT, top=3, among=None)
    assert "".join(r.text for r in rows) == TEXT
    assert [r.delta for r in rows] == pytest.approx(_deltas_by_forward(tiny_lm, setting, TEXT), abs=1e-4)
    for r in rows[1:]:
        ups = [a.delta for a in r.promoted]
        downs = [a.delta for a in r.demoted]
        assert ups == sorted(ups, reverse=True) and downs == sorted(downs)
        assert ups[0] >= r.delta >= downs[0] - 1e-6  # the chosen token lies within the extremes
        assert r.logp_steered - r.logp_base == pytest.approx(r.delta, abs=1e-5)


def test_token_changes_with_zero_eps_change_nothing(gpt2_lm):
    rows = token_changes(gpt2_lm, [(random_switch(gpt2_lm, seed=1), 0.0)], TEXT, prompt="she was")
    assert all(r.delta == 0.0 for r in rows)
    assert all(a.delta == 0.0 for r in rows for a in r.promoted)


def test_token_changes_condition_on_the_prompt(gpt2_lm):
    """With a prompt, the first text token is scored, and its context is the prompt."""
    switch = random_switch(gpt2_lm, seed=4, scale=2.0)
    rows = token_changes(gpt2_lm, [(switch, 30.0)], "kind one", prompt="the warm")
    assert rows[0].scored
    full = _deltas_by_forward(gpt2_lm, [(switch, 30.0)], "the warm kind one")
    assert [r.delta for r in rows] == pytest.approx(full[2:], abs=1e-4)


def test_highlight_to_dict_is_the_plain_json_shape(gpt2_lm):
    text = "the kind one  was cold"
    h = highlight(gpt2_lm, random_switch(gpt2_lm, seed=6, scale=2.0), text, eps=-8.0, n_spans=2, max_span=2)
    d = json.loads(json.dumps(h.to_dict()))
    assert list(d) == ["switch", "eps", "label", "text", "spans", "weak_line", "highlighted", "heatmap", "tokens", "total_delta", "windows"]
    assert (d["switch"], d["eps"], d["label"], d["text"], d["windows"]) == ("random6", -8.0, "negative", text, 1)
    assert d["spans"] == [{"start": s.start, "end": s.end, "text": s.text, "score": s.score, "tokens": s.tokens, "weak": s.weak} for s in h.spans]
    assert [tuple(x) for x in d["highlighted"]] == h.highlighted and [tuple(x) for x in d["heatmap"]] == h.heatmap
    assert d["tokens"] == [{"text": t.text, "start": t.start, "end": t.end, "delta": t.delta, "scored": t.scored} for t in h.tokens]
    assert d["total_delta"] == pytest.approx(sum(t.delta for t in h.tokens))


def test_token_changes_to_dict_is_the_plain_json_shape(gpt2_lm):
    rows = token_changes(gpt2_lm, [(random_switch(gpt2_lm, seed=4, scale=2.0), 30.0)], "kind one", top=2)
    first, second = (json.loads(json.dumps(r.to_dict())) for r in rows)
    keys = ["text", "token", "start", "end", "scored", "logp_base", "logp_steered", "delta", "promoted", "demoted"]
    assert list(first) == list(second) == keys
    assert first["logp_base"] is None and first["promoted"] == first["demoted"] == [] and first["delta"] == 0.0
    r = rows[1]
    assert second["promoted"] == [{"token": a.token, "delta": a.delta} for a in r.promoted] and len(second["promoted"]) == 2
    assert second["demoted"] == [{"token": a.token, "delta": a.delta} for a in r.demoted]
    assert (second["text"], second["token"], second["logp_steered"]) == ("one", "one", r.logp_steered)


def _highlight_of(heatmap: list[tuple[str, float]]) -> Highlight:
    text = "".join(p for p, _ in heatmap)
    return Highlight(switch="s", eps=1.0, label="positive", text=text, spans=[], weak_line=1.0, highlighted=[(text, None)], heatmap=heatmap,
                     tokens=[], total_delta=0.0, windows=1)


def test_word_heatmap_joins_pieces_into_words():
    """Pieces meeting letter-to-letter (or digit) join; the word keeps its strongest piece's score (ties: the first)."""
    heatmap = [("The", 0.1), (" fant", 0.2), ("astic", -0.9), ("!", 0.3), (" 2", 0.5), ("0", -0.5), ("24", 0.1),
               (" ", 0.0), ("né", 0.4), ("e", -0.6)]
    assert _highlight_of(heatmap).word_heatmap() == [("The", 0.1), (" fantastic", -0.9), ("!", 0.3), (" 2024", 0.5), (" ", 0.0),
                                                     ("née", -0.6)]
    assert _highlight_of([]).word_heatmap() == []


def test_numpy_numbers_are_taken_as_python_numbers(gpt2_lm):
    """A notebook's values (``np.float32`` ε, ``np.int64`` counts) work, and the result serialises as JSON."""
    s = random_switch(gpt2_lm, seed=3, scale=20.0)
    plain = highlight(gpt2_lm, s, "the cat sat on the mat", eps=5.0, max_span=3, n_spans=2).to_dict()
    given = highlight(gpt2_lm, s, "the cat sat on the mat", eps=np.float32(5.0), max_span=np.int64(3), n_spans=np.int64(2)).to_dict()
    assert json.dumps(given) == json.dumps(plain)
