"""Steering baselines a user would pick instead of a switch, for side-by-side evaluation.

**Activation addition (CAA)**, Rimsky et al. 2024 "Steering Llama 2 via Contrastive
Activation Addition" and Turner et al. 2023 "Activation Addition": the steering
vector is the mean residual-stream state at one decoder layer over the positive
texts minus that over the negative texts (every token, as in repeng's mean-diff
reader); generation adds ``α · v`` to that layer's output at every position.
The layer is a fixed fraction of the depth (:data:`CAA_LAYER_FRACTION`, CAA's
layer 13 of Llama-2-7B's 32); its strengths ``α`` are multiples of ``v``.

This module is an evaluation baseline: the hook acts on the whole model, in every
thread, while its ``with`` block is open; the app and the library's steering use
switches (:mod:`lmswitch.core.steering`), which are per-context.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from lmswitch.core.models import LanguageModel

CAA_LAYER_FRACTION = 0.4  # the decoder layer, as a fraction of the depth


@dataclass(frozen=True)
class ActivationAddition:
    """A CAA steering vector for one model: add ``α · vector`` to the output of decoder layer ``layer``."""

    vector: torch.Tensor  # (d,) float32: mean positive state − mean negative state
    layer: int
    model_fingerprint: str


@torch.no_grad()
def _mean_state(lm: LanguageModel, texts: Sequence[str], layer: int, batch: int = 32) -> torch.Tensor:
    """Mean over every token of ``texts`` of the output of decoder layer ``layer``, float32 (d,)."""
    total, count = None, 0
    for s in range(0, len(texts), batch):
        enc = lm.tokenizer(list(texts[s : s + batch]), return_tensors="pt", padding=True).to(lm.input_device)
        states = lm.model(**enc, output_hidden_states=True).hidden_states[layer + 1].float()  # [0] is the embeddings
        mask = enc.attention_mask[..., None].to(states.dtype)
        part = (states * mask).sum((0, 1))
        total = part if total is None else total + part
        count += int(enc.attention_mask.sum())
    return total / count


def fit_activation_addition(lm: LanguageModel, positive: Sequence[str], negative: Sequence[str],
                            layer: int | None = None) -> ActivationAddition:
    """The mean-difference vector between ``positive`` and ``negative`` texts at ``layer`` (default: 40% of the depth)."""
    if not positive or not negative:
        raise ValueError("activation addition needs positive and negative texts")
    n_layers = len(lm.decoder_layers())
    layer = round(CAA_LAYER_FRACTION * (n_layers - 1)) if layer is None else layer
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer must be in 0…{n_layers - 1}; got {layer}")
    vector = _mean_state(lm, positive, layer) - _mean_state(lm, negative, layer)
    return ActivationAddition(vector.cpu(), layer, lm.fingerprint)


@contextmanager
def added(lm: LanguageModel, addition: ActivationAddition, alpha: float) -> Iterator[None]:
    """While open, decoder layer ``addition.layer`` outputs ``h + alpha · vector`` at every position (alpha 0: unchanged)."""
    if addition.model_fingerprint != lm.fingerprint:
        raise ValueError("this activation-addition vector was fitted on a different model")
    block = lm.decoder_layers()[addition.layer]

    def hook(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        shifted = hidden + (alpha * addition.vector).to(hidden.device, hidden.dtype)
        return (shifted, *output[1:]) if isinstance(output, tuple) else shifted

    handle = block.register_forward_hook(hook) if alpha else None
    try:
        yield
    finally:
        if handle is not None:
            handle.remove()
