"""The repeat guard: steering's rise of each row's recent tokens is taken back and nothing else changes; ε = 0 and
unsteered rows are exact identities; a word-bonus switch stops looping; the batcher keeps each row's guard."""

from __future__ import annotations

import pytest
import torch
from conftest import random_ids, random_switch
from test_budget import word_bonus
from tiny import run_together

import lmswitch as ls
from lmswitch.core.generate import CoupledSampler, generate_tokens
from lmswitch.core.guard import REPEAT_GUARD, RepeatGuard
from lmswitch.core.options import SamplingOptions
from lmswitch.serve.batcher import Batcher
from lmswitch.serve.compute import ComputeThread


@pytest.mark.parametrize("family", ["llama", "granite", "cohere"])
def test_the_guard_takes_back_the_rise_of_recent_tokens_and_nothing_else(make_lm, family):
    """Through the steering hook: a recent token's logit is the lower of the steered and the unsteered one (families that
    scale their logits after the head included); every other logit is the steered one, to the bit."""
    lm = make_lm(family)
    s = random_switch(lm, seed=4, scale=30.0)
    ids = random_ids(lm, 3, 7, seed=5)
    window = 4
    guard = RepeatGuard.of_rows(ids.tolist(), window)
    with torch.no_grad():
        base = lm.model(ids).logits[:, -1].float()
        with ls.steer(lm, [(s, 6.0)], guard=guard):
            steered = lm.model(ids).logits[:, -1].float()
    guarded = guard.apply(steered)
    for b in range(3):
        recent = torch.tensor(sorted(set(ids[b, -window:].tolist())))
        others = torch.tensor([v for v in range(steered.shape[1]) if v not in set(recent.tolist())])
        assert torch.equal(guarded[b, others], steered[b, others])
        assert torch.allclose(guarded[b, recent], torch.minimum(steered[b, recent], base[b, recent]), atol=1e-4)
    assert (steered - base)[torch.arange(3)[:, None], ids[:, -window:]].gt(1e-3).any()  # some recent token was raised
    assert guard.apply(steered) is steered  # taken back once: a later call without a steered pass changes nothing


@pytest.mark.parametrize("cap", [3.0, 30.0])
def test_a_soft_capped_family_gets_the_capped_logits_rise_taken_back(llama_lm, monkeypatch, cap):
    """Gemma 2/3 soft-cap their logits: what is taken back is the rise of the capped logit, so a recent token ends at
    the lower of its steered and unsteered capped logits, not below the unsteered one."""
    monkeypatch.setattr(type(llama_lm), "logit_softcap", property(lambda self: cap))
    generator = torch.Generator().manual_seed(0)
    before = torch.randn(2, llama_lm.hidden_size, generator=generator) * 3
    after = before + torch.randn(2, llama_lm.hidden_size, generator=generator) * 3
    guard = RepeatGuard.of_rows([[5, 6, 7, 8], [9, 9, 10]], 4)
    guard.observe(llama_lm, before, after)
    base, steered = llama_lm.logits_from_hidden(before), llama_lm.logits_from_hidden(after)
    guarded = guard.apply(steered)
    for b, recent in enumerate(([5, 6, 7, 8], [9, 10])):
        recent = torch.tensor(recent)
        assert torch.allclose(guarded[b, recent], torch.minimum(steered[b, recent], base[b, recent]), atol=1e-4)
    assert (steered > base)[0, [5, 6, 7, 8]].any() or (steered > base)[1, [9, 10]].any()  # something was taken back


def test_zero_eps_and_unsteered_rows_are_exactly_the_model_with_the_guard_on(make_lm):
    lm = make_lm("llama", init=0.2)
    s = random_switch(lm, seed=3, scale=50.0)
    kw = dict(seed=1, samples=4, max_new_tokens=12)
    assert ls.generate(lm, "the happy one", [(s, 0.0)], **kw) == ls.generate(lm, "the happy one", [], repeat_guard=0, **kw)
    options, off = SamplingOptions(max_new_tokens=12), SamplingOptions(max_new_tokens=12, repeat_guard=0)
    rows = (["the happy one", "the happy one"], [[(s, 8.0)], []], [1, 1])
    guarded, plain = generate_tokens(lm, *rows, options), generate_tokens(lm, *rows, off)
    assert torch.equal(guarded.new_ids[1], plain.new_ids[1])  # the unsteered twin beside a steered row: to the token
    sampler = CoupledSampler([0, 1], 1.0, 0.9, guard=RepeatGuard.of_rows([[5, 6], [7]], 4))
    scores = torch.randn(2, lm.vocab_size)
    assert torch.equal(sampler.guard.apply(scores), scores)  # nothing observed (no steered pass): nothing taken back


def test_a_word_bonus_loops_without_the_guard_and_not_with_it(make_lm):
    lm = make_lm("llama", init=0.2)
    bonus = word_bonus(lm, "great", 40.0)
    kw = dict(seed=0, samples=6, max_new_tokens=12)
    plain = ls.generate(lm, "the", [(bonus, 1000.0)], repeat_guard=0, **kw)
    guarded = ls.generate(lm, "the", [(bonus, 1000.0)], **kw)
    base = ls.generate(lm, "the", [], **kw)
    count = lambda texts: sum(t.split().count("great") for t in texts)  # noqa: E731
    assert count(plain) >= 0.6 * 6 * 12  # "great great great"
    for text in guarded:  # still steered toward the word, but never again within the guard's window
        words = text.split()
        where = [i for i, w in enumerate(words) if w == "great"]
        assert where and all(b - a > REPEAT_GUARD for a, b in zip(where, where[1:], strict=False)), text
    assert count(base) < count(guarded)


@pytest.mark.parametrize("rolling", [True, False], ids=["rows-join-a-running-decode", "one-whole-decode-per-batch"])
def test_the_batcher_keeps_each_rows_guard(make_lm, rolling):
    lm = make_lm("llama", init=0.2)
    bonus, other = word_bonus(lm, "great", 40.0), random_switch(lm, seed=5, scale=40.0)
    options = SamplingOptions(max_new_tokens=10)
    requests = [("the", [(bonus, 1000.0)], 1), ("alpha beta", [(other, 6.0)], 2), ("the", [], 3), ("great great", [(bonus, 500.0)], 4)]
    batcher = Batcher(lm, ComputeThread())
    if not rolling:
        batcher.rolling = None
    rows = run_together(batcher, [(p, s, seed, options.max_new_tokens) for p, s, seed in requests])  # one shared decode
    assert batcher.batches == 1
    for row, (prompt, setting, seed) in zip(rows, requests, strict=True):
        assert row.text == generate_tokens(lm, [prompt], [setting], [seed], options).texts[0]
    plain = generate_tokens(lm, ["the"], [[(bonus, 1000.0)]], [1], SamplingOptions(max_new_tokens=10, repeat_guard=0)).texts[0]
    assert rows[0].text != plain  # the guard did change the first request's text
    assert "great" not in rows[3].text.split()[:REPEAT_GUARD - 1]  # the prompt's own words are in the window


def test_steered_rows_joining_and_leaving_a_running_decode_keep_their_own_windows(make_lm):
    """Rows of other lengths and switches join a running decode and leave it: each keeps its own recent tokens (the
    batcher's per-row tails), so every row's text is its solo text, and the guard did matter for the loop-maker."""
    from lmswitch.serve.batcher import _Request, _Rolling

    lm = make_lm("llama", init=0.2)
    bonus, other = word_bonus(lm, "great", 40.0), random_switch(lm, seed=5, scale=40.0)
    plan = [(0, "the", [(bonus, 1000.0)], 1, 12), (2, "alpha beta", [(other, 6.0)], 2, 3),
            (3, "gamma the", [(bonus, 800.0)], 3, 7), (4, "the", [], 4, 5)]  # (step it joins at, prompt, setting, seed, tokens)
    rolling, done = _Rolling(lm), {}
    for step in range(16):
        joining = [_Request(p, s, seed, SamplingOptions(max_new_tokens=n)) for at, p, s, seed, n in plan if at == step]
        finished = rolling.admit(joining) if joining else []
        finished += rolling.step() if rolling.requests else []
        done.update({request.seed: row.text for request, row in finished})
    assert sorted(done) == [1, 2, 3, 4]
    for _, prompt, setting, seed, n in plan:
        assert done[seed] == generate_tokens(lm, [prompt], [setting], [seed], SamplingOptions(max_new_tokens=n)).texts[0]
    unguarded = generate_tokens(lm, ["the"], [[(bonus, 1000.0)]], [1], SamplingOptions(max_new_tokens=12, repeat_guard=0)).texts[0]
    assert done[1] != unguarded


def test_bad_repeat_guards_are_refused(llama_lm):
    s = random_switch(llama_lm, seed=1)
    for bad in (-1, 1.5, "4", 65, float("nan"), True):
        with pytest.raises(ValueError, match="repeat_guard"):
            ls.generate(llama_lm, "the", [(s, 1.0)], repeat_guard=bad)
    with pytest.raises(TypeError, match="RepeatGuard"):
        with ls.steer(llama_lm, [(s, 1.0)], guard=4):
            pass
    with pytest.raises(ValueError, match="guard has 3 rows"):
        with torch.no_grad(), ls.steer(llama_lm, [(s, 1.0)], guard=RepeatGuard.of_rows([[1], [2], [3]], 4)):
            llama_lm.model(random_ids(llama_lm, 2, 4))
