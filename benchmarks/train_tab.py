"""The app's Train tab end to end: how long a user waits from "Train" to each thing the panel shows.

The tab's handler (``app.train``) is called in-process with the tab's defaults, a fresh
session per run and one warm-up run first, and timed to each message it yields:

* **trained**: the optimiser has finished;
* **learned**: "what it learned" is shown (the fluent-range probe starts);
* **ready**: the probe is done and the switch is in the session with its slider (the panel says "Done.").

    .venv/bin/python benchmarks/train_tab.py [--dtype float32] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import app  # noqa: E402
from lmswitch.harness.report import machine  # noqa: E402
from lmswitch.io.resources import read_data_text  # noqa: E402
from lmswitch.serve.session import Session  # noqa: E402
from lmswitch.webapp.train import PROBING, READING  # noqa: E402

MOMENTS = ("trained", "learned", "ready")


def cases() -> list[tuple[str, list]]:
    """(label, the tab's inputs after the mode) for one article and for 30 + 30 sentences."""
    article = read_data_text("stance", "four_day_week", "article_a.txt")
    pos, neg = (read_data_text("examples", f"sentiment_{side}.txt") for side in ("positive", "negative"))
    words = len(article.split())
    return [(f"one article, {words} words", [app.MODES[0], "article", "for", "against", article, None, "", None]),
            ("30 + 30 sentences", [app.MODES[2], "mood", "positive", "negative", pos, None, neg, None])]


def _moment(status: object) -> str | None:
    """Which moment a status message marks (None: a progress message)."""
    return {READING: "trained", PROBING: "learned", "Done.": "ready"}.get(str(status))


def time_run(backend: app.Backend, inputs: list) -> dict[str, float]:
    """Seconds from the call to the first message of each moment."""
    session, start, seen = Session(), time.perf_counter(), {}
    defaults = [200, 1e-2, 1e-3, 0, 0]  # steps, lr, eps0, rank, seed: the tab's defaults
    for update in app.train(backend, *inputs, *defaults, session, *[None] * 7, progress=lambda *a, **k: None):
        moment = _moment(update[0])
        if moment and moment not in seen:
            seen[moment] = time.perf_counter() - start
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
