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

from reference.bits import (NAN_DISTANCE, bits_of, histogram_dict, spacing_distance,
                            ulp_histogram_counts)


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


def problem_kind(out: Optional[Tensor], shape: tuple, dtype: torch.dtype,
                 error: Optional[str] = None) -> Optional[str]:
    """Category of :func:`output_problem`'s line: ``dtype`` (a tensor of
    another dtype than asked), ``shape``, ``type`` (not a tensor),
    ``exception`` (the kernel raised), ``nan`` (NaN where the declared
    reference has none), ``in-place`` (wrote into an operand), ``no output``,
    ``error`` (any other runner error); None when the output can be compared.

    The runner (``conformance.kernels.runner``) rejects a wrong dtype / shape
    before the checks see it and says so in ``error`` ("... returned dtype
    X, expected Y"); that wording is matched here so that a dtype error is
    reported as one, never as a spacing failure.
    """
    if error:
        e = error.lower()
        for key, kind in (("returned dtype", "dtype"), ("returned shape", "shape"),
                          (" nan ", "nan"), ("in place", "in-place"), ("raised", "exception"),
                          ("expected a torch.tensor", "type")):
            if key in e:
                return kind
        return "error"
    if out is None:
        return "no output"
    if not isinstance(out, Tensor):
        return "type"
    if tuple(out.shape) != tuple(shape):
        return "shape"
    if out.dtype != dtype:
        return "dtype"
    return None


def output_problem(out: Optional[Tensor], shape: tuple, dtype: torch.dtype,
                   error: Optional[str] = None) -> Optional[str]:
    """One line saying why ``out`` cannot be compared, or None if it can.

    The line starts with the problem's category (:func:`problem_kind`), e.g.
    ``dtype error: kernel returned dtype torch.bfloat16, expected torch.float16``.

    Args:
        out: the kernel output (or None when the kernel failed).
        shape: expected ``(M, N)``.
        dtype: expected output dtype.
        error: the runner's error text for this run, if any.
    """
    kind = problem_kind(out, shape, dtype, error)
    if kind is None:
        return None
    if error:
        line = error
    elif out is None:
        line = "kernel produced no output"
    elif not isinstance(out, Tensor):
        line = f"kernel returned {type(out).__name__}, not a tensor"
    elif kind == "shape":
        line = f"kernel output shape {tuple(out.shape)} != expected {tuple(shape)}"
    else:
        line = f"kernel output dtype {out.dtype} != expected {dtype}"
    if kind in ("dtype", "shape", "type"):
        return f"{kind} error: {line}"
    return f"kernel failed ({kind}): {line}"


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


def bit_differences(out: Tensor, ref: Tensor) -> tuple[Tensor, Tensor]:
    """Element-wise bit inequality of two same-dtype tensors, NaN canonical.

    Args:
        out, ref: same shape and dtype (bf16 / fp16 / fp32), CPU.

    Returns:
        ``(differ, signed_zero)`` bool tensors of that shape: ``differ`` where
        the IEEE bit patterns differ, except that any NaN equals any NaN
        (payloads and the NaN's sign are canonicalised: IEEE 754 leaves NaN
        payload propagation implementation-defined, section 6.2.3);
        ``signed_zero`` where one is +0 and the other -0 (bits differ, values
        compare equal: the sign of zero is lost or invented).
    """
    nan = torch.isnan(out) & torch.isnan(ref)
    differ = (bits_of(out) != bits_of(ref)) & ~nan
    signed_zero = differ & (out == 0) & (ref == 0)
    return differ, signed_zero


def compare_bits(out: Tensor, ref: Tensor, tol_ulp: int, ops=None,
                 exact: Optional[Tensor] = None, mask: Optional[Tensor] = None,
                 max_listed: int = 5) -> tuple[int, dict]:
    """Compare ``out`` with ``ref`` element by element on bit patterns.

    With ``tol_ulp == 0`` (bit identity: C5, C8, pairwise) an element is over
    tolerance when its bits differ (:func:`bit_differences`: the sign of zero
    counts, NaN payloads do not); ±0 differences are counted separately as
    ``n_signed_zero`` (their spacing distance is 0). With ``tol_ulp >= 1``
    (C6) an element is over tolerance when its spacing distance exceeds
    ``tol_ulp`` (a ±0 difference is then within tolerance, but still counted).

    Args:
        out, ref: same shape [M, N] and dtype (bf16 / fp16 / fp32), CPU.
        tol_ulp: largest allowed spacing distance (0 = bit-identical).
        ops: the case's ``GemmOperands`` (adds operand values of the worst
            element and the operand digests to the evidence), or None.
        exact: exact int64 accumulator [M, N] (adds ``acc`` of the worst element).
        mask: optional bool [M, N]; only True elements are compared.
        max_listed: how many offending elements to list besides the worst.

    Returns:
        ``(n_over_tol, evidence)``: the number of compared elements over
        tolerance, and a JSON-able dict with ``n_elements, n_compared,
        n_differ (distance > 0), n_bits_differ, n_signed_zero, n_over_tol,
        max_ulp, tol_ulp, ulp_histogram, worst {index, out, ref, out_bits,
        ref_bits, ulp, acc, scale_a, scale_b, bias}, first_over_tol
        [[i, j, ulp], ...], signed_zero_first [[i, j], ...],
        operand_digests``. ``worst`` is the element of largest distance, or
        the first ±0 difference when every distance is 0.
    """
    # on ref's device (the CPU for CPU references, the GPU for the sweep's
    # on-device references): integer bit arithmetic, the same result anywhere
    from reference import memo
    out = memo.moved(out, ref.device)  # one copy per output inside a memo scope (the sweep)
    if mask is not None:
        mask = mask.to(ref.device)
    dist = spacing_distance(out, ref)
    differ, szero = bit_differences(out, ref)
    if mask is not None:
        dist = torch.where(mask, dist, torch.zeros_like(dist))
        differ = differ & mask
        szero = szero & mask
    over = differ if tol_ulp == 0 else dist > tol_ulp
    flat = dist.reshape(-1)
    # every headline count in one read-back (one device sync on a GPU, not ten)
    z = torch.zeros((), dtype=torch.int64, device=flat.device)
    # masked-out elements become -1, which no bin counts (distances are >= 0):
    # no boolean indexing, whose result size would need a sync of its own
    hist = ulp_histogram_counts(flat if mask is None else
                                torch.where(mask.reshape(-1), flat, torch.full_like(flat, -1)))
    counts = torch.cat([torch.stack([
        mask.sum() if mask is not None else z, over.sum(), (dist > 0).sum(), differ.sum(),
        szero.sum(), flat.max().to(torch.int64) if flat.numel() else z]), hist]).tolist()
    n_masked, n_over, n_differ, n_bits, n_szero, max_ulp = counts[:6]
    n_over = int(n_over)
    ev: dict = {
        "n_elements": int(dist.numel()),
        "n_compared": int(dist.numel() if mask is None else n_masked),
        "n_differ": int(n_differ),
        "n_bits_differ": int(n_bits),
        "n_signed_zero": int(n_szero),
        "n_over_tol": n_over,
        "tol_ulp": int(tol_ulp),
        "max_ulp": int(max_ulp),
        "ulp_histogram": histogram_dict(counts[6:]),
    }
    if ev["max_ulp"] == NAN_DISTANCE:
        ev["max_ulp_is_nan_mismatch"] = True
    if ev["n_signed_zero"]:
        ev["signed_zero_first"] = [[int(a), int(b)] for a, b in
                                   szero.nonzero()[:max_listed].tolist()]
    if flat.numel() and (ev["max_ulp"] > 0 or ev["n_bits_differ"]):
        w = int(flat.argmax()) if ev["max_ulp"] > 0 else int(differ.reshape(-1).nonzero()[0])
        n_cols = dist.shape[1] if dist.dim() == 2 else 1
        i, j = divmod(w, n_cols)
        ob = int(bits_of(out.reshape(-1)[w:w + 1])[0])
        rb = int(bits_of(ref.reshape(-1)[w:w + 1])[0])
        worst = {"index": [i, j], "ulp": int(flat[w]),
                 "out": _num(out.reshape(-1)[w]), "ref": _num(ref.reshape(-1)[w]),
                 "out_bits": _hex(ob, out.dtype), "ref_bits": _hex(rb, ref.dtype)}
        if bool(szero.reshape(-1)[w]):
            worst["kind"] = "signed zero"
        if ops is not None:
            worst.update(element_context(ops, i, j, exact))
        ev["worst"] = worst
        idx = over.nonzero()[:max_listed].tolist() if n_over else []
        ulps = dist[[a for a, _ in idx], [b for _, b in idx]].tolist() if idx else []
        ev["first_over_tol"] = [[int(a), int(b), int(u)] for (a, b), u in zip(idx, ulps)]
    if ops is not None:
        ev["operand_digests"] = ops.digests()
    return n_over, ev
