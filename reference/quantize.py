"""W8A8 quantizers matching the field's standard tools byte for byte.

Weights: symmetric per-output-channel int8 as compressed-tensors (the format
and library llm-compressor uses to write W8A8 checkpoints) computes it, from
the per-row min / max that llm-compressor's min-max observer takes with
``torch.amin`` / ``torch.amax`` in the weight's own dtype:
  * ``calculate_qparams`` (compressed_tensors/quantization/utils/helpers.py,
    vllm-project/compressed-tensors): ``min_vals = min(min_vals, 0)``,
    ``max_vals = max(max_vals, 0)``, ``max_val_pos = max(|min_vals|,
    |max_vals|)`` (= per-row absmax), ``scales = max_val_pos /
    (float(bit_range) / 2)`` with ``bit_range = 127 - (-128) = 255``, i.e.
    a torch division of the weight-dtype tensor by the Python float 127.5
    (so the scale is in the weight's dtype, computed by torch's kernel: fp32
    opmath then one RNE to bf16/fp16);
  * scale floor: current releases replace a scale that is exactly 0 by
    ``torch.finfo(scale.dtype).eps`` (bf16 2**-7, fp16 2**-10, fp32 2**-23)
    ("Update any 0s with small values to prevent div by 0"); older releases
    (neuralmagic/compressed-tensors helpers.py before that change) instead
    clamp every scale from below with
    ``torch.clamp(scales, min=torch.finfo(torch.float32).eps)``; the two agree
    unless a row's absmax is below 127.5 * 2**-23 (~1.5e-5).
    Both are available via ``scale_floor``; the default is the current one.
  * device note: torch's CUDA ``tensor / python_scalar`` multiplies by the
    float32 reciprocal (aten/src/ATen/native/cuda/BinaryDivTrueKernel.cu,
    "compute a * reciprocal(b)"), the CPU kernel divides. For bf16/fp16
    weights both give the same scale bits for every finite value (tested
    exhaustively); for float32 weights this reproduction follows the CPU
    (true division) and a CUDA run of the tool may differ in the last bit.
  * ``_quantize`` (compressed_tensors/quantization/lifecycle/forward.py):
    ``scaled = x / scale`` (weight dtype), ``+ zero_point`` (0 for symmetric,
    a no-op except -0 -> +0), then ``round_to_quantized_type_args``:
    ``torch.clamp(scaled, -128, 127)`` then ``torch.round`` (round half to
    even), then ``.to(torch.int8)``.
  * ``_dequantize``: ``x_q.to(scale.dtype) * scale``.

Activations: dynamic per-token int8 as vLLM's ``dynamic_scaled_int8_quant``
(csrc/quantization/compressed_tensors/int8_quant_kernels.cu,
``dynamic_scaled_int8_quant_kernel``): per row, ``absmax = max |float32(x)|``;
the stored scale is ``absmax / 127.f`` (float32 division); the quantized
value is ``float_to_int8_rn(float32(x) * inv_s)`` with
``inv_s = 127.f / absmax`` (float32 division, then float32 multiply -- NOT
``x / scale``), rounded to nearest even with saturation to [-128, 127]
(``cvt.rni.sat.s8.f32`` on CUDA, ``nearbyint`` + clamp on CPU). An all-zero
row gets ``inv_s = 0``: q = 0 and scale 0.0.
"""

from __future__ import annotations

import torch

from reference.errors import OperandError
from reference.validate import nonfinite_summary

_W_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
SCALE_FLOORS = ("zero_to_dtype_eps", "clamp_fp32_eps")
#: Where ``w / scale`` is computed: ``"weight_dtype"`` -- compressed-tensors'
#: torch path (CPU), the tool's documented rule and this module's default;
#: ``"float32"`` -- its Triton path (``_quantize_triton`` in
#: compressed_tensors/quantization/lifecycle/forward_helpers.py, taken for
#: CUDA tensors: ``tl.div_rn(x.to(float32), scale.to(float32))``, then clamp
#: and ``rint``). For bf16 weights the two differ by +-1 in a few percent of
#: the int8 values (a bf16 quotient is rounded to 8 significant bits before
#: the round-to-integer, a float32 quotient to 24).
DIVISIONS = ("weight_dtype", "float32")


def _check_2d_float(x, name: str, dims: str) -> None:
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
    """Symmetric per-output-channel int8 weight quantization (compressed-tensors).

    Args:
        w: [N, K] weight (nn.Linear layout), bfloat16 / float16 / float32, finite.
        scale_floor: ``"zero_to_dtype_eps"`` (current compressed-tensors: a
            zero scale -- all-zero row -- becomes ``finfo(w.dtype).eps``) or
            ``"clamp_fp32_eps"`` (older releases: ``scale = max(scale,
            finfo(float32).eps)`` for every row).

    Returns:
        ``(q, scale)``: q int8 [N, K]; scale [N, 1] in ``w.dtype`` where
        ``scale = absmax_row / 127.5`` (torch division in w.dtype) and
        ``q = clamp(round_half_even(w / scale), -128, 127)`` (division in
        w.dtype). Source: module docstring.

    Raises:
        OperandError: non-tensor, unsupported dtype, not 2-D / empty,
            non-finite values, unknown scale_floor or division.
    """
    _check_2d_float(w, "w", "N,K")
    if division not in DIVISIONS:
        raise OperandError(f"division={division!r} is not one of {DIVISIONS}")
    if scale_floor not in SCALE_FLOORS:
        raise OperandError(f"scale_floor={scale_floor!r} is not one of {SCALE_FLOORS}")
    w = w.detach()
    zero = torch.zeros((), dtype=w.dtype)
    min_vals = torch.minimum(torch.amin(w, dim=1, keepdim=True), zero)
    max_vals = torch.maximum(torch.amax(w, dim=1, keepdim=True), zero)
    max_val_pos = torch.maximum(min_vals.abs(), max_vals.abs())
    # Same op and dtype as the tool. For bf16/fp16 weights the result is the
    # correctly rounded absmax/127.5 whatever the device computes internally
    # (true fp32 division on CPU, x * (1/127.5) on CUDA): checked exhaustively
    # over every finite bf16/fp16 value in tests/reference/test_quantize.py.
    scale = max_val_pos / (255.0 / 2)
    if scale_floor == "clamp_fp32_eps":
        scale = torch.clamp(scale, min=torch.finfo(torch.float32).eps)
    else:
        scale = torch.where(scale == 0, torch.tensor(torch.finfo(w.dtype).eps, dtype=w.dtype), scale)
    scaled = w / scale if division == "weight_dtype" else w.float() / scale.float()
    q = torch.round(torch.clamp(scaled, -128.0, 127.0)).to(torch.int8)
    return q.contiguous(), scale.contiguous()


def dequantize_weight(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Dequantize as compressed-tensors ``_dequantize``: ``q.to(scale.dtype) * scale``.

    Args:
        q: int8 [N, K].
        scale: [N, 1] (or [N]) floating tensor.

    Returns:
        [N, K] tensor in ``scale.dtype`` (one RNE rounding of the product).

    Raises:
        OperandError: wrong dtypes or shapes.
    """
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
    """Dynamic per-token symmetric int8 activation quantization (vLLM).

    Args:
        x: [M, K] activations, bfloat16 / float16 / float32, finite.

    Returns:
        ``(q int8 [M, K], scale float32 [M])`` with, per row m and in float32:
        ``absmax = max_k |x[m,k]|``, ``scale = absmax / 127``,
        ``q = sat_int8(rne(x * (127 / absmax)))`` -- the multiply by the
        float32 reciprocal factor ``127.f / absmax`` of vLLM's
        ``dynamic_scaled_int8_quant_kernel`` (not ``x / scale``, which can
        differ by one in rare ties). An all-zero row gives q = 0, scale = 0.0
        (which :func:`reference.validate.validate_operands` will reject as a
        scale; callers feeding such rows to a GEMM must substitute a
        non-zero scale -- any value gives the same all-zero accumulator row).

    Raises:
        OperandError: non-tensor, unsupported dtype, not 2-D / empty, non-finite.
    """
    _check_2d_float(x, "x", "M,K")
    xf = x.detach().to(torch.float32)
    absmax = xf.abs().amax(dim=1)
    scale = torch.div(absmax, 127.0)  # true float32 division on CPU
    # torch's ``127.0 / t`` is reciprocal(t) * 127 (two roundings); the kernel
    # does one float32 division, so divide explicitly.
    inv_s = torch.div(torch.full_like(absmax, 127.0), absmax)
    inv_s = torch.where(absmax == 0, torch.zeros_like(absmax), inv_s)
    v = xf * inv_s[:, None]
    q = torch.clamp(torch.round(v), -128.0, 127.0).to(torch.int8)
    return q.contiguous(), scale.contiguous()
