"""What the model itself makes of an article in its context: a reference for issue 15's stance targets.

    PYTHONPATH=. python docs/evaluation/experiments/stance_in_context.py [--model gemma3-270m] [--skip-lexicon] [--topics four_day_week]

A switch is a linear change of the head's input learned from the article; the model reading the article in its context
can use all it understands of it. So what the model does with the article in context is a reference for what a switch
learned from that article might do (not a strict bound: one template, summed log-likelihoods). EVALUATION.md,
"Nineteenth session".

1. **Meter.** Each held-out statement's log-likelihood (summed over its tokens) after "<article>\n\nIn short:" minus
   after "<title>\n\nIn short:" (the topic given, the article not). Pairwise accuracy as the harness's meter: one
   article's statements against the other side's (one article), and the statement's log-likelihood after article A
   minus after article B (A vs B).
2. **Lexicon.** The topic's prompts continued (2 samples × 25 tokens, the same seeds in all three contexts) after
   article A, after article B and after the title alone, counted with the stance lexicons: how far the continuations
   move toward each side's words when the model has just read that side's article.
"""

from __future__ import annotations

import argparse

import torch

import lmswitch as ls
from lmswitch.core.generate import generate_tokens
from lmswitch.core.hidden import prefix_ids
from lmswitch.core.options import SamplingOptions
from lmswitch.harness.stance import STANCE_PROTOCOL, Topic, lexicon_score, load_topics, pairwise_accuracy


@torch.inference_mode()
def loglik(lm, context: str, statement: str) -> float:
    """log P(statement | context), summed over the statement's tokens (the tokenizer's start tokens, such as Gemma's BOS,
    before the context)."""
    c = prefix_ids(lm) + lm.tokenizer(context, add_special_tokens=False).input_ids
    s = lm.tokenizer(" " + statement, add_special_tokens=False).input_ids
    logits = lm.model(input_ids=torch.tensor([c + s], device=lm.input_device)).logits[0, len(c) - 1 : -1]
    return float(logits.float().log_softmax(-1).gather(1, torch.tensor(s, device=logits.device)[:, None]).sum())


def meter_bound(lm, topic: Topic) -> tuple[float, float]:
    """(one-article bound, mean of A and B; A-vs-B bound)."""
    statements = topic.statements_a + topic.statements_b
    title = {s: loglik(lm, f"{topic.title}\n\nIn short:", s) for s in statements}
    in_a = {s: loglik(lm, topic.article_a.strip() + "\n\nIn short:", s) for s in statements}
    in_b = {s: loglik(lm, topic.article_b.strip() + "\n\nIn short:", s) for s in statements}
    from_a = pairwise_accuracy([in_a[s] - title[s] for s in topic.statements_a], [in_a[s] - title[s] for s in topic.statements_b])
    from_b = pairwise_accuracy([in_b[s] - title[s] for s in topic.statements_b], [in_b[s] - title[s] for s in topic.statements_a])
    a_vs_b = pairwise_accuracy([in_a[s] - in_b[s] for s in topic.statements_a], [in_a[s] - in_b[s] for s in topic.statements_b])
    return (from_a + from_b) / 2, a_vs_b


def lexicon_bound(lm, topic: Topic) -> tuple[float, float]:
    """(toward A, toward B): lexicon score after article A minus after the title; after the title minus after B."""
    options = SamplingOptions(max_new_tokens=STANCE_PROTOCOL.max_new_tokens)

    def score(context: str) -> float:
        prompts = [context + p for p in topic.prompts for _ in range(STANCE_PROTOCOL.samples)]
        texts = generate_tokens(lm, prompts, [[]] * len(prompts), list(range(len(prompts))), options).texts
        return lexicon_score(lm, texts, topic.lexicon_a, topic.lexicon_b)

    title = score(topic.title + "\n\n")
    return score(topic.article_a.strip() + "\n\n") - title, title - score(topic.article_b.strip() + "\n\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="a bundled alias or model folder (default: the embedded model)")
    p.add_argument("--skip-lexicon", action="store_true", help="only the meter bound")
    p.add_argument("--topics", default=None, help="comma-separated topic names (default: all six)")
    args = p.parse_args()
    lm = ls.load_model(args.model)
    print("| topic | split | one article in context | A vs B in context | lexicon: toward A / toward B |")
    print("|---|---|---|---|---|")
    rows = []
    try:
        topics = load_topics(names=args.topics.split(",") if args.topics else None)
    except ValueError as err:
        p.error(str(err))
    for topic in topics:
        one, ab = meter_bound(lm, topic)
        lex = "—" if args.skip_lexicon else "{:+.2f} / {:+.2f}".format(*lexicon_bound(lm, topic))
        rows.append((topic.split, one, ab))
        print(f"| {topic.name} | {topic.split} | {one:.1%} | {ab:.1%} | {lex} |", flush=True)
    for split in ("dev", "test"):
        mine = [r for r in rows if r[0] == split]
        if mine:
            one, ab = (sum(r[k] for r in mine) / len(mine) for k in (1, 2))
            print(f"| **{split} mean** | | **{one:.1%}** | **{ab:.1%}** | |")


if __name__ == "__main__":
    main()
