"""Float32 (and bfloat16) linear layers on CPU through oneDNN, with each weight reordered once ("prepacked").

PyTorch sends a float32 ``F.linear`` on CPU to MKL's sgemm, which takes a slow path on AMD CPUs: on a 2-core AMD
EPYC a product of 2 or 3 rows costs 2 or 3 times one row's, and the embedded model's (49152 × 576) output head
takes 6.5 ms per token. oneDNN's matmul on a weight reordered into its blocked layout (what ``torch.compile``'s
freezing pass does on CPU) is 2–3× faster there at every batch size and about flat from 1 to 8 rows, which is
what batched decoding for several users needs. Results differ from MKL's by float32 rounding (~1e-6 relative).
On that machine they were also batch-invariant (a row's result had the same bits whatever other rows shared the
product; MKL's were not), so a request batched with others computed what it computed alone. oneDNN split the
reduction of a lone row differently (K = 1536), so one row is computed as two identical rows. How oneDNN splits
work depends on the CPU and the thread count: that is an observation (tested at 1 and 2 threads and at every
core), not a guarantee.

bfloat16 layers are packed the same way on CPUs with native bfloat16 instructions (AVX512-BF16, AMX), where the
library loads models in bfloat16 by default: there ``F.linear`` reorders the weight on every call, and the packed
product is ~1.7× faster for a few rows (a decoder layer's (1536 × 576) product of 2 rows: 23 against 41 µs; the head
of 8 rows: 1.1 against 1.9 ms), with the same bits as ``F.linear`` and, on that machine, batch-invariant as well. On
an Intel Xeon with AMX, bfloat16 products of up to 32 rows were batch-invariant too, at 1 and 2 threads, but one of
33 or more rows took another kernel, whose rows' last bits differ from theirs alone (a server's prompts read
together: 44 rows). Inside :func:`~lmswitch.core.attention.batch_invariant` (a server's decode) a bfloat16 product
is therefore computed :data:`INVARIANT_ROWS` rows at a time; elsewhere it is one product, the fastest.

:func:`pack_linears` turns every plain ``nn.Linear`` of such a CPU model into a :class:`PackedLinear` (still an
``nn.Linear``: same parameters, same state dict, PEFT wraps it as before). It keeps a packed copy of its weight
(about the model's size again in memory), used only for inference: with autograd recording, another dtype or
device, it is an ordinary ``nn.Linear`` (and frees its copy). A weight replaced or changed in place is packed
again on the next call, but a change through ``.data`` is invisible to PyTorch's version counter (PEFT's
``merge_adapter`` makes one): call :func:`unpack_linears` before such changes, or :func:`refresh` after them.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from lmswitch.core.attention import in_batch_invariant

MAX_PACKED_BYTES = 4 * 2**30  # models with more linear weight bytes than this are left as they are (a second copy)
INVARIANT_ROWS = 32  # bfloat16 rows per product inside batch_invariant (the module docstring)


@functools.cache
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(errors="ignore")
    except OSError:
        return ""


@functools.cache
def cpu_has_fast_bf16() -> bool:
    """Whether this CPU has native bfloat16 matrix instructions (AVX512-BF16 or AMX), read from /proc/cpuinfo."""
    return "avx512_bf16" in _cpuinfo() or "amx_bf16" in _cpuinfo()


def cpu_name() -> str:
    """The CPU's model name ("AMD EPYC"), with "(AVX512-BF16)" or "(AMX)" where bfloat16 is native (the two took other
    kernels: the module docstring); "" where it cannot be read."""
    names = [line.partition(":")[2].strip() for line in _cpuinfo().splitlines() if line.startswith("model name")]
    name = names[0] if names else platform.processor()
    if not (name and cpu_has_fast_bf16()):
        return name
    return f"{name} ({'AMX' if 'amx_bf16' in _cpuinfo() else 'AVX512-BF16'})"


@functools.cache
def available() -> bool:
    """Whether this PyTorch build's oneDNN packed linear works here (a tiny product checked against ``F.linear``)."""
    try:
        w, x = torch.randn(8, 16), torch.randn(3, 16)
        out = torch.ops.mkldnn._linear_pointwise(x, torch.ops.mkldnn._reorder_linear_weight(w, None), None, "none", [], "")
        return torch.allclose(out, F.linear(x, w), rtol=1e-4, atol=1e-5)
    except (AttributeError, RuntimeError, TypeError):
        return False


def mm_t(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a bᵀ`` of two 2-D tensors, through oneDNN when both are contiguous float32 CPU tensors with nothing to
    differentiate (the training solver's (n × 576) × (576 × 576) products: ~2× faster than MKL's sgemm on the AMD
    EPYC above), else ``torch.mm``."""
    if available() and _fast(a, b, None) and a.is_contiguous() and b.is_contiguous() and a.dim() == b.dim() == 2:
        return torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")
    return a @ b.T


class PackedLinear(nn.Linear):
    """``nn.Linear`` whose CPU inference (float32, or bfloat16 on CPUs made for it) runs on a oneDNN-packed copy of
    its weight."""

    _packed: tuple | None = None  # (the weight's identity and version when packed, the packed weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)

    def linear(self, x: torch.Tensor, *, bias: bool = True) -> torch.Tensor:
        """``x Wᵀ (+ b)``, without this module's hooks; ``bias=False`` leaves the bias out."""
        w, b = self.weight, self.bias if bias else None
        if not _fast(x, w, b):
            if not _packable(w):
                self._packed = None  # moved to another device or dtype: the CPU copy would only take memory
            return F.linear(x, w, b)
        rows = x.reshape(-1, x.shape[-1])
        if len(rows) > INVARIANT_ROWS and w.dtype == torch.bfloat16 and in_batch_invariant():
            out = torch.cat([self._product(rows[s : s + INVARIANT_ROWS], b) for s in range(0, len(rows), INVARIANT_ROWS)])
        else:
            out = self._product(rows, b)
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def _product(self, rows: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        """``rows Wᵀ (+ b)`` of (n, K) rows in one oneDNN product; one row is computed as two (the module docstring)."""
        n = len(rows)
        if n == 1:
            rows = rows.expand(2, -1).contiguous()
        return torch.ops.mkldnn._linear_pointwise(rows, self._packed_weight(), b, "none", [], "")[:n]

    def _packed_weight(self) -> torch.Tensor:
        """The weight in oneDNN's layout, packed again when the weight has been replaced or changed in place."""
        w = self.weight
        key = (w.data_ptr(), w._version, tuple(w.shape))
        if self._packed is None or self._packed[0] != key:
            self._packed = (key, torch.ops.mkldnn._reorder_linear_weight(w.detach(), None))
        return self._packed[1]

    def __getstate__(self) -> dict:  # copies and pickles carry the weight, not its packed form (rebuilt on first use)
        state = super().__getstate__()
        state.pop("_packed", None)
        return state


def packed_dtypes() -> tuple[torch.dtype, ...]:
    """The weight dtypes packed here: float32, and bfloat16 where the CPU multiplies it natively."""
    return (torch.float32, torch.bfloat16) if cpu_has_fast_bf16() else (torch.float32,)


def _packable(w: torch.Tensor) -> bool:
    return w.dtype in packed_dtypes() and w.device.type == "cpu" and not w.is_inference()


def _fast(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> bool:
    """Whether ``x Wᵀ + b`` may take the packed path: a packed dtype on CPU (the input's the weight's), nothing to
    differentiate."""
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or (b is not None and b.requires_grad)):
        return False
    return _packable(w) and x.dtype == w.dtype and (b is None or b.dtype == w.dtype) and x.device.type == "cpu" and x.numel() > 0


def pack_linears(model: nn.Module) -> int:
    """Give every plain ``nn.Linear`` of ``model`` a packed CPU path; returns how many (0 when unavailable).

    Layers that are not of a packed dtype (:func:`packed_dtypes`) on CPU (or are inference tensors), that accelerate manages (offloaded or dispatched)
    or that another library has subclassed or patched are left as they are, and so is a model whose linear
    weights exceed :data:`MAX_PACKED_BYTES` (the packed copies would double them).
    """
    layers = [m for m in model.modules() if type(m) is nn.Linear and _plain(m)]
    if not available() or sum(m.weight.numel() * m.weight.element_size() for m in layers) > MAX_PACKED_BYTES:
        return 0
    for module in layers:
        module.__class__ = PackedLinear
    return len(layers)


def unpack_linears(model: nn.Module) -> int:
    """Undo :func:`pack_linears`: the layers are plain ``nn.Linear`` again and the packed copies are freed."""
    unpacked = 0
    for module in model.modules():
        if type(module) is PackedLinear:
            module.__dict__.pop("_packed", None)
            module.__class__ = nn.Linear
            unpacked += 1
    return unpacked


class ContiguousLinear(nn.Linear):
    """``nn.Linear`` that makes its input contiguous first.

    ``generate`` applies the output head to the last position of every row, a strided slice of the hidden states.
    On CPU, a bfloat16 ``F.linear`` of such a 3-D slice becomes a batched product with the weight broadcast to every
    row, copying the (49152 × 576) head once per row: 1.1 s for the prefill of 30 rows, against 4 ms for the same
    product on a contiguous copy of the 30 rows. (Float32 takes a fast path either way.)
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.contiguous(), self.weight, self.bias)


def contiguous_input(layer: nn.Module) -> bool:
    """Make a plain ``nn.Linear`` (the output head) whose weight is not float32 a :class:`ContiguousLinear`; False
    when it is float32 (left to :func:`pack_linears`, as a packed bfloat16 head is) or not plain (managed by accelerate or patched by another
    library): those are left as they are."""
    plain = type(layer) is nn.Linear and not hasattr(layer, "_hf_hook") and "forward" not in layer.__dict__
    if not plain or layer.weight.dtype == torch.float32:
        return False
    layer.__class__ = ContiguousLinear
    return True


def refresh(model: nn.Module) -> None:
    """Drop the packed copies so that each is packed again from the current weights on its next use (after changes made
    through ``.data``, which PyTorch does not count)."""
    for module in model.modules():
        if type(module) is PackedLinear:
            module.__dict__.pop("_packed", None)


def _plain(module: nn.Linear) -> bool:
    hooked = hasattr(module, "_hf_hook") or "forward" in module.__dict__
    return not hooked and _packable(module.weight)
