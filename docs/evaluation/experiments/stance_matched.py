"""The stance meter on matched pairs: a topic-controlled reading of issue 15's meter target.

    PYTHONPATH=. python docs/evaluation/experiments/stance_matched.py

Each topic's held-out statements are written as pairs: line i of statements_a.txt and line i of statements_b.txt make
the same point from the two sides ("would save money overall" / "would cost more overall"). The harness's meter
accuracy compares every statement of one side with every statement of the other (14 × 14 pairs), so the ranking also
depends on how much of the topic's vocabulary each statement carries. Here only the 14 matched pairs are compared:
what is left is the stance. For the one-article switch (the default recipe, style slope) and, as a reference, the
model with the article in its context (stance_in_context.py's log-likelihood difference). EVALUATION.md, "Twenty-second
session".
"""

from __future__ import annotations

import sys
from pathlib import Path

import lmswitch as ls
from lmswitch.harness.stance import load_topics, pairwise_accuracy
from lmswitch.lenses.meter import style_slope

sys.path.insert(0, str(Path(__file__).parent))
from stance_in_context import loglik  # noqa: E402


def matched(own: list[float], other: list[float]) -> float:
    """Share of matched pairs (own[i], other[i]) where the own-side statement scores higher (ties count half)."""
    return sum((x > y) + 0.5 * (x == y) for x, y in zip(own, other, strict=True)) / len(own)


def main() -> None:
    lm = ls.load_model(dtype="bfloat16")
    for topic in load_topics():
        rows = []
        for article, mine, theirs in ((topic.article_a, topic.statements_a, topic.statements_b),
                                      (topic.article_b, topic.statements_b, topic.statements_a)):
            switch = ls.train_switch(lm, article)
            slope_mine, slope_theirs = [style_slope(lm, switch, s) for s in mine], [style_slope(lm, switch, s) for s in theirs]
            context = [loglik(lm, article.strip() + "\n\nIn short:", s) - loglik(lm, f"{topic.title}\n\nIn short:", s)
                       for s in mine + theirs]
            ctx_mine, ctx_theirs = context[: len(mine)], context[len(mine) :]
            rows.append((pairwise_accuracy(slope_mine, slope_theirs), matched(slope_mine, slope_theirs),
                         pairwise_accuracy(ctx_mine, ctx_theirs), matched(ctx_mine, ctx_theirs)))
        m = [sum(r[i] for r in rows) / 2 for i in range(4)]
        print(f"| {topic.name} | {topic.split} | {m[0]:.1%} | {m[1]:.1%} | {m[2]:.1%} | {m[3]:.1%} |", flush=True)


if __name__ == "__main__":
    main()
