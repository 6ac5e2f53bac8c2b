"""torchao adapters (read from torchao 0.18.0).

* ``kernel/intmm.py`` ``int_scaled_matmul(a, b[K,N], scales1[M,1])``: CPU ``torch._int_mm`` (or the exact u8s8
  variant on AVX512-VNNI without AMX) then ``* scales1`` in the scale's dtype; CUDA ``safe_int_mm`` (K or N % 8:
  CPU int32; M <= 16: float32 matmul, exact below 2**24) or, with ``TORCHAO_AUTOTUNER_ENABLE``, the Triton kernel
  of ``intmm_triton.py``, whose 960-config search ``torchao-triton`` replaces by ``PINNED_TRITON_CONFIG``
  (BLOCK_K 32: for even K % 32 != 0 its unmasked ``EVEN_K`` loads read past K, as every listed config would).
* ``torchao``: ``quantization/utils.py`` ``_quant_int8_per_token_matmul`` then ``+ bias``:
  ``cast fp32; mul s_a; mul s_w; cast out; add bias``.
* ``torchao-w8a8``: ``Int8Tensor``'s ``aten.linear`` (``int8_tensor.py``), replayed line for line:
  ``cast fp32; mul s_a; cast out; mul s_w -> fp32; add bias; cast out``; ``torchao-w8a8-bf16`` with bf16 activation
  scales: ``cast bf16; mul bf16(s_a) -> bf16; cast out; mul s_w -> fp32; add bias; cast out``."""

from __future__ import annotations

import contextlib
import importlib.metadata

import torch

from conformance.kernels import trace
from conformance.kernels.digest import module_digest
from conformance.kernels.spec import KernelSpec, ShapeConstraints
from reference.contract import parse_steps

STEPS = {
    "torchao": parse_steps(
        ["cast fp32", "mul s_a", "mul s_w", "cast out", "add bias"],
        name="torchao int_scaled_matmul + per-channel rescale",
    ),
    "torchao-w8a8": parse_steps(
        ["cast fp32", "mul s_a", "cast out", "mul s_w -> fp32", "add bias", "cast out"],
        name="torchao Int8Tensor linear (fp32 act scales)",
    ),
    "torchao-w8a8-bf16": parse_steps(
        ["cast bf16", "mul bf16(s_a) -> bf16", "cast out", "mul s_w -> fp32", "add bias", "cast out"],
        name="torchao Int8Tensor linear (bf16 act scales)",
    ),
}
STEPS["torchao-triton"] = STEPS["torchao"]


def _cols(scale_a, scale_b, m: int, n: int):
    sa = scale_a.reshape(-1)
    sb = scale_b.reshape(-1)
    sa = (sa.expand(m) if sa.numel() == 1 else sa).reshape(m, 1).contiguous()
    sb = (sb.expand(n) if sb.numel() == 1 else sb).contiguous()
    return sa, sb


def _record(a, b, autotune: bool) -> None:
    """Name the path torchao takes for this call (C1 evidence)."""
    from torchao.utils import _cpu_is_amx_tile_supported, _cpu_is_vnni_supported

    m, k = a.shape
    n = b.shape[0]
    if a.device.type == "cpu":
        torch_2_12 = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 12)
        u8 = (not _cpu_is_amx_tile_supported()) and _cpu_is_vnni_supported() and torch_2_12
        trace.record_path("torchao/cpu-" + ("u8s8-int_mm" if u8 else "s8s8-int_mm"))
    elif autotune:
        trace.record_path(
            "torchao/cuda-triton-pinned-config",
            note=f"config {PINNED_TRITON_CONFIG} (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps); EVEN_K=" + str(k % 2 == 0),
        )
    elif k % 8 or n % 8:
        trace.record_path("torchao/cuda-safe_int_mm-cpu-int32-fallback")
    elif m <= 16:
        trace.record_path(
            "torchao/cuda-safe_int_mm-fp32-matmul-fallback",
            note="torch._int_mm rejects M<=16; safe_int_mm falls back to a float32 matmul",
        )
    else:
        trace.record_path("torchao/cuda-safe_int_mm-cublas")


# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps): an entry of torchao's
# int8_mm_kernel_configs (module docstring: why one is pinned).
PINNED_TRITON_CONFIG = (64, 64, 32, 3, 4)


def pinned_config():
    """The ``triton.Config`` of ``PINNED_TRITON_CONFIG`` in torchao's list; LookupError when the list
    no longer has it (re-read the adapter against the new torchao)."""
    import torchao.kernel.intmm_triton as it

    for c in it.int8_mm_kernel_configs:
        blocks = tuple(c.kwargs.get(k) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
        if blocks + (c.num_stages, c.num_warps) == PINNED_TRITON_CONFIG:
            return c
    raise LookupError(f"torchao int8_mm_kernel_configs has no {PINNED_TRITON_CONFIG}")


def _with_autotuner(on: bool):
    """Context setting torchao's ``AUTOTUNER_ENABLE`` to ``on``; when on, its config search returns
    the pinned configuration."""
    import torchao.kernel.intmm as intmm

    @contextlib.contextmanager
    def ctx():
        old = intmm.AUTOTUNER_ENABLE
        intmm.AUTOTUNER_ENABLE = on
        it = intmm.intmm_triton if on else None
        old_search = it.get_best_config_fn if it is not None else None
        if it is not None:
            cfg = pinned_config()
            it.get_best_config_fn = lambda fn, args, configs: cfg
        try:
            yield
        finally:
            intmm.AUTOTUNER_ENABLE = old
            if it is not None:
                it.get_best_config_fn = old_search

    return ctx()


def _per_token_linear(autotune: bool):
    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        from torchao.quantization.utils import _quant_int8_per_token_matmul

        m, n = a.shape[0], b.shape[0]
        sa, sb = _cols(scale_a, scale_b, m, n)
        _record(a, b, autotune)
        with _with_autotuner(autotune):
            y = _quant_int8_per_token_matmul(a, sa, b.t(), sb, output_dtype=out_dtype)
        if bias is not None:  # _quant_int8_dynamic_per_token_linear: mm_out + bias
            y = y + bias
        return y

    return scaled_mm


def _int8_tensor_linear(bf16_scales: bool):
    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        from torchao.kernel import int_scaled_matmul

        m, n = a.shape[0], b.shape[0]
        sa, sb = _cols(scale_a, scale_b, m, n)
        x_scales = sa.to(torch.bfloat16) if bf16_scales else sa
        output_dtype = out_dtype
        _record(a, b, False)
        # int8_tensor.py, aten.linear of Int8Tensor (act_quant_kwargs path), verbatim order:
        w_vals_int8_t = b.contiguous().t()
        intermediate_dtype = torch.float if x_scales.dtype == torch.half else x_scales.dtype
        y_dot_scaled = int_scaled_matmul(a, w_vals_int8_t, x_scales.reshape(-1, 1).to(intermediate_dtype))
        y_dot_scaled = y_dot_scaled.to(output_dtype)
        w_scales = sb.reshape(n, 1)  # Int8Tensor weight scale: float32 [N, 1]
        y = y_dot_scaled * w_scales.flatten()
        if bias is not None:
            y += bias
        return y.to(output_dtype)

    return scaled_mm


def _int_mm(a, b):
    from torchao.kernel import safe_int_mm

    return safe_int_mm(a, b.t())


def make_spec(name: str) -> KernelSpec:
    """KernelSpec for ``torchao``, ``torchao-w8a8``, ``torchao-w8a8-bf16`` or ``torchao-triton``;
    ImportError without torchao."""
    import torchao
    import torchao.kernel.intmm as intmm

    version = getattr(torchao, "__version__", None) or importlib.metadata.version("torchao")
    digest = module_digest(intmm.__file__)
    if name in ("torchao", "torchao-triton"):
        fn = _per_token_linear(name == "torchao-triton")
    else:
        fn = _int8_tensor_linear(name == "torchao-w8a8-bf16")
    steps = STEPS[name]
    devices = ("cuda",) if name == "torchao-triton" else ("cuda", "cpu")
    if name == "torchao-triton" and intmm.intmm_triton is None:
        raise ImportError("torchao.kernel.intmm_triton did not import (no triton)")
    return KernelSpec(
        name=name,
        scaled_mm=fn,
        contract=steps.nearest_contract(),
        devices=devices,
        constraints=ShapeConstraints(note="any shape; CUDA path depends on M<=16 and K,N % 8"),
        version=f"torchao {version}",
        source_digest=digest,
        int_mm=_int_mm,
        origin=f"adapter:{name}",
        description=f"torchao {version}: {steps.name}",
        steps=steps,
    )
