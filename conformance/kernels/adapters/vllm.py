"""vLLM-family adapters through the vLLM convention (``loader.vllm_adapter``); these need CUDA builds and are
tested with stand-ins implementing the documented math.

* ``vllm-cutlass``: ``vllm._custom_ops.cutlass_scaled_mm``, ``ScaledEpilogue[Bias]``: ``w_then_a/fp32_before_round``;
  K, N multiples of 16.
* ``vllm-triton``: ``compressed_tensors.triton_scaled_mm``: ``acc * scale_a * scale_b``, cast, ``+ bias``:
  ``a_then_w/after_round``.
* ``sgl-int8``: ``sgl_kernel.int8_scaled_mm`` (SM80/SM89 ``EpilogueVisitorPerRowPerCol``): ``accum * (scale_col *
  scale_row) + bias`` in float, one conversion: ``fused/fp32_before_round``; K % 16, N % 8."""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Callable

from conformance.kernels.digest import callable_digest
from conformance.kernels.loader import vllm_adapter
from conformance.kernels.spec import KernelSpec, ShapeConstraints
from reference.contract import NAMED

#: name -> (module, attribute, declared steps, constraints, distribution)
_CUTLASS = ShapeConstraints(k_multiple=16, n_multiple=16, note="CUTLASS: K, N multiples of 16")
_SGL = ShapeConstraints(k_multiple=16, n_multiple=8, note="sgl-kernel: K multiple of 16, N multiple of 8")
TARGETS = {
    "vllm-cutlass": ("vllm._custom_ops", "cutlass_scaled_mm", "w_then_a/fp32_before_round", _CUTLASS, "vllm"),
    "vllm-triton": (
        "vllm.model_executor.layers.quantization.compressed_tensors.triton_scaled_mm",
        "triton_scaled_mm",
        "a_then_w/after_round",
        ShapeConstraints(),
        "vllm",
    ),
    "sgl-int8": ("sgl_kernel", "int8_scaled_mm", "fused/fp32_before_round", _SGL, "sgl-kernel"),
}


def build_spec(name: str, fn: Callable, version: str = "0") -> KernelSpec:
    """KernelSpec for a vLLM-convention callable ``fn`` under adapter ``name`` (:data:`TARGETS`)."""
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
    """Import the real op and build its spec (ImportError / AttributeError when missing)."""
    mod, attr, _s, _c, dist = TARGETS[name]
    fn = getattr(importlib.import_module(mod), attr)
    return build_spec(name, fn, f"{dist} {importlib.metadata.version(dist)}")
