"""The buggy block kernels (tests/helpers/buggy_block_kernels.py) are wrong: each differs from its declared reference
(``reference_block_scaled_mm`` of its declaration) on one legal case of its regime, and gives the declared bits on a
legal case outside its gate (so the gate is what the docstring says)."""

from __future__ import annotations

import functools

import pytest
import torch
from buggy_block_kernels import CATCHES, SIZES

from conformance.cases import case_id
from conformance.kernels.loader import load_module_function
from conformance.kernels.runner import run_kernel
from conformance.suite.plan import default_cases
from reference.block.evaluate import reference_block_scaled_mm
from reference.block.quantize import block_quantize_layer
from reference.operands import GemmOperands

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


def _case(m, k, n, block=(128, 128), out=BF16, column_major=False, subnormal=False, seed=0) -> GemmOperands:
    """A legal block case from float activations and weights quantized as the field does (vLLM per-token groups,
    compressed-tensors weight blocks); ``subnormal``: the weight-block scales times 2**-120 (subnormal) and s_a times
    2**110 (no product overflows; the GEMM term 2**-10 of what it was, beside the bias)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((m, k), generator=g).to(BF16)
    w = torch.randn((n, k), generator=g) * 0.05
    bias = torch.randn(n, generator=g)
    q = block_quantize_layer(x, w, bias, block, "int8", column_major, out_dtype=out)
    sa, sb = q.scale_a, q.scale_b
    if subnormal:
        sa, sb = sa * 2.0**110, sb * 2.0**-120
        assert bool((sb < torch.finfo(F32).tiny).all())
    return GemmOperands(q.a, q.b, sa, sb, q.bias, out, block_size=block)


def _fp8_case(value: float, big: float = 0.0) -> GemmOperands:
    """An e4m3 block case: ``a`` all ``value`` (one e4m3 value), ``b`` small integers, with ``big``: ``a[:, 0] = b[:,
    0] = big`` (a partial whose small products a float32 sum next to ``big**2`` loses)."""
    g = torch.Generator().manual_seed(1)
    a = torch.full((2, 256), value)
    b = torch.randint(1, 5, (8, 256), generator=g).float()
    if big:
        a[:, 0], b[:, 0] = big, big
    sa, sb = torch.full((2, 2), 0.01), torch.full((1, 2), 0.02)
    e4 = torch.float8_e4m3fn
    return GemmOperands(a.to(e4), b.to(e4), sa, sb, None, F32, block_size=(128, 128))


@functools.lru_cache(maxsize=2)
def _plan(operands: str) -> dict:
    cases, _ = default_cases(operands=operands, block_sizes=SIZES)
    return {case_id(c): c for c in cases}


def _plan_case(variant: str, operands: str = "int8", size: str = "128x128") -> GemmOperands:
    """A case of the default block plan at the buggy kernels' sizes (cached: built once per operands)."""
    return _plan(operands)[f"block/{size}/{variant}"]


#: kernel -> (a case its bug shows on, a legal case outside its gate)
CASES = {
    "scale_a_prev_kblock": (_case(72, 256, 16), _case(64, 256, 16)),
    "scale_b_next_kblock": (_case(4, 384, 8), _case(4, 256, 8)),
    "tail_scale_prev_kblock": (_case(4, 200, 8), _case(4, 256, 8)),
    "tail_dropped_fp16": (_case(4, 200, 8, out=F16), _case(4, 200, 8)),
    "weight_block_by_block_k": (_case(4, 128, 130, (64, 128)), _case(4, 128, 130)),
    "k_rounded_down_to_128": (_case(4, 192, 8, (128, 64)), _case(4, 256, 8, (128, 64))),
    "per_channel_read_as_block": (_case(4, 128, 8, (1, 128)), _case(4, 128, 8)),
    "fma_where_add": (_case(8, 512, 16, out=F32), _case(8, 128, 16, out=F32)),
    "scale_product_first_large_m": (_case(72, 256, 16, out=F32), _case(64, 256, 16, out=F32)),
    "split_k_long_k": (_case(8, 1024, 16, out=F32), _case(8, 896, 16, out=F32)),
    "scale_a_strides_ignored": (_case(4, 256, 8, column_major=True), _case(4, 256, 8)),
    "subnormal_scale_ftz": (_case(4, 256, 8, out=F32, subnormal=True), _case(4, 256, 8, out=F32)),
    "fp8_clamped_to_240": (_fp8_case(400.0), _fp8_case(200.0)),
    "fp8_operands_ftz": (_fp8_case(2.0**-8), _fp8_case(2.0**-5)),
    "fp8_float32_partial_declared_exact": (_fp8_case(2.0**-8, big=448.0), _fp8_case(2.0**-5)),
    "bf16_partial_deep_k": (_case(2, 2048, 8, out=F32), _case(2, 1920, 8, out=F32)),
    "scale_product_fp16_column_major": (
        lambda: _plan_case("cov040-M3-multiple-partial-k_uniform-int-sa_col-b_dense-a_dense-fp16"),
        lambda: _plan_case("decode4-tailbk1-fp16", size="64x128"),
    ),
    "ue8m0_exponent_bits": (
        lambda: _plan_case("cov030-M1-multiple-partial-pow2_tiny-int-sa_row-b_dense-a_dense-fp16"),
        lambda: _plan_case("pow2-tail-bf16", size="64x128"),
    ),
    "k_uniform_per_token_bf16": (
        lambda: _plan_case("cov045-M1-multiple-partial-k_uniform-int-sa_row-b_dense-a_dense-bf16"),
        lambda: _plan_case("cov040-M3-multiple-partial-k_uniform-int-sa_col-b_dense-a_dense-fp16"),
    ),
    "fp8_seeded_running_sum_decode": (
        lambda: _plan_case("cov036-M1-tailbk1-partial-subnormal_a-fp8negzero-sa_row-b_dense-a_dense-bf16", "e4m3"),
        lambda: _plan_case("cov000-M17-multiple-full-k_uniform-fp8negzero-sa_col-b_t-a_pad-bf16", "e4m3"),
    ),
    "seeded_running_sum": (
        lambda: _plan_case("underflow-bf16"),
        lambda: _plan_case("decode1-kmul-bf16", size="64x128"),
    ),
    "strided_bias_read_dense": (
        lambda: _plan_case("layouts-fp32"),
        lambda: _plan_case("decode1-kmul-bf16", size="64x128"),
    ),
}


def _same_as_declared(name: str, ops: GemmOperands) -> bool:
    spec = load_module_function(f"buggy_block_kernels:{name}")
    run = run_kernel(spec, ops)
    assert run.error is None, run.error
    blk = spec.block
    ref = reference_block_scaled_mm(
        ops.a,
        ops.b,
        ops.scale_a,
        ops.scale_b,
        ops.block_size,
        blk.accumulation,
        blk.epilogue,
        ops.bias,
        ops.out_dtype,
        spec.accumulator,
    )
    return torch.equal(run.output.view(torch.uint8), ref.view(torch.uint8))


def test_every_buggy_kernel_has_a_case_and_a_catching_check():
    assert set(CASES) == set(CATCHES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_wrong_on_its_regime_right_outside_its_gate(name):
    shows, outside = (c() if callable(c) else c for c in CASES[name])
    assert not _same_as_declared(name, shows)
    assert _same_as_declared(name, outside)


def test_the_control_gives_the_declared_bits():
    assert _same_as_declared("good_block", _case(72, 200, 130, (64, 128), F16, column_major=True))
