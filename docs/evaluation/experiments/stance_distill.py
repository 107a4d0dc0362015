"""Two tries at carrying what the model reads in context into an A-vs-B switch (EVALUATION.md, "Nineteenth session").

    PYTHONPATH=. python docs/evaluation/experiments/stance_distill.py [--split dev] [--topics four_day_week]

With both articles in its context the model ranks the held-out statements ~90% right, the A-vs-B switch ~70%
(``stance_in_context.py``). Beside the plain A-vs-B switch:

1. **Sampled distillation.** The articles' sentence openings (first 4 words) continued for 30 tokens after article A and
   after article B (same seeds), as the two sides' training texts; also with the articles added. Meter accuracy and the
   lexicon shift at ε 1, 2, 4.
2. **Soft distillation.** W fitted by L-BFGS (ridge λ) so that its logit change, on the model's own on-topic text (the
   same openings continued after the title), matches log p(·|article A) − log p(·|article B) on each position's 64
   likeliest words (centred per position, weighted by the likelier side's probability). Meter accuracy, alone and
   added to the plain switch (both at unit norm).
"""

from __future__ import annotations

import argparse
import dataclasses
import re

import torch

import lmswitch as ls
from lmswitch.core.generate import generate_tokens
from lmswitch.core.hidden import prefix_ids
from lmswitch.core.options import SamplingOptions
from lmswitch.harness.stance import RULES, STANCE_PROTOCOL, Topic, _shifts, load_topics, meter_accuracy

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
TOP = 64  # the teacher's likeliest words per position


def openings(topic: Topic, words: int = 4) -> list[str]:
    """The first words of every sentence (6 words or more) of both articles, once each."""
    found = [" ".join(s.split()[:words]) for art in (topic.article_a, topic.article_b) for s in _SENTENCE.split(art.strip()) if len(s.split()) >= 6]
    return list(dict.fromkeys(found))


def continued(lm, context: str, opens: list[str], seed: int) -> list[str]:
    """Each opening and its 30-token continuation after ``context``."""
    prompts = [context + o for o in opens]
    out = generate_tokens(lm, prompts, [[]] * len(prompts), [seed + k for k in range(len(prompts))], SamplingOptions(max_new_tokens=30))
    return [o + t for o, t in zip(opens, out.texts, strict=True)]


@torch.inference_mode()
def teacher(lm, topic: Topic, probes: list[str]) -> tuple[torch.Tensor, ...]:
    """Per position of the probes read alone: the head input (n, d); the TOP likeliest words under either article in
    context (n, TOP), log p(·|A) − log p(·|B) at them, and the likelier side's probability (the weight)."""
    start = prefix_ids(lm)  # the tokenizer's start tokens (BOS for Gemma; none for SmolLM2)
    contexts = [start + lm.tokenizer(a.strip() + "\n\n", add_special_tokens=False).input_ids for a in (topic.article_a, topic.article_b)]
    parts = []
    for text in probes:
        ids = lm.tokenizer(text, add_special_tokens=False).input_ids
        h = lm.final_hidden(torch.tensor([start + ids]))[0, len(start) : -1].float().cpu()
        la, lb = (lm.model(input_ids=torch.tensor([c + ids], device=lm.input_device)).logits[0, len(c) : -1].float().log_softmax(-1).cpu()
                  for c in contexts)
        weight, top = torch.maximum(la, lb).exp().topk(TOP, dim=-1)
        parts.append((h, top, (la - lb).gather(1, top), weight))
    return tuple(torch.cat([p[k] for p in parts]) for k in range(4))


def soft_fit(lm, H: torch.Tensor, top: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, lam: float) -> tuple[torch.Tensor, int]:
    """W minimising the weighted squared gap between E W h and delta (both centred per position) + lam ‖W‖², and the
    L-BFGS iterations it took (at most 200)."""
    H, top, delta, weight = (x.clone() for x in (H, top, delta, weight))  # copies out of inference mode, for autograd
    E = lm.head_weight(torch.float32).cpu()[top]  # (n, TOP, d)

    def centred(x: torch.Tensor) -> torch.Tensor:
        return x - (weight * x).sum(1, keepdim=True) / weight.sum(1, keepdim=True)

    target = centred(delta)
    W = torch.zeros(H.shape[1], H.shape[1], requires_grad=True)
    opt = torch.optim.LBFGS([W], max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        gap = centred(torch.einsum("nkd,nd->nk", E, H @ W.T)) - target
        loss = (weight * gap**2).sum() / len(H) + lam * (W**2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return W.detach(), opt.state[W]["n_iter"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--split", default="dev", choices=("dev", "test"))
    p.add_argument("--topics", default=None, help="comma-separated topic names (default: every topic of the split)")
    args = p.parse_args()
    lm = ls.load_model()
    try:
        topics = load_topics(args.split, args.topics.split(",") if args.topics else None)
    except ValueError as err:
        p.error(str(err))
    for topic in topics:
        opens = openings(topic)
        sampled_a, sampled_b = (continued(lm, art.strip() + "\n\n", opens, 1000) for art in (topic.article_a, topic.article_b))
        plain = ls.train_switch(lm, topic.article_a, topic.article_b, name="plain")
        print(f"\n## {topic.name} ({topic.split}), {len(opens)} openings")
        for switch in (plain, ls.train_switch(lm, sampled_a, sampled_b, name="sampled"),
                       ls.train_switch(lm, [topic.article_a, *sampled_a], [topic.article_b, *sampled_b], name="sampled+articles")):
            shifts = _shifts(lm, topic, switch, [1.0, 2.0, 4.0], STANCE_PROTOCOL, RULES)
            shown = "  ".join(f"ε {s.eps:g}: {s.toward_a:+.2f} / {s.toward_b:+.2f}{'' if s.fluent else ' (not fluent)'}" for s in shifts)
            print(f"- {switch.name}: meter {meter_accuracy(lm, switch, topic.statements_a, topic.statements_b):.1%}; toward A / B {shown}")
        H, top, delta, weight = teacher(lm, topic, continued(lm, topic.title + "\n\n", opens, 0))
        for lam in (1e-6, 1e-5, 1e-4, 1e-2, 1.0):
            W, iterations = soft_fit(lm, H, top, delta, weight, lam)
            soft = dataclasses.replace(plain, W=W)
            both = dataclasses.replace(plain, W=plain.W / plain.W.norm() + W / W.norm())
            print(f"- soft, λ {lam:g} ({iterations} L-BFGS iterations): meter {meter_accuracy(lm, soft, topic.statements_a, topic.statements_b):.1%}; "
                  f"plain + soft {meter_accuracy(lm, both, topic.statements_a, topic.statements_b):.1%}", flush=True)


if __name__ == "__main__":
    main()
