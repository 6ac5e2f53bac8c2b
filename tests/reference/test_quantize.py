"""reference.quantize: compressed-tensors weights, vLLM per-token activations.

Expected values derived by hand (comments) or with numpy float32 arithmetic,
independently of the code under test.
"""

import struct

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from reference.errors import OperandError
from reference.quantize import dequantize_weight, quantize_activation_per_token, quantize_weight_per_channel


def bits16(t):
    return [v & 0xFFFF for v in t.contiguous().view(torch.int16).flatten().tolist()]


def f32_from_bits(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


def test_weight_hand_case_bf16():
    w = torch.tensor([[1.0, -2.0, 0.5, 0.0], [127.5, 2.5, 3.5, -2.5], [-127.5, 0.5, 1.5, 10.0]], dtype=torch.bfloat16)
    q, s = quantize_weight_per_channel(w)
    # row 0: absmax 2; 2/127.5 = 0.015686.. = 2**-6 * 1.0039; bf16 keeps 7 fraction bits:
    #   1.0039 is past the midpoint 1 + 2**-8 -> 1 + 2**-7 -> scale 0x3C81 = 0.0157470703125.
    #   1/scale = 63.504 -> bf16 (spacing 0.25 in [32, 64)) 63.5 -> half-even -> 64;
    #   -2/scale = -127.008 -> bf16 -127.0 -> -127; 0.5/scale = 31.75 -> 32.
    # row 1: scale = 127.5/127.5 = 1.0 (0x3F80); 2.5 -> 2, 3.5 -> 4, -2.5 -> -2 (half-even);
    #   127.5 -> clamp(127.5) then round -> 127.5 is clamped to 127 first -> 127
    # row 2: -127.5 is inside [-128, 127]; round half even -> -128
    assert bits16(s) == [0x3C81, 0x3F80, 0x3F80]
    assert s.shape == (3, 1) and s.dtype == torch.bfloat16
    assert q.tolist() == [[64, -127, 32, 0], [127, 2, 4, -2], [-128, 0, 2, 10]]
    assert q.dtype == torch.int8


def test_weight_division_happens_in_bf16():
    # scale = 0x3C81 = 0.0157470703125 (row absmax 2.0, as above).
    # 1.5859375 / scale = 100.713.. -> rounded to bf16 first (spacing 0.5 in [64, 128),
    # below the midpoint 100.75) = 100.5 -> round half even -> 100, whereas a float32
    # division would give round(100.713) = 101. 1.59375 / scale = 101.209 -> bf16 101 -> 101.
    w = torch.tensor([[2.0, 1.5859375, -1.5859375, 1.59375]], dtype=torch.bfloat16)
    q, s = quantize_weight_per_channel(w)
    assert bits16(s) == [0x3C81]
    assert q.tolist() == [[127, 100, -100, 101]]
    fp32_way = torch.round(w.float() / s.float()).to(torch.int8)
    assert fp32_way.tolist() == [[127, 101, -101, 101]]


def test_weight_scale_floor_variants():
    w = torch.tensor([[0.0, 0.0, -0.0], [1e-6, 0.0, 0.0]], dtype=torch.bfloat16)
    q, s = quantize_weight_per_channel(w)
    # current compressed-tensors: a zero scale becomes finfo(bf16).eps = 2**-7 (0x3C00);
    # row 1's non-zero tiny scale is kept: bf16(1e-6) / 127.5
    assert bits16(s)[0] == 0x3C00
    assert q.tolist()[0] == [0, 0, 0]
    q2, s2 = quantize_weight_per_channel(w, scale_floor="clamp_fp32_eps")
    # older releases: clamp(min=float32 eps = 2**-23) -> bf16 0x3400 for both rows
    assert bits16(s2) == [0x3400, 0x3400]
    # 1e-6 (bf16 ~ 9.98e-7) / 2**-23 = 8.37.. -> bf16 8.375 -> 8
    assert q2.tolist() == [[0, 0, 0], [8, 0, 0]]


def test_weight_float32_and_float16():
    w = torch.tensor([[2.55, -1.0, 0.01]], dtype=torch.float32)
    q, s = quantize_weight_per_channel(w)
    s_np = np.float32(2.55) / np.float32(127.5)  # one float32 division
    assert s.dtype == torch.float32 and float(s) == float(s_np)
    exp = np.round(np.clip(np.array([2.55, -1.0, 0.01], np.float32) / s_np, -128, 127))
    assert q.tolist() == [exp.astype(np.int8).tolist()]
    w16 = torch.tensor([[-1.0, 0.25]], dtype=torch.float16)
    q16, s16 = quantize_weight_per_channel(w16)
    assert s16.dtype == torch.float16 and q16.tolist() == [[-128, 32]]  # -127.5 -> -128


@pytest.mark.parametrize("dtype,top", [(torch.bfloat16, 0x7F80), (torch.float16, 0x7C00)])
def test_weight_scale_is_correctly_rounded_for_every_value(dtype, top):
    # every finite positive value as a one-element row; the tool's torch division must
    # equal the correctly rounded absmax/127.5 (float64 division, then a second rounding
    # to 8/11-bit significands, innocuous since 53 >= 2*11 + 2: Figueroa, SIGNUM 1995),
    # and also CUDA's formula float32(x) * float32(1/127.5), so CPU and GPU runs of the
    # tool give the same scale bits.
    v = torch.arange(1, top, dtype=torch.int32).to(torch.int16).view(dtype)
    _, s = quantize_weight_per_channel(v.reshape(-1, 1))
    exact = (v.double() / 127.5).to(dtype)
    nz = exact != 0  # values whose scale underflows to 0 get the eps floor instead
    got = s.reshape(-1)
    assert torch.equal(got[nz].view(torch.int16), exact[nz].view(torch.int16))
    cuda_formula = (v.float() * torch.tensor(1 / 127.5, dtype=torch.float32)).to(dtype)
    assert torch.equal(got[nz].view(torch.int16), cuda_formula[nz].view(torch.int16))
    assert bool((got[~nz] == torch.finfo(dtype).eps).all())


def test_dequantize_weight():
    q = torch.tensor([[64, -127], [1, 0]], dtype=torch.int8)
    s = torch.tensor([[2.0**-6], [0.5]], dtype=torch.bfloat16)
    d = dequantize_weight(q, s)
    assert d.dtype == torch.bfloat16 and d.float().tolist() == [[1.0, -127 / 64], [0.5, 0.0]]


def test_activation_hand_case():
    x = torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0]])
    q, s = quantize_activation_per_token(x)
    # inv_s = 127/2 = 63.5 exactly; 1*63.5 = 63.5 -> half-even 64; -2 -> -127; 31.75 -> 32
    assert q.tolist() == [[64, -127, 32], [0, 0, 0]]
    assert s.dtype == torch.float32 and s.shape == (2,)
    assert float(s[0]) == float(np.float32(2.0) / np.float32(127.0)) and float(s[1]) == 0.0


def test_activation_uses_reciprocal_multiply_not_division():
    a_max, x = f32_from_bits(0x40A2008A), f32_from_bits(0x3F09C3FC)
    inv = np.float32(127.0) / np.float32(a_max)
    by_mul = np.float32(x) * inv  # vLLM: x * (127/absmax)
    by_div = np.float32(x) / (np.float32(a_max) / np.float32(127.0))  # x / scale
    assert (np.round(by_mul), np.round(by_div)) == (13.0, 14.0)
    q, _ = quantize_activation_per_token(torch.tensor([[a_max, x]], dtype=torch.float32))
    assert q.tolist() == [[127, 13]]


def test_activation_bf16_input_is_widened_exactly():
    x = torch.tensor([[0.3, -1.7, 2.2]], dtype=torch.bfloat16)
    q, s = quantize_activation_per_token(x)
    xf = x.float().numpy()[0]
    am = np.float32(np.abs(xf).max())
    inv = np.float32(127.0) / am
    assert q.tolist() == [np.clip(np.round(xf * inv), -128, 127).astype(np.int8).tolist()]


def test_quantize_errors():
    with pytest.raises(OperandError, match="w has dtype torch.int8"):
        quantize_weight_per_channel(torch.zeros(2, 2, dtype=torch.int8))
    with pytest.raises(OperandError, match=r"w has 1 non-finite value\(s\) \(first at \(0, 1\)\)"):
        quantize_weight_per_channel(torch.tensor([[1.0, float("inf")]]))
    with pytest.raises(OperandError, match="non-empty 2-D"):
        quantize_activation_per_token(torch.zeros(3))
    with pytest.raises(OperandError, match="scale_floor"):
        quantize_weight_per_channel(torch.ones(2, 2), scale_floor="none")


def _bf16_of_f32(arr: np.ndarray) -> np.ndarray:
    """Round float32 values to bf16 (RNE) and widen back, via integer bits."""
    b = arr.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


@given(st.integers(1, 6), st.integers(1, 40), st.integers(0, 2**32 - 1), st.sampled_from([1e-3, 0.05, 1.0, 30.0]))
def test_weight_matches_numpy_emulation_of_the_tool(n, k, seed, mag):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) * mag).to(torch.bfloat16)
    q, s = quantize_weight_per_channel(w)
    wf = w.float().numpy()
    absmax = np.abs(wf).max(axis=1, keepdims=True)
    scale = _bf16_of_f32(absmax / np.float32(127.5))  # fp32 op, then bf16
    scale = np.where(scale == 0, np.float32(2.0**-7), scale)
    scaled = _bf16_of_f32(wf / scale)  # fp32 op, then bf16
    exp_q = np.round(np.clip(scaled, -128, 127)).astype(np.int8)  # np.round: half even
    assert s.float().numpy().tolist() == scale.tolist()
    assert q.numpy().tolist() == exp_q.tolist()


@given(
    st.integers(1, 6),
    st.integers(1, 40),
    st.integers(0, 2**32 - 1),
    st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
)
def test_activation_matches_numpy_emulation_of_vllm(m, k, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, k, generator=g) * 3).to(dtype)
    x[0, 0] = 0.0
    q, s = quantize_activation_per_token(x)
    xf = x.float().numpy()
    absmax = np.abs(xf).max(axis=1)
    with np.errstate(divide="ignore"):
        inv = np.where(absmax == 0, np.float32(0), np.float32(127.0) / absmax).astype(np.float32)
    exp_q = np.clip(np.round(xf * inv[:, None]), -128, 127).astype(np.int8)
    assert q.numpy().tolist() == exp_q.tolist()
    assert s.numpy().tolist() == (absmax / np.float32(127.0)).astype(np.float32).tolist()
