"""The app's backend: the models (loaded in the background), their switch libraries and the one compute thread."""

from __future__ import annotations

import atexit
import functools
import inspect
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import gradio as gr

from lmswitch.core.card import Card
from lmswitch.core.models import BUNDLED_MODELS, DEFAULT_MODEL, LanguageModel, load_model
from lmswitch.core.pause import Stopped, add_layer_pauses, stopping
from lmswitch.core.switch import Switch, SwitchFileError
from lmswitch.harness.frontier import calibrate, probe_for, probed_card, unsteered_rows
from lmswitch.io.documents import DocumentError
from lmswitch.io.resources import shipped_switches_dir
from lmswitch.lenses.svd import written_words
from lmswitch.serve.batcher import Batcher, Busy
from lmswitch.serve.compare import ComparisonCache
from lmswitch.serve.compute import ComputeThread
from lmswitch.serve.session import Session, SwitchLibrary
from lmswitch.webapp.files import export_folder

SERVER_STOPPING = "the server is stopping; send the request again once it is back"  # to whoever's request a stop cut short


class ServerStopping(RuntimeError):
    """Long work (a training, a sweep, a highlight) that the server's stop ended at its next pause point."""


USER_ERRORS = (ValueError, TypeError, SwitchFileError, DocumentError, Busy, ServerStopping)
PROBES_KEPT = 1024  # fluent ranges a server keeps (Backend.calibrated): a key and two numbers each


def _read_ahead(lm: LanguageModel) -> None:
    """What every user's work on a model needs, read once in the background as it is served: the words it writes
    (``written_words``, ~0.5 s, for a first "what it learned" or word list) and the unsteered rows a new switch's
    fluency probe compares with (``unsteered_rows``, ~1.8 s of the first training at the probe's 40 tokens). A failure here only means they
    are read when first needed, where the error is shown."""
    for read in (written_words, unsteered_rows):
        try:
            read(lm)
        except Exception:  # shown when a user's work needs it instead
            logging.getLogger(__name__).debug("reading %s of %s ahead failed", read.__name__, lm.name, exc_info=True)


def _on_disk_temp() -> str | None:
    """/var/tmp where this user can write there (on disk by convention, where /tmp may be memory, as on Debian 13), else
    the system's temporary folder."""
    return "/var/tmp" if os.access("/var/tmp", os.W_OK) else None


class Backend:
    """Loads the model in the background so the page can say so; then serves it to every session."""

    def __init__(self, model: str = DEFAULT_MODEL, switches: str | Path | None = None, dtype: str = "auto",
                 spool: str | Path | None = None) -> None:
        self.model_name = model
        self.dtype = dtype
        self.folder = Path(switches) if switches else None
        self.models: dict[str, tuple[LanguageModel, SwitchLibrary]] = {}
        self.error: str | None = None
        self.ready = threading.Event()
        self.export_dir = export_folder()  # the download buttons' files
        self.spool_dir = Path(tempfile.mkdtemp(prefix="lmswitch-closed-sessions-", dir=spool or _on_disk_temp()))  # closed pages' switches
        for folder in (self.export_dir, self.spool_dir):  # removed when the server exits (app.py: also on SIGTERM)
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
        atexit.register(self.finish_saving)  # first (atexit runs the last registered first): a save in progress ends
        # the server is stopping: a page that closes now keeps its switches in memory and its training stops (layout's
        # unload handler), and an API completion stops, telling its client why (openai_api)
        self.stopping = threading.Event()
        self.compute = ComputeThread()
        self.comparisons = ComparisonCache()  # keyed on content, so sessions may share it
        self._batchers: dict[int, Batcher] = {}
        self._batchers_lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}  # one lock per model name being loaded by Backend.model
        self._loading_lock = threading.Lock()
        self._probed: dict[tuple, tuple[float, float]] = {}  # Backend.calibrated's fluent ranges, oldest first
        self._probed_lock = threading.Lock()

    def finish_saving(self, timeout: float = 20.0) -> None:
        """Let a switch being saved to the library finish (the app ends its process without waiting for threads)."""
        for _, library in list(self.models.values()):
            library.finish_saving(timeout)

    @classmethod
    def with_model(cls, lm: LanguageModel, switches: str | Path | None) -> Backend:
        """A backend around an already loaded model (tests, notebooks)."""
        backend = cls(lm.name, switches)
        backend.add_model(lm)
        backend.ready.set()
        return backend

    def add_model(self, lm: LanguageModel, name: str | None = None) -> None:
        """Serve ``lm`` (already loaded) under ``name`` as well, with the folder's switches made for it; its forward passes
        pause before every decoder layer, so background work lets generations go first."""
        try:
            add_layer_pauses(lm.decoder_layers())
            pauses = True
        except ValueError:  # an architecture whose layers we cannot find: its forward passes run whole
            pauses = False
        self.models[name or lm.name] = (lm, SwitchLibrary(lm, self.folder))
        if pauses:  # else reading ahead would hold the compute thread, unpaused, before a user's first request
            self.compute.submit(_until(_read_ahead, self.stopping), lm, background=True)  # (a stop ends it)

    def start(self) -> Backend:
        self.compute.submit(self.load)
        return self

    def batcher(self, lm: LanguageModel) -> Batcher:
        """The request batcher of a served model (one per model, on the compute thread)."""
        with self._batchers_lock:
            if id(lm) not in self._batchers:
                self._batchers[id(lm)] = Batcher(lm, self.compute)
            return self._batchers[id(lm)]

    def run(self, fn: Callable, *args, background: bool = False, **kwargs):
        """``fn(*args, **kwargs)`` on the compute thread (directly when already there); ``background``: long work that lets
        other users' generations go first at its pause points (:mod:`lmswitch.serve.compute`), and that a stop of the
        server ends at the next one (:class:`ServerStopping`): nobody would read its answer, and the stop waited for it."""
        return self.compute.run(_until(fn, self.stopping) if background else fn, *args, background=background, **kwargs)

    def calibrated(self, lm: LanguageModel, switch: Switch, cancel: threading.Event | None = None,
                   cancelled: str = "the probe was cancelled") -> Card:
        """``switch``'s card with its fluent range probed on ``lm`` (a trained or transferred switch, as background work);
        on a failure, or ``cancel`` set meanwhile, its card as it was, saying why (``cancelled``): the switch must not be
        lost over it, and its slider spans the usual range. A measured range is kept for the served model (name, head
        and dtype), the matrix and the probe: the probe samples with fixed seeds, and it holds the compute thread for
        seconds (a switch moved to Gemma-3-270M: 12–21 s), so the same switch probed again, by any page, also while the
        first probe runs, or trained again from the same data, gets its range at once."""
        probe = probe_for(switch)
        key = (lm.name, lm.fingerprint, str(lm.model.dtype), switch.digest, probe)

        def measure(lm: LanguageModel, switch: Switch) -> tuple[float, float]:  # on the compute thread, after any probe
            fluent = self._kept(key)  # queued before it: many pages moving one switch at once probe it once
            if fluent is None:
                fluent = calibrate(lm, switch, probe)
                self._keep(key, fluent)  # here, before the next job: a probe failed or cancelled is not kept
            return fluent

        fluent = self._kept(key)  # the same switch again, e.g. a class moving the shipped one to Gemma
        if fluent is None:
            try:
                if cancel is not None and cancel.is_set():
                    raise Stopped
                fluent = self.run(_stopping(measure, cancel), lm, switch, background=True)
            except Stopped:
                return switch.card.updated(calibration_error=cancelled)
            except ServerStopping:  # nobody would use the switch: the training's caller is told the server stops
                raise
            except Exception as err:  # any failure: the switch is added uncalibrated, and its card says why
                return switch.card.updated(calibration_error=f"{type(err).__name__}: {err}")
        return probed_card(switch.card, fluent, probe)

    def _kept(self, key: tuple) -> tuple[float, float] | None:
        with self._probed_lock:
            return self._probed.get(key)

    def _keep(self, key: tuple, fluent: tuple[float, float]) -> None:
        with self._probed_lock:
            self._probed[key] = fluent
            while len(self._probed) > PROBES_KEPT:  # the oldest goes
                del self._probed[next(iter(self._probed))]

    def load(self) -> Backend:
        try:
            self.add_model(load_model(self.model_name, dtype=self.dtype), self.model_name)
        except Exception as err:  # shown on the page instead of a dead app
            self.error = f"{type(err).__name__}: {err}"
        finally:
            self.ready.set()
        return self

    @property
    def lm(self) -> LanguageModel | None:
        """The model the app started with (None until it is loaded)."""
        return self.models[self.model_name][0] if self.model_name in self.models else None

    @property
    def library(self) -> SwitchLibrary | None:
        """The switch folder's switches for the model the app started with."""
        return self.models[self.model_name][1] if self.model_name in self.models else None

    def status(self) -> dict:
        library = self.library
        return {"model": self.model_name, "ready": self.ready.is_set() and not self.error, "error": self.error,
                "switches": library.names() if library else [], "skipped": library.skipped if library else {},
                "folder": str(self.folder) if self.folder else None, "loaded_models": list(self.models)}

    def choices(self) -> list[str]:
        """The model picker's list: the bundled models and whatever else is loaded."""
        return list(dict.fromkeys([self.model_name, *BUNDLED_MODELS, *self.models]))

    def model(self, name: str) -> tuple[LanguageModel, SwitchLibrary]:
        """Model ``name`` and its switch library, loading it the first time: in the caller's thread, so the compute
        thread goes on serving other users meanwhile (Gemma-3-270M takes 4–6 s to load on 2 cores), once however many
        sessions ask at the same time; then it is served from the compute thread like the others."""
        self.get()
        if name not in self.models:
            if name not in self.choices():
                raise ValueError(f"unknown model {name!r}; choose one of {', '.join(self.choices())}")
            with self._loading_lock:
                lock = self._loading.setdefault(name, threading.Lock())
            with lock:
                if name not in self.models:
                    lm = load_model(name, dtype=self.dtype)
                    self.run(self.add_model, lm, name)
        return self.models[name]

    def get(self, timeout: float | None = 300, session: Session | None = None) -> tuple[LanguageModel, SwitchLibrary]:
        """The session's model (default: the one the app started with) and its switch library; waits while it loads."""
        if not self.ready.wait(timeout):
            raise gr.Error(f"The model '{self.model_name}' is still loading; try again in a few seconds.", print_exception=False)
        if self.error:
            raise gr.Error(f"The model could not be loaded ({self.error}); restart the app with another --model.", print_exception=False)
        if session is not None and session.model and session.model in self.models:
            return self.models[session.model]
        return self.lm, self.library


DEFAULT_SWITCHES = shipped_switches_dir()


def computed(fn: Callable | None = None, *, background: bool = True) -> Callable:
    """Run a handler ``fn(backend, ...)`` on the backend's compute thread: as background work for long answers (a
    sweep, a highlight, a transfer: other users' streamed generations go first at its pause points), or with
    ``@computed(background=False)`` as interactive work for quick ones (saving, importing), which may go first too."""
    if fn is None:
        return functools.partial(computed, background=background)

    @functools.wraps(fn)
    def call(backend: Backend, *args, **kwargs):
        return backend.run(fn, backend, *args, background=background, **kwargs)

    return call


def user_errors(fn: Callable) -> Callable:
    """Turn the library's ordinary exceptions into readable ``gr.Error`` messages (also for generators)."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def stream(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except gr.Error:  # already a message for people (a wrapped call): str() would quote it
                raise
            except USER_ERRORS as err:
                raise gr.Error(str(err), print_exception=False) from None  # the user's error: no traceback in the log

        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except USER_ERRORS as err:
            raise gr.Error(str(err), print_exception=False) from None  # the user's error: no traceback in the log

    return call


def _until(fn: Callable, stop: threading.Event) -> Callable:
    """``fn`` raising :class:`ServerStopping` at its next pause point once the server's ``stop`` is set."""
    stoppable = _stopping(fn, stop)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return stoppable(*args, **kwargs)
        except Stopped:
            if stop.is_set():
                raise ServerStopping(SERVER_STOPPING) from None
            raise  # an inner cancel's (Backend.calibrated)

    return run


def _stopping(fn: Callable, cancel: threading.Event | None) -> Callable:
    """``fn`` raising :class:`~lmswitch.core.pause.Stopped` at its next pause point once ``cancel`` is set."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with stopping(cancel):
            return fn(*args, **kwargs)

    return run
