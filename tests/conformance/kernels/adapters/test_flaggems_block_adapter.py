"""FlagGems block-scaled FP8 adapters (``conformance.kernels.adapters.flaggems_block``): the package needs CUDA, so
stand-ins with its signatures do the kernels' math op for op (hopper ``w8a8_block_fp8_matmul`` L223-241 and
``fused/cutlass_scaled_mm.py`` L118-130: per K tile ``tl.dot`` from 0, ``* a_s`` then ``* b_s`` contracted with the
add into one fma by Triton's default fp fusion, ``.to(out)``; its dispatch L371-373 and asserts) and run through
``run_kernel`` on the CPU: they give the declared block reference's bits; the unfused form gives other bits. The
real package runs natively only where it imports on CUDA sm_90 (skipped otherwise)."""

import dataclasses
import importlib.util

import pytest
import torch

from conformance.kernels import adapters, trace
from conformance.kernels.adapters.flaggems_block import CUTLASS_PINNED, NAMES, SIZES, build_spec, default_tiles
from conformance.kernels.runner import run_kernel
from conformance.kernels.spec import conformance_run
from reference.bits import fma_fp32, ieee_subnormals
from reference.block.evaluate import reference_block_scaled_mm
from reference.errors import OperandError
from reference.operands import GemmOperands

E4M3 = torch.float8_e4m3fn


def _dot(a, b):
    """One tile's ``tl.dot`` from 0 in the CPU meaning of the ``exact`` accumulator: exact in float64 (e4m3
    products and their sums fit 53 bits), rounded once to float32."""
    return (a.double() @ b.double()).float()


def _k_tiles(a, b_kn, sa, sb_rows, bk, fused):
    """``acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]`` over the K tiles (BLOCK_K = bk), ``sb_rows`` [N, KB]."""
    m, k = a.shape
    acc = torch.zeros((m, b_kn.shape[1]), dtype=torch.float32)
    with ieee_subnormals(acc):
        for j, k0 in enumerate(range(0, k, bk)):
            t = _dot(a[:, k0 : k0 + bk], b_kn[k0 : k0 + bk]) * sa[:, j : j + 1]  # dot * a_s first
            sw = sb_rows[:, j].reshape(1, -1)
            acc = fma_fp32(t, sw, acc) if fused else acc + t * sw
    return acc


def w8a8_standin(fused=True):
    """``w8a8_block_fp8_matmul(A, B, As, Bs, block_size, output_dtype)`` with the hopper module's asserts (L541-549)
    and the default tiles (BLOCK_K = block_k, L94-97)."""

    def fn(A, B, As, Bs, block_size, output_dtype=torch.float16):
        bn, bk = block_size
        n, k = B.shape
        assert A.shape[-1] == k and A.shape[:-1] == As.shape[:-1] and -(-k // bk) == As.shape[-1]
        assert -(-n // bn) == Bs.shape[0] and -(-k // bk) == Bs.shape[1]
        acc = _k_tiles(A, B.t(), As, Bs[torch.arange(n) // bn], bk, fused)
        return acc.to(output_dtype)

    return fn


def cutlass_standin(fused=True):
    """``cutlass_scaled_mm(c, a, b [K,N], a_scale, b_scale, bias)``: its asserts (L470-494, L368-415), the dispatch by
    scale numel (L371-373), the block-wise kernel (L118-130, TILE_K 128) or the per-token one (L277-284)."""

    def fn(c, a, b, a_scale, b_scale, bias=None):
        assert a.stride(1) == 1 and c.stride(1) == 1 and b.stride(0) == 1
        assert c.stride(0) % 16 == 0 and b.stride(1) % 16 == 0
        assert a_scale.dtype == b_scale.dtype == torch.float32
        if a_scale.numel() in (1, a.size(0)) and b_scale.numel() in (1, b.size(1)):
            acc = (a_scale.reshape(-1, 1) * _dot(a, b)) * b_scale.reshape(1, -1)
            c.copy_(acc.to(c.dtype))
            return
        assert a_scale.dim() == b_scale.dim() == 2 and bias is None
        assert b_scale.shape == (-(-a.size(1) // 128), -(-b.size(1) // 128))
        rows = b_scale.t()[torch.arange(b.size(1)) // 128]
        c.copy_(_k_tiles(a, b, a_scale, rows, 128, fused).to(c.dtype))

    return fn


def _cpu(spec):
    return dataclasses.replace(spec, devices=("cpu",), accumulator={"cpu": "exact", **spec.accumulator})


def _case(m, k, n, block, out=torch.bfloat16, seed=0, b_view=False):
    g = torch.Generator().manual_seed(seed)
    bn, bk = block
    a = (torch.randn((m, k), generator=g) * 8).to(E4M3)
    b = (torch.randn((n, k), generator=g) * 8).to(E4M3)
    if b_view:  # the w.t() view of a [K, N] buffer
        b = b.t().contiguous().t()
    sa = torch.rand((m, -(-k // bk)), generator=g) * 1e-2 + 1e-3
    sw = torch.rand((-(-n // bn), -(-k // bk)), generator=g) * 1e-2 + 1e-3
    return GemmOperands(a, b, sa, sw, None, out, block_size=block)


def _reference(spec, ops):
    blk = spec.block
    return reference_block_scaled_mm(
        ops.a, ops.b, ops.scale_a, ops.scale_b, ops.block_size, blk.accumulation, blk.epilogue, None,
        ops.out_dtype, spec.accumulator_on("cpu"),
    )  # fmt: skip


def _bits(t):
    return (
        t.view(torch.uint8) if t.dtype.itemsize == 1 else t.view(torch.int16 if t.dtype.itemsize == 2 else torch.int32)
    )


CASES = [
    (3, 300, 130, (128, 128), torch.bfloat16, False),
    (5, 256, 64, (64, 128), torch.float16, True),
    (4, 200, 48, (128, 64), torch.float32, False),
]


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("m,k,n,block,out,b_view", CASES)
def test_w8a8_standin_gives_the_declared_block_reference(fused, m, k, n, block, out, b_view):
    spec = _cpu(build_spec("flaggems-block-fp8", w8a8_standin(fused), fused=fused))
    ops = _case(m, k, n, block, out, b_view=b_view)
    run = run_kernel(spec, ops)
    assert run.error is None, run.error
    assert torch.equal(_bits(run.output), _bits(_reference(spec, ops)))
    assert run.manifest["path"] == f"flaggems/w8a8_block_fp8_matmul/hopper/block{block[0]}x{block[1]}/scale-per-block"


@pytest.mark.parametrize("fused", [True, False])
def test_cutlass_standin_gives_the_declared_block_reference(fused):
    spec = _cpu(build_spec("flaggems-cutlass-block-fp8", cutlass_standin(fused), fused=fused))
    ops = _case(6, 400, 272, (128, 128), torch.bfloat16)
    run = run_kernel(spec, ops)
    assert run.error is None, run.error
    assert torch.equal(_bits(run.output), _bits(_reference(spec, ops)))
    assert run.manifest["path"] == "flaggems/sm90-block-wise-128/e4m3"


@pytest.mark.parametrize(
    "name,make", [("flaggems-block-fp8", w8a8_standin), ("flaggems-cutlass-block-fp8", cutlass_standin)]
)
def test_the_other_form_differs(name, make):
    ops = _case(16, 384, 256, (128, 128), torch.float32)
    for declared, actual in ((True, False), (False, True)):
        spec = _cpu(build_spec(name, make(actual), fused=declared))
        run = run_kernel(spec, ops)
        assert run.error is None and not torch.equal(_bits(run.output), _bits(_reference(spec, ops)))


def test_declarations_and_constraints():
    w8, cu = (build_spec(n, w8a8_standin()) for n in NAMES)
    assert w8.block.to_dict() == {
        "sizes": [[128, 128], [64, 128], [128, 64]],
        "accumulation": "mul s_a; fma s_w",
        "epilogue": "cast fp32; cast out",
    }
    assert cu.block.sizes == ((128, 128),) and cu.block.accumulation.label() == "mul s_a; fma s_w"
    assert build_spec(NAMES[0], w8a8_standin(), fused=False).block.accumulation.label() == "mul s_a; mul s_w; add"
    for spec in (w8, cu):
        assert spec.operands == "e4m3" and spec.accumulator_on("cuda").label() == "fp32 bits=14 truncate"
        assert spec.devices == ("cuda",) and spec.constraints.bias is False
    assert w8.dense_operands() == frozenset() and build_spec(
        NAMES[0], w8a8_standin(), variant="generic"
    ).dense_operands() == {"a"}
    assert w8.constraints.violations(1, 7, 3) == []
    assert cu.constraints.violations(2, 40, 24) == ["K=40 is not a multiple of 16", "N=24 is not a multiple of 16"]
    assert w8.block_violations((1, 128)) == ["block size 1x128 is not one of the declared 128x128, 64x128, 128x64"]
    assert cu.block_violations((64, 128)) == ["block size 64x128 is not one of the declared 128x128"]
    assert SIZES == tuple(tuple(s) for s in w8.block.sizes)


def test_one_scale_block_is_the_per_token_kernel_in_cutlass_scaled_mm():
    """K <= 128 and N <= 128: scale_a [M, 1] and scale_b^T [1, 1] pass the per-token test (L371-373)."""
    spec = _cpu(build_spec("flaggems-cutlass-block-fp8", cutlass_standin()))
    ops = _case(3, 96, 32, (128, 128))
    run = run_kernel(spec, ops)
    assert run.error is None
    assert run.manifest["path"] == "flaggems/sm90-pertensor-or-pertoken (one scale block: L371-373)/e4m3"
    assert torch.equal(_bits(run.output), _bits(_reference(spec, ops)))  # positive scales: no signed-zero difference


def test_the_path_records_the_config_and_a_tuned_tile():
    def tiles(m, n, k, bn, bk):
        return dict(default_tiles(m, n, k, bn, bk), BLOCK_K=64)  # a yaml entry with BLOCK_K 64 (H L102-110)

    fn = build_spec("flaggems-block-fp8", w8a8_standin(), tiles=tiles).scaled_mm
    ops = _case(2, 256, 16, (128, 128))
    with trace.capture() as t:
        fn(ops.a, ops.b, ops.scale_a, ops.scale_b, torch.bfloat16, None, block_size=(128, 128))
    assert t.path.endswith("/scale-per-64-tile (not the declared form)")
    assert (t.extra["config"], t.extra["fp_fusion"]) == ("64x128x64 g32 w4 s2", True)


def test_the_cutlass_block_autotuner_is_pinned_in_a_conformance_run():
    class Cfg:
        def __init__(self, tm, tn, stages, warps):
            self.kwargs, self.num_stages, self.num_warps = dict(TILE_M=tm, TILE_N=tn, TILE_K=128), stages, warps

    tuner = type("T", (), {})()
    tuner.configs = [Cfg(64, 128, 4, 4), Cfg(*CUTLASS_PINNED)]
    seen = []
    std = cutlass_standin()

    def entry(*args):
        seen.append(len(tuner.configs))
        std(*args)

    fn = build_spec("flaggems-cutlass-block-fp8", entry, tuner=tuner).scaled_mm
    ops = _case(2, 256, 144, (128, 128))
    with conformance_run(), trace.capture() as t:
        fn(ops.a, ops.b, ops.scale_a, ops.scale_b, torch.bfloat16, None, block_size=(128, 128))
    assert seen == [1] and len(tuner.configs) == 2 and t.extra["config"] == "128x128x128 s4 w4"


def test_bad_calls_are_one_line():
    ops = _case(2, 128, 16, (128, 128))
    bias = torch.zeros(16, dtype=torch.bfloat16)
    for name in NAMES:
        fn = build_spec(name, w8a8_standin() if name == NAMES[0] else cutlass_standin()).scaled_mm
        with pytest.raises(OperandError, match="takes no bias"):
            fn(ops.a, ops.b, ops.scale_a, ops.scale_b, torch.bfloat16, bias, block_size=(128, 128))
    with pytest.raises(OperandError, match="sm_90 only .* this is sm_100"):
        build_spec(NAMES[1], cutlass_standin(), sm=100).scaled_mm(
            ops.a, ops.b, ops.scale_a, ops.scale_b, block_size=(128, 128)
        )


def test_catalogue_entries():
    for name in NAMES:
        info = adapters.ADAPTERS[name]
        assert (info.requires, info.devices, info.module) == (
            ("flag_gems",),
            ("cuda",),
            "conformance.kernels.adapters.flaggems_block",
        )


def _native_reason() -> str:
    if importlib.util.find_spec("flag_gems") is None:
        return "flag_gems is not installed (pip install flag-gems==5.0.2)"
    if not torch.cuda.is_available():
        return "no CUDA device"
    if torch.cuda.get_device_capability()[0] != 9:
        return "FlagGems' block kernels are checked on sm_90 (hopper module, cutlass_scaled_mm sm_90 only)"
    return ""


@pytest.mark.skipif(bool(_native_reason()), reason=_native_reason() or "runs")
@pytest.mark.parametrize("name", NAMES)
def test_native_cases_give_the_declared_reference(name):
    spec = adapters.make_spec(name)
    shapes = [(3, 300, 144, (128, 128)), (33, 512, 256, (128, 128))]
    if name == NAMES[0]:
        shapes += [(5, 256, 64, (64, 128)), (4, 200, 48, (128, 64))]
    for m, k, n, block in shapes:
        ops = _case(m, k, n, block)
        run = run_kernel(spec, ops, device="cuda")
        ref = reference_block_scaled_mm(
            ops.a, ops.b, ops.scale_a, ops.scale_b, block, spec.block.accumulation, spec.block.epilogue, None,
            ops.out_dtype, spec.accumulator_on("cuda"),
        )  # fmt: skip
        assert run.error is None, run.error
        assert torch.equal(_bits(run.output), _bits(ref)), (name, m, k, n, block, run.manifest["path"])
