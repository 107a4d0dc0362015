"""Batch-invariant attention: inside :func:`batch_invariant`, a row's attention has the same bits whatever other rows
share its batch and however far it is left-padded, so a server's request gets the text it would get alone.

PyTorch's scaled-dot-product attention on CPU sums a row's keys in blocks whose bounds move with the batch and the
padding, so the last bits of a row's output depend on its neighbours. In bfloat16 each such bit is 1/256 of the value,
and through the layers it changes a sampled token often enough that 15–25% of the requests decoded beside others on
a server got another text than alone (benchmarks/RESULTS.md, 2026-11-27). Here attention is computed in float64 and
rounded once to the model's dtype: whatever order the sums take, their float64 differences are far below that
rounding, so every row rounds to the same result (a difference could only survive if a float64 value fell within
~1e-16 of a rounding boundary). Rows are computed a few at a time, so memory stays bounded whatever the batch. Outside
the context it is transformers' SDPA, bit for bit, and so is a row too big to hold in float64 (:data:`MAX_SCORES`: a
prompt of about 700 tokens read in one pass on the embedded model), which is then not invariant.

A model takes part once :func:`use_batch_invariant` has routed its attention here (only a model that uses SDPA; its
configuration then names this module's function, which it does not save). The
context is per thread (a :class:`contextvars.ContextVar`), so a server's decode loop holds it while other threads
compute as before.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch
from torch import nn
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

NAME = "lmswitch_sdpa"
_INVARIANT = contextvars.ContextVar("lmswitch_batch_invariant", default=False)
_UNSUPPORTED = ("softcap", "s_aux", "position_bias")  # extras the float64 path does not apply (a sliding window is in the mask)
MAX_SCORES = 2**22  # float64 attention scores (heads × queries × keys) held at once; a row with more goes to SDPA


@contextlib.contextmanager
def batch_invariant() -> Iterator[None]:
    """Attention of the models routed here (:func:`use_batch_invariant`) is batch-invariant in this context, on this
    thread."""
    token = _INVARIANT.set(True)
    try:
        yield
    finally:
        _INVARIANT.reset(token)


def in_batch_invariant() -> bool:
    """Whether this thread is inside :func:`batch_invariant` (packed bfloat16 products then keep to row counts whose
    rows get their bits alone: :data:`lmswitch.core.packed.INVARIANT_ROWS`)."""
    return _INVARIANT.get()


def use_batch_invariant(model: nn.Module) -> bool:
    """Route ``model``'s attention through this module where it uses SDPA (other implementations are left as they are);
    returns whether its attention can be batch-invariant. Nothing changes outside :func:`batch_invariant`."""
    if model.config._attn_implementation == "sdpa":
        model.set_attn_implementation(NAME)
    return model.config._attn_implementation == NAME


def attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
              dropout: float = 0.0, scaling: float | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention function: SDPA, except inside :func:`batch_invariant`."""
    _, H, T, D = query.shape
    causal = kwargs.get("is_causal")
    causal = getattr(module, "is_causal", True) if causal is None else causal
    if (not _INVARIANT.get() or dropout or any(kwargs.get(k) is not None for k in _UNSUPPORTED)
            or H * T * key.shape[2] > MAX_SCORES or (attention_mask is None and T > 1 and not causal)):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    scaling = scaling if scaling is not None else D**-0.5
    mask = _four_d(attention_mask)
    rows = max(1, MAX_SCORES // (H * T * key.shape[2]))  # rows at a time: a row's result does not depend on how many
    if rows >= len(query):  # all at once (every decode step): no slices, no copy
        return _float64(query, key, value, mask, scaling), None
    return torch.cat([_float64(query[b : b + rows], key[b : b + rows], value[b : b + rows],
                               mask[b : b + rows] if mask is not None and mask.shape[0] > 1 else mask, scaling)
                      for b in range(0, len(query), rows)]), None


def _four_d(mask: torch.Tensor | None) -> torch.Tensor | None:
    """``mask`` as (B or 1, H or 1, T or 1, L): a (T, L) mask serves every row and head, a (B, T, L) one every head."""
    if mask is None or mask.dim() == 4:
        return mask
    return mask[None, None] if mask.dim() == 2 else mask[:, None]


def _float64(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scaling: float) -> torch.Tensor:
    """Attention of (B, H, T, D) queries on (B, H_kv, L, D) keys in float64, rounded once to the query's dtype:
    (B, T, H, D_v). Grouped heads share their key head as in transformers' ``repeat_kv`` (head h reads key head
    h // (H / H_kv)). Without a mask, T > 1 queries are causal from the first key, as SDPA's ``is_causal`` aligns them.
    A query that may see no key (a padding position) gets zeros, as SDPA gives it."""
    B, H, T, D = query.shape
    groups, L = key.shape[1], key.shape[2]
    # a key head's query heads stacked as one (H / H_kv · T)-row matrix: one product per key head, not one per query head
    # over a broadcast key (2.5× faster for 8 decoding rows; the same float64 dot products)
    q = query.reshape(B, groups, H // groups * T, D).double()
    scores = (torch.matmul(q, key.double().transpose(-1, -2)) * scaling).view(B, groups, H // groups, T, L)
    if mask is None and T > 1:
        mask = torch.ones(1, 1, T, L, dtype=torch.bool, device=query.device).tril()
    if mask is not None:
        mask = mask[:, :, None] if mask.shape[1] == 1 else mask.reshape(mask.shape[0], groups, H // groups, *mask.shape[-2:])
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.double()
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    out = torch.matmul(weights.reshape(B, groups, H // groups * T, L), value.double())  # (B, H_kv, H / H_kv · T, D_v)
    return out.reshape(B, H, T, value.shape[-1]).transpose(1, 2).to(query.dtype).contiguous()


AttentionInterface.register(NAME, attention)
AttentionMaskInterface.register(NAME, sdpa_mask)
