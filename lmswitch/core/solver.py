"""Fast training: full-batch L-BFGS on cached states, over each token's likely next words, along a ridge path.

With the body frozen, the training loss is convex in ``(W, W_d)``: per token it is
``logsumexp(L0 + E u) − (L0_y + e_yᵀ u)`` with ``u = ε0 (y W + W_d) c``. Its cost is
the vocabulary: every exact evaluation is two ``(n, d) × (d, V)`` products. This
module evaluates it over a small set per token instead:

* the target and the ``k`` most likely next tokens under the unsteered model, exactly;
* the rest of the vocabulary (the *tail*, typically 5–15% of the probability) by
  ``s`` words drawn from it in proportion to their probability, each standing for
  ``P_T / s`` of it (the default, :data:`SAMPLED`): the tail's exact sum
  ``Σ_T p_j exp(e_jᵀ u)`` is their mean in expectation, at every ``u``. The reduced loss
  is a log-sum-exp over ``k + 1 + s`` words per token, convex, and exact at ``u = 0``;
* or (:data:`BOUND`, the first release) by one term ``P_T · exp(m_Tᵀ u)``, where ``m_T``
  is the tail's probability-weighted mean output embedding. By Jensen's inequality this
  is a lower bound of the tail's exact sum, equal to it to first order in ``u`` only:
  L-BFGS exploits it away from the point it was taken at, so this recipe takes the
  reduction again at each λ of the path (one more full-vocabulary pass each).

(Where the hardware multiplies bfloat16, the tail's probabilities come from bfloat16
products: within ~1e-3 of exact.) One full-vocabulary pass per token (at setup) computes
the candidates and the tail; an evaluation afterwards costs ``O(n (k + s) d)``, ~1,000×
less than the exact one on SmolLM2's 49,152 words. L-BFGS (``torch.optim.LBFGS``,
strong-Wolfe line search) then minimises ``loss + λ ‖ε0 W‖²`` for a decreasing
sequence of ``λ`` (warm-started: each λ starts at the last one's end, with its curvature pairs corrected for the new
penalty, and its first evaluation there reuses the last one's), and the exact held-out loss picks the ``λ`` to keep:
the least regularised one within :data:`TOLERANCE` of the best (a stronger switch that
still generalises: on 30 + 30 sentiment sentences it ranks 20 held-out sentences 0.96
pairwise against 0.94 at the held-out minimum). This replaces early stopping. The card's held-out numbers
are computed with the exact full-vocabulary head afterwards.

Rows that share a label share their steering matrix ``y W + W_d``, so labelled data costs one
``(n, d) × (d, d)`` product per evaluation, not two (the same for the gradient).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from lmswitch.core.models import LanguageModel, preferred_dtype
from lmswitch.core.options import LBFGS_MIN_STEPS, RECIPE_NAMES
from lmswitch.core.packed import mm_t
from lmswitch.core.pause import pause_point

CANDIDATES = 32  # next-token candidates per row kept exactly (plus the target)
PATH = (30.0, 10.0, 3.0, 1.0, 0.3, 0.1)  # λ on ‖ε0 W‖², strongest first
NO_HELDOUT_LAMBDA = 10.0  # where the path ends when there is no held-out text to choose with
TOLERANCE = 0.02  # keep the least regularised λ whose held-out loss is within 2% of the best; stop past it
ROWS = 256  # rows per part of the loss's sum
# rows per chunk of the full-vocabulary pass: its (64, V) float32 logits (12.6 MB) stay in cache through the softmax, the
# top-k and the draw (the style data's pass 3.4 → 2.9 s against 256 rows on the AMX Xeon, the same candidates and draws)
PASS_ROWS = 64
STEP_ROWS = 64  # rows per chunk of a loss evaluation: (64, k + 1 + s, d) embeddings in float32 stay in cache
# keep the candidates' embeddings (gathered once, not per evaluation) up to this size: the first-release sentiment data
# (11,867 rows × 49 × 576) needs 1.34 GB in float32 (a head in float32, on CPUs without native bfloat16), where an
# evaluation took 0.33 s kept against 0.74 s gathered again from the head (an AVX2 EPYC)
KEEP_BYTES = 2**31
MAX_GROUPS = 4  # label values up to which rows are grouped by label (one steering product per label)


@dataclass(frozen=True)
class Recipe:
    """How the solver stands in for each row's vocabulary tail and walks the ridge path."""

    tail_samples: int | None  # words drawn from each row's tail; None: the tail's mean embedding (a bound), reduced per λ
    evaluations: int  # loss evaluations per λ (L-BFGS iterations and line-search steps), warm-started
    scaled: bool  # L-BFGS moves ε0·W, not W: its first step (1/‖g‖₁ of the gradient) is then near the right length
    carried: bool = False  # each λ starts from the last λ's curvature pairs (:func:`_carry`), not a gradient step

    def __post_init__(self) -> None:
        if self.carried and self.tail_samples is None:  # the bound's loss changes with its reduction, not only by λ
            raise ValueError("a recipe that reduces again at each λ cannot carry its curvature pairs across λ")

    def planned(self, path: tuple[float, ...] = PATH) -> int:
        """The most loss evaluations a walk along ``path`` takes (``evaluations`` per λ)."""
        return self.evaluations * len(path)


# the default: 16 words drawn from each tail, one full-vocabulary pass. On the first-release sentiment data it fits the
# held-out text better than BOUND (4.20 against 4.35 nats) in about half the time; carrying the curvature pairs across
# λ took it to 4.18 in the same evaluations, and 30 + 30 sentences from 3.63 to 3.59 (benchmarks/RESULTS.md)
SAMPLED = Recipe(tail_samples=16, evaluations=10, scaled=True, carried=True)
BOUND = Recipe(tail_samples=None, evaluations=15, scaled=False)  # the first release; the shipped sentiment switch's
RECIPES = {"lbfgs-sampled": SAMPLED, "lbfgs": BOUND}  # TrainConfig.optimizer → recipe (a name keeps its recipe)
if tuple(RECIPES) != RECIPE_NAMES:  # checked at import, also under python -O
    raise RuntimeError("name each recipe in lmswitch.core.options.RECIPE_NAMES too (the CLI reads them there)")


@dataclass(frozen=True)
class Reduced:
    """One part of the data (train or held-out) with each row's vocabulary reduced to candidates plus a tail term."""

    C: torch.Tensor  # (n, d) head inputs
    labels: torch.Tensor  # (n,) label of each row's text
    ids: torch.Tensor  # (n, k + 1 [+ s]) candidate token ids; column 0 is the target; then any words drawn from the tail
    logp: torch.Tensor  # (n, k + 1 [+ s]) their unsteered log-probabilities (-inf marks a repeat of the target); a
    # drawn word's is log(P_T / s), the share of the tail it stands for
    log_tail: torch.Tensor  # (n,) log of the probability outside the candidates
    tail_mean: torch.Tensor | None  # (n, d) the tail's probability-weighted mean output embedding (None: tail sampled)
    candidates: torch.Tensor | None = None  # (n, k + 1 [+ s], d) the candidates' output embeddings, when small enough to keep
    # (in bfloat16 when the head's weights are bfloat16: the same values, half the memory to stream per evaluation)
    groups: tuple[tuple[float, int, int], ...] | None = None  # (label, first row, end) when rows are sorted by a few labels
    C_t: tuple[torch.Tensor, ...] = ()  # each group's C transposed, contiguous (for the gradient products)
    origin: torch.Tensor | None = None  # (n, d) the head-input change the reduction was taken at (None: 0)

    def __len__(self) -> int:
        return len(self.C)

    def embeddings(self, E: torch.Tensor | None, rows: slice) -> torch.Tensor:
        """The candidates' output embeddings of ``rows``, ``(r, k + 1 [+ s], d)``: kept, or gathered again from ``E``."""
        return (self.candidates[rows] if self.candidates is not None else E[self.ids[rows]]).float()


@torch.no_grad()
def reduce(lm: LanguageModel, C: torch.Tensor, targets: torch.Tensor, labels: torch.Tensor, k: int = CANDIDATES,
           origin: torch.Tensor | None = None, samples: int | None = None, generator: torch.Generator | None = None) -> Reduced:
    """The one full-vocabulary pass: candidates, their log-probabilities and the tail of every row, at head-input
    change ``origin`` (rows in the order :func:`reduce` sorts them to; None: 0), where the reduced loss is then exact.
    The tail is ``samples`` words drawn from it (with ``generator``, on the head's device), or with None its mean
    embedding.

    Where the hardware multiplies bfloat16 natively, the full-vocabulary products run in bfloat16 (~4× faster on
    an AVX512-BF16 CPU) and only pick the candidates and weigh the tail; the candidates' logits, which carry most
    of the probability, are computed again exactly in float32."""
    if not lm.logits_are_head_output:  # its exact logits below are E c + b, and the loss's changes E u
        raise ValueError(f"the solver needs logits that are the head's output itself; '{lm.name}' soft-caps or scales "
                         "them (train it with optimizer='adam')")
    E = lm.head_weight(torch.float32)
    E_fast = _bf16_head(lm)
    order, groups = _by_label(labels)
    C, targets, labels = C[order], targets[order], labels[order]
    at = C.float() if origin is None else C.float() + origin
    stored = lm.head_weight() if lm.head_weight().dtype == torch.bfloat16 else E  # kept in bfloat16 where the head is
    width = k + 1 + (samples or 0)
    keep = len(C) * width * E.shape[1] * stored.itemsize <= KEEP_BYTES
    # the candidates' embeddings (n, k + 1 [+ s], d), when kept: gathered chunk by chunk into their place
    candidates = torch.empty(len(C), width, E.shape[1], dtype=stored.dtype, device=E.device) if keep else None
    parts: list[tuple[torch.Tensor, ...]] = []
    for s in range(0, len(C), PASS_ROWS):
        part = _reduce_rows(lm, at[s : s + PASS_ROWS], targets[s : s + PASS_ROWS], k, E, E_fast, samples, generator)
        if candidates is not None:
            torch.index_select(stored, 0, part[0].flatten(), out=candidates[s : s + len(part[0])].view(-1, E.shape[1]))
        parts.append(part)
        pause_point()
    ids, logp, log_tail = (torch.cat(x) for x in list(zip(*parts, strict=True))[:3])
    tail_mean = torch.cat([p[3] for p in parts]) if samples is None else None
    C = C.float()
    C_t = tuple(C[a:b].T.contiguous() for _, a, b in groups) if groups else ()
    return Reduced(C, labels.float(), ids, logp, log_tail, tail_mean, candidates, groups, C_t, origin)


def _bf16_head(lm: LanguageModel) -> torch.Tensor | None:
    """The output embedding in bfloat16 where the head's device multiplies bfloat16 natively, else None."""
    return lm.head_weight(torch.bfloat16) if preferred_dtype(lm.head_device) == torch.bfloat16 else None


def _reduce_rows(lm: LanguageModel, c: torch.Tensor, y: torch.Tensor, k: int, E: torch.Tensor,
                 E_fast: torch.Tensor | None, samples: int | None, generator: torch.Generator | None) -> tuple[torch.Tensor, ...]:
    """:func:`reduce` of one chunk of rows: candidate ids (target first, then any drawn from the tail), their
    log-probabilities, the log tail probability and the tail's mean output embedding (None when drawn from)."""
    logits = lm.raw_logits(c, dtype=torch.float32 if E_fast is None else torch.bfloat16)  # (r, V)
    top = logits.topk(min(k, logits.shape[1]), dim=-1).indices
    ids = torch.cat([y[:, None], top], dim=1)
    if E_fast is not None:  # the candidates' logits exactly; the rounded ones only for the rest
        bias = getattr(lm.head, "bias", None)
        exact = torch.einsum("rd,rkd->rk", c, E[ids]) + (bias.float()[ids] if bias is not None else 0.0)
        logits.scatter_(1, ids, exact)
    chosen = logits.gather(1, ids)
    p_all = torch.softmax(logits, dim=-1)
    del logits
    lse = chosen[:, 1] - p_all.gather(1, top[:, :1])[:, 0].log()  # the likeliest word's probability never underflows
    logp = chosen - lse[:, None]
    logp[:, 1:][top == y[:, None]] = -torch.inf  # the target counted once
    p_tail = p_all.scatter_(1, ids, 0.0)  # the probabilities outside the candidates
    # their sum, not 1 − the candidates' (which cancels to rounding noise where the candidates hold nearly all of it):
    # the mean below is then a true weighted mean of output embeddings. A float32 sum (pairwise, ~1e-7 relative): a
    # float64 one cost as much as the head's product here (30 of 110 ms per 256 rows)
    tail_sum = p_tail.sum(1)
    tail_p = tail_sum.clamp_min(1e-30)
    if samples is not None:  # (a row whose tail rounds to nothing draws from anywhere: its words weigh e^-69 / s)
        empty = tail_sum <= 0
        if empty.any():  # (rare: a pass over the rows' whole vocabulary only then)
            p_tail[empty] = 1.0
        drawn = torch.multinomial(p_tail, samples, replacement=True, generator=generator)
        share = (tail_p.log() - math.log(samples))[:, None].expand(-1, samples)
        return torch.cat([ids, drawn], 1), torch.cat([logp, share], 1), tail_p.log(), None
    mass = (p_tail @ E) if E_fast is None else (p_tail.to(E_fast.dtype) @ E_fast).float()
    return ids, logp, tail_p.log(), mass / tail_p[:, None]


def _by_label(labels: torch.Tensor) -> tuple[torch.Tensor, tuple[tuple[float, int, int], ...] | None]:
    """An order of the rows sorted by label, with each label's slice, when there are at most :data:`MAX_GROUPS`
    labels: rows that share a label share their steering matrix ``y W + W_d``, one product instead of two (the loss is
    a mean over rows, so their order does not matter). Graded labels keep their rows and no groups. The sort is
    stable, so rows already sorted keep their order."""
    values = labels.unique()
    if len(values) > MAX_GROUPS:
        return torch.arange(len(labels)), None
    counts = [int((labels == v).sum()) for v in values]  # unique() is sorted, as is labels[order]
    ends = torch.tensor(counts).cumsum(0).tolist()
    groups = tuple((float(v), end - n, end) for v, n, end in zip(values.tolist(), counts, ends, strict=True))
    return labels.argsort(stable=True), groups


def loss_and_grad(lm: LanguageModel, rows: Reduced, U: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Mean reduced NLL of the rows at head-input change ``U`` (n, d), and its gradient with respect to ``U``."""
    U = U if rows.origin is None else U - rows.origin
    grad = torch.empty_like(U)
    E = lm.head_weight(torch.float32) if rows.candidates is None else None  # once per evaluation, not per chunk
    nll = torch.empty(len(rows))
    for s in range(0, len(rows), STEP_ROWS):
        pause_point()
        sl = slice(s, s + STEP_ROWS)
        u, Eg = U[sl], rows.embeddings(E, sl)  # Eg: (r, k + 1 [+ s], d)
        z = rows.logp[sl] + torch.einsum("rd,rkd->rk", u, Eg)
        if rows.tail_mean is not None:  # the bound's tail term, a last column
            z = torch.cat([z, (rows.log_tail[sl] + (u * rows.tail_mean[sl]).sum(1))[:, None]], 1)
        lse = torch.logsumexp(z, dim=1)
        nll[sl] = lse - z[:, 0]
        q = torch.exp(z - lse[:, None])
        g = torch.einsum("rk,rkd->rd", q[:, : Eg.shape[1]], Eg)
        g = g + q[:, -1:] * rows.tail_mean[sl] if rows.tail_mean is not None else g
        grad[sl] = g - Eg[:, 0]
    # summed in ROWS-row parts, as when the evaluation itself went ROWS rows at a time: the same value to the bit, so a
    # recipe's switch (the shipped sentiment switch's included) rebuilds exactly whatever STEP_ROWS is
    total = sum(float(nll[s : s + ROWS].sum()) for s in range(0, len(rows), ROWS))
    n = max(len(rows), 1)
    return total / n, grad / n


def steer_term(rows: Reduced, W: torch.Tensor, Wd: torch.Tensor | None, eps0: float) -> torch.Tensor:
    """``U = ε0 (y W + W_d) c`` for every row: the head-input change the loss sees."""
    if rows.groups is None:
        U = (eps0 * rows.labels)[:, None] * (rows.C @ W.T)
        return U.addmm_(rows.C, Wd.T, alpha=eps0) if Wd is not None else U
    return torch.cat([mm_t(rows.C[a:b], eps0 * (y * W + Wd if Wd is not None else y * W)) for y, a, b in rows.groups])


def steer_gradients(rows: Reduced, G: torch.Tensor, with_dummy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``Σ_i y_i g_i c_iᵀ`` and (``with_dummy``) ``Σ_i g_i c_iᵀ`` for the rows ``g_i`` of ``G`` (n, d): with ``G`` the
    gradient of the loss with respect to ``U / ε0``, the gradients with respect to ``W`` and ``W_d``."""
    if rows.groups is None:
        return (rows.labels[:, None] * G).T @ rows.C, (G.T @ rows.C if with_dummy else None)
    parts = [(y, mm_t(G[a:b].T.contiguous(), C_t)) for (y, a, b), C_t in zip(rows.groups, rows.C_t, strict=True)]
    return sum(y * P for y, P in parts), (sum(P for _, P in parts) if with_dummy else None)


class _Spent(Exception):
    """Raised by the loss evaluation once the evaluations allowed are used up."""


@dataclass
class _Best:
    """The lowest objective a λ's evaluations reached: where, and the data term's loss and gradients there. L-BFGS ends
    a λ at that point (its line searches accept only descent), where the next λ's first evaluation is then free: only
    the penalty changes."""

    value: float = math.inf
    at: list[torch.Tensor] | None = None
    loss: float = math.nan
    grads: tuple[torch.Tensor | None, ...] = ()

    def holds(self, params: list[torch.Tensor]) -> bool:
        return self.at is not None and all(torch.equal(p.detach(), q) for p, q in zip(params, self.at, strict=True))


def _data_term(lm: LanguageModel, rows: Reduced, params: list[torch.Tensor], use_dummy: bool,
               unit: float) -> tuple[float, tuple[torch.Tensor | None, ...]]:
    """The reduced loss at ``params`` (W, and W_d with the dummy, in steering units ``unit``) and its gradients."""
    U = steer_term(rows, params[0].detach(), params[1].detach() if use_dummy else None, unit)
    loss, gU = loss_and_grad(lm, rows, U)
    return loss, steer_gradients(rows, unit * gU, use_dummy)


def _carry(state: dict, opt: torch.optim.LBFGS, x: torch.Tensor, change: float, stepped: bool) -> None:
    """Seed ``opt``, the next λ's L-BFGS, with ``state``, the last λ's (torch's own keys), so the next λ starts with a
    quasi-Newton step instead of a short gradient step. The objective's gradient changes by ``change · x`` (the penalty
    is quadratic), so each curvature pair ``(s, y)`` carries over exactly as ``(s, y + change · s)``.

    torch records an iteration's pair at the next iteration: ``stepped`` says that the last step (``d · t``, from the
    gradient ``prev_flat_grad``, to ``x``) was taken, and it is carried the same way; else a zero step, which torch
    does not record."""
    pairs = [(s, y + change * s) for s, y in zip(state["old_stps"], state["old_dirs"], strict=True)]
    pairs = [(s, y) for s, y in pairs if float(y.dot(s)) > 1e-10]  # (convexity keeps them positive, rounding may not)
    seeded = opt.state[opt.param_groups[0]["params"][0]]
    seeded.update(n_iter=1, old_stps=[s for s, _ in pairs], old_dirs=[y for _, y in pairs],
                  ro=[1.0 / float(y.dot(s)) for s, y in pairs],
                  H_diag=float(pairs[-1][0].dot(pairs[-1][1]) / pairs[-1][1].dot(pairs[-1][1])) if pairs else 1.0)
    if stepped:
        step = state["d"] * state["t"]
        seeded.update(d=state["d"], t=state["t"], prev_flat_grad=state["prev_flat_grad"] + change * (x - step))
    else:
        seeded.update(d=torch.zeros_like(x), t=0.0, prev_flat_grad=torch.zeros_like(x))


def ridge_path(lm: LanguageModel, train: Reduced, eps0: float, use_dummy: bool, W: torch.Tensor, Wd: torch.Tensor, *,
               max_evaluations: int, on_evaluation: Callable[[int, float], None], path: tuple[float, ...] = PATH,
               recipe: Recipe = SAMPLED) -> Iterator[float]:
    """Minimise ``loss + λ ‖ε0 W‖² (+ λ ‖ε0 W_d‖²)`` for each λ of ``path`` in turn, warm-started, updating ``W``/``Wd``
    in place; yields each λ once its minimisation is done, so the caller can score the held-out loss and stop the path.

    ``on_evaluation(evaluations so far, objective)`` runs after every loss evaluation (it may raise to cancel). At most
    ``max_evaluations`` are made: a λ stopped by the cap keeps the best point its line search reached. A λ's first
    evaluation, where the last λ ended, reuses that λ's data term; a ``carried`` recipe also carries its curvature.
    """
    # what L-BFGS moves: ε0·W when the recipe is scaled (then the steering unit is 1), else W itself
    params = [p.detach().mul(eps0).requires_grad_() for p in (W, Wd)] if recipe.scaled else [W, Wd]
    unit = 1.0 if recipe.scaled else eps0
    params = params if use_dummy else params[:1]
    evals, last, state = 0, _Best(), None
    for i, lam in enumerate(path):
        budget = min(recipe.evaluations, max_evaluations - evals)
        if budget < LBFGS_MIN_STEPS:  # torch's L-BFGS takes two evaluations even when allowed one: past the cap
            return
        if i and recipe.tail_samples is None:  # the bound again, at the point the previous λ reached: exact there
            with torch.no_grad():
                origin = steer_term(train, params[0].detach(), params[1].detach() if use_dummy else None, unit)
                train = reduce(lm, train.C, train.ids[:, 0], train.labels, k=train.ids.shape[1] - 1, origin=origin)
            last = _Best()  # another loss from here on
        opt = torch.optim.LBFGS(params, lr=1.0, max_iter=budget, max_eval=budget, history_size=20,
                                line_search_fn="strong_wolfe", tolerance_grad=1e-9, tolerance_change=1e-12)
        if recipe.carried and state is not None and "old_stps" in state:
            x = torch.cat([p.detach().reshape(-1) for p in params])
            _carry(state, opt, x, 2 * (lam - path[i - 1]) * unit**2, stepped=last.value < state["prev_loss"])
        best = _Best()

        @torch.no_grad()
        def closure(lam: float = lam, rows: Reduced = train, best: _Best = best, last: _Best = last) -> torch.Tensor:
            nonlocal evals
            if evals >= max_evaluations:  # torch's L-BFGS ends only between its line searches, past the cap
                raise _Spent
            loss, grads = (last.loss, last.grads) if last.holds(params) else _data_term(lm, rows, params, use_dummy, unit)
            for p, g in zip(params, grads, strict=False):
                p.grad = g + 2 * lam * unit**2 * p.detach()
            value = loss + lam * unit**2 * sum(float((p.detach() ** 2).sum()) for p in params)
            evals += 1
            if value <= best.value:  # (the later of equal points: where a line search that ends on a tie stops)
                best.value, best.at, best.loss, best.grads = value, [p.detach().clone() for p in params], loss, grads
            on_evaluation(evals, value)
            return torch.tensor(value)

        try:
            opt.step(closure)
        except _Spent:  # stopped inside a line search: back to the best point it evaluated
            with torch.no_grad():
                for p, kept in zip(params, best.at, strict=True):
                    p.copy_(kept)
        state, last = opt.state[params[0]], best
        if recipe.scaled:
            with torch.no_grad():
                for p, target in zip(params, (W, Wd), strict=False):
                    target.copy_(p / eps0)
        yield lam
