"""W8A8 quantizers matching the field's standard tools byte for byte.

Weights, as compressed-tensors (llm-compressor's W8A8 format) computes them from the min-max observer's
``torch.amin``/``torch.amax`` in the weight dtype (``calculate_qparams``, quantization/utils/helpers.py):
``scale = absmax_row / 127.5`` (a torch division in the weight dtype: fp32 opmath, one RNE); a zero scale becomes
``finfo(w.dtype).eps`` (current releases) or every scale is clamped to ``finfo(float32).eps`` (older releases);
``_quantize``: ``round_half_even(clamp(x / scale + 0, -128, 127)).to(int8)``; ``_dequantize``:
``q.to(scale.dtype) * scale``. CUDA's ``tensor / scalar`` multiplies by the float32 reciprocal: same scale bits for
bf16/fp16 weights; for float32 weights this follows the CPU's true division.

Activations, as vLLM's ``dynamic_scaled_int8_quant_kernel`` (int8_quant_kernels.cu): per row
``absmax = max |float32(x)|``, ``scale = absmax / 127.f``, ``q = sat_int8(rne(float32(x) * (127.f / absmax)))`` (not
``x / scale``); an all-zero row gives q = 0 and scale 0.0."""

from __future__ import annotations

import torch

from reference.errors import OperandError
from reference.validate import nonfinite_summary

_W_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
SCALE_FLOORS = ("zero_to_dtype_eps", "clamp_fp32_eps")
#: Where ``w / scale`` is computed: ``"weight_dtype"`` (compressed-tensors' torch path, the default) or ``"float32"``
#: (its Triton path for CUDA tensors, ``_quantize_triton``: ``tl.div_rn`` in float32, then clamp and ``rint``); for
#: bf16 weights the two differ by +-1 in some int8 values.
DIVISIONS = ("weight_dtype", "float32")


def check_float_matrix(x, name: str, dims: str) -> None:
    """OperandError (one line) unless ``x`` is a finite, non-empty 2-D ``[dims]`` bf16 / fp16 / fp32 tensor."""
    if not isinstance(x, torch.Tensor):
        raise OperandError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _W_DTYPES:
        raise OperandError(f"{name} has dtype {x.dtype}; expected bfloat16, float16 or float32")
    if x.dim() != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise OperandError(f"{name} must be a non-empty 2-D [{dims}] tensor, got shape {tuple(x.shape)}")
    bad = nonfinite_summary(x)
    if bad is not None:
        raise OperandError(f"{name} has {bad}")


def quantize_weight_per_channel(
    w: torch.Tensor, scale_floor: str = "zero_to_dtype_eps", division: str = "weight_dtype"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q int8 [N, K], scale [N, 1] in w.dtype)`` of a finite [N, K] bf16/fp16/fp32 weight (module docstring).

    ``scale_floor``: ``"zero_to_dtype_eps"`` (current compressed-tensors) or ``"clamp_fp32_eps"`` (older releases).
    OperandError: non-tensor, unsupported dtype, not 2-D / empty, non-finite, unknown scale_floor or division."""
    check_float_matrix(w, "w", "N,K")
    if division not in DIVISIONS:
        raise OperandError(f"division={division!r} is not one of {DIVISIONS}")
    if scale_floor not in SCALE_FLOORS:
        raise OperandError(f"scale_floor={scale_floor!r} is not one of {SCALE_FLOORS}")
    w = w.detach()
    zero = torch.zeros((), dtype=w.dtype)
    min_vals = torch.minimum(torch.amin(w, dim=1, keepdim=True), zero)
    max_vals = torch.maximum(torch.amax(w, dim=1, keepdim=True), zero)
    max_val_pos = torch.maximum(min_vals.abs(), max_vals.abs())
    # same op and dtype as the tool: for bf16/fp16 the correctly rounded quotient on any device (tested exhaustively)
    scale = max_val_pos / (255.0 / 2)
    if scale_floor == "clamp_fp32_eps":
        scale = torch.clamp(scale, min=torch.finfo(torch.float32).eps)
    else:
        scale = torch.where(scale == 0, torch.tensor(torch.finfo(w.dtype).eps, dtype=w.dtype), scale)
    scaled = w / scale if division == "weight_dtype" else w.float() / scale.float()
    q = torch.round(torch.clamp(scaled, -128.0, 127.0)).to(torch.int8)
    return q.contiguous(), scale.contiguous()


def dequantize_weight(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``q.to(scale.dtype) * scale`` (compressed-tensors ``_dequantize``): int8 [N, K] and [N, 1]/[N] scale -> [N, K] in
    ``scale.dtype``. OperandError on wrong dtypes or shapes."""
    if not isinstance(q, torch.Tensor) or q.dtype != torch.int8 or q.dim() != 2:
        raise OperandError(
            f"q must be an int8 [N,K] tensor, got "
            f"{getattr(q, 'dtype', type(q).__name__)} {tuple(getattr(q, 'shape', ()))}"
        )
    if not isinstance(scale, torch.Tensor) or not scale.dtype.is_floating_point:
        raise OperandError("scale must be a floating-point tensor")
    n = q.shape[0]
    if tuple(scale.shape) not in ((n, 1), (n,)):
        raise OperandError(f"scale has shape {tuple(scale.shape)}; expected [N,1]=[{n},1] or [N]")
    return q.to(scale.dtype) * scale.reshape(n, 1)


def quantize_activation_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q int8 [M, K], scale float32 [M])`` of finite [M, K] bf16/fp16/fp32 activations, as vLLM (module docstring).
    An all-zero row gives scale 0.0 (a legal scale: that accumulator row is zero). OperandError: non-tensor,
    unsupported dtype, not 2-D / empty, non-finite."""
    check_float_matrix(x, "x", "M,K")
    xf = x.detach().to(torch.float32)
    absmax = xf.abs().amax(dim=1)
    scale = torch.div(absmax, 127.0)  # true float32 division on CPU
    # torch's ``127.0 / t`` is reciprocal(t) * 127 (two roundings); the kernel does one float32 division
    inv_s = torch.div(torch.full_like(absmax, 127.0), absmax)
    inv_s = torch.where(absmax == 0, torch.zeros_like(absmax), inv_s)
    v = xf * inv_s[:, None]
    q = torch.clamp(torch.round(v), -128.0, 127.0).to(torch.int8)
    return q.contiguous(), scale.contiguous()
