"""bitsandbytes adapter ``bnb`` (read from bitsandbytes 0.50.2): LLM.int8()'s int8 path,
``int8_linear_matmul(A, B)`` then ``int8_mm_dequant(acc, row_stats, col_stats, bias)`` (always float16 out),
with absmax statistics ``row_stats = scale_a * 127``, ``col_stats = scale_b * 127``; result cast to out_dtype.

* CPU, ``backends/default/ops.py``: ``A * (row_stats * col_stats) * 6.200124e-05`` (float32 0x388206AA, not the
  nearest to 1/127**2, 0x38820610), ``+ bias``, ``.to(float16)``; matmul ``torch._int_mm`` with AVX-512, else float32.
* CUDA, ``csrc/kernels.cu`` ``kdequant_mm_int32_fp16``: ``__float2half(fmaf(acc * rowStat * colStat,
  6.200012e-05f, bias))``, bias fused only when float16 (else ``out.add_(bias)`` in float16); matmul cuBLASLt
  ``igemmlt``, or float32 when K % 4."""

from __future__ import annotations

import importlib.metadata

import torch

from conformance.kernels import trace
from conformance.kernels.digest import module_digest
from conformance.kernels.spec import KernelSpec, ShapeConstraints
from reference.contract import parse_declared

STEPS = parse_declared(
    {
        "cpu": ["cast fp32", "mul (s_a*127)*(s_w*127)", "mul 6.200124e-05", "add bias", "cast fp16", "cast out"],
        "cuda/float16": ["cast fp32", "mul s_a*127", "mul s_w*127", "fma 6.200012e-05 bias", "cast fp16", "cast out"],
        "cuda": ["cast fp32", "mul s_a*127", "mul s_w*127", "fma 6.200012e-05 0"]
        + ["cast fp16", "add bias -> fp16", "cast out"],
    }
)


def _record(a) -> None:
    k = a.shape[1]
    if a.device.type == "cuda":
        mm = "fp32-matmul-fallback(K%4)" if k % 4 else "igemmlt"
        trace.record_path("bnb/cuda-" + mm + "+kdequant_mm_int32_fp16")
    else:
        avx512 = torch.backends.cpu.get_cpu_capability() == "AVX512"
        trace.record_path("bnb/cpu-" + ("int_mm" if avx512 else "fp32-matmul") + "+default-dequant")


def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    import bitsandbytes.functional as F

    m, n = a.shape[0], b.shape[0]
    sa = scale_a.reshape(-1)
    sb = scale_b.reshape(-1)
    sa = sa.expand(m).contiguous() if sa.numel() == 1 else sa.contiguous()
    sb = sb.expand(n).contiguous() if sb.numel() == 1 else sb.contiguous()
    _record(a)
    acc = F.int8_linear_matmul(a, b)
    out = F.int8_mm_dequant(acc, sa * 127.0, sb * 127.0, bias=bias)
    return out.to(out_dtype)


def int_mm(a, b):
    """Accumulator-only entry: ``int8_linear_matmul(a, b)`` = ``a @ b.T`` int32."""
    import bitsandbytes.functional as F

    return F.int8_linear_matmul(a, b)


def make_spec(name: str) -> KernelSpec:
    """KernelSpec of ``bnb``; ImportError without bitsandbytes."""
    import bitsandbytes
    import bitsandbytes.backends.default.ops as dflt

    version = getattr(bitsandbytes, "__version__", None) or importlib.metadata.version("bitsandbytes")
    return KernelSpec(
        name=name,
        scaled_mm=scaled_mm,
        contract=STEPS["cpu"].nearest_contract(),
        devices=("cuda", "cpu"),
        constraints=ShapeConstraints(note="any shape"),
        version=f"bitsandbytes {version}",
        source_digest=module_digest(dflt.__file__),
        int_mm=int_mm,
        origin=f"adapter:{name}",
        description=f"bitsandbytes {version}: int8_linear_matmul + int8_mm_dequant (fp16 out)",
        steps=STEPS,
    )
