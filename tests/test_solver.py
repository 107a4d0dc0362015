"""The fast trainer: the candidate-reduced loss against the exact one, the ridge path, and self-contrast negatives."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
import torch
import torch.nn.functional as F
from conftest import SCALED_FAMILIES, WORDS_A, WORDS_B, build_lm
from test_train import mean_log_likelihood, sample_texts

from lmswitch import TrainingCancelled, train_switch
from lmswitch.core import solver
from lmswitch.core.card import Card
from lmswitch.core.contrast import self_contrast, sentence_openings
from lmswitch.core.options import TrainConfig


@pytest.fixture(scope="module")
def peaky_lm(tokenizer):
    return build_lm("gpt2", init=0.3, tokenizer=tokenizer)


def _exact(lm, C, Y, U):
    return F.cross_entropy(lm.raw_logits(C + 0.0, dtype=torch.float32) + U @ lm.head_weight(torch.float32).T, Y)


@pytest.fixture(autouse=True)
def float32_products(monkeypatch):
    """The full-vocabulary products in float32, whatever the CPU, so the reduction is exact at zero (the bfloat16
    ones are tested against it below)."""
    monkeypatch.setattr(solver, "_bf16_head", lambda lm: None)


def _rows(lm, n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    C = torch.randn(n, lm.hidden_size, generator=g)
    Y = torch.randint(0, lm.vocab_size, (n,), generator=g)
    return C, Y, solver.reduce(lm, C, Y, torch.ones(n), k=8)


def test_reduced_loss_and_gradient_are_exact_at_zero(peaky_lm):
    C, Y, rows = _rows(peaky_lm)
    U = torch.zeros_like(C, requires_grad=True)
    exact = _exact(peaky_lm, C, Y, U)
    exact.backward()
    value, grad = solver.loss_and_grad(peaky_lm, rows, torch.zeros_like(C))
    assert value == pytest.approx(exact.item(), abs=1e-5)
    assert torch.allclose(grad, U.grad, atol=1e-6)


def test_bfloat16_products_keep_the_candidates_exact_and_the_tail_close(peaky_lm, monkeypatch):
    C, Y, exact = _rows(peaky_lm, seed=7)
    monkeypatch.setattr(solver, "_bf16_head", lambda lm: lm.head_weight(torch.bfloat16))
    fast = solver.reduce(peaky_lm, C, Y, torch.ones(len(C)), k=8)
    assert torch.equal(fast.ids[:, 0], exact.ids[:, 0])  # the targets, then the candidates the rounded logits rank first
    assert (fast.ids[:, 1:] == exact.ids[:, 1:]).float().mean() > 0.9
    torch.testing.assert_close(fast.log_tail, exact.log_tail, rtol=0, atol=1e-2)
    for U in (torch.zeros_like(C), 0.05 * torch.randn(C.shape, generator=torch.Generator().manual_seed(8))):
        (a, ga), (b, gb) = solver.loss_and_grad(peaky_lm, fast, U), solver.loss_and_grad(peaky_lm, exact, U)
        assert a == pytest.approx(b, rel=1e-3)
        assert float((ga - gb).norm() / gb.norm()) < 1e-2


def test_rows_grouped_by_label_give_the_steering_and_gradients_of_rows_taken_one_by_one(peaky_lm):
    g = torch.Generator().manual_seed(9)
    C, Y = torch.randn(60, peaky_lm.hidden_size, generator=g), torch.randint(0, peaky_lm.vocab_size, (60,), generator=g)
    labels = torch.tensor([1.0, -1.0, -1.0] * 20)
    grouped = solver.reduce(peaky_lm, C, Y, labels, k=8)
    assert grouped.groups == ((-1.0, 0, 40), (1.0, 40, 60)) and torch.equal(grouped.labels, labels.sort().values)
    plain = dataclasses.replace(grouped, groups=None)
    W, Wd = (0.1 * torch.randn(C.shape[1], C.shape[1], generator=g) for _ in range(2))
    G = torch.randn(C.shape, generator=g)
    for dummy in (Wd, None):
        torch.testing.assert_close(solver.steer_term(grouped, W, dummy, 0.5), solver.steer_term(plain, W, dummy, 0.5))
        (gW, gWd), (pW, pWd) = (solver.steer_gradients(rows, G, dummy is not None) for rows in (grouped, plain))
        torch.testing.assert_close(gW, pW)
        assert (gWd is None and pWd is None) if dummy is None else torch.allclose(gWd, pWd, atol=1e-5)
    graded = solver.reduce(peaky_lm, C, Y, torch.linspace(-1, 1, 60), k=8)
    assert graded.groups is None  # graded labels: every row its own label, no grouping


def _sampled(lm, C, Y, seed=0, samples=16):
    return solver.reduce(lm, C, Y, torch.ones(len(C)), k=8, samples=samples, generator=torch.Generator().manual_seed(seed))


def test_a_sampled_tail_is_exact_at_zero_and_draws_only_outside_the_candidates(peaky_lm):
    C, Y, bound = _rows(peaky_lm, seed=14)
    rows = _sampled(peaky_lm, C, Y)
    assert rows.tail_mean is None and rows.ids.shape == (len(C), 1 + 8 + 16)
    assert torch.equal(rows.ids[:, :9], bound.ids) and torch.equal(rows.logp[:, :9], bound.logp)
    assert torch.equal(rows.log_tail, bound.log_tail)  # the tail's probability, whichever way it is stood in for
    drawn, kept = rows.ids[:, 9:], rows.ids[:, :9]
    assert not (drawn[:, :, None] == kept[:, None, :]).any()  # neither the target nor a candidate is drawn
    # each drawn word stands for a sixteenth of the tail: the probabilities still sum to one
    torch.testing.assert_close(rows.logp.exp().sum(1), torch.ones(len(C)), rtol=0, atol=1e-5)
    U = torch.zeros_like(C, requires_grad=True)
    exact = _exact(peaky_lm, C, Y, U)
    exact.backward()
    value, grad = solver.loss_and_grad(peaky_lm, rows, torch.zeros_like(C))
    assert value == pytest.approx(exact.item(), abs=1e-5)
    # the gradient is the tail's mean embedding in expectation only: one draw is off, the mean of many draws is not
    mean = sum(solver.loss_and_grad(peaky_lm, _sampled(peaky_lm, C, Y, seed=s), torch.zeros_like(C))[1] for s in range(64)) / 64
    one, many = (float((g - U.grad).norm() / U.grad.norm()) for g in (grad, mean))
    assert many < one / 4 and many < 0.05
    again = _sampled(peaky_lm, C, Y)
    assert torch.equal(again.ids, rows.ids) and not torch.equal(_sampled(peaky_lm, C, Y, seed=1).ids, rows.ids)


def test_a_sampled_tail_stays_near_the_exact_loss_where_the_bound_falls_short(peaky_lm):
    """Away from zero the bound's tail term undercounts (that is what L-BFGS exploited); drawn words are right in
    expectation, so averaged over draws the sampled loss lands much nearer the exact one."""
    C, Y, bound = _rows(peaky_lm, seed=15)
    U = 0.5 * torch.randn(C.shape, generator=torch.Generator().manual_seed(16))
    exact = float(_exact(peaky_lm, C, Y, U))
    below = exact - solver.loss_and_grad(peaky_lm, bound, U)[0]
    sampled = [solver.loss_and_grad(peaky_lm, _sampled(peaky_lm, C, Y, seed=s), U)[0] for s in range(8)]
    assert below > 0.05
    assert max(abs(exact - x) for x in sampled) < below / 2  # every draw is nearer than the bound
    assert abs(exact - sum(sampled) / len(sampled)) < below / 4


def test_the_sampled_gradient_matches_autograd_of_the_sampled_loss(peaky_lm):
    C, Y, _ = _rows(peaky_lm, seed=17)
    rows = _sampled(peaky_lm, C, Y)
    U = (0.05 * torch.randn(C.shape, generator=torch.Generator().manual_seed(18))).requires_grad_()
    z = rows.logp + torch.einsum("rd,rkd->rk", U, peaky_lm.head_weight(torch.float32)[rows.ids])
    (torch.logsumexp(z, 1) - z[:, 0]).mean().backward()
    value, grad = solver.loss_and_grad(peaky_lm, rows, U.detach())
    assert torch.allclose(grad, U.grad, atol=1e-6)


def test_the_scaled_path_reaches_the_optimum_of_the_unscaled_one(peaky_lm):
    """Moving ε0·W instead of W changes only L-BFGS's steps, not the problem: both end at one minimiser."""
    g = torch.Generator().manual_seed(19)
    C, Y = torch.randn(80, peaky_lm.hidden_size, generator=g), torch.randint(0, peaky_lm.vocab_size, (80,), generator=g)
    rows = _sampled(peaky_lm, C, Y)
    ends = []
    for recipe in (solver.SAMPLED, dataclasses.replace(solver.SAMPLED, scaled=False)):
        W, Wd = (torch.zeros(C.shape[1], C.shape[1], requires_grad=True) for _ in range(2))
        recipe = dataclasses.replace(recipe, evaluations=400)
        list(solver.ridge_path(peaky_lm, rows, 0.1, False, W, Wd, max_evaluations=400, on_evaluation=lambda *a: None,
                               path=(1.0,), recipe=recipe))
        ends.append(W.detach())
    assert float((ends[0] - ends[1]).norm() / ends[1].norm()) < 1e-2


def _walk(lm, rows, recipe, evaluations, path=(10.0, 1.0, 0.1)):
    """The ridge path with ``evaluations`` per λ: (W, each λ's objective values)."""
    W, Wd = (torch.zeros(rows.C.shape[1], rows.C.shape[1], requires_grad=True) for _ in range(2))
    values, per_lambda = [], []
    recipe = dataclasses.replace(recipe, evaluations=evaluations)
    for _ in solver.ridge_path(lm, rows, 0.1, True, W, Wd, max_evaluations=evaluations * len(path), path=path,
                               on_evaluation=lambda e, v: values.append(v), recipe=recipe):
        per_lambda.append(values[sum(map(len, per_lambda)):])
    return W.detach().clone(), per_lambda


def test_carried_curvature_reaches_the_same_optimum_and_gets_nearer_in_few_evaluations(peaky_lm):
    """Each λ's L-BFGS starts from the last λ's curvature pairs, corrected for the change of λ: the problem is the same
    (both walks end at one minimiser), and within a short budget the carried walk ends lower at every seed."""
    fresh = dataclasses.replace(solver.SAMPLED, carried=False)
    assert solver.SAMPLED.carried
    for seed in (19, 20, 21):
        g = torch.Generator().manual_seed(seed)
        C, Y = torch.randn(80, peaky_lm.hidden_size, generator=g), torch.randint(0, peaky_lm.vocab_size, (80,), generator=g)
        rows = _sampled(peaky_lm, C, Y)
        (W_carried, carried), (W_fresh, fresh_values) = (_walk(peaky_lm, rows, r, 300) for r in (solver.SAMPLED, fresh))
        assert float((W_carried - W_fresh).norm() / W_fresh.norm()) < 1e-3, seed
        assert min(carried[-1]) == pytest.approx(min(fresh_values[-1]), rel=1e-5), seed
        short = [min(_walk(peaky_lm, rows, r, 6)[1][-1]) for r in (solver.SAMPLED, fresh)]
        assert short[0] < short[1] - 1e-3 and short[0] > min(carried[-1]) - 1e-6, (seed, short)


def test_a_lambdas_first_evaluation_reuses_the_last_lambdas_end_and_changes_no_bit(peaky_lm, monkeypatch):
    """L-BFGS ends a λ at the lowest point it evaluated, where the next λ starts: only the penalty changes there, so its
    data term is not computed again, and the walk is the same to the bit as one that computes it."""
    C, Y, _ = _rows(peaky_lm, n=80, seed=23)
    rows = _sampled(peaky_lm, C, Y)
    computed = []
    real = solver._data_term
    monkeypatch.setattr(solver, "_data_term", lambda *a: computed.append(1) or real(*a))
    W_reused, values = _walk(peaky_lm, rows, solver.SAMPLED, 10)
    reused = len(computed)
    monkeypatch.setattr(solver._Best, "holds", lambda self, params: False)
    computed.clear()
    W_computed, values_computed = _walk(peaky_lm, rows, solver.SAMPLED, 10)
    assert torch.equal(W_reused, W_computed) and values == values_computed
    assert len(computed) == sum(map(len, values)) and reused == len(computed) - 2  # the second λ's and the third's


def test_a_recipe_that_reduces_at_each_lambda_cannot_carry_curvature():
    with pytest.raises(ValueError, match="cannot carry"):
        dataclasses.replace(solver.BOUND, carried=True)


def test_reduced_loss_is_a_close_lower_bound_for_small_changes(peaky_lm):
    C, Y, rows = _rows(peaky_lm, seed=1)
    g = torch.Generator().manual_seed(2)
    for scale in (0.01, 0.05):
        U = scale * torch.randn(C.shape, generator=g)
        exact = float(_exact(peaky_lm, C, Y, U))
        value, _ = solver.loss_and_grad(peaky_lm, rows, U)
        assert value <= exact + 1e-6  # Jensen: the tail term never exceeds the tail's exact sum
        assert exact - value < 0.02 * max(scale / 0.01, 1)


def test_the_reduced_gradient_matches_autograd_of_the_reduced_loss(peaky_lm):
    C, _, rows = _rows(peaky_lm, seed=3)
    U = (0.05 * torch.randn(C.shape, generator=torch.Generator().manual_seed(4))).requires_grad_()
    E = peaky_lm.head_weight(torch.float32)
    Eg = E[rows.ids]
    z = torch.cat([rows.logp + torch.einsum("rd,rkd->rk", U, Eg), (rows.log_tail + (U * rows.tail_mean).sum(1))[:, None]], 1)
    (torch.logsumexp(z, 1) - z[:, 0]).mean().backward()
    _, grad = solver.loss_and_grad(peaky_lm, rows, U.detach())
    assert torch.allclose(grad, U.grad, atol=1e-6)


def test_kept_candidate_embeddings_give_the_loss_of_gathering_them_each_time(peaky_lm, monkeypatch):
    C, Y, kept = _rows(peaky_lm, n=1100, seed=5)  # more rows than one chunk
    monkeypatch.setattr(solver, "KEEP_BYTES", 0)
    gathered = solver.reduce(peaky_lm, C, Y, torch.ones(len(C)), k=8)
    assert kept.candidates is not None and gathered.candidates is None
    U = 0.05 * torch.randn(C.shape, generator=torch.Generator().manual_seed(6))
    (a, ga), (b, gb) = solver.loss_and_grad(peaky_lm, kept, U), solver.loss_and_grad(peaky_lm, gathered, U)
    assert a == b and torch.equal(ga, gb)


@pytest.mark.parametrize("optimizer", list(solver.RECIPES))
def test_lbfgs_learns_a_planted_style_and_records_its_choice(peaky_lm, optimizer):
    rng = random.Random(11)
    pos, neg = sample_texts(rng, WORDS_A, 40), sample_texts(rng, WORDS_B, 40)
    switch = train_switch(peaky_lm, pos, neg, config=TrainConfig(seed=0, optimizer=optimizer))
    card = switch.card
    assert card["optimizer"] == optimizer and card["l2"] in solver.PATH and card["negatives"] == "given"
    assert card["heldout_gain"] > 0 and card["heldout_nll_reversed_switch"] > card["heldout_nll_with_switch"]
    held_a, held_b = sample_texts(random.Random(12), WORDS_A, 30), sample_texts(random.Random(13), WORDS_B, 30)
    a = {e: mean_log_likelihood(peaky_lm, held_a, [(switch, e)]) for e in (-1.0, 0.0, 1.0)}
    b = {e: mean_log_likelihood(peaky_lm, held_b, [(switch, e)]) for e in (-1.0, 0.0, 1.0)}
    assert a[1.0] > a[0.0] > a[-1.0] and b[-1.0] > b[0.0] > b[1.0]


def test_lbfgs_without_heldout_stops_at_the_default_lambda(peaky_lm):
    pos = sample_texts(random.Random(5), WORDS_A, 12)
    switch = train_switch(peaky_lm, pos, config=TrainConfig(heldout=0))
    assert switch.card["l2"] == solver.NO_HELDOUT_LAMBDA and switch.card["heldout_gain"] is None


@pytest.mark.parametrize("optimizer", list(solver.RECIPES))
def test_lbfgs_takes_no_more_evaluations_than_the_steps_asked(peaky_lm, optimizer):
    """torch's L-BFGS ends only between line searches, so a λ's budget could be overrun (steps 1 ran 2, steps 12 ran 13):
    the cap is exact, and a λ cut short keeps the best point it reached."""
    rng = random.Random(21)
    pos, neg = sample_texts(rng, WORDS_A, 30), sample_texts(rng, WORDS_B, 30)
    for steps in range(2, 26):
        seen: list[tuple[int, int]] = []
        switch = train_switch(peaky_lm, pos, neg, config=TrainConfig(steps=steps, optimizer=optimizer),
                              progress=lambda step, total, loss, seen=seen: seen.append((step, total)))
        assert switch.card["steps"] <= steps and all(step <= total <= steps for step, total in seen), (steps, seen[-3:])
        assert switch.W.abs().max() > 0, steps  # the best point its line search reached, not where it started
        # the first-release recipe's first step is short (W's norm ~1e-3 after 2 evaluations): its held-out gain can fall
        # below float32's resolution of the loss (0.0 on an AVX2 EPYC), so there it is only never worse
        gain = switch.card["heldout_gain"]
        assert gain > 0 if solver.RECIPES[optimizer].scaled else gain >= 0, steps
    with pytest.raises(ValueError, match="at least 2 for L-BFGS"):
        TrainConfig(steps=1, optimizer=optimizer).validate(32)
    TrainConfig(steps=1, optimizer="adam").validate(32)


def test_lbfgs_cancel(peaky_lm):
    pos = sample_texts(random.Random(6), WORDS_A, 12)
    with pytest.raises(TrainingCancelled, match="step 0 of"):
        train_switch(peaky_lm, pos, config=TrainConfig(), cancel=lambda: True)


def test_optimizer_is_validated_and_fluency_terms_need_adam():
    assert TrainConfig().optimizer == "lbfgs-sampled"
    with pytest.raises(ValueError, match="optimizer must be one of lbfgs-sampled, lbfgs, adam"):
        TrainConfig(optimizer="sgd").validate(32)
    for optimizer in solver.RECIPES:
        with pytest.raises(ValueError, match="optimizer='adam'"):
            TrainConfig(neutral_kl=0.1, optimizer=optimizer).validate(32)
    TrainConfig(optimizer="adam", neutral_kl=0.1).validate(32)


def test_cards_written_before_the_optimizer_field_still_load(peaky_lm):
    switch = train_switch(peaky_lm, sample_texts(random.Random(8), WORDS_A, 12), config=TrainConfig(steps=15))
    old = {k: v for k, v in switch.card.to_dict().items() if k not in ("optimizer", "negatives")}
    card = Card.from_dict(old)
    assert card.training is not None and card.training.optimizer == "adam" and card.training.negatives == "given"


# --- self-contrast negatives ---------------------------------------------------------------------------


def test_sentence_openings_take_a_share_of_each_long_sentence():
    text = "Short one. The council should adopt the plan because it saves money for everyone here! Tiny."
    [(opening, rest)] = sentence_openings([text])
    assert opening == "The council should adopt the" and rest == 13 - 5
    many = sentence_openings([f"Sentence number {i} has quite a few words in it." for i in range(100)], limit=10)
    assert len(many) == 10 and many[0][0].startswith("Sentence number 0") and many[-1][0].startswith("Sentence number 90")


def test_self_contrast_continues_each_opening(peaky_lm):
    text = "The new plan will help every family in the town. Critics say the plan costs far too much money."
    own = self_contrast(peaky_lm, [text], seed=0)
    assert [t.split()[:4] for t in own] == [["The", "new", "plan", "will"], ["Critics", "say", "the", "plan"]]
    assert own == self_contrast(peaky_lm, [text], seed=0)
    with pytest.raises(ValueError, match="at least 6 words"):
        self_contrast(peaky_lm, ["Too short."])


def test_training_with_self_contrast_records_its_negatives(peaky_lm):
    doc = " ".join(f"The {a} plan is {b} for the whole town and its people." for a, b in zip(WORDS_A, WORDS_A[::-1], strict=False))
    switch = train_switch(peaky_lm, doc, config=TrainConfig(self_contrast=True))
    card = switch.card
    assert card["negatives"] == "self-contrast" and card["data_shape"] == "one document" and card["n_positive"] == 1 and card["n_negative"] == len(sentence_openings([doc]))
    assert card["dummy_steer"] is True
    given = ["The plan costs far too much for the town.", "The plan is a waste of the money we have."]
    both = train_switch(peaky_lm, doc, given, config=TrainConfig(self_contrast=True)).card
    assert both["negatives"] == "given + self-contrast" and both["n_negative"] == 2 + len(sentence_openings([doc, *given]))


@pytest.mark.parametrize("bf16", [False, True])
def test_a_sampled_tail_of_nearly_certain_rows_draws_and_points_downhill(peaky_lm, monkeypatch, bf16):
    if bf16:
        monkeypatch.setattr(solver, "_bf16_head", lambda lm: lm.head_weight(torch.bfloat16))
    C = 30 * torch.randn(64, peaky_lm.hidden_size, generator=torch.Generator().manual_seed(20))  # tails down to 0
    Y = peaky_lm.raw_logits(C).argmax(-1)
    rows = _sampled(peaky_lm, C, Y)
    assert torch.isfinite(rows.logp[:, :1]).all()
    value, grad = solver.loss_and_grad(peaky_lm, rows, torch.zeros_like(C))
    assert math.isfinite(value) and torch.isfinite(grad).all()
    step, _ = solver.loss_and_grad(peaky_lm, rows, -1e-3 * grad / grad.norm())
    assert step <= value


@pytest.mark.parametrize("bf16", [False, True])
def test_the_tail_of_a_nearly_certain_row_is_a_mean_of_output_embeddings(peaky_lm, monkeypatch, bf16):
    """Where the candidates hold all but ~1e-7 or less of the probability, 1 − their sum is rounding noise; the tail's mean
    embedding must still be a weighted mean (bounded by the longest embedding), or the loss explodes off zero."""
    if bf16:
        monkeypatch.setattr(solver, "_bf16_head", lambda lm: lm.head_weight(torch.bfloat16))
    g = torch.Generator().manual_seed(10)
    C = 8 * torch.randn(64, peaky_lm.hidden_size, generator=g)  # confident rows: tails of ~1e-7 down to ~1e-15
    Y = peaky_lm.raw_logits(C).argmax(-1)
    rows = solver.reduce(peaky_lm, C, Y, torch.ones(len(C)), k=8)
    longest = peaky_lm.head_weight(torch.float32).norm(dim=1).max()
    assert float(rows.tail_mean.norm(dim=1).max()) <= 1.01 * float(longest)
    value, grad = solver.loss_and_grad(peaky_lm, rows, torch.zeros_like(C))
    step, _ = solver.loss_and_grad(peaky_lm, rows, -1e-3 * grad / grad.norm())
    assert step < value  # the gradient points downhill


def test_a_reduction_taken_at_a_point_is_exact_there_and_the_path_takes_one_at_each_lambda(peaky_lm, monkeypatch):
    """The tail term is exact only where the reduction was taken; far from it L-BFGS finds directions where the bound is
    loose. Reduced again at a point, the loss is exact there (and the ridge path does that before each later λ)."""
    C, Y, at_zero = _rows(peaky_lm, seed=11)
    U0 = 0.5 * torch.randn(C.shape, generator=torch.Generator().manual_seed(12))
    exact = float(_exact(peaky_lm, C, Y, U0))
    there = solver.reduce(peaky_lm, C, Y, torch.ones(len(C)), k=8, origin=U0)
    assert solver.loss_and_grad(peaky_lm, there, U0)[0] == pytest.approx(exact, abs=1e-5)
    assert solver.loss_and_grad(peaky_lm, at_zero, U0)[0] < exact - 1e-3  # the reduction at 0 is a loose bound there
    calls = []
    real = solver.reduce
    monkeypatch.setattr(solver, "reduce", lambda *a, **k: calls.append(k.get("origin")) or real(*a, **k))
    W, Wd = torch.zeros(C.shape[1], C.shape[1], requires_grad=True), torch.zeros(C.shape[1], C.shape[1], requires_grad=True)
    lams = list(solver.ridge_path(peaky_lm, at_zero, 1.0, True, W, Wd, max_evaluations=45, on_evaluation=lambda e, v: None,
                                  path=(10.0, 1.0, 0.1), recipe=solver.BOUND))
    assert lams == [10.0, 1.0, 0.1] and len(calls) == 2 and all(c is not None for c in calls)
    sampled = _sampled(peaky_lm, C, Y)
    calls.clear()  # a sampled tail is right in expectation everywhere: one reduction serves the whole path
    assert list(solver.ridge_path(peaky_lm, sampled, 1.0, True, W, Wd, max_evaluations=30, on_evaluation=lambda e, v: None,
                                  path=(10.0, 1.0, 0.1))) == [10.0, 1.0, 0.1] and calls == []


@pytest.mark.parametrize("family", SCALED_FAMILIES)
def test_the_solver_refuses_a_model_whose_logits_are_not_the_heads_output(tokenizer, family):
    """Its exact logits are ``E c + b`` and its changes ``E u``: a scaling family would get silently wrong ones."""
    from lmswitch.core.solver import reduce

    lm = build_lm(family, tokenizer=tokenizer)
    C = torch.randn(4, lm.hidden_size)
    with pytest.raises(ValueError, match="head's output itself"):
        reduce(lm, C, torch.zeros(4, dtype=torch.long), torch.ones(4))
