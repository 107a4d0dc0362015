"""How the app stops: Ctrl+C, a service manager's SIGTERM or a closed terminal's SIGHUP end the server once, cleanly.

Kept apart from ``app.py`` (which imports Gradio and the model's libraries) so that its behaviour can be tested in a
process of its own in well under a second.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl+C; a service manager's stop; a closed terminal
SHUTDOWN_LIMIT = 60  # seconds a shutdown may take before the process prints its threads' stacks and exits with 1
REDELIVERY_DELAY = 0.01  # seconds before a stop dropped inside a finalizer is sent again (deliver_again)
STOPPING = "lmswitch: stopping the server"  # printed when a stop signal arrives while it serves
STOPPED_STARTING = "lmswitch: stopped while starting"  # printed when one arrives before it serves


def stop_once(signum: int, frame) -> None:
    """The first stop signal stops the server; later ones are ignored, so they cannot break into the shutdown
    (stopping ``make app``'s process group with SIGTERM sends two, a moment apart: the stopper's and the one make passes
    on). Ignored by the OS, not by a Python handler, which the interpreter drops while it exits (a late SIGTERM then
    killed it), and with no lock here (a second signal can run this handler inside the first: a lock held there
    deadlocked the server). A closed terminal's output would fail (EIO) and stop the shutdown: it goes to /dev/null."""
    quiet()
    if signum == signal.SIGHUP:
        null = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            if os.isatty(fd):
                os.dup2(null, fd)
    raise KeyboardInterrupt


def quiet() -> None:
    """From now on the stop signals do nothing, and a shutdown that hangs ends itself after :data:`SHUTDOWN_LIMIT`."""
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.SIG_IGN)
    faulthandler.dump_traceback_later(SHUTDOWN_LIMIT, exit=True)


def deliver_again(unraisable) -> None:
    """``sys.unraisablehook``: a stop that :func:`stop_once` raised while Python ran a finalizer (an object's
    ``__del__``, e.g. an event loop's) was printed and dropped there, and the server kept starting, deaf to the stop
    signals :func:`quiet` had silenced, until the shutdown limit ended it with a stack dump. It is delivered again:
    a SIGINT sent from another thread a moment later, once this hook and the finalizer have returned (sent from here,
    its handler would run inside the hook and be dropped too; landing in another finalizer, it comes back here)."""
    ours = signal.getsignal(signal.SIGINT) is signal.SIG_IGN and threading.current_thread() is threading.main_thread()
    if issubclass(unraisable.exc_type, KeyboardInterrupt) and ours:
        signal.signal(signal.SIGINT, stop_once)
        threading.Timer(REDELIVERY_DELAY, os.kill, (os.getpid(), signal.SIGINT)).start()
        return
    sys.__unraisablehook__(unraisable)


def stop_on_signals() -> None:
    """Each stop signal ends the server once (:func:`stop_once`), so the exit handlers remove its temporary folders;
    one ignored from the start (nohup, a background job) stays ignored."""
    for stop in STOP_SIGNALS:
        if signal.getsignal(stop) is not signal.SIG_IGN:
            signal.signal(stop, stop_once)
    sys.unraisablehook = deliver_again


def stopped_while_starting() -> None:
    """Say that a stop ended the app before it served; call it where the start's ``KeyboardInterrupt`` is caught.

    The stop broke into the start wherever it was, and an object whose ``__init__`` it interrupted is left half-built:
    an event loop stopped that way failed in its finalizer ("'_UnixSelectorEventLoop' object has no attribute
    '_ssock'") when the caught stop released it, and printed a traceback on the way out. The process is ending, so
    the finalizers' errors from here on are not printed."""
    sys.unraisablehook = lambda unraisable: None
    with contextlib.suppress(OSError):  # a closed terminal's output
        print(STOPPED_STARTING, flush=True)


def serve_until_stopped(demo, announce: str, on_stop: Callable[[], None]) -> None:
    """Print ``announce`` (the server is up), then serve until a stop signal; then ``on_stop()`` and close the server.

    Gradio's ``Blocks.block_thread``, with a stop that does not wait for open pages. ``block_thread`` closes the server
    gracefully, and uvicorn then waits for every open connection, among them the heartbeat stream of each open page and
    ``gradio_client``, which ends only with its page: Gradio gave up after 5 s, so with a page open every stop took 5 s.
    Here those streams end first (the served app's stop event, as Gradio's own front proxy ends them), which runs each
    page's unload handler (which also stops the page's training: it would be lost with the process), then the server
    closes gracefully. A completion still running over the OpenAI-compatible API stops too, and its client is told the
    server is stopping (:mod:`lmswitch.webapp.openai_api`)."""
    try:
        print(announce, flush=True)  # inside: a stop from here on is a stop of a serving app
        while demo.is_running:
            time.sleep(0.1)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):  # a closed terminal's output
            print(STOPPING, flush=True)
        try:
            on_stop()
            _set_on_its_loop(demo.server_app.stop_event)
        finally:
            demo.server.close()


def _set_on_its_loop(event) -> None:
    """Set an ``asyncio.Event`` of the server's event loop (which runs in another thread) through that loop, as its
    waiters' futures may only be resolved there; one that nothing has waited on yet is bound to no loop."""
    loop = getattr(event, "_loop", None)
    if loop is not None and loop.is_running():
        loop.call_soon_threadsafe(event.set)
    else:
        event.set()
