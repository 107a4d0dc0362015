"""Adaptive strength: the per-token KL cap holds, ε = 0 and a loose budget are exact identities, the cap binds tightly."""

from __future__ import annotations

import pytest
import torch
from conftest import FAMILIES, random_ids, random_switch

import lmswitch as ls
from lmswitch.core.adaptive import kl_scale


def kl_per_position(lm, ids, setting, budget) -> torch.Tensor:
    """KL(steered ‖ unsteered) of the model's own next-token distributions at every position, (B, T)."""
    with torch.no_grad():
        base = torch.log_softmax(lm.model(ids).logits.float(), -1)
        with ls.steer(lm, setting, kl_budget=budget):
            steered = torch.log_softmax(lm.model(ids).logits.float(), -1)
    return (steered.exp() * (steered - base)).sum(-1)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_cap_holds_at_every_position_and_binds_where_steering_is_strong(make_lm, family):
    lm = make_lm(family, init=0.2)
    setting = [(random_switch(lm, seed=1, scale=50.0), 8.0)]
    ids = random_ids(lm, 3, 12, seed=4)
    free = kl_per_position(lm, ids, setting, None)
    capped = kl_per_position(lm, ids, setting, 0.1)
    assert (free > 0.1).float().mean() > 0.5  # the switch is strong: most positions exceed the budget uncapped
    assert capped.max() <= 0.1 + 1e-4  # the cap holds everywhere
    binding = free > 0.1
    assert capped[binding].min() >= 0.1 * 0.99  # bisection is tight: no more held back than needed
    assert torch.allclose(capped[~binding], free[~binding], atol=1e-6)  # untouched where the full step fits


def test_a_loose_budget_and_zero_eps_are_exact_identities(llama_lm):
    s = random_switch(llama_lm, seed=2, scale=10.0)
    ids = random_ids(llama_lm, 2, 10)
    with torch.no_grad():
        with ls.steer(llama_lm, [(s, 3.0)]):
            plain = llama_lm.model(ids).logits
        with ls.steer(llama_lm, [(s, 3.0)], kl_budget=1e9):
            loose = llama_lm.model(ids).logits
        base = llama_lm.model(ids).logits
        with ls.steer(llama_lm, [(s, 0.0)], kl_budget=0.01):
            zero = llama_lm.model(ids).logits
    assert torch.equal(plain, loose) and torch.equal(base, zero)


def test_generation_option_off_is_bit_identical_and_zero_eps_equals_the_base_model(make_lm):
    llama_lm = make_lm("llama", init=0.2)  # peaked distributions: a strong switch changes the sampled words
    s = random_switch(llama_lm, seed=3, scale=50.0)
    kw = dict(seed=1, samples=4, max_new_tokens=12)
    assert ls.generate(llama_lm, "the happy one", [(s, 6.0)], adaptive=False, **kw) == ls.generate(llama_lm, "the happy one", [(s, 6.0)], **kw)
    assert ls.generate(llama_lm, "the happy one", [(s, 0.0)], adaptive=True, **kw) == ls.generate(llama_lm, "the happy one", [], **kw)
    capped = ls.generate(llama_lm, "the happy one", [(s, 8.0)], adaptive=True, kl_budget=0.01, **kw)
    free = ls.generate(llama_lm, "the happy one", [(s, 8.0)], **kw)
    base = ls.generate(llama_lm, "the happy one", [], **kw)
    assert free != base and capped != free  # the cap changes what a strong switch writes...
    same = sum(a == b for x, y in zip(capped, base, strict=True) for a, b in zip(x.split(), y.split(), strict=False))
    assert same > sum(a == b for x, y in zip(free, base, strict=True) for a, b in zip(x.split(), y.split(), strict=False))  # ...toward the base


def test_per_row_steering_caps_each_row_with_its_own_setting(llama_lm):
    a, b = random_switch(llama_lm, seed=5, scale=40.0), random_switch(llama_lm, seed=6, scale=40.0)
    ids = random_ids(llama_lm, 2, 8, seed=1)
    with torch.no_grad():
        with ls.steer_rows(llama_lm, [[(a, 6.0)], [(b, -6.0)]], kl_budget=0.2):
            rows = llama_lm.model(ids).logits
        for k, setting in enumerate([[(a, 6.0)], [(b, -6.0)]]):
            with ls.steer(llama_lm, setting, kl_budget=0.2):
                alone = llama_lm.model(ids[k : k + 1]).logits
            assert torch.allclose(rows[k : k + 1], alone, atol=1e-5)


def test_kl_scale_shapes_and_bad_budgets(llama_lm):
    c = torch.randn(2, 5, llama_lm.hidden_size)
    alpha = kl_scale(llama_lm, c, torch.zeros_like(c), 0.5)
    assert alpha.shape == (2, 5, 1) and torch.equal(alpha, torch.ones_like(alpha))  # no steering: nothing to cap
    for bad in (0.0, -1.0, float("nan"), "big"):
        with pytest.raises(ValueError, match="kl_budget"):
            with ls.steer(llama_lm, [(random_switch(llama_lm, seed=1), 1.0)], kl_budget=bad):
                pass
