"""Style meter: which ε of each switch explains a text best.

The log-likelihood of a text under ``c → c + Σ_i ε_i ε0_i W_i c`` is concave in the
vector ε (the raw logits are affine in ε and log-softmax is concave), so its
maximiser is found reliably by a few L-BFGS-B steps on cached hidden states. A
text written in a switch's style prefers positive ε: the sign is a zero-shot
classifier, and the curve shows how sure it is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import scipy.optimize
import torch

from .models import LanguageModel
from .scoring import HEAD_CHUNK, encode_text, raw_logits
from .switch import Switch

MAX_SWITCHES = 8
MAX_GRID = 201
CACHE_FLOATS = 96 * 1024**2  # cache base and per-switch logit changes up to ~400 MB, else recompute per evaluation


class _Surface:
    """Mean log-likelihood per scored token as a function of the ε vector (ε0 units), with its gradient."""

    def __init__(self, lm: LanguageModel, hidden: torch.Tensor, targets: torch.Tensor, switches: Sequence[Switch]) -> None:
        self.lm, self.hidden, self.targets = lm, hidden, targets.to(hidden.device)
        self.Ws = [s.W.to(hidden.device) * s.eps0 for s in switches]
        self.cap = getattr(lm.model.config.get_text_config(), "final_logit_softcapping", None)
        n, V = len(targets), lm.vocab_size
        self.cached: list[tuple[torch.Tensor, list[torch.Tensor]]] | None = None
        if n * V * (1 + len(switches)) <= CACHE_FLOATS:
            self.cached = [self._chunk(s) for s in range(0, n, HEAD_CHUNK)]

    def _chunk(self, s: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        h = self.hidden[s : s + HEAD_CHUNK]
        # the raw head is linear, so raw logits at ε are L0 + Σ ε_i D_i exactly
        return raw_logits(self.lm, h), [raw_logits(self.lm, h @ W.T) - self._bias() for W in self.Ws]

    def _bias(self) -> torch.Tensor | float:
        bias = getattr(self.lm.head, "bias", None)
        return 0.0 if bias is None else bias.float()

    def __call__(self, eps: np.ndarray, grad: bool = True) -> tuple[float, np.ndarray]:
        e = torch.tensor(eps, dtype=torch.float32, device=self.hidden.device, requires_grad=grad)
        total = torch.zeros((), dtype=torch.float64, device=self.hidden.device)
        n = len(self.targets)
        for j, s in enumerate(range(0, n, HEAD_CHUNK)):
            L0, Ds = self.cached[j] if self.cached is not None else self._chunk(s)
            logits = L0 + sum(e[i] * D for i, D in enumerate(Ds))
            if self.cap:
                logits = torch.tanh(logits / self.cap) * self.cap
            y = self.targets[s : s + HEAD_CHUNK, None]
            total = total + (logits.gather(1, y)[:, 0] - torch.logsumexp(logits, dim=-1)).double().sum()
        value = total / n
        if not grad:
            return float(value), np.zeros(len(eps))
        value.backward()
        return float(value.detach()), e.grad.double().cpu().numpy()


def _grid_for(switch: Switch, points: int) -> list[float]:
    lo, hi = switch.eps_range
    return [float(x) for x in np.linspace(lo, hi, points)]


@torch.no_grad()
def _curves(surface: _Surface, switches: Sequence[Switch], grid: Sequence[float] | None, points: int) -> list[tuple[list[float], list[float]]]:
    out = []
    for i, s in enumerate(switches):
        xs = list(grid) if grid is not None else _grid_for(s, points)
        ys = []
        for x in xs:
            eps = np.zeros(len(switches))
            eps[i] = x
            ys.append(surface(eps, grad=False)[0])
        out.append((xs, ys))
    return out


def _maximise(surface: _Surface, bounds: list[tuple[float, float]], start: np.ndarray | None = None) -> np.ndarray:
    x0 = np.zeros(len(bounds)) if start is None else start

    def negative(eps: np.ndarray) -> tuple[float, np.ndarray]:
        with torch.enable_grad():
            value, grad = surface(eps)
        return -value, -grad

    result = scipy.optimize.minimize(negative, x0, jac=True, method="L-BFGS-B", bounds=bounds, options={"maxiter": 100})
    return np.asarray(result.x, dtype=np.float64)


def measure(
    lm: LanguageModel,
    switches: Switch | Sequence[Switch],
    text: str,
    *,
    grid: Sequence[float] | None = None,
    points: int = 21,
    bound: float | None = None,
) -> dict:
    """Log-likelihood of ``text`` as a function of each switch's ε, and the ε that explains it best.

    - ``curves``: per switch, the mean log-likelihood per token (nats) over a grid of
      ε values with the other switches at 0 (default grid: ``points`` values over
      the switch's recommended range, or ``grid``);
    - ``best_eps``: the jointly best ε of every switch (L-BFGS-B within ±``bound``,
      default: each switch's recommended range), and ``best_eps_alone`` per switch;
    - ``label``: the switch's positive or negative label by the sign of its best ε.

    >>> r = measure(lm, [sentiment], "What a lovely, kind and generous host she was.")  # doctest: +SKIP
    >>> r["switches"][0]["best_eps"] > 0                                                  # doctest: +SKIP
    True
    """
    if isinstance(switches, Switch):
        switches = [switches]
    switches = list(switches)
    if not switches:
        raise ValueError("give at least one switch to measure against")
    if len(switches) > MAX_SWITCHES:
        raise ValueError(f"at most {MAX_SWITCHES} switches at once; got {len(switches)}")
    for s in switches:
        if not isinstance(s, Switch):
            raise TypeError(f"expected Switch objects; got {type(s).__name__}")
        s.check_model(lm)
    if grid is not None:
        grid = [float(x) for x in grid]
        if not grid or len(grid) > MAX_GRID or not all(math.isfinite(x) and abs(x) <= 1000 for x in grid):
            raise ValueError(f"grid must hold 1 to {MAX_GRID} finite eps values with |eps| ≤ 1000")
    if not isinstance(points, int) or not 2 <= points <= MAX_GRID:
        raise ValueError(f"points must be an integer from 2 to {MAX_GRID}; got {points!r}")
    if bound is not None and not (isinstance(bound, (int, float)) and math.isfinite(bound) and 0 < bound <= 1000):
        raise ValueError(f"bound must be a number in (0, 1000]; got {bound!r}")

    enc = encode_text(lm, text)
    keep = enc.scored.to(enc.hidden.device)
    if int(keep.sum()) < 1:
        raise ValueError("the text is a single token; the style meter needs at least two tokens")
    hidden, targets = enc.hidden[keep], torch.tensor(enc.ids, device=enc.hidden.device)[keep]
    surface = _Surface(lm, hidden, targets, switches)
    base = surface(np.zeros(len(switches)), grad=False)[0]
    curves = _curves(surface, switches, grid, points)
    bounds = [(-bound, bound) if bound else (float(s.eps_range[0]), float(s.eps_range[1])) for s in switches]
    alone = []
    for i in range(len(switches)):
        alone.append(float(_maximise(_Projected(surface, i, len(switches)), [bounds[i]])[0]))
    best = _maximise(surface, bounds, start=np.array(alone)) if len(switches) > 1 else np.array(alone)
    best_value = surface(best, grad=False)[0]

    rows = []
    for i, s in enumerate(switches):
        b = float(best[i])
        lo, hi = bounds[i]
        rows.append({
            "name": s.name,
            "positive_label": s.positive_label,
            "negative_label": s.negative_label,
            "grid": curves[i][0],
            "loglik": curves[i][1],
            "best_eps": round(b, 4),
            "best_eps_alone": round(alone[i], 4),
            "at_bound": bool(min(abs(b - lo), abs(b - hi)) < 1e-3 * max(1.0, hi - lo)),
            "label": s.positive_label if b > 0 else s.negative_label if b < 0 else None,
        })
    return {
        "tokens": enc.n_tokens,
        "scored_tokens": len(targets),
        "windows": enc.windows,
        "base_loglik": base,
        "best_loglik": best_value,
        "gain": best_value - base,
        "switches": rows,
    }


class _Projected:
    """One coordinate of a surface, the others held at 0."""

    def __init__(self, surface: _Surface, index: int, size: int) -> None:
        self.surface, self.index, self.size = surface, index, size

    def __call__(self, eps: np.ndarray, grad: bool = True) -> tuple[float, np.ndarray]:
        full = np.zeros(self.size)
        full[self.index] = eps[0]
        value, g = self.surface(full, grad)
        return value, g[self.index : self.index + 1]
