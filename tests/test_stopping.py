"""The app's stop signals (lmswitch/webapp/stopping.py), in processes of their own: no server needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# a stop signal that arrives while Python runs a finalizer: the handler runs inside __del__, where the interpreter
# prints and drops any exception, so without help the "starting" loop below would never hear the stop
SCRIPT = """
import os, signal, time
from lmswitch.webapp.stopping import stop_on_signals
stop_on_signals()

class StopInsideFinalizer:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100_000):  # the handler runs during this loop, inside the finalizer
            pass

class FailingFinalizer:
    def __del__(self):
        raise ValueError("another finalizer's error")

FailingFinalizer()  # not a stop: still reported as Python does
try:
    StopInsideFinalizer()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the server starting
        pass
    print("not stopped")
except KeyboardInterrupt:
    print("stopped")
    os.kill(os.getpid(), signal.SIGTERM)  # later stops are ignored while it shuts down
    print("still shutting down")
"""


def test_a_stop_that_lands_in_a_finalizer_still_stops_the_app():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["stopped", "still shutting down"], done.stdout + done.stderr
    assert "ValueError: another finalizer's error" in done.stderr  # other finalizers' errors are reported as before
    assert "KeyboardInterrupt" not in done.stderr  # the stop is neither printed nor lost


# a stop that breaks into an object's __init__ while the app starts (an event loop's, in one run of make test) leaves
# it half-built, and its finalizer fails when the caught stop releases it
HALF_BUILT = """
import os, signal
from lmswitch.webapp.stopping import stop_on_signals, stopped_while_starting
stop_on_signals()

class HalfBuilt:
    def __init__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100_000):  # the stop lands here
            pass
        self.pipe = "never set"

    def __del__(self):
        self.pipe

try:
    HalfBuilt()
except KeyboardInterrupt:
    stopped_while_starting()
"""


def test_a_stop_while_starting_prints_no_half_built_objects_traceback():
    done = subprocess.run([sys.executable, "-c", HALF_BUILT], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert (done.returncode, done.stdout, done.stderr) == (0, "lmswitch: stopped while starting\n", "")
