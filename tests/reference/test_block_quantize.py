"""reference.block.quantize: per-token-group activations (vLLM) and weight blocks (compressed-tensors).

Expected values are derived by hand (comments), by a numpy float32 transcription of the cited op order, or from the
library itself (compressed-tensors, when importable)."""

import math

import numpy as np
import pytest
import torch

from reference.block.quantize import (
    GROUP_EPS,
    block_quantize_layer,
    ceil_to_ue8m0,
    quantize_activation_per_token_group,
    quantize_weight_blocks,
)
from reference.errors import OperandError
from reference.fp8 import MIN_SCALING_FACTOR

F32 = np.float32


def bf16(bits):
    return torch.from_numpy(np.array(bits, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)


def test_known_scale_and_int8_rounding_of_halves():
    # absmax 127 -> scale 127 / 127 = 1.0 exactly, so q is the rounding of x itself: the CUDA kernel's int8_t(q)
    # truncates toward zero (2.5 -> 2, 3.5 -> 3, -2.5 -> -2, -0.75 -> 0); vLLM's torch reference rounds half to even
    x = torch.tensor([[127.0, 2.5, 3.5, -2.5, -0.75, -127.0]])
    for rule, want in (("kernel", [127, 2, 3, -2, 0, -127]), ("native", [127, 2, 4, -2, -1, -127])):
        q, s = quantize_activation_per_token_group(x, 128, "int8", rule=rule)
        assert s.dtype == torch.float32 and s.tolist() == [[1.0]]
        assert q.dtype == torch.int8 and q.tolist() == [want], rule


def test_kernel_truncation_can_take_the_row_max_to_126():
    # bf16 0x3F8F = 1.1171875: fl32(1.1171875 / 127) = s, and 1.1171875 / s = 126.99999 in float32 -> int8_t 126
    x = bf16([[0x3F8F]])
    s_want = F32(1.1171875) / F32(127)
    assert F32(1.1171875) / s_want < 127
    qk, sk = quantize_activation_per_token_group(x, 128, "int8", rule="kernel")
    qn, _ = quantize_activation_per_token_group(x, 128, "int8", rule="native")
    assert sk.item() == float(s_want) and qk.item() == 126 and qn.item() == 127


def test_partial_last_group_and_zero_group_eps():
    # K = 130 in groups of 128: the second group is columns 128..129 only; group 0 of row 1 is all zero
    x = torch.zeros(2, 130)
    x[0, :128] = 0.5
    x[0, 128:] = torch.tensor([127.0, -3.0])
    x[1, 128:] = torch.tensor([-448.0, 224.0])
    q, s = quantize_activation_per_token_group(x, 128, "int8")
    assert s.shape == (2, 2)
    assert s[0, 1].item() == 1.0 and q[0, 128:].tolist() == [127, -3]
    # eps: the kernel's absmax starts at fl32(1e-10), so an all-zero group has scale fl32(fl32(1e-10) / 127), q 0
    assert s[1, 0].item() == float(F32(1e-10) / F32(127)) and GROUP_EPS == float(F32(1e-10))
    assert int(q[1, :128].abs().sum()) == 0
    qe, se = quantize_activation_per_token_group(x, 128, "e4m3")
    assert se[1, 1].item() == 1.0 and qe[1, 128:].float().tolist() == [-448.0, 224.0]
    assert se[1, 0].item() == float(F32(1e-10) / F32(448))
    # vLLM's forward_native floors the scale at 1 / (448 * 512) instead
    _, sn = quantize_activation_per_token_group(x, 128, "e4m3", rule="native")
    assert sn[1, 0].item() == float(torch.tensor(MIN_SCALING_FACTOR, dtype=torch.float32))


def test_column_major_scales_strides():
    x = torch.randn(5, 384, generator=torch.Generator().manual_seed(1))
    q_r, s_r = quantize_activation_per_token_group(x, 128, "e4m3")
    q_c, s_c = quantize_activation_per_token_group(x, 128, "e4m3", column_major_scales=True)
    assert s_r.stride() == (3, 1) and s_c.stride() == (1, 5) and s_c.shape == (5, 3)
    assert torch.equal(s_r, s_c) and torch.equal(q_r.view(torch.uint8), q_c.view(torch.uint8))


def test_ue8m0_rounds_the_scale_up_by_its_bits():
    s = torch.tensor([0.75, 0.5, 2.0**-8 * (1 + 2.0**-23), 3.0], dtype=torch.float32)
    assert ceil_to_ue8m0(s).tolist() == [1.0, 0.5, 2.0**-7, 4.0]
    # absmax 336 -> 336 / 448 = 0.75 -> 1.0: q is x itself, rounded to e4m3 (17 -> 16, a tie to even)
    q, sc = quantize_activation_per_token_group(torch.tensor([[336.0, 17.0]]), 128, "e4m3", use_ue8m0=True)
    assert sc.tolist() == [[1.0]] and q.float().tolist() == [[320.0, 16.0]]


def _kernel_numpy(x: np.ndarray, g: int, qmax: float) -> tuple[np.ndarray, np.ndarray]:
    """The CUDA op order one element at a time in numpy float32 (per_token_group_quant.cu:45-84), int8 only."""
    m, k = x.shape
    q = np.zeros((m, k), np.int8)
    s = np.zeros((m, math.ceil(k / g)), np.float32)
    for i in range(m):
        for j in range(0, k, g):
            grp = x[i, j : j + g].astype(np.float32)
            absmax = F32(1e-10)
            for v in grp:
                absmax = max(absmax, F32(abs(v)))
            sc = F32(absmax / F32(qmax))
            s[i, j // g] = sc
            for t, v in enumerate(grp):
                r = min(max(F32(v / sc), F32(-128)), F32(qmax))
                q[i, j + t] = int(r)  # C++ float -> int8_t: toward zero
    return q, s


def test_kernel_int8_matches_a_numpy_transcription():
    x = (torch.randn(3, 200, generator=torch.Generator().manual_seed(2)) * 3).to(torch.bfloat16)
    q, s = quantize_activation_per_token_group(x, 64, "int8")
    qn, sn = _kernel_numpy(x.float().numpy(), 64, 127.0)
    assert np.array_equal(s.numpy().view(np.uint32), sn.view(np.uint32)) and np.array_equal(q.numpy(), qn)


def test_dequantized_within_half_a_step():
    x = torch.randn(4, 300, generator=torch.Generator().manual_seed(3))
    q, s = quantize_activation_per_token_group(x, 128, "int8", rule="native")
    step = s.repeat_interleave(128, dim=1)[:, :300]
    assert bool(((q.float() * step - x).abs() <= step * (0.5 + 1e-5)).all())
    qk, sk = quantize_activation_per_token_group(x, 128, "int8")  # truncation: within one step, toward zero
    err = x - qk.float() * sk.repeat_interleave(128, dim=1)[:, :300]
    assert bool((err.abs() < step * (1 + 1e-6)).all()) and bool((err * x >= -1e-12).all())
    w = torch.randn(300, 260, generator=torch.Generator().manual_seed(4))
    qw, sw = quantize_weight_blocks(w, (128, 128), "int8")
    full = sw.repeat_interleave(128, 0).repeat_interleave(128, 1)[:300, :260]
    assert bool(((qw.float() * full - w).abs() <= full * (0.5 + 1e-5)).all())


def test_weight_blocks_hand_values_partial_blocks_and_saturation():
    # N = 130, K = 129 in 128 x 128 blocks -> scale [2, 2]; block (1, 1) holds the single element w[129, 128]
    w = torch.zeros(130, 129)
    w[0, 0] = -254.0  # block (0, 0): absmax 254 -> scale 254 / 127.5 in fp32; -254 / scale -> -127.5 -> -128 (even)
    w[129, 128] = 1.5  # block (1, 1): 1.5 / 127.5
    q, s = quantize_weight_blocks(w, (128, 128), "int8")
    assert s.shape == (2, 2) and s[0, 0].item() == float(F32(254) / F32(127.5))
    assert s[1, 1].item() == float(F32(1.5) / F32(127.5))
    assert s[0, 1].item() == s[1, 0].item() == float(np.finfo(np.float32).eps)  # all-zero blocks
    assert q[0, 0].item() == -128 and q[129, 128].item() == 127
    # e4m3, bf16: 0x3F81 = 1.0078125; its bf16 scale 1.0078125 / 448 rounds down to 0.0022430419921875, so w / scale
    # = 450 in bf16, clamped to 448; -0.0 + 0 (the zero point) is +0.0 (byte 0x00)
    wb = torch.stack([bf16([0x3F81, 0x8000])])
    qe, se = quantize_weight_blocks(wb, (128, 128), "e4m3")
    assert se.item() == 0.0022430419921875 and (wb[0, 0] / se.to(torch.bfloat16)).item() == 450.0
    assert qe.view(torch.uint8).tolist() == [[0x7E, 0x00]]  # 0x7E = 448


def test_layer_operands_follow_the_block_contract():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 200, generator=g).to(torch.bfloat16)
    w = torch.randn(130, 200, generator=g).to(torch.bfloat16)
    bias = torch.randn(130, generator=g)
    ops = block_quantize_layer(x, w, bias, (128, 64), "e4m3", column_major_scales=True)
    assert ops.a.shape == (3, 200) and ops.scale_a.shape == (3, 4) and ops.scale_a.stride() == (1, 3)
    assert ops.b.shape == (130, 200) and ops.scale_b.shape == (2, 4) and ops.scale_b.dtype == torch.float32
    assert ops.bias is not None and ops.bias.dtype == torch.bfloat16 and torch.equal(ops.bias, bias.to(torch.bfloat16))
    a, sa = quantize_activation_per_token_group(x, 64, "e4m3")
    assert torch.equal(ops.a.view(torch.uint8), a.view(torch.uint8)) and torch.equal(ops.scale_a, sa)


@pytest.mark.parametrize(
    "call",
    [
        lambda: quantize_activation_per_token_group(torch.zeros(2, 4), 0),
        lambda: quantize_activation_per_token_group(torch.zeros(2, 4), 4, "fp4"),
        lambda: quantize_activation_per_token_group(torch.zeros(2, 4), 4, rule="triton"),
        lambda: quantize_activation_per_token_group(torch.tensor([[float("nan")]]), 4),
        lambda: quantize_activation_per_token_group(torch.zeros(2, 4), 4, "int8", rule="native", use_ue8m0=True),
        lambda: quantize_weight_blocks(torch.zeros(2, 4), (128,)),
        lambda: quantize_weight_blocks(torch.zeros(2, 4, dtype=torch.int32)),
        lambda: block_quantize_layer(torch.zeros(2, 4), torch.zeros(3, 5)),
        lambda: block_quantize_layer(torch.zeros(2, 4), torch.zeros(3, 4), torch.zeros(4)),
    ],
)
def test_bad_input_is_one_line_operand_error(call):
    with pytest.raises(OperandError) as e:
        call()
    assert "\n" not in str(e.value)


def test_weight_blocks_byte_identical_to_compressed_tensors():
    ct = pytest.importorskip("compressed_tensors")
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import quantize
    from compressed_tensors.quantization.utils import calculate_qparams

    g = torch.Generator().manual_seed(6)
    w = (torch.randn(300, 260, generator=g) * 0.05).to(torch.bfloat16)
    w[128:256, 128:256] = 0  # an all-zero block: eps scale
    for kind, qdtype in (("int", torch.int8), ("float", torch.float8_e4m3fn)):
        args = QuantizationArgs(
            num_bits=8, type=kind, strategy="block", symmetric=True, dynamic=False, block_structure=[128, 128]
        )
        # the min-max observer's per-block amin / amax (llm-compressor), one block at a time
        lo = torch.stack([torch.stack([blk.amin() for blk in row.split(128, 1)]) for row in w.split(128, 0)])
        hi = torch.stack([torch.stack([blk.amax() for blk in row.split(128, 1)]) for row in w.split(128, 0)])
        s, zp = calculate_qparams(lo, hi, args)
        q = quantize(w, s, zp, args, dtype=qdtype)
        rq, rs = quantize_weight_blocks(w, (128, 128), "int8" if kind == "int" else "e4m3")
        assert torch.equal(s.float(), rs), ct.__version__
        assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8)), kind
