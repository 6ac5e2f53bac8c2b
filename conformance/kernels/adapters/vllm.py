"""vLLM-family adapters through the vLLM calling convention
(``conformance.kernels.loader.vllm_adapter``: ``fn(a[M,K], b[K,N] column-major,
scale_a[M,1], scale_b[N,1], out_dtype, bias)``).

These packages need CUDA builds and are not installable on this project's
machines: the adapters are written against the documented signatures and
unit-tested with stand-in callables implementing the documented math
(tests/conformance/kernels/adapters/test_vllm_adapters.py); they load here
only when the package imports.

* ``vllm-cutlass``: ``vllm._custom_ops.cutlass_scaled_mm(a, b, scale_a,
  scale_b, out_dtype, bias=None)``; epilogue ``ScaledEpilogue`` /
  ``ScaledEpilogueBias`` (vLLM ``csrc/quantization/cutlass_w8a8``): float
  accumulator times the per-channel scale, then the per-token scale, bias
  added in float32, one rounding: ``w_then_a/fp32_before_round``. CUTLASS
  needs K and N multiples of 16.
* ``vllm-triton``: ``vllm.model_executor.layers.quantization.compressed_tensors
  .triton_scaled_mm.triton_scaled_mm(input, weight, scale_a, scale_b,
  out_dtype, bias=None)``: ``accumulator * scale_a``, ``* scale_b``, cast to
  out_dtype, then ``+ bias``: ``a_then_w/after_round``.
* ``sgl-int8``: ``sgl_kernel.int8_scaled_mm(mat_a, mat_b, scales_a, scales_b,
  out_dtype, bias=None)``; sgl-kernel's ``EpilogueVisitorPerRowPerCol``
  (``sgl-kernel/csrc/cutlass_extensions/epilogue/epilogue_per_row_per_col_scale.h``,
  from TensorRT-LLM): ``accum * (scale_col * scale_row)`` then ``+ bias`` in
  float, one conversion: ``fused/fp32_before_round``. K multiple of 16, N
  multiple of 8 (its TORCH_CHECKs). This is the SM80/SM89 kernel; other
  architectures dispatch elsewhere and are not verified here.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Callable

from conformance.kernels._digest import callable_digest
from conformance.kernels.loader import vllm_adapter
from conformance.kernels.spec import KernelSpec, ShapeConstraints
from reference.epilogue_steps import NAMED

#: name -> (module, attribute, declared steps, constraints, distribution)
TARGETS = {
    "vllm-cutlass": (
        "vllm._custom_ops",
        "cutlass_scaled_mm",
        "w_then_a/fp32_before_round",
        ShapeConstraints(k_multiple=16, n_multiple=16, note="CUTLASS: K, N multiples of 16"),
        "vllm",
    ),
    "vllm-triton": (
        "vllm.model_executor.layers.quantization.compressed_tensors.triton_scaled_mm",
        "triton_scaled_mm",
        "a_then_w/after_round",
        ShapeConstraints(),
        "vllm",
    ),
    "sgl-int8": (
        "sgl_kernel",
        "int8_scaled_mm",
        "fused/fp32_before_round",
        ShapeConstraints(k_multiple=16, n_multiple=8, note="sgl-kernel: K multiple of 16, N multiple of 8"),
        "sgl-kernel",
    ),
}


def build_spec(name: str, fn: Callable, version: str = "0") -> KernelSpec:
    """KernelSpec for a vLLM-convention callable ``fn`` under adapter ``name``
    (the declared steps and constraints of :data:`TARGETS`)."""
    _mod, _attr, steps_name, cons, _dist = TARGETS[name]
    steps = NAMED[steps_name]
    return KernelSpec(
        name=name,
        scaled_mm=vllm_adapter(fn),
        contract=steps.nearest_contract(),
        devices=("cuda",),
        constraints=cons,
        version=version,
        source_digest=callable_digest(fn),
        origin=f"adapter:{name}",
        description=f"{_mod}.{_attr} (vLLM convention)",
        steps=steps,
    )


def make_spec(name: str) -> KernelSpec:
    """Import the real op and build its spec.

    Raises:
        ImportError / AttributeError: package missing (one line via the catalogue).
    """
    mod, attr, _s, _c, dist = TARGETS[name]
    fn = getattr(importlib.import_module(mod), attr)
    return build_spec(name, fn, f"{dist} {importlib.metadata.version(dist)}")
