"""Style meter: the likelihood curve against full forward passes, the optimum, and planted styles."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import SCALED_FAMILIES, random_switch

import lmswitch as ls
from lmswitch.core.hidden import encode_text
from lmswitch.core.pause import pausing
from lmswitch.lenses.meter import measure

TEXT = "the kind and warm people smile with joy but the cold and cruel one was bitter"


def strong_switch(lm, seed: int) -> ls.Switch:
    return random_switch(lm, seed=seed, scale=50.0, eps_range=(-20.0, 20.0))


def mean_loglik(lm, setting, text) -> float:
    """Mean log-likelihood per predicted token from a full steered forward pass."""
    ids = lm.tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad(), ls.steer(lm, setting):
        logp = torch.log_softmax(lm.model(ids).logits.float(), -1)
    return float(logp[0, :-1].gather(1, ids[0, 1:, None]).mean())


def test_curve_matches_full_forward_passes(tiny_lm):
    switch = strong_switch(tiny_lm, 1)
    r = measure(tiny_lm, switch, TEXT, grid=[-10.0, 0.0, 7.5])
    row = r.switches[0]
    expected = [mean_loglik(tiny_lm, [(switch, e)], TEXT) for e in row.grid]
    assert row.loglik == pytest.approx(expected, abs=1e-4)
    assert r.base_loglik == pytest.approx(expected[1], abs=1e-4)
    assert r.scored_tokens == r.tokens - 1


@pytest.mark.parametrize("family", SCALED_FAMILIES)
def test_curve_matches_full_forward_passes_of_a_family_that_scales_its_logits_after_the_head(make_lm, family):
    lm = make_lm(family, init=0.2)
    switch = strong_switch(lm, 1)
    r = measure(lm, switch, TEXT, grid=[-10.0, 0.0, 7.5])
    expected = [mean_loglik(lm, [(switch, e)], TEXT) for e in r.switches[0].grid]
    assert r.switches[0].loglik == pytest.approx(expected, abs=1e-4)


def test_an_encoded_text_is_measured_without_another_pass(gpt2_lm, monkeypatch):
    a = strong_switch(gpt2_lm, 1)
    fresh = measure(gpt2_lm, a, TEXT, grid=[-1.0, 0.0, 1.0], bound=3.0)
    encoded = encode_text(gpt2_lm, TEXT)
    monkeypatch.setattr(gpt2_lm, "final_hidden", lambda *a, **k: pytest.fail("the model ran again"))
    assert measure(gpt2_lm, a, encoded, grid=[-1.0, 0.0, 1.0], bound=3.0) == fresh


def test_the_meters_search_lets_a_servers_other_users_go_first(tiny_lm):
    """The meter evaluates its surface dozens of times (0.8 s for a comment and three switches on the embedded model):
    a pause point before every piece, so a server runs other users' next tokens there (lmswitch.core.pause)."""
    enc = encode_text(tiny_lm, TEXT)  # no body pass inside: its layers' pause points are not counted
    pauses = []
    with pausing(lambda: pauses.append(1)):
        r = measure(tiny_lm, [strong_switch(tiny_lm, 1), strong_switch(tiny_lm, 2)], enc)
    assert len(pauses) >= len(r.switches[0].grid) + len(r.switches[1].grid)  # at least one per surface evaluation


def test_measurement_to_dict_is_the_plain_json_shape(gpt2_lm):
    a, b = strong_switch(gpt2_lm, 1), strong_switch(gpt2_lm, 2)
    r = measure(gpt2_lm, [a, b], TEXT, grid=[-1.0, 0.0, 1.0], bound=3.0)
    d = json.loads(json.dumps(r.to_dict()))
    assert list(d) == ["tokens", "scored_tokens", "windows", "base_loglik", "best_loglik", "gain", "switches"]
    assert [d[k] for k in ("tokens", "scored_tokens", "windows", "gain")] == [r.tokens, r.scored_tokens, r.windows, r.gain]
    keys = ["name", "positive_label", "negative_label", "grid", "loglik", "best_eps", "best_eps_alone", "evidence_nats", "at_bound", "label"]
    assert [list(row) for row in d["switches"]] == [keys, keys]
    assert d["switches"] == [{k: getattr(row, k) for k in keys} for row in r.switches]
    assert d["switches"][1]["name"] == "random2" and d["switches"][1]["grid"] == [-1.0, 0.0, 1.0]


def test_best_eps_is_the_maximum_of_a_fine_grid(gpt2_lm):
    switch = strong_switch(gpt2_lm, 2)
    fine = [x / 4 for x in range(-80, 81)]
    r = measure(gpt2_lm, switch, TEXT, grid=fine)
    row = r.switches[0]
    grid_best = max(zip(row.loglik, row.grid, strict=True))
    assert abs(row.best_eps - grid_best[1]) <= 0.25 + 1e-6
    assert r.best_loglik >= grid_best[0] - 1e-6
    assert r.gain >= 0


def sample(lm, setting, seed: int) -> str:
    return ls.generate(lm, "the", setting, max_new_tokens=60, temperature=1.0, top_p=1.0, seed=seed)[0]


@pytest.mark.parametrize("eps", [-12.0, 12.0])
def test_text_written_at_an_eps_prefers_that_eps(gpt2_lm, eps):
    """Text sampled from the model steered at ε is explained best near that ε (the MLE of ε)."""
    switch = strong_switch(gpt2_lm, 3)
    found = [measure(gpt2_lm, switch, "the " + sample(gpt2_lm, [(switch, eps)], seed)).switches[0].best_eps for seed in range(4)]
    assert all((f > 0) == (eps > 0) for f in found), found
    assert abs(sum(found) / len(found) - eps) < 6, found


def test_two_switches_are_measured_jointly(gpt2_lm):
    a, b = strong_switch(gpt2_lm, 4), strong_switch(gpt2_lm, 5)
    a.name, b.name = "a", "b"
    text = "the " + sample(gpt2_lm, [(a, 12.0), (b, -12.0)], seed=0)
    r = measure(gpt2_lm, [a, b], text)
    best = {row.name: row.best_eps for row in r.switches}
    assert best["a"] > 0 > best["b"], best
    assert r.switches[0].label == "positive" and r.switches[1].label == "negative"
    assert len(r.switches[0].grid) == 21 and r.switches[0].grid[0] == -20.0


def test_optimum_stays_inside_the_bound(gpt2_lm):
    switch = strong_switch(gpt2_lm, 3)
    text = "the " + sample(gpt2_lm, [(switch, 20.0)], seed=0)
    row = measure(gpt2_lm, switch, text, bound=2.0).switches[0]
    assert -2.0 <= row.best_eps <= 2.0
    assert row.at_bound == (abs(row.best_eps) > 1.99)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("",), {}, "empty"),
        (("the\x00",), {}, "NUL"),
        (("the",), {}, "single token"),
        ((TEXT,), {"grid": []}, "grid"),
        ((TEXT,), {"grid": [float("nan")]}, "grid"),
        ((TEXT,), {"points": 1}, "points"),
        ((TEXT,), {"bound": -1.0}, "bound"),
    ],
)
def test_bad_input_is_refused(gpt2_lm, args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        measure(gpt2_lm, strong_switch(gpt2_lm, 0), *args, **kwargs)


def test_no_switch_or_wrong_model_is_refused(gpt2_lm, llama_lm):
    with pytest.raises(ValueError, match="at least one switch"):
        measure(gpt2_lm, [], TEXT)
    with pytest.raises(ValueError, match="made for"):
        measure(llama_lm, strong_switch(gpt2_lm, 0), TEXT)
    with pytest.raises(TypeError, match="expected a Switch.*load_switch"):  # a name, not a switch (not its letters)
        measure(gpt2_lm, "sentiment", TEXT)
    with pytest.raises(ValueError, match="given twice"):  # their joint best ε would not be defined
        measure(gpt2_lm, [strong_switch(gpt2_lm, 0), strong_switch(gpt2_lm, 0)], TEXT)


def test_style_slope_is_the_derivative_of_the_curve_at_zero(llama_lm):
    from lmswitch.lenses.meter import style_slope

    s = random_switch(llama_lm, seed=31, scale=20.0)
    text = "the kind and warm one was happy with the sweet smile"
    h = 0.05  # central differences: O(h²) curvature error, and float32 curve values need a step this wide
    curve = measure(llama_lm, [s], text, grid=[-h, h]).switches[0].loglik
    slope = style_slope(llama_lm, s, text)
    assert slope == pytest.approx((curve[1] - curve[0]) / (2 * h), rel=1e-2)
    assert abs(slope) > 1e-4
    with pytest.raises(ValueError, match="a single token; the style meter needs at least two"):
        style_slope(llama_lm, s, "the")


@pytest.mark.parametrize("cap", [None, 3.0])  # 3.0: a soft cap tight enough to bend these logits (Gemma 2/3 use 30)
def test_the_exact_derivatives_match_finite_differences(gpt2_lm, monkeypatch, cap):
    """The Newton steps rely on the gradient and Hessian of the log-likelihood surface, soft-capped or not."""
    import numpy as np

    from lmswitch.lenses.meter import _scored_states, _Surface

    monkeypatch.setattr(type(gpt2_lm), "logit_softcap", property(lambda self: cap))
    switches = [strong_switch(gpt2_lm, 1), strong_switch(gpt2_lm, 2)]
    _, hidden, targets = _scored_states(gpt2_lm, TEXT)
    surface = _Surface(gpt2_lm, hidden, targets, switches)
    at, h = np.array([4.0, -3.0]), 0.05  # float32 logits: a step large enough to rise above rounding
    f, g, H = surface.derivatives(at)
    assert f == pytest.approx(surface.value(at.tolist()), abs=1e-6)
    for i in range(2):
        step = np.eye(2)[i] * h
        assert g[i] == pytest.approx((surface.value((at + step).tolist()) - surface.value((at - step).tolist())) / (2 * h), rel=1e-2)
        dg = (surface.derivatives(at + step)[1] - surface.derivatives(at - step)[1]) / (2 * h)
        np.testing.assert_allclose(H[i], dg, rtol=2e-2)


def test_the_surface_is_the_same_in_pieces_cached_or_recomputed(gpt2_lm, monkeypatch):
    """An evaluation runs over the cached logits a few rows at a time, or recomputes them when they would not fit:
    the value, gradient and Hessian do not depend on how the rows are cut."""
    import numpy as np

    from lmswitch.lenses import meter

    switches = [strong_switch(gpt2_lm, 1), strong_switch(gpt2_lm, 2)]
    _, hidden, targets = meter._scored_states(gpt2_lm, TEXT)
    at = np.array([2.0, -1.5])
    whole = meter._Surface(gpt2_lm, hidden, targets, switches)
    expect = whole.derivatives(at), whole.value([0.5, 0.5]), whole.value([-1.0, 2.0])
    monkeypatch.setattr(meter, "PIECE_ROWS", 4)  # the text's rows in several pieces, the last one shorter
    assert len(targets) % 4 and len(targets) > 8
    monkeypatch.setattr(meter, "HEAD_CHUNK", 6)  # several head chunks, each cut into pieces (6 = 4 + 2)
    chunks, one_chunk = -(-len(targets) // 6), 6 * gpt2_lm.vocab_size * 3
    # all cached; the first chunk only (a longer text); nothing, every evaluation recomputing its chunks
    for cache, cached in ((meter.CACHE_FLOATS, chunks), (one_chunk + 5, 1), (0, 0)):
        monkeypatch.setattr(meter, "CACHE_FLOATS", cache)
        surface = meter._Surface(gpt2_lm, hidden, targets, switches)
        assert len(surface.cached) == cached
        points = [[0.5, 0.5], [-1.0, 2.0], [0.5, 0.5]]
        assert surface.values(points) == pytest.approx([expect[1], expect[2], expect[1]], abs=1e-6)
        assert surface.evaluations == 2  # one pass for both points
        surface._values.clear()
        (f, g, H), value = surface.derivatives(at), surface.value([0.5, 0.5])
        assert f == pytest.approx(expect[0][0], abs=1e-6) and value == pytest.approx(expect[1], abs=1e-6)
        np.testing.assert_allclose(g, expect[0][1], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(H, expect[0][2], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("cap", [None, 3.0])
@pytest.mark.parametrize("bound", [20.0, 2.0])  # 2.0: the planted optimum lies outside, so coordinates press on the box
def test_the_joint_search_finds_what_a_general_bounded_optimiser_finds(gpt2_lm, monkeypatch, cap, bound):
    """The meter's projected Newton search against scipy's L-BFGS-B (value and gradient only) on the same surface:
    the same box maximum, soft-capped (a surface that need not be concave) or not."""
    import numpy as np
    import scipy.optimize

    from lmswitch.lenses import meter

    monkeypatch.setattr(type(gpt2_lm), "logit_softcap", property(lambda self: cap))
    a, b, c = (strong_switch(gpt2_lm, seed) for seed in (4, 5, 6))
    text = "the " + sample(gpt2_lm, [(a, 12.0), (b, -6.0)], seed=1)
    _, hidden, targets = meter._scored_states(gpt2_lm, text)
    surface = meter._Surface(gpt2_lm, hidden, targets, [a, b, c])
    box = [(-bound, bound)] * 3
    found = meter._maximise(surface, box)

    def negative(x):
        f, g, _ = surface.derivatives(x)
        return -f, -g

    ref = scipy.optimize.minimize(negative, np.zeros(3), jac=True, method="L-BFGS-B", bounds=box,
                                  options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 500}).x
    assert surface.value(found.tolist()) >= surface.value(ref.tolist()) - 1e-6
    # L-BFGS-B stops with gradients ~5e-7 where the soft-capped surface curves by ~1e-3 (its Hessian's eigenvalues on
    # an Intel Xeon's float32 sums): ~5e-4 off the maximum in position, whatever the search compared with it
    np.testing.assert_allclose(found, ref, atol=2e-3)
    if bound == 2.0:
        assert np.isclose(np.abs(found), bound).any()  # a pressed coordinate sits on the bound exactly
    g = surface.derivatives(found)[1]
    free = np.abs(np.abs(found) - bound) > 1e-9
    assert free.any() and np.abs(g[free]).max() < 1e-6  # a stationary point in the free coordinates


def test_a_reading_is_the_meters_row_and_the_highlights_changes(gpt2_lm):
    """``reading``: one switch's measure row (ε 0 alone on its curve) and each token's change at an ε, as the highlight
    lens computes it with two more head passes; and the highlight built from those changes is the highlight."""
    from lmswitch.lenses.meter import reading
    from lmswitch.lenses.spans import highlight, highlight_changes

    switch, enc = strong_switch(gpt2_lm, 3), encode_text(gpt2_lm, TEXT)
    row, changes = reading(gpt2_lm, switch, enc, changes_at=-4.0)
    assert row == measure(gpt2_lm, switch, enc, grid=[0.0]).switches[0]
    direct = highlight(gpt2_lm, switch, enc, eps=-4.0, max_span=3, n_spans=2)
    assert changes == pytest.approx([t.delta for t in direct.tokens], abs=1e-4) and changes[0] == 0.0
    shared = highlight_changes(switch, enc, changes, eps=-4.0, max_span=3, n_spans=2).spans
    assert [(s.start, s.end, s.tokens) for s in shared] == [(s.start, s.end, s.tokens) for s in direct.spans]
    assert [s.score for s in shared] == pytest.approx([s.score for s in direct.spans], abs=1e-4)
    with pytest.raises(ValueError, match="one change per token"):
        highlight_changes(switch, enc, changes[:-1], eps=-4.0)


@pytest.mark.parametrize("seed", range(6))
def test_the_box_search_on_random_concave_functions_of_up_to_eight_variables(seed):
    """The projected Newton search alone, on ``f(x) = −½ (x − c)ᵀ A (x − c) − logsumexp(B x)`` with strongly correlated
    variables (where a Newton step cut by the box can point downhill) and the optimum outside the box in some
    coordinates: the box maximum L-BFGS-B finds, and a non-finite surface stops the search where it is."""
    import numpy as np
    import scipy.optimize
    from scipy.special import logsumexp, softmax

    from lmswitch.lenses.meter import _projected_newton

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9))
    Q = rng.normal(size=(n, n))
    A = Q @ Q.T / n + 0.9 * np.ones((n, n)) + 1e-2 * np.eye(n)  # correlated: ones on every pair
    B, c = rng.normal(size=(5, n)), rng.normal(scale=6.0, size=n)
    lo, hi = -rng.uniform(1, 4, n), rng.uniform(1, 4, n)

    def derivatives(x):
        p = softmax(B @ x)
        H = -A - (B.T * p) @ B + np.outer(B.T @ p, B.T @ p)
        return -0.5 * (x - c) @ A @ (x - c) - logsumexp(B @ x), -A @ (x - c) - B.T @ p, H

    found = _projected_newton(derivatives, lambda x: derivatives(x)[0], lo, hi)
    ref = scipy.optimize.minimize(lambda x: tuple(-v for v in derivatives(x)[:2]), np.zeros(n), jac=True, method="L-BFGS-B",
                                  bounds=list(zip(lo, hi, strict=True)), options={"ftol": 1e-15, "gtol": 1e-12}).x
    assert derivatives(found)[0] >= derivatives(ref)[0] - 1e-9
    np.testing.assert_allclose(found, ref, atol=1e-4)
    nan = _projected_newton(lambda x: (np.nan, np.full(n, np.nan), np.full((n, n), np.nan)), lambda x: np.nan, lo, hi)
    np.testing.assert_array_equal(nan, np.clip(np.zeros(n), lo, hi))
