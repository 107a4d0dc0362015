"""The steered-vs-unsteered comparison: same seed, scores, per-token changes, a cache keyed on content."""

from __future__ import annotations

import copy
import threading

import pytest
import torch
from conftest import random_switch

import lmswitch as ls
from lmswitch.core.hidden import encode_text as spans_encode
from lmswitch.core.options import SamplingOptions
from lmswitch.serve.compare import Comparison, ComparisonCache, Partial, compare
from lmswitch.serve.compute import ComputeThread

PROMPT = "the happy one was"
OPTIONS = SamplingOptions(max_new_tokens=8)


def finished(items) -> Comparison:
    *partials, last = list(items)
    assert all(isinstance(p, Partial) for p in partials) and isinstance(last, Comparison)
    return last


def test_both_outputs_match_plain_generation_with_the_same_seed(llama_lm):
    s = random_switch(llama_lm, seed=1, scale=30.0, name="alpha")
    result = finished(compare(llama_lm, PROMPT, [(s, 6.0)], seed=3, options=OPTIONS))
    assert result.steered == ls.generate(llama_lm, PROMPT, [(s, 6.0)], seed=3, max_new_tokens=8)[0]
    assert result.unsteered == ls.generate(llama_lm, PROMPT, [], seed=3, max_new_tokens=8)[0]
    assert result.setting == {"alpha": 6.0} and result.changes and result.steered_scores.tokens > 0
    assert set(result.to_dict()) == {"setting", "steered", "unsteered", "scores"}


def test_zero_eps_is_the_unsteered_model(llama_lm):
    s = random_switch(llama_lm, seed=1, scale=30.0)
    result = finished(compare(llama_lm, PROMPT, [(s, 0.0)], seed=3, options=OPTIONS))
    assert result.steered == result.unsteered and result.setting == {} and result.changes is None
    assert result.steered_scores == result.unsteered_scores


def test_the_cache_is_keyed_on_content_not_identity(llama_lm):
    cache = ComparisonCache()
    s = random_switch(llama_lm, seed=1, scale=30.0, name="alpha")
    first = finished(compare(llama_lm, PROMPT, [(s, 6.0)], seed=3, options=OPTIONS, cache=cache))
    twin = copy.deepcopy(s)  # another object with the same W: answered from the cache, with no streaming
    again = list(compare(llama_lm, PROMPT, [(twin, 6.0)], seed=3, options=OPTIONS, cache=cache))
    assert again == [first]
    changed = copy.deepcopy(s)
    changed.W = changed.W * 1.5  # the same name and object shape, other content: a new generation
    other = finished(compare(llama_lm, PROMPT, [(changed, 6.0)], seed=3, options=OPTIONS, cache=cache))
    assert other is not first and other.unsteered == first.unsteered
    assert finished(compare(llama_lm, PROMPT, [(s, 6.0)], seed=4, options=OPTIONS, cache=cache)) is not first  # seed is in the key


def test_a_set_stop_flag_ends_the_stream_without_a_result(llama_lm):
    s = random_switch(llama_lm, seed=1, scale=30.0)
    stop = threading.Event()
    items = []
    for item in compare(llama_lm, PROMPT, [(s, 6.0)], seed=3, options=SamplingOptions(max_new_tokens=30), stop=stop):
        items.append(item)
        stop.set()
    assert items and all(isinstance(i, Partial) for i in items)


def test_model_work_runs_on_the_compute_thread(llama_lm):
    compute = ComputeThread()
    threads = set()
    hook = llama_lm.head.register_forward_pre_hook(lambda *_: threads.add(threading.current_thread().name))
    try:
        finished(compare(llama_lm, PROMPT, [(random_switch(llama_lm, seed=2), 3.0)], seed=0, options=OPTIONS, compute=compute))
    finally:
        hook.remove()
    assert threads and all(name.startswith("lmswitch-compute") for name in threads)
    assert torch.is_tensor(llama_lm.head.weight)


@pytest.mark.parametrize("rolling", [True, False], ids=["scored-from-the-decode", "whole-decode-scored-by-text"])
def test_through_the_batcher_two_users_share_decodes_and_get_what_each_gets_alone(llama_lm, rolling):
    from lmswitch.serve.batcher import Batcher

    a, b = random_switch(llama_lm, seed=1, scale=20.0, name="a"), random_switch(llama_lm, seed=2, scale=20.0, name="b")
    options = SamplingOptions(max_new_tokens=8)
    alone = [finished(compare(llama_lm, "alpha beta", s, seed=seed, options=options, changes=False)) for s, seed in (([(a, 4.0)], 1),
                                                                                                                 ([(b, -3.0)], 2))]
    compute = ComputeThread()
    batcher = Batcher(llama_lm, compute)
    batcher.rolling = batcher.rolling if rolling else None  # None: the path of sliding-window caches (Gemma 3)
    release = threading.Event()
    compute.submit(release.wait)  # both users' rows wait, then share one decode
    results: list = [None, None]

    def user(k: int, setting, seed: int) -> None:
        results[k] = finished(compare(llama_lm, "alpha beta", setting, seed=seed, options=options, compute=compute, batcher=batcher,
                                      changes=False))

    users = [threading.Thread(target=user, args=(0, [(a, 4.0)], 1)), threading.Thread(target=user, args=(1, [(b, -3.0)], 2))]
    for t in users:
        t.start()
    while len(batcher.waiting) < 4:  # two rows (steered, unsteered) per user
        threading.Event().wait(0.01)
    release.set()
    for t in users:
        t.join()
    assert batcher.batches == 1 and batcher.rows == 4
    assert [(r.steered, r.unsteered) for r in results] == [(r.steered, r.unsteered) for r in alone]
    for together, solo in zip(results, alone, strict=True):  # scored with the other user's texts: the same scores
        for mine, theirs in ((together.steered_scores, solo.steered_scores), (together.unsteered_scores, solo.unsteered_scores)):
            assert mine.tokens == theirs.tokens and mine.sentiment == theirs.sentiment
            assert mine.perplexity == pytest.approx(theirs.perplexity, rel=1e-5)
    # rows joined a running decode: scored from the head inputs it recorded, no scoring pass; whole decodes record
    # none, so both comparisons' texts went through the merged scorer (one body pass)
    assert batcher._scores.items == (0 if rolling else 2)


@pytest.mark.parametrize("seed, encoded_again", [(1, False), (3, True)], ids=["from-the-decode", "special-token-encoded-again"])
def test_through_the_batcher_the_per_token_changes_come_from_the_decode_without_a_body_pass(llama_lm, monkeypatch, seed, encoded_again):
    """The decode recorded each token's head input, so explaining the steered text needs no body pass; the changes are
    the ones the text's own encoding gives (up to float32 rounding). With seed 3 the tiny model writes a special token,
    which the text leaves out: that text does not tokenize back to what was decoded, so it is encoded again."""
    import lmswitch.lenses.spans as spans
    from lmswitch.serve.batcher import Batcher

    s = random_switch(llama_lm, seed=1, scale=30.0, name="alpha")
    solo = finished(compare(llama_lm, PROMPT, [(s, 6.0)], seed=seed, options=OPTIONS))  # the text encoded again: a body pass
    encodings = []
    monkeypatch.setattr(spans, "encode_text", lambda *a, **k: encodings.append(a) or spans_encode(*a, **k))
    compute = ComputeThread()
    together = finished(compare(llama_lm, PROMPT, [(s, 6.0)], seed=seed, options=OPTIONS, compute=compute,
                                batcher=Batcher(llama_lm, compute)))
    assert len(encodings) == encoded_again
    assert together.steered == solo.steered and len(together.changes) == len(solo.changes) > 3
    for mine, theirs in zip(together.changes, solo.changes, strict=True):
        assert (mine.text, mine.token, mine.start, mine.end, mine.scored) == (theirs.text, theirs.token, theirs.start, theirs.end, theirs.scored)
        assert mine.logp_base == pytest.approx(theirs.logp_base, abs=1e-4) and mine.delta == pytest.approx(theirs.delta, abs=1e-4)
        assert [a.token for a in mine.promoted] == [a.token for a in theirs.promoted]


def test_through_the_batcher_a_comparison_stopped_while_it_waits_ends(llama_lm):
    """A user's newer request sets the stop flag of their comparison while its rows still wait for a decode (another
    sampling setting's decode is under way): the comparison ends, instead of its reader waiting for good."""
    from tiny import held

    from lmswitch.serve.batcher import Batcher

    compute = ComputeThread()
    batcher = Batcher(llama_lm, compute)
    stop, seen = threading.Event(), []
    release = held(compute)
    batcher.stream("alpha", [], seed=1, options=SamplingOptions(max_new_tokens=8))  # the decode under way
    waiting = SamplingOptions(max_new_tokens=8, temperature=0.5)
    reader = threading.Thread(target=lambda: seen.extend(compare(llama_lm, "alpha beta", [(random_switch(llama_lm, seed=1), 4.0)],
                                                                 options=waiting, compute=compute, stop=stop, batcher=batcher)))
    reader.start()
    while len(batcher.waiting) < 3:  # its steered and unsteered rows wait behind the first request
        threading.Event().wait(0.01)
    stop.set()
    release.set()
    reader.join(timeout=30)
    assert not reader.is_alive() and not any(isinstance(x, Comparison) for x in seen)
