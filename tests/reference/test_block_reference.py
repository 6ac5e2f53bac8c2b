"""The block-scaled reference (``reference.block``) against an independent element-by-element emulation in numpy
float32 (each numpy float32 op rounds once; ``math.fsum``-free: the int8 partial is a Python integer sum), the forms
it tells apart, and its one-line errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from reference.block.contract import FIELD_FORMS, parse_block_accumulation, parse_block_epilogue
from reference.block.evaluate import reference_block_scaled_mm
from reference.errors import ContractError, OperandError


def _fmaf(x: np.float32, y: np.float32, z: np.float32) -> np.float32:
    """fmaf through exact rationals: the exact x*y+z rounded once to float32 (numpy's float32 cast of a Python
    float is one RNE of a double, so round the exact value to a double first only when that is exact)."""
    from fractions import Fraction

    exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
    lo = np.float32(float(exact))  # candidate, then fix by comparing the neighbours' distances exactly
    best = min(
        (np.nextafter(lo, np.float32(-np.inf)), lo, np.nextafter(lo, np.float32(np.inf))),
        key=lambda c: (abs(Fraction(float(c)) - exact), int(np.float32(c).view(np.int32)) & 1),
    )
    return np.float32(best)


def _emulate(a, b, sa, sw, bn, bk, form, bias, out_dtype):
    m, k = a.shape
    n = b.shape[0]
    kb = math.ceil(k / bk)
    out = np.zeros((m, n), dtype=np.float32)
    for i in range(m):
        for j in range(n):
            acc = np.float32(0.0)
            for q in range(kb):
                p = np.float32(sum(int(a[i, t]) * int(b[j, t]) for t in range(q * bk, min(k, (q + 1) * bk))))
                s_a, s_w = np.float32(sa[i, q]), np.float32(sw[j // bn, q])
                if form == "mul s_a; mul s_w; add":
                    acc = np.float32(acc + np.float32(np.float32(p * s_a) * s_w))
                elif form == "mul s_a; fma s_w":
                    acc = _fmaf(np.float32(p * s_a), s_w, acc)
                elif form == "mul s_a*s_w; add":
                    acc = np.float32(acc + np.float32(p * np.float32(s_a * s_w)))
                else:
                    acc = _fmaf(p, np.float32(s_a * s_w), acc)
            if bias is not None:
                acc = np.float32(acc + np.float32(bias[j]))
            out[i, j] = acc
    return torch.from_numpy(out).to(out_dtype)


@pytest.mark.parametrize("form", list(FIELD_FORMS))
@pytest.mark.parametrize("bn,bk,k", [(128, 128, 300), (1, 16, 40), (2, 8, 19)])
def test_every_field_form_matches_the_element_by_element_emulation(form, bn, bk, k):
    g = torch.Generator().manual_seed(7)
    m, n = 3, 5
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
    kb, nb = -(-k // bk), -(-n // bn)
    sa = torch.rand((m, kb), generator=g) * 1e-3 + 1e-4  # full mantissas: every rounding shows
    sw = torch.rand((nb, kb), generator=g) * 1e-2 + 1e-3
    bias = torch.randn(n, generator=g).to(torch.bfloat16)
    got = reference_block_scaled_mm(a, b, sa, sw, (bn, bk), form, "add bias; cast out", bias, torch.bfloat16)
    want = _emulate(a.numpy(), b.numpy(), sa.numpy(), sw.numpy(), bn, bk, form, bias.float().numpy(), torch.bfloat16)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_the_forms_differ_on_full_mantissa_scales_and_agree_on_powers_of_two():
    g = torch.Generator().manual_seed(3)
    a = torch.randint(-128, 128, (16, 512), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (16, 512), generator=g, dtype=torch.int8)
    sa, sw = torch.rand((16, 4), generator=g) + 0.5, torch.rand((1, 4), generator=g) + 0.5
    outs = [
        reference_block_scaled_mm(a, b, sa, sw, (128, 128), f, "cast out", None, torch.float32) for f in FIELD_FORMS
    ]
    assert len({o.numpy().tobytes() for o in outs}) == len(FIELD_FORMS)
    p2a, p2w = torch.exp2(torch.randint(-8, 8, (16, 4), generator=g).float()), torch.exp2(torch.ones(1, 4))
    outs = [
        reference_block_scaled_mm(a, b, p2a, p2w, (128, 128), f, "cast out", None, torch.float32) for f in FIELD_FORMS
    ]
    assert len({o.numpy().tobytes() for o in outs}) == 1


def test_split_k_sums_chunk_totals_in_order():
    a = torch.tensor([[1, 1, 1]], dtype=torch.int8)
    b = torch.tensor([[1, 1, 1]], dtype=torch.int8)
    # K-blocks of 1: scaled partials 2**24, 1, 1. Sequential: (2**24 + 1) + 1 = 2**24 (each +1 lost to RNE);
    # split_k=2 (blocks {0, 1} and {2}): (2**24 + 1 -> 2**24) + 1 -> 2**24 too; split_k=3: 2**24 + 1 + 1 likewise,
    # but chunks {0}, {1, 2}: 2**24 + 2 exactly
    sa = torch.tensor([[2.0**24, 1.0, 1.0]])
    sw = torch.ones((1, 3))
    seq = reference_block_scaled_mm(a, b, sa, sw, (1, 1), "mul s_a; mul s_w; add", "cast out", None, torch.float32)
    assert seq.item() == 2.0**24
    sa2 = torch.tensor([[1.0, 1.0, 2.0**24]])  # chunks {0, 1} and {2} with split_k=2: 2 + 2**24 exactly
    two = reference_block_scaled_mm(
        a, b, sa2, sw, (1, 1), "mul s_a; mul s_w; add; order split_k=2", "cast out", None, torch.float32
    )
    assert two.item() == 2.0**24 + 2
    one = reference_block_scaled_mm(a, b, sa2, sw, (1, 1), "mul s_a; mul s_w; add", "cast out", None, torch.float32)
    assert one.item() == 2.0**24 + 2  # 1 + 1 = 2 first, then exact


def test_interleaved_split_k_takes_every_s_th_k_block():
    # K-blocks of 1, scaled partials 1, 2**24, 1, -2**24. Sequential: 1 + 2**24 ties to 2**24, + 1 ties to 2**24,
    # - 2**24 -> 0. Contiguous split_k=2 ({0, 1}, {2, 3}): 2**24 + (1 - 2**24) = 1. Interleaved ({0, 2}, {1, 3}):
    # 2 + 0 = 2.
    a = torch.tensor([[1, 1, 1, -1]], dtype=torch.int8)
    b = torch.ones((1, 4), dtype=torch.int8)
    sa, sw = torch.tensor([[1.0, 2.0**24, 1.0, 2.0**24]]), torch.ones((1, 4))
    got = {
        order: reference_block_scaled_mm(
            a, b, sa, sw, (1, 1), "mul s_a; mul s_w; add" + order, "cast out", None, torch.float32
        ).item()
        for order in ("", "; order split_k=2", "; order split_k=2 interleaved")
    }
    assert list(got.values()) == [0.0, 1.0, 2.0]
    form = parse_block_accumulation("mul s_a; fma s_w; order split_k = 3  interleaved")
    assert (form.split_k, form.interleaved) == (3, True)
    assert form.label() == "mul s_a; fma s_w; order split_k=3 interleaved"
    one = parse_block_accumulation("mul s_a; mul s_w; add; order split_k=1 interleaved")
    assert (one.interleaved, one.label()) == (False, "mul s_a; mul s_w; add")
    with pytest.raises(ContractError, match="'split_k=S interleaved'"):
        parse_block_accumulation("mul s_a; mul s_w; add; order split_k=2 strided")


def test_bad_declarations_and_operands_are_one_line_errors():
    with pytest.raises(ContractError, match="exactly once"):
        parse_block_accumulation("mul s_a; add")
    with pytest.raises(ContractError, match="not in the epilogue"):
        parse_block_epilogue("mul s_a; cast out")
    a = torch.zeros((2, 130), dtype=torch.int8)
    with pytest.raises(OperandError, match=r"scale_b is torch.float32 \[2, 2\]; .* = \[1, 2\]"):
        reference_block_scaled_mm(a, a, torch.ones(2, 2), torch.ones(2, 2), (128, 128))
    with pytest.raises(OperandError, match="b has dtype torch.float32; expected torch.int8"):
        reference_block_scaled_mm(a, a.float(), torch.ones(2, 2), torch.ones(1, 2), (128, 128))
