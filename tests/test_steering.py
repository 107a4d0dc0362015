"""Steering semantics on four tiny model families: exactness at eps 0, the math of
``c -> c + eps * eps0 * W c``, composition, per-row settings, hook lifetime,
thread isolation, dtype handling and refusal of bad switches / eps values."""

from __future__ import annotations

import copy
import math
import threading

import numpy as np
import pytest
import torch
from conftest import random_ids, random_switch

from lmswitch import Switch, SwitchFileError, steer, steer_rows
from lmswitch.core.steering import active_hook_count


@torch.no_grad()
def logits_of(lm, ids: torch.Tensor) -> torch.Tensor:
    return lm.model(input_ids=ids).logits


def manual_steered(lm, ids: torch.Tensor, W: torch.Tensor, scale: float) -> torch.Tensor:
    """head(c + scale * W c), with c captured by ``final_hidden`` (no hook involved)."""
    c = lm.final_hidden(ids).float()
    return lm.logits_from_hidden(c + scale * (c @ W.T))


def assert_close(actual: torch.Tensor, expected: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> None:
    assert actual.shape == expected.shape
    assert torch.allclose(actual.float(), expected.float(), atol=atol, rtol=rtol), (
        f"max abs diff {(actual.float() - expected.float()).abs().max().item():.3g}"
    )


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


@pytest.fixture(autouse=True)
def no_hooks_left(tiny_lm):
    """Every test starts and must end with a bare head."""
    assert active_hook_count(tiny_lm) == 0
    yield
    assert active_hook_count(tiny_lm) == 0


# --- eps = 0 is exactly the base model -----------------------------------------------


def test_eps_zero_is_exactly_unsteered(tiny_lm):
    ids = random_ids(tiny_lm, 2, 9, seed=1)
    s1, s2 = random_switch(tiny_lm, seed=1, scale=10), random_switch(tiny_lm, seed=2, scale=10)
    ref = logits_of(tiny_lm, ids)
    with steer(tiny_lm, [(s1, 0.0)]):
        assert torch.equal(logits_of(tiny_lm, ids), ref)
    with steer(tiny_lm, [(s1, 0), (s2, 0.0)]):
        assert torch.equal(logits_of(tiny_lm, ids), ref)
    with steer(tiny_lm, []):
        assert torch.equal(logits_of(tiny_lm, ids), ref)


def test_steer_rows_all_zero_is_exactly_unsteered(tiny_lm):
    ids = random_ids(tiny_lm, 3, 7, seed=2)
    s1, s2 = random_switch(tiny_lm, seed=1, scale=10), random_switch(tiny_lm, seed=2, scale=10)
    ref = logits_of(tiny_lm, ids)
    with steer_rows(tiny_lm, [[(s1, 0.0)], [(s2, 0.0)], []]):
        assert torch.equal(logits_of(tiny_lm, ids), ref)


def test_steer_rows_zero_row_is_exact_next_to_steered_rows(tiny_lm):
    """A row at eps 0 in a batch with steered rows still gets the exact base logits."""
    ids = random_ids(tiny_lm, 2, 7, seed=3)
    s = random_switch(tiny_lm, seed=1, scale=10)
    ref = logits_of(tiny_lm, ids)
    with steer_rows(tiny_lm, [[(s, 0.0)], [(s, 8.0)]]):
        out = logits_of(tiny_lm, ids)
    assert torch.equal(out[0], ref[0])
    assert max_diff(out[1], ref[1]) > 1e-3


# --- nonzero eps follows c -> c + eps * eps0 * W c ------------------------------------------


@pytest.mark.parametrize("eps", [5.0, -3.0])
def test_nonzero_eps_matches_manual_computation(tiny_lm, eps):
    ids = random_ids(tiny_lm, 2, 8, seed=4)
    s = random_switch(tiny_lm, seed=3, scale=10, eps0=2e-3)
    ref = logits_of(tiny_lm, ids)
    with steer(tiny_lm, [(s, eps)]):
        out = logits_of(tiny_lm, ids)
    expected = manual_steered(tiny_lm, ids, s.W, eps * s.eps0)
    assert max_diff(out, ref) > 1e-3, "steering did not change the logits"
    assert max_diff(expected, ref) > 1e-3
    assert_close(out, expected)


def test_final_hidden_inside_steer_sees_the_steered_input(tiny_lm):
    ids = random_ids(tiny_lm, 1, 6, seed=5)
    s = random_switch(tiny_lm, seed=4, scale=5)
    c = tiny_lm.final_hidden(ids)
    with steer(tiny_lm, [(s, 4.0)]):
        c_steered = tiny_lm.final_hidden(ids)
    assert_close(c_steered, c + 4.0 * s.eps0 * (c @ s.W.T))


# --- composition and switch arithmetic -----------------------------------------------------


def test_two_switches_compose_like_their_weighted_sum(tiny_lm):
    ids = random_ids(tiny_lm, 2, 8, seed=6)
    s1, s2 = random_switch(tiny_lm, seed=5, scale=5), random_switch(tiny_lm, seed=6, scale=5)
    a, b = 3.0, -2.5
    combined = Switch(W=a * s1.W + b * s2.W, eps0=s1.eps0, model_fingerprint=tiny_lm.fingerprint)
    with steer(tiny_lm, [(s1, a), (s2, b)]):
        both = logits_of(tiny_lm, ids)
    with steer(tiny_lm, [(combined, 1.0)]):
        single = logits_of(tiny_lm, ids)
    with steer(tiny_lm, [(s1, a)]):
        only_first = logits_of(tiny_lm, ids)
    assert_close(both, single)
    assert max_diff(both, only_first) > 1e-3, "the second switch had no effect"


def test_switch_arithmetic_values_and_labels(tiny_lm):
    s1 = random_switch(tiny_lm, seed=7, positive_label="happy", negative_label="sad")
    s2 = random_switch(tiny_lm, seed=8, positive_label="formal", negative_label="casual")
    W1, W2 = s1.W.clone(), s2.W.clone()

    total = s1 + s2
    assert torch.equal(total.W, W1 + W2)
    assert total.positive_label == "happy & formal" and total.negative_label == "sad & casual"
    assert torch.equal((s1 - s2).W, W1 - W2)

    for doubled in (2 * s1, s1 * 2):
        assert torch.equal(doubled.W, W1 * 2)
        assert (doubled.positive_label, doubled.negative_label) == ("happy", "sad")

    neg = -s1
    assert torch.equal(neg.W, -W1)
    assert (neg.positive_label, neg.negative_label) == ("sad", "happy")
    flipped = -2 * s1
    assert torch.equal(flipped.W, W1 * -2)
    assert (flipped.positive_label, flipped.negative_label) == ("sad", "happy")

    # the operands are left alone
    assert torch.equal(s1.W, W1) and torch.equal(s2.W, W2)
    assert (s1.positive_label, s1.negative_label) == ("happy", "sad")
    assert total.model_fingerprint == tiny_lm.fingerprint


def test_switch_arithmetic_steers_like_the_setting_it_stands_for(tiny_lm):
    ids = random_ids(tiny_lm, 1, 8, seed=7)
    s1 = random_switch(tiny_lm, seed=9, scale=5)
    s2 = random_switch(tiny_lm, seed=10, scale=5, eps0=2e-3)  # other eps0 units: the sum must convert
    with steer(tiny_lm, [(s1 + s2, 3.0)]):
        summed = logits_of(tiny_lm, ids)
    with steer(tiny_lm, [(s1, 3.0), (s2, 3.0)]):
        separate = logits_of(tiny_lm, ids)
    assert_close(summed, separate)
    with steer(tiny_lm, [(2 * s1, 3.0)]):
        doubled = logits_of(tiny_lm, ids)
    with steer(tiny_lm, [(s1, 6.0)]):
        bigger_eps = logits_of(tiny_lm, ids)
    assert_close(doubled, bigger_eps)
    with steer(tiny_lm, [(-s1, 3.0)]):
        negated = logits_of(tiny_lm, ids)
    with steer(tiny_lm, [(s1, -3.0)]):
        negative_eps = logits_of(tiny_lm, ids)
    assert_close(negated, negative_eps)


def test_switches_for_different_models_do_not_combine(tiny_lm, make_lm):
    other = make_lm("gpt2", seed=11)
    s = random_switch(tiny_lm, seed=1)
    foreign = random_switch(other, seed=2)
    with pytest.raises(ValueError, match="transfer"):
        s + foreign
    with pytest.raises(ValueError, match="size"):
        s + Switch(W=torch.eye(s.dim + 1))
    with pytest.raises(ValueError, match="scaled by a finite number; got nan"):
        s * math.nan
    for typo in ("2", True, None):  # as a setting's ε refuses them (float("2") scaled it)
        with pytest.raises(ValueError, match="scaled by a finite number"):
            s * typo
    assert torch.equal((s * np.float32(2)).W, (2 * s).W)  # a NumPy scalar is a number


# --- per-row settings ------------------------------------------------------------------------


def test_steer_rows_equals_running_each_row_separately(tiny_lm):
    ids = random_ids(tiny_lm, 4, 8, seed=8)
    s1, s2 = random_switch(tiny_lm, seed=12, scale=5), random_switch(tiny_lm, seed=13, scale=5)
    settings = [[(s1, 4.0)], [], [(s1, -2.0), (s2, 3.0)], [(s2, 0.0)]]
    with steer_rows(tiny_lm, settings):
        batched = logits_of(tiny_lm, ids)
    rows = []
    for b, setting in enumerate(settings):
        with steer(tiny_lm, setting):
            rows.append(logits_of(tiny_lm, ids[b : b + 1]))
    for b in range(len(settings)):
        assert_close(batched[b : b + 1], rows[b])
    # the rows really are steered differently
    assert max_diff(rows[0], logits_of(tiny_lm, ids[0:1])) > 1e-3
    assert max_diff(rows[2], logits_of(tiny_lm, ids[2:3])) > 1e-3


def test_steer_rows_repeats_each_setting_for_groups_of_samples(tiny_lm):
    ids = random_ids(tiny_lm, 2, 6, seed=9)
    s = random_switch(tiny_lm, seed=14, scale=5)
    settings = [[(s, 5.0)], [(s, -5.0)]]
    grouped = ids.repeat_interleave(3, dim=0)  # 6 rows: samples 0-2 of prompt 0, then of prompt 1
    with steer_rows(tiny_lm, settings):
        out = logits_of(tiny_lm, grouped)
    for b, setting in enumerate(settings):
        with steer(tiny_lm, setting):
            expected = logits_of(tiny_lm, ids[b : b + 1])
        for k in range(3):
            assert_close(out[3 * b + k : 3 * b + k + 1], expected)


def test_steer_rows_refuses_a_batch_that_does_not_fit(tiny_lm):
    s = random_switch(tiny_lm, seed=15)
    with pytest.raises(ValueError, match="rows"):
        with steer_rows(tiny_lm, [[(s, 1.0)], [(s, 2.0)]]):
            logits_of(tiny_lm, random_ids(tiny_lm, 3, 4))
    with pytest.raises(ValueError, match="at least one row setting"):
        with steer_rows(tiny_lm, []):
            pass


# --- hook lifetime ---------------------------------------------------------------------------


def test_hook_is_removed_after_the_block(tiny_lm):
    s = random_switch(tiny_lm, seed=16)
    with steer(tiny_lm, [(s, 1.0)]):
        assert active_hook_count(tiny_lm) == 1
    assert active_hook_count(tiny_lm) == 0
    with steer_rows(tiny_lm, [[(s, 1.0)], []]):
        assert active_hook_count(tiny_lm) == 1
    assert active_hook_count(tiny_lm) == 0


def test_hook_is_removed_after_an_exception(tiny_lm):
    s = random_switch(tiny_lm, seed=17)
    ids = random_ids(tiny_lm, 1, 5)
    ref = logits_of(tiny_lm, ids)
    with pytest.raises(RuntimeError, match="boom"):
        with steer(tiny_lm, [(s, 2.0)]):
            assert active_hook_count(tiny_lm) == 1
            raise RuntimeError("boom")
    assert active_hook_count(tiny_lm) == 0
    with pytest.raises(KeyboardInterrupt):
        with steer_rows(tiny_lm, [[(s, 2.0)]]):
            raise KeyboardInterrupt
    assert active_hook_count(tiny_lm) == 0
    # and nothing of the steering is left behind
    assert torch.equal(logits_of(tiny_lm, ids), ref)


def test_nested_blocks_count_and_restore(tiny_lm):
    ids = random_ids(tiny_lm, 1, 6, seed=10)
    s = random_switch(tiny_lm, seed=18, scale=5)
    ref = logits_of(tiny_lm, ids)
    with steer(tiny_lm, [(s, 4.0)]):
        outer = logits_of(tiny_lm, ids)
        assert max_diff(outer, ref) > 1e-3
        with steer(tiny_lm, [(s, 0.0)]):  # an inner eps-0 block switches steering off
            assert active_hook_count(tiny_lm) == 1
            assert torch.equal(logits_of(tiny_lm, ids), ref)
            with steer(tiny_lm, [(s, -4.0)]):
                inner = logits_of(tiny_lm, ids)
            assert torch.equal(logits_of(tiny_lm, ids), ref)
        assert active_hook_count(tiny_lm) == 1
        assert torch.equal(logits_of(tiny_lm, ids), outer)  # the outer setting is back
    assert active_hook_count(tiny_lm) == 0
    assert torch.equal(logits_of(tiny_lm, ids), ref)
    with steer(tiny_lm, [(s, -4.0)]):
        assert_close(inner, logits_of(tiny_lm, ids))


def test_block_in_another_thread_keeps_the_hook_and_does_not_leak(tiny_lm):
    ids = random_ids(tiny_lm, 1, 6, seed=11)
    s = random_switch(tiny_lm, seed=19, scale=5)
    ref = logits_of(tiny_lm, ids)
    with steer(tiny_lm, [(s, 5.0)]):
        expected_thread = logits_of(tiny_lm, ids)
    entered, release = threading.Event(), threading.Event()
    result: dict = {}

    def worker():
        try:
            with steer(tiny_lm, [(s, 5.0)]):
                entered.set()
                assert release.wait(30)
                result["logits"] = logits_of(tiny_lm, ids)
        except BaseException as err:  # reported below
            result["error"] = err
            entered.set()

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert entered.wait(30)
        assert active_hook_count(tiny_lm) == 1
        # the other thread's steering does not reach this thread
        assert torch.equal(logits_of(tiny_lm, ids), ref)
        with steer(tiny_lm, [(s, -5.0)]):
            assert active_hook_count(tiny_lm) == 1  # shared hook, two open blocks
        assert active_hook_count(tiny_lm) == 1  # still needed by the other thread
        assert torch.equal(logits_of(tiny_lm, ids), ref)
    finally:
        release.set()
        thread.join(30)
    assert "error" not in result, result.get("error")
    assert_close(result["logits"], expected_thread)
    assert active_hook_count(tiny_lm) == 0


# --- concurrency ------------------------------------------------------------------------------


def test_threads_sharing_one_model_each_get_their_own_steering(tiny_lm):
    ids = random_ids(tiny_lm, 2, 8, seed=12)
    s1, s2 = random_switch(tiny_lm, seed=20, scale=5), random_switch(tiny_lm, seed=21, scale=5)
    settings = [None, [(s1, 5.0)], [(s2, -5.0)], [(s1, 2.0), (s2, 3.0)]]  # None: no steer block at all
    refs = []
    for setting in settings:
        if setting is None:
            refs.append(logits_of(tiny_lm, ids))
        else:
            with steer(tiny_lm, setting):
                refs.append(logits_of(tiny_lm, ids))
    for i in range(len(refs)):
        for j in range(i):
            assert max_diff(refs[i], refs[j]) > 1e-3, "settings must give distinguishable logits"

    rounds = 15
    barrier = threading.Barrier(len(settings), timeout=60)
    failures: list[str] = []

    def worker(k: int) -> None:
        try:
            for r in range(rounds):
                barrier.wait()  # start every round together so the blocks overlap
                if settings[k] is None:
                    out = logits_of(tiny_lm, ids)
                    ok = torch.equal(out, refs[k])
                else:
                    with steer(tiny_lm, settings[k]):
                        out = logits_of(tiny_lm, ids)
                    ok = torch.allclose(out, refs[k], atol=1e-6, rtol=1e-5)
                if not ok:
                    failures.append(f"thread {k} round {r}: max diff {max_diff(out, refs[k]):.3g}")
        except BaseException as err:
            failures.append(f"thread {k}: {type(err).__name__}: {err}")
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(settings))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert not failures, failures
    assert active_hook_count(tiny_lm) == 0


# --- dtype --------------------------------------------------------------------------------------


def test_steering_a_bfloat16_model(tiny_lm):
    lm16 = type(tiny_lm)(model=copy.deepcopy(tiny_lm.model).to(torch.bfloat16), tokenizer=tiny_lm.tokenizer, name="bf16")
    assert lm16.fingerprint == tiny_lm.fingerprint  # a float32 switch applies to the bf16 copy
    s = random_switch(tiny_lm, seed=22, scale=10)
    ids = random_ids(lm16, 2, 8, seed=13)
    ref = logits_of(lm16, ids)
    eps = 20.0
    with steer(lm16, [(s, eps)]):
        out = logits_of(lm16, ids)
        assert active_hook_count(lm16) == 1
    assert active_hook_count(lm16) == 0
    assert out.dtype == torch.bfloat16
    assert torch.isfinite(out).all()
    # reference computed in float32 from the bf16 model's own hidden states and head
    c = lm16.final_hidden(ids).float()
    E = lm16.head.weight.float()
    bias = lm16.head.bias.float() if lm16.head.bias is not None else None
    expected = torch.nn.functional.linear(c + eps * s.eps0 * (c @ s.W.T), E, bias)
    atol = 0.02 * expected.abs().max().item()
    assert max_diff(out, ref) > 10 * atol, "steering effect too small to check in bf16"
    assert_close(out, expected, atol=atol, rtol=0.02)


# --- refusals -----------------------------------------------------------------------------------


def test_switch_for_another_model_is_refused(tiny_lm):
    ids = random_ids(tiny_lm, 1, 4)
    wrong_print = Switch(
        W=torch.randn(tiny_lm.hidden_size, tiny_lm.hidden_size), model_name="other", model_fingerprint="gpt2-32x64-0000000000000000"
    )
    wrong_size = Switch(W=torch.randn(tiny_lm.hidden_size + 8, tiny_lm.hidden_size + 8))
    with pytest.raises(SwitchFileError, match="fingerprint"):
        with steer(tiny_lm, [(wrong_print, 1.0)]):
            logits_of(tiny_lm, ids)
    with pytest.raises(SwitchFileError, match="hidden size"):
        with steer(tiny_lm, [(wrong_size, 1.0)]):
            logits_of(tiny_lm, ids)
    good = random_switch(tiny_lm, seed=23)
    with pytest.raises(SwitchFileError):
        with steer_rows(tiny_lm, [[(good, 1.0)], [(wrong_print, 1.0)]]):
            logits_of(tiny_lm, ids)
    with pytest.raises(SwitchFileError):  # refused even at eps 0
        with steer(tiny_lm, [(wrong_size, 0.0)]):
            pass


@pytest.mark.parametrize("eps", [math.nan, math.inf, -math.inf, 1000.5, -5000.0, 1e9, "5"])
def test_bad_eps_is_refused(tiny_lm, eps):
    s = random_switch(tiny_lm, seed=24)
    with pytest.raises(ValueError, match="ε"):
        with steer(tiny_lm, [(s, eps)]):
            pass
    with pytest.raises(ValueError, match="ε"):
        with steer_rows(tiny_lm, [[(s, 1.0)], [(s, eps)]]):
            pass


def test_eps_at_the_limit_is_accepted(tiny_lm):
    s = random_switch(tiny_lm, seed=25, scale=0.01)
    with steer(tiny_lm, [(s, 1000.0)]), steer(tiny_lm, [(s, -1000)]):
        assert active_hook_count(tiny_lm) == 1


def test_a_setting_given_as_a_generator_steers_as_its_list_does(tiny_lm):
    """The check read a generator to its end, and then nothing was steered (no error either)."""
    s, ids = random_switch(tiny_lm, seed=26), random_ids(tiny_lm, 2, 5)
    with steer(tiny_lm, [(s, 2.0)]):
        expected = logits_of(tiny_lm, ids)
    with steer(tiny_lm, ((x, e) for x, e in [(s, 2.0)])):
        assert torch.equal(logits_of(tiny_lm, ids), expected)
    with steer_rows(tiny_lm, [((x, e) for x, e in [(s, 2.0)]), iter([(s, 2.0)])]):
        assert torch.equal(logits_of(tiny_lm, ids), expected)


def test_malformed_setting_is_refused(tiny_lm):
    s = random_switch(tiny_lm, seed=26)
    for bad in ([s], [(s,)], [(s, 1.0, 2.0)], [("switch", 1.0)], [[s, 1.0]]):
        with pytest.raises(TypeError, match="pairs|expected a Switch"):
            with steer(tiny_lm, bad):
                pass
