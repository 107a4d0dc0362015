"""Apply switches to a model, temporarily and per thread.

One forward pre-hook per output head reads the steering of the *current context*
(a ``ContextVar``), so several threads can generate with different settings on one
shared model without seeing each other's steering. The hook is installed while at
least one ``steer`` block is open on that head and removed when the last one
closes, also on exceptions.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import torch

from lmswitch.core.adaptive import kl_scale
from lmswitch.core.budget import Budget
from lmswitch.core.checks import is_number
from lmswitch.core.guard import RepeatGuard
from lmswitch.core.models import LanguageModel, check_model
from lmswitch.core.switch import MAX_EPS_RANGE, Switch, check_switch

Setting = Sequence[tuple[Switch, float]]  # (switch, eps in units of that switch's eps0)

MAX_ABS_EPS = MAX_EPS_RANGE  # in eps0 units; far beyond any useful value (the paper uses ±5)


def as_setting(switches: Setting | None) -> list:
    """The (switch, ε) pairs asked for, as a list (None: none), refusing what is not such a list with how to write one."""
    if switches is None:
        return []
    what = "switches must be a list of (switch, ε) pairs, e.g. [(sentiment, 4)]"
    if isinstance(switches, Switch):
        raise ValueError(f"{what}; got Switch '{switches.name}' alone: give it with its ε, [({switches.name}, 4)]")
    if isinstance(switches, tuple) and len(switches) == 2 and isinstance(switches[0], Switch):
        raise ValueError(f"{what}; got one pair: put it in a list, [({switches[0].name}, {switches[1]!r})]")
    if isinstance(switches, str | bytes):
        raise ValueError(f"{what}; got the text {switches[:40]!r}: load each switch first, [(ls.load_switch('sentiment'), 4)]")
    if not isinstance(switches, Iterable):
        raise ValueError(f"{what}; got {type(switches).__name__}")
    return list(switches)


def check_setting(lm: LanguageModel, setting: Setting) -> list[tuple[Switch, float]]:
    """``setting`` as a list (:func:`as_setting`) once it is of (Switch for this model, finite ε in range) pairs, each
    switch once; a clear error otherwise. Use what it returns: a setting given as a generator is read here."""
    check_model(lm)
    setting, seen = as_setting(setting), {}
    for item in setting:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise TypeError(f"switches must be a list of (switch, ε) pairs, e.g. [(sentiment, 4)]; one of them is "
                            f"{type(item).__name__} {str(item)[:40]!r}")
        switch, eps = check_switch(item[0], lm), item[1]
        if not is_number(eps):
            raise ValueError(f"ε for '{switch.name}' must be a finite number; got {eps!r}")
        if abs(eps) > MAX_ABS_EPS:
            fluent = f"; its fluent range is {switch.card.fluent_text}" if switch.card.fluent_text else ""
            raise ValueError(f"ε {eps:g} for '{switch.name}' is out of range: |ε| ≤ {MAX_ABS_EPS:g} (ε counts steps of "
                             f"ε0 = {switch.eps0:g}){fluent}")
        if id(switch) in seen:  # (its two ε would add up unseen; a sweep's others holding the swept switch)
            raise ValueError(f"switch '{switch.name}' is given twice (ε {seen[id(switch)]:g} and {eps:g}): give it once, "
                             f"at ε {seen[id(switch)] + eps:g} for their sum")
        seen[id(switch)] = eps
    return setting


def beyond_fluent(setting: Setting) -> dict[str, str]:
    """A note per switch whose ε lies outside its card's fluent range (:meth:`~lmswitch.core.card.Card.beyond_fluent`),
    for a response to carry (the OpenAI API's and ``/generate``'s ``beyond_fluent``); empty when every ε is within."""
    return {s.name: f"ε {e:+g} is beyond its fluent range {s.card.fluent_text}: expect text that reads less well"
            for s, e in setting if s.card.beyond_fluent(e)}


def beyond_fluent_field(setting: Setting) -> dict[str, dict[str, str]]:
    """A response's ``beyond_fluent`` entry (:func:`beyond_fluent`'s notes; nothing when every ε is within range), which
    the OpenAI API's ``lmswitch`` object and ``/generate``'s answer carry alike."""
    notes = beyond_fluent(setting)
    return {"beyond_fluent": notes} if notes else {}


def steers(setting: Setting) -> bool:
    """Whether ``setting`` changes the model: some switch at an ε other than 0."""
    return any(e != 0 for _, e in setting)


def steering_matrix(setting: Setting) -> torch.Tensor | None:
    """``Σ_i eps_i · eps0_i · W_i`` as one (d, d) float32 matrix, or ``None`` when every eps is 0."""
    active = [(s, float(e)) for s, e in setting if e != 0]
    if not active:
        return None
    M = torch.zeros_like(active[0][0].W)
    for switch, eps in active:
        M.add_(switch.W, alpha=eps * switch.eps0)
    if not torch.isfinite(M).all():  # (a switch whose W was set to NaN after it was made: it would write nothing)
        bad = [s.name for s, _ in active if not torch.isfinite(s.W).all()]
        raise ValueError(f"switch '{bad[0]}' has NaN or infinite entries (its matrix was changed after it was made): load "
                         "or train it again" if bad else "the steering matrix overflows (ε × W past float32's range): use a "
                         "smaller ε")
    return M


class RowSteering:
    """What steers each row of a batch, formed once and kept across forward passes (a running decode's steps).

    Either one (d, d) matrix for every row (``groups`` None), or each distinct setting's
    matrix once, (U, d, d), with ``groups[b]`` the index of row ``b``'s (-1 = unsteered),
    so a batch of 128 rows over a few settings costs a few matrices, not 128, and each
    group is one ordinary matmul. ``matrix`` None: nothing steers. The matrices are cast
    once to each device and dtype they are used in.
    """

    def __init__(self, matrix: torch.Tensor | None, groups: torch.Tensor | None = None) -> None:
        self.matrix = matrix
        self.groups = groups
        self._cast: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}

    @classmethod
    def one(cls, setting: Setting) -> RowSteering:
        """Every row steered by ``setting`` (:func:`steering_matrix`)."""
        return cls(steering_matrix(setting))

    @classmethod
    def of(cls, settings: Sequence[Setting]) -> RowSteering:
        """Row ``b`` steered by ``settings[b]``: one matrix when every row has the same setting (:meth:`one`), else
        :meth:`rows`."""
        same = all(list(x) == list(settings[0]) for x in settings)
        return cls.one(settings[0]) if same else cls.rows(settings)

    @classmethod
    def rows(cls, settings: Sequence[Setting]) -> RowSteering:
        """Row ``b`` steered by ``settings[b]``."""
        distinct: dict[tuple, int] = {}
        matrices: list[torch.Tensor] = []
        groups = []
        for setting in settings:
            key = tuple((id(s), float(e)) for s, e in setting if e != 0)
            if not key:
                groups.append(-1)
                continue
            if key not in distinct:
                distinct[key] = len(matrices)
                matrices.append(steering_matrix(setting))
            groups.append(distinct[key])
        return cls(torch.stack(matrices), torch.tensor(groups)) if matrices else cls(None)

    def on(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """The matrix (or matrices) in ``device`` and ``dtype``."""
        key = (device, dtype)
        M = self._cast.get(key)
        if M is None:
            M = self._cast[key] = self.matrix.to(device, dtype)
        return M


class _Steer:
    """One ``steer`` block: the rows' matrices (:class:`RowSteering`), and optionally an adaptive cap, a budget or a
    repeat guard."""

    def __init__(self, rows: RowSteering, cap: tuple[LanguageModel, float] | None = None,
                 budget: tuple[LanguageModel, Budget] | None = None, guard: tuple[LanguageModel, RepeatGuard] | None = None) -> None:
        self.rows = rows
        self.cap = cap  # (model, KL budget in nats per token): adaptive strength, see lmswitch.core.adaptive
        self.budget = budget  # (model, nats left per row): a steering budget per generation, see lmswitch.core.budget
        self.guard = guard  # (model, recent tokens per row): what steering raised of them, see lmswitch.core.guard

    def _step(self, c: torch.Tensor, M: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
        """``c + M c``; with a KL cap ``c + α M c`` with the per-position ``α`` that keeps the cap; ``scale`` (n,) 0 or
        1 per row: a row whose generation budget is spent is not steered (1 leaves the product exactly as it was)."""
        delta = c @ M.T  # (n, T, d) @ (d, d)
        if self.cap is not None:
            lm, budget = self.cap
            delta = delta * kl_scale(lm, c, delta, budget).to(delta.dtype)
        if scale is not None:
            delta = delta * scale.to(delta.device, delta.dtype).reshape(-1, *[1] * (delta.ndim - 1))
        return c + delta

    def apply(self, c: torch.Tensor) -> torch.Tensor:
        out = self._steered(c)
        if self.guard is not None:  # the change steering made at each row's last position, as the head will see it
            lm, guard = self.guard
            guard.observe(lm, *((c[:, -1], out[:, -1]) if c.ndim == 3 else (c, out)))
        return out

    def _steered(self, c: torch.Tensor) -> torch.Tensor:
        M = self.rows.on(c.device, c.dtype)
        scale = None
        if self.budget is not None:
            lm, budget = self.budget
            if len(budget) != c.shape[0]:
                raise ValueError(f"the steering budget has {len(budget)} rows but the batch has {c.shape[0]}")
            budget.observe(lm, c[:, -1] if c.ndim == 3 else c)
            scale = budget.scale()
        if M.ndim == 2:
            return self._step(c, M, scale)
        groups = self.rows.groups
        rows = c.shape[0]
        if rows != len(groups):
            if rows % len(groups):
                raise ValueError(f"per-row steering was given for {len(groups)} rows but the batch has {rows}")
            groups = groups.repeat_interleave(rows // len(groups))
        out = c.clone()
        for u in range(M.shape[0]):
            idx = (groups == u).nonzero().squeeze(1).to(c.device)
            if idx.numel():
                out[idx] = self._step(c[idx], M[u], scale[idx.cpu()] if scale is not None else None)
        return out


_ACTIVE: ContextVar[dict[int, _Steer] | None] = ContextVar("lmswitch_active_steering", default=None)
_LOCK = threading.Lock()
_INSTALLED: dict[int, list] = {}  # id(head) -> [hook handle, number of open steer blocks]


def _dispatch(module: torch.nn.Module, args: tuple) -> tuple | None:
    active = _ACTIVE.get()
    steer = active.get(id(module)) if active else None
    if steer is None:
        return None
    return (steer.apply(args[0]), *args[1:])


@contextmanager
def _activate(lm: LanguageModel, steer: _Steer | None) -> Iterator[None]:
    head = lm.head
    key = id(head)
    current = _ACTIVE.get() or {}
    token = _ACTIVE.set({**current, key: steer} if steer is not None else {k: v for k, v in current.items() if k != key})
    with _LOCK:
        entry = _INSTALLED.get(key)
        if entry is None:
            entry = _INSTALLED[key] = [head.register_forward_pre_hook(_dispatch), 0]
        entry[1] += 1
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        with _LOCK:
            entry[1] -= 1
            if entry[1] == 0:
                entry[0].remove()
                del _INSTALLED[key]


def _cap(lm: LanguageModel, kl_budget: float | None) -> tuple[LanguageModel, float] | None:
    if kl_budget is None:
        return None
    if not (is_number(kl_budget) and kl_budget > 0):
        raise ValueError(f"kl_budget must be a positive number of nats per token (or None for no cap); got {kl_budget!r}")
    return lm, float(kl_budget)


def _budget(lm: LanguageModel, budget: Budget | None) -> tuple[LanguageModel, Budget] | None:
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"budget must be a lmswitch.core.budget.Budget (or None); got {type(budget).__name__}")
    return (lm, budget) if budget is not None else None


@contextmanager
def steer(lm: LanguageModel, setting: Setting, *, kl_budget: float | None = None, budget: Budget | None = None,
          guard: RepeatGuard | None = None) -> Iterator[None]:
    """Steer ``lm`` inside the block: ``c → c + (Σ eps_i · eps0 · W_i) c`` on the head input.

    The sum is formed once. With every eps 0 the model is left exactly as it is.
    Only the current thread (context) is affected. ``kl_budget`` (nats per token)
    turns on adaptive strength: at each position the steering term is scaled down
    just enough that ``KL(steered ‖ unsteered) ≤ kl_budget``
    (:mod:`lmswitch.core.adaptive`). ``budget`` (one row per batch row) steers each row
    only while its generation budget lasts (:mod:`lmswitch.core.budget`); the sampler spends it. ``guard`` (one row per
    batch row) records how much steering raised each row's recent tokens (:mod:`lmswitch.core.guard`); the sampler
    takes it back.

    >>> with steer(lm, [(sentiment, 5.0), (detox, 3.0)]):   # doctest: +SKIP
    ...     logits = lm.model(ids).logits
    """
    setting = check_setting(lm, setting)
    with steering(lm, RowSteering.one(setting), kl_budget=kl_budget, budget=budget, guard=guard):
        yield


@contextmanager
def steer_rows(lm: LanguageModel, settings: Sequence[Setting], *, kl_budget: float | None = None,
               budget: Budget | None = None, guard: RepeatGuard | None = None) -> Iterator[None]:
    """Per-row steering: row ``b`` of every batch uses ``settings[b]``.

    A batch whose size is a multiple of ``len(settings)`` (several samples per
    row, grouped consecutively) repeats each setting for its group (a ``guard`` still has one row per batch row). Rows that all
    share one setting are steered as :func:`steer` does (:meth:`RowSteering.of`).
    """
    if not settings:
        raise ValueError("steer_rows needs at least one row setting")
    settings = [check_setting(lm, setting) for setting in settings]
    with steering(lm, RowSteering.of(settings), kl_budget=kl_budget, budget=budget, guard=guard):
        yield


@contextmanager
def steering(lm: LanguageModel, rows: RowSteering, *, kl_budget: float | None = None, budget: Budget | None = None,
             guard: RepeatGuard | None = None) -> Iterator[None]:
    """Steer ``lm`` inside the block by ``rows``, formed beforehand (settings checked): :func:`steer` and
    :func:`steer_rows` without forming the matrices again, for a caller that steers the same rows pass after pass."""
    cap, spend = _cap(lm, kl_budget), _budget(lm, budget)
    if guard is not None and not isinstance(guard, RepeatGuard):
        raise TypeError(f"guard must be a lmswitch.core.guard.RepeatGuard (or None); got {type(guard).__name__}")
    watch = (lm, guard) if guard is not None else None
    with _activate(lm, _Steer(rows, cap=cap, budget=spend, guard=watch) if rows.matrix is not None else None):
        yield


def active_hook_count(lm: LanguageModel) -> int:
    """Number of forward pre-hooks on the head (0 when nothing steers it); for tests and debugging."""
    return len(lm.head._forward_pre_hooks)
