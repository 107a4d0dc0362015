"""Transfer a switch to another language model (paper §5.3, appendix F).

A linear map ``H`` (source d × target d) is fitted in closed form so that ``H e_t ≈ e_s``
for the output embeddings of anchor tokens both vocabularies share; with contexts
mapped the same way (``c_s ≈ H c_t``), the source's logit change ``ε e_sᵀ W c_s``
becomes ``ε e_tᵀ (Hᵀ W H) c_t`` in the target, so ``W_t = Hᵀ W H``.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from lmswitch.core.card import TransferRecord
from lmswitch.core.models import LanguageModel
from lmswitch.core.options import ANCHORS, HELDOUT_EVERY, MIN_ANCHORS, check_anchors
from lmswitch.core.switch import MAX_EPS_RANGE, Switch, check_switch, usable_name
from lmswitch.lenses.svd import reference_hidden
from lmswitch.lenses.vocab import token_words

STRENGTH_CONTEXTS = 64  # reference contexts used to match the typical logit change of source and target


def shared_anchors(source: LanguageModel, target: LanguageModel) -> tuple[list[int], list[int], list[str]]:
    """Readable word-start tokens present in both vocabularies (space markers normalised), most common first.

    Token ids are ordered roughly by frequency in BPE and SentencePiece vocabularies,
    so shared words are ranked by the larger of their two ids.
    """
    def table(lm: LanguageModel) -> dict[str, int]:
        tw = token_words(lm.tokenizer)
        out: dict[str, int] = {}
        for i in tw.readable_ids(word_start_only=True):
            out.setdefault(tw.surface[i], i)
        return out

    src, tgt = table(source), table(target)
    words = sorted(set(src) & set(tgt), key=lambda w: (max(src[w], tgt[w]), w))
    return [src[w] for w in words], [tgt[w] for w in words], words


def fit_procrustes(E_s: torch.Tensor, E_t: torch.Tensor) -> torch.Tensor:
    """Scaled orthogonal Procrustes: ``H = s·U Vᵀ`` from the SVD of ``E_sᵀ E_t``, the best map with orthonormal rows.

    It cannot stretch directions the anchors barely use, so tokens outside the anchor
    set (other scripts, markup) are not thrown far by it; on the same model it is the identity.
    """
    M = E_s.double().T @ E_t.double()  # (d_s, d_t)
    U, S, Vh = torch.linalg.svd(M, full_matrices=False)
    scale = float(S.sum() / (E_t.double() ** 2).sum())
    return (scale * (U @ Vh)).contiguous()


def fit_map(E_s: torch.Tensor, E_t: torch.Tensor, ridge: float = 1e-6) -> torch.Tensor:
    """Ridge least squares ``H`` (d_s × d_t) with ``E_t Hᵀ ≈ E_s``; ``ridge`` is relative to the mean eigenvalue of ``E_tᵀ E_t``."""
    X, Y = E_t.double(), E_s.double()
    gram = X.T @ X
    lam = ridge * float(torch.trace(gram)) / gram.shape[0]
    Ht = torch.linalg.solve(gram + lam * torch.eye(gram.shape[0], dtype=gram.dtype), X.T @ Y)  # (d_t, d_s)
    return Ht.T.contiguous()


def _fit_quality(H: torch.Tensor, E_s: torch.Tensor, E_t: torch.Tensor) -> dict:
    """R² of the mapped held-out anchors, and how often a mapped anchor's nearest source anchor (cosine) is itself."""
    pred = E_t.double() @ H.T
    Y = E_s.double()
    r2 = 1.0 - float(((Y - pred) ** 2).sum() / ((Y - Y.mean(0)) ** 2).sum())
    sims = torch.nn.functional.normalize(pred, dim=1) @ torch.nn.functional.normalize(Y, dim=1).T
    top1 = float((sims.argmax(1) == torch.arange(len(Y))).double().mean())
    return {"heldout_r2": round(r2, 4), "heldout_top1": round(top1, 4)}


@torch.no_grad()
def _strength(lm: LanguageModel, W: torch.Tensor) -> float:
    """Typical logit change at ε = 1/ε0: the mean over reference contexts of the spread (std) over the vocabulary of ``e_vᵀ W c``."""
    C = reference_hidden(lm)[:STRENGTH_CONTEXTS].double().cpu()
    E = lm.head_weight().double().cpu()
    delta = (C @ W.double().T) @ E.T * lm.logit_scale  # (N, V), in logits (a family's after-head scale too)
    return float(delta.std(dim=1).mean())


def _check_transfer(switch: Switch, source: LanguageModel, anchors: int, min_anchors: int, method: str, ridge: float) -> None:
    check_switch(switch, source).check_steers("it steers nothing, so there is nothing to transfer")  # (and made for source)
    check_anchors(anchors, min_anchors)
    if method not in ("procrustes", "ridge"):
        raise ValueError(f"method must be 'procrustes' or 'ridge'; got {method!r}")
    if not (isinstance(ridge, (int, float)) and math.isfinite(ridge) and ridge >= 0):
        raise ValueError(f"ridge must be a finite number ≥ 0; got {ridge!r}")


def _anchors(source: LanguageModel, target: LanguageModel, anchors: int, min_anchors: int) -> tuple[list[int], list[int], list[str]]:
    """Up to ``anchors`` shared word tokens, refusing fewer than ``min_anchors``."""
    ids_s, ids_t, words = shared_anchors(source, target)
    if not words:
        raise ValueError(f"'{source.name}' and '{target.name}' share no readable word tokens, so there is nothing to map "
                         "one embedding space onto the other with")
    if len(words) < max(min_anchors, HELDOUT_EVERY):  # (under ten: none would be held out to measure the fit)
        raise ValueError(f"only {len(words)} word tokens are shared by '{source.name}' and '{target.name}'; a reliable map "
                         f"needs at least {min_anchors} (lower min_anchors, --min-anchors on the command line, at your own "
                         "risk; at least 10 are needed to measure the fit)")
    return ids_s[:anchors], ids_t[:anchors], words[:anchors]


def transfer(
    switch: Switch,
    source: LanguageModel,
    target: LanguageModel,
    *,
    anchors: int = ANCHORS,
    min_anchors: int = MIN_ANCHORS,
    method: str = "procrustes",
    ridge: float = 1e-6,
) -> Switch:
    """The switch for ``target``: ``Hᵀ W H`` with ``H`` fitted on up to ``anchors`` shared word tokens.

    ``method``: ``"procrustes"`` (default: scaled orthogonal map) or ``"ridge"`` (least
    squares with a relative ``ridge``). Sentiment from the embedded model to
    Gemma-3-270M: Procrustes maps 99.5% of held-out words nearest to themselves
    (ridge 96.8%) and the transferred switch makes Gemma clearly more positive, while
    the ridge map lets +ε promote tokens outside the anchors (other scripts) instead.

    The card records the source switch and model, the anchors used, the fit quality
    on held-out anchors (R² and nearest-neighbour accuracy), and a recommended ε
    scaled so that the typical logit change in the target matches the source's at
    its recommended ε (the paper also scales ε down after transfer; the transfer
    record keeps it as ``scaled_eps``). That ε can read as word salad on the target
    (the shipped sentiment switch's +3.88 on Gemma-3-270M: 3.4× the unsteered
    perplexity), so probe the target's fluent range before use:
    :func:`~lmswitch.harness.frontier.calibrated_card` sets the card's fluent range
    and recommended ε from it (the app and the CLI do).

    >>> gemma = ls.load_model("gemma3-270m")                                      # doctest: +SKIP
    >>> g = transfer(sentiment, ls.load_model(), gemma)                          # doctest: +SKIP
    >>> g.card.transfer.heldout_r2, g.card.recommended_eps                       # doctest: +SKIP
    >>> g.card = ls.calibrated_card(gemma, g)  # the fluent ε range on Gemma     # doctest: +SKIP
    """
    _check_transfer(switch, source, anchors, min_anchors, method, ridge)
    ids_s, ids_t, words = _anchors(source, target, anchors, min_anchors)
    E_s = source.head_weight().float().cpu()[ids_s]
    E_t = target.head_weight().float().cpu()[ids_t]
    held = torch.zeros(len(words), dtype=torch.bool)
    held[HELDOUT_EVERY - 1 :: HELDOUT_EVERY] = True
    H = fit_procrustes(E_s[~held], E_t[~held]) if method == "procrustes" else fit_map(E_s[~held], E_t[~held], ridge)
    quality = _fit_quality(H, E_s[held], E_t[held])
    W_t = H.T @ switch.W.double() @ H  # the same model: H is the identity up to the ridge, so W comes back
    scale = _strength(source, switch.W) / max(_strength(target, W_t.float()), 1e-12)
    recommended = _source_eps(switch)
    scaled = round(recommended * scale, 3) if recommended is not None else None
    card = {
        **{k: v for k, v in switch.card.items() if k in ("data", "dataset")},
        "recommended_eps": scaled,
        "transfer": TransferRecord(
            source_switch=switch.name, source_model=source.name, source_fingerprint=source.fingerprint,
            anchors=int((~held).sum()), heldout_anchors=int(held.sum()), **quality, method=method,
            ridge=ridge if method == "ridge" else None, eps_scale=round(scale, 4), source_recommended_eps=recommended,
            scaled_eps=scaled, example_anchors=words[:12],
        ),
    }
    return Switch(
        W=W_t.float(),
        name=usable_name(f"{switch.name}-to-{Path(target.name).name}"),
        description=f"{switch.description} (transferred from {source.name})".strip(),
        eps0=switch.eps0,
        eps_range=(max(switch.eps_range[0] * scale, -MAX_EPS_RANGE), min(switch.eps_range[1] * scale, MAX_EPS_RANGE)),
        positive_label=switch.positive_label,
        negative_label=switch.negative_label,
        model_name=target.name,
        model_fingerprint=target.fingerprint,
        card=card,
    )


def _source_eps(switch: Switch) -> float | None:
    """The ε the source switch is used at: its card's recommended ε; none when its fluent range was probed and no +ε read
    fluently; without either, half its widest ε (5 for the usual ±10)."""
    card = switch.card
    if card.recommended_eps is not None:
        return card.recommended_eps
    return None if card.fluent_eps is not None else max(abs(x) for x in switch.eps_range) / 2


def fit_text(record: TransferRecord, examples: int = 0) -> str:
    """How well a transfer's map fits, as people read it, from its card's transfer record: "fitted on 3,600 shared
    words; on 400 held-out words R² 0.93, nearest-word accuracy 71.0%" (``examples``: that many of the shared words named)."""
    named = f" (e.g. {', '.join(record.example_anchors[:examples])})" if examples and record.example_anchors else ""
    r2, top1 = ("n/a" if x is None else format(x, spec) for x, spec in ((record.heldout_r2, ""), (record.heldout_top1, ".1%")))
    return (f"fitted on {record.anchors:,} shared words{named}; on {record.heldout_anchors:,} held-out words R² {r2}, "
            f"nearest-word accuracy {top1}")


def strength_advice(switch: Switch, target: str) -> str:
    """One or two sentences on a transferred switch's strength on ``target`` (model name), for the CLI and the app: its
    fluent range and recommended ε when probed (:func:`~lmswitch.harness.frontier.calibrated_card`), else the ε scaled
    from the source, and why a probe failed when one did."""
    card, t = switch.card, switch.card.transfer
    scaled = (f"the source's {t.source_recommended_eps:+g} × {t.eps_scale} = {t.scaled_eps:+g} (the same typical logit change)"
              if t.scaled_eps is not None and t.source_recommended_eps is not None else f"none from the source, which recommends none (no +ε read fluently on it; "
              f"its ε × {t.eps_scale} gives the same typical logit change here)")
    if card.fluent_eps is None:
        why = f"the fluent-range probe failed ({card.calibration_error})" if card.calibration_error else "not probed"
        return f"Recommended ε {scaled}; {why}, so it may read less well on {target}."
    recommended = (f"recommended ε {card.recommended_eps:+g}" if card.recommended_eps is not None
                   else "no +ε read fluently, so none is recommended")
    return f"Fluent ε on {target}: {card.fluent_text} (probed on its dev prompts), {recommended}; scaled from the source it would be {scaled}."
