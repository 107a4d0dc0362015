"""The A-vs-B lexicon shift on the dev stance topics, plain against guided decoding (8 candidates, the A-vs-B switch's
judge choosing every 5 tokens); EVALUATION.md, "Guided decoding for the A-vs-B lexicon shift".

    PYTHONPATH=. python docs/evaluation/experiments/stance_guided.py --strengths 2,4

The harness's protocol (``lmswitch eval --stance``: 12 prompts × 2 samples × 25 tokens, the same seeds for every
setting), with ``guide`` set; bfloat16 where the CPU multiplies it natively, as the app runs.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import lmswitch as ls
from lmswitch.harness.stance import RULES, STANCE_PROTOCOL, _shifts, load_topics


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--strengths", default="2,4", help="comma-separated ε values (each tried at + and −)")
    p.add_argument("--guide", type=int, default=8, help="candidates per piece of guided decoding")
    args = p.parse_args()
    strengths = [float(x) for x in args.strengths.split(",")]
    lm = ls.load_model(dtype="auto")
    for topic in load_topics("dev"):
        ab = ls.train_switch(lm, topic.article_a, topic.article_b, name=f"{topic.name}-a-vs-b")
        for guide in (1, args.guide):
            for s in _shifts(lm, topic, ab, strengths, replace(STANCE_PROTOCOL, guide=guide), RULES):
                print(f"{topic.name} guide {guide} ε {s.eps:g}: toward A {s.toward_a:+.2f}, toward B {s.toward_b:+.2f}, "
                      f"fluent {s.fluent} {'; '.join(s.problems)}", flush=True)


if __name__ == "__main__":
    main()
