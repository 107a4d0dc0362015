"""Adaptive strength: per token, scale the steering down so the next-token distribution stays near the base model's.

A switch adds ``Δ = M c`` to the head input. With ``p_α = softmax(E (c + α Δ))`` the
divergence ``KL(p_α ‖ p_0)`` grows monotonically with ``α ≥ 0`` (its derivative is
``α · Var_{p_α}(E Δ)``), so for a budget ``B`` there is one largest ``α ∈ [0, 1]``
with ``KL ≤ B``: found by bisection, per token. Where the switch barely changes the
distribution (most tokens) ``α = 1`` and steering is untouched; where it would
force one word on every context (the "great great great" loops of a strong
switch) it is held back to the budget.

Related: In-Distribution Steering (arXiv 2510.13285) scales by how far activations
leave their distribution; this caps the change of the output distribution itself,
which is what fluency is measured on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from lmswitch.core.options import KL_BUDGET as KL_BUDGET  # defined there, torch-free, for the CLI

if TYPE_CHECKING:
    from lmswitch.core.models import LanguageModel

BISECTION_STEPS = 14  # α to within 2⁻¹⁴ of the largest value that keeps the budget
ROWS_PER_CHUNK = 64  # positions per chunk: bounds the (rows, V) float32 buffers


def _kl(lm: LanguageModel, raw0: torch.Tensor, d: torch.Tensor, logp0: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """``KL(p_α ‖ p_0)`` per row for ``α`` of shape (n, 1); raw logits ``raw0 + α d`` before any soft-capping."""
    logp = torch.log_softmax(lm.softcap(raw0 + alpha * d), dim=-1)
    return (logp.exp() * (logp - logp0)).sum(-1)


@torch.no_grad()
def kl_scale(lm: LanguageModel, c: torch.Tensor, delta: torch.Tensor, budget: float) -> torch.Tensor:
    """The factor ``α ∈ [0, 1]`` per position, shape ``(..., 1)``, such that steering ``c → c + α·delta`` keeps
    ``KL(steered ‖ unsteered) ≤ budget`` (and ``α = 1`` wherever the full step already does).

    ``c`` and ``delta`` are head inputs and steering terms of shape ``(..., d)``.
    """
    flat_c, flat_d = c.reshape(-1, c.shape[-1]), delta.reshape(-1, delta.shape[-1])
    alpha = torch.ones(flat_c.shape[0], 1, dtype=torch.float32, device=c.device)
    for s in range(0, flat_c.shape[0], ROWS_PER_CHUNK):
        alpha[s : s + ROWS_PER_CHUNK] = _chunk_scale(lm, flat_c[s : s + ROWS_PER_CHUNK], flat_d[s : s + ROWS_PER_CHUNK], budget)
    return alpha.reshape(*c.shape[:-1], 1)


def _chunk_scale(lm: LanguageModel, c: torch.Tensor, delta: torch.Tensor, budget: float) -> torch.Tensor:
    raw0 = lm.raw_logits(c)  # (n, V) float32
    d = lm.raw_logits(delta, bias=False)  # (n, V): the steering term's logit change at α = 1
    logp0 = torch.log_softmax(lm.softcap(raw0), dim=-1)
    alpha = torch.ones(len(c), 1, device=raw0.device)
    over = _kl(lm, raw0, d, logp0, alpha) > budget  # (n,)
    if not bool(over.any()):
        return alpha.to(c.device)
    raw0, d, logp0 = raw0[over], d[over], logp0[over]
    lo, hi = torch.zeros(len(raw0), 1, device=raw0.device), torch.ones(len(raw0), 1, device=raw0.device)
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        fits = (_kl(lm, raw0, d, logp0, mid) <= budget)[:, None]
        lo, hi = torch.where(fits, mid, lo), torch.where(fits, hi, mid)
    alpha[over] = lo  # the largest tested α within the budget
    return alpha.to(c.device)
