"""Which part of a text carries a style, and what a switch changed at each token.

Per token, ``Δ_i = log P_εW(x_i | x_<i) − log P_0(x_i | x_<i)`` from one body pass
and two heads (paper §5.2). The most style-indicative span is the contiguous run
of at most ``max_span`` tokens with the largest summed Δ, found exactly by
dynamic programming; ``n_spans > 1`` gives the best set of that many
non-overlapping spans.
"""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np
import torch

from lmswitch.core.checks import is_whole
from lmswitch.core.hidden import EncodedText, encode_text, encode_texts, target_logprobs
from lmswitch.core.models import LanguageModel
from lmswitch.core.steering import Setting, check_setting, steering_matrix
from lmswitch.core.switch import Switch
from lmswitch.lenses.options import (
    DEFAULT_EPS,
    DEFAULT_MAX_SPAN,
    DEFAULT_SPANS,
    WEAK_EVIDENCE_NATS,
    WEAK_QUANTILE,
    check_highlight_args,
    check_span_args,
)
from lmswitch.lenses.svd import reference_texts


@dataclass(frozen=True)
class Span:
    """A highlighted run of text: ``text[start:end]`` (widened to whole words), its summed Δ, and its exact tokens ``[a, b)``."""

    start: int
    end: int
    text: str
    score: float  # Σ Δ_i over the span's tokens (nats)
    tokens: list[int]  # [a, b): the exact token range the dynamic programme chose
    weak: bool = False  # score under the highlight's weak line (Highlight.weak_line): the text hardly reads that way here


@dataclass(frozen=True)
class TokenDelta:
    """One token of a highlighted text: its piece ``text[start:end]`` and its Δ (0 when not scored)."""

    text: str
    start: int
    end: int
    delta: float
    scored: bool  # False for a first token with nothing before it


@dataclass(frozen=True)
class Highlight:
    """What :func:`highlight` found. ``highlighted`` and ``heatmap`` are what ``gr.HighlightedText`` takes.

    :meth:`to_dict` gives the plain JSON-ready dict (same keys, nested rows as dicts).
    """

    switch: str
    eps: float
    label: str  # the switch's label on the side of eps's sign
    text: str
    spans: list[Span]  # sorted by position
    weak_line: float  # nats: a span scoring under it is weak (:func:`weak_line`)
    highlighted: list[tuple[str, str | None]]  # (piece, label or None), covering the whole text
    heatmap: list[tuple[str, float]]  # (piece, Δ scaled by the largest |Δ| into [-1, 1]), one per non-empty token piece
    tokens: list[TokenDelta]
    total_delta: float
    windows: int  # body passes used (> 1 for texts longer than the model's window)

    def to_dict(self) -> dict:
        return asdict(self)

    def weak_text(self) -> str:
        """What a weak span of this highlight means, in words (the command line and the app show it)."""
        if self.weak_line <= WEAK_EVIDENCE_NATS:
            return f"under {WEAK_EVIDENCE_NATS:g} nat, the text hardly reads toward {self.label} there"
        return (f"under {self.weak_line:.2f} nats, a score this switch reaches in {1 - WEAK_QUANTILE:.0%} of ordinary "
                f"sentences: the text reads toward {self.label} there no more than ordinary text does")

    def word_heatmap(self) -> list[tuple[str, float]]:
        """:attr:`heatmap` with sub-word pieces joined into words for display; a word shows its strongest piece's score.

        Pieces join where a letter or digit meets a letter or digit, the rule that
        also widens spans to whole words: ``("The", 0.1), (" fant", 0.2), ("astic", -0.9)``
        becomes ``("The", 0.1), (" fantastic", -0.9)``.
        """
        words: list[tuple[str, float]] = []
        for piece, score in self.heatmap:
            if words and _glued(words[-1][0], piece):
                word, strongest = words[-1]
                words[-1] = (word + piece, max(strongest, score, key=abs))
            else:
                words.append((piece, score))
        return words


@dataclass(frozen=True)
class Alternative:
    """A token the steering promoted or demoted at one step, with the exact change of its log-probability."""

    token: str
    delta: float


@dataclass(frozen=True)
class TokenChange:
    """What a switch setting changed at one token: see :func:`token_changes`. :meth:`to_dict` gives the plain dict."""

    text: str  # the token's piece of the text, ``text[start:end]``
    token: str  # the token decoded alone
    start: int
    end: int
    scored: bool  # False for a first token with nothing before it: no log-probabilities, no alternatives
    logp_base: float | None
    logp_steered: float | None
    delta: float  # logp_steered − logp_base (0 when not scored)
    promoted: list[Alternative]  # most promoted first
    demoted: list[Alternative]  # most demoted first

    def to_dict(self) -> dict:
        return asdict(self)


def _glued(left: str, right: str) -> bool:
    """Whether ``left`` followed by ``right`` meet inside a word (a letter or digit on both sides)."""
    return left[-1:].isalnum() and right[:1].isalnum()


class Run(NamedTuple):
    """A run of items ``[start, end)`` and their summed score (:func:`best_spans`); a tuple, so it unpacks as one."""

    start: int
    end: int
    total: float


def best_spans(scores: Sequence[float], max_span: int = DEFAULT_MAX_SPAN, n_spans: int = DEFAULT_SPANS) -> list[Run]:
    """The ``n_spans`` non-overlapping runs of ≤ ``max_span`` items with the largest total score.

    Exact O(n · n_spans · max_span) dynamic programming. Exactly
    ``min(n_spans, len(scores))`` spans are returned, sorted by position, even when
    some have a negative total (their scores say so). Ties go to the earliest spans.
    Each span is a :class:`Run` ``(start, end, total)``: items ``[start, end)`` and their summed score.

    >>> best_spans([0.1, -2, 3, 1, -1, 2], max_span=2)
    [Run(start=2, end=4, total=4.0)]
    """
    check_span_args(max_span, n_spans)
    try:
        x = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError):
        x = np.asarray([math.nan])  # refused below, in the same words as any other bad score
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
        spans.append(Run(i - L, i, float(prefix[i] - prefix[i - L])))
        i, j = i - L, j - 1
    return sorted(spans)


def _token_deltas(lm: LanguageModel, enc: EncodedText, M: torch.Tensor | None) -> np.ndarray:
    """Δ_i per token (0 for an unscored first token)."""
    targets = torch.tensor(enc.ids)
    lp = target_logprobs(lm, enc.hidden, targets, [None, M])
    delta = (lp[1] - lp[0]).numpy()
    delta[~enc.scored.numpy()] = 0.0
    return delta


# punctuation that joins a span to its neighbours, not part of what it says: shown outside the span
# (", you are an idiot" shows "you are an idiot"); a span still ends on its own ".", "!" or "?"
LEADING_JOINERS = ",;:.!?"
TRAILING_JOINERS = ",;:"


def _char_span(text: str, bounds: list[int], a: int, b: int) -> tuple[int, int]:
    """Characters of tokens [a, b) for display: widened to whole words where a token splits a word
    (``"Sh|ut up"`` shows ``"Shut up"``), without whitespace or joining punctuation at the edges
    (:data:`LEADING_JOINERS`, :data:`TRAILING_JOINERS`); always an exact substring."""
    start, end = bounds[a], bounds[b]
    while start < end and (text[start].isspace() or text[start] in LEADING_JOINERS):
        start += 1
    while end > start and (text[end - 1].isspace() or text[end - 1] in TRAILING_JOINERS):
        end -= 1
    if start == end:
        return bounds[a], bounds[b]
    while start > 0 and _glued(text[start - 1], text[start]):
        start -= 1
    while end < len(text) and _glued(text[end - 1], text[end]):
        end += 1
    return start, end


def _spans(text: str, bounds: list[int], delta: np.ndarray, max_span: int, n_spans: int, line: float) -> list[Span]:
    """The best token spans as character spans widened to whole words (see :func:`_char_span`); two that widen into the
    same word (" id" and "iot") are one span, over both and the tokens between them. Those under ``line`` are weak."""
    spans: list[Span] = []
    for a, b, score in best_spans(delta.tolist(), max_span, n_spans):
        start, end = _char_span(text, bounds, a, b)
        if spans and start < spans[-1].end:  # widened into the previous span's word
            previous = spans.pop()
            score += previous.score + float(delta[previous.tokens[1] : a].sum())
            a, start, end = previous.tokens[0], previous.start, max(end, previous.end)
        spans.append(Span(start=start, end=end, text=text[start:end], score=score, tokens=[a, b], weak=score < line))
    return spans


def _highlighted(text: str, spans: list[Span], label: str) -> list[tuple[str, str | None]]:
    """The whole text as ``(piece, label or None)``, the spans labelled."""
    out: list[tuple[str, str | None]] = []
    cursor = 0
    for span in spans:
        if span.start > cursor:
            out.append((text[cursor : span.start], None))
        if span.end > span.start:
            out.append((span.text, f"{label} (weak)" if span.weak else label))
        cursor = max(cursor, span.end)
    if cursor < len(text):
        out.append((text[cursor:], None))
    return out


def highlight(
    lm: LanguageModel,
    switch: Switch,
    text: str | EncodedText,
    *,
    eps: float = DEFAULT_EPS,
    max_span: int = DEFAULT_MAX_SPAN,
    n_spans: int = DEFAULT_SPANS,
) -> Highlight:
    """The most style-indicative span(s) of ``text`` for ``switch`` at ``eps`` (ε0 units), each marked weak when it
    scores under the switch's :func:`weak_line` at that ``eps`` and ``max_span``.

    Positive ``eps`` finds what reads most like the switch's positive side,
    negative ``eps`` its negative side (for the detox switch, ``eps < 0`` finds the
    insult). The :class:`Highlight` holds:

    - ``spans``: :class:`Span` ``(start, end, text, score, tokens)``: the exact best
      token ranges ``tokens = [a, b)`` and their summed Δ, with character offsets
      into ``text`` widened to whole words for display; only those that read toward
      the side (Δ > 0), so fewer than ``n_spans``, or none, when the text has no more;
    - ``highlighted``: ``[(piece, label or None), ...]`` covering the whole text,
      ready for ``gr.HighlightedText``;
    - ``heatmap``: ``[(piece, score in [-1, 1]), ...]``, one entry per token
      (scaled by the largest ``|Δ|``); :meth:`Highlight.word_heatmap` joins it into words;
    - ``tokens``: per token a :class:`TokenDelta` ``(text, start, end, delta, scored)``.

    ``text`` may be an :class:`~lmswitch.core.hidden.EncodedText` (:func:`encode_text`'s
    result): its head inputs are reused instead of running the model again.

    >>> h = highlight(lm, detox, "You are a complete idiot and everyone knows it.", eps=-1)  # doctest: +SKIP
    >>> h.spans[0].text                                                                     # doctest: +SKIP
    'a complete idiot and everyone'
    """
    check_highlight_args(eps, max_span, n_spans)  # before the model pass: fail fast
    enc = text if isinstance(text, EncodedText) else encode_text(lm, text)
    enc.check_scored("a highlight")
    return highlight_changes(switch, enc, token_deltas(lm, switch, enc, eps), eps=eps, max_span=max_span, n_spans=n_spans,
                             line=weak_line(lm, switch, eps, max_span))


_NEUTRAL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model → its neutral sentences read, unsteered log-probs
_LINES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model → switch → {(ε, max span): weak line}


def neutral_sentences() -> list[str]:
    """The bundled reference texts' sentences of six words or more: the ordinary prose a :func:`weak_line` is measured on."""
    return [s for text in reference_texts() for s in re.split(r"(?<=[.!?]) ", text) if len(s.split()) >= 6]


def weak_line(lm: LanguageModel, switch: Switch, eps: float, max_span: int = DEFAULT_MAX_SPAN) -> float:
    """The score (nats) under which a span of ``switch`` at ``eps`` is weak: what its best span of ≤ ``max_span``
    tokens reaches on :data:`~lmswitch.lenses.options.WEAK_QUANTILE` of the :func:`neutral_sentences`, never under
    :data:`~lmswitch.lenses.options.WEAK_EVIDENCE_NATS`. A switch trained from a few dozen examples reads 1-nat spans
    in about half of ordinary sentences, so a fixed line would call them evidence; the shipped switches keep 1 nat.
    Computed once per model, switch, ε and span length (one head pass over ~1,400 tokens)."""
    check_highlight_args(eps, max_span, DEFAULT_SPANS)
    lines = _LINES.setdefault(lm, weakref.WeakKeyDictionary()).setdefault(switch, {})
    key = (float(eps), int(max_span))
    if key not in lines:
        best = [max(0.0, best_spans(d.tolist(), max_span, 1)[0].total) for d in _neutral_deltas(lm, switch, eps)]
        lines[key] = max(WEAK_EVIDENCE_NATS, float(np.quantile(best, WEAK_QUANTILE)))
    return lines[key]


def _neutral_deltas(lm: LanguageModel, switch: Switch, eps: float) -> list[np.ndarray]:
    """Δ per token of each neutral sentence, each read alone as :func:`highlight` reads a text: one steered head pass
    over all of them (the sentences' body pass and unsteered log-probabilities once per model)."""
    if lm not in _NEUTRAL:
        texts = neutral_sentences()  # read in one padded batch (0.4 s, against 2.2 s one by one), where a model allows it
        batch = encode_texts(lm, texts, [0.0] * len(texts), lm.context_length, keep=range(len(texts))).texts
        read = [batch[i] if i in batch else encode_text(lm, t) for i, t in enumerate(texts)]
        hidden, targets = torch.cat([e.hidden for e in read]), torch.tensor([i for e in read for i in e.ids])
        _NEUTRAL[lm] = (read, hidden, targets, target_logprobs(lm, hidden, targets, [None])[0])
    read, hidden, targets, base = _NEUTRAL[lm]
    setting = [(switch, float(eps))]
    check_setting(lm, setting)
    delta = (target_logprobs(lm, hidden, targets, [steering_matrix(setting)])[0] - base).numpy()
    parts = np.split(delta, np.cumsum([e.n_tokens for e in read])[:-1])
    return [np.where(e.scored.numpy(), d, 0.0) for e, d in zip(read, parts, strict=True)]


def token_deltas(lm: LanguageModel, switch: Switch, enc: EncodedText, eps: float) -> np.ndarray:
    """Δ_i per token of an encoded text for ``switch`` at ``eps`` (0 for an unscored first token): what
    :func:`highlight_changes` takes, for a caller that reads the spans of several lengths from one Δ."""
    setting = [(switch, float(eps))]
    check_setting(lm, setting)
    return _token_deltas(lm, enc, steering_matrix(setting))


def highlight_changes(switch: Switch, enc: EncodedText, delta: np.ndarray, *, eps: float, max_span: int = DEFAULT_MAX_SPAN,
                      n_spans: int = DEFAULT_SPANS, line: float = WEAK_EVIDENCE_NATS) -> Highlight:
    """:func:`highlight` of an encoded text whose per-token changes ``delta`` at ``eps`` are already known (the style
    meter's :func:`~lmswitch.lenses.meter.reading` gives them from its own cached logits); spans under ``line`` are
    weak (:func:`weak_line` gives the switch's own)."""
    check_highlight_args(eps, max_span, n_spans)
    eps, max_span, n_spans = float(eps), int(max_span), int(n_spans)  # NumPy's scalars as Python's (to_dict's JSON)
    if np.shape(delta) != (enc.n_tokens,):
        raise ValueError(f"delta must hold one change per token of the text ({enc.n_tokens}); got shape {np.shape(delta)}")
    text = enc.text
    bounds, pieces = enc.boundaries(), enc.pieces()
    label = switch.positive_label if eps > 0 else switch.negative_label
    spans = [s for s in _spans(text, bounds, delta, max_span, n_spans, line) if s.score > 0]  # the rest read the other way, or not at all
    scale = float(np.abs(delta).max()) or 1.0
    return Highlight(
        switch=switch.name,
        eps=float(eps),
        label=label,
        text=text,
        spans=spans,
        weak_line=float(line),
        highlighted=_highlighted(text, spans, label),
        heatmap=[(p, round(float(v) / scale, 4)) for p, v in zip(pieces, delta, strict=True) if p],
        tokens=[TokenDelta(text=pieces[i], start=bounds[i], end=bounds[i + 1], delta=float(delta[i]), scored=bool(enc.scored[i]))
                for i in range(enc.n_tokens)],
        total_delta=float(delta.sum()),
        windows=enc.windows,
    )


def _ranked(change: torch.Tensor, lp0: torch.Tensor, lp1: torch.Tensor, top: int, among: int | None):
    """The ``top`` largest and smallest changes ``(b, V)`` per row, among tokens in the top ``among`` of either model."""
    if among is None:
        return change.topk(top, dim=-1), (-change).topk(top, dim=-1)
    k = min(among, change.shape[1])
    plausible = torch.zeros_like(change, dtype=torch.bool)
    plausible.scatter_(1, lp0.topk(k, dim=-1).indices, True)
    plausible.scatter_(1, lp1.topk(k, dim=-1).indices, True)
    return change.masked_fill(~plausible, -math.inf).topk(top, dim=-1), (-change).masked_fill(~plausible, -math.inf).topk(top, dim=-1)


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
    encoded: EncodedText | None = None,
) -> list[TokenChange]:
    """What a switch setting changed at each token of ``text`` (e.g. a generation after ``prompt``).

    For every token, a :class:`TokenChange`: the log-probability of the token under
    the unsteered and the steered model (``logp_base``, ``logp_steered``), their
    difference ``delta``, and the ``top`` alternatives the steering ``promoted`` and
    ``demoted`` most at that step, ranked by the exact change of their
    log-probability (``Δlogits = (M c)ᵀ E``, times a family's after-head scale, minus the change of the normaliser).
    ``among`` restricts the alternatives to tokens in the top ``among`` of either
    model at that step (the ones that could actually be sampled); ``None`` ranks the
    whole vocabulary. ``encoded``: the text's encoding when it is already known (a
    decode's own, :func:`~lmswitch.core.hidden.encoded_continuation`), which saves
    the body pass.

    >>> rows = token_changes(lm, [(sentiment, 5.0)], " was lovely", prompt="My weekend")  # doctest: +SKIP
    >>> [(r.text, round(r.delta, 2)) for r in rows]                                      # doctest: +SKIP
    >>> [a.token for a in rows[-1].promoted]  # what the switch pushed up most instead    # doctest: +SKIP
    """
    if not is_whole(top) or not 0 <= top <= 100:
        raise ValueError(f"top must be an integer from 0 to 100; got {top!r}")
    if among is not None and (not is_whole(among) or among < 1):
        raise ValueError(f"among must be a positive integer or None; got {among!r}")
    setting = check_setting(lm, setting)
    M = steering_matrix(setting)
    enc = encoded if encoded is not None and encoded.text == text else encode_text(lm, text, prompt=prompt, chat=chat)
    bounds, pieces = enc.boundaries(), enc.pieces()
    decode = lm.tokenizer.decode
    out: list[TokenChange] = []
    for s in range(0, enc.n_tokens, 128):
        h = enc.hidden[s : s + 128]
        lp0 = lm.head_logprobs(h)  # (b, V)
        lp1 = lp0 if M is None else lm.head_logprobs(h, M)
        change = lp1 - lp0  # (b, V) exact Δ log p
        up, down = _ranked(change, lp0, lp1, top, among)
        for r in range(h.shape[0]):
            i, x = s + r, enc.ids[s + r]
            scored = bool(enc.scored[i])
            out.append(TokenChange(
                text=pieces[i],
                token=decode([x]),
                start=bounds[i],
                end=bounds[i + 1],
                scored=scored,
                logp_base=float(lp0[r, x]) if scored else None,
                logp_steered=float(lp1[r, x]) if scored else None,
                delta=float(change[r, x]) if scored else 0.0,
                promoted=[Alternative(decode([int(t)]), float(v)) for v, t in zip(up.values[r], up.indices[r], strict=True)] if scored else [],
                demoted=[Alternative(decode([int(t)]), -float(v)) for v, t in zip(down.values[r], down.indices[r], strict=True)] if scored else [],
            ))
    return out
