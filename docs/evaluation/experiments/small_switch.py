"""Train the data-efficiency switch: the first 30 + 30 sentiment training sentences, ``train``'s defaults, then the
CLI's calibration (EVALUATION.md, "The 30 + 30 sentence switch with guided decoding").

    PYTHONPATH=. python docs/evaluation/experiments/small_switch.py /tmp/small30.safetensors
    PYTHONPATH=. python docs/evaluation/experiments/guided_frontier.py --switch sentiment --file /tmp/small30.safetensors \
        --methods switch,switch+guided-8 --strengths 1,1.5,2 --sides +1 --out docs/evaluation/frontier/small30

The same as ``python -m lmswitch train --positive P --negative N --out FILE`` on those sentences (seed 0).
"""

from __future__ import annotations

import argparse

import torch

import lmswitch as ls
from lmswitch.harness.datasets import load_dataset
from lmswitch.harness.frontier import calibrated_card


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--pairs", type=int, default=30)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()
    lm = ls.load_model(dtype=getattr(torch, args.dtype))
    positive, negative = load_dataset("sentiment").train(limit=args.pairs)
    switch = ls.train_switch(lm, positive, negative, name="sentiment")
    switch.card = calibrated_card(lm, switch)
    switch.save(args.out)
    card = switch.card
    print(f"{args.out}: held-out gain {card['heldout_gain']:+.3f} nats/token, fluent ε {card.fluent_text}, "
          f"recommended {card['recommended_eps']:+g}, trained in {card['seconds']:.1f} s")


if __name__ == "__main__":
    main()
