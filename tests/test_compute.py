"""The compute thread: everything runs on it, calls from it run directly, stepped iterators interleave."""

from __future__ import annotations

import threading

from lmswitch.serve.compute import ComputeThread, until


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
