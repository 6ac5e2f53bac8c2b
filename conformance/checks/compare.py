"""Bit-level comparison of a kernel output against a reference output.

Shared by the output checks (C5, C6, C8) and by pairwise comparison of two
kernels. Distances are in units of spacing (ulp) of the output dtype, from
``reference.bits.spacing_distance`` (difference of ordered integer
encodings; NaN vs number = ``NAN_DISTANCE``).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from reference.bits import NAN_DISTANCE, bits_of, spacing_distance, ulp_histogram


def _num(x: float):
    """float -> JSON-able (non-finite values become their repr string)."""
    x = float(x)
    return x if x == x and abs(x) != float("inf") else repr(x)


def _hex(bits: int, dtype: torch.dtype) -> str:
    width = 8 if dtype == torch.float32 else 4
    return f"0x{int(bits):0{width}X}"


def skipped_reason(run) -> Optional[str]:
    """The runner's reason when the kernel could not run here at all (device
    missing, shape outside its declared constraints): such a case is ``n/a``
    for the checks that need the kernel's output, not a failure."""
    man = getattr(run, "manifest", None) or {}
    if man.get("skipped"):
        return run.error or "kernel not runnable here"
    return None


def output_problem(out: Optional[Tensor], shape: tuple, dtype: torch.dtype,
                   error: Optional[str] = None) -> Optional[str]:
    """One line saying why ``out`` cannot be compared, or None if it can.

    Args:
        out: the kernel output (or None when the kernel failed).
        shape: expected ``(M, N)``.
        dtype: expected output dtype.
        error: the runner's error text for this run, if any.
    """
    if error:
        return f"kernel failed: {error}"
    if out is None:
        return "kernel produced no output"
    if not isinstance(out, Tensor):
        return f"kernel returned {type(out).__name__}, not a tensor"
    if tuple(out.shape) != tuple(shape):
        return f"kernel output shape {tuple(out.shape)} != expected {tuple(shape)}"
    if out.dtype != dtype:
        return f"kernel output dtype {out.dtype} != expected {dtype}"
    return None


def element_context(ops, i: int, j: int, exact: Optional[Tensor] = None) -> dict:
    """Operand values behind output element ``[i, j]`` (for evidence).

    Returns ``{"acc", "scale_a", "scale_b", "bias"}``: the exact accumulator
    (int, when ``exact`` is given), the per-token scale ``scale_a[i]``, the
    per-channel scale ``scale_b[j]`` (float32 values as Python floats, plus
    their float32 bit patterns as hex) and ``bias[j]`` (or None).
    """
    sa = ops.scale_a.reshape(-1)
    sb = ops.scale_b.reshape(-1)
    sa_v = sa[i if sa.numel() > 1 else 0].to(torch.float32)
    sb_v = sb[j if sb.numel() > 1 else 0].to(torch.float32)
    ctx = {
        "acc": None if exact is None else int(exact[i, j]),
        "scale_a": _num(sa_v), "scale_a_bits": _hex(int(bits_of(sa_v.reshape(1))[0]), torch.float32),
        "scale_b": _num(sb_v), "scale_b_bits": _hex(int(bits_of(sb_v.reshape(1))[0]), torch.float32),
        "bias": None,
    }
    if ops.bias is not None:
        bv = ops.bias.reshape(-1)[j]
        ctx["bias"] = _num(bv)
        ctx["bias_bits"] = _hex(int(bits_of(bv.reshape(1))[0]), bv.dtype)
    return ctx


def compare_bits(out: Tensor, ref: Tensor, tol_ulp: int, ops=None,
                 exact: Optional[Tensor] = None, mask: Optional[Tensor] = None,
                 max_listed: int = 5) -> tuple[int, dict]:
    """Compare ``out`` with ``ref`` element by element on bit patterns.

    Args:
        out, ref: same shape [M, N] and dtype (bf16 / fp16 / fp32), CPU.
        tol_ulp: largest allowed spacing distance (0 = bit-identical).
        ops: the case's ``GemmOperands`` (adds operand values of the worst
            element and the operand digests to the evidence), or None.
        exact: exact int64 accumulator [M, N] (adds ``acc`` of the worst element).
        mask: optional bool [M, N]; only True elements are compared.
        max_listed: how many offending elements to list besides the worst.

    Returns:
        ``(n_over_tol, evidence)``: the number of compared elements whose
        distance exceeds ``tol_ulp``, and a JSON-able dict with
        ``n_elements, n_compared, n_differ (distance > 0), n_over_tol,
        max_ulp, tol_ulp, ulp_histogram, worst {index, out, ref, out_bits,
        ref_bits, ulp, acc, scale_a, scale_b, bias}, first_over_tol
        [[i, j, ulp], ...], operand_digests``.
    """
    dist = spacing_distance(out.cpu(), ref.cpu())
    if mask is not None:
        dist = torch.where(mask, dist, torch.zeros_like(dist))
    n_compared = int(dist.numel() if mask is None else mask.sum())
    over = dist > tol_ulp
    n_over = int(over.sum())
    flat = dist.reshape(-1)
    hist_src = flat if mask is None else flat[mask.reshape(-1)]
    ev: dict = {
        "n_elements": int(dist.numel()),
        "n_compared": n_compared,
        "n_differ": int((dist > 0).sum()),
        "n_over_tol": n_over,
        "tol_ulp": int(tol_ulp),
        "max_ulp": int(flat.max()) if flat.numel() else 0,
        "ulp_histogram": ulp_histogram(hist_src),
    }
    if ev["max_ulp"] == NAN_DISTANCE:
        ev["max_ulp_is_nan_mismatch"] = True
    if flat.numel() and ev["max_ulp"] > 0:
        w = int(flat.argmax())
        n_cols = dist.shape[1] if dist.dim() == 2 else 1
        i, j = divmod(w, n_cols)
        ob = int(bits_of(out.reshape(-1)[w:w + 1].cpu())[0])
        rb = int(bits_of(ref.reshape(-1)[w:w + 1].cpu())[0])
        worst = {"index": [i, j], "ulp": int(flat[w]),
                 "out": _num(out.reshape(-1)[w]), "ref": _num(ref.reshape(-1)[w]),
                 "out_bits": _hex(ob, out.dtype), "ref_bits": _hex(rb, ref.dtype)}
        if ops is not None:
            worst.update(element_context(ops, i, j, exact))
        ev["worst"] = worst
        idx = over.nonzero()[:max_listed].tolist() if n_over else []
        ev["first_over_tol"] = [[int(a), int(b), int(dist[a, b])] for a, b in idx]
    if ops is not None:
        ev["operand_digests"] = ops.digests()
    return n_over, ev
