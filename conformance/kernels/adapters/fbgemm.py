"""fbgemm-gpu-genai adapters (read from fbgemm-gpu-genai 1.6.0 = FBGEMM tag ``v1.6.0``, d08742c6; its CUTLASS is the
``jwfromm/cutlass`` fork at 571edeb2). ``CX`` = ``fbgemm_gpu/experimental/gen_ai/src/quantize/cutlass_extensions``.

* ``fbgemm-int8``: ``torch.ops.fbgemm.i8i8bf16(XQ, WQ, float scale, split_k=1)`` (``CX/i8i8bf16.cu``; the
  ``SMOOTHQUANT_SM90A`` branch, l.296, is never defined in the build, so l.303-310 pick a CUTLASS 2.x Sm80 kernel:
  M <= 128 and N >= K: 64x128x64, M <= 128: 64x64x128, else 256x128x64). Epilogue ``LinearCombination<bf16, 8,
  int32, float>`` with ``{alpha=float(scale), beta=0}`` (l.60-64, 96): beta 0 needs no source, so ``D = bf16_rn(alpha
  * float(acc))`` (cutlass ``epilogue/thread/linear_combination.h`` l.270-272). One scalar: the adapter passes
  ``float(s_a) * float(s_w)`` (a Python double: the product of two float32 is exact there), which ``float(scale)``
  rounds to float32 once = the float32 product: steps ``fused/fp32_before_round`` (no bias). Alignment 16 for
  A / B and 8 bf16 for D (l.66-67, 62; ``gemm/kernel/gemm.h`` can_implement): K % 16, N % 8.
* ``fbgemm-fp8-rowwise``: ``f8f8bf16_rowwise(XQ, WQ, x_scale, w_scale, bias, use_fast_accum=True)``
  (``CX/f8f8bf16_rowwise.cu`` l.196-206; kernel ``CX/f8f8bf16_rowwise/f8f8bf16_rowwise_common.cuh``). The GEMM runs
  transposed ({N, M, K}, l.258-264), so the EVT node ``WScale`` (a row broadcast over the kernel's N = M) gets
  ``x_scale`` (l.281-283): ``Compute0 = x_scale * acc`` (l.151-158), ``Compute1 = w_scale * Compute0`` whose output
  type is the bias dtype (l.160-167), ``ComputeBias = bias + Compute1`` in the bias dtype, to bf16 (l.169-176); a
  null bias is a broadcast 0 (cutlass ``Sm90ColBroadcast`` null_default), still added. Bias float32 or bf16
  (l.347-353); the adapter widens the bf16 bias to float32 (exact), so calls with and without a bias run the same
  instantiation and nvcc (no ``--fmad=false`` in the gen_ai build) contracts ``w_scale * t + bias``: steps
  ``cast fp32; mul s_a; fma s_w bias; cast out``. ``use_fast_accum=True`` (its default) selects the
  ``*FP8FastAccum`` schedules (l.181-196): no promotion, declared ``fp32 bits=14 truncate`` (``torch-fp8-fast``'s,
  the same Hopper MMA). TMA: K % 16, N % 8 (l.83, 99). Kernel by M / N / K: ``get_kernel_via_heuristic`` (l.24-118).
* ``fbgemm-triton-fp8``: ``fbgemm_gpu/experimental/gemm/triton_gemm/fp8_gemm.py`` ``matmul_fp8_row`` (l.1198) with
  ``tma_persistent=False`` (its default TMA kernel needs Triton's removed ``_experimental_descriptor_load``), so
  ``fp8_fast_accum=True`` runs ``_kernel_matmul_fp8_row`` (l.1597-1625, kernel l.275-420): ``acc = tl.dot(a, b, acc)``
  in float32 (``max_num_imprecise_acc`` default 2**30 on sm_90: no promotion, ``fp32 bits=14 truncate``), then
  ``acc *= a_scale[:, None] * b_scale[None, :]``, ``acc += bias`` (float32), ``.to(bf16)`` (l.399-414): with Triton's
  fp fusion (its default) ``fma(acc, s_a*s_w, bias)``. Its 100-config search (``MATMUL_CONFIGS``) is pinned to
  :data:`TRITON_CONFIG`; any M, K, N (masked loads and stores). Without a bias (``USE_BIAS`` False) it only
  multiplies (a -0 product stays -0): declared ``fma s_a*s_w bias?``. ``_kernel_matmul_fp8_row`` is fbgemm's
  private name: its autotuner is the only handle on the config search."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from typing import Any, Callable

import torch

from conformance.kernels import trace
from conformance.kernels.adapters.autotune import one_config
from conformance.kernels.digest import module_digest
from conformance.kernels.spec import KernelSpec, ShapeConstraints
from conformance.kernels.torch_epilogue import scale_vectors
from reference.contract import NAMED, EpilogueSteps, parse_steps
from reference.errors import KernelLoadError, OperandError
from reference.validate import validate_operands

DIST = "fbgemm-gpu-genai"
#: i8i8bf16: one float32 scale, the product of the two (module docstring)
INT8_STEPS = NAMED["fused/fp32_before_round"]
#: f8f8bf16_rowwise with a float32 (or no) bias: x_scale first, then the contracted w_scale * t + bias
ROWWISE_STEPS = parse_steps(
    ["cast fp32", "mul s_a", "fma s_w bias", "cast out"], name="fbgemm-rowwise: acc*x_scale, fma(w_scale, bias), bf16"
)
#: matmul_fp8_row: the scales multiplied first, then acc * scale + bias contracted to one fma (Triton's fp fusion)
TRITON_FUSED_STEPS = parse_steps(
    ["cast fp32", "fma s_a*s_w bias?", "cast out"], name="fbgemm-triton: fma(acc, s_a*s_w, bias), no bias: a mul"
)
#: the pinned ``MATMUL_CONFIGS`` entry: (BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, num_stages, num_warps)
TRITON_CONFIG = (128, 128, 128, 1, 4, 4)
#: the declared FP8 accumulator of the fast-accumulation paths (the same sm_90 MMA as torch-fp8-fast, issue 30)
FAST_ACC = "fp32 bits=14 truncate"
INT8_CONSTRAINTS = ShapeConstraints(
    k_multiple=16,
    n_multiple=8,
    out_dtypes=("bfloat16",),
    scales="tensor",
    bias=False,
    note="i8i8bf16: K % 16 (int8 alignment 16), N % 8 (bf16 alignment 8), one scale per operand, bf16, no bias",
)
ROWWISE_CONSTRAINTS = ShapeConstraints(
    k_multiple=16, n_multiple=8, out_dtypes=("bfloat16",), note="f8f8bf16_rowwise: TMA K % 16, N % 8; bf16 out"
)
TRITON_CONSTRAINTS = ShapeConstraints(out_dtypes=("bfloat16",), note="matmul_fp8_row: any M, K, N; bf16 out")
_BF16 = torch.bfloat16


def int8_path(m: int, n: int, k: int) -> str:
    """The i8i8bf16 kernel ``i8i8bf16.cu`` l.303-310 picks (threadblock and warp tiles)."""
    if m <= 128 and n >= k:
        tile = "64x128x64-w32x64x64"
    elif m <= 128:
        tile = "64x64x128-w32x32x128"
    else:
        tile = "256x128x64-w64x64x64"
    return f"fbgemm/i8i8bf16/sm80-{tile}"


def rowwise_kernel(m: int, n: int, k: int, fast: bool, arch: int = 9) -> str:
    """The f8f8bf16_rowwise instantiation ``get_kernel_via_heuristic`` (``f8f8bf16_rowwise.cu`` l.24-118) picks."""
    p = "f8f8bf16_rowwise_"
    if arch == 10:
        if m <= 128:
            return p + ("128_32_128_1_1_1_10_f_f" if n <= 1024 else "128_64_128_1_1_1_10_f_f")
        if m <= 1024:
            return p + ("128_256_128_2_1_1_10_f_f" if n <= 1024 else "128_128_128_2_2_1_10_f_f")
        if m <= 2048 or n > 1024:
            return p + "128_256_128_2_1_1_10_f_f"
        return p + "128_256_128_1_2_1_10_f_f"
    big = "128_256_128_2_1_1_9_f_t"
    buckets: tuple[
        tuple[int, list[tuple[int, str]], str], ...
    ] = (  # (max M, [(max N, kernel)], kernel past the last N)
        (16, [], "64_16_128_1_1_1_9_f_f"),
        (32, [(4096, "64_16_128_1_1_1_9_f_f")], "64_32_128_2_1_1_9_f_f"),
        (64, [(2048, "64_16_128_1_1_1_9_f_f"), (4096, "64_32_128_2_1_1_9_f_f")], "64_64_128_2_1_1_9_f_f"),
        (
            128,
            [(1024, "64_16_128_1_1_1_9_f_f"), (2048, "64_32_128_2_1_1_9_f_f"), (4096, "64_64_128_2_1_1_9_f_f")],
            "64_128_128_1_1_1_9_f_f",
        ),
        (
            256,
            [(1024, "64_32_128_2_1_1_9_f_f"), (2048, "64_64_128_2_1_1_9_f_f"), (4096, "64_128_128_1_1_1_9_f_f")],
            "64_256_128_1_1_1_9_f_f",
        ),
    )
    for max_m, by_n, last in buckets:
        if m <= max_m:
            return p + next((kern for max_n, kern in by_n if n <= max_n), last)
    if m <= 512:
        if n <= 1024:
            return p + "64_64_128_2_1_1_9_f_f"
        if n <= 2048:
            return p + "64_128_128_1_1_1_9_f_f"
        return p + ("64_256_128_1_1_1_9_f_f" if n <= 4096 or not fast else big)
    if m <= 1024:
        if n <= 1024:
            return p + "64_128_128_1_1_1_9_f_f"
        return p + ("64_256_128_1_1_1_9_f_f" if n <= 2048 or not fast else big)
    if m <= 2048 and n <= 1024:
        return p + "64_256_128_2_1_1_9_f_f"
    if k <= 4096 or not fast:
        return p + "128_128_128_2_1_1_9_t_f"
    return p + ("128_256_128_4_4_1_9_f_t" if m > 8192 and n > 8192 else big)


def _check_bf16(name: str, out_dtype: torch.dtype) -> None:
    if out_dtype != _BF16:
        raise OperandError(f"{name} writes bfloat16 only, got out_dtype={out_dtype}")


def _arch(dev: torch.device) -> int:
    return torch.cuda.get_device_capability(dev)[0] if dev.type == "cuda" else 9


def int8_scaled_mm(op: Callable, digest: str) -> Callable:
    """The ``scaled_mm`` of ``fbgemm-int8`` around ``op`` (``torch.ops.fbgemm.i8i8bf16``'s signature)."""

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=_BF16, bias=None):
        """int8 a [M,K], b [N,K], one-element float32 scales, no bias -> bf16 [M,N]; OperandError otherwise."""
        m, k, n = validate_operands(a, b, scale_a, scale_b, bias, out_dtype)
        _check_bf16("fbgemm-int8", out_dtype)
        if bias is not None or scale_a.numel() != 1 or scale_b.numel() != 1:
            raise OperandError("fbgemm-int8 (i8i8bf16) takes one scale per operand and no bias")
        trace.record_operands(a, b, scale_a, scale_b, bias)
        scale = float(scale_a.reshape(())) * float(scale_b.reshape(()))  # exact double; the op rounds it to fp32
        trace.record_path(int8_path(m, n, k), source_digest=digest, scale=scale, split_k=1)
        return op(a.contiguous(), b.to(a.device).contiguous(), scale, 1)

    return scaled_mm


def rowwise_scaled_mm(op: Callable, digest: str, fast: bool = True) -> Callable:
    """The ``scaled_mm`` of ``fbgemm-fp8-rowwise`` around ``op`` (``f8f8bf16_rowwise``'s signature)."""

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=_BF16, bias=None):
        """e4m3 a [M,K], b [N,K], scales [M]/[N]/scalar, bias bf16 [N] | None -> bf16 [M,N]; OperandError."""
        m, k, n = validate_operands(a, b, scale_a, scale_b, bias, out_dtype, operands="e4m3")
        _check_bf16("fbgemm-fp8-rowwise", out_dtype)
        trace.record_operands(a, b, scale_a, scale_b, bias)
        dev = a.device
        sa, sw = scale_vectors(scale_a.to(dev), scale_b.to(dev), m, n)
        bias32 = None if bias is None else bias.to(dev, torch.float32).contiguous()  # exact widening
        kernel = rowwise_kernel(m, n, k, fast, _arch(dev))
        trace.record_path(f"fbgemm/{kernel}", source_digest=digest, use_fast_accum=fast, bias_dtype="float32")
        xq, wq = a.contiguous(), b.to(dev).contiguous()
        x_scale, w_scale = sa.reshape(m).contiguous(), sw.reshape(n).contiguous()
        return op(xq, wq, x_scale, w_scale, bias=bias32, use_fast_accum=fast)

    return scaled_mm


def pinned_config(configs: list) -> Any:
    """The ``triton.Config`` of :data:`TRITON_CONFIG` in fbgemm's ``MATMUL_CONFIGS``; KernelLoadError when absent."""
    bm, bn, bk, sk, stages, warps = TRITON_CONFIG
    want = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": sk}
    for c in configs:
        if c.kwargs == want and c.num_stages == stages and c.num_warps == warps:
            return c
    raise KernelLoadError(f"fbgemm MATMUL_CONFIGS has no {TRITON_CONFIG} (BLOCK_M, N, K, SPLIT_K, stages, warps)")


def triton_scaled_mm(fn: Callable, autotuner: Any, config: Any, digest: str, fused: bool) -> Callable:
    """The ``scaled_mm`` of ``fbgemm-triton-fp8`` around ``fn`` (``matmul_fp8_row``) with ``autotuner`` pinned."""

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=_BF16, bias=None):
        """e4m3 a [M,K], b [N,K] (any strides), scales [M]/[N]/scalar, bias bf16 [N] | None -> bf16 [M,N]."""
        m, k, n = validate_operands(a, b, scale_a, scale_b, bias, out_dtype, operands="e4m3")
        _check_bf16("fbgemm-triton-fp8", out_dtype)
        trace.record_operands(a, b, scale_a, scale_b, bias)
        dev = a.device
        sa, sw = scale_vectors(scale_a.to(dev), scale_b.to(dev), m, n)
        trace.record_path(
            "fbgemm/triton-matmul_fp8_row/persistent-fast-accum",
            source_digest=digest,
            config="{}x{}x{} split_k{} s{} w{}".format(*TRITON_CONFIG),
            fp_fusion=fused,
            tma_persistent=False,
        )
        with one_config(autotuner, config):
            return fn(
                a,
                b.to(dev),
                sa.reshape(m).contiguous(),
                sw.reshape(n).contiguous(),
                bias=None if bias is None else bias.to(dev).contiguous(),
                tma_persistent=False,
            )

    return scaled_mm


def triton_fp_fusion() -> bool:
    """Whether Triton contracts ``a * b + c`` to an fma by default (its ``enable_fp_fusion``; ``TRITON_*`` knobs)."""
    import triton

    lang = getattr(getattr(triton, "knobs", None), "language", None)
    if lang is not None and hasattr(lang, "default_fp_fusion"):
        return bool(lang.default_fp_fusion) and not bool(getattr(lang, "force_disable_fp_fusion", False))
    return os.environ.get("TRITON_DEFAULT_FP_FUSION", "1") == "1"


def _spec(
    name: str, fn: Callable, steps: EpilogueSteps, cons: ShapeConstraints, version: str, digest: str, **kw
) -> KernelSpec:
    return KernelSpec(
        name=name,
        scaled_mm=fn,
        contract=steps.nearest_contract(),
        devices=("cuda",),
        constraints=cons,
        version=version,
        source_digest=digest,
        origin=f"adapter:{name}",
        steps=steps,
        **kw,
    )


def build_spec(name: str, target: Any, version: str = "standin", digest: str = "standin", **kw: Any) -> KernelSpec:
    """KernelSpec of adapter ``name`` around ``target``: the op (int8 / rowwise), or for ``fbgemm-triton-fp8`` a
    tuple ``(matmul_fp8_row, autotuner, config)``; ``kw``: ``fused`` (Triton fp fusion, default True)."""
    if name == "fbgemm-int8":
        fn, what = int8_scaled_mm(target, digest), "CUTLASS i8i8bf16 (Sm80), scale = s_a * s_w"
        return _spec(name, fn, INT8_STEPS, INT8_CONSTRAINTS, version, digest, description=f"{version} {what}")
    if name == "fbgemm-fp8-rowwise":
        fn, what = rowwise_scaled_mm(target, digest), "CUTLASS f8f8bf16_rowwise, use_fast_accum=True, fp32 bias"
        desc = f"{version} {what}"
        return _spec(
            name,
            fn,
            ROWWISE_STEPS,
            ROWWISE_CONSTRAINTS,
            version,
            digest,
            description=desc,
            operands="e4m3",
            accumulator={"cuda": FAST_ACC},
        )
    if name == "fbgemm-triton-fp8":
        fused = bool(kw.get("fused", True))
        run, tuner, config = target
        fn = triton_scaled_mm(run, tuner, config, digest, fused)
        steps = TRITON_FUSED_STEPS if fused else NAMED["fused/fp32_before_round"]
        desc = f"{version} Triton matmul_fp8_row (persistent, fp8_fast_accum, pinned config, fp fusion={fused})"
        return _spec(
            name,
            fn,
            steps,
            TRITON_CONSTRAINTS,
            version,
            digest,
            description=desc,
            operands="e4m3",
            accumulator={"cuda": FAST_ACC},
        )
    raise KernelLoadError(f"unknown fbgemm adapter {name!r}")


def _so_digest() -> str:
    """The wheel RECORD's sha256 of the gen_ai extension (the CUTLASS kernels), without reading the 180 MB file."""
    for f in importlib.metadata.distribution(DIST).files or []:
        if f.name == "fbgemm_gpu_experimental_gen_ai.so" and f.hash is not None:
            return f.hash.value
    return "unknown"


def make_spec(name: str) -> KernelSpec:
    """KernelSpec of ``name``; ImportError / AttributeError without fbgemm-gpu-genai (its import loads the .so);
    KernelLoadError when ``FBGEMM_AUTOTUNE_ENABLE`` would pick the CUTLASS kernel by timing."""
    version = f"{DIST} {importlib.metadata.version(DIST)}"
    if name == "fbgemm-triton-fp8":
        fp8_gemm = importlib.import_module("fbgemm_gpu.experimental.gemm.triton_gemm.fp8_gemm")
        # _kernel_matmul_fp8_row: fbgemm's private autotuner, the one object whose search can be pinned
        target = (fp8_gemm.matmul_fp8_row, fp8_gemm._kernel_matmul_fp8_row, pinned_config(fp8_gemm.MATMUL_CONFIGS))
        return build_spec(name, target, version, module_digest(str(fp8_gemm.__file__)), fused=triton_fp_fusion())
    importlib.import_module("fbgemm_gpu")  # loads fbgemm_gpu_experimental_gen_ai.so: registers torch.ops.fbgemm

    if os.environ.get("FBGEMM_AUTOTUNE_ENABLE"):
        raise KernelLoadError("FBGEMM_AUTOTUNE_ENABLE is set: fbgemm would pick its CUTLASS kernel by timing; unset it")
    ops = torch.ops.fbgemm
    op = ops.i8i8bf16 if name == "fbgemm-int8" else ops.f8f8bf16_rowwise
    return build_spec(name, op, version, _so_digest())
