"""Planted discriminators (conformance.cases.planting): every planted kind
reaches its discriminating elements at pinned counts, correct kernels of every
legal contract pass planted cases, and a hand-made planted element has the
bits derived here independently."""

from __future__ import annotations

import struct

import pytest
import torch

from conformance.cases.planting import KINDS, planted_case, probe_positions
from conformance.kernels.registry import get_kernel
from conformance.suite.evaluate import evaluate_case
from reference.accumulate import exact_int_mm

BF, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


def test_probe_positions_spread_over_the_tile_grid():
    assert probe_positions(300, 8) == [0, 299, 15, 16, 288, 127, 128, 256]
    assert probe_positions(1, 8) == [0]
    assert probe_positions(17, 20) == [0, 16, 15, 2, 4, 6, 8, 10, 12, 14]


#: (m, k, n, out dtype, mode, bias, rotate) -> discriminating elements per kind
PINNED = {
    (9, 96, 40, BF, "real", True, 0): {
        "scale_order": 10,
        "bias_point": 12,
        "signed_zero": 4,
        "overflow": 2,
        "subnormal": 1,
        "partial_sums": 0,
        "big_acc": 0,
        "bias_value": 0,
        "subnormal_scale": 0,
    },
    (3, 9000, 24, BF, "real", False, 4): {
        "scale_order": 5,
        "bias_point": 0,
        "signed_zero": 1,
        "overflow": 0,
        "subnormal": 1,
        "partial_sums": 3,
        "big_acc": 2,
        "bias_value": 0,
        "subnormal_scale": 0,
    },
    (8, 64, 48, FP16, "pow2", True, 2): {
        "scale_order": 0,
        "bias_point": 27,
        "signed_zero": 4,
        "overflow": 3,
        "subnormal": 3,
        "partial_sums": 0,
        "big_acc": 0,
        "bias_value": 0,
        "subnormal_scale": 0,
    },
    (8, 64, 48, FP32, "real", False, 1): {
        "scale_order": 72,
        "bias_point": 0,
        "signed_zero": 4,
        "overflow": 1,
        "subnormal": 3,
        "partial_sums": 0,
        "big_acc": 0,
        "bias_value": 0,
        "subnormal_scale": 0,
    },
}


@pytest.mark.parametrize("key", list(PINNED), ids=lambda k: "x".join(map(str, k[:3])) + f"-{k[3]}")
def test_each_planted_kind_has_its_pinned_discriminating_count(key):
    m, k, n, dt, mode, bias, rot = key
    ops = planted_case(m, k, n, dt, mode, bias, seed=0, rotate=rot)
    assert set(ops.meta["planted"]) == set(KINDS)
    assert ops.meta["planted"] == PINNED[key]


@pytest.mark.parametrize("kernel", ["cpu", "int_mm", "buggy_kernels:good_cutlass", "buggy_kernels:good_triton"])
def test_correct_kernels_of_every_contract_pass_planted_cases(kernel):
    spec = get_kernel(kernel)
    bad = []
    for m, k, n in ((1, 64, 24), (17, 96, 65), (2, 3, 5), (40, 5000, 9)):
        for dt in (BF, FP16, FP32):
            for mode in ("real", "pow2"):
                for bias in (False, True):
                    ops = planted_case(m, k, n, dt, mode, bias, seed=3, rotate=m + n)
                    r = evaluate_case(spec, ops, device="cpu")
                    if r.verdict != "pass":
                        bad.append((ops.name, m, k, n, str(dt), mode, bias, r.failure_lines()))
    assert bad == []


def _bf16_rne(x: float) -> int:
    """bf16 bits of the float64 value ``x`` rounded to nearest even (x normal)."""
    f = struct.unpack("<Q", struct.pack("<d", x))[0]
    sign, exp, mant = f >> 63, (f >> 52) & 0x7FF, f & ((1 << 52) - 1)
    full = (1 << 52) | mant  # 53-bit significand
    keep, drop = full >> 45, full & ((1 << 45) - 1)  # 8 bits kept (1 + 7)
    half = 1 << 44
    if drop > half or (drop == half and keep & 1):
        keep += 1
    if keep == 1 << 8:
        keep, exp = keep >> 1, exp + 1
    e = exp - 1023 + 127
    return (sign << 15) | (e << 7) | (keep & 0x7F)


def test_a_hand_checked_bias_point_element():
    """One probe row and one ``bias_point`` column: y = acc * s_a * s_w is exact in
    float32, bias = -rnd_bf16(y); before the rounding the output is the
    residual y - rnd(y) (exact), after it zero."""
    ops = planted_case(1, 64, 1, BF, "real", True, seed=0, rotate=6)
    assert ops.meta["probes"]["cols"] == [[0, "bias_point"]]
    acc = int(exact_int_mm(ops.a, ops.b)[0, 0])
    sa, sb = float(ops.scale_a[0]), float(ops.scale_b[0])
    assert acc % 2 == 1 and 1023 <= abs(acc) <= 2047
    y = acc * sa * sb  # float64: exact (<= 24 significant bits)
    assert float(torch.tensor(y, dtype=torch.float32)) == y
    ry = _bf16_rne(y)
    assert int(ops.bias.view(torch.int16)[0]) & 0xFFFF == ry ^ 0x8000
    residual = y - struct.unpack("<f", struct.pack("<I", ry << 16))[0]
    assert residual != 0
    before = evaluate_case(get_kernel("cpu"), ops, keep_output=True).output
    assert int(before.view(torch.int16)[0, 0]) & 0xFFFF == _bf16_rne(residual)
    assert ops.meta["planted"]["bias_point"] == 1
