"""The repeat guard: steering never raises the logit of a word the text has just written.

Word loops ("friendly friendly friendly …") have one mechanism: a switch adds a nearly
fixed bonus ``Δ_v = e_vᵀ (ε M c)`` to a few words, and once such a word is written the
same bonus pushes it again at the next position. The guard removes, at each decoding
step, the positive part of that bonus from the tokens among each row's last ``window``
tokens (its prompt's included): for those tokens the logit is ``L0_v + min(Δ_v, 0)``, the
lower of the steered and the unsteered one (of the capped logits where the family soft-caps
them), and the rest of the steered distribution is unchanged. A word the switch promotes can still
come back later in the text, and the unsteered model's own repeats are left alone: a
row steered by nothing (ε = 0, an unsteered twin) has ``Δ = 0`` and keeps its logits to
the bit.

The window was chosen on the dev prompts and checked on test (EVALUATION.md, "The repeat
guard, on by default"): at the ends of the shipped switches' sliders it takes the looping
samples to the unsteered model's own rate (12 of 1,500 → 1 on test) without moving the
style or the perplexity beyond the noise between seeds.

The steering hook calls :meth:`RepeatGuard.observe` with each row's last head input
before and after steering; the sampler calls :meth:`RepeatGuard.apply` on the logits
before it draws and :meth:`RepeatGuard.push` with the drawn tokens.

>>> guard = RepeatGuard.of_rows([[12, 7, 7]], window=4)      # doctest: +SKIP
>>> with steer(lm, [(sentiment, 4)], guard=guard): ...       # the hook fills guard.lift   # doctest: +SKIP
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from lmswitch.core.options import MAX_REPEAT_GUARD as MAX_REPEAT_GUARD  # defined there, torch-free, for the CLI
from lmswitch.core.options import REPEAT_GUARD as REPEAT_GUARD

if TYPE_CHECKING:
    from lmswitch.core.models import LanguageModel


class RepeatGuard:
    """Each row's last ``window`` tokens and, after a steered forward pass, how much steering raised their logits."""

    def __init__(self, recent: Sequence[deque[int]], window: int) -> None:
        self.window = window
        self.recent = list(recent)  # one deque (maxlen window) per row
        self.lift: torch.Tensor | None = None  # (rows, window) logit rises of the recent tokens at the last position
        self._ids: torch.Tensor | None = None  # (rows, window) the tokens they belong to (-1: none)

    @classmethod
    def of_rows(cls, rows: Sequence[Sequence[int]], window: int) -> RepeatGuard:
        """A guard over rows whose texts so far (prompt, then any new tokens) are ``rows``."""
        return cls([deque(list(ids)[-window:], maxlen=window) for ids in rows], window)

    @classmethod
    def of_prompts(cls, input_ids: torch.Tensor, mask: torch.Tensor, window: int) -> RepeatGuard:
        """A guard over left-padded prompts (padding is not a token the text wrote)."""
        return cls.of_rows([ids[m.bool()].tolist() for ids, m in zip(input_ids, mask, strict=True)], window)

    def __len__(self) -> int:
        return len(self.recent)

    def _recent_ids(self) -> torch.Tensor:
        rows = [list(r) + [-1] * (self.window - len(r)) for r in self.recent]
        return torch.tensor(rows, dtype=torch.long).reshape(len(rows), self.window)

    @torch.no_grad()
    def observe(self, lm: LanguageModel, before: torch.Tensor, after: torch.Tensor) -> None:
        """Keep how much steering raised each row's recent tokens in the model's logits: ``before`` and ``after``
        (rows, d) are every row's last head input unsteered and steered (equal for an unsteered row). The rise is
        ``e_vᵀ (after − before)`` times the family's after-head scale; where the family soft-caps its logits, the
        capped logits' difference."""
        if len(after) != len(self):
            raise ValueError(f"the repeat guard has {len(self)} rows but the batch has {len(after)}")
        E = lm.head_weight()  # (V, d); a model spread over devices feeds the head's input from another one
        ids = self._recent_ids().to(E.device)
        e = E[ids.clamp_min(0)].float()  # (rows, window, d)
        before, after = before.to(E.device, torch.float32), after.to(E.device, torch.float32)
        rise = torch.einsum("rkd,rd->rk", e, after - before) * lm.logit_scale
        if lm.logit_softcap:
            bias = getattr(lm.head, "bias", None)
            base = torch.einsum("rkd,rd->rk", e, before) + (bias.float()[ids.clamp_min(0)] if bias is not None else 0.0)
            base = base * lm.logit_scale
            rise = lm.softcap(base + rise) - lm.softcap(base)
        self.lift, self._ids = rise.clamp_min(0).masked_fill(ids < 0, 0.0), ids

    @torch.no_grad()
    def apply(self, scores: torch.Tensor) -> torch.Tensor:
        """``scores`` (rows, V) with the rise of every recent token taken back (a copy; unchanged where nothing was
        observed since the last call: no steered pass, nothing to take back)."""
        if self.lift is None:
            return scores
        ids, lift = self._ids.to(scores.device), self.lift.to(scores.device)
        self.lift = self._ids = None
        index = ids.clamp_min(0)
        lowered = scores.gather(1, index) - lift  # a token twice in the window gets the same value twice
        return scores.scatter_reduce(1, index, lowered, reduce="amin", include_self=True)

    def push(self, tokens: torch.Tensor) -> None:
        """Add each row's drawn token (rows,) to its window."""
        for window, token in zip(self.recent, tokens.tolist(), strict=True):
            window.append(int(token))
