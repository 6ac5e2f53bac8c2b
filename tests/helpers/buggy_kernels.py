"""Deliberately wrong (and one right) in-test kernels for the checks' tests, plus
hand-made cases with bit patterns derived by hand / with numpy.

Imported by the checks' and suite's tests (``tests/`` is on ``sys.path``, see
``tests/conftest.py``) and, through ``--kernel=buggy_kernels:<fn>``, by the
pytest-plugin subprocess tests.
"""

from __future__ import annotations

import hashlib
import sys
from typing import Optional

import numpy as np
import torch
from correct_kernels import BF16_INTERMEDIATE, bf16_intermediate

from conformance.kernels import trace
from conformance.kernels.loader import declare
from conformance.kernels.spec import KernelSpec, ShapeConstraints
from reference.bits import round_fp32
from reference.contract import CUTLASS_STYLE, EpilogueContract
from reference.operands import GemmOperands

TEST_DIGEST = "0" * 63 + "1"

# --- hand-made cases -------------------------------------------------------

#: bf16 tie: 1 + 3 * 2**-8 lies exactly halfway between bf16 0x3F81
#: (1 + 2**-7) and 0x3F82 (1 + 2**-6); RNE picks the even mantissa 0x3F82,
#: truncation keeps 0x3F81.
TIE = 1.0 + 3 * 2.0**-8


def tie_case(pow2: bool = False) -> GemmOperands:
    """1x1x1 case, acc = 1; the product is the tie ``TIE``. pow2: the
    per-channel scale is 1.0 (a power of two) and the per-token scale TIE."""
    one = torch.ones((1, 1), dtype=torch.int8)
    sa = torch.tensor([TIE if pow2 else 1.0], dtype=torch.float32)
    sb = torch.tensor([1.0 if pow2 else TIE], dtype=torch.float32)
    return GemmOperands(
        one,
        one.clone(),
        sa,
        sb,
        name="tie-pow2" if pow2 else "tie",
        scale_mode="pow2" if pow2 else "synthetic",
        meta={"source": "synthetic"},
    )


#: Scale order matters (found by a numpy search, values as float32 bits):
#: acc = 545, s_a = 0x3D6C7C76, s_w = 0x39B48310:
#: (acc*s_a)*s_w -> bf16 0x3C31, (acc*s_w)*s_a -> bf16 0x3C32.
ORDER_SA_BITS, ORDER_SB_BITS = 0x3D6C7C76, 0x39B48310


def _f32(bits: int) -> float:
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


def order_case() -> GemmOperands:
    """1x5x1 case with acc = 127*4 + 37 = 545 and the scales above."""
    a = torch.tensor([[127, 127, 127, 127, 37]], dtype=torch.int8)
    b = torch.ones((1, 5), dtype=torch.int8)
    sa = torch.tensor([_f32(ORDER_SA_BITS)], dtype=torch.float32)
    sb = torch.tensor([_f32(ORDER_SB_BITS)], dtype=torch.float32)
    return GemmOperands(a, b, sa, sb, name="order", meta={"source": "synthetic"})


def bias_tie_case() -> GemmOperands:
    """acc = 1, s_a = 1, s_w = 1 + 2**-8, bias = -1 (bf16). Bias in float32
    before rounding: 2**-8 -> bf16 0x3B80. Bias after rounding: rnd(1 + 2**-8)
    is a tie -> 1.0 (even), 1.0 - 1.0 = 0 -> 0x0000. Distance 0x3B80 = 15232."""
    one = torch.ones((1, 1), dtype=torch.int8)
    return GemmOperands(
        one,
        one.clone(),
        torch.tensor([1.0]),
        torch.tensor([1.0 + 2.0**-8]),
        bias=torch.tensor([-1.0], dtype=torch.bfloat16),
        name="bias-tie",
        meta={"source": "synthetic"},
    )


def const_case(k: int, value: int = -128) -> GemmOperands:
    """1xKx1 case, every int8 equal to ``value``: acc = K * value**2."""
    a = torch.full((1, k), value, dtype=torch.int8)
    return GemmOperands(
        a,
        a.clone(),
        torch.tensor([2.0**-20]),
        torch.tensor([2.0**-10]),
        name=f"const-K{k}",
        meta={"source": "synthetic"},
    )


def sha_int8(t: torch.Tensor) -> str:
    """Independent tensor digest: sha256 of 'torch.int8;<dims>;' + bytes."""
    h = hashlib.sha256(f"torch.int8;{','.join(map(str, t.shape))};".encode())
    h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


# --- kernel emulation ------------------------------------------------------


def exact_acc32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """int64 exact a @ b.T wrapped to int32 (independent of the reference)."""
    acc = a.to(torch.int64) @ b.to(torch.int64).T
    return (((acc + 2**31) % 2**32) - 2**31).to(torch.int32)


def emulate(
    acc: torch.Tensor, sa, sb, order: str, bias_point: str, bias, out_dtype, rounding: str = "rne"
) -> torch.Tensor:
    """Epilogue in torch float32 (IEEE RNE multiplies), final rounding ``rounding``."""
    x = acc.to(torch.float32)
    sa = sa.reshape(-1, 1).to(torch.float32)
    sb = sb.reshape(1, -1).to(torch.float32)
    y = (x * sa) * sb if order == "a_then_w" else (x * sb) * sa if order == "w_then_a" else x * (sa * sb)
    if bias is not None and bias_point == "fp32_before_round":
        y = y + bias.to(torch.float32)
    out = round_fp32(y, out_dtype, rounding)
    if bias is not None and bias_point == "after_round":
        out = round_fp32(out.to(torch.float32) + bias.to(torch.float32), out_dtype, rounding)
    return out


def make_kernel(
    name: str,
    contract: EpilogueContract = CUTLASS_STYLE,
    *,
    rounding: str = "rne",
    order: str = None,
    bias_point: str = None,
    transpose_b: bool = False,
    acc_off_by_one: bool = False,
    ran_digest: str = TEST_DIGEST,
    record_path: bool = True,
    raises: bool = False,
    nan: bool = False,
    devices=("cpu",),
) -> KernelSpec:
    """A KernelSpec whose scaled_mm emulates ``contract`` with optional faults.

    Args:
        rounding: final rounding (``rtz`` = F4 output_truncation).
        order: scale order actually used (default: the declared one; F3 if different).
        bias_point: bias point actually used (default: the declared one; F5 if different).
        transpose_b: consume ``b.T`` (square cases) and record it (F9-like, C2).
        acc_off_by_one: the int_mm entry adds 1 at [0, 0] (C3 kernel failure).
        ran_digest: source digest the kernel reports at run time (C1).
        record_path: whether it reports its code path (C1).
        raises: raise RuntimeError instead of computing.
        nan: write NaN at [0, 0].
    """
    used = order or contract.scale_order
    used_bias = bias_point or contract.bias_point

    def int_mm(a, b):
        acc = exact_acc32(a.cpu(), b.cpu())
        if acc_off_by_one:
            acc[0, 0] += 1
        return acc

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        if raises:
            raise RuntimeError("deliberate failure")
        if transpose_b:
            b = b.t().contiguous()
        trace.record_operands(a, b, scale_a, scale_b, bias)
        if record_path:
            trace.record_path("test-emulation", source_digest=ran_digest)
        out = emulate(exact_acc32(a, b), scale_a, scale_b, used, used_bias, bias, out_dtype, rounding)
        if nan:
            out[0, 0] = float("nan")
        return out

    return KernelSpec(
        name=name,
        scaled_mm=scaled_mm,
        contract=contract,
        devices=tuple(devices),
        source_digest=TEST_DIGEST,
        int_mm=int_mm,
        origin="test",
        description=f"test kernel {name}",
    )


def _trunc_int_mm(a, b):
    return exact_acc32(a.cpu(), b.cpu())


@declare(
    contract="cutlass",
    int_mm=_trunc_int_mm,
    name="truncating",
    description="CUTLASS-style epilogue with round-toward-zero (fault F4)",
)
def truncating_kernel(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Third-party-style kernel (loaded as ``buggy_kernels:truncating_kernel``):
    declares CUTLASS_STYLE but truncates the final conversion."""
    trace.record_path("test-truncating")
    return emulate(exact_acc32(a, b), scale_a, scale_b, "w_then_a", "fp32_before_round", bias, out_dtype, "rtz")


# --- tests of the helpers themselves ---------------------------------------


def exiting_kernel(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """A kernel that ends the process (loaded by name, ``buggy_kernels:exiting_kernel``, by the CLI test)."""
    sys.exit(3)


exiting_kernel.int8conf_contract = "cutlass"


# --- kernels that take their process down (gate isolation tests) ----------
#: K of the one case on which the hostile kernels below misbehave; on every
#: other case they compute exactly like the ``cpu`` built-in (CUTLASS-style
#: epilogue), so a gate against ``cpu`` passes those cases.
HOSTILE_K = 37


def _cutlass_exact(a, b, scale_a, scale_b, out_dtype, bias):
    trace.record_path("test-hostile")
    return emulate(exact_acc32(a, b), scale_a, scale_b, "w_then_a", "fp32_before_round", bias, out_dtype, "rne")


@declare(
    contract="cutlass",
    int_mm=_trunc_int_mm,
    name="segfaulting",
    description="segfaults (NULL read via ctypes) when K == HOSTILE_K",
)
def segfaulting_kernel(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Reads address 0 through ctypes (a real SIGSEGV) on K == HOSTILE_K."""
    if a.shape[1] == HOSTILE_K:
        import ctypes

        ctypes.string_at(0)
    return _cutlass_exact(a, b, scale_a, scale_b, out_dtype, bias)


@declare(
    contract="cutlass",
    int_mm=_trunc_int_mm,
    name="aborting",
    description="calls os.abort() (SIGABRT) when K == HOSTILE_K",
)
def aborting_kernel(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """``os.abort()`` on K == HOSTILE_K (what a failed C assert does)."""
    if a.shape[1] == HOSTILE_K:
        import os

        os.abort()
    return _cutlass_exact(a, b, scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="hanging", description="sleeps for an hour when K == HOSTILE_K")
def hanging_kernel(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """``time.sleep(3600)`` on K == HOSTILE_K (a kernel that never returns)."""
    if a.shape[1] == HOSTILE_K:
        import time

        time.sleep(3600)
    return _cutlass_exact(a, b, scale_a, scale_b, out_dtype, bias)


def _odd_k(a) -> bool:
    """An odd K other than HOSTILE_K: no fixed case of the default suite or C9 probe has one, the property
    test's examples do (its first, M1xK1xN1, among them)."""
    return a.shape[1] % 2 == 1 and a.shape[1] != HOSTILE_K


@declare(contract="cutlass", name="hanging-then-aborting", description="hangs on K == HOSTILE_K, aborts on other odd K")
def hanging_then_aborting_kernel(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """``time.sleep(3600)`` on K == HOSTILE_K (the fixed "tails" cases), ``os.abort()`` on another odd K (property
    examples); exact elsewhere (issue 42: containment under ``int8conf check``)."""
    import os
    import time

    if a.shape[1] == HOSTILE_K:
        time.sleep(3600)
    if _odd_k(a):
        os.abort()
    return _cutlass_exact(a, b, scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", name="aborting-then-hanging", description="aborts on K == HOSTILE_K, hangs on other odd K")
def aborting_then_hanging_kernel(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """``os.abort()`` on K == HOSTILE_K, ``time.sleep(3600)`` on another odd K; exact elsewhere (issue 42:
    containment under ``pytest --kernel``)."""
    import os
    import time

    if a.shape[1] == HOSTILE_K:
        os.abort()
    if _odd_k(a):
        time.sleep(3600)
    return _cutlass_exact(a, b, scale_a, scale_b, out_dtype, bias)


@declare(
    contract="cutlass",
    int_mm=_trunc_int_mm,
    name="declining",
    constraints=ShapeConstraints(k_multiple=8),
    description="declares K % 8 == 0 (declines other shapes)",
)
def declining_kernel(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Exact CUTLASS-style kernel that declares ``k_multiple=8``."""
    return _cutlass_exact(a, b, scale_a, scale_b, out_dtype, bias)


@declare(
    contract="cutlass",
    int_mm=_trunc_int_mm,
    name="tiled32",
    constraints=ShapeConstraints(min_m=32, n_multiple=32, k_multiple=64),
    description="declares M >= 32, N % 32 == 0, K % 64 == 0 (a tile-only kernel; declines other shapes)",
)
def tiled32_kernel(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Exact CUTLASS-style kernel that declares whole 32 x 32 x 64 tiles only."""
    return _cutlass_exact(a, b, scale_a, scale_b, out_dtype, bias)


# --- buggy kernels for the verdict checks (issue 8, deliverables 2 and 3) ----
# Each is a CUTLASS-style kernel (declared w_then_a, bias in float32 before
# the one RNE rounding, overflow "wrap" by default) with one realistic bug.
# Loaded by the default suite as ``--kernel=buggy_kernels:<name>``.


def _cutlass_out(acc, scale_a, scale_b, out_dtype, bias, order="w_then_a"):
    return emulate(acc, scale_a, scale_b, order, "fp32_before_round", bias, out_dtype)


@declare(
    contract="cutlass",
    int_mm=_trunc_int_mm,
    name="signed_zero_lost",
    description="writes +0 where the accumulator is 0 (skips the epilogue), losing -0 = 0 * negative scale",
)
def signed_zero_lost(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: zero accumulators short-cut to +0.0 (as a kernel that skips the
    epilogue of all-zero tiles does), so ``0 * (negative scale) = -0`` becomes +0."""
    acc = exact_acc32(a, b)
    out = _cutlass_out(acc, scale_a, scale_b, out_dtype, bias)
    if bias is None:
        out = torch.where(acc == 0, torch.zeros_like(out), out)
    return out


def _sat_int_mm(a, b):
    return (a.cpu().to(torch.int64) @ b.cpu().to(torch.int64).T).clamp(-(2**31), 2**31 - 1).to(torch.int32)


@declare(
    contract="cutlass",
    int_mm=_sat_int_mm,
    name="saturating_declares_wrap",
    description="saturating int32 accumulator, declares (by default) wrap",
)
def saturating_declares_wrap(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the accumulator saturates (clamps to the int32 range) while the
    kernel declares the default two's-complement wrap."""
    acc = (a.to(torch.int64) @ b.to(torch.int64).T).clamp(-(2**31), 2**31 - 1)
    return _cutlass_out(acc, scale_a, scale_b, out_dtype, bias)


@declare(
    contract="cutlass",
    int_mm=_sat_int_mm,
    name="saturating_declared",
    overflow="saturate",
    description="saturating int32 accumulator, declared as such (correct)",
)
def saturating_declared(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Correct: same saturating accumulator, declared ``overflow="saturate"``."""
    acc = (a.to(torch.int64) @ b.to(torch.int64).T).clamp(-(2**31), 2**31 - 1)
    return _cutlass_out(acc, scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="bf16_when_fp16")
def bf16_when_fp16(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: always returns bfloat16 (the output dtype is hard-wired), so a
    float16 request gets bf16 bits."""
    return _cutlass_out(
        exact_acc32(a, b), scale_a, scale_b, torch.bfloat16, None if bias is None else bias.to(torch.bfloat16)
    )


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="decode_path_order")
def decode_path_order(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: an M = 1 (decode) fast path applies the scales in the other order
    (``s_a`` first), unlike the declared and the batched path."""
    order = "a_then_w" if a.shape[0] == 1 else "w_then_a"
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias, order)


_STALE: dict = {}


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="stale_accumulator")
def stale_accumulator(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: a workspace accumulator cached per output shape is not reset
    between calls; a second call with the same shape adds onto the first."""
    key = (a.shape[0], b.shape[0])
    acc = _STALE.setdefault(key, torch.zeros(key, dtype=torch.int64))
    acc += a.to(torch.int64) @ b.to(torch.int64).T
    return _cutlass_out(acc.clamp(-(2**31), 2**31 - 1), scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="good_cutlass")
def good_cutlass(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Correct CUTLASS-style emulation (the control of the tests above)."""
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)


@declare(contract="triton", int_mm=_trunc_int_mm, name="good_triton")
def good_triton(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Correct emulation of the vLLM-Triton-style contract (a_then_w, bias added
    after the rounding): a fast stand-in for the built-in ``triton``."""
    return emulate(exact_acc32(a, b), scale_a, scale_b, "a_then_w", "after_round", bias, out_dtype)


# --- issue 8: one buggy kernel per trigger condition of the case families ----
# Each declares the CUTLASS-style contract (w_then_a, bias fp32 before the one
# RNE) and is correct except for the one bug, modelled on public bug reports.
# tests/conformance/test_cases_buggy.py shows the default suite fails each.


def _float32_acc(a, b, block: int = 32):
    """a @ b.T with a float32 accumulator, one BLOCK_K = 32 tile at a time (as a
    GPU kernel with ``tl.dot(..., out_dtype=tl.float32)`` or an fp32 MMA
    accumulator runs): each tile's dot product is exact (32 * 2**14 < 2**24),
    the running sum over tiles rounds once it passes 2**24."""
    acc = torch.zeros((a.shape[0], b.shape[0]), dtype=torch.float32)
    a64, b64 = a.to(torch.int64), b.to(torch.int64)
    for k0 in range(0, a.shape[1], block):
        acc += (a64[:, k0 : k0 + block] @ b64[:, k0 : k0 + block].T).to(torch.float32)
    return acc


def _fp32acc_int_mm(a, b):
    return _float32_acc(a, b).round().clamp(-(2**31), 2**31 - 1).to(torch.int32)


@declare(contract="cutlass", int_mm=_fp32acc_int_mm, name="fp32_accumulator")
def fp32_accumulator(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the accumulator is float32 (``tl.dot(..., out_dtype=tl.float32)``,
    an fp32 MMA accumulator): partial sums beyond 2**24 round."""
    return _cutlass_out(_float32_acc(a, b), scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", name="fp32_accumulator_no_int_mm")
def fp32_accumulator_no_int_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """The same float32 accumulator without an ``int_mm`` entry (C3 cannot
    see the accumulator): its failures are consistent with F7 only."""
    return _cutlass_out(_float32_acc(a, b), scale_a, scale_b, out_dtype, bias)


def _ftz(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Flush values below the smallest normal of ``dtype`` to a zero of the same sign."""
    tiny = torch.finfo(dtype).tiny
    return torch.where(x.abs() < tiny, x * 0.0, x)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="subnormal_ftz")
def subnormal_ftz(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: flush-to-zero (``-ftz=true`` / fast-math): float32 subnormal
    intermediates and subnormal outputs become +-0."""
    x = exact_acc32(a, b).to(torch.float32)
    sa = scale_a.reshape(-1, 1).to(torch.float32)
    sb = scale_b.reshape(1, -1).to(torch.float32)
    y = _ftz(_ftz(x * sb, torch.float32) * sa, torch.float32)
    if bias is not None:
        y = y + bias.to(torch.float32)
    out = round_fp32(y, out_dtype, "rne")
    return _ftz(out.to(torch.float32), out_dtype).to(out_dtype)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="k_tail_dropped")
def k_tail_dropped(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the K loop runs over whole BLOCK_K = 32 tiles only (no masked
    tail), so the last K % 32 products are dropped."""
    k = (a.shape[1] // 32) * 32
    return _cutlass_out(exact_acc32(a[:, :k], b[:, :k]), scale_a, scale_b, out_dtype, bias)


def _ones_padded(t: torch.Tensor) -> torch.Tensor:
    k = t.shape[1]
    return torch.nn.functional.pad(t, (0, (-k) % 16), value=1)


def _ones_padded_int_mm(a, b):
    return exact_acc32(_ones_padded(a), _ones_padded(b))


@declare(contract="cutlass", int_mm=_ones_padded_int_mm, name="k_padded_with_ones")
def k_padded_with_ones(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: an odd K (K % 16 != 0) is padded to a multiple of 16 for aligned loads,
    but the padding is filled with ones instead of zeros (``F.pad(..., value=1)``
    for ``torch.zeros``), adding K' - K to every accumulator (the built-in
    ``triton`` pads with zeros: ``builtin_triton._pad_k``)."""
    return _cutlass_out(_ones_padded_int_mm(a, b), scale_a, scale_b, out_dtype, bias)


def _pair_sat_acc(a, b):
    """Products summed in pairs (k = 2i, 2i+1) into int16 with saturation
    (x86 ``vpmaddubsw``-style), then accumulated in int32."""
    p = a.to(torch.int32)[:, None, :] * b.to(torch.int32)[None, :, :]
    if p.shape[-1] % 2:
        p = torch.nn.functional.pad(p, (0, 1))
    pairs = (p[..., 0::2] + p[..., 1::2]).clamp(-32768, 32767)
    return pairs.sum(-1, dtype=torch.int64)


@declare(contract="cutlass", int_mm=lambda a, b: _pair_sat_acc(a, b).to(torch.int32), name="pair_saturation_int16")
def pair_saturation_int16(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: adjacent products saturate in int16 pairs: (-128)*(-128) twice is
    32768 -> 32767 when the pair is aligned on an even k."""
    return _cutlass_out(_pair_sat_acc(a, b), scale_a, scale_b, out_dtype, bias)


def _dense_view(t: torch.Tensor) -> torch.Tensor:
    """What a kernel that assumes a dense row-major [R, C] tensor reads:
    ``data_ptr + r * C + c`` of the same storage."""
    return torch.as_strided(t, t.shape, (t.shape[1], 1))


@declare(contract="cutlass", int_mm=lambda a, b: exact_acc32(_dense_view(a), b), name="ignores_lda")
def ignores_lda(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: ignores the leading stride of ``a`` (treats a ``x[:, :K]`` view
    as dense), as kernels that pass ``K`` for ``lda`` do."""
    return _cutlass_out(exact_acc32(_dense_view(a), b), scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", int_mm=exact_acc32, name="returns_transposed")
def returns_transposed(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: returns C^T as a [N, M] tensor (a kernel computing B A^T that forgets to transpose back): square cases
    fail on values, the others break the interface (the output's shape)."""
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias).t().contiguous()


@declare(contract="cutlass", int_mm=exact_acc32, name="column_major_output")
def column_major_output(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: right values in a column-major [M, N] output (strides (1, M)), as
    a kernel that computes C^T = B A^T and returns its transpose does."""
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias).t().contiguous().t()


@declare(contract="cutlass", int_mm=exact_acc32, name="returns_none")
def returns_none(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: writes its result into a buffer of its own and returns nothing (an interface failure)."""
    _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", int_mm=exact_acc32, name="float32_output")
def float32_output(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: returns the float32 epilogue value, never converted to ``out_dtype`` (an interface failure)."""
    acc = exact_acc32(a, b).to(torch.float32)
    return acc * scale_b.reshape(1, -1).to(torch.float32) * scale_a.reshape(-1, 1).to(torch.float32)


@declare(contract="cutlass", int_mm=exact_acc32, name="scales_a_in_place")
def scales_a_in_place(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: right values, but it reuses ``scale_a`` as scratch (``mul_``) and leaves it changed (in place)."""
    out = _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)
    scale_a.mul_(2.0)
    return out


def wrong_signature(a, b, scale_a, scale_b):
    """Bug: no ``out_dtype`` / ``bias`` parameters (refused at load)."""
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, torch.bfloat16, None)


wrong_signature.int8conf_contract = "cutlass"


@declare(contract="cutlass", int_mm=lambda a, b: exact_acc32(a, _dense_view(b)), name="b_as_contiguous")
def b_as_contiguous(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: reads ``b`` as a dense row-major [N, K] buffer whatever its strides
    (a transposed [K, N] view or a padded one is misread)."""
    return _cutlass_out(exact_acc32(a, _dense_view(b)), scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="zero_bias_vector")
def zero_bias_vector(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: with no bias the fused epilogue adds a zero bias vector anyway;
    -0 + 0 = +0 loses the sign of zero."""
    if bias is None:
        bias = torch.zeros(b.shape[0], dtype=out_dtype)
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="abs_scales")
def abs_scales(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: assumes positive scales (e.g. computes them as exp2(log2(s)))."""
    return _cutlass_out(exact_acc32(a, b), scale_a.abs(), scale_b.abs(), out_dtype, bias)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="saturate_to_finite")
def saturate_to_finite(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: clamps the result to the output dtype's finite range before the
    conversion (``satfinite``), so +-inf becomes +-max."""
    out = _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)
    big = torch.finfo(out_dtype).max
    return out.clamp(-big, big)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="zero_scale_as_one")
def zero_scale_as_one(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: a division-safe guard replaces zero scales with 1."""
    one = torch.ones((), dtype=torch.float32)
    return _cutlass_out(
        exact_acc32(a, b),
        torch.where(scale_a == 0, one, scale_a),
        torch.where(scale_b == 0, one, scale_b),
        out_dtype,
        bias,
    )


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="m_tail_scale_shift")
def m_tail_scale_shift(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: rows of a partial last BLOCK_M = 16 tile (M > 16, M % 16 != 0) read
    the per-token scale one row too early (off-by-one in the tail path)."""
    m = a.shape[0]
    sa = scale_a.reshape(-1).expand(m).clone() if scale_a.numel() == 1 else scale_a.reshape(-1).clone()
    if m > 16 and m % 16:
        t = (m // 16) * 16
        sa[t:] = scale_a.reshape(-1)[t - 1 : m - 1] if scale_a.numel() > 1 else sa[t:]
    return _cutlass_out(exact_acc32(a, b), sa, scale_b, out_dtype, bias)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="bias_rounded_first")
def bias_rounded_first(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: declares bias in float32 before the rounding but rounds the
    product to out_dtype first and adds the bias after (fault F5)."""
    return emulate(exact_acc32(a, b), scale_a, scale_b, "w_then_a", "after_round", bias, out_dtype)


# --- issue 42: realistic bugs whose failure signature must name the right class first ---


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="truncates_from_m32")
def truncates_from_m32(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the large-M (M >= 32) bf16 path converts with round-toward-zero (F4 on a shape-gated path)."""
    rounding = "rtz" if a.shape[0] >= 32 and out_dtype == torch.bfloat16 else "rne"
    return emulate(exact_acc32(a, b), scale_a, scale_b, "w_then_a", "fp32_before_round", bias, out_dtype, rounding)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="fused_scales")
def fused_scales(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: declares w_then_a but precomputes ``s_a * s_w`` (fused order, F5) on every path."""
    return emulate(exact_acc32(a, b), scale_a, scale_b, "fused", "fp32_before_round", bias, out_dtype)


# --- issue 8: bugs on size-dependent paths (family ``large_shapes``) ---------
# Each is correct below its path's threshold, so only a case beyond it (large
# M, N > 256, K >= 8192 at small M) can catch it.

#: M above which the prefill kernel below takes its large-M tile configuration.
PREFILL_M = 128


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="prefill_scale_order")
def prefill_scale_order(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the large-M (prefill) configuration, M > 128, has its own
    epilogue that multiplies by ``s_a`` first (a_then_w), unlike the declared
    and the small-M path (w_then_a)."""
    order = "a_then_w" if a.shape[0] > PREFILL_M else "w_then_a"
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias, order)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="wide_n_tail_tile_dropped")
def wide_n_tail_tile_dropped(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the wide-N configuration (N > 256, BLOCK_N = 128) launches
    ``N // 128`` column tiles instead of ``cdiv(N, 128)``: the columns of the
    partial last tile are never written (the output buffer's zeros remain)."""
    out = _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)
    n = out.shape[1]
    if n > 256:
        out[:, (n // 128) * 128 :] = 0
    return out


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="bias_cache_wraps")
def bias_cache_wraps(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the bias is staged in a 256-entry shared-memory buffer indexed by
    ``n & 255``: column n reads ``bias[n % 256]`` once N > 256."""
    if bias is not None and bias.shape[0] > 256:
        bias = bias[torch.arange(bias.shape[0]) % 256]
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)


def _splitk_fp32_acc(a, b):
    """int64 [M, N]: for K >= 8192 and M <= 16 (a decode shape), K split in
    two at a multiple of 128 near K/2, each half an exact int32 sum, the two
    partials converted to float32 and added in float32 (a float atomicAdd
    into the output workspace); else the exact sum."""
    m, k = a.shape
    if k < 8192 or m > 16:
        return exact_acc32(a, b).to(torch.int64)
    h = (k // 2 // 128) * 128
    p1 = exact_acc32(a[:, :h], b[:, :h]).to(torch.float32)
    p2 = exact_acc32(a[:, h:], b[:, h:]).to(torch.float32)
    return (p1 + p2).to(torch.int64)


@declare(contract="cutlass", int_mm=lambda a, b: _splitk_fp32_acc(a, b).to(torch.int32), name="splitk_float32_reduce")
def splitk_float32_reduce(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: split-K for long K at decode shapes reduces the two int32
    partial sums in float32 (inexact once a partial passes 2**24)."""
    return _cutlass_out(_splitk_fp32_acc(a, b), scale_a, scale_b, out_dtype, bias)


# --- issue 8 (new-user pass, 2026-12-01d): epilogue bugs on dispatch paths ----
# Each takes another epilogue only past a shape or value threshold that the
# ``ties`` / ``bias_cancel`` cases never reach; family ``dispatch`` does.


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="splitk_fused_epilogue")
def splitk_fused_epilogue(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the split-K reduce kernel (M <= 16, K >= 4096) applies the scales
    as one fused product ``acc * (s_a * s_w)``, unlike the declared w_then_a."""
    order = "fused" if a.shape[0] <= 16 and a.shape[1] >= 4096 else "w_then_a"
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias, order)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="splitk_bias_after_round")
def splitk_bias_after_round(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the split-K reduce kernel (M <= 16, K >= 4096) adds the bias after
    rounding to out_dtype (fault F5 on that path only)."""
    point = "after_round" if a.shape[0] <= 16 and a.shape[1] >= 4096 else "fp32_before_round"
    return emulate(exact_acc32(a, b), scale_a, scale_b, "w_then_a", point, bias, out_dtype)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="deep_k_scale_order")
def deep_k_scale_order(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the deep-K tile configuration (K >= 2048) multiplies by ``s_a`` first."""
    order = "a_then_w" if a.shape[1] >= 2048 else "w_then_a"
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias, order)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="mid_m_bucket_order")
def mid_m_bucket_order(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the 33 <= M <= 63 bucket (bf16 output only) has its own epilogue, s_a first."""
    m = a.shape[0]
    order = "a_then_w" if out_dtype == torch.bfloat16 and 33 <= m <= 63 else "w_then_a"
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias, order)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="wide_n_fused_epilogue")
def wide_n_fused_epilogue(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the wide-N grid (N >= 4096) precomputes ``s_a * s_w`` (fused order)."""
    order = "fused" if b.shape[0] >= 4096 else "w_then_a"
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias, order)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="small_acc_fast_path")
def small_acc_fast_path(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: when every |acc| < 2^16 a narrower fast path fuses the scales first
    (a data-dependent path: also batch-variant, since one large row switches it off)."""
    acc = exact_acc32(a, b)
    order = "fused" if int(acc.abs().max()) < 2**16 else "w_then_a"
    return _cutlass_out(acc, scale_a, scale_b, out_dtype, bias, order)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="fp32_output_scale_order")
def fp32_output_scale_order(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the float32-output variant multiplies by ``s_a`` first (no final
    rounding there, so the two orders differ by up to two float32 spacings)."""
    order = "a_then_w" if out_dtype == torch.float32 else "w_then_a"
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias, order)


_SCALES_BY_N: dict = {}


@declare(
    contract="cutlass",
    int_mm=_trunc_int_mm,
    name="scales_cached_by_n",
    description="caches the weight scales by N: a later call with the same N and other scales reuses the first call's",
)
def scales_cached_by_n(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the weight scales are cached in a dict keyed by N (as a kernel
    caching a prepared scale buffer per layer width), so a later call with
    the same N but other scales uses the first call's."""
    sb = _SCALES_BY_N.setdefault(b.shape[0], scale_b.clone())
    return _cutlass_out(exact_acc32(a, b), scale_a, sb, out_dtype, bias)


# --- issue 27: bugs gated by a shape regime, a layout or an out dtype ---------
# Each is right on most shapes and takes another path only past a threshold the
# hand-picked families never reach; the default suite's planted ``regimes`` cases
# (conformance.cases.regimes) reach it.


def _switched(name: str, when, order: str = "a_then_w", bias_point: str = "fp32_before_round", doc: str = ""):
    """A CUTLASS-style kernel (w_then_a, bias before rounding) that uses ``order`` /
    ``bias_point`` instead where ``when(a, b, out_dtype, bias)`` holds."""

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        bad = when(a, b, out_dtype, bias)
        return emulate(
            exact_acc32(a, b),
            scale_a,
            scale_b,
            order if bad else "w_then_a",
            bias_point if bad else "fp32_before_round",
            bias,
            out_dtype,
        )

    scaled_mm.__name__ = scaled_mm.__qualname__ = name
    scaled_mm.__doc__ = doc
    return declare(contract="cutlass", int_mm=_trunc_int_mm, name=name)(scaled_mm)


order_past_m_4096 = _switched(
    "order_past_m_4096",
    lambda a, b, dt, bias: a.shape[0] > 4096,
    doc="Bug: the long-prefill configuration (M > 4096) multiplies by s_a first.",
)
bias_after_round_past_n_32768 = _switched(
    "bias_after_round_past_n_32768",
    lambda a, b, dt, bias: b.shape[0] > 32768,
    order="w_then_a",
    bias_point="after_round",
    doc="Bug: the vocabulary-wide grid (N > 32768) adds the bias after rounding.",
)
fused_past_k_16384 = _switched(
    "fused_past_k_16384",
    lambda a, b, dt, bias: a.shape[1] > 16384,
    order="fused",
    doc="Bug: the deep-K (K > 16384) configuration fuses the two scales first.",
)
order_past_mnk_2_30 = _switched(
    "order_past_mnk_2_30",
    lambda a, b, dt, bias: a.shape[0] * a.shape[1] * b.shape[0] > 2**30,
    doc="Bug: past M*N*K = 2^30 (a heuristic's large-problem path) s_a goes first.",
)
#: M * N * K above which :func:`splitk_order_past_mnk_2_20` takes its split-K path (issue 43: a product boundary).
SPLITK_MACS = 2**20
splitk_order_past_mnk_2_20 = _switched(
    "splitk_order_past_mnk_2_20",
    lambda a, b, dt, bias: a.shape[0] * a.shape[1] * b.shape[0] > SPLITK_MACS,
    doc="Bug: past M*N*K = 2^20 a heuristic picks split-K, whose reduce epilogue multiplies by s_a first.",
)
#: output elements M * N from which :func:`persistent_past_mn_2_22` takes its persistent schedule
PERSISTENT_OUTPUTS = 2**22
persistent_past_mn_2_22 = _switched(
    "persistent_past_mn_2_22",
    lambda a, b, dt, bias: a.shape[0] * b.shape[0] >= PERSISTENT_OUTPUTS,
    order="fused",
    doc="Bug: outputs of 2^22 elements or more (past a wave of output tiles) take a persistent schedule whose "
    "epilogue fuses the scales (a 2048-token prefill into a 2048-wide layer).",
)
#: output elements M * N past which :func:`tiles_past_mn_2_11` takes its other tile configuration (triage's product)
TILED_OUTPUTS = 2**11
tiles_past_mn_2_11 = _switched(
    "tiles_past_mn_2_11",
    lambda a, b, dt, bias: a.shape[0] * b.shape[0] > TILED_OUTPUTS,
    doc="Bug: past M*N = 2^11 output elements a heuristic picks another tile configuration, which multiplies by "
    "s_a first (whatever K).",
)
order_for_transposed_b = _switched(
    "order_for_transposed_b",
    lambda a, b, dt, bias: b.shape[0] > 1 and b.stride(0) == 1,
    doc="Bug: the column-major-weight path (vLLM's b = w.t()) multiplies by s_a first.",
)
fused_for_fp16 = _switched(
    "fused_for_fp16",
    lambda a, b, dt, bias: dt == torch.float16 and a.shape[0] > 64,
    order="fused",
    doc="Bug: the float16-output prefill variant (M > 64) fuses the scales.",
)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="unmasked_k_tail_large_even_k")
def unmasked_k_tail_large_even_k(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the deep-K path (K >= 8192, K even) loads its last partial BLOCK_K = 64
    tile unmasked: the 64 - K % 64 elements past the row's end are read from the next
    row of ``a`` and of ``b`` (wrapping at the last row) and multiplied in."""
    m, k = a.shape
    n = b.shape[0]
    acc = exact_acc32(a, b).to(torch.int64)
    r = k % 64
    if k >= 8192 and k % 2 == 0 and r:
        over = 64 - r
        a_next = a[torch.arange(1, m + 1) % m, :over].to(torch.int64)
        b_next = b[torch.arange(1, n + 1) % n, :over].to(torch.int64)
        acc = acc + a_next @ b_next.T
    return _cutlass_out(acc, scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="wide_n_last_tile_dropped")
def wide_n_last_tile_dropped(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the wide path (N > 65536, BLOCK_N = 256) launches N // 256 column
    tiles: the columns of the partial last tile keep the output buffer's zeros."""
    out = _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)
    n = out.shape[1]
    if n > 65536 and n % 256:
        out[:, (n // 256) * 256 :] = 0
    return out


def _wrap_pos_saturate_neg(a, b):
    acc = a.cpu().to(torch.int64) @ b.cpu().to(torch.int64).T
    wrapped = ((acc + 2**31) % 2**32) - 2**31
    return torch.where(acc < -(2**31), torch.tensor(-(2**31)), wrapped).to(torch.int32)


@declare(
    contract="cutlass",
    int_mm=_wrap_pos_saturate_neg,
    name="negative_overflow_saturates",
    description="declares a wrapping int32 accumulator; saturates below -2^31",
)
def negative_overflow_saturates(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: declares wrap (the default) but the accumulator saturates when it
    overflows downwards (wraps upwards): the declaration holds one way only."""
    return _cutlass_out(_wrap_pos_saturate_neg(a, b).to(torch.int64), scale_a, scale_b, out_dtype, bias)


_OUT_BUFFERS: dict = {}


@declare(
    contract="cutlass",
    int_mm=_trunc_int_mm,
    name="reuses_output_buffer",
    description="returns one cached output buffer per (M, N, dtype)",
)
def reuses_output_buffer(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the decode path (M <= 16) writes into a static output buffer cached per
    (M, N, dtype), as a CUDA-graph pool does, and returns it: a result the caller
    holds is overwritten by the next call of the same shape."""
    out = _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)
    if a.shape[0] > 16:
        return out
    buf = _OUT_BUFFERS.setdefault((a.shape[0], b.shape[0], out_dtype), torch.empty_like(out))
    buf.copy_(out)
    return buf


# --- issue 29: a configuration chosen by timing (C1) -------------------------


@declare(contract="cutlass", name="timing_tuned")
def timing_tuned(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Correct bits, but its launch configuration is picked by timing even in a conformance run (as an
    autotuner does), so the path a run certifies may not be the next run's: C1 fails every case."""
    trace.record_path("tuned-emulation", config="BLOCK_M=64 (fastest of 4)", config_rule="timed")
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)


#: the process that imported this module: a forked suite worker has another pid
_IMPORT_PID = __import__("os").getpid()


def dies_in_workers(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Correct CUTLASS-style output in the process that loaded it; a forked worker process dies
    (``os._exit``) instead: the suite's in-process fallback must answer every case."""
    if __import__("os").getpid() != _IMPORT_PID:
        __import__("os")._exit(3)
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)


# --- issue 41 item 4: results that depend on the calls before (C10) ----------
# Each is exact on a call whose state is fresh; C10's calls in sequence (the case's
# operands rewritten in place, another out dtype, the other bias presence, another
# scale form, then the case replayed) see the state a previous call left.

#: bounded caches (the newest entries), so a suite run does not keep every case's weight
_CACHE_ENTRIES = 4


def _remember(cache: dict, key, make):
    """``cache[key]``, made by ``make()`` on a miss; the oldest entry goes past :data:`_CACHE_ENTRIES`."""
    if key not in cache:
        cache[key] = make()
        while len(cache) > _CACHE_ENTRIES:
            cache.pop(next(iter(cache)))
    return cache[key]


_PACKED_BY_PTR: dict = {}


@declare(
    contract="cutlass",
    int_mm=_trunc_int_mm,
    name="weight_cache_by_data_ptr",
    description="pre-packs b once per (data_ptr, shape, strides): stale when the caller updates b in place",
)
def weight_cache_by_data_ptr(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the weight is pre-packed (a dense copy) once and cached by its ``data_ptr``, shape and strides, as
    kernels that pre-pack weights do; a caller that updates the weight in place between calls gets the old one."""
    key = (b.data_ptr(), tuple(b.shape), tuple(b.stride()))
    packed = _remember(_PACKED_BY_PTR, key, lambda: b.contiguous().clone())
    return _cutlass_out(exact_acc32(a, packed), scale_a, scale_b, out_dtype, bias)


_EPILOGUE_BY_SHAPE: dict = {}


@declare(
    contract="cutlass",
    int_mm=_trunc_int_mm,
    name="epilogue_config_by_shape",
    description="a per-(M, N, K) epilogue descriptor refreshed after the launch: each call rounds to the previous "
    "call's out dtype and adds the bias only if the previous call had one",
)
def epilogue_config_by_shape(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the epilogue descriptor (the dtype the float32 result is rounded to, whether a bias is added) is
    cached per (M, N, K) and refreshed after the launch for the next call of that shape, so each call runs with
    the previous call's out dtype (then converted to its own) and bias flag."""
    key = (a.shape[0], b.shape[0], a.shape[1])
    round_to, add_bias = _EPILOGUE_BY_SHAPE.get(key, (out_dtype, bias is not None))
    _EPILOGUE_BY_SHAPE[key] = (out_dtype, bias is not None)
    out = _cutlass_out(exact_acc32(a, b), scale_a, scale_b, round_to, bias if add_bias else None)
    return out.to(out_dtype)


_SPLITK_WORKSPACE: dict = {}
#: the K from which :func:`splitk_workspace_not_zeroed` splits K in two
SPLITK_MIN_K = 1024


@declare(
    contract="cutlass",
    int_mm=_trunc_int_mm,
    name="splitk_workspace_not_zeroed",
    description="split-K (K >= 1024) partials added into a per-(M, N) workspace zeroed only when allocated",
)
def splitk_workspace_not_zeroed(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: from K = 1024 the two halves of K are summed exactly and added (as atomics do) into an int64 workspace
    cached per (M, N) and zeroed only when it is allocated: every later call of the shape adds the previous
    calls' sums."""
    m, k = a.shape
    if k < SPLITK_MIN_K:
        return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)
    ws = _remember(_SPLITK_WORKSPACE, (m, b.shape[0]), lambda: torch.zeros(m, b.shape[0], dtype=torch.int64))
    h = k // 2
    for lo, hi in ((0, h), (h, k)):
        ws += exact_acc32(a[:, lo:hi], b[:, lo:hi]).to(torch.int64)
    return _cutlass_out(ws.to(torch.int32), scale_a, scale_b, out_dtype, bias)


_TRANSPOSED_BY_ID: dict = {}


@declare(
    contract="cutlass",
    int_mm=_trunc_int_mm,
    name="transposed_b_by_id",
    description="keeps a transposed copy of b keyed by id(b): stale once the caller rewrites b in place",
)
def transposed_b_by_id(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: a transposed [K, N] copy of ``b`` is cached by ``id(b)`` (the Python object), so a call after the
    caller rewrote ``b`` in place (or on a new tensor that reuses a freed one's id) multiplies by an old weight."""
    bt = _remember(_TRANSPOSED_BY_ID, id(b), lambda: b.t().contiguous())
    return _cutlass_out(exact_acc32(a, bt.t()), scale_a, scale_b, out_dtype, bias)


@declare(
    contract="cutlass",
    int_mm=_trunc_int_mm,
    name="column_scale_a_first_row",
    description="reads a [M, 1] scale_a as its first element for every row (a column scale's stride taken as 0)",
)
def column_scale_a_first_row(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: a per-token scale passed as a [M, 1] column is read with row stride 0, so every row gets ``scale_a[0]``;
    the same values passed as [M] are right."""
    if scale_a.dim() == 2:
        scale_a = scale_a[:1].expand(scale_a.shape)
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)


# --- issue 41: a failure partly the declaration's, partly the kernel's -------


@declare(contract=BF16_INTERMEDIATE, int_mm=exact_acc32, name="bf16_intermediate_drops_fp32_bias")
def bf16_intermediate_drops_fp32_bias(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Implements README.md's bf16-intermediate step list exactly (not interchangeable by declaration), except that
    with a float32 output it drops the bias (a bug of the kernel's own)."""
    return bf16_intermediate(a, b, scale_a, scale_b, out_dtype, None if out_dtype == torch.float32 else bias)


# --- issue 41: bugs gated on attribute combinations and values ----------------
# Each is exact outside its gate; the default suite's ``covering`` family (a covering array over
# the declared attribute space, conformance.cases.covering) meets each gate with discriminators.

#: the smallest tiny float32 normal; below it a value is subnormal
_F32_TINY = 2.0**-126


def _ftz32(x: torch.Tensor) -> torch.Tensor:
    """float32 ``x`` with subnormals flushed to (signed) zero, as a fast-math GPU multiply does."""
    return torch.where(x.abs() < _F32_TINY, torch.zeros_like(x).copysign(x), x)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="scalar_weight_scale_order_past_m_32")
def scalar_weight_scale_order_past_m_32(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the per-tensor weight-scale variant (one s_w value: 0-d or [1]) multiplies by s_a first, but only
    from M = 32 on (its decode variant is right)."""
    order = "a_then_w" if scale_b.numel() == 1 and a.shape[0] >= 32 else "w_then_a"
    return emulate(exact_acc32(a, b), scale_a, scale_b, order, "fp32_before_round", bias, out_dtype)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="bias_through_fp16_wide_n_bf16")
def bias_through_fp16_wide_n_bf16(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the wide-N bf16 epilogue (N >= 4096) stages the bias in a float16 buffer: a bias outside fp16's range
    (or below its subnormals) comes back as inf or 0."""
    if bias is not None and out_dtype == torch.bfloat16 and b.shape[0] >= 4096:
        bias = bias.to(torch.float16).to(torch.bfloat16)
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="transposed_padded_b_misread")
def transposed_padded_b_misread(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: a column-major ``b`` (the ``w.t()`` view of a [K, N] buffer) is read with leading stride N, right for a
    dense buffer, wrong when the buffer is padded (leading stride > N)."""
    n, k = b.shape
    if n > 1 and b.stride(0) == 1 and b.stride(1) != n:
        b = torch.as_strided(b, (n, k), (1, n))
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="column_scales_subtile_shift_large_mn")
def column_scales_subtile_shift_large_mn(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the large-tile configuration (M >= 128 and N >= 128) loads the per-channel scales of the second 32-wide
    sub-tile of each 64-wide tile from the first one's offset (column j reads s_w[j - 32] where j % 64 >= 32)."""
    n = b.shape[0]
    sb = scale_b.reshape(-1)
    if a.shape[0] >= 128 and n >= 128 and sb.numel() == n:
        j = torch.arange(n)
        sb = sb[torch.where(j % 64 >= 32, j - 32, j)]
    return _cutlass_out(exact_acc32(a, b), scale_a, sb, out_dtype, bias)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="decode_subnormal_token_scale_ftz")
def decode_subnormal_token_scale_ftz(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: the decode path (M <= 16) loads the per-token scales with flush-to-zero: a float32-subnormal s_a
    becomes 0."""
    sa = scale_a.reshape(-1).to(torch.float32)
    if a.shape[0] <= 16:
        sa = _ftz32(sa)
    return _cutlass_out(exact_acc32(a, b), sa, scale_b, out_dtype, bias)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="pow2_scalar_weight_scale_folded")
def pow2_scalar_weight_scale_folded(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: a power-of-two per-tensor weight scale is folded into the per-token scale (s_a * s_w, flushed to zero
    when subnormal) before the accumulator is scaled: exact for every other s_a, wrong where the product
    underflows."""
    sb = scale_b.reshape(-1).to(torch.float32)
    if sb.numel() == 1 and float(sb[0]) != 0 and torch.frexp(sb)[0].abs().eq(0.5).all():
        s = _ftz32(scale_a.reshape(-1, 1).to(torch.float32) * sb)
        y = exact_acc32(a, b).to(torch.float32) * s
        if bias is not None:
            y = y + bias.to(torch.float32)
        return round_fp32(y, out_dtype, "rne")
    return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)


# --- escapes of a new user's kernels (h-esc8): one per class the default suite now meets ----------


def _exact_acc64(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """int64 exact a @ b.T through a float64 GEMM (every partial sum an integer below 2^53): fast on the CPU."""
    return (a.to(torch.float64) @ b.to(torch.float64).T).to(torch.int64)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="pow2_weight_scale_as_int32_shift")
def pow2_weight_scale_as_int32_shift(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: one power-of-two weight scale (0-d or [1]) 2^e is applied to the int32 accumulator as a shift: left
    by e (wrapping in int32) for e >= 1, arithmetic right by -e (dropping low bits) for e <= -1; then * s_a."""
    sb = scale_b.reshape(-1).to(torch.float32)
    if sb.numel() != 1 or float(sb[0]) == 0 or not bool(torch.frexp(sb)[0].abs().eq(0.5).all()):
        return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)
    e = int(torch.frexp(sb)[1][0]) - 1
    acc = exact_acc32(a, b).to(torch.int64)
    acc = (((acc << e) + 2**31) % 2**32 - 2**31) if e >= 0 else acc >> -e
    y = acc.to(torch.float32) * (float(torch.sign(sb[0])) * scale_a.reshape(-1, 1).to(torch.float32))
    if bias is not None:
        y = y + bias.to(torch.float32)
    return round_fp32(y, out_dtype, "rne")


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="zero_bias_elements_skipped")
def zero_bias_elements_skipped(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: a sparse-bias path adds the bias only where its element is nonzero (a +0 bias is skipped), so a -0.0
    scaled value stays -0.0 where the contract gives -0 + +0 = +0; any out dtype."""
    out = _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)
    if bias is None:
        return out
    unbiased = _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, None)
    return torch.where(bias.reshape(1, -1) == 0, unbiased, out)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="zero_weight_scale_column_positive_zero")
def zero_weight_scale_column_positive_zero(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: without a bias, a column whose per-channel s_w is 0 is not computed but memset to +0.0 (the contract
    gives -0.0 where acc * s_a < 0); from N = 32 on (the narrow path computes it)."""
    out = _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)
    sb = scale_b.reshape(-1)
    if bias is None and b.shape[0] >= 32 and sb.numel() == b.shape[0]:
        out = torch.where(sb.reshape(1, -1) == 0, torch.zeros_like(out), out)
    return out


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="splitk_float32_partials_all_large")
def splitk_float32_partials_all_large(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: with M >= 512, N >= 4096 and K >= 2048 together (a stream-K configuration) K is cut in 3 slices at
    multiples of 128, each an exact sum, the slices added in float32: inexact once a running sum passes 2^24."""
    m, k = a.shape
    if not (m >= 512 and b.shape[0] >= 4096 and k >= 2048):
        return _cutlass_out(_exact_acc64(a, b).to(torch.int32), scale_a, scale_b, out_dtype, bias)
    step = -(-k // 3 // 128) * 128
    acc = None
    for k0 in range(0, k, step):
        part = _exact_acc64(a[:, k0 : k0 + step], b[:, k0 : k0 + step]).to(torch.float32)
        acc = part if acc is None else acc + part
    return _cutlass_out(acc, scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="fp32_bias_fma_contracted")
def fp32_bias_fma_contracted(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug: with float32 output, a bias and K >= 512, the compiler contracts the last multiply and the bias add:
    fma(acc * s_w, s_a, bias) rounds once (the declared epilogue rounds the product, then the sum)."""
    if not (out_dtype == torch.float32 and bias is not None and a.shape[1] >= 512):
        return _cutlass_out(exact_acc32(a, b), scale_a, scale_b, out_dtype, bias)
    t = exact_acc32(a, b).to(torch.float32) * scale_b.reshape(1, -1).to(torch.float32)
    y = t.double() * scale_a.reshape(-1, 1).double() + bias.reshape(1, -1).double()
    return y.to(torch.float32)


# --- issue 42 walk: failures that are not numerics ------------------------


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="raises_past_m16")
def raises_past_m16(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Exact CUTLASS-style output for M <= 16; raises RuntimeError for a larger M (an unsupported tile)."""
    if a.shape[0] > 16:
        raise RuntimeError(f"no tile for M={a.shape[0]}\nsecond line")
    return _cutlass_exact(a, b, scale_a, scale_b, out_dtype, bias)


#: what :func:`segfaults_always` prints before it dies (its child's log only: README, "A kernel's own prints")
SEGFAULT_PRINT = "segfaults_always: about to read address 0"


@declare(contract="cutlass", name="segfaults_always", description="segfaults on every call")
def segfaults_always(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Prints :data:`SEGFAULT_PRINT` (stdout and stderr), then reads address 0 through ctypes (a real SIGSEGV), on
    every call."""
    import ctypes

    print(SEGFAULT_PRINT, flush=True)
    print(SEGFAULT_PRINT, file=sys.stderr, flush=True)
    ctypes.string_at(0)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="raises_keyboard_interrupt")
def raises_keyboard_interrupt(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Raises KeyboardInterrupt itself (no signal) for M > 16; exact otherwise."""
    if a.shape[0] > 16:
        raise KeyboardInterrupt("the kernel's own KeyboardInterrupt")
    return _cutlass_exact(a, b, scale_a, scale_b, out_dtype, bias)


@declare(contract="cutlass", int_mm=_trunc_int_mm, name="decode_returns_bias")
def decode_returns_bias(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Exact CUTLASS-style output, except on an M == 1 call with a bias: the output is written into the bias
    (shares its storage, viewed [1, N])."""
    out = _cutlass_exact(a, b, scale_a, scale_b, out_dtype, bias)
    if a.shape[0] == 1 and bias is not None:
        bias.copy_(out.reshape(-1))
        return bias.view(1, -1)
    return out


#: M above which :func:`prefill_segfault` reads address 0; above :data:`MID_M` (to it) its output is wrong.
SEGFAULT_M, MID_M = 128, 64


@declare(
    contract="cutlass",
    int_mm=_trunc_int_mm,
    name="prefill_segfault",
    description="segfaults (NULL read via ctypes) for M > 128; its last output row wrong for 64 < M <= 128",
)
def prefill_segfault(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Exact for M <= 64; for 64 < M <= 128 the last output row is written as ``2 x + 1``; for M > 128 a real
    SIGSEGV (issue 43: a triage probe that reshapes past M = 128 kills its process, not ``int8conf check``)."""
    m = a.shape[0]
    if m > SEGFAULT_M:
        import ctypes

        ctypes.string_at(0)
    out = _cutlass_exact(a, b, scale_a, scale_b, out_dtype, bias)
    if m > MID_M:
        out[-1] = out[-1] * 2 + 1
    return out


#: K below which :func:`short_k_segfault` reads address 0.
SEGFAULT_BELOW_K = 8


@declare(
    contract="cutlass",
    name="short_k_segfault",
    description="segfaults (NULL read via ctypes) for K < 8; its last output row wrong for M > 64",
)
def short_k_segfault(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Exact for M <= 64; for M > 64 the last output row is written as ``2 x + 1``; for K < 8 a real SIGSEGV
    (issue 43: a triage search that dies on its K probes keeps its M and N boundaries and names the probe)."""
    if a.shape[1] < SEGFAULT_BELOW_K:
        import ctypes

        ctypes.string_at(0)
    out = _cutlass_exact(a, b, scale_a, scale_b, out_dtype, bias)
    if a.shape[0] > MID_M:
        out[-1] = out[-1] * 2 + 1
    return out


# --- the kernel as the serving stack calls it (issue 45: C13 graph_replay, C14 compile, C15 streams_devices) ---
# Each computes the CUTLASS-style epilogue exactly, on any device, in plain torch ops (capturable, compilable); the
# bug is in how it is called: a host read, a wrong fake implementation, a stream of its own, a hard-coded device.

SERVING_DEVICES = ("cpu", "cuda")


def _serving_kernel(name: str, description: str):
    """The declaration every serving-bug kernel shares: the CUTLASS-style epilogue, CPU and CUDA, exact int_mm."""
    return declare(
        contract="cutlass", devices=SERVING_DEVICES, int_mm=_trunc_int_mm, name=name, description=description
    )


def _serving_exact(a, b, scale_a, scale_b, out_dtype, bias):
    """``rnd((float32(acc) * s_w) * s_a [+ bias in float32])`` on a's device; acc exact (float64 sums < 2^53)."""
    acc = _exact_acc64(a, b).to(torch.float32)
    y = (acc * scale_b.reshape(1, -1).to(torch.float32)) * scale_a.reshape(-1, 1).to(torch.float32)
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(out_dtype)


@_serving_kernel(
    "host_scalar_scale",
    "reads scale_a on the host (.item()) at call time to pick a path: a CUDA-graph capture refuses it",
)
def host_scalar_scale(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug (C13): ``scale_a[0].item()`` picks the path on every call (as a kernel choosing a config from a scale does):
    a device-to-host read, which a CUDA-graph capture refuses (eagerly exact)."""
    fused = scale_a.reshape(-1)[0].item() > 0.0
    out = _serving_exact(a, b, scale_a, scale_b, out_dtype, bias)
    return out if fused else out.clone()


@_serving_kernel(
    "gemv_host_scale", "reads its 0-d scales on the host (float()) on its M == 1 path: a CUDA-graph capture refuses it"
)
def gemv_host_scale(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug (C13, one path): at M == 1 with 0-d scales (a per-tensor GEMV path) the scales are read on the host
    (``float()``: a device-to-host sync a CUDA-graph capture refuses); eagerly exact everywhere. The
    sample's core decode (M = 8, per-token) and prefill (M = 128, 0-d) cases take the other path."""
    if a.shape[0] == 1 and scale_a.dim() == 0 and scale_b.dim() == 0:
        _alpha = float(scale_a * scale_b)  # the host read (a GEMV kernel would take it as its alpha argument)
    return _serving_exact(a, b, scale_a, scale_b, out_dtype, bias)


def _scaled_mm_op(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    return _serving_exact(a, b, scale_a, scale_b, out_dtype, bias)


#: a custom op with the right fake (the control) and one whose fake returns float32 whatever out_dtype is asked
_CUSTOM_OK = torch.library.custom_op("int8conf_buggy::scaled_mm_ok", _scaled_mm_op, mutates_args=())
_CUSTOM_WRONG_FAKE = torch.library.custom_op("int8conf_buggy::scaled_mm_wrong_fake", _scaled_mm_op, mutates_args=())
_CUSTOM_FP32_FAKE = torch.library.custom_op("int8conf_buggy::scaled_mm_fp32_fake", _scaled_mm_op, mutates_args=())
_CUSTOM_NO_FAKE = torch.library.custom_op("int8conf_buggy::scaled_mm_no_fake", _scaled_mm_op, mutates_args=())
_CUSTOM_LARGE_M_FAKE = torch.library.custom_op("int8conf_buggy::scaled_mm_large_m_fake", _scaled_mm_op, mutates_args=())


@_CUSTOM_OK.register_fake
def _fake_ok(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


@_CUSTOM_WRONG_FAKE.register_fake
def _fake_wrong(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    return a.new_empty((a.shape[0], b.shape[0]), dtype=torch.float32)


@_CUSTOM_FP32_FAKE.register_fake
def _fake_fp32_wrong(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    half = out_dtype if out_dtype in (torch.bfloat16, torch.float16) else torch.bfloat16  # float32 forgotten
    return a.new_empty((a.shape[0], b.shape[0]), dtype=half)


@_CUSTOM_LARGE_M_FAKE.register_fake
def _fake_large_m_wrong(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    m = a.shape[0]
    return a.new_empty((m, b.shape[0]), dtype=torch.float32 if m > 256 else out_dtype)  # a "large-M path" dtype


def _custom_spec(name: str, op, description: str) -> KernelSpec:
    return KernelSpec(
        name=name,
        scaled_mm=op,
        contract=CUTLASS_STYLE,
        devices=SERVING_DEVICES,
        int_mm=_trunc_int_mm,
        source_digest=TEST_DIGEST,
        description=description,
    )


#: Correct (C14's control): a registered custom op whose fake gives the real output's shape, dtype and strides.
custom_op_control = _custom_spec("custom_op_control", _CUSTOM_OK, "a torch custom op with a correct fake")
#: Bug (C14): the custom op's fake (meta) implementation returns float32 for every out_dtype.
wrong_fake_custom_op = _custom_spec(
    "wrong_fake_custom_op", _CUSTOM_WRONG_FAKE, "a torch custom op whose fake returns float32 for any out_dtype"
)

#: Bug (C14, one out dtype): the custom op's fake returns bfloat16 where float32 is asked (bf16 / fp16 right).
fp32_fake_custom_op = _custom_spec(
    "fp32_fake_custom_op", _CUSTOM_FP32_FAKE, "a torch custom op whose fake returns bfloat16 for a float32 output"
)

#: Bug (C14, one M regime): the custom op's fake returns float32 past M = 256 (right below).
large_m_fake_custom_op = _custom_spec(
    "large_m_fake_custom_op", _CUSTOM_LARGE_M_FAKE, "a torch custom op whose fake returns float32 for M > 256"
)
#: Bug (C14): a custom op with no fake (meta) implementation registered: torch.compile cannot trace it.
no_fake_custom_op = _custom_spec("no_fake_custom_op", _CUSTOM_NO_FAKE, "a torch custom op with no fake registered")


@_serving_kernel("wrapped_custom_op", "a plain Python wrapper over a torch custom op with a correct fake")
def wrapped_custom_op(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Correct (C14's control for wrappers): the ``ops.cutlass_scaled_mm`` form, a Python function calling a
    registered custom op whose fake is right."""
    return _CUSTOM_OK(a, b, scale_a, scale_b, out_dtype, bias)


@_serving_kernel(
    "wrapped_fp32_fake",
    "a plain Python wrapper over a torch custom op whose fake returns bfloat16 for a float32 output",
)
def wrapped_fp32_fake(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug (C14, through a wrapper): the Python function the kernel is declared as calls a custom op whose fake
    gives bfloat16 where float32 is asked; a compiled model sees that fake through the wrapper."""
    return _CUSTOM_FP32_FAKE(a, b, scale_a, scale_b, out_dtype, bias)


_OWN_STREAMS: dict = {}


@_serving_kernel(
    "own_stream_no_wait", "launches on a stream of its own without waiting for the caller's stream: it races"
)
def own_stream_no_wait(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug (C15): on CUDA the work runs on the kernel's own stream, which neither waits for the caller's current
    stream (inputs still being written there are read early) nor is waited for (the output is read before it is
    done). Exact when the caller synchronizes the device around the call."""
    if not a.is_cuda:
        return _serving_exact(a, b, scale_a, scale_b, out_dtype, bias)
    s = _OWN_STREAMS.setdefault(a.device, torch.cuda.Stream(a.device))
    with torch.cuda.stream(s):
        return _serving_exact(a, b, scale_a, scale_b, out_dtype, bias)


@_serving_kernel("hardcoded_cuda0", "computes on 'cuda:0' whatever device its operands are on")
def hardcoded_cuda0(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug (C15, two GPUs): on CUDA the operands are moved to the hard-coded ``"cuda:0"`` and the output left there
    (exact on a single GPU, where every CUDA tensor is on ``cuda:0``)."""
    if not a.is_cuda:
        return _serving_exact(a, b, scale_a, scale_b, out_dtype, bias)
    dev = torch.device("cuda:0")
    moved = [None if t is None else t.to(dev) for t in (a, b, scale_a, scale_b, bias)]
    return _serving_exact(*moved[:4], out_dtype, moved[4])


_SIDE_STREAMS: dict = {}


@_serving_kernel("no_output_wait", "waits for the caller's stream, but the caller's stream never waits for its output")
def no_output_wait(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug (C15, half a fork): on CUDA the work runs on a side stream that waits for the caller's current stream (the
    inputs are ready) but the caller's stream is never made to wait for it: a read queued there after the call sees
    the output before it is written. Exact when the caller synchronizes the device."""
    if not a.is_cuda:
        return _serving_exact(a, b, scale_a, scale_b, out_dtype, bias)
    cur = torch.cuda.current_stream(a.device)
    side = _SIDE_STREAMS.setdefault(a.device, torch.cuda.Stream(a.device))
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        out = _serving_exact(a, b, scale_a, scale_b, out_dtype, bias)
    out.record_stream(cur)  # memory safety only: no ordering
    return out


_FIRST_STREAM: dict = {}


@_serving_kernel("first_call_stream", "keeps the stream current at its first call and launches there ever after")
def first_call_stream(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug (C15): on CUDA the stream current at the first call (a library's handle made once) is kept and every later
    call launches on it, whatever stream the caller is on: a caller's side stream is neither waited for nor waits.
    Exact when every call is on one stream."""
    if not a.is_cuda:
        return _serving_exact(a, b, scale_a, scale_b, out_dtype, bias)
    s = _FIRST_STREAM.setdefault(a.device, torch.cuda.current_stream(a.device))
    with torch.cuda.stream(s):
        return _serving_exact(a, b, scale_a, scale_b, out_dtype, bias)


_CAPTURE_SCALES: dict = {}


@_serving_kernel(
    "capture_cached_scale", "reads 0-d scales on the host, and under a CUDA-graph capture reuses the last values read"
)
def capture_cached_scale(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Bug (C13, replayed stale): with 0-d scales the kernel takes them as host floats (a GEMV's alpha); to pass a
    CUDA-graph capture, which refuses the read, it reuses the values of its last eager call of that shape when
    capturing: the graph bakes them in and replays them whatever scale the new activations bring. Eagerly exact."""
    if scale_a.dim() or scale_b.dim():
        return _serving_exact(a, b, scale_a, scale_b, out_dtype, bias)
    key = (a.device, tuple(a.shape), tuple(b.shape))
    if a.is_cuda and torch.cuda.is_current_stream_capturing():
        sa, sb = _CAPTURE_SCALES[key]
    else:
        sa, sb = _CAPTURE_SCALES[key] = float(scale_a), float(scale_b)
    y = (_exact_acc64(a, b).to(torch.float32) * sb) * sa  # float32 products of float32 values: the eager bits
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(out_dtype)


@_serving_kernel("segfaulting_cuda", "segfaults (NULL read via ctypes) when K == HOSTILE_K, on the CPU or CUDA")
def segfaulting_cuda(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """``segfaulting_kernel`` on either device: a real SIGSEGV on K == HOSTILE_K, else exact on a's device."""
    if a.shape[1] == HOSTILE_K:
        import ctypes

        ctypes.string_at(0)
    return _serving_exact(a, b, scale_a, scale_b, out_dtype, bias)
