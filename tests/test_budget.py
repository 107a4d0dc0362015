"""The steering budget per generation: each row is charged the log-ratio of its sampled tokens, a spent row is not
steered, a huge budget and ε = 0 are exact identities, a word-bonus switch stops looping, the batcher keeps it per row."""

from __future__ import annotations

import threading

import pytest
import torch
from conftest import random_ids, random_switch

import lmswitch as ls
from lmswitch.core.budget import Budget
from lmswitch.core.generate import generate_tokens
from lmswitch.core.options import SamplingOptions
from lmswitch.core.switch import Switch
from lmswitch.serve.batcher import Batcher
from lmswitch.serve.compute import ComputeThread


def word_bonus(lm, word: str, strength: float) -> Switch:
    """A planted switch that adds a bonus to one word in (nearly) every context: the loop-maker of the fluent-steering
    issue. ``W = s · e_w mᵀ`` with ``m`` the mean head input, so ``Δlogit_v = ε s (e_vᵀ e_w)(mᵀ c)``."""
    ids = random_ids(lm, 8, 16, seed=11)
    with torch.no_grad():
        m = lm.final_hidden(ids).float().reshape(-1, lm.hidden_size).mean(0)
    e = lm.head_weight(torch.float32)[lm.tokenizer.convert_tokens_to_ids(word)]
    W = strength * torch.outer(e / e.norm() ** 2, m / m.norm() ** 2)
    return Switch(W=W, model_name=lm.name, model_fingerprint=lm.fingerprint, name=f"bonus-{word}")


def test_each_row_is_charged_the_log_ratio_of_its_sampled_token(llama_lm):
    s = random_switch(llama_lm, seed=2, scale=30.0)
    ids = random_ids(llama_lm, 3, 7)
    budget = Budget(3, 5.0)
    with torch.no_grad():
        base = torch.log_softmax(llama_lm.model(ids).logits[:, -1].float(), -1)
        with ls.steer(llama_lm, [(s, 4.0)], budget=budget):
            steered_logits = llama_lm.model(ids).logits[:, -1].float()
    chosen = steered_logits.argmax(-1)
    steered = torch.log_softmax(steered_logits, -1)
    budget.spend(steered, chosen)
    rows = torch.arange(3)
    expected = 5.0 - (steered[rows, chosen] - base[rows, chosen])
    assert torch.allclose(budget.left, expected, atol=1e-5)
    assert (budget.left < 5.0).all()  # the steered argmax is a token steering made likelier


def test_a_spent_row_is_not_steered_and_a_row_with_budget_is_steered_exactly_as_without_one(llama_lm):
    s = random_switch(llama_lm, seed=3, scale=30.0)
    ids = random_ids(llama_lm, 2, 6, seed=2)
    budget = Budget(2, 1.0)
    budget.left[0] = -0.5  # row 0 has spent its budget
    with torch.no_grad():
        base = llama_lm.model(ids).logits
        with ls.steer(llama_lm, [(s, 5.0)]):
            plain = llama_lm.model(ids).logits
        with ls.steer(llama_lm, [(s, 5.0)], budget=budget):
            budgeted = llama_lm.model(ids).logits
        with ls.steer_rows(llama_lm, [[(s, 5.0)], [(s, -5.0)]], budget=budget):
            per_row = llama_lm.model(ids).logits
        with ls.steer(llama_lm, [(s, -5.0)]):
            minus = llama_lm.model(ids).logits
    assert torch.equal(budgeted[0], base[0]) and torch.equal(budgeted[1], plain[1])
    assert torch.equal(per_row[0], base[0]) and torch.equal(per_row[1], minus[1])
    assert not torch.equal(plain[0], base[0])  # the switch does change row 0 when it may


def test_a_huge_budget_equals_plain_steering_and_zero_eps_equals_the_base_model(make_lm):
    lm = make_lm("llama", init=0.2)
    s = random_switch(lm, seed=3, scale=50.0)
    kw = dict(seed=1, samples=4, max_new_tokens=12)
    plain = ls.generate(lm, "the happy one", [(s, 6.0)], **kw)
    assert ls.generate(lm, "the happy one", [(s, 6.0)], adaptive=True, generation_budget=1e9, **kw) == plain
    assert ls.generate(lm, "the happy one", [(s, 0.0)], adaptive=True, generation_budget=0.01, **kw) == ls.generate(lm, "the happy one", [], **kw)
    assert ls.generate(lm, "the happy one", [(s, 6.0)], adaptive=True, generation_budget=0.01, **kw) != plain


def test_a_word_bonus_loops_without_a_budget_and_stops_with_one(make_lm):
    lm = make_lm("llama", init=0.2)
    bonus = word_bonus(lm, "great", 40.0)
    kw = dict(seed=0, samples=6, max_new_tokens=12, repeat_guard=0)  # the budget alone (the guard: test_guard.py)
    base = ls.generate(lm, "the", [], **kw)
    plain = ls.generate(lm, "the", [(bonus, 1000.0)], **kw)
    budgeted = ls.generate(lm, "the", [(bonus, 1000.0)], adaptive=True, generation_budget=4.0, **kw)
    count = lambda texts: sum(t.split().count("great") for t in texts)  # noqa: E731
    assert count(plain) >= 0.6 * 6 * 12  # the bonus wins nearly every position: "great great great"
    assert 1 <= count(budgeted) <= 3 * 6  # a word or two per text, then the model writes on
    assert count(base) < count(budgeted)


@pytest.mark.parametrize("rolling", [True, False], ids=["rows-join-a-running-decode", "one-whole-decode-per-batch"])
def test_the_batcher_keeps_each_rows_budget(make_lm, rolling):
    lm = make_lm("llama", init=0.2)
    bonus, other = word_bonus(lm, "great", 40.0), random_switch(lm, seed=5, scale=40.0)
    options = SamplingOptions(max_new_tokens=10, adaptive=True, generation_budget=3.0)
    requests = [("the", [(bonus, 1000.0)], 1), ("alpha beta", [(other, 6.0)], 2), ("the", [], 3), ("gamma", [(bonus, 500.0)], 4)]
    batcher = Batcher(lm, ComputeThread())
    if not rolling:
        batcher.rolling = None
    release = threading.Event()
    batcher.compute.submit(release.wait)  # the requests pile up and share one decode
    streams = [batcher.stream(p, s, seed=seed, options=options) for p, s, seed in requests]
    release.set()
    rows = [list(stream)[-1] for stream in streams]
    assert batcher.batches == 1
    for row, (prompt, setting, seed) in zip(rows, requests, strict=True):
        assert row.text == generate_tokens(lm, [prompt], [setting], [seed], options).texts[0]
    plain = generate_tokens(lm, ["the"], [[(bonus, 1000.0)]], [1], SamplingOptions(max_new_tokens=10)).texts[0]
    assert rows[0].text != plain  # the budget did change the first request's text


def test_bad_budgets_are_refused(llama_lm):
    s = random_switch(llama_lm, seed=1)
    for bad in (0.0, -1.0, float("nan"), float("inf"), "big"):
        with pytest.raises(ValueError, match="generation_budget"):
            ls.generate(llama_lm, "the", [(s, 1.0)], adaptive=True, generation_budget=bad)
    with pytest.raises(TypeError, match="Budget"):
        with ls.steer(llama_lm, [(s, 1.0)], budget=4.0):
            pass
    with pytest.raises(ValueError, match="budget has 3 rows"):
        with torch.no_grad(), ls.steer(llama_lm, [(s, 1.0)], budget=Budget(3, 1.0)):
            llama_lm.model(random_ids(llama_lm, 2, 4))
