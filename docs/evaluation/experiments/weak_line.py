"""A highlight's weak line per switch (EVALUATION.md, "Highlighting: a switch's own weak line"): choose on dev, report on test.

    PYTHONPATH=. python docs/evaluation/experiments/weak_line.py --split dev     # then --split test

A span is weak when it scores under max(1 nat, the q-quantile of the switch's best-span scores over the bundled neutral
sentences). Each switch reads held-out texts of its style at ε ±1 (spans of up to 8 tokens): a *hit* is a text of the
side it reads toward whose best span is not weak, a *false alarm* one of the other side. Switches: the three shipped
ones, two trained from the bundled example files, and three trained from 30 + 30 texts of each style's training half
(texts 0-29 for dev, 30-59 for test, so the test switches are new too). Balanced = (hits + 1 − false alarms) / 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import lmswitch as ls
from lmswitch.core.hidden import EncodedText, encode_text
from lmswitch.harness.datasets import load_dataset
from lmswitch.lenses import spans
from lmswitch.lenses.options import WEAK_EVIDENCE_NATS, WEAK_QUANTILE

QUANTILES = (None, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)  # None: the fixed 1-nat line
EXAMPLES = Path(__file__).resolve().parents[3] / "lmswitch" / "data" / "examples"
TEXTS = 60  # held-out texts per side


def _lines(name: str) -> list[str]:
    return [line for line in (EXAMPLES / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def _switches(lm: ls.LanguageModel, split: str) -> list[tuple[str, ls.Switch, str, bool]]:
    out = [(f"{name}, shipped", ls.load_switch(name, lm), data, True)
           for name, data in (("detox", "toxicity"), ("sentiment", "sentiment"), ("formality", "formality"))]
    out.append(("detox, 40 + 40 example comments",
                ls.train_switch(lm, _lines("civil_comments.txt"), _lines("toxic_comments.txt")), "toxicity", False))
    out.append(("sentiment, 30 + 30 example sentences",
                ls.train_switch(lm, _lines("sentiment_positive.txt")[:30], _lines("sentiment_negative.txt")[:30]), "sentiment", False))
    lo = 0 if split == "dev" else 30
    for data in ("toxicity", "sentiment", "formality"):
        pos, neg = load_dataset(data).train()
        out.append((f"{data}, 30 + 30 training texts [{lo}:{lo + 30}]", ls.train_switch(lm, pos[lo : lo + 30], neg[lo : lo + 30]), data, False))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=("dev", "test"), required=True)
    args = ap.parse_args()
    lm = ls.load_model()
    read: dict[str, EncodedText] = {}

    def best(switch: ls.Switch, text: str, eps: float) -> float:
        if text not in read:
            read[text] = encode_text(lm, text)
        (run,) = spans.best_spans(spans.token_deltas(lm, switch, read[text], eps).tolist(), 8, 1)
        return max(run.total, 0.0)

    rows = []
    for name, switch, data, shipped in _switches(lm, args.split):
        pos, neg = load_dataset(data).heldout(args.split)
        for eps, own, other in ((-1.0, neg[:TEXTS], pos[:TEXTS]), (1.0, pos[:TEXTS], neg[:TEXTS])):
            neutral = np.array([max(0.0, spans.best_spans(d.tolist(), 8, 1)[0].total) for d in spans._neutral_deltas(lm, switch, eps)])
            own_best, other_best = np.array([best(switch, t, eps) for t in own]), np.array([best(switch, t, eps) for t in other])
            by_q = {}
            for q in QUANTILES:
                line = WEAK_EVIDENCE_NATS if q is None else max(WEAK_EVIDENCE_NATS, float(np.quantile(neutral, q)))
                by_q[q] = (line, float((own_best >= line).mean()), float((other_best >= line).mean()))
            assert by_q[WEAK_QUANTILE][0] == spans.weak_line(lm, switch, eps)  # the library's own line
            rows.append((shipped, by_q))
            cells = " | ".join(f"{line:.2f}: {hit:.0%} / {alarm:.0%}" for line, hit, alarm in by_q.values())
            print(f"| {name} | {eps:+.0f} | {cells} |", flush=True)
    for shipped in (False, True):
        for q in QUANTILES:
            hits = np.mean([r[q][1] for s, r in rows if s == shipped])
            alarms = np.mean([r[q][2] for s, r in rows if s == shipped])
            print(f"{'shipped' if shipped else 'trained from 30-40 texts a side'}, q {q}: hits {hits:.1%}, false alarms "
                  f"{alarms:.1%}, balanced {(hits + 1 - alarms) / 2:.1%}")


if __name__ == "__main__":
    main()
