"""The sampled-tail L-BFGS recipe against the first one on the first-release sentiment data (EVALUATION.md, fifteenth
session): trains a switch with each, writes them, and prints each λ's exact held-out loss and its snapshot's file.

    PYTHONPATH=. python docs/evaluation/experiments/sampled_tail.py --out /tmp/switches
    PYTHONPATH=. python docs/evaluation/experiments/guided_frontier.py --switch sentiment --file /tmp/switches/lbfgs-sampled.safetensors \
        --strengths 1,1.5,2,3,4 --methods switch --out docs/evaluation/frontier/sampled-tail

The snapshots (W at the end of each λ of the path) are what the λ = 1 and λ = 3 rows of EVALUATION.md ran.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import lmswitch as ls
from lmswitch.core import train as T
from lmswitch.core.options import TrainConfig
from lmswitch.harness.datasets import load_dataset


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/switches")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lm = ls.load_model(dtype="bfloat16")
    positive, negative = load_dataset("sentiment").train(324)
    evaluate = T._evaluate
    for optimizer in ("lbfgs", "lbfgs-sampled"):
        snapshots = []

        def kept(obj, config, run, step, snapshots=snapshots):  # the W each λ ended at, beside its held-out loss
            event = evaluate(obj, config, run, step)
            snapshots.append((event.heldout_loss, run.W.detach().clone()))
            return event

        T._evaluate = kept
        try:
            switch = ls.train_switch(lm, positive, negative, config=TrainConfig(optimizer=optimizer), name="sentiment")
        finally:
            T._evaluate = evaluate
        switch.save(out / f"{optimizer}.safetensors")
        print(f"{optimizer}: chose λ {switch.card['l2']}, {switch.card['seconds']:.1f} s")
        for lam, (held, W) in zip(T.solver.PATH, snapshots, strict=False):
            path = out / f"{optimizer}-lam{lam:g}.safetensors"
            dataclasses.replace(switch, W=W).save(path)
            print(f"  λ {lam:g}: held-out {held:.4f}, |W| {float(W.norm()):.0f} → {path}")


if __name__ == "__main__":
    main()
