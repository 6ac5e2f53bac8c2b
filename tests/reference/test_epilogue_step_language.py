"""The epilogue step language: built-in contracts round-trip to identical
bits, hand-derived bits for steps the contracts cannot say, exact fma,
one-line errors for bad descriptions."""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.contract import NAMED, EpilogueContract, from_contract, parse_declared, parse_steps, select_steps
from reference.epilogue import apply_epilogue, apply_steps
from reference.errors import ContractError

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _bits(t):
    return t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


@settings(max_examples=60)
@given(
    seed=st.integers(0, 2**31 - 1),
    mag=st.sampled_from([2**7, 2**20, 2**24, 2**30]),
    out=st.sampled_from(["bf16", "fp16", "fp32"]),
    with_bias=st.booleans(),
    smag=st.sampled_from([1e-6, 1e-3, 1.0, 3e2]),
)
def test_named_instances_round_trip_the_builtin_contracts_bit_for_bit(seed, mag, out, with_bias, smag):
    g = torch.Generator().manual_seed(seed)
    m, n = 7, 9
    acc = torch.randint(-mag, mag, (m, n), generator=g)
    sa = torch.rand(m, generator=g) * smag
    sw = torch.rand(n, generator=g) * smag
    sa[0] = 0.0  # an all-zero activation row quantizes to scale 0
    bias = (torch.randn(n, generator=g) * 50).to(DT[out]) if with_bias else None
    for order in ("a_then_w", "w_then_a", "fused"):
        for bp in ("fp32_before_round", "after_round"):
            c = EpilogueContract(order, bp)
            want = apply_epilogue(acc, sa, sw, c, bias=bias, out_dtype=DT[out])
            got = apply_steps(acc, sa, sw, NAMED[f"{order}/{bp}"], bias=bias, out_dtype=DT[out])
            assert torch.equal(_bits(got), _bits(want)), (order, bp)
            assert from_contract(c).to_list() == NAMED[f"{order}/{bp}"].to_list()
            assert NAMED[f"{order}/{bp}"].nearest_contract() == c


def _np_bf16(x32: np.ndarray) -> np.ndarray:
    """float32 -> bf16 RNE -> float32, on the bits (written here, not reference.bits)."""
    u = x32.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return (r & 0xFFFFFFFF).astype(np.uint32).view(np.float32)


def test_bf16_intermediate_and_constant_steps_match_hand_derived_bits():
    # acc = 257 is not a bf16 value: 'cast bf16' rounds it to 256 (tie to even)
    acc = torch.tensor([[257, 3, -259]], dtype=torch.int64)
    sa = torch.tensor([1.0], dtype=torch.float32)
    sw = torch.tensor([1.0, 0.1, 1.0], dtype=torch.float32)
    got = apply_steps(
        acc, sa, sw, ["cast bf16", "mul s_a -> bf16", "mul s_w -> fp32", "cast out"], out_dtype=torch.float32
    )
    # 257 -> 256 and -259 -> -260 (ties to even, spacing 2 above 256); 3 * 0.1f in float32
    assert got.tolist() == [[256.0, float(np.float32(3) * np.float32(0.1)), -260.0]]
    # constant factor rounded to float32 first, as torch does with a Python float
    got = apply_steps(acc, sa, sw, "cast fp32; mul 6.200124e-05; cast fp16", out_dtype=torch.float16)
    want = (acc.numpy().astype(np.float32) * np.float32(6.200124e-05)).astype(np.float16)
    assert np.array_equal(got.numpy().view(np.int16), want.view(np.int16))
    # operand expression: bf16(s_a) and (s_a*127)*(s_w*127)
    sa2 = torch.tensor([0.0123], dtype=torch.float32)
    got = apply_steps(acc, sa2, sw, ["cast fp32", "mul (s_a*127)*(s_w*127)", "cast out"], out_dtype=torch.float32)
    op = (np.float32(0.0123) * np.float32(127)) * (sw.numpy() * np.float32(127))
    assert np.array_equal(got.numpy()[0], acc.numpy()[0].astype(np.float32) * op.astype(np.float32))
    got = apply_steps(acc, sa2, sw, ["cast fp32", "mul bf16(s_a)", "cast bf16"])
    want = _np_bf16(acc.numpy()[0].astype(np.float32) * _np_bf16(np.float32([0.0123]))[0])
    assert np.array_equal(got.float().numpy()[0], want)


def test_fma_step_rounds_once():
    # x*c + b where rounding x*c first loses the answer: x = 1 + 2^-12, c = 1 + 2^-12,
    # b = -(1 + 2^-11): exact result 2^-24; float32(x*c) = 1 + 2^-11 -> separate ops give 0
    x = 1 + 2.0**-12
    acc = torch.tensor([[1]], dtype=torch.int64)
    sa = torch.tensor([x], dtype=torch.float32)
    sw = torch.tensor([x], dtype=torch.float32)
    bias = torch.tensor([-(1 + 2.0**-11)], dtype=torch.float32)
    fused = apply_steps(
        acc, sa, sw, ["cast fp32", "mul s_a", "fma s_w bias", "cast out"], bias=bias, out_dtype=torch.float32
    )
    sep = apply_steps(
        acc, sa, sw, ["cast fp32", "mul s_a", "mul s_w", "add bias", "cast out"], bias=bias, out_dtype=torch.float32
    )
    exact = Fraction(x) * Fraction(x) - Fraction(1 + 2.0**-11)
    assert fused.item() == float(exact) == 2.0**-24
    assert sep.item() == 0.0


def test_fma_bias_optional_is_a_plain_multiply_without_a_bias():
    # acc = -1 times a scale of 1: the product is -1; with acc = 0 and a negative scale it is -0. ``fma .. bias``
    # adds +0.0 without a bias (-0 -> +0); ``fma .. bias?`` multiplies only (-0 stays -0); with a bias both round once
    acc = torch.tensor([[0, -1]], dtype=torch.int64)
    sa, sw = torch.tensor([-1.0]), torch.tensor([1.0, 1.0])
    plus = apply_steps(acc, sa, sw, ["cast fp32", "fma s_a*s_w bias", "cast out"], out_dtype=torch.float32)
    opt = apply_steps(acc, sa, sw, ["cast fp32", "fma s_a*s_w bias?", "cast out"], out_dtype=torch.float32)
    assert [math.copysign(1, v) for v in plus[0].tolist()] == [1.0, 1.0]
    assert [math.copysign(1, v) for v in opt[0].tolist()] == [-1.0, 1.0] and opt[0, 1].item() == 1.0
    x = 1 + 2.0**-12
    one, bias = torch.tensor([[1]], dtype=torch.int64), torch.tensor([-(1 + 2.0**-11)])
    for addend in ("bias", "bias?"):
        got = apply_steps(
            one,
            torch.tensor([x]),
            torch.tensor([x]),
            ["cast fp32", "mul s_a", f"fma s_w {addend}", "cast out"],
            bias=bias,
            out_dtype=torch.float32,
        )
        assert got.item() == 2.0**-24  # one rounding: the fma test above


@pytest.mark.parametrize(
    "desc, fragment",
    [
        ("mul s_a", "first step must cast"),
        (["cast fp32", "mul s_q", "cast out"], "unknown operand name 's_q'"),
        ("cast fp32; mul s_a+1; cast out", "only '*'"),
        ("cast fp33", "dtype 'fp33'"),
        ("cast fp32; mul s_a", "must end in the output dtype"),
        ("cast fp32; add bas; cast out", "only 'add bias"),
        ("cast fp32; mul __import__('os'); cast out", "only '*'"),
        ("cast bf16 nearest", "rounding 'nearest'"),
        ("cast fp32; fma 2.0 bais; cast out", "fma <operand> bias|bias?|0"),
        ("cast fp32; mul s_a -> fp64; cast out", "result dtype 'fp64'"),
        ("cast fp32; mul s_a*1e999; cast out", "constant inf is not a finite float32 number"),
        ("cast fp32; mul s_a*-1e39; cast out", "constant 1e+39 is not a finite float32 number"),
        ("", "empty epilogue description"),
        (5, "must be a list of step strings"),
        ({"gpu": "cast out"}, "selector 'gpu'"),
    ],
)
def test_bad_descriptions_are_refused_with_one_line(desc, fragment):
    with pytest.raises(ContractError) as e:
        parse_declared(desc)
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_final_dtype_must_match_the_call():
    acc = torch.ones((1, 1), dtype=torch.int64)
    with pytest.raises(ContractError, match="ends in fp16 but the call asked for"):
        apply_steps(acc, torch.ones(1), torch.ones(1), "cast fp32; cast fp16", out_dtype=torch.bfloat16)


def test_per_device_selection_order():
    decl = parse_declared({"cpu": "cast out", "cuda/float16": "cast fp16", "*": "cast fp32; cast out"})
    assert select_steps(decl, "cuda:0", torch.float16).to_list() == ["cast fp16"]
    assert select_steps(decl, "cpu", torch.float16).to_list() == ["cast out"]
    assert select_steps(decl, "cuda", torch.bfloat16).to_list() == ["cast fp32", "cast out"]
    assert parse_steps("w_then_a/after_round") is NAMED["w_then_a/after_round"]
