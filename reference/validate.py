"""Operand validation for ``scaled_mm`` (DESIGN.md 3): every problem is one single-line
:class:`~reference.errors.OperandError` naming the operand, e.g. ``scale_a has 3 NaN value(s) (first at index 7)``."""

from __future__ import annotations

from typing import Optional

import torch

from reference import memo
from reference.errors import OperandError

OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _is_tensor(x, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise OperandError(f"{name} must be a torch.Tensor, got {type(x).__name__}")


#: operand dtype per ``operands`` declaration (``KernelSpec.operands``)
OPERAND_DTYPES = {"int8": torch.int8, "e4m3": torch.float8_e4m3fn}


def _check_matrix(x, name: str, dims: str, dtype: torch.dtype = torch.int8) -> None:
    _is_tensor(x, name)
    if x.dtype != dtype:
        raise OperandError(f"{name} has dtype {x.dtype}; expected {dtype}")
    if x.dim() != 2:
        raise OperandError(f"{name} must be 2-D [{dims}], got {x.dim()}-D shape {tuple(x.shape)}")


def _check_e4m3_values(x: torch.Tensor, name: str) -> None:
    """OperandError on an e4m3 NaN (bit pattern S.1111.111; e4m3fn has no inf); not checked during a CUDA-graph
    capture (:func:`capturing`)."""
    if capturing(x):
        return
    nan = (x.view(torch.uint8) & 0x7F) == 0x7F
    cnt = int(nan.sum())
    if cnt:
        first = int(nan.reshape(-1).nonzero()[0, 0])
        raise OperandError(f"{name} has {cnt} NaN value(s) (first at index {first})")


def is_row_major(x: torch.Tensor) -> bool:
    """2-D ``x`` [R, C] with unit inner stride and leading stride >= C (BLAS ``lda >= K``; strides of size-1 dims
    ignored): dense, or a ``buf[:, :C]`` view."""
    r, c = (int(v) for v in x.shape)
    s0, s1 = (int(v) for v in x.stride())
    return (c <= 1 or s1 == 1) and (r <= 1 or s0 >= max(c, 1))


def is_column_major(x: torch.Tensor) -> bool:
    """2-D ``x`` [R, C], unit row stride, leading stride >= R: a ``buf.t()`` view of a row-major [C, R] buffer."""
    return is_row_major(x.t())


def _check_layout(x: torch.Tensor, name: str, allow_column_major: bool) -> None:
    """BLAS rule: row-major, unit inner stride, leading stride >= K; ``b`` may be a transposed [K, N] view."""
    if is_row_major(x) or (allow_column_major and is_column_major(x)):
        return
    r, c = (int(v) for v in x.shape)
    alt = f", or column-major (the transposed view of a [{c},{r}] buffer)" if allow_column_major else ""
    raise OperandError(
        f"{name} has strides {tuple(x.stride())} for shape {tuple(x.shape)}: expected row-major "
        f"with unit inner stride and leading stride >= {c}{alt}; pass {name}.contiguous()"
    )


def capturing(t: torch.Tensor) -> bool:
    """True while ``t`` is a CUDA tensor and the current stream captures a CUDA graph: values cannot be read then
    (a read-back is a sync, which breaks the capture), and a replay reads other values anyway."""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def _check_values(t: torch.Tensor, name: str) -> None:
    """OperandError on NaN or ±inf (zero and negative values are legal); not checked during a CUDA-graph capture
    (:func:`capturing`)."""
    if capturing(t):
        return
    # both counts in one read-back, memoized per tensor; a fresh copy has its source's counts (memo.copy_source)
    src = memo.copy_source(t)
    key = t if src is None else src
    whole = memo.part_source(key)
    if whole is not None and memo.peek("nonfinite", (whole,)) == (0, 0):
        # a part of a tensor without NaN / inf has none
        counts = memo.cached("nonfinite", (key,), lambda: (0, 0))
    else:
        counts = memo.cached("nonfinite", (key,), lambda: _nonfinite_counts(key))
    for what, cnt, fn in (("NaN", counts[0], torch.isnan), ("inf", counts[1], torch.isinf)):
        if cnt:  # only then: a valid tensor costs no op beyond its (memoized) counts
            first = int(fn(t.detach().reshape(-1)).nonzero()[0, 0])
            raise OperandError(f"{name} has {cnt} {what} value(s) (first at index {first})")


_SUMMABLE = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


def nonfinite_summary(t: torch.Tensor) -> Optional[str]:
    """``"3 non-finite value(s) (first at (i, j))"`` (row-major order), or None when all finite (one read-back).
    A finite sum proves every element finite (a NaN or an infinity makes any sum of it non-finite); only a non-finite
    sum (or an overflow) pays the element-wise test."""
    if t.dtype in _SUMMABLE and bool(torch.isfinite(t.sum())):
        return None
    bad = ~torch.isfinite(t)
    if not bool(bad.any()):
        return None
    first = tuple(int(i) for i in bad.nonzero()[0].tolist())
    return f"{int(bad.sum())} non-finite value(s) (first at {first})"


def _nonfinite_counts(t: torch.Tensor) -> tuple[int, int]:
    flat = t.detach().reshape(-1)
    n = torch.stack([torch.isnan(flat).sum(), torch.isinf(flat).sum()]).tolist()
    return int(n[0]), int(n[1])


def _check_scale_layout(s, name: str, rows: int, rows_name: str) -> None:
    _is_tensor(s, name)
    if s.dtype != torch.float32:
        raise OperandError(f"{name} has dtype {s.dtype}; expected torch.float32")
    if tuple(s.shape) not in ((), (1,), (rows,), (rows, 1)):
        raise OperandError(
            f"{name} has shape {tuple(s.shape)}; expected [{rows_name}]=[{rows}], "
            f"[{rows_name},1]=[{rows},1] or a scalar"
        )


def validate_operands(
    a,
    b,
    scale_a,
    scale_b,
    bias: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
    operands: str = "int8",
    block_size=None,
    azp_adj=None,
    azp=None,
) -> tuple[int, int, int]:
    """Check one ``scaled_mm`` call -> ``(M, K, N)``.

    ``a``: int8 [M, K] row-major (leading stride >= K); ``b``: int8 [N, K] row-major, or the ``w.t()`` view of a [K, N]
    buffer; ``scale_a`` / ``scale_b``: float32 [M] / [N], [M, 1] / [N, 1] or scalar, any strides, finite (zero and
    negative legal); ``bias``: None or finite [N] of ``out_dtype``; ``out_dtype``: bf16, fp16 or fp32. ``operands``:
    ``"int8"``, or ``"e4m3"`` for ``a`` / ``b`` float8_e4m3fn without NaN (DESIGN.md 3b). ``block_size``: a
    block-scaled call (``reference.block``): ``(block_n, block_k)``, scale_a float32 [M, ceil(K/block_k)], scale_b
    float32 [ceil(N/block_n), ceil(K/block_k)], any strides. ``azp_adj`` / ``azp``: an asymmetric-activation call
    (``reference.asymmetric``, int8 only, not block-scaled): azp_adj int32 [N] or [1, N], azp None (per-tensor) or
    int32 [M] / [M, 1] (per-token). OperandError (one line) on anything else, including M, N or K equal to 0."""
    if out_dtype not in OUT_DTYPES:
        raise OperandError(f"out_dtype={out_dtype} is not one of torch.bfloat16, torch.float16, torch.float32")
    if operands not in OPERAND_DTYPES:
        raise OperandError(f"operands={operands!r} is not one of {tuple(OPERAND_DTYPES)}")
    _check_matrix(a, "a", "M,K", OPERAND_DTYPES[operands])
    _check_matrix(b, "b", "N,K", OPERAND_DTYPES[operands])
    _check_layout(a, "a", allow_column_major=False)
    _check_layout(b, "b", allow_column_major=True)
    m, k = (int(s) for s in a.shape)
    n, kb = (int(s) for s in b.shape)
    if k != kb:
        raise OperandError(f"K mismatch: a is {tuple(a.shape)} [M,K] but b is {tuple(b.shape)} [N,K]")
    for dim, v, nm in (("M", m, "a"), ("N", n, "b"), ("K", k, "a")):
        if v == 0:
            raise OperandError(
                f"{dim}=0: {nm} has shape {tuple((a if nm == 'a' else b).shape)}; empty GEMMs are not supported"
            )
    for s, name, rows, rows_name in ((scale_a, "scale_a", m, "M"), (scale_b, "scale_b", n, "N")):
        if block_size is None:
            _check_scale_layout(s, name, rows, rows_name)
        else:
            _check_block_scale(s, name, m, k, n, block_size)
        _check_values(s, name)  # zero is legal: an all-zero activation row quantizes to scale 0
    if bias is not None:
        _is_tensor(bias, "bias")
        if bias.dtype != out_dtype:
            raise OperandError(f"bias has dtype {bias.dtype}; expected out_dtype {out_dtype}")
        if tuple(bias.shape) != (n,):
            raise OperandError(f"bias has shape {tuple(bias.shape)}; expected [N]=[{n}]")
        _check_values(bias, "bias")
    if operands == "e4m3":
        _check_e4m3_values(a, "a")
        _check_e4m3_values(b, "b")
    if azp_adj is not None or azp is not None:
        check_zero_point_operands(azp_adj, azp, m, n, operands, block_size)
    return m, k, n


def check_zero_point_operands(azp_adj, azp, m: int, n: int, operands: str = "int8", block_size=None) -> str:
    """The zero-point operands of an asymmetric call -> ``"per-tensor"`` (azp None) or ``"per-token"``.

    vLLM's checks (csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu:435-443): azp_adj int32 with N elements,
    azp int32 with M elements; here any strides, [N] / [1, N] and [M] / [M, 1]. OperandError (one line) otherwise,
    and for e4m3 operands or a block-scaled call (vLLM's azp GEMMs are int8 per-token x per-channel only)."""
    if azp_adj is None:
        raise OperandError("azp given without azp_adj: an asymmetric call passes azp_adj int32 [N] (colsum of b)")
    if operands != "int8":
        raise OperandError(f"azp_adj with operands={operands!r}: zero points are for int8 activations only")
    if block_size is not None:
        raise OperandError("azp_adj with block_size: asymmetric activations are per-token x per-channel calls only")
    for t, name, forms in ((azp_adj, "azp_adj", ((n,), (1, n))), (azp, "azp", ((m,), (m, 1)))):
        if t is None:
            continue
        _is_tensor(t, name)
        if t.dtype != torch.int32 or tuple(t.shape) not in forms:
            want = " or ".join(str(list(f)) for f in forms)
            raise OperandError(f"{name} is {t.dtype} {list(t.shape)}; expected torch.int32 {want}")
    return "per-tensor" if azp is None else "per-token"


def _check_block_scale(s, name: str, m: int, k: int, n: int, block_size) -> None:
    try:
        bn, bk = (int(v) for v in block_size)
    except (TypeError, ValueError):
        raise OperandError(f"block_size={block_size!r}: expected (block_n, block_k)") from None
    if bn < 1 or bk < 1:
        raise OperandError(f"block_size={block_size!r}: block_n and block_k must be positive")
    want = (m, -(-k // bk)) if name == "scale_a" else (-(-n // bn), -(-k // bk))
    _is_tensor(s, name)
    if s.dtype != torch.float32 or tuple(s.shape) != want:
        what = "[M, ceil(K/block_k)]" if name == "scale_a" else "[ceil(N/block_n), ceil(K/block_k)]"
        raise OperandError(
            f"{name} is {s.dtype} {list(s.shape)}; a block-scaled call with block_size ({bn}, {bk}) takes float32 "
            f"{what} = {list(want)}"
        )


def normalize_scales(scale_a: torch.Tensor, scale_b: torch.Tensor, m: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(scale_a float32 [M], scale_b float32 [N])``, contiguous, scalars broadcast (no rounding), from [M]/[M, 1]/
    [1]/0-d scales. OperandError on a non-tensor, non-float32 or mis-shaped scale (values are not checked)."""
    out = []
    for s, rows, name, rn in ((scale_a, m, "scale_a", "M"), (scale_b, n, "scale_b", "N")):
        _check_scale_layout(s, name, rows, rn)
        out.append(s.reshape(-1).expand(rows).contiguous() if s.numel() == 1 else s.reshape(rows).contiguous())
    return out[0], out[1]


def check_device(device, what: str = "device", error: type = OperandError) -> torch.device:
    """``torch.device(device)`` for ``cpu``, ``cuda`` or ``cuda:N`` present here. Raises ``error``
    (one line starting ``{what} {device!r}:``): not a device, CUDA unavailable, an index beyond the
    CUDA device count, another device type, or ``cpu:N`` with N > 0."""
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError) as e:
        raise error(f"{what} {device!r}: not a valid device ({type(e).__name__}); use cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise error(f"{what} {device!r}: CUDA requested but torch.cuda.is_available() is False")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise error(f"{what} {device!r}: only {torch.cuda.device_count()} CUDA device(s) present")
    elif dev.type != "cpu":
        raise error(f"{what} {device!r}: unsupported device type {dev.type!r} (int8conf runs on 'cpu' or 'cuda')")
    elif dev.index not in (None, 0):  # torch has one CPU device; "cpu:1" would silently run on it
        raise error(f"{what} {device!r}: there is one CPU device; use 'cpu'")
    return dev
