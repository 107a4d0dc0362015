"""Training a switch by maximum likelihood, on cached hidden states.

The model body is frozen, so the head inputs ``c`` of the training texts never
change: one body pass computes them, and every optimisation step afterwards
touches only the head. With the base logits ``L0 = E c`` cached too, a step costs
one ``(n, d) @ (d, V)`` product for the steering term ``Δ = ε0 (M c)ᵀ Eᵀ`` and a
softmax, instead of a full forward and backward through the model.

Objective (paper, appendix D): a text with label ``y`` (positives +1, negatives
-1, or a graded value in [-1, 1]) is fitted at ``ε0 (y W + W_d)``; the dummy
``W_d`` absorbs the shift between the pretraining corpus and the training
domain when the labels differ. One document alone is fitted at ``ε0 W``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from lmswitch.core.hidden import TokenStates, check_text, encode_texts
from lmswitch.core.models import LanguageModel
from lmswitch.core.switch import Switch

ProgressCallback = Callable[[int, int, float], None]  # (step, total, loss)

MAX_STEPS = 100_000


class TrainingCancelled(Exception):
    """Raised by :func:`train_switch` when its ``cancel`` event is set."""


def _as_texts(texts: str | Sequence[str] | None, what: str) -> list[str]:
    if texts is None:
        return []
    if isinstance(texts, str):
        texts = [texts]
    return [check_text(text, f"{what} text #{i + 1}") for i, text in enumerate(texts)]


def _split(data: TokenStates, n_texts: int, heldout: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Boolean masks (train, held-out). Whole texts are held out when there are enough of them,
    otherwise contiguous token blocks (one document: its hidden states keep their full context)."""
    units = data.unit if n_texts < 10 else data.unit // 1_000_000
    if heldout == 0:
        return torch.ones(len(units), dtype=torch.bool), torch.zeros(len(units), dtype=torch.bool)
    ids = units.unique()
    held = torch.zeros(len(units), dtype=torch.bool)
    # stratify by label sign so both classes are represented in the held-out part
    unit_label = {int(u): float(label) for u, label in zip(units.tolist(), data.labels.cpu().tolist(), strict=False)}
    for sign in (True, False):
        group = torch.tensor([int(u) for u in ids.tolist() if (unit_label[int(u)] >= 0) == sign])
        if len(group) < 2:
            continue
        k = max(1, round(heldout * len(group)))
        chosen = group[torch.randperm(len(group), generator=generator)[:k]]
        held |= torch.isin(units, chosen)
    return ~held, held


class _SteeredNLL(torch.autograd.Function):
    """Mean NLL of ``targets`` under logits ``L0 + U Eᵀ``, with a lean backward.

    ``U`` (n, d) is the steering term ``ε0 M c``; ``L0`` (n, V) the cached base
    logits. Autograd through ``cross_entropy`` would materialise several (n, V)
    buffers; here the forward keeps one and the backward turns it into the
    softmax in place, so a step is two (n, d, V) matmuls and three passes over
    (n, V). The matmuls run in ``E_mm``'s dtype (bf16 by default): the steering
    term is small, so its relative rounding error barely moves the loss.
    """

    @staticmethod
    def forward(ctx, U: torch.Tensor, E_mm: torch.Tensor, L0: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = (U.to(E_mm.dtype) @ E_mm.T).float().add_(L0)  # (n, V)
        lse = torch.logsumexp(logits, dim=-1)  # (n,)
        loss = (lse - logits.gather(1, targets[:, None]).squeeze(1)).mean()
        ctx.save_for_backward(logits, lse, E_mm, targets)
        return loss

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        logits, lse, E_mm, targets = ctx.saved_tensors
        probs = logits.sub_(lse[:, None]).exp_()  # softmax, in place
        probs[torch.arange(len(targets)), targets] -= 1.0
        probs.mul_(grad / len(targets))
        grad_U = (probs.to(E_mm.dtype) @ E_mm).float()  # (n, d)
        return grad_U, None, None, None


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def train_switch(
    lm: LanguageModel,
    positive: str | Sequence[str],
    negative: str | Sequence[str] | None = None,
    *,
    labels: Sequence[float] | None = None,
    name: str = "switch",
    description: str = "",
    positive_label: str = "positive",
    negative_label: str = "negative",
    steps: int = 200,
    lr: float = 1e-2,
    eps0: float = 1e-3,
    l2: float = 0.0,
    heldout: float = 0.15,
    batch_tokens: int = 256,
    eval_every: int = 10,
    patience: int = 4,
    min_steps: int | None = None,
    chunk_tokens: int = 512,
    seed: int = 0,
    rank: int | None = None,
    matmul_dtype: torch.dtype = torch.bfloat16,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | Callable[[], bool] | None = None,
) -> Switch:
    """Learn a switch from example texts.

    ``positive``/``negative`` are lists of texts (sentences or whole documents) or a
    single document string. ``labels`` optionally gives a graded label in [-1, 1]
    for every text, positives first then negatives.

    ``rank`` keeps only the top singular directions of the trained ``W`` (its
    "word dimensions"): the small ones mostly hold noise fitted to the training
    texts, and dropping them lets stronger ε steer with less loss of fluency.

    Early stopping: after ``min_steps`` (default: half of ``steps``) training stops
    once the held-out loss has not improved for ``patience`` evaluations, and the
    ``W`` with the best held-out loss seen from ``min_steps`` on is kept. With
    little data the held-out likelihood of the whole text often stops improving
    long before the style is learned, so the warm-up is not scored.

    >>> s = train_switch(lm, happy_sentences, sad_sentences, name="sentiment")   # doctest: +SKIP
    >>> s.card["heldout_gain"]                                                   # doctest: +SKIP
    0.21
    """
    start = time.perf_counter()
    pos, neg = _as_texts(positive, "positive"), _as_texts(negative, "negative")
    if not pos:
        raise ValueError("no positive texts given: a switch needs examples of the style to move toward")
    texts = pos + neg
    if labels is None:
        text_labels = [1.0] * len(pos) + [-1.0] * len(neg)
    else:
        text_labels = [float(x) for x in labels]
        if len(text_labels) != len(texts):
            raise ValueError(f"got {len(text_labels)} labels for {len(texts)} texts (positives then negatives)")
        bad = [x for x in text_labels if not (math.isfinite(x) and -1 <= x <= 1)]
        if bad:
            raise ValueError(f"labels must be finite numbers in [-1, 1]; got {bad[:3]}")
    if not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise ValueError(f"steps must be an integer from 1 to {MAX_STEPS}; got {steps!r}")
    for label, value, lo, hi in (("lr", lr, 0, 1), ("eps0", eps0, 0, 1), ("l2", l2, -1e-12, 1e6)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and lo < value <= hi):
            raise ValueError(f"{label} must be a finite number in ({lo:g}, {hi:g}]; got {value!r}")
    if rank is not None and (not isinstance(rank, int) or not 1 <= rank <= lm.hidden_size):
        raise ValueError(f"rank must be an integer from 1 to the hidden size {lm.hidden_size}; got {rank!r}")
    if not 0 <= heldout < 0.5:
        raise ValueError(f"heldout must be a fraction in [0, 0.5); got {heldout!r}")
    if not isinstance(batch_tokens, int) or batch_tokens < 16:
        raise ValueError(f"batch_tokens must be an integer ≥ 16; got {batch_tokens!r}")
    min_steps = steps // 2 if min_steps is None else min_steps
    if not isinstance(min_steps, int) or not 0 <= min_steps <= steps:
        raise ValueError(f"min_steps must be an integer from 0 to steps ({steps}); got {min_steps!r}")
    is_cancelled = cancel.is_set if isinstance(cancel, threading.Event) else (cancel or (lambda: False))

    generator = torch.Generator().manual_seed(seed)
    data = encode_texts(lm, texts, text_labels, chunk_tokens, block=32)
    hidden_seconds = time.perf_counter() - start
    train_mask, held_mask = _split(data, len(texts), heldout, generator)
    if not train_mask.any():
        raise ValueError("no tokens left to train on after holding out data; give more text or set heldout=0")

    head = lm.head
    E = head.weight.detach()  # (V, d)
    device = E.device
    E_mm = E.to(matmul_dtype)
    cap = getattr(lm.model.config.get_text_config(), "final_logit_softcapping", None)
    use_dummy = len(set(text_labels)) > 1

    E32 = E.float()  # converted once: base logits are recomputed per batch when they are not cached
    bias32 = None if head.bias is None else head.bias.float()

    def base_logits(h: torch.Tensor) -> torch.Tensor:  # raw head output, before any soft-capping
        return F.linear(h, E32, bias32)

    def split(mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        m = mask.to(device)
        return data.hidden[m], data.targets[m], data.labels[m]

    Ct, Yt, Lt = split(train_mask)  # (N, d), (N,), (N,)
    Ch, Yh, Lh = split(held_mask)
    # cache the base logits when they fit in ~1 GB; otherwise recompute them per batch
    cache_L0 = Ct.shape[0] * E.shape[0] <= 256 * 1024**2
    L0t = base_logits(Ct) if cache_L0 else None
    L0h = base_logits(Ch) if len(Ch) and Ch.shape[0] * E.shape[0] <= 256 * 1024**2 else None

    d = E.shape[1]
    # zero start: a random start would leave untrained noise in W that steering then amplifies
    W = torch.zeros(d, d, device=device, requires_grad=True)
    Wd = torch.zeros(d, d, device=device, requires_grad=use_dummy)
    params = [W, Wd] if use_dummy else [W]
    opt = torch.optim.Adam(params, lr=lr)

    def loss_on(C, Y, L, L0, sign: float = 1.0, with_w: bool = True) -> torch.Tensor:
        """Mean NLL of targets Y given hidden C at steering ε0 (sign·label·W + W_d)."""
        steer = torch.zeros_like(C)
        if with_w:
            steer = steer + (sign * L)[:, None] * (C @ W.T)
        if use_dummy:
            steer = steer + C @ Wd.T
        L0 = L0 if L0 is not None else base_logits(C)
        if not cap:
            return _SteeredNLL.apply(eps0 * steer, E_mm, L0, Y)
        logits = L0 + ((eps0 * steer).to(matmul_dtype) @ E_mm.T).float()  # (n, V)
        return F.cross_entropy(torch.tanh(logits / cap) * cap, Y)

    @torch.no_grad()
    def heldout_loss(**kw) -> float:
        if not len(Ch):
            return math.nan
        return float(loss_on(Ch, Yh, Lh, L0h, **kw))

    n = Ct.shape[0]
    losses: list[float] = []
    held_curve: list[tuple[int, float]] = []
    best = (math.inf, 0, W.detach().clone(), Wd.detach().clone())
    bad_evals = 0
    stopped_early = False
    step = 0
    for step in range(1, steps + 1):
        if is_cancelled():
            raise TrainingCancelled(f"training cancelled at step {step - 1} of {steps}")
        idx = torch.randperm(n, generator=generator)[:batch_tokens].to(device) if n > batch_tokens else None
        C, Y, L = (Ct, Yt, Lt) if idx is None else (Ct[idx], Yt[idx], Lt[idx])
        L0 = L0t if idx is None or L0t is None else L0t[idx]
        loss = loss_on(C, Y, L, L0)
        if l2:
            loss = loss + l2 * (eps0**2) * sum((p**2).sum() for p in params)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if progress is not None:
            progress(step, steps, losses[-1])
        if len(Ch) and step >= min_steps and (step % eval_every == 0 or step == steps or step == min_steps):
            h = heldout_loss()
            held_curve.append((step, h))
            if h < best[0] - 1e-5:
                best = (h, step, W.detach().clone(), Wd.detach().clone())
                bad_evals = 0
            else:
                bad_evals += 1
                if bad_evals >= patience:
                    stopped_early = True
                    break
    if not len(Ch) or not held_curve:
        best = (math.nan, step, W.detach().clone(), Wd.detach().clone())
    _, best_step, W_best, Wd_best = best
    if rank is not None and rank < d:
        U, S, Vh = torch.linalg.svd(W_best.float())
        W_best = (U[:, :rank] * S[:rank]) @ Vh[:rank]
    with torch.no_grad():
        W.copy_(W_best)
        Wd.copy_(Wd_best)
        # gain attributable to the switch: held-out NLL without W (dummy kept) minus with it
        held_with = heldout_loss()
        held_without = heldout_loss(with_w=False)
        held_reversed = heldout_loss(sign=-1.0)
    seconds = time.perf_counter() - start
    card = {
        "n_positive": len(pos),
        "n_negative": len(neg),
        "graded_labels": labels is not None,
        "tokens_train": int(n),
        "tokens_heldout": int(len(Ch)),
        "steps": step,
        "best_step": best_step,
        "stopped_early": stopped_early,
        "lr": lr,
        "l2": l2,
        "seed": seed,
        "rank": rank,
        "batch_tokens": batch_tokens,
        "min_steps": min_steps,
        "dummy_steer": use_dummy,
        "train_losses": [round(x, 5) for x in losses],
        "heldout_losses": [[s, round(h, 5)] for s, h in held_curve],
        "heldout_nll_with_switch": _finite_or_none(held_with),
        "heldout_nll_without_switch": _finite_or_none(held_without),
        "heldout_nll_reversed_switch": _finite_or_none(held_reversed),
        # nats per token; > 0 means the switch explains held-out text it never saw
        "heldout_gain": held_without - held_with if len(Ch) else None,
        "hidden_state_seconds": round(hidden_seconds, 3),
        "seconds": round(seconds, 3),
    }
    return Switch(
        W=W_best.cpu(),
        name=name,
        description=description,
        eps0=eps0,
        positive_label=positive_label,
        negative_label=negative_label,
        model_name=lm.name,
        model_fingerprint=lm.fingerprint,
        card=card,
    )


LITTLE_TEXT_TOKENS = 300  # below this many training tokens a d × d switch mostly memorises its examples
CLEAR_GAIN = 0.01  # nats/token of held-out gain that marks a switch which generalises (shipped switches: 0.02–0.09)


def data_advice(card: dict) -> str:
    """A one- or two-sentence hint, from a trained switch's card, on whether its training data sufficed.

    Reads ``tokens_train``, ``tokens_heldout``, ``heldout_gain`` (nats per token;
    None without a held-out split) and ``stopped_early``. A card with no training
    record (a switch not made by :func:`train_switch`) gets a plain note.
    """
    if not isinstance(card, dict):
        raise ValueError(f"data_advice needs a switch's card (a dict, switch.card); got {type(card).__name__}")
    if card.get("tokens_train") is None:
        return "This switch's card has no training record, so there is no data advice for it."
    n = int(card["tokens_train"])
    held = int(card.get("tokens_heldout") or 0)
    gain = card.get("heldout_gain")
    gain = float(gain) if isinstance(gain, (int, float)) and math.isfinite(gain) and held else None
    measured = f" (held-out gain {gain:+.3f} nats/token on {held:,} tokens)" if gain is not None else ""
    if n < LITTLE_TEXT_TOKENS:
        return (
            f"Very little text: {n:,} training tokens{measured}, so the switch mostly memorises these examples. "
            f"Add more examples (a few thousand tokens, say 30+ sentences per side) for a reliable switch."
        )
    if gain is None:
        return (
            f"No held-out split, so whether {n:,} training tokens are enough cannot be measured. "
            f"Train with a held-out fraction (heldout=0.15, the default) to check that the switch generalises."
        )
    if gain <= 0:
        fewer = "a lower learning rate" if card.get("stopped_early") else "fewer steps or a lower learning rate"
        return (
            f"Held-out gain {gain:+.3f} nats/token on {held:,} tokens: the switch memorised its {n:,} training tokens "
            f"instead of learning the style. Add more varied text, or train with {fewer}; generation may still move "
            f"in the intended direction."
        )
    if gain < CLEAR_GAIN:
        return (
            f"Small held-out gain {gain:+.3f} nats/token ({n:,} training, {held:,} held-out tokens): the switch "
            f"generalises a little. More varied text would make it more reliable."
        )
    return (
        f"Enough data: held-out gain {gain:+.3f} nats/token on {held:,} held-out tokens ({n:,} training tokens), "
        f"so the switch explains text it never saw."
    )
