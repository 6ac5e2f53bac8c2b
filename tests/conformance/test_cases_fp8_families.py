"""Accumulator-safe FP8 families (conformance.cases.fp8): names, regimes, determinism, the lemma's bound, and an
emulated kernel keeping 14 bits (truncating, promoting every 128, or in other k orders) gives the exact sum on
every element of every case."""

from __future__ import annotations

import random
import re

import pytest
import torch
from fp8_kernels import emulated_units, fp8_kernel, operand_units

from conformance.cases.fp8 import FP8_FAMILIES, SAFE_BITS, fp8_family_cases
from reference.fp8 import E4M3, exact_at_bits


@pytest.fixture(scope="module")
def cases():
    return fp8_family_cases()


@pytest.fixture(scope="module")
def unique_operands(cases):
    """One case per distinct (a, b) values (the grid repeats them over scale modes and output dtypes)."""
    seen = {}
    for c in cases:
        seen.setdefault((c.a.dtype, c.name.split("-")[0], c.a.shape, c.b.shape), c)
    return list(seen.values())


def exact_units(a, b) -> torch.Tensor:
    return operand_units(a) @ operand_units(b).T  # int64, exact


def test_names_operands_and_bound(cases):
    # 18 small_int + 6 narrow_span regimes + overflow_inf, each over the 6-entry grid; + 6 scale_order_ties cases;
    # 4 small_int regimes on 1, 2, 2, 1 grid pairs; special_values: 5 scale forms x 2 grid pairs; issue 41: 9 more
    # small_int regimes (prefill / wide layouts, bias values) on 3, 3, 3, 2, 3, 3, 3, 3, 3 grid pairs,
    # overflow_inf under 4 scale forms x 3 output dtypes, signed_zero and subnormal 6 + 3 each; a later new user:
    # overflow_inf under a 0-d scale_b and with a bias (2 x 3), signed_zero under 3 one-value forms (3 x 3),
    # scale_values (4 x 6), 2 uniform-scale_a ties
    assert len(cases) == len({c.name for c in cases}) == 6 * 25 + 6 + 6 + 10 + 26 + 12 + 9 + 9 + 6 + 9 + 24 + 2
    fams = "small_int|narrow_span|overflow_inf|scale_order_ties|special_values|signed_zero|subnormal|scale_values"
    for c in cases:
        pattern = rf"fp8/({fams})/[a-z_0-9]+-(real|pow2)-(bf16|fp16|fp32)"
        assert re.fullmatch(pattern, c.name), c.name
        assert c.a.dtype == c.b.dtype == E4M3 and c.meta["operands"] == "e4m3"
        assert c.meta["safe_bits"] == SAFE_BITS
        if c.meta["family"] == "special_values":  # per-element units: the lemma element by element
            assert bool(exact_at_bits(c.a, c.b, SAFE_BITS).all())
        else:
            assert 0 < c.meta["abs_sum_max_units"] < 2**SAFE_BITS
        assert c.meta["family"] in FP8_FAMILIES and c.scale_mode == (
            "pow2" if c.meta["scale_kind"] == "pow2" else "synthetic"
        )


def test_regimes_and_layouts_are_reached(cases):
    ms, ks = {c.m for c in cases}, {c.k for c in cases}
    assert 1 in ms and any(1 < m <= 16 for m in ms) and any(m > 128 for m in ms)
    assert any(k < 16 for k in ks) and any(k % 16 and k > 128 for k in ks) and any(k > 3 * 128 for k in ks)
    layouts = {(c.layouts()["a"], c.layouts()["b"]) for c in cases}
    assert ("row-major padded", "dense") in layouts and ("dense", "column-major") in layouts
    assert ("row-major padded", "column-major") in layouts
    assert any(c.b.stride(0) == 1 and c.b.stride(1) > c.n for c in cases)  # column-major b, leading dimension > N
    assert any(c.n > 32768 for c in cases)
    assert any(c.bias is not None for c in cases) and any(c.meta["unit_log2"] < 0 for c in cases)


def test_deterministic(cases):
    again = fp8_family_cases()
    assert [c.digests() for c in cases] == [c.digests() for c in again]


@pytest.mark.parametrize(
    "model, order",
    [
        ("fp32 bits=14 truncate promote=128", None),
        ("fp32 bits=14 truncate", "reversed"),
        ("fp32 bits=14 rne promote=32", "shuffled"),
    ],
)
def test_fourteen_bit_accumulators_are_exact_on_every_element(unique_operands, model, order):
    for c in unique_operands:
        k = c.k
        ks = None if order is None else list(range(k - 1, -1, -1))
        if order == "shuffled":
            ks = random.Random(k).sample(range(k), k)
        got = emulated_units(c.a, c.b, model, ks)
        assert torch.equal(got, exact_units(c.a, c.b)), c.name


def test_the_bound_is_tight_enough_to_discriminate(unique_operands):
    """A 12-bit accumulator is not exact on the monotone cases (partial sums past 2**12 units)."""
    mono = [c for c in unique_operands if "/monotone" in c.name]
    assert mono and all(c.meta["abs_sum_max_units"] > 2**13 for c in mono)
    for c in mono:
        assert not torch.equal(emulated_units(c.a, c.b, "fp32 bits=12 truncate"), exact_units(c.a, c.b)), c.name


def test_emulated_kernel_output_is_the_epilogue_of_the_exact_sum(cases):
    c = next(x for x in cases if x.name == "fp8/narrow_span/all_layouts-pow2-fp32")
    out = fp8_kernel("fp32 bits=14 truncate promote=128")(c.a, c.b, c.scale_a, c.scale_b, c.out_dtype, c.bias)
    acc = (exact_units(c.a, c.b).double() / 2.0**18).float()
    sa, sb = c.scale_a.reshape(-1), c.scale_b.reshape(-1)
    want = (acc * sa[:, None] * sb[None, :] + c.bias.float()).to(c.out_dtype)
    assert torch.equal(out, want)


def test_scale_order_ties_tell_every_pair_of_orders_apart():
    """On each scale_order_ties case the exact sum through a_then_w, w_then_a and fused rounds apart pairwise on some
    element, so a kernel declaring the wrong scale order fails C8 there."""
    for c in fp8_family_cases(["scale_order_ties"]):
        acc = exact_units(c.a, c.b)  # units of 2**-18; integer-valued operands: products are multiples of 2**18
        x = (acc // 2**18).to(torch.float32)
        sa, sw = c.scale_a.float()[:, None], c.scale_b.float()[None, :]
        outs = [((x * sa) * sw).to(c.out_dtype), ((x * sw) * sa).to(c.out_dtype), (x * (sa * sw)).to(c.out_dtype)]
        for i in range(3):
            for j in range(i + 1, 3):
                assert not torch.equal(outs[i], outs[j]), (c.name, i, j)
