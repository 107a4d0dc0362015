"""The compute thread: everything runs on it, calls from it run directly, stepped iterators interleave."""

from __future__ import annotations

import sys
import textwrap
import threading
import time
from pathlib import Path

import torch
from conftest import random_ids, side_by_side

from lmswitch.core.pause import add_layer_pauses, pause_point
from lmswitch.serve.compute import ComputeThread, Merged, until


def test_run_executes_on_the_compute_thread_and_reentrantly():
    compute = ComputeThread()
    assert compute.run(lambda: threading.current_thread().name).startswith("lmswitch-compute")
    assert compute.run(lambda: compute.run(lambda: 7)) == 7  # a call from the thread itself does not deadlock


def test_stepped_iterators_interleave_with_other_work_and_close():
    compute = ComputeThread()
    log: list[str] = []
    closed = threading.Event()

    def job():
        try:
            for i in range(100):
                log.append(f"step {i} on {threading.current_thread().name[:16]}")
                yield i
        finally:
            closed.set()

    steps = compute.stepped(job())
    assert next(steps) == 0
    compute.run(log.append, "other user")  # runs between two steps, not after the whole job
    assert next(steps) == 1
    steps.close()
    assert closed.is_set() and log[1] == "other user" and all("lmswitch-compute" in e for e in log if e.startswith("step"))


def test_errors_of_a_stepped_iterator_reach_the_consumer():
    def job():
        yield 1
        raise ValueError("bad input")

    steps = ComputeThread().stepped(job())
    assert next(steps) == 1
    try:
        next(steps)
    except ValueError as err:
        assert "bad input" in str(err)
    else:
        raise AssertionError("the error was swallowed")


def test_until_stops_at_the_flag_and_closes_the_source():
    flag, closed = threading.Event(), threading.Event()

    def source():
        try:
            yield from range(10)
        finally:
            closed.set()

    seen = []
    for x in until(flag, source()):
        seen.append(x)
        if x == 2:
            flag.set()
    assert seen == [0, 1, 2] and closed.is_set()


def _gated_background(compute: ComputeThread, fn, *waiting):
    """Submit background ``fn`` held at a gate, queue the ``waiting`` interactive jobs behind it, open the gate; futures."""
    gate = threading.Event()
    background = compute.submit(lambda: (gate.wait(), fn())[1], background=True)
    interactive = [compute.submit(job) for job in waiting]
    gate.set()
    return background, interactive


def test_background_work_lets_interactive_work_waiting_at_a_pause_point_go_first():
    compute = ComputeThread(quantum=0.0)
    log: list[str] = []

    @torch.no_grad()
    def long_job():
        for i in range(3):
            log.append(f"piece {i}")
            pause_point()
        return "trained"

    background, (other,) = _gated_background(compute, long_job, lambda: log.append("other user") or torch.is_grad_enabled())
    assert background.result(timeout=30) == "trained"
    assert other.result(timeout=30) is True  # grad mode as from the loop, not the paused job's no_grad
    assert log == ["piece 0", "other user", "piece 1", "piece 2"] and compute.pauses == 1


def test_a_job_queued_from_inside_background_work_is_not_part_of_it():
    compute = ComputeThread(quantum=0.0)
    log: list[str] = []

    def queued_later():
        log.append("queued job starts")
        compute.submit(log.append, "other user")
        pause_point()  # no handler here: it must not run the other job on the background job's behalf
        log.append("queued job ends")

    def long_job():
        queued = compute.submit(queued_later)
        pause_point()  # the queued job runs here, whole
        return queued

    background, () = _gated_background(compute, long_job)
    background.result(timeout=30).result(timeout=30)
    assert log == ["queued job starts", "queued job ends", "other user"]


def test_at_a_pause_the_steps_interactive_work_queues_run_too_for_up_to_a_quantum():
    """A running decode queues its next step as it ends one. At a pause, those steps run on for up to a quantum (before,
    one step ran per pause, and a user's stream beside a guided decode got a token per quantum); an endless decode
    still gives the thread back to the background job after the quantum."""
    compute = ComputeThread(quantum=0.5)  # (a few trivial steps end well within it)
    log: list[str] = []
    stop = threading.Event()

    def step(i: int, last: int | None):
        log.append(f"step {i}")
        if (last is None or i < last) and not stop.is_set():
            compute.submit(step, i + 1, last)

    def long_job(last: int | None):
        start = time.perf_counter()
        while time.perf_counter() - start < 0.55:  # past its quantum
            pass
        pause_point()
        log.append("background")

    background, _ = _gated_background(compute, lambda: long_job(3), lambda: step(0, 3))
    background.result(timeout=30)
    assert log == ["step 0", "step 1", "step 2", "step 3", "background"] and compute.pauses == 1

    log.clear()
    background, _ = _gated_background(compute, lambda: long_job(None), lambda: step(0, None))
    background.result(timeout=30)  # it ends while the endless decode goes on: its next step is queued
    stop.set()
    compute.run(lambda: None)  # after that step
    assert log[0] == "step 0" and "background" in log and log[-1] != "background" and compute.pauses == 2


def test_within_its_quantum_background_work_keeps_the_thread_and_interactive_work_waits_its_turn():
    compute = ComputeThread(quantum=60.0)
    log: list[str] = []

    def long_job():
        for i in range(3):
            log.append(f"piece {i}")
            pause_point()

    background, (other,) = _gated_background(compute, long_job, lambda: log.append("other user"))
    background.result(timeout=30), other.result(timeout=30)
    assert log == ["piece 0", "piece 1", "piece 2", "other user"] and compute.pauses == 0


def test_interactive_work_never_pauses_for_other_work():
    compute = ComputeThread(quantum=0.0)
    log: list[str] = []
    gate = threading.Event()
    first = compute.submit(lambda: (gate.wait(), log.append("first"), pause_point(), log.append("first again")))
    second = compute.submit(log.append, "second")
    gate.set()
    first.result(timeout=30), second.result(timeout=30)
    assert log == ["first", "first again", "second"]


def test_a_forward_pass_paused_for_other_forward_passes_of_the_same_model_is_unchanged(llama_lm):
    add_layer_pauses(llama_lm.decoder_layers())
    compute = ComputeThread(quantum=0.0)
    long_ids, short_ids = random_ids(llama_lm, 2, 40, seed=1), random_ids(llama_lm, 1, 9, seed=2)
    alone_long, alone_short = llama_lm.final_hidden(long_ids), llama_lm.final_hidden(short_ids)
    with torch.no_grad():
        alone_logits = llama_lm.model(short_ids).logits
    background, (hidden, logits) = _gated_background(compute, lambda: llama_lm.final_hidden(long_ids),
                                                     lambda: llama_lm.final_hidden(short_ids), lambda: llama_lm.model(short_ids).logits)
    assert torch.equal(background.result(timeout=60), alone_long)
    assert compute.pauses >= 1  # the other passes ran inside the long one, at its first layer
    assert torch.equal(hidden.result(timeout=60), alone_short) and torch.equal(logits.result(timeout=60), alone_logits)


def _callers(merged: Merged, items: list, compute: ComputeThread) -> list:
    """``merged(item)`` from one thread per item, all queued while the compute thread is held; results or errors."""
    release = threading.Event()
    compute.submit(release.wait)
    out: list = [None] * len(items)

    def call(k: int) -> None:
        try:
            out[k] = merged(items[k])
        except ValueError as err:
            out[k] = err

    threads = [threading.Thread(target=call, args=(k,)) for k in range(len(items))]
    for t in threads:
        t.start()
    while len(merged._pending) < len(items):
        threading.Event().wait(0.005)
    release.set()
    for t in threads:
        t.join()
    return out


def test_merged_calls_waiting_together_run_as_one_call_on_the_compute_thread():
    compute, seen = ComputeThread(), []

    def double(items: list[int]) -> list[int]:
        seen.append((threading.current_thread().name, list(items)))
        return [2 * x for x in items]

    merged = Merged(compute, double)
    assert _callers(merged, [1, 2, 3], compute) == [2, 4, 6]
    assert merged.calls == 1 and merged.items == 3
    assert seen[0][0].startswith("lmswitch-compute") and sorted(seen[0][1]) == [1, 2, 3]
    assert merged(5) == 10 and merged.calls == 2  # alone, later: its own call
    assert compute.run(merged, 4) == 8  # from the compute thread itself: run directly, no deadlock


def test_a_bad_item_fails_only_its_own_caller():
    def checked(items: list[int]) -> list[int]:
        if any(x < 0 for x in items):
            raise ValueError("negative")
        return [x + 1 for x in items]

    compute = ComputeThread()
    out = _callers(Merged(compute, checked), [1, -1, 2], compute)
    assert out[0] == 2 and out[2] == 3 and isinstance(out[1], ValueError)


def test_own_cores_keeps_every_other_threads_torch_ops_on_one_core():
    """After ``own_cores`` the compute thread keeps its threads, and a torch op on any other thread runs on one core
    and starts no OpenMP team (the process gains no thread): a second team would slow every later decode step. Run in
    a fresh process, since it sets the process's default."""
    code = textwrap.dedent("""
        import os, sys, threading, torch
        from lmswitch.serve.compute import ComputeThread
        torch.set_num_threads(2)
        compute = ComputeThread()
        if sys.argv[1] == "own":
            compute.own_cores()
        threads = lambda: len(os.listdir("/proc/self/task"))
        seen = {}
        def other():
            before = threads()
            torch.randn(1000, 1000).sum()
            seen.update(n=torch.get_num_threads(), grew=threads() - before)
        worker = threading.Thread(target=other)
        worker.start()
        worker.join()
        print(compute.run(torch.get_num_threads), seen["n"], seen["grew"])
    """)

    own, other = side_by_side([[sys.executable, "-c", code, mode] for mode in ("own", "not")], timeout=120,
                              cwd=Path(__file__).resolve().parents[1])  # counts, not times
    assert own.stdout.split() == ["2", "1", "0"]
    assert other.stdout.split() == ["2", "2", "1"]  # without it: the other thread's op starts a team of its own
