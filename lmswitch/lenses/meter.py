"""Style meter: which ε of each switch explains a text best.

The log-likelihood of a text under ``c → c + Σ_i ε_i ε0_i W_i c`` is concave in the
vector ε (the raw logits are affine in ε and log-softmax is concave), so its
maximiser is found reliably by a few projected Newton steps (exact gradient and
Hessian) on cached hidden states. A text written in a switch's style prefers
positive ε: the sign is a zero-shot classifier, and the curve shows how sure it is.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import scipy.linalg
import torch

from lmswitch.core.checks import is_number, is_whole
from lmswitch.core.hidden import HEAD_CHUNK, EncodedText, encode_text
from lmswitch.core.models import LanguageModel
from lmswitch.core.pause import pause_point
from lmswitch.core.switch import Switch, check_switch
from lmswitch.lenses.options import DEFAULT_POINTS, WEAK_EVIDENCE_NATS

MAX_SWITCHES = 8
MAX_GRID = 201
CACHE_FLOATS = 96 * 1024**2  # cache base and per-switch logit changes up to ~400 MB, else recompute per evaluation
# rows per piece of an evaluation: its (rows, V) float32 temporaries (6 MB at V = 49,152) stay in the CPU's cache, ~2×
# faster than whole HEAD_CHUNK chunks (0.165 → 0.075 s an evaluation of a 633-token text, embedded model)
PIECE_ROWS = 32


@dataclass(frozen=True)
class MeterRow:
    """One switch's reading: its likelihood curve and the ε that explains the text best."""

    name: str
    positive_label: str
    negative_label: str
    grid: list[float]  # ε values (ε0 units), the other switches at 0
    loglik: list[float]  # mean log-likelihood per scored token (nats) at each grid value
    best_eps: float  # jointly with the other switches, rounded to 4 places
    best_eps_alone: float  # the other switches at 0
    evidence_nats: float  # log-likelihood ratio of the text at best_eps_alone vs ε 0: below ~1 nat the sign means little
    at_bound: bool  # best_eps pressed on the edge of the allowed range
    label: str | None  # the label on the side of best_eps's sign (None at exactly 0)

    @property
    def weak(self) -> bool:
        """Whether the evidence is below :data:`WEAK_EVIDENCE_NATS`: the side it reads means little."""
        return self.evidence_nats < WEAK_EVIDENCE_NATS

    @property
    def label_alone(self) -> str | None:
        """The label on the side of ``best_eps_alone``'s sign (None at exactly 0): the switch read by itself."""
        e = self.best_eps_alone
        return self.positive_label if e > 0 else self.negative_label if e < 0 else None


@dataclass(frozen=True)
class Measurement:
    """What :func:`measure` found. :meth:`to_dict` gives the plain JSON-ready dict (rows as dicts)."""

    tokens: int
    scored_tokens: int
    windows: int  # body passes used
    base_loglik: float  # mean log-likelihood per scored token at ε = 0
    best_loglik: float  # at the joint best ε
    gain: float  # best_loglik − base_loglik
    switches: list[MeterRow]

    def to_dict(self) -> dict:
        return asdict(self)


class _Surface:
    """Mean log-likelihood per scored token as a function of the ε vector (ε0 units).

    :meth:`derivatives` returns the value, the exact gradient and the exact Hessian
    in one pass over the cached logits (no autograd): with ``z = L0 + Σ ε_i D_i``
    (before any soft-capping ``z ← cap·tanh(z/cap)``), ``∂f/∂ε_i`` is the mean over
    tokens of ``z'_i[y] − E_p[z'_i]`` and ``∂²f/∂ε_i∂ε_j`` of
    ``z''_ij[y] − E_p[z''_ij] − Cov_p(z'_i, z'_j)``.
    """

    def __init__(self, lm: LanguageModel, hidden: torch.Tensor, targets: torch.Tensor, switches: Sequence[Switch]) -> None:
        self.lm, self.hidden, self.targets = lm, hidden, targets.to(hidden.device)
        self.Ws = [s.W.to(hidden.device) * s.eps0 for s in switches]
        self.cap = lm.logit_softcap
        n, per_row = len(targets), lm.vocab_size * (1 + len(switches))
        self.chunk = HEAD_CHUNK  # rows per cached chunk
        # the first chunks' logits, as many as CACHE_FLOATS holds (a long text's later chunks are made again per pass)
        fit = n if n * per_row <= CACHE_FLOATS else CACHE_FLOATS // per_row // self.chunk * self.chunk
        self.cached: list[tuple[torch.Tensor, list[torch.Tensor]]] = [self._chunk(s) for s in range(0, fit, self.chunk)]
        self.evaluations = 0
        self._memo: tuple[bytes, tuple[float, np.ndarray, np.ndarray]] | None = None
        self._values: dict[bytes, float] = {}  # ε → value, every value computed so far

    def _chunk(self, s: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        h = self.hidden[s : s + self.chunk]
        # the raw head is linear, so raw logits at ε are L0 + Σ ε_i D_i exactly
        return self.lm.raw_logits(h), [self.lm.raw_logits(h @ W.T, bias=False) for W in self.Ws]

    def _pieces(self) -> Iterator[tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]]:
        """The cached (or recomputed) base logits, logit changes and targets, :data:`PIECE_ROWS` rows at a time; a pause
        point before each (the meter's search evaluates the surface many times: 0.8 s for a comment and three switches,
        which held a server's other users until it ended)."""
        for j, s in enumerate(range(0, len(self.targets), self.chunk)):
            L0, Ds = self.cached[j] if j < len(self.cached) else self._chunk(s)
            for r in range(0, len(L0), PIECE_ROWS):
                pause_point()
                e = min(r + PIECE_ROWS, len(L0))  # a piece never runs past its chunk
                yield L0[r:e], [D[r:e] for D in Ds], self.targets[s + r : s + e, None]

    @torch.no_grad()
    def value(self, eps: Sequence[float]) -> float:
        return self.values([eps])[0]

    @torch.no_grad()
    def values(self, points: Sequence[Sequence[float]]) -> list[float]:
        """The value at each of ``points`` in one pass over the pieces: where the logits are not cached, each piece's
        are made once for all the points (a grid of 21 points × 3 switches made them 63 times: ~70 s for a 900-token
        text on 2 CPU cores, against ~4 s cached). A point computed before is not computed again (the meter asks for
        ε = 0 and the best ε more than once)."""
        keys = [np.asarray(e, dtype=np.float64).tobytes() for e in points]
        todo = list(dict.fromkeys(k for k in keys if k not in self._values))
        sums = dict.fromkeys(todo, 0.0)
        for L0, Ds, y in self._pieces() if todo else ():
            for k in todo:
                pause_point()  # a piece holds many points' work: other users go first between them
                z = self._logits(L0, Ds, np.frombuffer(k))
                sums[k] += float((z.gather(1, y)[:, 0] - torch.logsumexp(z, dim=-1)).double().sum())
        self.evaluations += len(todo)
        self._values.update({k: total / len(self.targets) for k, total in sums.items()})
        return [self._values[k] for k in keys]

    @torch.no_grad()
    def token_logliks(self, eps: Sequence[float]) -> torch.Tensor:
        """Each scored token's log-likelihood at ``eps``, ``(n,)`` float64."""
        parts = []
        for L0, Ds, y in self._pieces():
            z = self._logits(L0, Ds, eps)
            parts.append((z.gather(1, y)[:, 0] - torch.logsumexp(z, dim=-1)).double())
        self.evaluations += 1
        return torch.cat(parts)

    def _logits(self, L0: torch.Tensor, Ds: list[torch.Tensor], eps: Sequence[float]) -> torch.Tensor:
        """The (soft-capped) logits of a piece at ``eps``: a new tensor."""
        return self.lm.softcap(_raw_at(L0, Ds, eps))

    @torch.no_grad()
    def derivatives(self, eps: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        key = np.asarray(eps, dtype=np.float64).tobytes()
        if self._memo is not None and self._memo[0] == key:
            return self._memo[1]
        k, n = len(self.Ws), len(self.targets)
        f, g, H = 0.0, np.zeros(k), np.zeros((k, k))
        for L0, Ds, y in self._pieces():
            z = _raw_at(L0, Ds, eps)
            dz, d2 = Ds, None  # z'_i, and the factor of z''_ij = d2 · D_i D_j (soft-capping only)
            if self.cap:
                t = torch.tanh(z / self.cap)
                slope = 1 - t * t
                z = t * self.cap
                dz = [slope * D for D in Ds]
                d2 = -2.0 / self.cap * t * slope
            z.sub_(torch.logsumexp(z, dim=-1, keepdim=True))  # log-probabilities, in place
            f += float(z.gather(1, y).double().sum())
            p = z.exp_()  # (b, V)
            weighted = [p * a for a in dz]  # p · z'_i, each used for the mean and the covariances
            mean = [w.sum(-1) for w in weighted]  # E_p[z'_i], (b,)
            for a in range(k):
                g[a] += float((dz[a].gather(1, y)[:, 0] - mean[a]).double().sum())
                for b in range(a, k):
                    # −Cov_p(z'_a, z'_b) (a product and a sum: einsum's "bv,bv->b" took 13× as long on a CPU)
                    h = -((weighted[a] * dz[b]).sum(-1) - mean[a] * mean[b])
                    if d2 is not None:
                        second = d2 * Ds[a] * Ds[b]
                        h = h + second.gather(1, y)[:, 0] - (p * second).sum(-1)
                    H[a, b] = H[b, a] = H[a, b] + float(h.double().sum())
        self.evaluations += 1
        out = (f / n, g / n, H / n)
        self._memo = (key, out)
        self._values[key] = out[0]
        return out


def _raw_at(L0: torch.Tensor, Ds: list[torch.Tensor], eps: Sequence[float]) -> torch.Tensor:
    """The raw logits of a piece at ``eps``, ``L0 + Σ ε_i D_i`` (the raw head is linear): a new tensor."""
    z = L0.clone()
    for e, D in zip(eps, Ds, strict=True):
        if e:
            z.add_(D, alpha=float(e))
    return z


def _grid_for(switch: Switch, points: int) -> list[float]:
    lo, hi = switch.eps_range
    return [round(float(x), 6) for x in np.linspace(lo, hi, points)]  # −3.2, not linspace's −3.1999999999999993


def _curves(surface: _Surface, switches: Sequence[Switch], grid: Sequence[float] | None, points: int) -> list[tuple[list[float], list[float]]]:
    """Each switch's curve over its grid, the others at 0: every point of every curve in one pass (:meth:`_Surface.values`)."""
    grids = [list(grid) if grid is not None else _grid_for(s, points) for s in switches]
    at = [_on_axis(i, x, len(switches)) for i, xs in enumerate(grids) for x in xs]
    ys = iter(surface.values(at))
    return [(xs, [next(ys) for _ in xs]) for xs in grids]


def _maximise(surface: _Surface, bounds: list[tuple[float, float]], fixed: dict[int, float] | None = None,
              start: Sequence[float] | None = None) -> np.ndarray:
    """Maximise over the free coordinates within ``bounds`` (others held at ``fixed``), with exact derivatives, from
    ``start`` (default 0; each pass over a long text's pieces costs, so a start near the top saves several)."""
    fixed = fixed or {}
    size = len(surface.Ws)
    free = [i for i in range(size) if i not in fixed]
    base = np.zeros(size)
    for i, v in fixed.items():
        base[i] = v

    def at(x: np.ndarray) -> np.ndarray:
        eps = base.copy()
        eps[free] = x
        return eps

    def derivatives(x: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        f, g, H = surface.derivatives(at(x))
        return f, g[free], H[np.ix_(free, free)]

    lo, hi = (np.array([bounds[i][j] for i in free], dtype=np.float64) for j in (0, 1))
    x0 = np.zeros(size) if start is None else np.asarray(start, dtype=np.float64)
    return at(_projected_newton(derivatives, lambda x: surface.value(at(x).tolist()), lo, hi, x0[free]))


NEWTON_ITERATIONS = 50
# ε0 units: a step below this ends the search. best_eps is reported to 4 places, and the gradient's float32 rounding
# (~1e-7 nats per token) moves the maximum by ~1e-5 on a short text's flattest surfaces
NEWTON_TOL = 1e-5
NOISE = 1e-6  # nats per token: below this predicted gain a value comparison is rounding (float32 sums)
BOUND_SHARE = 1e-3  # of the box's width: how near its bound a coordinate pushed outward can be held there


def _projected_newton(derivatives: Callable[[np.ndarray], tuple[float, np.ndarray, np.ndarray]],
                      value: Callable[[np.ndarray], float], lo: np.ndarray, hi: np.ndarray,
                      start: np.ndarray | None = None) -> np.ndarray:
    """The maximiser of a smooth function in the box ``[lo, hi]``, from ``start`` (0) clipped into it: Newton steps on the
    coordinates not held at a bound, projected back into the box, with an Armijo backtrack on ``value`` (Bertsekas'
    projected Newton method: a coordinate the slope pushes outward within ε of its bound is held there, ε shrinking
    with the projected gradient).

    The meter's surface is concave (without soft-capping), so each step is a Newton step and the search ends in
    a handful of evaluations (scipy's trust-constr, before, took 20–30); where soft-capping makes the
    Hessian indefinite, it is shifted until the step goes uphill."""
    x = np.clip(np.zeros(len(lo)) if start is None else start, lo, hi)
    f, g, H = derivatives(x)
    for _ in range(NEWTON_ITERATIONS):
        if not (np.isfinite(g).all() and np.isfinite(H).all()):  # a surface that is not finite here: stop where it is
            return x
        near = min(BOUND_SHARE * float((hi - lo).max()), float(np.abs(np.clip(x + g, lo, hi) - x).max()))
        held = ((x <= lo + near) & (g < 0)) | ((x >= hi - near) & (g > 0))
        step = np.where(held, np.where(g < 0, lo, hi) - x, 0.0)  # a held coordinate goes onto its bound
        if (~held).any():
            step[~held] = _ascent(g[~held], H[np.ix_(~held, ~held)])
        new = np.clip(x + step, lo, hi)
        if np.abs(new - x).max() < NEWTON_TOL:  # converged: the step is below what best_eps reports
            return np.where(held, new, x)  # (held ones exactly on their bound)
        gain = float(g @ (new - x))
        f_new, g_new, H_new = derivatives(new) if gain > 0 else (f, g, H)
        # a step that is not uphill at first order (the box cut it), or too long: backtrack along the projected path.
        # Below NOISE the values' rounding outweighs the step's gain, and the Newton step is trusted
        if gain <= 0 or (gain > NOISE and f_new < f + 1e-4 * gain):
            new = _backtrack(value, x, f, g, step, lo, hi)
            if new is None:  # no step goes uphill: x is the maximum to the surface's rounding
                return x
            f_new, g_new, H_new = derivatives(new)
        x, f, g, H = new, f_new, g_new, H_new
    return x


def _backtrack(value: Callable[[np.ndarray], float], x: np.ndarray, f: float, g: np.ndarray, step: np.ndarray,
               lo: np.ndarray, hi: np.ndarray) -> np.ndarray | None:
    """The first of ``x + t·step`` (projected into the box) for t = ½, ¼, … that rises enough (Armijo); None if none
    does before t = 1/1024."""
    t = 0.5
    while t >= 1e-3:
        new = np.clip(x + t * step, lo, hi)
        if value(new) >= f + 1e-4 * float(g @ (new - x)):
            return new
        t *= 0.5
    return None


def _ascent(g: np.ndarray, H: np.ndarray) -> np.ndarray:
    """The Newton step ``−H⁻¹ g`` uphill; where ``−H`` is not positive definite, ``−H + μ I`` with ``μ`` within a
    factor of two of the least that makes it so (a concave surface's step is the plain Newton step)."""
    A = -H
    shift = 0.0
    scale = max(float(np.abs(A).max()), 1e-12)
    for _ in range(60):
        try:
            L = np.linalg.cholesky(A + shift * np.eye(len(g)))
        except np.linalg.LinAlgError:
            shift = max(2 * shift, 1e-10 * scale)
            continue
        return scipy.linalg.cho_solve((L, True), g)
    return g / scale  # (not reached for finite derivatives: a shift of ~1e8 of the largest entry suffices)


def _scored_states(lm: LanguageModel, text: str | EncodedText) -> tuple:
    """(encoded text, head inputs, targets) of the text's scored tokens, from one body pass (none if already encoded)."""
    enc = text if isinstance(text, EncodedText) else encode_text(lm, text)
    enc.check_scored("the style meter")
    keep = enc.scored.to(enc.hidden.device)
    return enc, enc.hidden[keep], torch.tensor(enc.ids, device=enc.hidden.device)[keep]


def _checked_switches(lm: LanguageModel, switches: Switch | Sequence[Switch]) -> list[Switch]:
    if isinstance(switches, Switch | str | os.PathLike):
        switches = [switches]
    switches = list(switches)
    if not switches:
        raise ValueError("give at least one switch to measure against")
    if len(switches) > MAX_SWITCHES:
        raise ValueError(f"at most {MAX_SWITCHES} switches at once; got {len(switches)}")
    for s in switches:
        check_switch(s, lm)
    if len({s.digest for s in switches}) < len(switches):  # their joint best ε would not be defined
        raise ValueError("the same switch is given twice; give each switch once")
    return switches


def _checked_grid(grid: Sequence[float] | None, points: object, bound: object) -> list[float] | None:
    if grid is not None:
        grid = [float(x) for x in grid]
        if not grid or len(grid) > MAX_GRID or not all(math.isfinite(x) and abs(x) <= 1000 for x in grid):
            raise ValueError(f"grid must hold 1 to {MAX_GRID} finite eps values with |eps| ≤ 1000")
    if not is_whole(points) or not 2 <= points <= MAX_GRID:
        raise ValueError(f"points must be an integer from 2 to {MAX_GRID}; got {points!r}")
    if bound is not None and not (is_number(bound) and 0 < bound <= 1000):
        raise ValueError(f"bound must be a number in (0, 1000]; got {bound!r}")
    return grid


def measure(
    lm: LanguageModel,
    switches: Switch | Sequence[Switch],
    text: str | EncodedText,
    *,
    grid: Sequence[float] | None = None,
    points: int = DEFAULT_POINTS,
    bound: float | None = None,
) -> Measurement:
    """Log-likelihood of ``text`` as a function of each switch's ε, and the ε that explains it best.

    The :class:`Measurement` holds one :class:`MeterRow` per switch in ``switches``:

    - ``grid``, ``loglik``: the mean log-likelihood per token (nats) over a grid of
      ε values with the other switches at 0 (default grid: ``points`` values over
      the switch's recommended range, or ``grid``);
    - ``best_eps``: the jointly best ε of every switch (within ±``bound``, default:
      each switch's recommended range), and ``best_eps_alone`` per switch;
    - ``label``: the switch's positive or negative label by the sign of its best ε;
      ``evidence_nats``: how much more likely the text is at the switch's best ε
      than at 0 (a log-likelihood ratio; below ~1 nat the sign means little).

    ``text`` may be an :class:`~lmswitch.core.hidden.EncodedText` from
    :func:`~lmswitch.core.hidden.encode_text`: then no body pass is run (read one text
    with several lenses at the cost of one).

    >>> r = measure(lm, [sentiment], "What a lovely, kind and generous host she was.")  # doctest: +SKIP
    >>> r.switches[0].best_eps > 0                                                        # doctest: +SKIP
    True
    """
    switches = _checked_switches(lm, switches)
    grid = _checked_grid(grid, points, bound)
    enc, hidden, targets = _scored_states(lm, text)
    return _measured(_Surface(lm, hidden, targets, switches), switches, enc, grid, points, bound)


def reading(lm: LanguageModel, switch: Switch, text: EncodedText, changes_at: float) -> tuple[MeterRow, np.ndarray]:
    """One switch's :func:`measure` row for ``text`` (no curve: its grid is ε 0 alone) and each token's log-likelihood
    change at ε ``changes_at`` (0 for an unscored token): what :func:`~lmswitch.lenses.spans.highlight` reads, from
    the same cached logits instead of two more passes of the head over the vocabulary."""
    switches = _checked_switches(lm, switch)
    enc, hidden, targets = _scored_states(lm, text)
    surface = _Surface(lm, hidden, targets, switches)
    row = _measured(surface, switches, enc, [0.0], 2, None).switches[0]
    changes = np.zeros(enc.n_tokens)
    changes[enc.scored.numpy()] = (surface.token_logliks([changes_at]) - surface.token_logliks([0.0])).cpu().numpy()
    return row, changes


def _on_axis(i: int, x: float, k: int) -> list[float]:
    return [x if j == i else 0.0 for j in range(k)]


def _measured(surface: _Surface, switches: list[Switch], enc: EncodedText, grid: list[float] | None, points: int,
              bound: float | None) -> Measurement:
    """:func:`measure` on the surface of ``enc``'s scored tokens."""
    targets = surface.targets
    base = surface.value([0.0] * len(switches))
    curves = _curves(surface, switches, grid, points)
    bounds = [(-bound, bound) if bound else (float(s.eps_range[0]), float(s.eps_range[1])) for s in switches]
    k = len(switches)
    # each search starts from its curve's best point (a concave surface: the top is near), the joint one from those
    tops = [xs[int(np.argmax(ys))] for xs, ys in curves]
    alone = [float(_maximise(surface, bounds, {j: 0.0 for j in range(k) if j != i}, _on_axis(i, tops[i], k))[i]) for i in range(k)]
    best = _maximise(surface, bounds, start=alone) if k > 1 else np.array(alone)
    best_value = surface.value(best.tolist())

    rows = []
    for i, s in enumerate(switches):
        b = float(best[i])
        lo, hi = bounds[i]
        rows.append(MeterRow(
            name=s.name,
            positive_label=s.positive_label,
            negative_label=s.negative_label,
            grid=curves[i][0],
            loglik=curves[i][1],
            best_eps=round(b, 4),
            best_eps_alone=round(alone[i], 4),
            evidence_nats=round(len(targets) * (surface.value(_on_axis(i, alone[i], k)) - base), 4),
            at_bound=bool(min(abs(b - lo), abs(b - hi)) < 1e-3 * max(1.0, hi - lo)),
            label=s.positive_label if b > 0 else s.negative_label if b < 0 else None,
        ))
    return Measurement(tokens=enc.n_tokens, scored_tokens=len(targets), windows=enc.windows, base_loglik=base,
                       best_loglik=best_value, gain=best_value - base, switches=rows)


def style_slope(lm: LanguageModel, switch: Switch, text: str) -> float:
    """d/dε of the mean log-likelihood per token of ``text`` at ε = 0: its sign is the cheapest zero-shot style label.

    Positive: the text is more likely with the switch pushed toward its positive
    label. One forward pass and one exact derivative, no curve.
    """
    if not isinstance(switch, Switch):
        raise TypeError(f"expected a Switch; got {type(switch).__name__}")
    switch.check_model(lm)
    _, hidden, targets = _scored_states(lm, text)
    surface = _Surface(lm, hidden, targets, [switch])
    return float(surface.derivatives(np.zeros(1))[1][0])

