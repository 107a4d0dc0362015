"""Activation addition (the CAA baseline) on tiny models: α = 0 is the model, a planted contrast is recovered,
the hook is gone after its block, and the evaluation harness scores its text with the unsteered model."""

from __future__ import annotations

import random
from contextlib import contextmanager

import pytest
import torch
from conftest import FILLER, WORDS_A, WORDS_B

from lmswitch.harness.baselines import added, fit_activation_addition
from lmswitch.harness.evaluate import Protocol, evaluate_settings


def _texts(rng: random.Random, style: list[str], n: int) -> list[str]:
    return [" ".join(rng.choice(style) if rng.random() < 0.5 else rng.choice(FILLER) for _ in range(10)) for _ in range(n)]


@torch.no_grad()
def _mean_logprob(lm, texts: list[str]) -> float:
    ids = torch.tensor([lm.tokenizer(t, add_special_tokens=False).input_ids for t in texts])
    logp = torch.log_softmax(lm.model(input_ids=ids).logits.float()[:, :-1], -1)
    return float(logp.gather(-1, ids[:, 1:, None]).mean())


@pytest.fixture(scope="module")
def fitted(make_lm):
    lm = make_lm("llama", init=0.3)
    rng = random.Random(0)
    pos, neg = _texts(rng, WORDS_A, 40), _texts(rng, WORDS_B, 40)
    return lm, fit_activation_addition(lm, pos, neg), (_texts(rng, WORDS_A, 10), _texts(rng, WORDS_B, 10))


def test_zero_alpha_is_the_model_and_the_hook_goes_away(fitted):
    lm, addition, (held_a, _) = fitted
    ids = torch.tensor([lm.tokenizer(held_a[0], add_special_tokens=False).input_ids])
    with torch.no_grad():
        before = lm.model(input_ids=ids).logits
        with added(lm, addition, 0.0):
            zero = lm.model(input_ids=ids).logits
        with added(lm, addition, 3.0):
            moved = lm.model(input_ids=ids).logits
        after = lm.model(input_ids=ids).logits
    assert torch.equal(before, zero) and torch.equal(before, after)
    assert not torch.allclose(before, moved)
    assert 0 <= addition.layer < len(lm.decoder_layers()) and addition.vector.shape == (lm.model.config.hidden_size,)


def test_planted_contrast_is_recovered(fitted):
    lm, addition, (held_a, held_b) = fitted
    base = _mean_logprob(lm, held_a) - _mean_logprob(lm, held_b)
    with added(lm, addition, 2.0):
        toward_a = _mean_logprob(lm, held_a) - _mean_logprob(lm, held_b)
    with added(lm, addition, -2.0):
        toward_b = _mean_logprob(lm, held_a) - _mean_logprob(lm, held_b)
    assert toward_a > base + 0.05 and toward_b < base - 0.05, (toward_b, base, toward_a)


def test_the_harness_samples_inside_and_scores_outside_the_hook(fitted):
    lm, addition, _ = fitted
    calls: list[bool] = []
    inside = [False]

    @contextmanager
    def watched():
        inside[0] = True
        with added(lm, addition, 4.0):
            yield
        inside[0] = False

    handle = lm.decoder_layers()[0].register_forward_hook(lambda *_: calls.append(inside[0]))  # every pass goes through it
    try:
        protocol = Protocol(samples=2, max_new_tokens=5, batch_size=8)
        (steered,) = evaluate_settings(lm, [[]], ["the happy one", "she was"], protocol, during=watched)
        sampled, scored = calls.count(True), calls.count(False)
        calls.clear()
        (plain,) = evaluate_settings(lm, [[]], ["the happy one", "she was"], protocol)
    finally:
        handle.remove()
    assert sampled >= 5 and scored >= 1  # a body changed while sampling: its text is scored by a pass outside the hook
    assert calls.count(False) == sampled  # the unchanged body: its text is scored from the decode's own head inputs
    assert [t.text for t in steered.texts] != [t.text for t in plain.texts]


def test_bad_requests(fitted, make_lm):
    lm, addition, _ = fitted
    with pytest.raises(ValueError, match="positive and negative"):
        fit_activation_addition(lm, ["a b c"], [])
    with pytest.raises(ValueError, match="layer"):
        fit_activation_addition(lm, ["a b c"], ["d e f"], layer=99)
    with pytest.raises(ValueError, match="different model"):
        with added(make_lm("llama", seed=5), addition, 1.0):
            pass
