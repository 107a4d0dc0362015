"""Switch sets for interactive use: a shared switch folder and per-user sessions.

The web app holds one :class:`SwitchLibrary` (the folder every user sees) and one
:class:`Session` per browser tab or API client (switches trained or imported
there, private until saved, and the handles that let a newer request stop an
older one). Both are plain Python objects that any front end can use.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lmswitch.core.models import LanguageModel
from lmswitch.core.switch import STEERS_NOTHING, Switch, SwitchFileError, check_name, distinct, load_switch
from lmswitch.serve.limits import MAX_METER_SWITCHES

MAX_SESSION_SWITCHES = 32  # each is a d × d float32 matrix (1.3 MB for the embedded model)
TRASH = ".trash"  # the library folder's subfolder where deleted switches go (the library reads only the folder itself)
SPOOL_QUOTA = 4 * 2**30  # bytes of closed sessions' switches on disk; past it, a closed session keeps them in memory
OLDER_WAIT = 5.0  # seconds a page generation's finished text waits, at most, for the page's older generations to end
SETTLE = 0.1  # and then from the last one's end: the time Gradio takes to send that event's final message


class NameTaken(ValueError):
    """The library already has a switch by that name."""


def _free_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base-2``, ``base-3`` … : the first not in ``taken``."""
    final, k = base, 1
    while final in taken:
        k += 1
        final = f"{base}-{k}"
    return final


class SwitchLibrary:
    """The switches in one folder, validated against ``lm``; saving never overwrites a file.

    Files that fail validation (corrupted, not a switch, wrong size) are skipped and
    listed in :attr:`skipped` with the reason, so one bad file cannot stop the app;
    switches made for other models are listed in :attr:`other_models`.
    """

    def __init__(self, lm: LanguageModel, folder: str | Path | None) -> None:
        self.lm = lm
        self.folder = Path(folder) if folder else None
        self.skipped: dict[str, str] = {}
        self.other_models: dict[str, str] = {}  # files made for other models (e.g. transferred switches): file -> model
        self._switches: dict[str, Switch] = {}
        self._lock = threading.Lock()
        if self.folder is None:
            return
        if not self.folder.is_dir():
            raise ValueError(f"switch folder {self.folder} does not exist; create it or pass another folder")
        for path in sorted(self.folder.glob("*.safetensors")):
            try:
                switch = load_switch(path)
                if switch.model_fingerprint and switch.model_fingerprint != lm.fingerprint:
                    self.other_models[path.name] = switch.model_name or switch.model_fingerprint
                    continue
                switch.check_model(lm)
                if switch.steers_nothing:  # an old import of an empty switch: every page's meter would read it
                    raise SwitchFileError(f"it {STEERS_NOTHING}: it would not steer anything")
                self._switches[path.stem] = switch
            except SwitchFileError as err:
                self.skipped[path.name] = str(err)

    def names(self) -> list[str]:
        with self._lock:
            return list(self._switches)

    def get(self, name: str) -> Switch | None:
        with self._lock:
            return self._switches.get(name)

    def finish_saving(self, timeout: float) -> bool:
        """Wait (up to ``timeout`` seconds) for a save in progress to finish; whether none is left."""
        if not self._lock.acquire(timeout=timeout):
            return False
        self._lock.release()
        return True

    def save(self, name: str, switch: Switch) -> Path:
        """Write ``switch`` as ``<folder>/<name>.safetensors`` (atomic) unless that name is taken."""
        name = check_name(name)
        if self.folder is None:
            raise ValueError("no switch folder is configured, so switches cannot be saved; start the app with --switches DIR")
        switch.check_model(self.lm)
        path = self.folder / f"{name}.safetensors"
        with self._lock:
            if name in self._switches or path.exists():
                raise NameTaken(f"the library already has a switch named '{name}'")
            switch.name = name
            switch.save(path)
            self._switches[name] = switch
        return path

    def remove(self, name: str) -> Path:
        """Move ``name``'s file into the folder's :data:`TRASH` (nothing is deleted: moved back by hand, the switch is in
        the library again at the next start); returns where it went (``name-2`` … there when the name was taken)."""
        with self._lock:
            if name not in self._switches:
                raise ValueError(f"no switch named '{name}' in the library")
            trash = self.folder / TRASH
            trash.mkdir(exist_ok=True)
            target = trash / f"{_free_name(name, {p.stem for p in trash.glob('*.safetensors')})}.safetensors"
            del self._switches[name]
            with contextlib.suppress(FileNotFoundError):  # (removed by hand meanwhile: out of the library all the same)
                os.replace(self.folder / f"{name}.safetensors", target)
        return target


@dataclass(frozen=True)
class MeterPick:
    """The switches a style meter reads, the names of those left out past its cap, and each switch skipped because
    another has its matrix (a retrain alike, an import twice): its name → the name read in its place."""

    read: list[Switch]
    left_out: list[str] = field(default_factory=list)
    same: dict[str, str] = field(default_factory=dict)


class Session:
    """One user's private switches and running jobs.

    Names are unique across the session and the library. ``order`` is the stable
    order in which switches get sliders. A new generation stops the previous
    one (:meth:`new_generation`); training can be cancelled (:meth:`cancel_training`).
    When its page closes, its generation stops (:meth:`stop_generation`) and its unsaved switches can wait on disk
    (:meth:`spill`).
    """

    def __init__(self) -> None:
        self.switches: dict[str, Switch] = {}
        self.order: list[str] = []
        self.model: str | None = None  # the model this session steers (None: the app's default)
        self.wide_sliders = False  # sliders span the switch's full range, beyond its calibrated fluent range
        self.measuring: set[str] = set()  # switches just trained whose fluent range is being probed (their sliders wait on it)
        self.saved: set[str] = set()  # switches this session saved to the library: the ones it may delete from there
        self.slots: list[str] = []  # the switch of each slider slot, as the page last drew them (a deleted one stays)
        self.shown: tuple | None = None  # (library, its switches' names) as the page's pickers last showed them (None: not yet)
        self.reported: str | None = None  # the switch the Train tab's report is about (its last training's)
        self._spilled: dict[str, tuple[Path, str]] = {}  # name -> (file, model fingerprint): moved to disk by spill()
        self._spill_after_training: Path | None = None  # the page closed while a training run was going
        self._generation: threading.Event | None = None
        self._running: dict[threading.Event, threading.Event] = {}  # page generations' stop flags -> set when they end
        self._last_end = 0.0  # time.monotonic() when a page generation last ended
        self._scripted: weakref.WeakSet[threading.Event] = weakref.WeakSet()  # flags of running non-superseding generations
        self._training: threading.Event | None = None
        self._lock = threading.Lock()
        # a session Gradio lets go of takes its files with it (at exit, the app removes the whole folder instead)
        weakref.finalize(self, _remove_files, self._spilled).atexit = False

    def __deepcopy__(self, memo: dict) -> Session:
        # ``gr.State(Session())`` deep-copies its value once for every new browser session or API client:
        # each gets a fresh, empty session (switches, locks and stop flags are never shared)
        return Session()

    # --- switches --------------------------------------------------------------------
    def sync(self, library: SwitchLibrary) -> list[str]:
        """Append library switches not yet in :attr:`order` (e.g. saved by another user); returns the order."""
        with self._lock:
            self._sync(library)
            return list(self.order)

    def _sync(self, library: SwitchLibrary) -> None:
        self.order.extend(name for name in library.names() if name not in self.order)

    def _mine(self, name: str, library: SwitchLibrary) -> Switch | None:
        self._restore(name)
        switch = self.switches.get(name)
        return switch if switch is not None and _for_model(switch.model_fingerprint, library) else None

    def _has(self, name: str, library: SwitchLibrary) -> bool:
        """Whether this session holds ``name`` for the library's model, in memory or on disk (without reading it back)."""
        if name in self.switches:
            return _for_model(self.switches[name].model_fingerprint, library)
        return name in self._spilled and _for_model(self._spilled[name][1], library)

    def unsaved(self, name: str) -> bool:
        """Whether ``name`` lives only in this session (trained, imported or transferred here, not saved to the library)."""
        with self._lock:
            return name in self.switches or name in self._spilled

    def full(self) -> bool:
        """Whether this session holds as many unsaved switches as it may (in memory or moved to disk)."""
        return len(self.switches) + len(self._spilled) >= MAX_SESSION_SWITCHES

    def get(self, name: str, library: SwitchLibrary) -> Switch:
        """A switch of this session or the library, made for the library's model."""
        if not name:  # a picker left empty (a model without switches, say)
            hint = "" if self.available(library) else " (this model has none yet: train or import one, or pick another model)"
            raise ValueError(f"no switch is picked: pick one{hint}")
        with self._lock:
            switch = self._mine(name, library)
        switch = switch or library.get(name)
        if switch is None:
            known = ", ".join(self.available(library)) or "none"
            raise ValueError(f"no switch named '{name}' in this session or the library (available: {known})")
        return switch

    def available(self, library: SwitchLibrary) -> list[str]:
        names = self.sync(library)
        with self._lock:
            return [n for n in names if self._has(n, library) or library.get(n) is not None]

    def meter_switches(self, library: SwitchLibrary, names: Sequence[str] = (), first: Switch | None = None) -> MeterPick:
        """The switches a style meter reads (:class:`MeterPick`): the ``names`` given (at most
        :data:`~lmswitch.serve.limits.MAX_METER_SWITCHES`, else ``ValueError``), else ``first`` and then this session's
        others, one per matrix, the first of them up to that cap (the meter's time grows fast with its switches)."""
        if names:
            if len(names) > MAX_METER_SWITCHES:
                raise ValueError(f"the meter reads at most {MAX_METER_SWITCHES} switches at once; got {len(names)}")
            return MeterPick([self.get(n, library) for n in names])
        candidates = [*([first] if first is not None else []), *(self.get(n, library) for n in self.available(library))]
        every = distinct(candidates)
        kept = {s.digest: s.name for s in every}
        same = {s.name: kept[s.digest] for s in candidates if kept[s.digest] != s.name}
        return MeterPick(every[:MAX_METER_SWITCHES], [s.name for s in every[MAX_METER_SWITCHES:]], same)

    def add(self, switch: Switch, library: SwitchLibrary, name: str | None = None) -> str:
        """Keep ``switch`` in this session under ``name`` (made unique with a ``-2``, ``-3`` … suffix); returns the name."""
        switch.check_model(library.lm)
        base = check_name(name if name is not None else switch.name)
        with self._lock:
            self._sync(library)  # library switches keep the first sliders
            if self.full():
                raise ValueError(f"this session already holds {MAX_SESSION_SWITCHES} switches; save or reload to start over")
            final = _free_name(base, set(self.switches) | set(self.order) | set(library.names()))
            switch.name = final
            self.switches[final] = switch
            self.order.append(final)
        return final

    def save(self, name: str, library: SwitchLibrary) -> tuple[str, Path]:
        """Save a session switch to the library folder; returns the name it is saved under and its file.

        It keeps its name unless another page has saved a switch by that name since: then it takes the first free
        ``-2``, ``-3`` … name, in this session too (its slider stays in place; the library's switch gets a new one)."""
        with self._lock:
            self._restore(name)
            switch = self.switches.get(name)
        if switch is None:
            if library.get(name) is not None:
                raise ValueError(f"'{name}' is already in the library")
            raise ValueError(f"no session switch named '{name}'")
        if name in self.measuring:  # its card would be saved without the range, for every later session
            raise ValueError(f"the fluent ε range of '{name}' is still being measured (a few seconds): save it once the "
                             "Train tab says Done, so that the saved switch keeps its range")
        final, tried = name, set()
        while True:
            try:
                path = library.save(final, switch)
                break
            except NameTaken:  # saved from another page meanwhile (or a file the library skipped has that name)
                tried.add(final)
                with self._lock:
                    final = _free_name(name, tried | set(self.switches) | set(self.order) | set(library.names()))
        with self._lock:
            self.switches.pop(name, None)
            self._forget_file(name)  # spilled meanwhile: the library has it now
            self.saved.add(final)
            if final != name:
                self.order[self.order.index(name)] = final
                self.reported = final if self.reported == name else self.reported
        return final, path

    def delete(self, name: str, library: SwitchLibrary) -> Path | None:
        """Delete a switch this session made: an unsaved one leaves the session (None); one it saved leaves the library,
        its file moved to the library's trash (:meth:`SwitchLibrary.remove`; returned). Another page's switches, and the
        library's from before this session, are not its to delete: refused, saying where their file is."""
        if name in self.measuring:
            raise ValueError(f"the fluent ε range of '{name}' is still being measured (a few seconds): delete it once the "
                             "Train tab says Done")
        with self._lock:
            if name in self.switches or name in self._spilled:
                self.switches.pop(name, None)
                self._forget_file(name)
                self.order = [n for n in self.order if n != name]
                return None
        if name in self.saved and library.get(name) is not None:
            moved = library.remove(name)
            with self._lock:
                self.saved.discard(name)
                self.order = [n for n in self.order if n != name]
            return moved
        if library.get(name) is not None:  # (a library without a folder has no switches)
            raise ValueError(f"'{name}' was not saved from this page, so it stays for everyone who uses it; to delete it, "
                             f"move its file {library.folder / f'{name}.safetensors'} out of the library folder")
        raise ValueError(f"no switch named '{name}' in this session or the library")

    # --- a closed page ----------------------------------------------------------------
    def spill(self, folder: Path, quota: int = SPOOL_QUOTA) -> int:
        """Move this session's unsaved switches out of memory into files in ``folder``; returns how many moved.

        For a page or client that has closed: Gradio keeps its session (until its limit of sessions pushes it out) in
        case the same client comes back, and a switch comes back from its file on first use. Switches stay in memory
        when they cannot be written (full or read-only disk) or would take the folder past ``quota`` bytes. While a
        training run is going nothing moves; the run's end does it (the run still writes its switch's card).
        """
        folder = Path(folder)
        with self._lock:
            if self._training is not None:
                self._spill_after_training = folder
                return 0
            todo = list(self.switches.items())
        written = _spill_files(todo, folder, quota)  # without the lock: the session stays usable meanwhile
        moved = 0
        with self._lock:
            for name, switch, path in written:
                if self.switches.get(name) is switch:  # not saved to the library or replaced meanwhile
                    self._spilled[name] = (path, switch.model_fingerprint)
                    del self.switches[name]
                    moved += 1
                else:
                    _unlink(path)
        return moved

    def _restore(self, name: str) -> None:
        """Read a spilled switch back into memory (under the lock); its file goes once the switch is back.

        A file that cannot be read is dropped with a clear error, once, so the rest of the session keeps working.
        """
        if name not in self._spilled:
            return
        path, _ = self._spilled[name]
        try:
            switch = load_switch(path)
        except SwitchFileError as err:
            self._forget_file(name)
            raise ValueError(f"the session switch '{name}' was moved to disk when its page closed and could not be read back "
                             f"({err}), so it is gone; train or import it again") from err
        self.switches[name] = switch  # in memory before its file goes
        self._forget_file(name)

    def _forget_file(self, name: str) -> None:
        path, _ = self._spilled.pop(name, (None, None))
        if path is not None:
            _unlink(path)

    # --- jobs ------------------------------------------------------------------------
    def new_generation(self, supersede: bool = True) -> threading.Event:
        """A stop flag for a new generation; the previous generation's flag is set, so it stops at its next token (a
        dragged slider's older text). With ``supersede`` False (a script's request, ``/generate``: several may run at
        once) it neither stops another nor is stopped by a newer one; every generation stops when the page closes."""
        flag = threading.Event()
        with self._lock:
            if not supersede:
                self._scripted.add(flag)  # (weakly: gone with the generation that holds it)
                return flag
            if self._generation is not None:
                self._generation.set()
            self._generation = flag
            self._running[flag] = threading.Event()
            return flag

    def end_generation(self, flag: threading.Event) -> None:
        """The page generation with this stop flag ended: its event's generator returned or was closed."""
        with self._lock:
            ended = self._running.pop(flag, None)
            self._last_end = time.monotonic()
        if ended is not None:
            ended.set()

    def after_older_generations(self, flag: threading.Event, timeout: float = OLDER_WAIT) -> None:
        """Wait until the page's generations older than ``flag`` have ended, then :data:`SETTLE` more (``timeout`` at
        most for all). Gradio ends an event by sending its last outputs again; an older request that had finished its
        text just before a newer one came, answered at once from the cache, would otherwise put its text over the
        newer one's on the page. One that has not ended by then is not waited for again (its event was dropped
        without ending its generator: a later request must not wait for it each time)."""
        with self._lock:
            flags = list(self._running)  # (a dict keeps its order: older first)
            older = {f: self._running[f] for f in flags[:flags.index(flag)]} if flag in self._running else {}
        deadline = time.monotonic() + timeout
        for ended in older.values():
            ended.wait(max(0.0, deadline - time.monotonic()))
        with self._lock:
            for f, ended in older.items():
                if not ended.is_set():
                    self._running.pop(f, None)
        time.sleep(max(0.0, min(self._last_end + SETTLE, deadline) - time.monotonic()))

    def stop_generation(self) -> None:
        """Stop the running generation at its next token or piece (its page closed: nobody reads it, and others wait for the
        compute it holds). A training run goes on: its switch is kept for the page's return (:meth:`spill`)."""
        with self._lock:
            if self._generation is not None:
                self._generation.set()
            for flag in list(self._scripted):
                flag.set()

    def start_training(self) -> threading.Event:
        with self._lock:
            if self._training is not None and not self._training.is_set():
                raise ValueError("a training run is already going in this session; wait for it or cancel it")
            self._training = threading.Event()
            return self._training

    def end_training(self, flag: threading.Event) -> None:
        with self._lock:
            flag.set()  # a finished run counts as stopped, so a new one may start
            if self._training is flag:
                self._training = None
            folder, self._spill_after_training = self._spill_after_training, None
        if folder is not None:  # the page closed during the run; not on this thread, which may be Gradio's event loop
            threading.Thread(target=self.spill, args=(folder,), name="lmswitch-spill", daemon=True).start()

    def cancel_training(self) -> bool:
        """Ask the running training to stop; False if none is running."""
        with self._lock:
            if self._training is None:
                return False
            self._training.set()
            return True


def _for_model(fingerprint: str, library: SwitchLibrary) -> bool:
    """Whether a switch with this fingerprint steers the library's model (no fingerprint: made before they were kept)."""
    return fingerprint in ("", library.lm.fingerprint)


def _spill_files(todo: list[tuple[str, Switch]], folder: Path, quota: int) -> list[tuple[str, Switch, Path]]:
    """The switches of ``todo`` written to new files in ``folder``, while the folder stays within ``quota`` bytes; a
    switch that cannot be written (full or read-only disk, the folder gone at exit) is left out."""
    used = _folder_bytes(folder)
    written = []
    for name, switch in todo:
        size = sum(t.numel() * t.element_size() for t in (switch.W, switch.judge) if t is not None)
        if used is None or used + size > quota:
            break
        try:
            path = switch.save(folder / f"{uuid.uuid4().hex}.safetensors")
        except Exception:  # any failure to write (OSError, safetensors' own errors): it stays in memory
            continue
        written.append((name, switch, path))
        used += size
    return written


def _folder_bytes(folder: Path) -> int | None:
    """Bytes of the files in ``folder`` (None if it is gone); files that vanish while it is read count nothing."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return None
    total = 0
    for entry in entries:
        with contextlib.suppress(OSError):
            total += entry.stat().st_size
    return total


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):  # a file that cannot be removed must not cost the switch or the request
        path.unlink(missing_ok=True)


def _remove_files(spilled: dict[str, tuple[Path, str]]) -> None:
    for path, _ in list(spilled.values()):
        _unlink(path)
