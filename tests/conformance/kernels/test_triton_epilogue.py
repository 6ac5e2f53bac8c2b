"""The output epilogue of the built-in Triton kernels is written once
(``triton_gemm.fused_epilogue``), called by the pointer and the TMA kernel, and
inlined when compiled natively (checked by compiling for sm_90 on the CPU:
Triton's pipeline up to PTX needs no GPU)."""

from __future__ import annotations

import ast
import inspect
import re

import pytest
import torch
import triton
from triton.runtime.jit import JITFunction

from conformance.kernels import builtin_triton as bt
from conformance.kernels import triton_gemm
from reference.accumulate import exact_int_mm
from reference.contract import TRITON_STYLE
from reference.epilogue import apply_epilogue

KERNELS = ("w8a8_mm", "w8a8_mm_tma")


def _fn_source(name: str) -> str:
    """The function's code: its source without the def line and docstring."""
    obj = getattr(triton_gemm, name)
    src = inspect.getsource(getattr(obj, "fn", obj))
    fdef = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef))
    return "\n".join(src.splitlines()[fdef.body[0].end_lineno :])


def _calls(name: str) -> list[str]:
    obj = getattr(triton_gemm, name)
    tree = ast.parse(inspect.getsource(getattr(obj, "fn", obj)))
    return [n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]


@pytest.mark.parametrize("kernel", KERNELS)
def test_both_kernels_call_the_one_epilogue_and_store_nothing_themselves(kernel):
    src = _fn_source(kernel)
    assert _calls(kernel).count("fused_epilogue") == 1
    # the epilogue's own operations appear in the helper only
    for token in ("tl.store", "0x7FFF", "0x7FC0", "tl.float16", "bias_ptr +", "sa_ptr +"):
        assert token not in src, f"{kernel} repeats the epilogue: {token}"
    helper = _fn_source("fused_epilogue")
    assert helper.count("0x7FFF") == 2 and helper.count("tl.store") == 4


def test_epilogue_is_a_device_function_the_compiler_inlines():
    ep = triton_gemm.fused_epilogue
    assert isinstance(ep, JITFunction) and not ep.noinline


def test_interpreted_kernel_calls_the_epilogue(monkeypatch):
    # the interpreter runs the helper's Python body once per program
    calls = []
    real = triton_gemm._DeviceFunction.__call__

    def spy(self, *args, **kwargs):
        calls.append(self.fn.__name__)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(triton_gemm._DeviceFunction, "__call__", spy)
    g = torch.Generator().manual_seed(5)
    a = torch.randint(-128, 128, (20, 40), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (24, 40), dtype=torch.int8, generator=g)
    sa, sb = torch.rand(20, generator=g) * 0.01, torch.rand(24, generator=g) * 0.01
    bias = torch.randn(24, generator=g).to(torch.bfloat16)
    out = bt.scaled_mm(a, b, sa, sb, torch.bfloat16, bias)
    want = apply_epilogue(exact_int_mm(a, b), sa, sb, TRITON_STYLE, bias, torch.bfloat16)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))
    assert calls and set(calls) == {"fused_epilogue"}


def _sm90_ptx(kernel: str) -> str:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    common = dict(
        sa_ptr="*fp32",
        sb_ptr="*fp32",
        bias_ptr="*i16",
        out_ptr="*i16",
        M="i32",
        N="i32",
        K="i32",
        stride_sa="i32",
        stride_sb="i32",
        stride_bias="constexpr",
        stride_om="i32",
        HAS_BIAS="constexpr",
        OUT_KIND="constexpr",
        ACC_ONLY="constexpr",
        BLOCK_M="constexpr",
        BLOCK_N="constexpr",
        BLOCK_K="constexpr",
        GROUP_M="constexpr",
    )
    fn = getattr(triton_gemm, kernel)
    params = list(inspect.signature(fn).parameters)
    if kernel == "w8a8_mm":
        sig = dict(
            common,
            a_ptr="*i8",
            b_ptr="*i8",
            ws_ptr="*i32",
            cnt_ptr="*i32",
            stride_am="i32",
            stride_ak="constexpr",
            stride_bn="i32",
            stride_bk="constexpr",
            SPLIT_K="constexpr",
            EVEN_K="constexpr",
            INT64_IDX="constexpr",
            K_ITERS_STATIC="constexpr",
            FLOAT_DOT="constexpr",
        )
        const = dict(
            stride_ak=1,
            stride_bk=1,
            SPLIT_K=1,
            EVEN_K=False,
            INT64_IDX=False,
            K_ITERS_STATIC=0,
            FLOAT_DOT=False,
            BLOCK_M=32,
            BLOCK_N=32,
            BLOCK_K=32,
        )
    else:
        sig = dict(
            common,
            a_desc="tensordesc<i8[64, 32]>",
            b_desc="tensordesc<i8[32, 32]>",
            NUM_PROGS="i32",
            FLATTEN="constexpr",
            WARP_SPEC="constexpr",
        )
        const = dict(FLATTEN=False, WARP_SPEC=0, BLOCK_M=64, BLOCK_N=32, BLOCK_K=32)
    const.update(stride_bias=1, HAS_BIAS=True, OUT_KIND=0, ACC_ONLY=False, GROUP_M=8)
    src = ASTSource(fn=triton.jit(fn), signature={p: sig[p] for p in params}, constexprs=const)
    k = triton.compile(
        src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, num_stages=3, enable_fp_fusion=False)
    )
    return k.asm["ptx"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_native_compile_inlines_the_epilogue(kernel):
    """sm_90 PTX of each kernel (bf16 out with bias) is one entry function:
    no device-function declaration or call left by the shared epilogue."""
    ptx = _sm90_ptx(kernel)
    assert len(re.findall(r"^\.visible \.entry ", ptx, re.M)) == 1
    assert not re.search(r"^\s*(\.visible\s+|\.weak\s+)?\.func\b", ptx, re.M)
    assert not re.search(r"^\s*call(\.uni)?\b", ptx, re.M)
    # the epilogue is there: the bf16 rounding bias 0x7FFF and 16-bit stores
    assert "32767" in ptx and re.search(r"st\.global(\.\w+)*\.b16", ptx)
