"""Which part of a text carries a style, and what a switch changed at each token.

Per token, ``Δ_i = log P_εW(x_i | x_<i) − log P_0(x_i | x_<i)`` from one body pass
and two heads (paper §5.2). The most style-indicative span is the contiguous run
of at most ``max_span`` tokens with the largest summed Δ, found exactly by
dynamic programming; ``n_spans > 1`` gives the best set of that many
non-overlapping spans.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from lmswitch.core.hidden import EncodedText, encode_text, head_logprobs, target_logprobs
from lmswitch.core.models import LanguageModel
from lmswitch.core.steering import Setting, check_setting, steering_matrix
from lmswitch.core.switch import Switch

Span = tuple[int, int, float]  # token range [start, end) and its summed score


def _check_span_args(max_span: object, n_spans: object) -> None:
    if not isinstance(max_span, int) or max_span < 1:
        raise ValueError(f"max_span must be an integer ≥ 1 (tokens per span); got {max_span!r}")
    if not isinstance(n_spans, int) or n_spans < 1:
        raise ValueError(f"n_spans must be an integer ≥ 1; got {n_spans!r}")


def best_spans(scores: Sequence[float], max_span: int = 5, n_spans: int = 1) -> list[Span]:
    """The ``n_spans`` non-overlapping runs of ≤ ``max_span`` items with the largest total score.

    Exact O(n · n_spans · max_span) dynamic programming. Exactly
    ``min(n_spans, len(scores))`` spans are returned, sorted by position, even when
    some have a negative total (their scores say so). Ties go to the earliest spans.

    >>> best_spans([0.1, -2, 3, 1, -1, 2], max_span=2)
    [(2, 4, 4.0)]
    """
    _check_span_args(max_span, n_spans)
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim != 1 or not np.isfinite(x).all():
        raise ValueError("scores must be a flat sequence of finite numbers")
    n, k = len(x), min(n_spans, len(x))
    if k == 0:
        return []
    prefix = np.concatenate([[0.0], np.cumsum(x)])
    # best[j, i]: best total of exactly j spans inside the first i items; take[j, i]: length of a span ending at i (0 = none)
    best = np.full((k + 1, n + 1), -math.inf)
    best[0, :] = 0.0
    take = np.zeros((k + 1, n + 1), dtype=np.int64)
    for j in range(1, k + 1):
        for i in range(1, n + 1):
            value, length = best[j, i - 1], 0
            for L in range(1, min(max_span, i) + 1):
                cand = best[j - 1, i - L] + prefix[i] - prefix[i - L]
                if cand > value:
                    value, length = cand, L
            best[j, i], take[j, i] = value, length
    spans, j, i = [], k, n
    while j > 0:
        L = int(take[j, i])
        if L == 0:
            i -= 1
            continue
        spans.append((i - L, i, float(prefix[i] - prefix[i - L])))
        i, j = i - L, j - 1
    return sorted(spans)


def _token_deltas(lm: LanguageModel, enc: EncodedText, M: torch.Tensor | None) -> np.ndarray:
    """Δ_i per token (0 for an unscored first token)."""
    targets = torch.tensor(enc.ids)
    lp = target_logprobs(lm, enc.hidden, targets, [None, M])
    delta = (lp[1] - lp[0]).numpy()
    delta[~enc.scored.numpy()] = 0.0
    return delta


def _char_span(text: str, bounds: list[int], a: int, b: int) -> tuple[int, int]:
    """Characters of tokens [a, b) for display: widened to whole words where a token splits a word
    (``"Sh|ut up"`` shows ``"Shut up"``), without whitespace at the edges; always an exact substring."""
    start, end = bounds[a], bounds[b]
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start == end:
        return bounds[a], bounds[b]
    while start > 0 and text[start - 1].isalnum() and text[start].isalnum():
        start -= 1
    while end < len(text) and text[end - 1].isalnum() and text[end].isalnum():
        end += 1
    return start, end


def highlight(
    lm: LanguageModel,
    switch: Switch,
    text: str,
    *,
    eps: float = 5.0,
    max_span: int = 5,
    n_spans: int = 1,
) -> dict:
    """The most style-indicative span(s) of ``text`` for ``switch`` at ``eps`` (ε0 units).

    Positive ``eps`` finds what reads most like the switch's positive side,
    negative ``eps`` its negative side (for the detox switch, ``eps < 0`` finds the
    insult). Returns plain data:

    - ``spans``: ``{"start", "end", "text", "score", "tokens": [a, b]}``: the exact
      best token ranges ``[a, b)`` and their summed Δ, with character offsets into
      ``text`` widened to whole words for display;
    - ``highlighted``: ``[(piece, label or None), ...]`` covering the whole text,
      ready for ``gr.HighlightedText``;
    - ``heatmap``: ``[(piece, score in [-1, 1]), ...]``, one entry per token
      (scaled by the largest ``|Δ|``);
    - ``tokens``: per token ``{"text", "start", "end", "delta", "scored"}``.

    >>> h = highlight(lm, detox, "You are a complete idiot and everyone knows it.", eps=-5)  # doctest: +SKIP
    >>> h["spans"][0]["text"]                                                               # doctest: +SKIP
    'a complete idiot'
    """
    if not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps == 0:
        raise ValueError(f"eps must be a finite non-zero number (in eps0 units); got {eps!r}")
    _check_span_args(max_span, n_spans)  # before the model pass: fail fast
    setting = [(switch, float(eps))]
    check_setting(lm, setting)
    enc = encode_text(lm, text)
    delta = _token_deltas(lm, enc, steering_matrix(setting))
    bounds = enc.boundaries()
    label = switch.positive_label if eps > 0 else switch.negative_label

    spans = []
    for a, b, score in best_spans(delta.tolist(), max_span, n_spans):
        start, end = _char_span(text, bounds, a, b)
        spans.append({"start": start, "end": end, "text": text[start:end], "score": score, "tokens": [a, b]})

    highlighted: list[tuple[str, str | None]] = []
    cursor = 0
    for span in spans:
        if span["start"] < cursor:  # two spans widened into the same word: show them as one
            span["start"] = cursor
            span["text"] = text[cursor : span["end"]]
        if span["start"] > cursor:
            highlighted.append((text[cursor : span["start"]], None))
        if span["end"] > span["start"]:
            highlighted.append((span["text"], label))
        cursor = max(cursor, span["end"])
    if cursor < len(text):
        highlighted.append((text[cursor:], None))

    scale = float(np.abs(delta).max()) or 1.0
    pieces = enc.pieces()
    tokens = [
        {"text": pieces[i], "start": bounds[i], "end": bounds[i + 1], "delta": float(delta[i]), "scored": bool(enc.scored[i])}
        for i in range(enc.n_tokens)
    ]
    heatmap = [(p, round(float(v) / scale, 4)) for p, v in zip(pieces, delta, strict=True) if p]
    return {
        "switch": switch.name,
        "eps": float(eps),
        "label": label,
        "text": text,
        "spans": spans,
        "highlighted": highlighted,
        "heatmap": heatmap,
        "tokens": tokens,
        "total_delta": float(delta.sum()),
        "windows": enc.windows,
    }


@torch.no_grad()
def token_changes(
    lm: LanguageModel,
    setting: Setting,
    text: str,
    *,
    prompt: str | None = None,
    chat: bool = False,
    top: int = 5,
    among: int | None = 100,
) -> list[dict]:
    """What a switch setting changed at each token of ``text`` (e.g. a generation after ``prompt``).

    For every token: the log-probability of the token under the unsteered and the
    steered model, their difference ``delta``, and the ``top`` alternatives the
    steering promoted and demoted most at that step, ranked by the exact change of
    their log-probability (``Δlogits = (M c)ᵀ E`` minus the change of the normaliser).
    ``among`` restricts the alternatives to tokens in the top ``among`` of either
    model at that step (the ones that could actually be sampled); ``None`` ranks the
    whole vocabulary.
    """
    if not isinstance(top, int) or not 0 <= top <= 100:
        raise ValueError(f"top must be an integer from 0 to 100; got {top!r}")
    if among is not None and (not isinstance(among, int) or among < 1):
        raise ValueError(f"among must be a positive integer or None; got {among!r}")
    check_setting(lm, setting)
    M = steering_matrix(setting)
    enc = encode_text(lm, text, prompt=prompt, chat=chat)
    bounds, pieces = enc.boundaries(), enc.pieces()
    tok = lm.tokenizer
    out: list[dict] = []
    for s in range(0, enc.n_tokens, 128):
        h = enc.hidden[s : s + 128]
        lp0 = head_logprobs(lm, h)  # (b, V)
        lp1 = lp0 if M is None else head_logprobs(lm, h, M)
        change = lp1 - lp0  # (b, V) exact Δ log p
        if among is not None:
            k = min(among, change.shape[1])
            plausible = torch.zeros_like(change, dtype=torch.bool)
            plausible.scatter_(1, lp0.topk(k, dim=-1).indices, True)
            plausible.scatter_(1, lp1.topk(k, dim=-1).indices, True)
            up = change.masked_fill(~plausible, -math.inf).topk(top, dim=-1)
            down = (-change).masked_fill(~plausible, -math.inf).topk(top, dim=-1)
        else:
            up, down = change.topk(top, dim=-1), (-change).topk(top, dim=-1)
        for r in range(h.shape[0]):
            i = s + r
            scored = bool(enc.scored[i])
            x = enc.ids[i]
            out.append({
                "text": pieces[i],
                "token": tok.decode([x]),
                "start": bounds[i],
                "end": bounds[i + 1],
                "scored": scored,
                "logp_base": float(lp0[r, x]) if scored else None,
                "logp_steered": float(lp1[r, x]) if scored else None,
                "delta": float(change[r, x]) if scored else 0.0,
                "promoted": [{"token": tok.decode([int(t)]), "delta": float(v)} for v, t in zip(up.values[r], up.indices[r], strict=True)] if scored else [],
                "demoted": [{"token": tok.decode([int(t)]), "delta": -float(v)} for v, t in zip(down.values[r], down.indices[r], strict=True)] if scored else [],
            })
    return out
