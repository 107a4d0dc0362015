from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import lmswitch.core.attention as attention_module
from lmswitch.core.attention import NAME, attention, batch_invariant, use_batch_invariant


def heads(batch: int, length: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One query token per row (9 heads) and `length` keys and values (3 key heads), as SmolLM2 shapes them."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(batch, h, n, 64, generator=g).to(dtype) for h, n in ((9, 1), (3, length), (3, length)))
    return q, k, v


def step(q, k, v, mask=None) -> torch.Tensor:
    with batch_invariant():
        return attention(None, q, k, v, mask, scaling=0.125)[0]


def left_padded(q, k, v, pads: int, others: int, seed: int):
    """The same rows padded on the left by `pads` masked keys, beside `others` unrelated rows."""
    q2, k2, v2 = heads(others, k.shape[2] + pads, q.dtype, seed)
    k = torch.cat([torch.randn(k.shape[0], 3, pads, 64).to(k.dtype), k], 2)
    v = torch.cat([torch.randn(v.shape[0], 3, pads, 64).to(v.dtype), v], 2)
    mask = torch.ones(q.shape[0] + others, 1, 1, k.shape[2], dtype=torch.bool)
    mask[: q.shape[0], ..., :pads] = False
    return torch.cat([q, q2]), torch.cat([k, k2]), torch.cat([v, v2]), mask


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_decode_step_gives_a_row_the_same_bits_whatever_its_padding_and_its_neighbours(dtype):
    q, k, v = heads(2, 37, dtype, seed=0)
    alone = step(q, k, v)
    for pads, others in ((1, 0), (3, 2), (8, 6), (40, 1)):
        together = step(*left_padded(q, k, v, pads, others, seed=pads))
        assert torch.equal(together[:2], alone), (pads, others)


def test_a_decode_step_is_attention_with_grouped_heads_and_its_mask():
    q, k, v = heads(3, 20, torch.float64, seed=1)
    mask = torch.ones(3, 1, 1, 20, dtype=torch.bool)
    mask[1, ..., :7] = False
    expected = F.scaled_dot_product_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), attn_mask=mask, scale=0.125)
    assert torch.allclose(step(q, k, v, mask), expected.transpose(1, 2), rtol=0, atol=1e-12)
    # a float mask adds to the scores: -inf where masked is the boolean mask again
    additive = torch.zeros(3, 1, 1, 20, dtype=torch.float64).masked_fill(~mask, float("-inf"))
    assert torch.equal(step(q, k, v, additive), step(q, k, v, mask))


def test_outside_the_context_a_routed_model_computes_what_sdpa_computes_bit_for_bit(make_lm):
    lm = make_lm("llama", seed=3)
    ids = torch.randint(4, lm.vocab_size, (2, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, :3] = 0

    def logits() -> list[torch.Tensor]:  # a padded prompt, then one decode step on its cache
        with torch.inference_mode():
            cache = DynamicCache(config=lm.model.config)
            first = lm.model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True).logits
            nxt = lm.model(input_ids=ids[:, -1:], attention_mask=torch.cat([mask, mask[:, -1:]], 1), past_key_values=cache).logits
        return [first, nxt]

    assert lm.model.config._attn_implementation == "sdpa"
    before = logits()
    assert use_batch_invariant(lm.model) and lm.model.config._attn_implementation == NAME
    assert all(torch.equal(a, b) for a, b in zip(before, logits(), strict=True))
    with batch_invariant():  # inside, the padded prompt and the step are close to SDPA's, and finite
        inside = logits()
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(inside, before, strict=True))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_prompt_gets_the_same_bits_left_padded_beside_others_as_alone(make_lm, dtype):
    lm = make_lm("llama", seed=5)
    lm.model.to(dtype)
    use_batch_invariant(lm.model)
    g = torch.Generator().manual_seed(1)
    prompt, other = torch.randint(4, lm.vocab_size, (1, 5), generator=g), torch.randint(4, lm.vocab_size, (1, 12), generator=g)
    batch = torch.cat([torch.cat([torch.zeros(1, 7, dtype=torch.long), prompt], 1), other])
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, :7] = 0
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.inference_mode(), batch_invariant():
        alone = lm.model(input_ids=prompt).logits[0]
        together = lm.model(input_ids=batch, attention_mask=mask, position_ids=positions).logits[0, 7:]
    assert torch.equal(together, alone)


GQA = SimpleNamespace(num_key_value_groups=3, is_causal=True)  # what transformers' SDPA reads of a SmolLM2 layer


def test_a_row_past_the_float64_budget_is_sdpa_again_and_a_big_batch_goes_a_few_rows_at_a_time(monkeypatch):
    q, k, v = heads(4, 37, torch.bfloat16, seed=2)
    float64 = step(q, k, v)
    monkeypatch.setattr(attention_module, "MAX_SCORES", 2 * 9 * 37)  # two rows at a time
    assert torch.equal(step(q, k, v), float64)
    monkeypatch.setattr(attention_module, "MAX_SCORES", 9 * 37 - 1)  # not even one row
    with batch_invariant():
        sdpa = attention(GQA, q, k, v, None, scaling=0.125)[0]
    assert torch.equal(sdpa, sdpa_attention_forward(GQA, q, k, v, None, scaling=0.125)[0])
    assert torch.allclose(sdpa.float(), float64.float(), atol=2e-2)


def test_prompts_without_a_mask_are_causal_from_the_first_key_and_other_shapes_are_attention_too():
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(2, 9, 5, 64, generator=g).double(), torch.randn(2, 3, 8, 64, generator=g).double(), torch.randn(2, 3, 8, 32, generator=g).double()
    with batch_invariant():  # no mask and more keys than queries (a first read into an empty static cache)
        causal = attention(GQA, q, k, v, None, scaling=0.125)[0]
    assert causal.shape == (2, 5, 9, 32)
    assert torch.allclose(causal, sdpa_attention_forward(GQA, q, k, v, None, scaling=0.125)[0], atol=1e-12)
    per_head = torch.rand(2, 9, 1, 8, generator=g) > 0.3  # one mask row per head, for every query
    per_head[..., 0] = True
    with batch_invariant():
        masked = attention(GQA, q, k, v, per_head, scaling=0.125)[0]
    assert torch.allclose(masked, sdpa_attention_forward(GQA, q, k, v, per_head, scaling=0.125)[0], atol=1e-12)


def test_a_bidirectional_layer_without_a_mask_is_left_to_sdpa():
    q, k, v = heads(2, 6, torch.float32, seed=4)
    q = q.expand(2, 9, 6, 64).contiguous()
    encoder = SimpleNamespace(num_key_value_groups=3, is_causal=False)
    with batch_invariant():
        out = attention(encoder, q, k, v, None, scaling=0.125, is_causal=None)[0]
    assert torch.equal(out, sdpa_attention_forward(encoder, q, k, v, None, scaling=0.125, is_causal=None)[0])


def test_a_model_on_another_attention_is_left_as_it_is(make_lm):
    lm = make_lm("llama", seed=4)
    lm.model.set_attn_implementation("eager")
    assert not use_batch_invariant(lm.model)
    assert lm.model.config._attn_implementation == "eager"
