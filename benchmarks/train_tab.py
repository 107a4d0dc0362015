"""The app's Train tab end to end: how long a user waits from "Train" to each thing the panel shows.

The tab's handler (``app.train``) is called in-process with the tab's defaults, a fresh
session per run and one warm-up run first, and timed to each message it yields:

* **trained**: the optimiser has finished;
* **ready**: "what it learned" is shown and the switch has its slider, to steer with at once (the fluent-range probe
  starts; until it ends the slider reaches ``widgets.PROVISIONAL_EPS``);
* **measured**: the probe is done and the slider spans the switch's fluent range (the panel says "Done.");
* **steered**: a steered text (40 tokens, the switch at the slider's end, with its unsteered twin) asked for at
  "ready", while the probe runs, is complete;
* **alone**: the same request (another seed: the app's cache would answer a repeated one) asked for afterwards,
  alone, takes this long.

    .venv/bin/python benchmarks/train_tab.py [--dtype float32] [--runs 3]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import threading
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import app  # noqa: E402
from lmswitch.core.options import SAMPLING  # noqa: E402
from lmswitch.harness.report import machine  # noqa: E402
from lmswitch.io.resources import read_data_text  # noqa: E402
from lmswitch.serve.session import Session  # noqa: E402
from lmswitch.webapp.train import PROBING, READING  # noqa: E402
from lmswitch.webapp.widgets import PROVISIONAL_EPS  # noqa: E402

MOMENTS = ("trained", "ready", "measured", "steered", "alone")


def cases() -> list[tuple[str, list]]:
    """(label, the tab's inputs after the mode) for one article and for 30 + 30 sentences."""
    article = read_data_text("stance", "four_day_week", "article_a.txt")
    pos, neg = (read_data_text("examples", f"sentiment_{side}.txt") for side in ("positive", "negative"))
    words = len(article.split())
    return [(f"one article, {words} words", [app.MODES[0], "article", "for", "against", article, None, "", None]),
            ("30 + 30 sentences", [app.MODES[2], "mood", "positive", "negative", pos, None, neg, None])]


def _moment(status: object) -> str | None:
    """Which moment a status message marks (None: a progress message)."""
    return {READING: "trained", PROBING: "ready", "Done.": "measured"}.get(str(status))


SEEDS = itertools.count()  # a new seed per text: the app's cache would answer a repeated request at once


def _steer(backend: app.Backend, session: Session) -> None:
    """What a user does once the slider is there: the new switch at the end of its slider, both texts (the Steer tab's
    defaults, as the scripting endpoint writes them)."""
    name = session.order[-1]
    app.generate_api(backend, "Tell me about your weekend.", f"{name}={PROVISIONAL_EPS:g}", SAMPLING.max_new_tokens,
                     SAMPLING.temperature, SAMPLING.top_p, next(SEEDS), False, session)


def time_run(backend: app.Backend, inputs: list) -> dict[str, float]:
    """Seconds from the call to the first message of each moment; ``steered``: when a steered text asked for at
    "ready" (while the range is probed) was complete; ``alone``: how long the same request takes afterwards, alone."""
    session, start, seen = Session(), time.perf_counter(), {}
    defaults = [200, 1e-2, 1e-3, 0, 0]  # steps, lr, eps0, rank, seed: the tab's defaults
    user = None
    for update in app.train(backend, *inputs, *defaults, session, *[None] * 7, progress=lambda *a, **k: None):
        moment = _moment(update[0])
        if moment and moment not in seen:
            seen[moment] = time.perf_counter() - start
        if moment == "ready" and user is None:
            user = threading.Thread(target=lambda: (_steer(backend, session), seen.update(steered=time.perf_counter() - start)))
            user.start()
    if user is not None:  # (none when the run ended before its switch was ready)
        user.join()
    alone = time.perf_counter()
    _steer(backend, session)
    seen["alone"] = time.perf_counter() - alone
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--runs", type=int, default=3, help="timed runs per case (the median is reported)")
    args = parser.parse_args()
    # loaded on the compute thread, as the app does: with libgomp, OpenMP work on a thread other than the first one to
    # use it runs ~2× slower on this machine, so the model must not be touched on this thread first
    backend = app.Backend(dtype=args.dtype).start()
    backend.ready.wait()
    print(f"{date.today()}, {machine()}, {args.dtype}")
    print("| data | " + " | ".join(MOMENTS) + " |\n|---|" + "---|" * len(MOMENTS))
    for label, inputs in cases():
        time_run(backend, inputs)  # warm-up
        runs = [time_run(backend, inputs) for _ in range(args.runs)]
        cells = [f"{statistics.median(r[m] for r in runs):.1f} s" if all(m in r for r in runs) else "–" for m in MOMENTS]
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
