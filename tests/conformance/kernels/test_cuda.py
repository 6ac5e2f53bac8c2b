"""Native CUDA runs of the built-ins (skipped without a GPU). No hypothesis
import here so this file also runs on a bare GPU box."""

from __future__ import annotations

import pytest
import torch

from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import run_int_mm, run_kernel
from reference.accumulate import exact_int_mm
from reference.epilogue import reference_scaled_mm
from reference.operands import GemmOperands

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
SHAPES = [(1, 1, 1), (5, 37, 19), (16, 8, 8), (17, 64, 64), (100, 1000, 200), (512, 2048, 6144)]


def _bits(t):
    return t.view({torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}[t.dtype])


def _ops(m, k, n, seed=5, bias=True, out_dtype=torch.bfloat16, tiny=False):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    sa = torch.rand(m, generator=g) * 0.02 + 1e-3
    sb = torch.rand(n, generator=g) * 0.01 + 1e-4
    if tiny:  # products reach the float32 / bf16 subnormal range: FTZ would show here
        sa, sb = sa * 2.0**-60, sb * 2.0**-60
    bs = (torch.randn(n, generator=g) * 3).to(out_dtype) if bias else None
    return GemmOperands(a, b, sa, sb, bs, out_dtype)


@pytest.mark.parametrize("name", ["int_mm", "triton"])
@pytest.mark.parametrize("shape", SHAPES)
def test_native_matches_declared_reference(name, shape):
    m, k, n = shape
    spec = get_kernel(name)
    for out_dtype in (torch.bfloat16, torch.float16, torch.float32):
        for bias in (False, True):
            ops = _ops(m, k, n, bias=bias, out_dtype=out_dtype)
            run = run_kernel(spec, ops, device="cuda")
            assert run.error is None, run.error
            assert run.manifest["device"] == "cuda"
            if name == "triton":
                assert run.manifest["path"] == "triton-native" and not run.manifest["interpreter"]
            else:
                pads = m <= 16 or k % 8 or n % 8 or k < 16
                assert run.manifest["path"] == ("int_mm-padded" if pads else "int_mm")
            ref = reference_scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b, spec.contract, ops.bias, out_dtype)
            assert torch.equal(_bits(run.output), _bits(ref)), (out_dtype, bias)
    acc = run_int_mm(spec, ops.a, ops.b, device="cuda")
    assert acc.error is None and torch.equal(acc.acc.to(torch.int64), exact_int_mm(ops.a, ops.b))


@pytest.mark.parametrize("name", ["int_mm", "triton"])
def test_native_subnormal_outputs_not_flushed(name):
    ops = _ops(33, 64, 48, bias=False, tiny=True)
    spec = get_kernel(name)
    run = run_kernel(spec, ops, device="cuda")
    ref = reference_scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b, spec.contract)
    assert int((ref != 0).sum()) > 0
    assert torch.equal(_bits(run.output), _bits(ref))


def test_native_and_interpreter_give_same_bits():
    ops = _ops(40, 300, 72, bias=True)
    spec = get_kernel("triton")
    nat = run_kernel(spec, ops, device="cuda")
    itp = run_kernel(spec, ops, device="cpu")
    assert nat.manifest["path"] == "triton-native"
    assert itp.manifest["path"] == "triton-interpreter"
    assert torch.equal(_bits(nat.output), _bits(itp.output))


def test_native_semantics_probe():
    from conformance.kernels.triton_probe import probe

    p = probe(native=True)
    print("native probe:", p)
    assert "error" not in p, p
    for key in ("int32_to_fp32", "fp32_to_bf16", "fp32_to_bf16_rtne", "fp32_to_fp16"):
        assert p[key] == "rne", (key, p)
    assert p["fp32_mul"] == "ieee"
