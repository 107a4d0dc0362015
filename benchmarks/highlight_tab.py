"""The Highlight tab's cost, and why a shared server caps what it reads (``serve/limits.py``).

Part one times the style meter (``lenses.meter.measure``) on the first N characters of README.md with the shipped
switches, and with five more (the shipped matrices with their rows shuffled: as many distinct switches as a busy
session holds); part two times the tab's handler (``app.run_highlight``) in-process on a text at the cap
(:data:`~lmswitch.serve.limits.MAX_HIGHLIGHT_CHARS`), with the shipped switches. One process, one model.

    .venv/bin/python benchmarks/highlight_tab.py [--dtype float32] [--chars 2000,4000,8000] [--switches 3,8]
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import date
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import app  # noqa: E402
from lmswitch.core.hidden import encode_text  # noqa: E402
from lmswitch.core.switch import Switch  # noqa: E402
from lmswitch.harness.pretrained import load_pretrained  # noqa: E402
from lmswitch.harness.report import machine  # noqa: E402
from lmswitch.lenses.meter import measure  # noqa: E402
from lmswitch.serve.limits import MAX_HIGHLIGHT_CHARS, MAX_METER_CHARS, MAX_METER_SWITCHES  # noqa: E402
from lmswitch.serve.session import Session  # noqa: E402


def shuffled(switches: list[Switch], count: int, lm) -> list[Switch]:
    """``count`` more distinct switches of the shipped switches' size: their matrices with rows shuffled."""
    g = torch.Generator().manual_seed(0)
    return [Switch(W=s.W[torch.randperm(s.dim, generator=g)], name=f"{s.name}-shuffled{k}", model_name=lm.name,
                   model_fingerprint=lm.fingerprint) for k in range(count) for s in switches][:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--chars", default="2000,4000,8000", help="meter readings to time, in characters")
    parser.add_argument("--switches", default="3,8", help="meter switch counts to time")
    args = parser.parse_args()
    backend = app.Backend(switches=app.DEFAULT_SWITCHES, dtype=args.dtype).start()
    lm, library = backend.get()
    shipped = list(load_pretrained(lm).values())
    pool = shipped + shuffled(shipped, 8, lm)
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    print(f"{date.today()}, {machine()}, {args.dtype}; caps: meter {MAX_METER_CHARS:,} characters and {MAX_METER_SWITCHES} switches, "
          f"highlight {MAX_HIGHLIGHT_CHARS:,} characters\n")
    print("| meter reads | tokens | switches | seconds |\n|---|---|---|---|")
    for chars in (int(c) for c in args.chars.split(",")):
        encoded = encode_text(lm, text[:chars])
        for count in (int(k) for k in args.switches.split(",")):
            start = time.perf_counter()
            measure(lm, pool[:count], encoded)
            print(f"| {chars:,} characters | {encoded.n_tokens:,} | {count} | {time.perf_counter() - start:.1f} |", flush=True)
    long = (text * (MAX_HIGHLIGHT_CHARS // len(text) + 1))[:MAX_HIGHLIGHT_CHARS]
    start = time.perf_counter()
    *_, summary = app.run_highlight(backend, long, None, "detox", -1, 8, 1, Session())
    print(f"\nThe Highlight tab at its cap ({MAX_HIGHLIGHT_CHARS:,} characters, detox at −1, the shipped switches in the meter): "
          f"{time.perf_counter() - start:.1f} s; {summary.splitlines()[2]}")


if __name__ == "__main__":
    main()
