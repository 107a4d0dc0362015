"""One user's Steer view: time from a request to its finished comparison (both texts, their scores and the steered
text's per-token changes), through the batcher on a compute thread, as the app serves it; no HTTP.

    python benchmarks/steer_view.py [bfloat16|float32]

Prints the p50 of 20 comparisons (40 tokens, the sentiment switch at +4) after 4 warm-up ones. To compare two commits,
run it on each (e.g. one from a ``git worktree``), back to back on an idle machine.
"""

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lmswitch as ls  # noqa: E402
from lmswitch.core.options import SamplingOptions  # noqa: E402
from lmswitch.io.resources import shipped_switch_path  # noqa: E402
from lmswitch.serve.batcher import Batcher  # noqa: E402
from lmswitch.serve.compare import Comparison, compare  # noqa: E402
from lmswitch.serve.compute import ComputeThread  # noqa: E402

PROMPTS = ["My weekend was", "The new library on the corner", "I think that the mayor", "Yesterday at the market"]


def main() -> None:
    compute = ComputeThread()
    lm = compute.run(ls.load_model, dtype=sys.argv[1] if len(sys.argv) > 1 else "auto")
    setting = [(compute.run(ls.load_switch, shipped_switch_path("sentiment"), lm), 4.0)]
    batcher, options = Batcher(lm, compute), SamplingOptions()
    finished, first = [], []
    for k in range(24):
        start, first_partial, last = time.perf_counter(), None, None
        for item in compare(lm, PROMPTS[k % 4], setting, seed=k, options=options, compute=compute, batcher=batcher):
            first_partial, last = first_partial or time.perf_counter() - start, item
        assert isinstance(last, Comparison) and last.changes
        if k >= 4:  # the first four warm up
            finished.append(time.perf_counter() - start)
            first.append(first_partial)
    print(f"{str(lm.model.dtype).removeprefix('torch.')}, {options.max_new_tokens} tokens: finished comparison p50 "
          f"{statistics.median(finished):.3f} s, first partial p50 {statistics.median(first):.3f} s")


if __name__ == "__main__":
    main()
