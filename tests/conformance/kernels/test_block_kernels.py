"""Block-scaled kernels through the kernel layer (issue 46): the CPU built-ins give the declared reference's bits
(``reference.block``), the runner passes ``block_size=`` and refuses what a kernel does not declare (recorded as not
run with the reason), and ``declare(block=...)`` loads a user's block kernel with its contract derived."""

from __future__ import annotations

import pytest
import torch

from conformance.kernels.loader import declare, load_module_function
from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import run_kernel
from reference.block.evaluate import reference_block_scaled_mm
from reference.errors import ContractError, KernelLoadError
from reference.operands import GemmOperands


def _case(m, k, n, block, dtype=torch.int8, out=torch.bfloat16, bias=True, seed=0) -> GemmOperands:
    g = torch.Generator().manual_seed(seed)
    bn, bk = block
    if dtype == torch.int8:
        a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
        b = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
    else:
        a = (torch.randn((m, k), generator=g) * 8).to(dtype)
        b = (torch.randn((n, k), generator=g) * 8).to(dtype)
    sa = torch.rand((m, -(-k // bk)), generator=g) * 1e-2 + 1e-3
    sw = torch.rand((-(-n // bn), -(-k // bk)), generator=g) * 1e-2 + 1e-3
    bz = (torch.randn(n, generator=g) * 4).to(out) if bias else None
    return GemmOperands(a, b, sa, sw, bz, out, block_size=block)


@pytest.mark.parametrize(
    "name,dtype", [("block-cpu", torch.int8), ("block-fp8-cpu", torch.float8_e4m3fn), ("triton-block", torch.int8)]
)
@pytest.mark.parametrize(
    "m,k,n,block,out,bias",
    [
        (3, 300, 130, (128, 128), torch.bfloat16, True),
        (2, 128, 65, (64, 128), torch.float16, False),
        (4, 200, 9, (1, 128), torch.float32, True),
    ],
)
def test_cpu_builtins_give_the_declared_reference_bits(name, dtype, m, k, n, block, out, bias):
    spec = get_kernel(name)
    ops = _case(m, k, n, block, dtype, out, bias)
    run = run_kernel(spec, ops)
    blk = spec.block
    ref = reference_block_scaled_mm(
        ops.a, ops.b, ops.scale_a, ops.scale_b, block, blk.accumulation, blk.epilogue, ops.bias, out, spec.accumulator
    )
    assert run.error is None and run.output.dtype == out
    assert torch.equal(run.output.view(torch.uint8), ref.view(torch.uint8))


def test_the_runner_refuses_what_the_kernel_does_not_declare():
    block, dense = get_kernel("block-cpu"), get_kernel("cpu")
    ops = _case(2, 128, 8, (128, 128))
    assert run_kernel(dense, ops).error.endswith("block scales: the kernel declares none (block=)")
    odd = _case(2, 128, 8, (32, 128))
    assert run_kernel(block, odd).error.endswith(
        "block size 32x128 is not one of the declared 128x128, 64x128, 128x64, 1x128"
    )
    plain = GemmOperands(ops.a, ops.b, torch.ones(2), torch.ones(8))
    assert run_kernel(block, plain).error.endswith("per-token x per-channel scales: the kernel is block-scaled")


@declare(block={"accumulation": "fma s_a*s_w", "sizes": [(128, 128)], "epilogue": "cast out; add bias"})
def _user_block_kernel(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    return reference_block_scaled_mm(
        a, b, scale_a, scale_b, block_size, "fma s_a*s_w", "cast out; add bias", bias, out_dtype
    )


user_block_kernel = _user_block_kernel


def test_declare_block_loads_with_the_contract_derived_from_its_epilogue():
    spec = load_module_function(f"{__name__}:user_block_kernel")
    assert spec.is_block and spec.block.accumulation.fma == "s_a*s_w"
    assert spec.contract.bias_point == "after_round"
    assert spec.manifest()["block"]["accumulation"] == "fma s_a*s_w"
    run = run_kernel(spec, _case(2, 256, 16, (128, 128)))
    assert run.error is None


def test_a_bad_block_declaration_is_one_line():
    with pytest.raises(ContractError, match="exactly once"):
        get_kernel("block-cpu").__class__(
            "x", _user_block_kernel, get_kernel("block-cpu").contract, block="mul s_a; add"
        )
    bad = declare(block="mul s_a; fma s_a")(lambda *a, **k: None)
    globals()["bad_block_kernel"] = bad
    with pytest.raises(KernelLoadError, match=r"block=.*exactly once"):
        load_module_function(f"{__name__}:bad_block_kernel")


_NO_BIAS_CALLS: list = []


@declare(block={"accumulation": "mul s_a; mul s_w; add", "epilogue": "cast out"})
def no_bias_block_kernel(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
    _NO_BIAS_CALLS.append(bias is not None)
    return reference_block_scaled_mm(a, b, scale_a, scale_b, block_size, epilogue="cast out", out_dtype=out_dtype)


def test_a_block_epilogue_without_a_bias_step_takes_no_bias():
    """``epilogue: cast out`` declares a kernel that takes no bias: a case with one is not run, with the reason (the
    kernel is never handed a bias the reference would ignore); a case without one runs."""
    spec = load_module_function(f"{__name__}:no_bias_block_kernel")
    assert not spec.constraints.bias and get_kernel("block-cpu").constraints.bias
    skipped = run_kernel(spec, _case(2, 256, 8, (128, 128), bias=True))
    assert skipped.output is None and skipped.error == (
        "not runnable here: outside declared constraints: a bias: the kernel takes none "
        "(its block epilogue 'cast fp32; cast out' has no bias step)"
    )
    _NO_BIAS_CALLS.clear()
    ran = run_kernel(spec, _case(2, 256, 8, (128, 128), bias=False))
    assert ran.error is None and _NO_BIAS_CALLS == [False]
