"""SVD word dimensions, promoted words and the word map: the sign convention is checked with planted switches."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import FILLER, SCALED_FAMILIES, WORDS_A, WORDS_B, random_switch

import lmswitch as ls
from lmswitch.lenses import svd
from lmswitch.lenses.svd import (
    GROUPS,
    promoted_words,
    reference_hidden,
    reference_texts,
    svd_dimensions,
    word_map,
    written_words,
)
from lmswitch.lenses.vocab import is_readable_word

REFERENCE = [
    "the kind one was at the sea with all of them",
    "she had a warm cup and they were not there when it was cold",
    "we are in the house of the one that was here",
    "it is what you have and what i had for all",
]


def planted(lm, word: str, sign: float = 1.0, scale: float = 500.0) -> ls.Switch:
    """W = sign · scale · u vᵀ: u = the output embedding of ``word``, v = the mean reference context."""
    E = lm.head.weight.detach().float()
    u = E[lm.tokenizer.convert_tokens_to_ids(word)]
    v = reference_hidden(lm, REFERENCE).mean(0)
    W = sign * scale * torch.outer(u / u.norm(), v / v.norm())
    return ls.Switch(W=W, name=f"plant-{word}", model_name=lm.name, model_fingerprint=lm.fingerprint)


def mean_logprob(lm, switch: ls.Switch, eps: float, word: str) -> float:
    """Ground truth: the mean log-probability of ``word`` over the reference contexts, steered at ``eps``."""
    target = lm.tokenizer.convert_tokens_to_ids(word)
    ids = lm.tokenizer(REFERENCE, return_tensors="pt", padding=True)
    with torch.no_grad(), ls.steer(lm, [(switch, eps)]):
        logp = torch.log_softmax(lm.model(**ids).logits.float(), -1)[..., target]
    return float(logp[ids.attention_mask.bool()].mean())


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_planted_direction_promotes_its_word_at_positive_eps(tiny_lm, sign):
    word = "grief"
    switch = planted(tiny_lm, word, sign)
    truth_up = mean_logprob(tiny_lm, switch, 5.0, word) > mean_logprob(tiny_lm, switch, 0.0, word)
    assert truth_up == (sign > 0)  # the plant does what we say it does

    top = svd_dimensions(tiny_lm, switch, dims=1, words=5, reference=REFERENCE).dimensions[0]
    promoted = [w.word for w in top.promoted]
    suppressed = [w.word for w in top.suppressed]
    assert (promoted[0] if truth_up else suppressed[0]) == word
    assert word not in (suppressed if truth_up else promoted)
    assert top.agreement > 0.5  # most reference contexts have v·c of the mean's sign (v is that mean)

    overall = promoted_words(tiny_lm, switch, words=5, reference=REFERENCE)
    assert (overall.promoted if truth_up else overall.suppressed)[0].word == word


@pytest.mark.parametrize("family", ["llama", *SCALED_FAMILIES])
def test_a_promoted_words_change_is_the_models_own_mean_logit_change(make_lm, family):
    """A word's ``delta`` is the steered model's mean logit change of it at ε 1, also in families that scale the head's
    output after it (Granite, Cohere)."""
    lm = make_lm(family)
    switch = planted(lm, "grief")
    top = promoted_words(lm, switch, words=1, reference=REFERENCE).promoted[0]
    word, changes = lm.tokenizer.convert_tokens_to_ids(top.word), []
    for text in REFERENCE:  # the contexts: every position that predicts a next token
        ids = lm.tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
        with torch.no_grad():
            base = lm.model(input_ids=ids).logits.float()[0, :-1, word]
            with ls.steer(lm, [(switch, 1.0)]):
                changes.append(lm.model(input_ids=ids).logits.float()[0, :-1, word] - base)
    assert top.delta == pytest.approx(float(torch.cat(changes).mean()), rel=1e-3)


def rank_two(lm) -> ls.Switch:
    """W = 900 u1 v1ᵀ − 300 u2 v2ᵀ: word sides from 'love' and 'hate' (made orthogonal), context sides from the reference."""
    E = lm.head.weight.detach().float()
    C = reference_hidden(lm, REFERENCE)
    v1 = C.mean(0) / C.mean(0).norm()
    v2 = torch.randn(lm.hidden_size, generator=torch.Generator().manual_seed(0))
    v2 = v2 - (v2 @ v1) * v1
    v2 = v2 / v2.norm()
    if (C @ v2).mean() < 0:
        v2 = -v2
    u1 = E[lm.tokenizer.convert_tokens_to_ids("love")]
    u2 = E[lm.tokenizer.convert_tokens_to_ids("hate")]
    u2 = u2 - (u2 @ u1) / (u1 @ u1) * u1  # orthogonal word sides keep the SVD exact
    W = 900 * torch.outer(u1 / u1.norm(), v1) - 300 * torch.outer(u2 / u2.norm(), v2)
    return ls.Switch(W=W, name="two", model_name=lm.name, model_fingerprint=lm.fingerprint)


def test_rank_two_plant_gives_two_directions_in_order(gpt2_lm):
    """Two planted directions with different strengths come out as dims 0 and 1, each with its own word."""
    lm = gpt2_lm
    d = svd_dimensions(lm, rank_two(lm), dims=2, words=3, reference=REFERENCE)
    first, second = d.dimensions
    assert first.singular_value == pytest.approx(900, rel=1e-4) and second.singular_value == pytest.approx(300, rel=1e-4)
    assert first.promoted[0].word == "love"
    assert second.suppressed[0].word == "hate"  # the −300 direction pushes 'hate' down at positive eps
    assert d.singular_values[:2] == pytest.approx([900, 300], rel=1e-4)
    assert sum(x.share for x in d.dimensions) == pytest.approx(1.0, abs=1e-6)


def test_directions_past_the_switch_rank_are_not_listed(gpt2_lm, llama_lm):
    """A rank-two switch asked for four directions lists two: the others' singular values are rounding, and their
    "words" would be noise read as a direction (svd --dims past a shipped switch's rank 16 listed them)."""
    d = svd_dimensions(gpt2_lm, rank_two(gpt2_lm), dims=4, words=3, reference=REFERENCE)
    assert [x.index for x in d.dimensions] == [0, 1] and len(d.singular_values) >= 4
    assert all(s < 1e-5 * d.singular_values[0] for s in d.singular_values[2:4])
    zero = ls.Switch(W=torch.zeros(llama_lm.hidden_size, llama_lm.hidden_size), name="zero", model_name=llama_lm.name,
                     model_fingerprint=llama_lm.fingerprint)
    with pytest.raises(ValueError, match="all zeros"):
        svd_dimensions(llama_lm, zero, reference=REFERENCE)
    with pytest.raises(ValueError, match="'zero' is all zeros .*: it raises and lowers no words"):  # (it listed "the, and" at 0)
        ls.promoted_words(llama_lm, zero, reference=REFERENCE)
    with pytest.raises(ValueError, match="'zero' is all zeros .*: it has no fluent range to measure"):  # (±16, after a probe)
        ls.calibrated_card(llama_lm, zero)


def test_word_lists_hold_only_readable_distinct_words(gpt2_lm):
    d = svd_dimensions(gpt2_lm, random_switch(gpt2_lm, seed=0), dims=3, words=8, reference=REFERENCE)
    for dim in d.dimensions:
        words = [w.word for w in dim.promoted + dim.suppressed]
        assert all(is_readable_word(w) for w in words)
        assert len({w.word.lower() for w in dim.promoted}) == len(dim.promoted) == 8
        scores = [w.score for w in dim.promoted]
        assert scores == sorted(scores, reverse=True)
    valid = set(WORDS_A + WORDS_B + FILLER)
    assert all(w.word in valid for dim in d.dimensions for w in dim.promoted)


def test_bundled_reference_texts_are_varied():
    texts = reference_texts()
    assert len(texts) >= 30 and len({t.split()[0] for t in texts}) >= 15


@pytest.mark.parametrize(("kwargs", "match"), [(dict(dims=0), "dims"), (dict(dims=500), "dims"), (dict(words=0), "words"), (dict(reference=[" "]), "reference")])
def test_bad_arguments_are_refused(gpt2_lm, kwargs, match):
    with pytest.raises(ValueError, match=match):
        svd_dimensions(gpt2_lm, random_switch(gpt2_lm, seed=0), **kwargs)


def test_switch_for_another_model_is_refused(gpt2_lm, llama_lm):
    with pytest.raises(ValueError, match="made for"):
        svd_dimensions(llama_lm, random_switch(gpt2_lm, seed=0), reference=REFERENCE)
    with pytest.raises(ValueError, match="made for"):
        promoted_words(llama_lm, random_switch(gpt2_lm, seed=0), reference=REFERENCE)


def test_word_map_puts_planted_words_at_the_extremes(gpt2_lm):
    lm = gpt2_lm
    switch = rank_two(lm)
    m = word_map(lm, switch, words=4, reference=REFERENCE)
    assert (m.switch, m.positive_label, m.negative_label) == ("two", "positive", "negative")
    assert [a.index for a in m.axes] == [0, 1]
    assert [a.singular_value for a in m.axes] == pytest.approx([900, 300], rel=1e-4)
    points = {p.word: p for p in m.points}
    assert len(points) == len(m.points)  # each word once
    assert {p.group for p in m.points} <= {"promoted 1", "suppressed 1", "promoted 2", "suppressed 2"}
    assert max(m.points, key=lambda p: p.x).word == "love" and points["love"].group == "promoted 1"
    assert min(m.points, key=lambda p: p.y).word == "hate"  # −300: 'hate' is pushed down at positive ε
    # x is the oriented score svd_dimensions reports on direction 0 (suppressed words: minus their score)
    d = svd_dimensions(lm, switch, dims=2, words=4, reference=REFERENCE).dimensions
    for w in d[0].promoted:
        assert points[w.word].x == w.score
    for w in d[0].suppressed:
        assert points[w.word].x == -w.score
    for w in d[1].promoted:
        assert points[w.word].y == w.score
    # every listed word is present; a word on two lists keeps its first group
    listed = [(w.word, g) for g, ws in (("promoted 1", d[0].promoted), ("suppressed 1", d[0].suppressed),
                                        ("promoted 2", d[1].promoted), ("suppressed 2", d[1].suppressed)) for w in ws]
    first: dict[str, str] = {}
    for word, group in listed:
        first.setdefault(word, group)
    assert {w: p.group for w, p in points.items()} == first
    assert m.axes[0].flipped == d[0].flipped and m.axes[1].flipped == d[1].flipped


def test_word_map_of_a_rank_one_switch(llama_lm):
    switch = planted(llama_lm, "grief", -1.0)
    m = word_map(llama_lm, switch, words=5, reference=REFERENCE)
    assert m.axes[1].singular_value < 1e-3 * m.axes[0].singular_value
    assert all(p.y == 0.0 for p in m.points)
    assert {p.group for p in m.points} == {"promoted 1", "suppressed 1"}
    assert len(m.points) == 10
    assert min(m.points, key=lambda p: p.x).word == "grief"  # sign −1: grief is pushed down at positive ε
    zero = ls.Switch(W=torch.zeros_like(switch.W), name="zero", model_name=llama_lm.name, model_fingerprint=llama_lm.fingerprint)
    with pytest.raises(ValueError, match="all zeros"):
        word_map(llama_lm, zero, reference=REFERENCE)
    with pytest.raises(ValueError, match="words"):
        word_map(llama_lm, switch, words=0, reference=REFERENCE)


def test_results_to_dict_are_the_plain_json_shapes(gpt2_lm):
    """to_dict gives plain data with the documented keys; json round-trips it unchanged."""
    lm, switch = gpt2_lm, rank_two(gpt2_lm)
    d = svd_dimensions(lm, switch, dims=2, words=3, reference=REFERENCE)
    plain = json.loads(json.dumps(d.to_dict()))
    assert plain == d.to_dict()
    assert list(plain) == ["switch", "positive_label", "negative_label", "singular_values", "dimensions", "reference_contexts"]
    dim = plain["dimensions"][1]
    assert list(dim) == ["index", "singular_value", "share", "flipped", "agreement", "strength", "promoted", "suppressed"]
    assert dim["suppressed"][0] == {"word": "hate", "score": d.dimensions[1].suppressed[0].score, "written": True}
    assert plain["reference_contexts"] == d.reference_contexts > 0

    w = promoted_words(lm, switch, words=3, reference=REFERENCE)
    plain = json.loads(json.dumps(w.to_dict()))
    assert plain == w.to_dict()
    assert list(plain) == ["switch", "positive_label", "negative_label", "promoted", "suppressed", "reference_contexts"]
    assert plain["promoted"] == [{"word": x.word, "delta": x.delta, "written": x.written} for x in w.promoted]
    assert all(x["delta"] < 0 for x in plain["suppressed"])

    m = word_map(lm, switch, words=3, reference=REFERENCE)
    plain = json.loads(json.dumps(m.to_dict()))
    assert plain == m.to_dict()
    assert list(plain) == ["switch", "positive_label", "negative_label", "axes", "points", "reference_contexts"]
    assert [list(a) for a in plain["axes"]] == [["index", "singular_value", "share", "flipped"]] * 2
    assert all(list(p) == ["word", "x", "y", "group"] and p["group"] in GROUPS for p in plain["points"])


def test_words_the_model_writes_less_are_listed_after_those_it_writes(make_lm, monkeypatch):
    """A switch's strongest word, one the model writes less than the bar after the reference texts, drops below the
    words it writes in every list, and stays listed after them. Which words pass is checked against the model's own
    mean next-token probabilities. (A tiny random model writes every word about equally, so the bar is raised to
    uniform here: about half its words pass.)"""
    monkeypatch.setattr(svd, "WRITTEN_SHARE", 1.0)
    lm = make_lm("llama", seed=3)
    with torch.no_grad():  # the contexts: every position that predicts a next token
        probs = torch.cat([torch.softmax(lm.model(**lm.tokenizer(text, return_tensors="pt", add_special_tokens=False)).logits[0, :-1].float(), -1)
                           for text in REFERENCE]).mean(0)
    written = written_words(lm, REFERENCE)
    assert torch.equal(written, probs >= 1.0 / len(probs)) and 10 < int(written.sum()) < len(written) - 10
    word = next(w for w in WORDS_A + WORDS_B if not written[lm.tokenizer.convert_tokens_to_ids(w)])
    switch = planted(lm, word)
    everything = promoted_words(lm, switch, words=500, reference=REFERENCE).promoted  # every word
    assert max(everything, key=lambda w: w.delta).word == word != everything[0].word  # the strongest, not listed first
    listed = [bool(written[lm.tokenizer.convert_tokens_to_ids(w.word)]) for w in everything]
    first_rare = listed.index(False)
    assert not any(listed[first_rare:])  # the words it writes first, then the rest
    assert [w.written for w in everything] == listed  # each says which group it is in, and shows it
    assert [w.shown for w in everything] == [w.word + ("" if ok else svd.RARE_MARK) for w, ok in zip(everything, listed, strict=True)]
    for part in (everything[:first_rare], everything[first_rare:]):
        assert [w.delta for w in part] == sorted((w.delta for w in part), reverse=True)
    top = svd_dimensions(lm, switch, dims=1, words=3, reference=REFERENCE).dimensions[0]
    assert word not in [w.word for w in top.promoted]
    poles = svd_dimensions(lm, switch, dims=1, words=500, reference=REFERENCE).dimensions[0]
    for pole in (poles.promoted, poles.suppressed):
        flags = [w.written for w in pole]
        assert flags == [bool(written[lm.tokenizer.convert_tokens_to_ids(w.word)]) for w in pole]
        assert flags == sorted(flags, reverse=True) and True in flags and False in flags  # the written words first


def test_the_inspect_lenses_let_a_servers_other_users_go_first(gpt2_lm):
    """The Inspect tab's lenses run as a server's background work (~0.5 s on the embedded model): pause points after
    the SVD and before each batch of word checks, where other users' next tokens run (lmswitch.core.pause)."""
    from lmswitch.core.pause import pausing

    switch = random_switch(gpt2_lm, seed=4, scale=20.0)
    svd_dimensions(gpt2_lm, switch, dims=2, words=3)  # the reference's written words are read (with pauses of their own)
    for lens in (lambda: svd_dimensions(gpt2_lm, switch, dims=2, words=3), lambda: word_map(gpt2_lm, switch, words=3)):
        pauses: list[int] = []
        with pausing(lambda p=pauses: p.append(1)):
            lens()
        assert len(pauses) >= 2
