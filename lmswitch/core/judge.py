"""A switch's judge: a linear classifier of its two styles on the head's input, averaged over a text.

The switch itself is a poor judge of a finished text (its log-likelihood ratio over 25 tokens is dominated by words
that carry no style; EVALUATION.md), but the same training texts give a logistic regression on mean head inputs
that tells the styles apart well (98% of held-out dev sentiment sentences). Guided decoding
(:func:`lmswitch.core.generate.generate_tokens` with ``guide``) ranks candidate continuations with it.

A judge is ``d + 1`` numbers, ``[w, b]``: ``w · mean(c) + b`` is the log-odds that a text is on the switch's
positive side.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from lmswitch.core.hidden import TokenStates

MIN_UNITS = 4  # pooled pieces per side below which no judge is fitted (it would only memorise)
JUDGE_C = 0.01  # inverse L2 strength on standardised features (chosen on held-out dev sentiment pairs: 98% right; 1.0: 96%)


def pooled_units(data: TokenStates) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean head input per held-out unit (a short text, or a block of a long one) and the sign of its label."""
    units, inverse = torch.unique(data.unit, return_inverse=True)
    inverse = inverse.to(data.hidden.device)
    sums = torch.zeros(len(units), data.hidden.shape[1], device=data.hidden.device).index_add_(0, inverse, data.hidden.float())
    counts = torch.zeros(len(units), device=data.hidden.device).index_add_(0, inverse, torch.ones_like(data.labels))
    labels = torch.zeros(len(units), device=data.hidden.device).index_add_(0, inverse, data.labels) / counts
    return (sums / counts[:, None]).cpu(), torch.sign(labels).cpu()


def fit_judge(data: TokenStates) -> torch.Tensor | None:
    """``[w, b]`` of a logistic regression of positive (label > 0) against negative (label < 0) units, or None when a
    side has fewer than :data:`MIN_UNITS` units (one document alone, or too few examples). The features are
    standardised for the fit (it converges in a few dozen iterations) and the scaling folded back into ``w`` and ``b``."""
    X, y = pooled_units(data)
    keep = y != 0
    X, y = X[keep].double().numpy(), (y[keep] > 0).numpy()
    if min(int(y.sum()), int((~y).sum())) < MIN_UNITS:
        return None
    from sklearn.linear_model import LogisticRegression  # ~1 s to import: only where a judge is fitted, not at every start

    mean, scale = X.mean(0), X.std(0) + 1e-6
    clf = LogisticRegression(C=JUDGE_C, max_iter=1000).fit((X - mean) / scale, y)
    w = clf.coef_[0] / scale
    return torch.tensor(np.r_[w, clf.intercept_[0] - w @ mean], dtype=torch.float32)


def judge_logodds(judge: torch.Tensor, mean_hidden: torch.Tensor) -> torch.Tensor:
    """Log-odds of the positive side for each row of ``mean_hidden`` ``(n, d)``."""
    return mean_hidden.float() @ judge[:-1] + judge[-1]


def guide_scores(judges: Sequence[tuple[torch.Tensor, float]], mean_hidden: torch.Tensor) -> torch.Tensor:
    """How well each row of ``mean_hidden`` goes where a row's steering asks: the sum over its switches of the sign of
    ε times the judge's log-odds (a switch at ε 0 asks for nothing)."""
    score = torch.zeros(mean_hidden.shape[0])
    for judge, eps in judges:
        if eps:
            score += float(np.sign(eps)) * judge_logodds(judge, mean_hidden)
    return score
