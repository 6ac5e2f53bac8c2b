"""reference.asymmetric: the zero-point contract, its exact reference, the int32 headroom, the quantizer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conformance.cases.asymmetric import K_CORRECTED_OUTSIDE, asymmetric_cases
from reference.asymmetric import (
    asymmetric_reference,
    column_sums,
    parse_azp_declaration,
    precomputed_azp_adj,
    quantize_asymmetric_per_token,
    reference_azp_scaled_mm,
)
from reference.errors import ContractError, OperandError

ONE = torch.ones((), dtype=torch.float32)


def _small():
    a = torch.tensor([[3, -2], [0, 7]], dtype=torch.int8)
    b = torch.tensor([[1, 2], [4, -1]], dtype=torch.int8)
    return a, b


def test_per_token_and_per_tensor_by_hand():
    a, b = _small()
    # acc = a @ b.T = [[-1, 14], [14, -7]]; colsum(b) = [3, 3]
    assert column_sums(b).tolist() == [3, 3] and column_sums(b).dtype == torch.int32
    azp = torch.tensor([5, -2], dtype=torch.int32)
    out = reference_azp_scaled_mm(a, b, ONE, ONE, torch.float32, azp_adj=column_sums(b), azp=azp)
    assert out.tolist() == [[-16.0, -1.0], [20.0, -1.0]]
    out = reference_azp_scaled_mm(a, b, ONE, ONE, torch.float32, azp_adj=precomputed_azp_adj(b, 5))
    assert out.tolist() == [[-16.0, -1.0], [-1.0, -22.0]]


def test_correction_leaving_int32_wraps_and_is_counted():
    case = next(c for c in asymmetric_cases() if c.meta["family"] == "corrected-outside" and c.azp is not None)
    ref = asymmetric_reference(
        case.a,
        case.b,
        case.scale_a,
        case.scale_b,
        "w_then_a/fp32_before_round",
        None,
        torch.float32,
        case.azp_adj,
        case.azp,
    )
    # row 0, column 0: (127 + 128) * (127 * K - 1) + 1 * 255 ... computed on Python ints
    colsum0 = 127 * (K_CORRECTED_OUTSIDE - 1) + 126
    exact = 127 * colsum0 + 128 * colsum0
    assert int(ref.corrected[0, 0]) == exact > 2**31 - 1
    wrapped = exact - 2**32
    assert int(ref.declared[0, 0]) == wrapped
    want = float(np.float32(np.int32(wrapped))) * 2.0**-30
    assert float(ref.output[0, 0]) == want < 0
    assert ref.outside_int32 == 8 and ref.raw_outside_int32 == 0


@pytest.mark.parametrize(
    "kw, text",
    [
        (dict(azp_adj=torch.zeros(2, dtype=torch.int64)), "azp_adj is torch.int64"),
        (dict(azp_adj=torch.zeros(3, dtype=torch.int32)), "azp_adj is torch.int32 [3]"),
        (dict(azp_adj=torch.zeros(2, dtype=torch.int32), azp=torch.zeros(2)), "azp is torch.float32"),
        (dict(azp=torch.zeros(2, dtype=torch.int32)), "azp given without azp_adj"),
        (dict(), "azp_adj is required"),
    ],
)
def test_bad_zero_point_operands_are_one_line_operand_errors(kw, text):
    a, b = _small()
    with pytest.raises(OperandError) as e:
        reference_azp_scaled_mm(a, b, ONE, ONE, torch.float32, **kw)
    assert text in str(e.value) and "\n" not in str(e.value)


def test_declaration_forms():
    assert parse_azp_declaration("per-token").kinds == ("per-token",)
    assert parse_azp_declaration(["per-token", "per-tensor"]).kinds == ("per-tensor", "per-token")
    for bad in ("per-row", [], {"kinds": "per-token", "correction": "float"}, {"kind": "per-token"}):
        with pytest.raises(ContractError) as e:
            parse_azp_declaration(bad)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_quantizer_byte_identical_to_compressed_tensors(dtype):
    ct = pytest.importorskip("compressed_tensors")
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import quantize
    from compressed_tensors.quantization.utils.helpers import compute_dynamic_scales_and_zp

    g = torch.Generator().manual_seed(3)
    x = (torch.randn(9, 300, generator=g) * 3 + 1).to(dtype)
    x[2] = 0  # zero scale -> eps
    x[3] = x[3].abs()  # all positive: lo = 0
    x[4] = -x[4].abs()
    args = QuantizationArgs(num_bits=8, type="int", strategy="token", symmetric=False, dynamic=True)
    s, z = compute_dynamic_scales_and_zp(x[None], args, module=None)  # [1, M, K]: per token
    q = quantize(x[None], s, z, args, dtype=torch.int8)
    rq, rs, rz = quantize_asymmetric_per_token(x)
    assert torch.equal(q[0], rq), ct.__version__
    assert torch.equal(s[0].view(torch.int16), rs.view(torch.int16))
    assert torch.equal(z[0], rz)
