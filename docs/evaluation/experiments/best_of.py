"""Best of n candidates ranked by the switch (EVALUATION.md, "Seventh session"): a dev-only experiment, not a feature.

    PYTHONPATH=. python docs/evaluation/experiments/best_of.py --eps 0,6,-6,8,-8 --n 4

Per ε: every (prompt, sample) is drawn n times (seeds k + 1000 j), the candidates are scored in one body pass
(log-probabilities unsteered and steered at ε, or at ±8 for the unsteered proposal), and each selection rule is
applied offline; the texts are scored with the harness's metrics and judged by the frontier's fluency rules.
"""

from __future__ import annotations

import argparse

import torch
from scipy.stats import spearmanr

import lmswitch as ls
from lmswitch.core.generate import Generated, generate_tokens
from lmswitch.core.hidden import target_logprobs
from lmswitch.core.options import SamplingOptions
from lmswitch.core.steering import steering_matrix
from lmswitch.harness.evaluate import _summarise, formality_scores, sentiment_scores, toxicity_scores
from lmswitch.harness.frontier import FluencyRules
from lmswitch.harness.options import load_prompts
from lmswitch.io.resources import shipped_switch_path

RULES = ("llr", "likelihood")


@torch.no_grad()
def logprobs(lm: ls.LanguageModel, gen: Generated, matrices: list) -> tuple[torch.Tensor, list[int]]:
    """Summed log-probability of each row's new tokens under each matrix (None: unsteered), and the token counts."""
    P = gen.prompt_ids.shape[1]
    ids = torch.cat([gen.prompt_ids, gen.new_ids], 1)
    mask = torch.cat([gen.prompt_mask, gen.new_mask], 1)
    h = lm.final_hidden(ids, mask, (mask.cumsum(-1) - 1).clamp_min(0))[:, P - 1 : -1]
    valid = gen.new_mask.bool()
    lp = target_logprobs(lm, h[valid], gen.new_ids[valid], matrices)
    rows = valid.nonzero()[:, 0]
    sums = torch.stack([torch.zeros(len(valid), dtype=torch.float64).index_add_(0, rows, x) for x in lp])
    return sums, valid.sum(-1).tolist()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--switch", default="sentiment")
    ap.add_argument("--prompt-set", default="neutral")
    ap.add_argument("--eps", default="0,6,-6,8,-8")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=5)
    args = ap.parse_args()
    lm = ls.load_model(dtype=torch.float32)
    switch = ls.load_switch(shipped_switch_path(args.switch), lm)
    prompts = load_prompts(args.prompt_set, args.prompts, "dev")
    S, N = args.samples, args.n
    rows = [(p, k + 1000 * j) for p in prompts for k in range(S) for j in range(N)]
    rules = FluencyRules()
    base = None
    eps_values = [float(e) for e in args.eps.split(",")]
    if eps_values[0] != 0:
        raise SystemExit("the first --eps must be 0 (the unsteered baseline)")
    for eps in eps_values:
        score_at = eps or 8.0
        texts, lp0, lps, counts = [], [], [], []
        for s in range(0, len(rows), 128):
            chunk = rows[s : s + 128]
            gen = generate_tokens(lm, [p for p, _ in chunk], [[(switch, eps)] if eps else []] * len(chunk),
                                  [seed for _, seed in chunk], SamplingOptions(max_new_tokens=25))
            sums, c = logprobs(lm, gen, [None, steering_matrix([(switch, score_at)])])
            texts += gen.texts
            lp0 += sums[0].tolist()
            lps += sums[1].tolist()
            counts += c
        scores = (sentiment_scores(texts), toxicity_scores(texts), formality_scores(texts))
        if eps == 0:
            llr = [a - b for a, b in zip(lps, lp0, strict=True)]
            print(f"Spearman(VADER, llr at ε {score_at:+g}) over {len(texts)} unsteered texts: {spearmanr(scores[0], llr)[0]:.3f}")

        for n, rule in [(1, "llr")] + [(n, r) for n in sorted({2, N}) if n > 1 for r in RULES]:
            chosen = pick(lps, lp0, counts, n, N, rule)
            ev = _summarise([], [(p, k) for p in prompts for k in range(S)], [texts[c] for c in chosen], [-lp0[c] for c in chosen],
                            [counts[c] for c in chosen], *([x[c] for c in chosen] for x in scores), S, 0.0)
            base = ev if base is None else base  # the first ε is 0: its n = 1 row is the unsteered model
            problems = rules.problems(ev, base)
            print(f"ε {eps:+g} n={n} {'today' if n == 1 else rule:10s} positive {ev.positive_share:.3f} toxicity prob. "
                  f"{ev.toxicity_prob:.3f} formal {ev.formal_share:.3f} perplexity "
                  f"{ev.perplexity / base.perplexity:.2f}× loops {ev.repetition:.1%} {'fluent' if not problems else '; '.join(problems)}")


def pick(lps: list[float], lp0: list[float], counts: list[int], n: int, N: int, rule: str) -> list[int]:
    """The chosen candidate of each sample among its first ``n`` of ``N``: highest llr, or steered likelihood per token."""
    def key(c: int) -> float:
        return lps[c] - lp0[c] if rule == "llr" else lps[c] / max(counts[c], 1)
    return [max(range(i * N, i * N + n), key=key) for i in range(len(lps) // N)]

if __name__ == "__main__":
    main()
