"""Ground truth of F1-F5 on hand-made 1x1 cases: exact bf16 bits before and
after each fault, derived here with numpy float32 arithmetic and a
hand-written bf16 rounding (not with the code under test)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from buggy_kernels import make_kernel

from conformance.kernels.registry import get_kernel
from faults import ground_truth, inject, prepare_case
from reference.contract import TRITON_STYLE, EpilogueContract
from reference.epilogue import reference_scaled_mm
from reference.operands import GemmOperands

F32 = np.float32
#: 1 + 2**-8 + 2**-12: above the bf16 midpoint between 1 and 1 + 2**-7.
S_ODD = 0x3F808800
#: The scale-order pair of buggy_kernels.order_case (acc = 545).
ORDER_SA, ORDER_SB = 0x3D6C7C76, 0x39B48310


def f32(bits: int) -> F32:
    return np.array([bits], dtype=np.uint32).view(np.float32)[0]


def bits32(x) -> int:
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


def rne16(x) -> int:
    """bf16 bits of float32 x, round to nearest even, by hand on the bits."""
    b = bits32(x)
    hi, lo = b >> 16, b & 0xFFFF
    if lo > 0x8000 or (lo == 0x8000 and hi & 1):
        hi += 1
    return hi & 0xFFFF


def rtz16(x) -> int:
    return bits32(x) >> 16


def widen(b16: int) -> F32:
    return f32(b16 << 16)


def case(acc_a: int, sa, sb, bias=None) -> GemmOperands:
    a = torch.tensor([[acc_a]], dtype=torch.int8)
    b = torch.ones((1, 1), dtype=torch.int8)
    bt = None if bias is None else torch.tensor([bias], dtype=torch.bfloat16)
    return GemmOperands(
        a,
        b,
        torch.tensor([float(sa)], dtype=torch.float32),
        torch.tensor([float(sb)], dtype=torch.float32),
        bias=bt,
        name="hand",
    )


def order_case() -> GemmOperands:
    a = torch.tensor([[127, 127, 127, 127, 37]], dtype=torch.int8)  # acc = 545
    return GemmOperands(
        a,
        torch.ones((1, 5), dtype=torch.int8),
        torch.tensor([float(f32(ORDER_SA))]),
        torch.tensor([float(f32(ORDER_SB))]),
        name="order",
    )


def out_bits(spec, ops) -> int:
    out = spec.scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b, out_dtype=ops.out_dtype, bias=ops.bias)
    return int(out.view(torch.int16)[0, 0]) & 0xFFFF


TRITON_EMU = make_kernel("emu-triton", TRITON_STYLE)
FUSED_EMU = make_kernel("emu-fused", EpilogueContract("fused", "fp32_before_round", "rne"))


def _pin(kernel, fault, ops, before: int, after: int, spacings: int):
    spec = kernel if not isinstance(kernel, str) else None
    spec = spec or get_kernel(kernel)
    assert out_bits(spec, ops) == before
    assert out_bits(inject(spec, fault, "all", 0), ops) == after
    gt = ground_truth(spec, fault, "all", 0, ops)
    assert (gt.selected, gt.changed, gt.max_spacing, gt.no_op) == (1, int(before != after), spacings, before == after)
    assert sum(gt.spacing_hist.values()) == 1


def test_f1_scale_precision_rounds_the_per_token_scale_to_bf16():
    # cpu (w_then_a): (3 * 1) * s_a = 3.01245... -> 0x4041; bf16(s_a) = 0x3F81 = 1 + 2**-7,
    # 3 * 1.0078125 = 3.0234375 is the midpoint of 0x4041 / 0x4042 -> even 0x4042
    sa = f32(S_ODD)
    before = rne16(F32(F32(3) * F32(1)) * sa)
    after = rne16(F32(F32(3) * F32(1)) * widen(rne16(sa)))
    assert (before, after) == (0x4041, 0x4042)
    _pin("cpu", "F1", case(3, sa, 1.0), before, after, 1)


def test_f1_is_a_no_op_when_the_per_token_scale_is_already_bf16():
    _pin(
        "cpu",
        "scale_precision",
        case(3, 1.5, f32(S_ODD)),
        rne16(F32(3) * f32(S_ODD) * F32(1.5)),
        rne16(F32(3) * f32(S_ODD) * F32(1.5)),
        0,
    )


def test_f2_double_rounding_creates_a_tie():
    # t = 1 * s_w = 1.00415 -> r16 = 0x3F81; 1.0078125 * 1.5 = 1.51171875, the midpoint of
    # 0x3FC1 / 0x3FC2 -> 0x3FC2; without the intermediate rounding 1.50622 -> 0x3FC1
    sw, sa = f32(S_ODD), F32(1.5)
    before = rne16(F32(F32(1) * sw) * sa)
    after = rne16(F32(widen(rne16(F32(1) * sw)) * sa))
    assert (before, after) == (0x3FC1, 0x3FC2)
    _pin("cpu", "F2", case(1, sa, sw), before, after, 1)


@pytest.mark.parametrize(
    "kernel,before,after",
    [
        ("cpu", "w", "a"),  # declared w_then_a -> a_then_w
        (TRITON_EMU, "a", "w"),  # declared a_then_w -> w_then_a
        (FUSED_EMU, "f", "a"),  # declared fused -> accumulator first, s_a first
    ],
)
def test_f3_multiplication_order_reverses_the_declared_order(kernel, before, after):
    x, sa, sb = F32(545), f32(ORDER_SA), f32(ORDER_SB)
    y = {"a": F32(F32(x * sa) * sb), "w": F32(F32(x * sb) * sa), "f": F32(x * F32(sa * sb))}
    assert rne16(y["a"]) == 0x3C31 and rne16(y["w"]) == 0x3C32
    b, a = rne16(y[before]), rne16(y[after])
    _pin(kernel, "F3", order_case(), b, a, abs(a - b))


def test_f4_output_truncation_rounds_toward_zero():
    # 1 + 3 * 2**-8 lies exactly between 0x3F81 and 0x3F82: RNE -> 0x3F82, RTZ -> 0x3F81
    tie = F32(1 + 3 * 2.0**-8)
    assert (rne16(tie), rtz16(tie)) == (0x3F82, 0x3F81)
    _pin("cpu", "F4", case(1, 1.0, tie), 0x3F82, 0x3F81, 1)
    # negative: RNE -> 0xBF82, truncation toward zero -> 0xBF81
    _pin("cpu", "output_truncation", case(-1, 1.0, tie), 0xBF82, 0xBF81, 1)


def test_f4_truncates_both_conversions_of_a_bias_after_rounding_kernel():
    # TRITON style: rne(rne(y) + b). y = 1 + 3*2**-8 (tie), b = 2**-7 (bf16 exact)
    # clean: rne(y) = 1 + 2**-6, + 2**-7 = 1.0234375 = 1 + 3*2**-7 exact -> 0x3F83
    # F4:    rtz(y) = 1 + 2**-7, + 2**-7 = 1 + 2**-6 exact -> 0x3F82
    tie = F32(1 + 3 * 2.0**-8)
    b = F32(2.0**-7)
    before = rne16(F32(widen(rne16(tie)) + b))
    after = rtz16(F32(widen(rtz16(tie)) + b))
    assert (before, after) == (0x3F83, 0x3F82)
    _pin(TRITON_EMU, "F4", case(1, 1.0, tie, bias=2.0**-7), before, after, 1)


def test_f5_moves_the_bias_to_the_other_point():
    # cpu: bias fp32 before the rounding: 1 + 2**-8 - 1 = 2**-8 -> 0x3B80; F5: after the
    # rounding: rne(1 + 2**-8) = 1 (tie to even), 1 - 1 = 0 -> 0x0000; 0x3B80 spacings apart
    s = F32(1 + 2.0**-8)
    before = rne16(F32(s + F32(-1)))
    after = rne16(F32(widen(rne16(s)) + F32(-1)))
    assert (before, after) == (0x3B80, 0x0000)
    _pin("cpu", "F5", case(1, 1.0, s, bias=-1.0), before, after, 0x3B80)


@pytest.mark.parametrize("kernel,before,after", [("cpu", "w", "f"), (TRITON_EMU, "a", "f"), (FUSED_EMU, "f", "w")])
def test_f5_without_bias_combines_the_scales_at_another_point(kernel, before, after):
    x, sa, sb = F32(545), f32(ORDER_SA), f32(ORDER_SB)
    y = {"a": F32(F32(x * sa) * sb), "w": F32(F32(x * sb) * sa), "f": F32(x * F32(sa * sb))}
    b, a = rne16(y[before]), rne16(y[after])
    _pin(kernel, "fused_ordering", order_case(), b, a, abs(a - b))


def test_f4_under_power_of_two_scales_still_changes_bits():
    # the truth is measured: acc = 3, s_a = 1 + 2**-8 + 2**-12, s_w = 2**-4 (pow2):
    # RNE and RTZ of 3 * s_a * 2**-4 differ (3.01245 * 2**-4 is not a bf16 value)
    sa = f32(S_ODD)
    y = F32(F32(F32(3) * F32(2.0**-4)) * sa)
    ops = case(3, sa, 2.0**-4)
    ops.scale_mode = "pow2"
    _pin("cpu", "F4", ops, rne16(y), rtz16(y), rne16(y) - rtz16(y))
    # while F3 cannot: multiplying by a power of two is exact, both orders agree
    _pin("cpu", "F3", ops, rne16(y), rne16(y), 0)


def test_f6_f7_f9_exact_bits_on_a_one_element_case():
    # F6: acc = 1, E = ceil((2**31 - 1) / 16384) = 131072 columns -> exact acc 2**31 + 1.
    # the cpu kernel's int32 accumulator wraps to -2**31 + 1; float32 -> -2**31 (RNE);
    # * 2**-20 -> -2048 = bf16 0xC500. Declared contract on the exact value: 2048 = 0x4500.
    # ordered encodings 0x4500 and -0x4500 are 2 * 0x4500 = 35328 spacings apart.
    # K 1 + 131072 saturated columns, then 255 zero columns: 131328 = 513 * 256
    ops = case(1, 1.0, 2.0**-20)
    p = prepare_case(ops, "F6", "all", 0)
    assert p.k == 131328 and p.meta["fault_prepared"]["extra_k"] == 131072
    assert out_bits(inject("cpu", "F6"), p) == 0xC500
    ref = reference_scaled_mm(p.a, p.b, p.scale_a, p.scale_b, get_kernel("cpu").contract)
    assert int(ref.view(torch.int16)[0, 0]) & 0xFFFF == 0x4500
    gt = ground_truth("cpu", "F6", "all", 0, ops)
    assert (gt.selected, gt.changed, gt.max_spacing) == (1, 1, 2 * 0x4500)
    assert gt.spacing_hist[">256"] == 1
    # F7: E = ceil((2**24 - 1) / 16384) = 1024 -> acc 2**24 + 1, a float32 tie -> 2**24
    # (even) in the kernel and in the reference alike: bf16 0x4B80 both, a no-op
    p7 = prepare_case(case(1, 1.0, 1.0), "F7", "one", 0)
    assert p7.k == 1280 and p7.meta["fault_prepared"]["extra_k"] == 1024  # 1 + 1024 -> 5 * 256
    assert out_bits(get_kernel("cpu"), p7) == 0x4B80
    assert ground_truth("cpu", "F7", "one", 0, case(1, 1.0, 1.0)).no_op
    # F9 (pow2_scales): s_w = 0.3 -> 0.25; 3 * 0.3 = 0.9 -> bf16 0x3F66, 3 * 0.25 = 0x3F40
    before, after = rne16(F32(F32(3) * F32(0.3)) * F32(1)), rne16(F32(0.75))
    assert (before, after) == (0x3F66, 0x3F40)
    _pin("cpu", "F9", case(3, 1.0, 0.3), before, after, before - after)
