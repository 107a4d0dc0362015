"""Read a switch: its SVD word dimensions and the words it promotes (paper §5.1, appendix G).

With the switch acting as ``c → c + ε W c``, the change of word ``v``'s logit is
``ε · e_vᵀ W c``. Writing ``W = U S Vᵀ``:

    e_vᵀ W c = Σ_i s_i · (e_vᵀ u_i) · (v_iᵀ c)

so ``u_i`` is the *word side* of direction ``i`` (it meets the output embedding
``e_v``) and ``v_i`` its *context side* (it meets the hidden state ``c``). A
direction raises the words at its ``+u_i`` pole when ``v_iᵀ c > 0`` and the words at
its ``−u_i`` pole when ``v_iᵀ c < 0``; which one happens at positive ε is decided
from the hidden states of real reference texts, not guessed.
"""

from __future__ import annotations

import weakref
from importlib import resources

import torch

from .models import LanguageModel
from .scoring import encode_texts
from .switch import Switch
from .words import complete_words, token_words

MAX_DIMS = 100
MAX_WORDS = 500

_REFERENCE_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def reference_texts() -> list[str]:
    """The bundled neutral reference texts (everyday prose on many topics, written for this project)."""
    text = resources.files("lmswitch").joinpath("data/reference.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def reference_hidden(lm: LanguageModel, texts: list[str] | None = None) -> torch.Tensor:
    """Head inputs ``c`` over reference texts, ``(N, d)`` float32 (the bundled set is cached per model)."""
    if texts is None:
        cached = _REFERENCE_CACHE.get(lm)
        if cached is None:
            cached = _REFERENCE_CACHE[lm] = reference_hidden(lm, reference_texts())
        return cached
    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    if not texts:
        raise ValueError("give at least one non-empty reference text")
    return encode_texts(lm, texts, [0.0] * len(texts), chunk_tokens=512, block=32).hidden


def _check_counts(dims: int, words: int) -> None:
    if not isinstance(dims, int) or not 1 <= dims <= MAX_DIMS:
        raise ValueError(f"dims must be an integer from 1 to {MAX_DIMS}; got {dims!r}")
    if not isinstance(words, int) or not 1 <= words <= MAX_WORDS:
        raise ValueError(f"words must be an integer from 1 to {MAX_WORDS}; got {words!r}")


def _word_table(lm: LanguageModel) -> tuple[torch.Tensor, list[str]]:
    """Ids and surfaces of the readable word-start tokens of the model's vocabulary."""
    tw = token_words(lm.tokenizer)
    ids = [i for i in tw.readable_ids() if i < lm.vocab_size]
    if not ids:
        raise ValueError(f"the tokenizer of {lm.name} has no readable word tokens to list")
    return torch.tensor(ids), [tw.surface[i] for i in ids]


def _top_words(lm: LanguageModel, scores: torch.Tensor, ids: torch.Tensor, surfaces: list[str], n: int, key: str) -> list[dict]:
    """The ``n`` highest-scoring distinct whole words (case-insensitive; the best-scoring form is kept).

    Candidates are checked with :func:`~lmswitch.words.complete_words` a few at a
    time in score order, so only the top of the ranking costs a model call.
    """
    out, seen = [], set()
    order = torch.argsort(scores, descending=True).tolist()
    pos = 0
    while len(out) < n and pos < len(order):
        batch = []
        while len(batch) < n + n // 2 + 5 and pos < len(order):
            j = order[pos]
            pos += 1
            if surfaces[j].lower() not in seen:
                batch.append(j)
        for j, whole in zip(batch, complete_words(lm, [int(ids[j]) for j in batch]), strict=True):
            w = surfaces[j]
            if whole and w.lower() not in seen and len(out) < n:
                seen.add(w.lower())
                out.append({"word": w, key: round(float(scores[j]), 6)})
    return out


@torch.no_grad()
def svd_dimensions(lm: LanguageModel, switch: Switch, *, dims: int = 10, words: int = 20, reference: list[str] | None = None) -> dict:
    """The switch's top ``dims`` singular directions, each with ``words`` words at each pole.

    Every direction is oriented so that ``promoted`` lists the words it pushes *up*
    at positive ε over the reference contexts and ``suppressed`` the words it pushes
    down. ``flipped`` says whether that is the ``−u`` pole; ``agreement`` is the share
    of reference contexts where the direction acts that way round (near 0.5: it
    promotes either pole depending on the context); ``strength`` is
    ``s_i · |mean v_iᵀ c|``, the typical logit change scale at ε = 1/ε0.

    >>> d = svd_dimensions(lm, sentiment)                 # doctest: +SKIP
    >>> [w["word"] for w in d["dimensions"][0]["promoted"][:3]]  # doctest: +SKIP
    ['wonderful', 'great', 'love']
    """
    _check_counts(dims, words)
    switch.check_model(lm)
    W = switch.W.double()
    U, S, Vh = torch.linalg.svd(W)  # W = U diag(S) Vh; columns of U: word side, rows of Vh: context side
    k = min(dims, len(S))
    C = reference_hidden(lm, reference).double().to(W.device)  # (N, d)
    a = C @ Vh[:k].T  # (N, k): context terms v_iᵀ c
    mean = a.mean(0)
    sign = torch.where(mean < 0, -1.0, 1.0).double()
    agreement = ((a * sign) > 0).double().mean(0)

    ids, surfaces = _word_table(lm)
    E = lm.head.weight.detach()[ids].double().cpu()  # (n_words, d)
    proj = E @ U[:, :k].cpu()  # (n_words, k): e_vᵀ u_i
    total = float((S**2).sum()) or 1.0
    directions = []
    for i in range(k):
        oriented = proj[:, i] * sign[i].cpu()
        directions.append({
            "index": i,
            "singular_value": float(S[i]),
            "share": float(S[i] ** 2) / total,
            "flipped": bool(sign[i] < 0),
            "agreement": float(agreement[i]),
            "strength": float(S[i] * mean[i].abs() * switch.eps0),
            "promoted": _top_words(lm, oriented, ids, surfaces, words, "score"),
            "suppressed": _top_words(lm, -oriented, ids, surfaces, words, "score"),
        })
    return {
        "switch": switch.name,
        "positive_label": switch.positive_label,
        "negative_label": switch.negative_label,
        "singular_values": S.tolist(),
        "dimensions": directions,
        "reference_contexts": int(C.shape[0]),
    }


@torch.no_grad()
def promoted_words(lm: LanguageModel, switch: Switch, *, words: int = 20, reference: list[str] | None = None) -> dict:
    """The words whose logits the switch raises and lowers most at positive ε, on average over contexts.

    The mean logit change over reference contexts is ``ε · e_vᵀ W c̄`` (linear in
    ``c``); ``delta`` is that change at ε = 1 (one ε0). Within one context a
    constant shift of all logits does not change probabilities, so the ranking is
    also the ranking of the mean change in log-probability.
    """
    _check_counts(1, words)
    switch.check_model(lm)
    C = reference_hidden(lm, reference)
    c_mean = C.double().mean(0).to(switch.W.device)
    direction = switch.W.double() @ c_mean * switch.eps0  # (d,)
    ids, surfaces = _word_table(lm)
    E = lm.head.weight.detach()[ids].double().cpu()
    delta = E @ direction.cpu()
    return {
        "switch": switch.name,
        "positive_label": switch.positive_label,
        "negative_label": switch.negative_label,
        "promoted": _top_words(lm, delta, ids, surfaces, words, "delta"),
        "suppressed": [{"word": w["word"], "delta": -w["delta"]} for w in _top_words(lm, -delta, ids, surfaces, words, "delta")],
        "reference_contexts": int(C.shape[0]),
    }
