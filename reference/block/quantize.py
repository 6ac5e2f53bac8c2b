"""Block quantizers byte-identical to the field's: per-token-group activations and N x K weight blocks (issue 46).

Activations, ``rule="kernel"``: vLLM's CUDA ``per_token_group_quant_8bit`` (csrc/quantization/w8a8/fp8/
per_token_group_quant.cu @0f5257e2:45-84; reached for e4m3 and int8 from vLLM 0.34.0 fp8_utils.py:705-720 and
int8_utils.py:170-174), per token and group of K, in float32: ``absmax = fmaxf(fl32(1e-10), max |x|)`` (:45, :51-52);
``s = absmax / qmax`` (one IEEE division, qmax 127 | 448, :66); ``q = fminf(fmaxf(x / s, qmin), qmax)`` (:83, a
division, not ``x * (1/s)``); int8: ``int8_t(q)``, a C++ conversion that TRUNCATES toward zero (:84); e4m3: RNE.
``use_ue8m0``: ``s`` rounded up to a power of two by its bits (exponent + 1 if the mantissa is non-zero: the register
kernel of the same file, the path of bf16/fp16 groups of 128). ``rule="native"``: vLLM's torch references, e4m3
``QuantFP8._quantize_group_native`` (input_quant_fp8.py:233-266: ``s = max(absmax / 448, 1/(448*512))``, ue8m0
``exp2(ceil(log2 s))``, ``q = e4m3(clamp(x / s))``) and int8 ``native_per_token_group_quant_int8``
(tests/kernels/quant_utils.py: absmax clamped to 1e-10 in x's dtype, ``s = absmax / 127``, ``q = clamp(rne(x / s))``).
vLLM requires K % group == 0 (fp8_utils.py:666, int8_utils.py:154); a short last group here covers the remaining
columns, which equals the zero padding of input_quant_fp8.py:238-243. Scales: float32 [M, ceil(K / group)], or the
same values with strides (1, M) (``column_major_scales``, fp8_utils.py:694-698).

Weights, compressed-tensors 0.20.1's BLOCK strategy (``FP8_BLOCK``, quant_scheme.py:447-454): zero-padded to whole
blocks (helpers.py:416-444), per block ``lo = min(amin, 0)``, ``hi = max(amax, 0)`` in the weight dtype
(helpers.py:72-73), ``scale = max(|lo|, |hi|) / (bit_range / 2)`` (helpers.py:82-88: 127.5 | 448, a division in the
weight dtype), a zero scale -> ``finfo(w.dtype).eps`` (helpers.py:117-128), ``q = cast(clamp(w / scale + 0))`` with
RNE (forward_helpers.py:536-541, quant_args.py:501-512). The scale is returned widened exactly to float32.
``use_ue8m0``: that scale widened to float32 and rounded up to a power of two (:func:`ceil_to_ue8m0`, as DeepGEMM's
ue8m0 path requires of both operands), then ``q = cast(clamp(w / scale))`` in float32 from the float weight (one
quantization; the field's ``requant_weight_ue8m0`` instead requantizes an already quantized weight)."""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import numpy as np
import torch
import torch.nn.functional as F

from reference.errors import OperandError
from reference.fp8.quantize import MIN_SCALING_FACTOR, to_e4m3_saturated
from reference.quantize import DIVISIONS, check_float_matrix
from reference.validate import OPERAND_DTYPES

#: ``rule`` of :func:`quantize_activation_per_token_group`: vLLM's CUDA kernel or its torch references.
ACTIVATION_GROUP_RULES = ("kernel", "native")
#: vLLM's default ``eps`` (1e-10) as the kernel receives it: ``(float)eps``.
GROUP_EPS = float(np.float32(1e-10))
_QMAX = {"int8": 127.0, "e4m3": 448.0}
_QMIN = {"int8": -128.0, "e4m3": -448.0}


class BlockOperands(NamedTuple):
    """Block-scaled GEMM operands of block46.md: a [M, K], b [N, K], scale_a fp32 [M, KB], scale_b fp32 [NB, KB]."""

    a: torch.Tensor
    b: torch.Tensor
    scale_a: torch.Tensor
    scale_b: torch.Tensor
    bias: Optional[torch.Tensor]


def _check_dtype(dtype) -> None:
    if dtype not in OPERAND_DTYPES:
        raise OperandError(f"dtype={dtype!r} is not one of {tuple(OPERAND_DTYPES)}")


def _check_size(v, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise OperandError(f"{name} must be a positive int, got {v!r}")
    return v


def ceil_to_ue8m0(s: torch.Tensor) -> torch.Tensor:
    """Positive normal float32 ``s`` rounded up to a power of two by its bits: exponent + 1 when the mantissa is not
    zero, mantissa cleared (vLLM's register kernel, per_token_group_quant.cu; DeepGEMM ``ceil_to_ue8m0``)."""
    bits = s.contiguous().view(torch.int32)
    exp = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return (exp << 23).view(torch.float32)


def quantize_activation_per_token_group(
    x: torch.Tensor,
    group_size: int = 128,
    dtype: str = "int8",
    column_major_scales: bool = False,
    rule: str = "kernel",
    use_ue8m0: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q [M, K] int8 | float8_e4m3fn, scale float32 [M, ceil(K / group_size)])`` of finite [M, K] bf16/fp16/fp32
    activations, per token and group of ``group_size`` along K (module docstring: ``rule``, ``use_ue8m0``, the short
    last group); ``column_major_scales``: the scale with strides (1, M). An all-zero group gets the eps scale and q 0.
    OperandError: non-tensor, unsupported dtype, not 2-D / empty, non-finite, bad group_size / dtype / rule."""
    check_float_matrix(x, "x", "M,K")
    g = _check_size(group_size, "group_size")
    _check_dtype(dtype)
    if rule not in ACTIVATION_GROUP_RULES:
        raise OperandError(f"rule={rule!r} is not one of {ACTIVATION_GROUP_RULES}")
    if use_ue8m0 and rule == "native" and dtype == "int8":
        raise OperandError("use_ue8m0 has no int8 native rule (vLLM's ue8m0 scales are FP8's)")
    m, k = x.shape
    groups = math.ceil(k / g)
    x = x.detach().cpu()
    xg = F.pad(x, (0, groups * g - k)).view(m, groups, g)  # zeros leave every |x| max unchanged
    xf = xg.to(torch.float32)
    qmax = _QMAX[dtype]
    if rule == "kernel":
        absmax = torch.maximum(xf.abs().amax(dim=2), torch.tensor(GROUP_EPS, dtype=torch.float32))
        s = torch.div(absmax, torch.tensor(qmax, dtype=torch.float32))
        if use_ue8m0:
            s = ceil_to_ue8m0(torch.maximum(s.abs(), torch.tensor(GROUP_EPS, dtype=torch.float32)))
    elif dtype == "e4m3":
        s = torch.clamp(torch.div(xf.abs().amax(dim=2), qmax), min=MIN_SCALING_FACTOR)
        if use_ue8m0:
            s = torch.exp2(torch.ceil(torch.log2(s)))
    else:
        s = torch.div(xg.abs().amax(dim=2).clamp(min=1e-10).to(torch.float32), 127)
    v = xf / s[:, :, None]
    if dtype == "e4m3":
        q = to_e4m3_saturated(v)
    elif rule == "kernel":
        q = torch.trunc(torch.clamp(v, -128.0, 127.0)).to(torch.int8)
    else:
        q = torch.clamp(torch.round(v), -128.0, 127.0).to(torch.int8)
    q = q.view(m, groups * g)[:, :k].contiguous()
    s = s.contiguous()
    return q, (s.t().contiguous().t() if column_major_scales else s)


def quantize_weight_blocks(
    w: torch.Tensor,
    block: tuple[int, int] = (128, 128),
    dtype: str = "int8",
    division: str = "weight_dtype",
    use_ue8m0: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q [N, K] int8 | float8_e4m3fn, scale float32 [ceil(N / bn), ceil(K / bk)])`` of a finite [N, K]
    bf16/fp16/fp32 weight in ``block = (bn, bk)`` blocks, as compressed-tensors' block strategy (module docstring);
    partial edge blocks are zero-padded. ``division``: as :func:`reference.quantize.quantize_weight_per_channel`
    (``"float32"``: the library's Triton path on CUDA); ``use_ue8m0``: power-of-two block scales (module docstring).
    OperandError: bad w, block, dtype or division."""
    check_float_matrix(w, "w", "N,K")
    if not isinstance(block, (tuple, list)) or len(block) != 2:
        raise OperandError(f"block must be a (block_n, block_k) pair, got {block!r}")
    bn, bk = _check_size(block[0], "block_n"), _check_size(block[1], "block_k")
    _check_dtype(dtype)
    if division not in DIVISIONS:
        raise OperandError(f"division={division!r} is not one of {DIVISIONS}")
    n, k = w.shape
    nb, kb = math.ceil(n / bn), math.ceil(k / bk)
    wp = F.pad(w.detach().cpu(), (0, kb * bk - k, 0, nb * bn - n))
    blocks = wp.view(nb, bn, kb, bk)
    zero = torch.zeros((), dtype=w.dtype)
    lo = torch.minimum(blocks.amin(dim=(1, 3)), zero)
    hi = torch.maximum(blocks.amax(dim=(1, 3)), zero)
    half_range = (torch.tensor(_QMAX[dtype]) - torch.tensor(_QMIN[dtype])).to(w.dtype) / 2  # 127.5 | 448
    scale = torch.maximum(lo.abs(), hi.abs()) / half_range
    scale = torch.where(scale == 0, torch.tensor(torch.finfo(w.dtype).eps, dtype=w.dtype), scale)
    if use_ue8m0:
        scale, division = ceil_to_ue8m0(scale.to(torch.float32)), "float32"
    full = scale.repeat_interleave(bn, dim=0).repeat_interleave(bk, dim=1)
    scaled = wp / full if division == "weight_dtype" else wp.float() / full.float()
    scaled = scaled + torch.zeros((), dtype=scaled.dtype)  # the +0 zero point: -0.0 -> +0.0
    if dtype == "e4m3":
        q = to_e4m3_saturated(scaled)
    else:
        q = torch.round(torch.clamp(scaled, -128.0, 127.0)).to(torch.int8)
    return q[:n, :k].contiguous(), scale.to(torch.float32).contiguous()


def block_quantize_layer(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    block: tuple[int, int] = (128, 128),
    dtype: str = "int8",
    column_major_scales: bool = False,
    rule: str = "kernel",
    out_dtype: torch.dtype = torch.bfloat16,
) -> BlockOperands:
    """One float layer capture (``x`` bf16 [M, K] as stored with ``store_raw``, the parent's float ``w`` [N, K] and
    ``bias`` [N]) -> :class:`BlockOperands` for ``scaled_mm(..., block_size=block)``: ``x`` per token and group of
    ``block[1]`` (:func:`quantize_activation_per_token_group`, ``rule``), ``w`` per block
    (:func:`quantize_weight_blocks`), the bias cast to ``out_dtype`` (as the captures replay it). OperandError: bad
    operands, K mismatch, bias not a finite [N] float tensor."""
    check_float_matrix(x, "x", "M,K")
    check_float_matrix(w, "w", "N,K")
    if x.shape[1] != w.shape[1]:
        raise OperandError(f"x is [M, K] = {tuple(x.shape)} but w is [N, K] = {tuple(w.shape)}: K differs")
    if not isinstance(block, (tuple, list)) or len(block) != 2:
        raise OperandError(f"block must be a (block_n, block_k) pair, got {block!r}")
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or not bias.dtype.is_floating_point or tuple(bias.shape) != (w.shape[0],):
            raise OperandError(f"bias must be a float [N] = [{w.shape[0]}] tensor or None")
        if not bool(torch.isfinite(bias).all()):
            raise OperandError("bias has non-finite values")
        bias = bias.detach().cpu().to(out_dtype).contiguous()
    a, sa = quantize_activation_per_token_group(x, block[1], dtype, column_major_scales, rule)
    b, sb = quantize_weight_blocks(w, block, dtype)
    return BlockOperands(a, b, sa, sb, bias)
