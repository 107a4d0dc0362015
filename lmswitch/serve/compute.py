"""One long-lived thread for all model work of a server, with background jobs that pause for interactive ones.

On a few CPU cores torch's OpenMP pools slow every thread down once several
threads have used them (40 tokens: 1.3 s on one thread, 1.8–2.3 s across threads),
so a server runs every model call on this one thread, first come first served, and
:meth:`ComputeThread.own_cores` keeps every other thread's torch ops on one core.

Fair scheduling: a job submitted with ``background=True`` (training, sweeps,
calibration, guided and best-of-n decodes) runs with a pause handler (:mod:`lmswitch.core.pause`). At the
library's pause points (before every decoder layer of a served model, between the
solver's chunks of rows), once the job has had :data:`QUANTUM` seconds of the
thread, the interactive jobs waiting at that moment (other users' next tokens) run,
and the ones they queue (a running decode's next steps) for up to another quantum,
then the background job carries on: while both kinds have work, each gets about
half the thread. Work between two pause points runs whole: a
decoder layer, a chunk of the solver, and steps without pause points (the
full-vocabulary held-out loss of a training run, an SVD), which take well under a
second for the models and data the app trains on. Long jobs that come as
iterators (training) also run one ``next()`` at a time.
"""

from __future__ import annotations

import collections
import contextvars
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import torch

from lmswitch.core.pause import detach_pausing, pausing

T = TypeVar("T")
R = TypeVar("R")

THREAD_PREFIX = "lmswitch-compute"
# seconds a background job runs before it lets the interactive jobs waiting at a pause point go first ("inf": never);
# wall time at the pause points (on a GPU, where kernels run asynchronously, that is mostly launch time)
QUANTUM = float(os.environ.get("LMSWITCH_PAUSE_QUANTUM", "0.1"))


def _job_context() -> contextvars.Context:
    """The caller's context for a new job, without a pause handler: a job queued from inside background work is not
    part of it and must not pause on its behalf."""
    context = contextvars.copy_context()
    context.run(detach_pausing)
    return context


@dataclass(eq=False)  # jobs are compared (and removed from the queue) by identity
class _Job:
    fn: Callable
    args: tuple
    kwargs: dict
    background: bool
    context: contextvars.Context = field(default_factory=_job_context)
    future: Future = field(default_factory=Future)


class ComputeThread:
    """Runs callables on one dedicated thread, in order; calls made from that thread run directly (no deadlock).

    >>> compute = ComputeThread()
    >>> compute.run(sum, [1, 2, 3])
    6
    """

    def __init__(self, quantum: float = QUANTUM) -> None:
        self.quantum = quantum
        self.pauses = 0  # how many times background work let interactive work go first
        self._jobs: collections.deque[_Job] = collections.deque()
        self._ready = threading.Condition()
        self._slice_start = 0.0
        self._thread = threading.Thread(target=self._loop, name=THREAD_PREFIX, daemon=True)
        self._thread.start()

    @staticmethod
    def on_thread() -> bool:
        return threading.current_thread().name.startswith(THREAD_PREFIX)

    def submit(self, fn: Callable[..., T], *args, background: bool = False, **kwargs) -> Future:
        """Queue ``fn(*args, **kwargs)`` (run in a copy of the caller's context); its future."""
        job = _Job(fn, args, kwargs, background)
        with self._ready:
            self._jobs.append(job)
            self._ready.notify()
        return job.future

    def run(self, fn: Callable[..., T], *args, background: bool = False, **kwargs) -> T:
        """``fn(*args, **kwargs)`` on the compute thread; returns its result or raises its error."""
        if self.on_thread():
            return fn(*args, **kwargs)
        return self.submit(fn, *args, background=background, **kwargs).result()

    def own_cores(self) -> None:
        """Make this thread the only one of the process whose torch ops run on several cores: other threads (the
        caller, and threads that start later) run theirs on one, so none of them starts a second OpenMP team.

        With a second team libgomp counts more threads than cores and stops spinning between parallel regions, and
        from then on every op of this thread's decode pays a wake-up (2 rows × 20 tokens: 0.68 s instead of 0.36 s on
        2 cores, for the rest of the process). For a server, whose model work all runs on this thread; threads that
        already ran torch ops keep their setting."""
        self.run(torch.get_num_threads)  # torch sets a thread's OpenMP threads at its first use: this one's, now
        torch.set_num_threads(1)  # the default of threads that start later, and the caller's own

    def stepped(self, items: Iterator[T], background: bool = True) -> Iterator[T]:
        """The items of ``items``, each produced by one ``next()`` on the compute thread (as background work).

        Other work queued on the thread runs between two items (e.g. another
        user's generation between two training steps), and inside one at its pause
        points. Closing this iterator closes ``items`` (on the compute thread),
        which stops its work.
        """
        done = object()
        try:
            while (item := self.run(next, items, done, background=background)) is not done:
                yield item
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                self.run(close, background=background)

    def _loop(self) -> None:
        while True:
            with self._ready:
                while not self._jobs:
                    self._ready.wait()
                job = self._jobs.popleft()
            self._execute(job)

    def _execute(self, job: _Job) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        try:
            result = (job.context.run(self._background, job) if job.background
                      else job.context.run(job.fn, *job.args, **job.kwargs))
        except BaseException as err:  # handed to the caller
            job.future.set_exception(err)
        else:
            job.future.set_result(result)

    def _background(self, job: _Job):
        self._slice_start = time.perf_counter()
        with pausing(self._pause):
            return job.fn(*job.args, **job.kwargs)

    def _pause(self) -> None:
        """At a pause point of a background job: after a quantum, run the interactive jobs waiting now, and those they
        queue (a running decode's next step), for up to a quantum; then go on."""
        if time.perf_counter() - self._slice_start < self.quantum:
            return
        until = time.perf_counter() + self.quantum
        if self._run_waiting():
            self.pauses += 1
            while time.perf_counter() < until and self._run_waiting():
                pass
        self._slice_start = time.perf_counter()

    def _run_waiting(self) -> bool:
        """Run the interactive jobs waiting now (inside a paused background job); whether there were any."""
        with self._ready:
            waiting = [job for job in self._jobs if not job.background]
            self._jobs = collections.deque(job for job in self._jobs if job.background)
        ran = bool(waiting)
        try:
            with torch.inference_mode(False), torch.enable_grad():  # as if run from the loop, not inside the paused job
                while waiting:
                    self._execute(waiting.pop(0))
        finally:  # should anything fail here, the jobs not run yet go back to the front of the queue, never lost
            with self._ready:
                self._jobs.extendleft(reversed(waiting))
        return ran


class Merged(Generic[T, R]):
    """Calls from many threads merged on the compute thread: the items waiting when the thread gets to them go to one
    ``fn(items)`` call, which returns one result per item (e.g. several users' outputs scored in one body pass).

    Should the merged call fail, each of its items runs alone, so a bad item fails only its own caller.

    >>> double = Merged(ComputeThread(), lambda items: [2 * x for x in items])
    >>> double(21)
    42
    """

    def __init__(self, compute: ComputeThread, fn: Callable[[list[T]], list[R]]) -> None:
        self.compute, self.fn = compute, fn
        self.calls = 0  # merged calls made so far, and the items they held
        self.items = 0
        self._pending: list[tuple[T, Future]] = []
        self._lock = threading.Lock()

    def __call__(self, item: T) -> R:
        if self.compute.on_thread():
            return self.fn([item])[0]
        future: Future = Future()
        with self._lock:
            self._pending.append((item, future))
            first = len(self._pending) == 1
        if first:  # later items join this flush until it starts
            self.compute.submit(self._flush)
        return future.result()

    def _flush(self) -> None:
        with self._lock:
            jobs, self._pending = self._pending, []
        if not jobs:  # an earlier flush took them (it started between their append and this flush's submit)
            return
        self.calls, self.items = self.calls + 1, self.items + len(jobs)
        try:
            results = self.fn([item for item, _ in jobs])
        except BaseException as err:
            if len(jobs) == 1:
                jobs[0][1].set_exception(err)
                return
            for item, future in jobs:
                try:
                    future.set_result(self.fn([item])[0])
                except BaseException as alone:  # handed to that item's caller only
                    future.set_exception(alone)
            return
        for (_, future), result in zip(jobs, results, strict=True):
            future.set_result(result)


def until(flag: threading.Event, items: Iterator[T]) -> Iterator[T]:
    """Items of ``items`` until ``flag`` is set; closes ``items`` (stopping its work) when it stops early."""
    try:
        for item in items:
            if flag.is_set():
                return
            yield item
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()
