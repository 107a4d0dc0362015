"""The stance switches trained on each article's sentences instead of the whole article (EVALUATION.md, twenty-fourth
session).

    PYTHONPATH=. python docs/evaluation/experiments/stance_sentences.py [dev|test]

The held-out statements are read alone, with no article before them, while a switch from a document learns from tokens
that read the whole article before them. Trained on the article's sentences, each read alone (split as self-contrast
splits them; sentences of at least 4 words), a switch learns from text that reads like the statements. Meter accuracy
(the harness's, all pairs) of the A-vs-B switch and of the one-article switches (mean of A and B), both ways.
"""

from __future__ import annotations

import sys

import lmswitch as ls
from lmswitch.core.contrast import sentences as split
from lmswitch.harness.stance import load_topics, meter_accuracy


def sentences(text: str) -> list[str]:
    return [s.strip() for s in split(text) if len(s.split()) >= 4]


def main(split: str) -> None:
    lm = ls.load_model(dtype="bfloat16")
    for topic in load_topics(split):
        a, b = topic.article_a, topic.article_b
        row = {}
        for name, first, second in (("documents", a, b), ("sentences", sentences(a), sentences(b))):
            row[f"A vs B, {name}"] = meter_accuracy(lm, ls.train_switch(lm, first, second), topic.statements_a, topic.statements_b)
            one_a, one_b = ls.train_switch(lm, first), ls.train_switch(lm, second)
            row[f"one article, {name}"] = (meter_accuracy(lm, one_a, topic.statements_a, topic.statements_b)
                                           + meter_accuracy(lm, one_b, topic.statements_b, topic.statements_a)) / 2
        print(topic.name, topic.split, {k: f"{v:.1%}" for k, v in row.items()}, flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "dev")
