"""Guided decoding against plain steering on the full frontier protocol (EVALUATION.md, "Guided decoding").

    PYTHONPATH=. python docs/evaluation/experiments/guided_frontier.py --switch sentiment detox --strengths 2,4,6

The shipped switches get their judge from their training pairs first (what ``build-pretrained --recalibrate`` stores),
so this runs on a checkout whose switch files predate judges too. Writes ``frontier-<switch>.md`` and ``.json`` to --out.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

import lmswitch as ls
from lmswitch.harness.evaluate import Protocol
from lmswitch.harness.frontier import FrontierSpec, markdown, run_frontier
from lmswitch.harness.pretrained import get_spec, shipped_judge
from lmswitch.io.resources import shipped_switch_path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--switch", nargs="+", default=["sentiment", "detox"])
    ap.add_argument("--methods", default="switch,switch+guided-4")
    ap.add_argument("--strengths", default="2,4,6")
    ap.add_argument("--limit", type=int, default=50)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--out", default="docs/evaluation/frontier/guided-50")
    ap.add_argument("--file", help="a switch file to run instead of the shipped one (one --switch: the spec it is judged by)")
    ap.add_argument("--sides", default="+1,-1", help="the sides to run, e.g. +1")
    args = ap.parse_args()
    if args.file and len(args.switch) != 1:
        ap.error("--file runs one switch: name the spec it is judged by with one --switch")
    lm = ls.load_model(dtype=getattr(torch, args.dtype))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.switch:
        start = time.perf_counter()
        switch = ls.load_switch(args.file or shipped_switch_path(name), lm)
        if switch.judge is None:
            switch.judge = shipped_judge(lm, get_spec(name))
        spec = replace(FrontierSpec.for_switch(name), strengths=tuple(float(s) for s in args.strengths.split(",")),
                       sides=tuple(int(s) for s in args.sides.split(",")))
        frontier = run_frontier(lm, switch, spec, methods=args.methods.split(","), protocol=Protocol(samples=args.samples),
                                dev_limit=args.limit, test_limit=args.limit, log=print)
        text = markdown(frontier)
        (out / f"frontier-{name}.md").write_text(text + f"\n\n{args.dtype}, {time.perf_counter() - start:.0f} s\n")
        (out / f"frontier-{name}.json").write_text(json.dumps(asdict(frontier), indent=1, default=str))
        print(text, flush=True)


if __name__ == "__main__":
    main()
