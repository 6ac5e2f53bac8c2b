"""bitsandbytes adapter ``bnb`` (read from bitsandbytes 0.50.2; install:
``pip install 'int8conf[bnb]'``).

LLM.int8()'s int8 path as ``bitsandbytes.functional`` composes it:
``int8_linear_matmul(A, B)`` (``A @ B.T``, int32) then
``int8_mm_dequant(acc, row_stats, col_stats, bias=bias)``, which always
returns **float16** (``functional.py``: ``dtype=torch.float16``). bitsandbytes
carries absmax *statistics*, not scales: the scale is ``absmax / 127``, so the
adapter passes ``row_stats = scale_a * 127`` and ``col_stats = scale_b * 127``
(float32 products, one RNE each), and converts the float16 result to the
call's ``out_dtype``.

Facts from the installed source (``site-packages/bitsandbytes``, 0.50.2):

* CPU / default backend, ``backends/default/ops.py``
  (``bitsandbytes::int8_mm_dequant``, "default"): ``out = A_calc *
  (row_stats * col_stats) * 6.200124e-05``; ``out += bias``;
  ``out.to(float16)``. The constant is **6.200124e-05**, not
  ``1/127**2 = 6.2000124e-05``: float32 ``0x388206AA`` vs ``0x38820610``, 154
  float32 spacings (relative 1.8e-5) apart; the CUDA kernel's
  ``6.200012e-05f`` is ``0x38820610``, the float32 nearest to 1/127**2.
  int8_linear_matmul on the CPU: ``torch._int_mm`` when torch >= 2.6 and
  the CPU has AVX-512 (``backends/cpu/ops.py``), else a float32 matmul
  (``backends/default/ops.py``: ``torch.matmul(A.float(), B.float().t())``,
  exact only while partial sums stay below 2**24).
  Declared steps: ``cast fp32; mul (s_a*127)*(s_w*127); mul 6.200124e-05;
  add bias; cast fp16; cast out``.
* CUDA, ``csrc/ops.cu`` / ``kernels.cu`` ``kdequant_mm_int32_fp16``
  (bitsandbytes-foundation/bitsandbytes): ``__float2half(fmaf(acc * rowStat *
  colStat, MM_DEQUANT_CONST, bias))`` with ``MM_DEQUANT_CONST 6.200012e-05f``;
  the bias is fused only when it is float16 (``backends/cuda/ops.py``),
  otherwise the kernel adds 0 and ``out.add_(bias)`` follows in float16.
  Declared steps: ``cuda/float16``: ``cast fp32; mul s_a*127; mul s_w*127;
  fma 6.200012e-05 bias; cast fp16; cast out``; other CUDA out dtypes:
  ``...; fma 6.200012e-05 0; cast fp16; add bias -> fp16; cast out``.
  int8_linear_matmul on CUDA: cuBLASLt ``igemmlt``, or a float32 matmul when
  K is not a multiple of 4 (``backends/cuda/ops.py``).
"""

from __future__ import annotations

import importlib.metadata

import torch

from conformance.kernels import trace
from conformance.kernels._digest import module_digest
from conformance.kernels.spec import KernelSpec, ShapeConstraints
from reference.epilogue_steps import parse_declared

STEPS = parse_declared(
    {
        "cpu": ["cast fp32", "mul (s_a*127)*(s_w*127)", "mul 6.200124e-05", "add bias", "cast fp16", "cast out"],
        "cuda/float16": ["cast fp32", "mul s_a*127", "mul s_w*127", "fma 6.200012e-05 bias", "cast fp16", "cast out"],
        "cuda": [
            "cast fp32",
            "mul s_a*127",
            "mul s_w*127",
            "fma 6.200012e-05 0",
            "cast fp16",
            "add bias -> fp16",
            "cast out",
        ],
    }
)


def _record(a) -> None:
    k = a.shape[1]
    if a.device.type == "cuda":
        trace.record_path(
            "bnb/cuda-" + ("fp32-matmul-fallback(K%4)" if k % 4 else "igemmlt") + "+kdequant_mm_int32_fp16"
        )
    else:
        avx512 = torch.backends.cpu.get_cpu_capability() == "AVX512"
        trace.record_path("bnb/cpu-" + ("int_mm" if avx512 else "fp32-matmul") + "+default-dequant")


def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """int8conf convention around ``int8_linear_matmul`` + ``int8_mm_dequant``."""
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
    """KernelSpec of ``bnb`` (module docstring: source and declared steps).

    Raises:
        ImportError: bitsandbytes missing.
    """
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
