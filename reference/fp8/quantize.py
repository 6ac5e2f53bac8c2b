"""FP8 (e4m3) W8A8 quantizers matching the field's tools byte for byte; every cast to e4m3 is RNE after clamping to
[-448, 448] (torch's CPU/CUDA cast and ``cvt.rn.satfinite.e4m3x2.f32`` agree there).

Weights, as compressed-tensors' FP8_DYNAMIC scheme (static, symmetric, strategy ``channel``; ``calculate_qparams``,
quantization/utils/helpers.py, and ``_quantize``, quantization/lifecycle/forward_helpers.py): min-max observer
(``amin``/``amax`` in the weight dtype, widened to include 0), ``scale = absmax / 448`` (a tensor division in the
weight dtype), a zero scale -> ``finfo(w.dtype).eps``; ``q = e4m3(clamp(w / scale + zero_point, -448, 448))`` with the
+0 zero point (so -0.0 -> +0; a tiny negative still gives -0).

Activations, as vLLM (csrc/quantization/w8a8/fp8/common.cu, ``dynamic_per_token_scaled_fp8_quant_kernel_strided``):
per row ``scale = fmaxf(absmax / 448.f, min_scaling_factor)`` (csrc/quantization/utils.cuh: ``1 / (448 * 512)``) and
``q = e4m3(fmaxf(-448, fminf(x / scale, 448)))`` (``scaled_fp8_conversion<false>``: a division, "to match FBGemm");
per tensor (``segmented_max_reduction_strided`` + ``scaled_fp8_quant_kernel_strided_dynamic``): ``scale = absmax /
448.f`` with no floor and ``q = e4m3(clamp(x * (1.f / scale)))`` (an all-zero tensor: scale 0, and fminf of the NaN
0 * inf gives q = 448). ``rule="native"`` is vLLM's torch path (``QuantFP8.forward_native``, input_quant_fp8.py):
both scales floored at min_scaling_factor, ``q = e4m3(clamp(x * (1 / scale)))``."""

from __future__ import annotations

import numpy as np
import torch

from reference.errors import OperandError
from reference.fp8.accumulator import E4M3, E4M3_MAX
from reference.quantize import DIVISIONS, SCALE_FLOORS, check_float_matrix

#: vLLM's ``min_scaling_factor<c10::Float8_e4m3fn>``: float32 ``1.f / (448.f * 512.f)``.
MIN_SCALING_FACTOR = float(np.float32(1.0) / np.float32(E4M3_MAX * 512.0))
#: Activation rules: vLLM's CUDA kernels (default) or its torch ``forward_native``.
ACTIVATION_RULES = ("kernel", "native")


def to_e4m3_saturated(v: torch.Tensor) -> torch.Tensor:
    """``e4m3(fmaxf(-448, fminf(v, 448)))`` elementwise (NaN -> 448, as CUDA's fminf): float tensor -> e4m3, RNE."""
    hi = torch.tensor(E4M3_MAX, dtype=v.dtype, device=v.device)
    return torch.fmax(torch.fmin(v, hi), -hi).to(E4M3)


def quantize_weight_fp8_per_channel(
    w: torch.Tensor, scale_floor: str = "zero_to_dtype_eps", division: str = "weight_dtype"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q float8_e4m3fn [N, K], scale [N, 1] in w.dtype)`` of a finite [N, K] bf16/fp16/fp32 weight, as
    compressed-tensors (module docstring). ``scale_floor`` / ``division``: as :func:`reference.quantize.
    quantize_weight_per_channel` (``"float32"``: the library's Triton path on CUDA, ``tl.div_rn`` in float32).
    OperandError: non-tensor, unsupported dtype, not 2-D / empty, non-finite, unknown scale_floor or division."""
    check_float_matrix(w, "w", "N,K")
    if scale_floor not in SCALE_FLOORS:
        raise OperandError(f"scale_floor={scale_floor!r} is not one of {SCALE_FLOORS}")
    if division not in DIVISIONS:
        raise OperandError(f"division={division!r} is not one of {DIVISIONS}")
    w = w.detach()
    zero = torch.zeros((), dtype=w.dtype, device=w.device)
    lo = torch.minimum(torch.amin(w, dim=1, keepdim=True), zero)
    hi = torch.maximum(torch.amax(w, dim=1, keepdim=True), zero)
    # a 0-d tensor divisor, as the library: a true division on CPU and CUDA alike
    scale = torch.maximum(lo.abs(), hi.abs()) / torch.tensor(E4M3_MAX, dtype=w.dtype, device=w.device)
    if scale_floor == "clamp_fp32_eps":
        scale = torch.clamp(scale, min=torch.finfo(torch.float32).eps)
    else:
        scale = torch.where(scale == 0, torch.tensor(torch.finfo(w.dtype).eps, dtype=w.dtype, device=w.device), scale)
    scaled = w / scale if division == "weight_dtype" else w.float() / scale.float()
    scaled = scaled + torch.zeros((), dtype=scaled.dtype, device=w.device)  # the +0 zero point
    return to_e4m3_saturated(scaled).contiguous(), scale.contiguous()


def _activation_setup(x, rule: str) -> torch.Tensor:
    check_float_matrix(x, "x", "M,K")
    if rule not in ACTIVATION_RULES:
        raise OperandError(f"rule={rule!r} is not one of {ACTIVATION_RULES}")
    return x.detach().to(torch.float32)


def _f32(value: float, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float32, device=like.device)


def quantize_activation_fp8_per_token(x: torch.Tensor, rule: str = "kernel") -> tuple[torch.Tensor, torch.Tensor]:
    """``(q float8_e4m3fn [M, K], scale float32 [M])`` of finite [M, K] bf16/fp16/fp32 activations, as vLLM's
    ``scaled_fp8_quant(x, use_per_token_if_dynamic=True)`` (module docstring); an all-zero row gets scale
    :data:`MIN_SCALING_FACTOR` and q = 0. OperandError: non-tensor, unsupported dtype, not 2-D / empty, non-finite,
    unknown rule."""
    xf = _activation_setup(x, rule)
    scale = torch.maximum(torch.div(xf.abs().amax(dim=1), _f32(E4M3_MAX, xf)), _f32(MIN_SCALING_FACTOR, xf))
    if rule == "kernel":
        return to_e4m3_saturated(xf / scale[:, None]).contiguous(), scale.contiguous()
    inv = torch.div(_f32(1.0, xf), scale)
    return to_e4m3_saturated(xf * inv[:, None]).contiguous(), scale.contiguous()


def quantize_activation_fp8_per_tensor(x: torch.Tensor, rule: str = "kernel") -> tuple[torch.Tensor, torch.Tensor]:
    """``(q float8_e4m3fn [M, K], scale float32 [1])`` of finite [M, K] bf16/fp16/fp32 activations, as vLLM's
    dynamic per-tensor ``scaled_fp8_quant(x)`` (module docstring). OperandError as
    :func:`quantize_activation_fp8_per_token`."""
    xf = _activation_setup(x, rule)
    scale = torch.div(xf.abs().amax().reshape(1), _f32(E4M3_MAX, xf))
    if rule == "native":
        scale = torch.maximum(scale, _f32(MIN_SCALING_FACTOR, xf))
    inv = torch.div(_f32(1.0, xf), scale)  # 1/0 = inf for an all-zero tensor (kernel rule)
    return to_e4m3_saturated(xf * inv).contiguous(), scale.contiguous()
