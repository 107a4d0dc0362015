"""The files pages upload (documents, switches to import) and are served (switches to download): where they are kept
and when they go.

Gradio keeps a copy of each under ``GRADIO_TEMP_DIR`` (app.py gives the server a folder of its own) and registers it
with the page. :func:`start_sweeping` removes the registered files older than ``--keep-files`` hours, so a server used
for weeks neither fills its disk nor keeps its users' documents. Gradio's own ``delete_cache`` does the same but walks
those registrations while uploads add to them from other threads: the first clash ("Set changed size during
iteration") ends its sweeping for the rest of the server's life, silently. This one works on a snapshot and goes on.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import tempfile
import threading
import time
from pathlib import Path

import gradio as gr

KEEP_FILES_HOURS = 24.0  # how long the server keeps the files pages uploaded or were served (app.py --keep-files)
MAX_SWEEP_INTERVAL, MIN_SWEEP_INTERVAL = 3600.0, 1.0  # seconds between sweeps


def keep_seconds(hours: float) -> float:
    """``hours`` in seconds, refused unless a positive finite number."""
    seconds = hours * 3600 if isinstance(hours, (int, float)) else math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"files must be kept for a positive number of hours; got {hours!r}")
    return seconds


def export_folder() -> Path:
    """A new folder for the download buttons' files: in the folder ``GRADIO_TEMP_DIR`` names (app.py names one of the
    server's own), so they are served from there (not copied again) and swept like Gradio's copies; else, or where it
    cannot be written, in the system's temporary folder (a backend used without the app leaves Gradio's alone)."""
    named = os.environ.get("GRADIO_TEMP_DIR")
    if named:
        try:
            Path(named).mkdir(parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(prefix="lmswitch-export-", dir=named))
        except OSError:
            pass
    return Path(tempfile.mkdtemp(prefix="lmswitch-export-"))


def sweep(demo: gr.Blocks, age: float) -> int:
    """Remove the files ``demo`` registered (its uploads and served files) that are older than ``age`` seconds, except
    those a component keeps for good; returns how many went. A file handed out again is touched by Gradio, so the
    copy a page shows now stays. A download button's file is written when its switch is trained or picked: a page left
    open longer than the files are kept gets "not found" from it until the switch is picked again."""
    keep = set().union(*(getattr(block, "keep_in_cache", set()) for block in list(demo.blocks.values())))
    now, removed = time.time(), 0
    for files in list(demo.temp_file_sets):
        for file in list(files):  # a snapshot (taken under the GIL): other threads add files while this runs
            if file in keep:
                continue
            try:
                if now - os.lstat(file).st_ctime > age:
                    os.remove(file)
                    removed += 1
                    files.discard(file)
                    _drop_export_folder(Path(file).parent)
            except FileNotFoundError:
                files.discard(file)
            except OSError:  # e.g. no permission: tried again next time
                pass
    return removed


def _drop_export_folder(folder: Path) -> None:
    """Remove the emptied folder of one download file (:func:`export_folder`'s, written once); Gradio's own folders may
    get a file again at any moment, so they stay."""
    if folder.parent.name.startswith("lmswitch-export-"):
        with contextlib.suppress(OSError):
            folder.rmdir()


def start_sweeping(demo: gr.Blocks, hours: float) -> threading.Thread:
    """Sweep ``demo``'s files (:func:`sweep`) in the background, at least hourly, four times per ``hours`` and at most
    once a second, and all of them at exit (a folder a user named for Gradio is not removed with the server's own)."""
    age = keep_seconds(hours)
    interval = max(MIN_SWEEP_INTERVAL, min(MAX_SWEEP_INTERVAL, age / 4))
    atexit.register(sweep, demo, -math.inf)

    def run() -> None:
        while True:
            time.sleep(interval)
            try:
                sweep(demo, age)
            except Exception as err:  # a failed round must not end the sweeping
                print(f"lmswitch: sweeping old files failed ({type(err).__name__}: {err}); trying again later", flush=True)

    thread = threading.Thread(target=run, name="lmswitch-file-sweep", daemon=True)
    thread.start()
    return thread
