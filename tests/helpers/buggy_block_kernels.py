"""Deliberately wrong (and one right) block-scaled kernels (issue 46), one per block fault and per declaration freedom
the field has had; loadable as ``--kernel=buggy_block_kernels:<fn>``.

Every kernel declares what the Triton block built-ins declare (``mul s_a; mul s_w; add`` then ``add bias; cast out``,
the block sizes in :data:`SIZES` or the ones it names) and computes ``reference.block.evaluate.
reference_block_scaled_mm`` on operands its bug rewrote (a scale column shifted, K cut, a weight-scale row index
changed, a storage read without strides, subnormals flushed) or with another block accumulation: each equals the
declared reference exactly where its bug does not fire (int8 partials exact; e4m3 unused). Some bugs are gated on a
regime as a new user's fast path would be (M > 64, out float16, 8 or more K-blocks); :data:`CATCHES` names the
check and case regime that should fail each."""

from __future__ import annotations

import torch

from conformance.kernels.loader import declare
from reference.block.evaluate import reference_block_scaled_mm

#: what every kernel here declares (the Triton block built-ins' declaration)
DECLARED = "mul s_a; mul s_w; add"
EPILOGUE = "add bias; cast out"
#: the field's 128x128, a narrower weight block, a shorter K-block, per channel (as the CPU built-ins)
SIZES = [(128, 128), (64, 128), (128, 64), (1, 128)]
_BLOCK = {"accumulation": DECLARED, "sizes": SIZES, "epilogue": EPILOGUE}
#: the K a host wrapper rounds down to (the field's block_k, hard-coded)
FIELD_K = 128
#: below this, a float32 scale is subnormal
FP32_TINY = torch.finfo(torch.float32).tiny

#: kernel -> (the check that should fail it, the case regime that shows it)
CATCHES = {
    "scale_a_prev_kblock": ("C8, C16", "M > 64 and K >= 2 blocks (C16 at M = 128)"),
    "scale_b_next_kblock": ("C8, C16", "K >= 3 blocks"),
    "tail_scale_prev_kblock": ("C8", "K % block_k != 0 and K > block_k"),
    "tail_dropped_fp16": ("C8", "out float16 and K % block_k != 0, K > block_k"),
    "weight_block_by_block_k": ("C8", "block_n != block_k (64x128, 128x64, 1x128) and N > block_n"),
    "k_rounded_down_to_128": ("C8", "K % 128 != 0 (any block_k)"),
    "per_channel_read_as_block": ("C8", "block_n = 1 (1x128) and N >= 2"),
    "fma_where_add": ("C16, C8", "K >= 2 blocks; C8 on out float32 (bf16 / fp16 hide most ulps)"),
    "scale_product_first_large_m": ("C16, C8", "M > 64 (C16 at M = 128); C8 on out float32"),
    "split_k_long_k": ("C16, C8", "ceil(K / block_k) >= 8; C8 on out float32"),
    "scale_a_strides_ignored": ("C8", "scale_a column-major (a strided view)"),
    "subnormal_scale_ftz": ("C8", "a subnormal block scale (s_a or s_w < 2**-126) whose product is normal"),
    "fp8_clamped_to_240": ("C8", "e4m3 operands above 240 (fp8-max)"),
    "fp8_operands_ftz": ("C8", "e4m3 subnormal operands (fp8-subnormal, fp8-wide-sum)"),
    "fp8_float32_partial_declared_exact": ("C8", "K-block sums beyond 24 bits, an 'exact' declaration (fp8-wide-sum)"),
    "bf16_partial_deep_k": ("C8", "16 or more K-blocks (decode2-deepk, prefill130-deepk)"),
    "scale_product_fp16_column_major": ("C8", "out float16 AND column-major scale_a (a covering row)"),
    "ue8m0_exponent_bits": ("C5, C8", "power-of-two scales, one float32-subnormal (pow2_tiny)"),
    "k_uniform_per_token_bf16": ("C8", "scales constant along K AND out bfloat16 (k_uniform)"),
    "fp8_seeded_running_sum_decode": ("C8", "M <= 16 AND a row x column of -0 products (fp8negzero)"),
    "seeded_running_sum": ("C8", "every scaled partial underflowing to -0, no bias (underflow)"),
    "strided_bias_read_dense": ("C8", "a strided bias (the layouts variants)"),
}


def _ref(a, b, scale_a, scale_b, out_dtype, bias, block_size, accumulation=DECLARED):
    return reference_block_scaled_mm(a, b, scale_a, scale_b, block_size, accumulation, EPILOGUE, bias, out_dtype)


def _kblocks(a, block_size) -> int:
    return -(-int(a.shape[1]) // int(block_size[1]))


def _cut_k(a, b, scale_a, scale_b, k: int, block_k: int):
    """The operands of the first ``k`` products (scale columns of the K-blocks they touch)."""
    kb = -(-k // block_k)
    return a[:, :k], b[:, :k], scale_a[:, :kb], scale_b[:, :kb]


def _per_column(scale_b, rows: torch.Tensor):
    """Weight scales per output column (``block_n`` = 1) read from the ``rows`` given per column."""
    return scale_b[rows.clamp(max=scale_b.shape[0] - 1)]


@declare(block=_BLOCK, name="good_block")
def good_block(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Correct: the declared block accumulation and epilogue."""
    return _ref(a, b, scale_a, scale_b, out_dtype, bias, block_size)


@declare(block=_BLOCK, name="scale_a_prev_kblock")
def scale_a_prev_kblock(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: on the large-M path (M > 64) the activation-scale pointer advances after the multiply, so K-block kb >= 1
    is scaled with s_a[:, kb - 1]."""
    if a.shape[0] > 64:
        scale_a = torch.cat([scale_a[:, :1], scale_a[:, :-1]], dim=1)
    return _ref(a, b, scale_a, scale_b, out_dtype, bias, block_size)


@declare(block=_BLOCK, name="scale_b_next_kblock")
def scale_b_next_kblock(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: the weight-scale pointer advances twice per K-block past the first: block kb >= 1 reads s_w[:, kb + 1]
    (clamped to the last column, as a masked load would read it)."""
    kb = _kblocks(a, block_size)
    cols = torch.tensor([0] + [min(j + 1, kb - 1) for j in range(1, kb)])
    return _ref(a, b, scale_a, scale_b[:, cols], out_dtype, bias, block_size)


@declare(block=_BLOCK, name="tail_scale_prev_kblock")
def tail_scale_prev_kblock(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: the scale column is clamped to ``K // block_k - 1`` (floor, not ceil): the short last K-block is scaled
    with the previous block's scales."""
    kb, full = _kblocks(a, block_size), int(a.shape[1]) // int(block_size[1])
    cols = torch.arange(kb).clamp(max=max(full - 1, 0))
    return _ref(a, b, scale_a[:, cols], scale_b[:, cols], out_dtype, bias, block_size)


@declare(block=_BLOCK, name="tail_dropped_fp16")
def tail_dropped_fp16(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: the float16 variant loops over ``K // block_k`` K-blocks (its mask was lost): a short last block is
    dropped."""
    full = int(a.shape[1]) // int(block_size[1]) * int(block_size[1])
    if out_dtype == torch.float16 and 0 < full < a.shape[1]:
        a, b, scale_a, scale_b = _cut_k(a, b, scale_a, scale_b, full, int(block_size[1]))
    return _ref(a, b, scale_a, scale_b, out_dtype, bias, block_size)


@declare(block=_BLOCK, name="weight_block_by_block_k")
def weight_block_by_block_k(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: the weight-block row of column n is computed with the activation's group size: ``n // block_k`` (a
    row past the last reads the last)."""
    bk = int(block_size[1])
    sw = _per_column(scale_b, torch.arange(b.shape[0]) // bk)
    return _ref(a, b, scale_a, sw, out_dtype, bias, (1, bk))


@declare(block=_BLOCK, name="k_rounded_down_to_128")
def k_rounded_down_to_128(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: the host wrapper launches with ``K // 128 * 128`` (the field's block_k hard-coded): the products past
    the last multiple of 128 are never summed, whatever block_k the call has."""
    k = int(a.shape[1]) // FIELD_K * FIELD_K
    if 0 < k < a.shape[1]:
        a, b, scale_a, scale_b = _cut_k(a, b, scale_a, scale_b, k, int(block_size[1]))
    return _ref(a, b, scale_a, scale_b, out_dtype, bias, block_size)


@declare(block=_BLOCK, name="per_channel_read_as_block")
def per_channel_read_as_block(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: the weight-scale row is ``n // 128`` (128x128 blocks assumed): per-channel scales (block_n = 1) are read
    as one scale per 128 columns."""
    sw = _per_column(scale_b, torch.arange(b.shape[0]) // FIELD_K)
    return _ref(a, b, scale_a, sw, out_dtype, bias, (1, int(block_size[1])))


@declare(block=_BLOCK, name="fma_where_add")
def fma_where_add(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: compiled with fp fusion on, ``acc += (p * s_a) * s_w`` becomes ``fma(p * s_a, s_w, acc)`` while the
    declaration says ``add``."""
    return _ref(a, b, scale_a, scale_b, out_dtype, bias, block_size, "mul s_a; fma s_w")


@declare(block=_BLOCK, name="scale_product_first_large_m")
def scale_product_first_large_m(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: the large-M path (M > 64) forms ``s_a * s_w`` first (one [BM, BN] scale tile) while the declaration
    says ``mul s_a; mul s_w``."""
    form = "mul s_a*s_w; add" if a.shape[0] > 64 else DECLARED
    return _ref(a, b, scale_a, scale_b, out_dtype, bias, block_size, form)


@declare(block=_BLOCK, name="split_k_long_k")
def split_k_long_k(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: from 8 K-blocks on, a split-K path sums two halves of the K-blocks separately and adds the halves, while
    the declaration says ``order sequential``."""
    form = DECLARED + "; order split_k=2" if _kblocks(a, block_size) >= 8 else DECLARED
    return _ref(a, b, scale_a, scale_b, out_dtype, bias, block_size, form)


@declare(block=_BLOCK, name="scale_a_strides_ignored")
def scale_a_strides_ignored(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: scale_a is indexed ``m * KB + kb`` from its data pointer (row-major assumed, strides ignored): a
    column-major scale_a (vLLM's ``column_major_scales``) is read transposed."""
    m, kb = scale_a.shape
    storage = scale_a.untyped_storage().nbytes() // scale_a.element_size() - scale_a.storage_offset()
    if storage >= m * kb:
        raw = torch.empty(0, dtype=scale_a.dtype, device=scale_a.device)
        scale_a = raw.set_(scale_a.untyped_storage(), scale_a.storage_offset(), (m, kb), (kb, 1)).clone()
    return _ref(a, b, scale_a, scale_b, out_dtype, bias, block_size)


@declare(block=_BLOCK, name="subnormal_scale_ftz")
def subnormal_scale_ftz(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: compiled with flush-to-zero, a subnormal block scale (below 2**-126) reads as 0."""

    def ftz(s):
        return torch.where(s.abs() < FP32_TINY, torch.zeros_like(s), s)

    return _ref(a, b, ftz(scale_a), ftz(scale_b), out_dtype, bias, block_size)


_FP8_BLOCK = dict(block=_BLOCK, operands="e4m3", accumulator="exact")


@declare(name="fp8_clamped_to_240", **_FP8_BLOCK)
def fp8_clamped_to_240(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug (e4m3): operands clamped to +-240, the e4m3fnuz maximum of another vendor's format, before the MMA."""

    def clamp(t):
        return t.float().clamp(-240.0, 240.0).to(t.dtype)

    return _ref(clamp(a), clamp(b), scale_a, scale_b, out_dtype, bias, block_size)


@declare(name="fp8_operands_ftz", **_FP8_BLOCK)
def fp8_operands_ftz(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug (e4m3): subnormal e4m3 operands (below 2**-6) flushed to zero when loaded."""

    def ftz(t):
        f = t.float()
        return torch.where(f.abs() < 2.0**-6, torch.zeros_like(f), f).to(t.dtype)

    return _ref(ftz(a), ftz(b), scale_a, scale_b, out_dtype, bias, block_size)


@declare(name="fp8_float32_partial_declared_exact", **_FP8_BLOCK)
def fp8_float32_partial_declared_exact(
    a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)
):
    """Bug (e4m3): each K-block's partial summed in float32, k in order, while the declaration says ``exact``."""
    return reference_block_scaled_mm(
        a, b, scale_a, scale_b, block_size, DECLARED, EPILOGUE, bias, out_dtype, accumulator="fp32"
    )


@declare(block=_BLOCK, name="bf16_partial_deep_k")
def bf16_partial_deep_k(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: from 16 K-blocks on (K >= 2048 at block_k 128) the scaled partial is kept in bf16 (a deep-K fast path)."""
    if a.shape[1] < 16 * int(block_size[1]):
        return _ref(a, b, scale_a, scale_b, out_dtype, bias, block_size)
    acc = reference_block_scaled_mm(
        a, b, scale_a, scale_b, block_size, DECLARED, "cast fp32; cast bf16; cast fp32", None, torch.float32
    )
    return (acc + (0 if bias is None else bias.float())).to(out_dtype)


@declare(block=_BLOCK, name="scale_product_fp16_column_major")
def scale_product_fp16_column_major(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: the float16-out kernel taking a column-major ``scale_a`` (DeepGEMM's) forms ``s_a*s_w`` first."""
    column_major = scale_a.shape[0] > 1 and scale_a.stride(0) == 1
    form = "mul s_a*s_w; add" if out_dtype == torch.float16 and column_major else DECLARED
    return _ref(a, b, scale_a, scale_b, out_dtype, bias, block_size, form)


def _pow2(s: torch.Tensor) -> bool:
    return bool((torch.frexp(s)[0].abs() == 0.5).all())


@declare(block=_BLOCK, name="ue8m0_exponent_bits")
def ue8m0_exponent_bits(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: when every block scale is a power of two (ue8m0) the kernel takes each scale's exponent from its float32
    bits: a subnormal scale (exponent field 0) reads as 2**-127."""
    if not (_pow2(scale_a) and _pow2(scale_b)):
        return _ref(a, b, scale_a, scale_b, out_dtype, bias, block_size)

    def from_bits(s):
        return torch.where(s.abs() < FP32_TINY, torch.full_like(s, 2.0**-127), s)

    return _ref(a, b, from_bits(scale_a), from_bits(scale_b), out_dtype, bias, block_size)


@declare(block=_BLOCK, name="k_uniform_per_token_bf16")
def k_uniform_per_token_bf16(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: a bfloat16-out dispatcher sees block scales constant along K (a per-channel checkpoint expanded to
    blocks, two or more K-blocks) and runs the per-token path: the whole-K sum scaled once."""
    uniform = bool((scale_a == scale_a[:, :1]).all()) and bool((scale_b == scale_b[:, :1]).all())
    if not (uniform and scale_a.shape[1] >= 2 and out_dtype == torch.bfloat16):
        return _ref(a, b, scale_a, scale_b, out_dtype, bias, block_size)
    k = int(a.shape[1])
    return _ref(a, b, scale_a[:, :1], scale_b[:, :1], out_dtype, bias, (int(block_size[0]), k))


@declare(name="fp8_seeded_running_sum_decode", **_FP8_BLOCK)
def fp8_seeded_running_sum_decode(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug (e4m3): the decode path (M <= 16) seeds the running sum with the first K-block's scaled partial instead of
    ``+0.0``: where every product of a row and column is ``-0``, the sum stays ``-0`` (``-0 + -0``)."""
    out = _ref(a, b, scale_a, scale_b, out_dtype, bias, block_size)
    if a.shape[0] > 16:
        return out
    fa, fb = a.float(), b.float()
    zero = (fa != 0).float() @ (fb != 0).float().T == 0
    sa, sb = torch.signbit(fa).float(), torch.signbit(fb).float()
    negative = sa @ (1 - sb).T + (1 - sa) @ sb.T == a.shape[1]
    keep = torch.ones(b.shape[0], dtype=torch.bool) if bias is None else (bias == 0) & torch.signbit(bias)
    return torch.where(zero & negative & keep[None, :], torch.full_like(out, -0.0), out)


def _scaled_partials(a, b, scale_a, scale_b, block_size) -> list:
    """float32 [M, N] per K-block: ``(p * s_a) * s_w`` (the declared ``mul s_a; mul s_w``), int8 partials exact."""
    bn, bk = int(block_size[0]), int(block_size[1])
    cols = torch.arange(b.shape[0]) // bn
    out = []
    for j in range(_kblocks(a, block_size)):
        p = (a[:, j * bk : (j + 1) * bk].long() @ b[:, j * bk : (j + 1) * bk].long().T).to(torch.float32)
        out.append((p * scale_a[:, j : j + 1]) * scale_b[cols, j][None, :])
    return out


@declare(block=_BLOCK, name="seeded_running_sum")
def seeded_running_sum(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug (int8): the running sum starts from the first K-block's scaled partial instead of ``+0.0``: where every
    scaled partial underflows to ``-0`` the output is ``-0`` (the declared sum from ``+0.0`` gives ``+0``). Bias-free
    calls only (the sign of a zero sum plus a bias is the bias's)."""
    out = _ref(a, b, scale_a, scale_b, out_dtype, bias, block_size)
    if bias is not None or a.dtype != torch.int8:
        return out
    parts = _scaled_partials(a, b, scale_a, scale_b, block_size)
    seeded = parts[0]
    for p in parts[1:]:
        seeded = seeded + p
    return torch.where((out == 0) & (seeded == 0), seeded.to(out_dtype), out)


@declare(block=_BLOCK, name="strided_bias_read_dense")
def strided_bias_read_dense(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    """Bug: the bias is read as a dense vector from its first element (a strided view's storage read without its
    stride)."""
    if bias is not None and bias.stride(0) != 1:
        bias = torch.as_strided(bias, bias.shape, (1,), bias.storage_offset())
    return _ref(a, b, scale_a, scale_b, out_dtype, bias, block_size)
