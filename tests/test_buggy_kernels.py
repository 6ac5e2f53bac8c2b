"""The buggy-kernel helpers themselves: their emulation gives the hand-derived
bits (RNE vs truncation tie, scale order, bias point)."""

from __future__ import annotations

import torch
from buggy_kernels import bias_tie_case, emulate, exact_acc32, order_case, tie_case


def _bits(t: torch.Tensor) -> int:
    return int(t.reshape(-1)[0].view(torch.int16)) & 0xFFFF


def test_emulate_tie_rne_vs_rtz():
    ops = tie_case()
    acc = exact_acc32(ops.a, ops.b)
    assert (
        _bits(emulate(acc, ops.scale_a, ops.scale_b, "a_then_w", "fp32_before_round", None, torch.bfloat16)) == 0x3F82
    )
    assert (
        _bits(emulate(acc, ops.scale_a, ops.scale_b, "a_then_w", "fp32_before_round", None, torch.bfloat16, "rtz"))
        == 0x3F81
    )


def test_emulate_order_case_bits():
    ops = order_case()
    acc = exact_acc32(ops.a, ops.b)
    assert int(acc[0, 0]) == 545
    a_w = emulate(acc, ops.scale_a, ops.scale_b, "a_then_w", "fp32_before_round", None, torch.bfloat16)
    w_a = emulate(acc, ops.scale_a, ops.scale_b, "w_then_a", "fp32_before_round", None, torch.bfloat16)
    assert (_bits(a_w), _bits(w_a)) == (0x3C31, 0x3C32)


def test_emulate_bias_tie_bits():
    ops = bias_tie_case()
    acc = exact_acc32(ops.a, ops.b)
    before = emulate(acc, ops.scale_a, ops.scale_b, "a_then_w", "fp32_before_round", ops.bias, torch.bfloat16)
    after = emulate(acc, ops.scale_a, ops.scale_b, "a_then_w", "after_round", ops.bias, torch.bfloat16)
    assert (_bits(before), _bits(after)) == (0x3B80, 0x0000)
