"""Operand validation for ``scaled_mm`` (DESIGN.md section 3).

Every problem becomes one :class:`~reference.errors.OperandError` whose
message is a single line naming the operand and the problem, e.g.
``scale_a has 3 NaN value(s) (first at index 7)``.
"""

from __future__ import annotations

from typing import Optional

import torch

from reference.errors import OperandError

OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _is_tensor(x, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise OperandError(f"{name} must be a torch.Tensor, got {type(x).__name__}")


def _check_int8_matrix(x, name: str, dims: str) -> None:
    _is_tensor(x, name)
    if x.dtype != torch.int8:
        raise OperandError(f"{name} has dtype {x.dtype}; expected torch.int8")
    if x.dim() != 2:
        raise OperandError(
            f"{name} must be 2-D [{dims}], got {x.dim()}-D shape {tuple(x.shape)}")
    if not x.is_contiguous():
        raise OperandError(
            f"{name} is not contiguous (shape {tuple(x.shape)}, strides {tuple(x.stride())}); "
            f"pass {name}.contiguous()")


def _scale_shape_ok(s: torch.Tensor, rows: int) -> bool:
    shp = tuple(s.shape)
    return shp in ((), (1,), (rows,), (rows, 1))


def _check_values(t: torch.Tensor, name: str, forbid_zero: bool) -> None:
    flat = t.detach().reshape(-1)
    for what, mask in (("NaN", torch.isnan(flat)), ("inf", torch.isinf(flat))):
        cnt = int(mask.sum())
        if cnt:
            first = int(mask.nonzero()[0, 0])
            raise OperandError(f"{name} has {cnt} {what} value(s) (first at index {first})")
    if forbid_zero:
        mask = flat == 0
        cnt = int(mask.sum())
        if cnt:
            first = int(mask.nonzero()[0, 0])
            raise OperandError(f"{name} has {cnt} zero value(s) (first at index {first})")


def _check_scale_layout(s, name: str, rows: int, rows_name: str) -> None:
    """Raise OperandError unless ``s`` is a float32 tensor of shape [rows],
    [rows, 1] or a scalar."""
    _is_tensor(s, name)
    if s.dtype != torch.float32:
        raise OperandError(f"{name} has dtype {s.dtype}; expected torch.float32")
    if not _scale_shape_ok(s, rows):
        raise OperandError(
            f"{name} has shape {tuple(s.shape)}; expected [{rows_name}]=[{rows}], "
            f"[{rows_name},1]=[{rows},1] or a scalar")


def _check_scale(s, name: str, rows: int, rows_name: str) -> None:
    _check_scale_layout(s, name, rows, rows_name)
    _check_values(s, name, forbid_zero=True)


def validate_operands(a, b, scale_a, scale_b, bias: Optional[torch.Tensor] = None,
                      out_dtype: torch.dtype = torch.bfloat16) -> tuple[int, int, int]:
    """Check the operands of one ``scaled_mm`` call.

    Args:
        a: int8 [M, K], contiguous (row-major).
        b: int8 [N, K], contiguous (nn.Linear layout).
        scale_a: float32 per-token scale, shape [M], [M, 1] or scalar ([] / [1]).
        scale_b: float32 per-channel scale, shape [N], [N, 1] or scalar.
        bias: None or a tensor of shape [N] and dtype ``out_dtype``, finite.
        out_dtype: torch.bfloat16, torch.float16 or torch.float32.

    Returns:
        ``(M, K, N)`` as Python ints.

    Raises:
        OperandError: one line naming the operand and problem, for: a
            non-tensor, wrong dtype, not 2-D, non-contiguous a or b, K
            mismatch, M, N or K equal to 0, a scale of another shape, NaN /
            inf / zero scales (negative scales are legal), a bias of wrong
            shape or dtype or with NaN/inf, out_dtype not bf16/fp16/fp32.
    """
    if out_dtype not in OUT_DTYPES:
        raise OperandError(
            f"out_dtype={out_dtype} is not one of torch.bfloat16, torch.float16, torch.float32")
    _check_int8_matrix(a, "a", "M,K")
    _check_int8_matrix(b, "b", "N,K")
    m, k = (int(s) for s in a.shape)
    n, kb = (int(s) for s in b.shape)
    if k != kb:
        raise OperandError(
            f"K mismatch: a is {tuple(a.shape)} [M,K] but b is {tuple(b.shape)} [N,K]")
    for dim, v, nm in (("M", m, "a"), ("N", n, "b"), ("K", k, "a")):
        if v == 0:
            raise OperandError(f"{dim}=0: {nm} has shape {tuple((a if nm == 'a' else b).shape)}; "
                               f"empty GEMMs are not supported")
    _check_scale(scale_a, "scale_a", m, "M")
    _check_scale(scale_b, "scale_b", n, "N")
    if bias is not None:
        _is_tensor(bias, "bias")
        if bias.dtype != out_dtype:
            raise OperandError(f"bias has dtype {bias.dtype}; expected out_dtype {out_dtype}")
        if tuple(bias.shape) != (n,):
            raise OperandError(f"bias has shape {tuple(bias.shape)}; expected [N]=[{n}]")
        _check_values(bias, "bias", forbid_zero=False)
    return m, k, n


def normalize_scales(scale_a: torch.Tensor, scale_b: torch.Tensor, m: int, n: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Bring scales to the canonical 1-D float32 form.

    Args:
        scale_a: float32 [M], [M, 1], [1] or 0-d.
        scale_b: float32 [N], [N, 1], [1] or 0-d.
        m, n: the GEMM's M and N.

    Returns:
        ``(scale_a float32 [M], scale_b float32 [N])``, contiguous; scalars
        are broadcast (values unchanged, no rounding).

    Raises:
        OperandError: a non-tensor, non-float32 or mis-shaped scale (values
            are not checked here; :func:`validate_operands` does).
    """
    out = []
    for s, rows, name, rn in ((scale_a, m, "scale_a", "M"), (scale_b, n, "scale_b", "N")):
        _check_scale_layout(s, name, rows, rn)
        out.append(s.reshape(-1).expand(rows).contiguous() if s.numel() == 1
                   else s.reshape(rows).contiguous())
    return out[0], out[1]
