"""Deliberately wrong (and one right) FP8 (e4m3) kernels, one per FP8 trigger of issue 30, each failed by the default
FP8 suite (tests/conformance/test_fp8_suite.py); loadable as ``--kernel=buggy_fp8_kernels:<fn>``.

Every kernel declares the CUTLASS-style epilogue (``w_then_a``, bias in float32 before the one rounding) and an
accumulator; its accumulator is the exact sum rounded once to float32 (``exact``) or ``reference.fp8.
emulate_accumulation`` of a model (k increasing; bit-identical to ``fp8_kernels.emulated_accumulator``, and faster),
and its epilogue ``buggy_kernels.emulate`` (IEEE float32, RNE).
"""

from __future__ import annotations

import torch
from buggy_kernels import emulate

from conformance.kernels.loader import declare
from reference.epilogue import apply_steps
from reference.fp8 import E4M3, emulate_accumulation, exact_sum_fp32, parse_accumulator
from reference.validate import normalize_scales

#: What the emulated control declares and keeps (Hopper-like: 14 bits, truncation, fp32 promotion every 128).
HOPPER_LIKE = "fp32 bits=14 truncate promote=128"
#: What the narrow kernel keeps while declaring HOPPER_LIKE.
NARROWER = "fp32 bits=10 truncate promote=128"


def _acc(a: torch.Tensor, b: torch.Tensor, model: str = "exact") -> torch.Tensor:
    """float32 [M, N] accumulator of ``model`` on the CPU."""
    a, b = a.cpu(), b.cpu()
    if parse_accumulator(model).kind == "exact":
        return exact_sum_fp32(a, b)
    return emulate_accumulation(a, b, model)


def _scales(a, b, scale_a, scale_b) -> tuple[torch.Tensor, torch.Tensor]:
    return normalize_scales(scale_a.cpu(), scale_b.cpu(), a.shape[0], b.shape[0])


def _cutlass(acc, sa, sb, out_dtype, bias, bias_point: str = "fp32_before_round") -> torch.Tensor:
    return emulate(acc, sa, sb, "w_then_a", bias_point, None if bias is None else bias.cpu(), out_dtype)


def _epilogue(a, b, scale_a, scale_b, out_dtype, bias, model: str = "exact") -> torch.Tensor:
    sa, sb = _scales(a, b, scale_a, scale_b)
    return _cutlass(_acc(a, b, model), sa, sb, out_dtype, bias).to(a.device)


@declare(contract="cutlass", operands="e4m3", accumulator=HOPPER_LIKE, name="fp8_emulated_good")
def fp8_emulated_good(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Correct: accumulates as it declares (14 bits, truncating, promoted to fp32 every 128 products)."""
    return _epilogue(a, b, scale_a, scale_b, out_dtype, bias, HOPPER_LIKE)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_ignores_scale_b")
def fp8_ignores_scale_b(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug (i): the per-channel weight scale is never applied (as a ``_scaled_mm`` that ignored one scale)."""
    return _epilogue(a, b, scale_a, torch.ones_like(scale_b), out_dtype, bias)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_scale_axis")
def fp8_scale_axis(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug (ii): the per-token scale is applied per channel: column n is scaled by ``scale_a[n mod M]``."""
    sa, sb = _scales(a, b, scale_a, scale_b)
    m, n = a.shape[0], b.shape[0]
    by_column = sa[torch.arange(n) % m]
    x = _acc(a, b)
    y = (x * sb[None, :]) * by_column[None, :]  # w_then_a, with the wrong axis
    if bias is not None:
        y = y + bias.cpu().to(torch.float32)
    ones = torch.ones(m, dtype=torch.float32)
    return _cutlass(y, ones, torch.ones(n, dtype=torch.float32), out_dtype, None).to(a.device)


@declare(contract="cutlass", operands="e4m3", accumulator=HOPPER_LIKE, name="fp8_narrow_accumulator")
def fp8_narrow_accumulator(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug (iii): declares 14 retained bits but keeps 10 (accumulator narrower than declared)."""
    return _epilogue(a, b, scale_a, scale_b, out_dtype, bias, NARROWER)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_bias_after_round")
def fp8_bias_after_round(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug (iv): adds the bias after rounding to out_dtype (then rounds again) while declaring it before."""
    sa, sb = _scales(a, b, scale_a, scale_b)
    return _cutlass(_acc(a, b), sa, sb, out_dtype, bias, "after_round").to(a.device)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_scale_order")
def fp8_scale_order(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: scales the accumulator by s_a first (a_then_w) while declaring CUTLASS's w_then_a."""
    sa, sb = _scales(a, b, scale_a, scale_b)
    return emulate(
        _acc(a, b), sa, sb, "a_then_w", "fp32_before_round", None if bias is None else bias.cpu(), out_dtype
    ).to(a.device)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_saturate_to_finite")
def fp8_saturate_to_finite(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug (v): saturates out-of-range outputs to the dtype's largest finite value (a ``satfinite`` conversion)
    where the contract rounds them to +-inf."""
    out = _epilogue(a, b, scale_a, scale_b, out_dtype, bias)
    big = torch.finfo(out_dtype).max
    return out.clamp(-big, big)


def flush_subnormals(x: torch.Tensor) -> torch.Tensor:
    """e4m3 ``x`` with every subnormal (exponent field 0, nonzero mantissa) replaced by a zero of its sign."""
    u = x.view(torch.uint8)
    sub = ((u & 0x78) == 0) & ((u & 0x07) != 0)
    return torch.where(sub, u & 0x80, u).view(E4M3)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_subnormal_flush")
def fp8_subnormal_flush(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug (vi): flushes e4m3 subnormal operands to zero before multiplying (FTZ on the inputs)."""
    return _epilogue(flush_subnormals(a), flush_subnormals(b), scale_a, scale_b, out_dtype, bias)


# --- bugs on one scale form or one path only (found by a new-user trial: each escaped the earlier default plan) ------


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_ignores_0d_scale_a")
def fp8_ignores_0d_scale_a(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: a 0-d (per-tensor) ``scale_a`` is treated as 1."""
    if scale_a.dim() == 0:
        scale_a = torch.ones((), dtype=torch.float32)
    return _epilogue(a, b, scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_column_scale_a_first_row")
def fp8_column_scale_a_first_row(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: an [M,1] ``scale_a`` is read at row 0 for every row (a stride-0 read of the column)."""
    if scale_a.dim() == 2:
        scale_a = scale_a[0, 0].expand(a.shape[0])
    return _epilogue(a, b, scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_ignores_one_element_scale_b")
def fp8_ignores_one_element_scale_b(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: a one-element ``scale_b`` is treated as 1."""
    if scale_b.numel() == 1:
        scale_b = torch.ones_like(scale_b)
    return _epilogue(a, b, scale_a, scale_b, out_dtype, bias)


def _order(a, b, scale_a, scale_b, out_dtype, bias, swapped: bool) -> torch.Tensor:
    sa, sb = _scales(a, b, scale_a, scale_b)
    order = "a_then_w" if swapped else "w_then_a"
    bias = None if bias is None else bias.cpu()
    return emulate(_acc(a, b), sa, sb, order, "fp32_before_round", bias, out_dtype).to(a.device)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_scale_order_above_m64")
def fp8_scale_order_above_m64(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the large-M tile path (M > 64) scales by s_a first (a_then_w) while declaring w_then_a."""
    return _order(a, b, scale_a, scale_b, out_dtype, bias, a.shape[0] > 64)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_scale_order_fp32_output")
def fp8_scale_order_fp32_output(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the float32-output path scales by s_a first (a_then_w) while declaring w_then_a."""
    return _order(a, b, scale_a, scale_b, out_dtype, bias, out_dtype == torch.float32)


# --- bugs at one shape, layout or scale value (a second new-user trial: each escaped the plan above) -----------------


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_n_tail_tile_scale_shift")
def fp8_n_tail_tile_scale_shift(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: with N over several 128-wide tiles and a partial last one, that tile reads ``scale_b`` one column early."""
    n = b.shape[0]
    sa, sb = _scales(a, b, scale_a, scale_b)
    if n > 128 and n % 128:
        start = n - n % 128
        sb = torch.cat([sb[:start], sb[start - 1 : n - 1]])
    return _cutlass(_acc(a, b), sa, sb, out_dtype, bias).to(a.device)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_bias_after_round_wide_n")
def fp8_bias_after_round_wide_n(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the wide-N tile configuration (N >= 64) adds the bias after rounding."""
    sa, sb = _scales(a, b, scale_a, scale_b)
    point = "after_round" if b.shape[0] >= 64 else "fp32_before_round"
    return _cutlass(_acc(a, b), sa, sb, out_dtype, bias, point).to(a.device)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_decode_ignores_0d_scale_a")
def fp8_decode_ignores_0d_scale_a(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the decode path (M = 1) treats a 0-d ``scale_a`` as 1."""
    if a.shape[0] == 1 and scale_a.dim() == 0:
        scale_a = torch.ones((), dtype=torch.float32)
    return _epilogue(a, b, scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_abs_scale_b")
def fp8_abs_scale_b(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: weight scales are taken as magnitudes (a negative channel scale loses its sign)."""
    return _epilogue(a, b, scale_a, scale_b.abs(), out_dtype, bias)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_zero_scale_means_one")
def fp8_zero_scale_means_one(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: a zero scale is read as "unset" and replaced by 1."""
    one = torch.ones((), dtype=torch.float32)
    return _epilogue(
        a, b, torch.where(scale_a == 0, one, scale_a), torch.where(scale_b == 0, one, scale_b), out_dtype, bias
    )


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_column_major_b_wide_bias_after_round")
def fp8_column_major_b_wide_bias_after_round(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the swapped-operand path (column-major ``b`` with N > K) adds the bias after rounding."""
    swapped = b.stride(0) == 1 and b.shape[0] > 1 and b.shape[0] > b.shape[1]
    sa, sb = _scales(a, b, scale_a, scale_b)
    point = "after_round" if swapped else "fp32_before_round"
    return _cutlass(_acc(a, b), sa, sb, out_dtype, bias, point).to(a.device)


@declare(contract="cutlass", operands="e4m3", accumulator=HOPPER_LIKE, name="fp8_scale_order_above_n256")
def fp8_scale_order_above_n256(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: declares and keeps HOPPER_LIKE, but the N > 256 tile path scales by s_a first (a_then_w)."""
    sa, sb = _scales(a, b, scale_a, scale_b)
    order = "a_then_w" if b.shape[0] > 256 else "w_then_a"
    bias = None if bias is None else bias.cpu()
    return emulate(_acc(a, b, HOPPER_LIKE), sa, sb, order, "fp32_before_round", bias, out_dtype).to(a.device)


# --- accumulator bugs at one regime only (issue 41: the K probes at multiples of 512 never reach them) -------------


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_k_tail_narrow_accumulator")
def fp8_k_tail_narrow_accumulator(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: declares an exact accumulator, but with K % 128 != 0 the tail chunk is summed in a 14-bit truncating
    partial sum, then added to the float32 total."""
    k = a.shape[1]
    k0 = k - k % 128
    if k % 128 == 0:
        return _epilogue(a, b, scale_a, scale_b, out_dtype, bias)
    head = _acc(a[:, :k0], b[:, :k0]) if k0 else torch.zeros(a.shape[0], b.shape[0])
    acc = head + _acc(a[:, k0:], b[:, k0:], "fp32 bits=14 truncate")
    sa, sb = _scales(a, b, scale_a, scale_b)
    return _cutlass(acc, sa, sb, out_dtype, bias).to(a.device)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_decode_fp32_at_large_k")
def fp8_decode_fp32_at_large_k(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: declares an exact accumulator, but the decode path (M <= 16) at K >= 8192 sums in IEEE float32."""
    model = "fp32" if a.shape[0] <= 16 and a.shape[1] >= 8192 else "exact"
    return _epilogue(a, b, scale_a, scale_b, out_dtype, bias, model)


@declare(contract="cutlass", operands="e4m3", accumulator=HOPPER_LIKE, name="fp8_wide_n_narrow_accumulator")
def fp8_wide_n_narrow_accumulator(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: declares HOPPER_LIKE, but at N >= 65,536 (a vocabulary-wide layer) keeps 10 bits."""
    model = NARROWER if b.shape[0] >= 65536 else HOPPER_LIKE
    return _epilogue(a, b, scale_a, scale_b, out_dtype, bias, model)


#: A promotion interval 1.4x the declared 128.
PROMOTE_180 = "fp32 bits=14 truncate promote=180"


@declare(contract="cutlass", operands="e4m3", accumulator=HOPPER_LIKE, name="fp8_promotion_180")
def fp8_promotion_180(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: declares promotion every 128 products, promotes every 180."""
    return _epilogue(a, b, scale_a, scale_b, out_dtype, bias, PROMOTE_180)


@declare(contract="cutlass", operands="e4m3", accumulator=HOPPER_LIKE, name="fp8_promotion_180_decode")
def fp8_promotion_180_decode(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the decode path (M <= 16) promotes every 180 products where 128 is declared."""
    return _epilogue(a, b, scale_a, scale_b, out_dtype, bias, PROMOTE_180 if a.shape[0] <= 16 else HOPPER_LIKE)


#: The epilogue of :func:`fp8_exact_bf16_step`: the accumulator times s_a, rounded to bf16, then s_w in float32.
BF16_STEP = ["cast fp32", "mul s_a", "cast bf16", "mul s_w -> fp32", "add bias", "cast out"]


@declare(contract=BF16_STEP, operands="e4m3", accumulator="exact", name="fp8_exact_bf16_step")
def fp8_exact_bf16_step(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Correct: an exact accumulator and exactly its declared epilogue, whose bf16 step rounds the output (C11 must
    read the accumulator through it, not take the bf16 rounding for the accumulator's)."""
    sa, sb = _scales(a, b, scale_a, scale_b)
    bias = None if bias is None else bias.cpu()
    return apply_steps(_acc(a, b), sa, sb, BF16_STEP, bias=bias, out_dtype=out_dtype).to(a.device)


# --- value and layout bugs at one scale form, wide N or padded column-major b ------------------------------------


def _negative_zero_as_nan(x: torch.Tensor) -> torch.Tensor:
    """e4m3 ``x`` read as float32 with byte 0x80 (-0) taken for NaN, as e4m3fnuz decodes it."""
    return torch.where(x.view(torch.uint8) == 0x80, torch.full(x.shape, float("nan")), x.float())


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_negative_zero_nan_scale_b_1")
def fp8_negative_zero_nan_scale_b_1(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: with a one-element ``scale_b`` (the per-tensor weight path) the operands are decoded as e4m3fnuz,
    where -0 (byte 0x80) is NaN."""
    if scale_b.numel() != 1 or scale_b.dim() != 1:
        return _epilogue(a, b, scale_a, scale_b, out_dtype, bias)
    acc = (_negative_zero_as_nan(a.cpu()).double() @ _negative_zero_as_nan(b.cpu()).double().T).float()
    acc = torch.where(torch.isnan(acc), acc, _acc(a, b))
    sa, sb = _scales(a, b, scale_a, scale_b)
    return _cutlass(acc, sa, sb, out_dtype, bias).to(a.device)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_subnormal_flush_column_scales")
def fp8_subnormal_flush_column_scales(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: with [M,1] scales (the column-scale path) e4m3 subnormal operands are flushed to zero."""
    if scale_a.dim() == 2:
        a, b = flush_subnormals(a), flush_subnormals(b)
    return _epilogue(a, b, scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_wide_n_scale_wrap")
def fp8_wide_n_scale_wrap(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: a 15-bit column index: at N >= 32,768 column n reads ``scale_b[n mod 32768]``."""
    sa, sb = _scales(a, b, scale_a, scale_b)
    sb = sb[torch.arange(b.shape[0]) % 32768]
    return _cutlass(_acc(a, b), sa, sb, out_dtype, bias).to(a.device)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_padded_column_major_b")
def fp8_padded_column_major_b(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: a column-major ``b`` (stride (1, ld)) is read with leading dimension N, ignoring a padded ld > N (the
    padding bytes it reads that are NaN taken as 0, so the kernel returns wrong numbers instead of raising)."""
    n, k = b.shape
    if b.stride(0) == 1 and b.stride(1) > n and k > 1:
        wrong = torch.as_strided(b, (n, k), (1, n), b.storage_offset()).float()
        b = torch.where(torch.isnan(wrong), torch.zeros_like(wrong), wrong).to(b.dtype)
    return _epilogue(a, b, scale_a, scale_b, out_dtype, bias)


_FP8_WEIGHTS_BY_PTR: dict = {}


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_weight_cache_by_data_ptr")
def fp8_weight_cache_by_data_ptr(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the e4m3 weight is pre-packed (a dense copy) once and cached by its ``data_ptr``, shape and strides (the
    4 newest entries): a caller that updates the weight in place between calls gets the old one."""
    key = (b.data_ptr(), tuple(b.shape), tuple(b.stride()))
    if key not in _FP8_WEIGHTS_BY_PTR:
        _FP8_WEIGHTS_BY_PTR[key] = b.contiguous().clone()
        while len(_FP8_WEIGHTS_BY_PTR) > 4:
            _FP8_WEIGHTS_BY_PTR.pop(next(iter(_FP8_WEIGHTS_BY_PTR)))
    return _epilogue(a, _FP8_WEIGHTS_BY_PTR[key], scale_a, scale_b, out_dtype, bias)


# --- epilogue-value and layout bugs on one path (issue 41 trial: each escaped the earlier default FP8 plan) -------


def _single(s: torch.Tensor) -> bool:
    return s.numel() == 1


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_per_tensor_satfinite")
def fp8_per_tensor_satfinite(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: when either scale is a single value (the per-tensor epilogue) the output conversion saturates, so a value
    past the output dtype's range is its largest finite value instead of +-inf (every output dtype)."""
    out = _epilogue(a, b, scale_a, scale_b, out_dtype, bias)
    if not (_single(scale_a) or _single(scale_b)):
        return out
    big = torch.finfo(out_dtype).max
    return out.clamp(-big, big)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_fp32_store_drops_zero_sign")
def fp8_fp32_store_drops_zero_sign(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the float32 store writes every zero as +0 (a -0 from a zero sum under a negative scale is lost)."""
    out = _epilogue(a, b, scale_a, scale_b, out_dtype, bias)
    if out_dtype != torch.float32:
        return out
    return torch.where(out == 0, torch.zeros_like(out), out)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_prefill_flushes_subnormal_outputs")
def fp8_prefill_flushes_subnormal_outputs(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: at M >= 128 (the prefill tile path) outputs subnormal in the output dtype are flushed to a zero of their
    sign (FTZ in the store)."""
    out = _epilogue(a, b, scale_a, scale_b, out_dtype, bias)
    if a.shape[0] < 128:
        return out
    tiny = torch.finfo(out_dtype).tiny
    return torch.where((out != 0) & (out.abs() < tiny), out * 0, out)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_prefill_strided_scale_a_dense")
def fp8_prefill_strided_scale_a_dense(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: at M >= 128 a strided per-token ``scale_a`` is read as if contiguous (``scale_a[i]`` at storage offset
    ``i`` instead of ``i * stride``)."""
    m = a.shape[0]
    if m >= 128 and scale_a.dim() == 1 and scale_a.numel() == m and scale_a.stride(0) != 1:
        scale_a = torch.as_strided(scale_a, (m,), (1,), scale_a.storage_offset())
    return _epilogue(a, b, scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_wide_n_bias_via_fp16")
def fp8_wide_n_bias_via_fp16(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: at N >= 4096 with a bf16 or float32 output the bias is staged through float16 (rounded to 11 bits,
    out-of-range values to +-inf, tiny ones flushed to fp16 subnormals or zero)."""
    if bias is not None and b.shape[0] >= 4096 and out_dtype != torch.float16:
        bias = bias.to(torch.float16).to(out_dtype)
    return _epilogue(a, b, scale_a, scale_b, out_dtype, bias)


# --- a later new user's FP8 kernels (2026-12-07): value classes under one scale form or with a bias ---------------

_FINITE = {torch.bfloat16: torch.finfo(torch.bfloat16).max, torch.float16: torch.finfo(torch.float16).max}
_FP32_TINY = torch.finfo(torch.float32).tiny


def _satfinite(y: torch.Tensor) -> torch.Tensor:
    top = _FINITE.get(y.dtype, torch.finfo(torch.float32).max)
    return y.clamp(-top, top)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_satfinite_0d_scale_b")
def fp8_satfinite_0d_scale_b(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: under a 0-d weight scale the kernel's store saturates (``satfinite``): +-inf become the largest finite."""
    y = _epilogue(a, b, scale_a, scale_b, out_dtype, bias)
    return _satfinite(y) if scale_b.dim() == 0 else y


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_satfinite_with_bias")
def fp8_satfinite_with_bias(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the bias epilogue's store saturates: +-inf become the largest finite value where a bias is added."""
    y = _epilogue(a, b, scale_a, scale_b, out_dtype, bias)
    return _satfinite(y) if bias is not None else y


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_zero_sign_0d_scale_b")
def fp8_zero_sign_0d_scale_b(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the 0-d weight-scale path adds ``+0.0`` to every output: ``-0`` becomes ``+0``."""
    y = _epilogue(a, b, scale_a, scale_b, out_dtype, bias)
    return y + torch.zeros_like(y) if scale_b.dim() == 0 else y


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_scales_daz")
def fp8_scales_daz(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: float32-subnormal scales are read as zero (denormals-are-zero), on every call."""
    sa, sb = _scales(a, b, scale_a, scale_b)
    sa, sb = (torch.where(s.abs() < _FP32_TINY, torch.zeros_like(s), s) for s in (sa, sb))
    return _cutlass(_acc(a, b), sa, sb, out_dtype, bias).to(a.device)


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_zero_scale_positive_zero")
def fp8_zero_scale_positive_zero(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: a column whose weight scale is zero is written ``+0`` (the kernel skips it), not the signed zero."""
    y = _epilogue(a, b, scale_a, scale_b, out_dtype, bias)
    _, sb = _scales(a, b, scale_a, scale_b)
    return torch.where((sb == 0)[None, :].to(y.device), torch.zeros_like(y), y) if bias is None else y


@declare(contract="cutlass", operands="e4m3", accumulator="exact", name="fp8_fused_uniform_scale_a")
def fp8_fused_uniform_scale_a(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: an [M] activation scale holding one value takes the per-tensor path, which forms ``s_a * s_w`` first."""
    sa, sb = _scales(a, b, scale_a, scale_b)
    uniform = scale_a.dim() == 1 and scale_a.numel() > 1 and bool((scale_a == scale_a[0]).all())
    order = "fused" if uniform else "w_then_a"
    b_ = None if bias is None else bias.cpu()
    return emulate(_acc(a, b), sa, sb, order, "fp32_before_round", b_, out_dtype).to(a.device)
