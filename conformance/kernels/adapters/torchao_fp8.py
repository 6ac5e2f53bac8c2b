"""torchao FP8 adapter ``torchao-fp8`` (read from torchao 0.18.0): ``Float8Tensor``'s ``aten.linear``
(``quantization/quantize_/workflows/float8/float8_tensor.py`` ``_float8_addmm_impl``) with the rowwise
(``PerRow``) activation and weight of ``Float8DynamicActivationFloat8WeightConfig`` and that config's default
``mm_config`` (torchao 0.18: ``use_fast_accum=True``), ``KernelPreference.TORCH``: ``torch._scaled_mm`` with
[M,1] / [1,N] scales, the bias in the kernel, output in the activation's dtype (``addmm_float8_unwrapped_inference``).
A scalar scale is expanded to one per row (the same values a rowwise quantization would hold). CUDA only: on the CPU
torch's ``_scaled_mm`` scales the operands before an fp32 GEMM, which no epilogue step list describes. Declared:
the rowwise kernel's epilogue (``builtin_torch_fp8.ROWWISE``) and the accumulator of torch-fp8 / torch-fp8-fast by
the config's ``use_fast_accum`` (measured on the H200 for those built-ins)."""

from __future__ import annotations

import importlib.metadata

import torch
import torch.nn.functional as F

from conformance.kernels import trace
from conformance.kernels.builtin_torch_fp8 import KERNELS as TORCH_FP8
from conformance.kernels.builtin_torch_fp8 import ROWWISE
from conformance.kernels.digest import module_digest
from conformance.kernels.spec import KernelSpec, ShapeConstraints
from conformance.kernels.torch_epilogue import scale_vectors


def _default_mm_config():
    """torchao's default ``Float8MMConfig`` of a PerRow ``Float8DynamicActivationFloat8WeightConfig``."""
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow

    return Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()).mm_config


def _linear(mm_config, digest: str):
    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        """FP8 W8A8 GEMM through torchao's Float8Tensor linear (module docstring)."""
        from torchao.quantization.quantize_.common import KernelPreference
        from torchao.quantization.quantize_.workflows.float8.float8_tensor import Float8Tensor

        (m, k), n = a.shape, b.shape[0]
        sa, sb = scale_vectors(scale_a.to(a.device), scale_b.to(a.device), m, n)
        trace.record_operands(a, b, scale_a, scale_b, bias)
        trace.record_path(
            "torchao/float8-linear-torch-scaled_mm-rowwise",
            source_digest=digest,
            use_fast_accum=bool(mm_config.use_fast_accum),
        )
        x = Float8Tensor(a, sa.reshape(m, 1).contiguous(), block_size=[1, k], dtype=out_dtype)
        w = Float8Tensor(
            b.to(a.device),
            sb.reshape(n, 1).contiguous(),
            block_size=[1, k],
            mm_config=mm_config,
            kernel_preference=KernelPreference.TORCH,
            dtype=out_dtype,
        )
        return F.linear(x, w, None if bias is None else bias.to(a.device))

    return scaled_mm


def make_spec(name: str) -> KernelSpec:
    """KernelSpec of ``torchao-fp8``; ImportError without torchao."""
    import torchao
    from torchao.quantization.quantize_.workflows.float8 import float8_tensor

    version = getattr(torchao, "__version__", None) or importlib.metadata.version("torchao")
    mm_config = _default_mm_config()
    fast = bool(mm_config.use_fast_accum)
    digest = module_digest(float8_tensor.__file__)
    builtin = TORCH_FP8["torch-fp8-fast" if fast else "torch-fp8"]
    return KernelSpec(
        name=name,
        scaled_mm=_linear(mm_config, digest),
        contract=ROWWISE,
        devices=("cuda",),
        constraints=ShapeConstraints(k_multiple=16, n_multiple=16, note="torch._scaled_mm: K and N multiples of 16"),
        version=f"torchao {version}",
        source_digest=digest,
        origin=f"adapter:{name}",
        description=f"torchao {version} Float8Tensor linear, PerRow, use_fast_accum={fast} (its default)",
        operands="e4m3",
        accumulator={"cuda": builtin["accumulator"]["cuda"]},
    )
