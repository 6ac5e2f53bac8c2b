"""Asymmetric int8 activations: a zero point per tensor or per token, bit-level (issue 46 item 5).

Call: ``scaled_mm(a, b, scale_a, scale_b, out_dtype, bias=None, azp_adj=..., azp=None)``. ``a`` holds ``q = rnd(x /
s_a) + z`` (``x ~ s_a * (q - z)``); ``azp_adj`` int32 [N]: per-tensor ``z * colsum(b)`` precomputed by the caller, azp
None; per-token ``colsum(b)`` with ``azp`` int32 [M] (vllm 0.34.0 vllm/_custom_ops.py:798-824; csrc/quantization/w8a8/
cutlass/Epilogues.md:116-168). The caller precomputes ``colsum = weight.sum(dim=0, dtype=torch.int32)`` of the [K, N]
weight, times the static azp in int32 for per-tensor (vllm/model_executor/kernels/linear/scaled_mm/cutlass.py:102-115).

Where the correction is applied (csrc/cutlass_extensions/epilogue/scaled_mm_epilogues_c3x.hpp:259-281 per-tensor,
:324-356 per-token; scaled_mm_epilogues_c2x.hpp:196-216, :264-295 the same): on the int32 accumulator, in int32,
before any float op. ``Sm90Compute<minus, float, int32_t, round_to_nearest>`` forms ``acc - azp_adj`` (per-token
``acc - azp * azp_adj``, the product ``Sm90Compute<multiplies, int32_t, int32_t>``) in int32 and converts it to float32
with RNE; then ``* s_w`` and ``s_a * x + bias`` as ScaledEpilogueBias (c3x.hpp:165-181), so the kernel's declared
standard epilogue applies unchanged to ``float32(acc - azp * azp_adj)``. int32 arithmetic wraps mod 2**32 (PTX
``sub.s32`` / ``mul.lo.s32``): intermediates may leave int32 when the corrected value fits; when ``acc - azp *
azp_adj`` itself leaves int32 the kernel's value is its ``wrap32`` (a sign flip), which :func:`asymmetric_reference`
gives and counts (``outside_int32``). The field's other variant, the correction subtracted in float after the epilogue
(vLLM's Triton path scaled_mm/triton.py:133-150; the CPU oneDNN path csrc/cpu/dnnl_kernels.cpp:215-223), is not
modelled (:data:`CORRECTIONS`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from reference.accumulate import exact_int_mm
from reference.contract import CUTLASS_STYLE
from reference.epilogue import apply_steps
from reference.errors import ContractError, OperandError
from reference.validate import check_zero_point_operands, normalize_scales, validate_operands

#: the zero-point forms: ``azp`` None (``z`` folded into ``azp_adj``) or one per token
ZERO_POINTS = ("per-tensor", "per-token")
#: where the correction is applied: ``int32`` = on the int32 accumulator before the float epilogue (vLLM CUTLASS)
CORRECTIONS = ("int32",)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@dataclass(frozen=True)
class AzpDeclaration:
    """A kernel's asymmetric-activation declaration: ``kinds`` (a subset of :data:`ZERO_POINTS` it takes) and
    ``correction`` (one of :data:`CORRECTIONS`)."""

    kinds: tuple
    correction: str = "int32"

    def label(self) -> str:
        return f"azp {'/'.join(self.kinds)}, correction in {self.correction}"

    def to_dict(self) -> dict:
        return {"kinds": list(self.kinds), "correction": self.correction}


def parse_azp_declaration(v) -> AzpDeclaration:
    """An :class:`AzpDeclaration` from itself, ``"per-token"`` / ``"per-tensor"``, a list of them, or ``{"kinds":
    ..., "correction": "int32"}``. ContractError (one line) otherwise."""
    if isinstance(v, AzpDeclaration):
        v = v.to_dict()
    corr = "int32"
    if isinstance(v, dict):
        unknown = sorted(set(v) - {"kinds", "correction"})
        if unknown:
            raise ContractError(f"azp={v!r}: unknown key(s) {unknown}; expected 'kinds' and 'correction'")
        corr = v.get("correction", "int32")
        v = v.get("kinds")
    kinds = (v,) if isinstance(v, str) else tuple(v) if isinstance(v, (list, tuple)) else None
    if not kinds or any(k not in ZERO_POINTS for k in kinds) or len(set(kinds)) != len(kinds):
        raise ContractError(f"azp={v!r}: expected one or both of {list(ZERO_POINTS)}")
    if corr not in CORRECTIONS:
        raise ContractError(f"azp correction={corr!r}: expected one of {list(CORRECTIONS)}")
    return AzpDeclaration(tuple(k for k in ZERO_POINTS if k in kinds), corr)


def wrap32(x: Tensor) -> Tensor:
    """int64 -> int64: ``x`` reduced to two's-complement int32 (what int32 arithmetic gives)."""
    return (x + 2**31).remainder(2**32) - 2**31


def outside_int32(x: Tensor) -> Tensor:
    """bool: elements of int64 ``x`` outside [-2**31, 2**31 - 1]."""
    return (x < INT32_MIN) | (x > INT32_MAX)


def column_sums(b: Tensor) -> Tensor:
    """``colsum(b)`` int32 [N] of int8 ``b`` [N, K]: vLLM's ``weight.sum(dim=0, dtype=torch.int32)`` of the [K, N]
    weight (scaled_mm/cutlass.py:110), the per-token ``azp_adj``."""
    return b.sum(dim=1, dtype=torch.int32)


def precomputed_azp_adj(b: Tensor, zero_point: Optional[int] = None) -> Tensor:
    """The caller's ``azp_adj`` int32 [N]: :func:`column_sums` (per-token, ``zero_point`` None) or the per-tensor
    ``zero_point * colsum`` as an int32 product (wraps mod 2**32; scaled_mm/cutlass.py:111-114)."""
    cs = column_sums(b)
    return cs if zero_point is None else torch.tensor(int(zero_point), dtype=torch.int32) * cs


def corrected_accumulator(acc: Tensor, azp_adj: Tensor, azp: Optional[Tensor] = None) -> Tensor:
    """The exact corrected accumulator int64 [M, N]: ``acc - azp_adj`` (per-tensor) or ``acc - azp * azp_adj``
    (per-token), every operand widened to int64 (no wrap)."""
    adj = azp_adj.reshape(1, -1).to(acc.device, torch.int64)
    acc = acc.to(torch.int64)
    if azp is None:
        return acc - adj
    return acc - azp.reshape(-1, 1).to(acc.device, torch.int64) * adj


@dataclass
class AsymmetricReference:
    """One asymmetric call's ground truth: ``output`` out_dtype [M, N] (the epilogue of ``float32(declared)``);
    ``corrected`` int64 [M, N] the exact ``acc - azp * azp_adj``; ``declared`` int64 [M, N] what the int32 correction
    gives (``wrap32(corrected)``); ``outside`` bool [M, N]: corrected outside int32 (there ``declared`` wrapped);
    ``raw_outside`` bool [M, N]: the uncorrected accumulator ``a @ b.T`` outside int32; ``outside_int32`` /
    ``raw_outside_int32``: their counts."""

    output: Tensor
    corrected: Tensor
    declared: Tensor
    outside: Tensor
    raw_outside: Tensor

    @property
    def outside_int32(self) -> int:
        return int(self.outside.sum())

    @property
    def raw_outside_int32(self) -> int:
        return int(self.raw_outside.sum())


def asymmetric_reference(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    epilogue=CUTLASS_STYLE,
    bias: Optional[Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
    azp_adj: Optional[Tensor] = None,
    azp: Optional[Tensor] = None,
) -> AsymmetricReference:
    """The exact reference of an asymmetric call (module docstring): operands as :func:`reference.validate.
    validate_operands` with ``azp_adj`` required (OperandError, one line); exact int64 ``a @ b.T``; the correction
    in int32 (``wrap32`` of the exact ``acc - azp * azp_adj``); then ``epilogue`` (anything ``reference.epilogue.
    apply_steps`` reads; default vLLM's CUTLASS contract) on its float32 RNE value."""
    if azp_adj is None and azp is None:
        raise OperandError("azp_adj is required: int32 [N], colsum(b) (per-token) or z * colsum(b) (per-tensor)")
    m, _k, n = validate_operands(a, b, scale_a, scale_b, bias, out_dtype, "int8", None, azp_adj, azp)
    acc = exact_int_mm(a, b)
    corrected = corrected_accumulator(acc, azp_adj, azp)
    declared = wrap32(corrected)
    sa, sw = normalize_scales(scale_a, scale_b, m, n)
    out = apply_steps(declared, sa, sw, epilogue, bias=bias, out_dtype=out_dtype)
    return AsymmetricReference(out, corrected, declared, outside_int32(corrected), outside_int32(acc.to(torch.int64)))


def reference_azp_scaled_mm(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: Optional[Tensor] = None,
    azp_adj: Optional[Tensor] = None,
    azp: Optional[Tensor] = None,
    epilogue=CUTLASS_STYLE,
) -> Tensor:
    """``asymmetric_reference(...).output``: the reference as a ``scaled_mm`` with the azp call's signature."""
    return asymmetric_reference(a, b, scale_a, scale_b, epilogue, bias, out_dtype, azp_adj, azp).output


def zero_point_kind(azp_adj: Optional[Tensor], azp: Optional[Tensor], m: int, n: int) -> Optional[str]:
    """None for a symmetric call (no ``azp_adj``), else ``"per-tensor"`` / ``"per-token"`` (OperandError, one line,
    on malformed zero-point operands)."""
    if azp_adj is None and azp is None:
        return None
    return check_zero_point_operands(azp_adj, azp, m, n)


def quantize_asymmetric_per_token(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """compressed-tensors 0.20.1's dynamic asymmetric int8 TOKEN quantizer, per row of ``x`` [..., K] (float dtype)
    -> ``(q int8 [..., K], scale x.dtype [..., 1], zero_point int8 [..., 1])``, every op in ``x``'s dtype.

    Per row (quantization/utils/helpers.py:161-194 reduces the dims after (0, 1); a 2-D input is reduced whole there:
    pass [1, M, K] to the library): ``lo = min(amin, 0)``, ``hi = max(amax, 0)`` (:72-73); ``s = (hi - lo) / 255``
    (:98); ``z = clamp(-128 - lo / s, -128, 127)`` (:99-100); a zero ``s`` -> ``finfo(x.dtype).eps`` (:123-128);
    ``z`` rounded half-to-even to int8 (:131-133, quant_args.py:473); ``q = rne(clamp(x / s + z, -128, 127))``
    (lifecycle/forward_helpers.py:536-541, quant_args.py:505-512). OperandError for a non-float ``x``."""
    if not isinstance(x, Tensor) or not x.is_floating_point() or x.dim() < 1 or x.shape[-1] == 0:
        raise OperandError(f"x must be a float tensor [..., K] with K > 0, got {getattr(x, 'dtype', type(x).__name__)}")
    dt = x.dtype
    lo = torch.minimum(x.amin(dim=-1, keepdim=True), torch.zeros((), dtype=dt))
    hi = torch.maximum(x.amax(dim=-1, keepdim=True), torch.zeros((), dtype=dt))
    s = (hi - lo) / torch.tensor(255.0, dtype=dt)
    zf = torch.clamp(torch.tensor(-128.0) - lo / s, -128.0, 127.0)
    s = torch.where(s == 0, torch.tensor(torch.finfo(dt).eps, dtype=dt), s)
    z = torch.round(torch.clamp(zf, -128, 127)).to(torch.int8)
    scaled = x / s
    scaled += z.to(dt)
    q = torch.round(torch.clamp(scaled, -128.0, 127.0)).to(torch.int8)
    return q, s, z
