"""oneDNN-packed linear layers (lmswitch.core.packed): same maths as nn.Linear, faster on CPU, never in the way."""

import copy
import io
import os

import pytest
import torch
from conftest import build_lm, random_ids, random_switch
from torch import nn

from lmswitch.core import packed as packed_module
from lmswitch.core.attention import batch_invariant
from lmswitch.core.models import LanguageModel
from lmswitch.core.packed import PackedLinear, pack_linears, refresh, unpack_linears
from lmswitch.core.steering import steer


def _pair(family: str = "llama") -> tuple[LanguageModel, LanguageModel]:
    """The same tiny model twice: plain, and with packed linear layers."""
    plain, packed = build_lm(family, seed=3), build_lm(family, seed=3)
    assert pack_linears(packed.model) == sum(type(m) is nn.Linear for m in plain.model.modules()) > 0
    return plain, packed


def _logits(lm: LanguageModel, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return lm.model(input_ids=ids).logits


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt_neox", "granite", "cohere"])  # the last two scale the head's output
def test_packed_layers_compute_what_plain_ones_do(family):
    plain, packed = _pair(family)
    ids = random_ids(plain, 3, 9)
    torch.testing.assert_close(_logits(packed, ids), _logits(plain, ids), rtol=1e-5, atol=1e-5)
    assert isinstance(packed.head, PackedLinear) and isinstance(packed.head, nn.Linear)
    assert packed.head._packed is not None  # the packed path ran, not the fallback
    hidden = torch.randn(4, plain.hidden_size)
    for bias in (True, False):
        torch.testing.assert_close(packed.raw_logits(hidden, bias=bias), plain.raw_logits(hidden, bias=bias),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", sorted({1, 2, os.cpu_count() or 1}))
@pytest.mark.parametrize("shape", [(1536, 576), (576, 1536), (64, 500)])
def test_a_row_gives_the_same_bits_whatever_rows_share_the_product(shape, threads):
    """Batch invariance: what lets a batched request compute exactly what it computes alone."""
    layer = nn.Linear(*shape)
    assert pack_linears(layer) == 1
    x = torch.randn(80, shape[0], generator=torch.Generator().manual_seed(0))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            alone = layer(x[:1])
            for rows in (2, 3, 8, 17, 80):
                assert torch.equal(layer(x[:rows])[:1], alone), rows
            assert torch.equal(layer(x[None, :1]), alone[None])  # shapes (1, 1, K) and (K,) too
            assert torch.equal(layer(x[0]), alone[0])
    finally:
        torch.set_num_threads(before)


def test_the_state_dict_is_unchanged():
    plain, packed = _pair()
    a, b = plain.model.state_dict(), packed.model.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert packed.fingerprint == plain.fingerprint


def test_zero_eps_is_the_packed_model_exactly():
    _, packed = _pair()
    ids, switch = random_ids(packed, 2, 7), random_switch(packed, seed=1)
    with steer(packed, [(switch, 0.0)]):
        steered = _logits(packed, ids)
    assert torch.equal(steered, _logits(packed, ids))
    with steer(packed, [(switch, 3.0)]):
        assert not torch.allclose(_logits(packed, ids), steered)


def test_gradients_take_the_plain_path():
    plain, packed = _pair()
    ids = random_ids(plain, 2, 6)
    grads = []
    for lm in (plain, packed):
        lm.head.weight.requires_grad_(True)
        lm.model(input_ids=ids).logits.logsumexp(-1).sum().backward()
        grads.append(lm.head.weight.grad)
        lm.head.weight.requires_grad_(False)
    torch.testing.assert_close(grads[1], grads[0])
    x = torch.randn(3, plain.hidden_size, requires_grad=True)
    packed.raw_logits(x).sum().backward()  # a gradient wrt the head input (the meter's maximisation) works too
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_a_weight_changed_in_place_is_packed_again():
    _, packed = _pair()
    ids = random_ids(packed, 2, 5)
    before = _logits(packed, ids)
    layer = packed.decoder_layers()[0].mlp.down_proj
    with torch.no_grad():
        layer.weight.mul_(0.0)
    after = _logits(packed, ids)
    unpack_linears(packed.model)
    torch.testing.assert_close(after, _logits(packed, ids), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(after, before)


def test_a_change_through_data_is_seen_after_refresh():
    """``.data`` changes (PEFT's merge) bypass the version counter: refresh() repacks."""
    plain, packed = _pair()
    ids = random_ids(plain, 2, 5)
    _logits(packed, ids)
    for lm in (plain, packed):
        lm.decoder_layers()[0].mlp.up_proj.weight.data += 0.5
    refresh(packed.model)
    torch.testing.assert_close(_logits(packed, ids), _logits(plain, ids), rtol=1e-5, atol=1e-5)


def test_a_trainable_bias_takes_the_plain_path():
    layer = nn.Linear(6, 4)
    pack_linears(layer)
    layer.weight.requires_grad_(False)
    layer(torch.randn(3, 6)).sum().backward()
    assert torch.equal(layer.bias.grad, torch.full((4,), 3.0))


def test_moved_layers_compute_and_free_their_packed_copy():
    _, packed = _pair()
    ids = random_ids(packed, 1, 4)
    _logits(packed, ids)
    packed.model.to(torch.float16)  # a dtype never packed
    assert _logits(packed, ids).dtype == torch.float16
    assert packed.head._packed is None


def test_inference_tensors_and_big_models_are_left_plain(monkeypatch):
    with torch.inference_mode():
        lm = build_lm("llama", seed=3)
    assert pack_linears(lm.model) == 0
    lm = build_lm("llama", seed=3)
    monkeypatch.setattr(packed_module, "MAX_PACKED_BYTES", 1000)
    assert pack_linears(lm.model) == 0


def test_copies_and_pickles_carry_the_weight_not_the_packing():
    _, packed = _pair()
    ids = random_ids(packed, 1, 5)
    expected = _logits(packed, ids)
    assert packed.head._packed is not None and "_packed" not in packed.head.__getstate__()
    torch.save(packed.model, io.BytesIO())  # pickling does not meet the opaque packed tensors
    twin = copy.deepcopy(packed.model)
    assert isinstance(twin.lm_head, PackedLinear) and twin.lm_head._packed is None
    with torch.no_grad():
        assert torch.equal(twin(input_ids=ids).logits, expected)


def test_only_float32_cpu_layers_are_packed_and_unpacking_restores_them():
    lm = build_lm("llama", seed=3)
    lm.model.to(torch.float16)
    assert pack_linears(lm.model) == 0
    lm.model.to(torch.float32)
    n = pack_linears(lm.model)
    assert n > 0 and pack_linears(lm.model) == 0  # already packed
    _logits(lm, random_ids(lm, 1, 4))
    assert unpack_linears(lm.model) == n
    assert all(type(m) is not PackedLinear for m in lm.model.modules())
    assert "_packed" not in lm.head.__dict__


@pytest.mark.real_model
def test_the_embedded_model_in_float32_is_packed_by_default(lm32):
    assert isinstance(lm32.head, PackedLinear)
    assert sum(isinstance(m, PackedLinear) for m in lm32.model.modules()) == 1 + 7 * len(lm32.decoder_layers())


@pytest.mark.real_model
def test_the_embedded_model_in_its_default_dtype_is_packed_where_the_cpu_is_made_for_it(lm):
    """bfloat16 (the default where the CPU multiplies it natively) is packed there; elsewhere the default is float32."""
    assert lm.model.dtype in packed_module.packed_dtypes()
    assert isinstance(lm.head, PackedLinear)
    assert sum(isinstance(m, PackedLinear) for m in lm.model.modules()) == 1 + 7 * len(lm.decoder_layers())


@pytest.mark.parametrize("threads", sorted({1, 2, os.cpu_count() or 1}))
def test_bfloat16_layers_pack_where_the_cpu_is_made_for_it_with_the_bits_of_f_linear(threads):
    """Same bits as ``F.linear``, and a row's bits whatever rows share the product (as float32); on a CPU without native
    bfloat16 the layer is left plain."""
    layer = nn.Linear(576, 1536).to(torch.bfloat16)
    plain = copy.deepcopy(layer)
    assert pack_linears(layer) == int(packed_module.cpu_has_fast_bf16())
    x = torch.randn(17, 576, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            alone = layer(x[:1])
            assert torch.equal(layer(x), plain(x))
            for rows in (2, 3, 8, 17):
                assert torch.equal(layer(x[:rows])[:1], alone), rows
            sliced = x.view(1, 17, 576)[:, -1:, :]  # the slice generate hands the head
            assert torch.equal(layer(x.view(17, 1, 576)[:, -1]), plain(x)) and torch.equal(layer(sliced), plain(x[-1:])[None])
    finally:
        torch.set_num_threads(before)
    if packed_module.cpu_has_fast_bf16():
        assert layer._packed is not None  # the packed path ran


@pytest.mark.parametrize("threads", sorted({1, 2, os.cpu_count() or 1}))
@pytest.mark.parametrize("shape", [(576, 576), (576, 1536), (576, 49152)])
def test_inside_batch_invariant_a_bfloat16_row_gets_its_bits_alone_whatever_the_rows(shape, threads):
    """A server's prompts read together make products of many rows (4 prompts of 11 tokens: 44): on an Intel Xeon with
    AMX, bfloat16 products of 33 rows or more took another kernel, and the rows' last bits were not theirs alone (a
    request's text then differed from its solo run); inside ``batch_invariant`` they are."""
    layer = nn.Linear(*shape, bias=False).to(torch.bfloat16)
    pack_linears(layer)
    x = torch.randn(100, shape[0], generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad(), batch_invariant():
            alone = torch.cat([layer(x[k : k + 1]) for k in range(len(x))])
            for rows in (2, 32, 33, 44, 65, 100):
                assert torch.equal(layer(x[:rows]), alone[:rows]), rows
            assert torch.equal(layer(x.view(4, 25, -1)), alone.view(4, 25, -1))  # (B, T, K) as a body pass gives it
    finally:
        torch.set_num_threads(before)


def test_mm_t_is_a_times_b_transposed_on_every_path():
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(300, 48, generator=g), torch.randn(40, 48, generator=g)
    torch.testing.assert_close(packed_module.mm_t(a, b), a @ b.T, rtol=1e-5, atol=1e-5)  # oneDNN where available
    torch.testing.assert_close(packed_module.mm_t(a.T.contiguous().T, b), a @ b.T, rtol=1e-5, atol=1e-5)  # not contiguous: torch.mm
    torch.testing.assert_close(packed_module.mm_t(a.bfloat16(), b.bfloat16()).float(), (a.bfloat16() @ b.bfloat16().T).float())
    w = b.clone().requires_grad_()
    packed_module.mm_t(a, w).sum().backward()  # something to differentiate: the autograd path
    torch.testing.assert_close(w.grad, a.sum(0).expand_as(b))


def test_a_bfloat16_head_gets_its_input_contiguous_and_computes_the_same():
    """generate hands the head a strided slice (each row's last position); in bfloat16 on CPU that slice made torch
    copy the head's weight once per row. The head of a bfloat16 model computes on a contiguous copy, the same values."""
    source = build_lm("llama", seed=3)
    lm = LanguageModel(model=source.model.to(torch.bfloat16), tokenizer=source.tokenizer, name="tiny-bf16")
    assert type(lm.head) is packed_module.ContiguousLinear and isinstance(lm.head, nn.Linear)  # (load_model packs it where it can)
    hidden = torch.randn(5, 7, lm.hidden_size, dtype=torch.bfloat16)
    sliced = hidden[:, -1:, :]
    assert not sliced.is_contiguous()
    with torch.no_grad():
        torch.testing.assert_close(lm.head(sliced), nn.functional.linear(sliced.contiguous(), lm.head.weight), rtol=0, atol=0)
    assert type(build_lm("llama", seed=3).head) is nn.Linear  # a float32 head is left to pack_linears


def test_cpu_name_is_read_from_cpuinfo(monkeypatch):
    monkeypatch.setattr(packed_module, "_cpuinfo", lambda: "processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t: avx2\n")
    monkeypatch.setattr(packed_module, "cpu_has_fast_bf16", lambda: False)
    assert packed_module.cpu_name() == "Test CPU 9000"
    monkeypatch.setattr(packed_module, "cpu_has_fast_bf16", lambda: True)
    assert packed_module.cpu_name() == "Test CPU 9000 (AVX512-BF16)"
    monkeypatch.setattr(packed_module, "_cpuinfo", lambda: "model name\t: Intel(R) Xeon(R) Processor\nflags\t: avx512_bf16 amx_bf16\n")
    assert packed_module.cpu_name() == "Intel(R) Xeon(R) Processor (AMX)"
