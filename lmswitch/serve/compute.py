"""One long-lived thread for all model work of a server, and helpers to stream from it.

On a few CPU cores torch's OpenMP pools slow every thread down once several
threads have used them (40 tokens: 1.3 s on one thread, 1.8–2.3 s across threads),
so a server runs every model call on this one thread. Long jobs that come as
iterators (training) run there one ``next()`` at a time, so other users' requests
are served between their steps.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

THREAD_PREFIX = "lmswitch-compute"


class ComputeThread:
    """Runs callables on one dedicated thread; calls made from that thread run directly (no deadlock).

    >>> compute = ComputeThread()
    >>> compute.run(sum, [1, 2, 3])
    6
    """

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=THREAD_PREFIX)

    @staticmethod
    def on_thread() -> bool:
        return threading.current_thread().name.startswith(THREAD_PREFIX)

    def run(self, fn: Callable[..., T], *args, **kwargs) -> T:
        """``fn(*args, **kwargs)`` on the compute thread, in the caller's context; returns its result or raises its error."""
        if self.on_thread():
            return fn(*args, **kwargs)
        return self.executor.submit(contextvars.copy_context().run, fn, *args, **kwargs).result()

    def submit(self, fn: Callable[..., T], *args, **kwargs):
        return self.executor.submit(fn, *args, **kwargs)

    def stepped(self, items: Iterator[T]) -> Iterator[T]:
        """The items of ``items``, each produced by one ``next()`` on the compute thread.

        Other work queued on the thread runs between two items (e.g. another
        user's generation between two training steps). Closing this iterator
        closes ``items`` (on the compute thread), which stops its work.
        """
        done = object()
        try:
            while (item := self.run(next, items, done)) is not done:
                yield item
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                self.run(close)


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
