"""A client that leaves mid-generation (issue 17's fair scheduling): what the others get in the seconds after.

    python benchmarks/closed_page.py [--code DIR] [--trials 2] [--seconds 12]

Starts ``app.py`` (embedded model in bfloat16, as ``make app`` runs; the code in ``--code``, default this checkout, so a
worktree of an older commit runs side by side with this one). In each trial one ``gradio_client`` client starts a
guided ``/generate`` (120 tokens, 8 candidates: ~18 s alone on 2 cores) and closes 1 s later; another client then sends
20-token ``/generate`` requests back to back (fresh seeds, so no cache answers). Reports how many it completed in
``--seconds`` and their median latency. A decode nobody reads any more takes compute from them until it stops.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gradio_client import Client

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

import app_server  # noqa: E402 (tests/app_server.py: the launched app of the tests)

REQUEST = {"prompt": "My weekend was", "switches": "sentiment=2", "max_new_tokens": 20, "api_name": "/generate"}
LEAVER = {"prompt": "The town meeting", "switches": "sentiment=4", "max_new_tokens": 120, "guide": 8, "api_name": "/generate"}


def trial(url: str, other: Client, seeds: range, seconds: float) -> list[float]:
    """One client starts a guided generation and leaves; the latencies of ``other``'s requests in ``seconds`` after."""
    leaver = Client(url, verbose=False)
    leaver.submit(seed=seeds.start, **LEAVER)
    time.sleep(1.0)
    leaver.close()
    latencies, end = [], time.perf_counter() + seconds
    for seed in seeds:
        if time.perf_counter() >= end:
            break
        start = time.perf_counter()
        other.predict(seed=seed, **REQUEST)
        latencies.append(time.perf_counter() - start)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose app.py runs (default: this one)")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=12.0)
    args = parser.parse_args()
    app_server.ROOT = args.code.resolve()
    server = app_server.AppServer(Path(tempfile.mkdtemp()), name="closed-page", env={"GRADIO_HEARTBEAT_INTERVAL": "0.2"})
    try:
        server.wait_ready()
        other = Client(server.url, verbose=False)
        other.predict(seed=0, **REQUEST)  # warm
        for i in range(args.trials):
            done = trial(server.url, other, range(1000 * (i + 1), 1000 * (i + 2)), args.seconds)
            print(f"{args.code}: trial {i}: {len(done)} requests in {args.seconds:g} s after the guided client left, "
                  f"p50 {statistics.median(done):.2f} s", flush=True)
            time.sleep(20)  # whatever is left of the guided decode ends before the next trial
    finally:
        server.stop()


if __name__ == "__main__":
    main()
