"""Pause points: long work (training, sweeps, calibration) lets waiting interactive work run between bounded pieces.

The library calls :func:`pause_point` between bounded pieces of its long loops:
before every decoder layer of a forward pass (once :func:`add_layer_pauses` has
been called on the model), and after each optimiser evaluation. Outside a server
nothing is listening and a pause point costs one context-variable read. A server
(:mod:`lmswitch.serve.compute`) runs its background jobs inside :func:`pausing`
with a handler that runs the interactive work waiting at that moment (another
user's next token) and returns; the long job then carries on where it was.

>>> pause_point()   # nothing listening: returns at once
>>> seen = []
>>> with pausing(lambda: seen.append("other work")):
...     pause_point()
>>> seen
['other work']
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

_HANDLER: ContextVar[Callable[[], None] | None] = ContextVar("lmswitch_pause_handler", default=None)
_LAYER_PAUSES = "_lmswitch_layer_pauses"  # attribute marking a decoder-layer list whose layers call pause_point


def pause_point() -> None:
    """Let waiting interactive work run, if this code runs as a server's background job; otherwise return at once."""
    handler = _HANDLER.get()
    if handler is not None:
        handler()


@contextmanager
def pausing(handler: Callable[[], None]) -> Iterator[None]:
    """Inside the block (this context only), every :func:`pause_point` calls ``handler``."""
    token = _HANDLER.set(handler)
    try:
        yield
    finally:
        _HANDLER.reset(token)


class Stopped(Exception):
    """Raised at a pause point inside :func:`stopping` once its flag is set."""


@contextmanager
def stopping(flag: threading.Event | None) -> Iterator[None]:
    """Inside the block (this context only), a pause point raises :class:`Stopped` once ``flag`` is set, and otherwise
    does what it did outside (runs a server's waiting work): a long job that has no cancel of its own (the fluent-range
    probe) ends within one layer of the user asking. ``None``: no change."""
    if flag is None:
        yield
        return
    outer = _HANDLER.get()

    def handler() -> None:
        if flag.is_set():
            raise Stopped
        if outer is not None:
            outer()

    with pausing(handler):
        yield


def detach_pausing() -> None:
    """From here on in this context, no pause handler (for work queued from inside background work: not part of it)."""
    _HANDLER.set(None)


def _before_layer(_module: torch.nn.Module, _args: tuple) -> None:
    pause_point()


def add_layer_pauses(layers: torch.nn.ModuleList) -> None:
    """Put a pause point before every layer of ``layers`` (idempotent). A paused forward pass holds no state in the
    modules, so other forward passes of the same model may run at the pause and the paused one carries on unchanged."""
    if getattr(layers, _LAYER_PAUSES, False):
        return
    for layer in layers:
        layer.register_forward_pre_hook(_before_layer)
    setattr(layers, _LAYER_PAUSES, True)
