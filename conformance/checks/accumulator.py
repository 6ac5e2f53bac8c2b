"""Precondition checks C3 int32_headroom and C4 fp32_exact_accumulator
(DESIGN.md section 6), on the accumulator ``acc = a @ b.T``.

Integer accumulation is exact and order-free only while every partial sum
fits int32 (C3), and ``float32(acc)`` in the epilogue is exact only while
``|acc| < 2**24`` (C4; float32 has a 24-bit significand, IEEE 754 section
3.3). The *observed* accumulator is the kernel's own accumulator-only entry
``int_mm`` (through ``conformance.kernels.runner.run_int_mm``) when the
kernel has one, else the reference's exact accumulator
(``reference.accumulate.exact_int_mm``); the evidence says which.

A failure caused by the operands (fault families F6 / F7) has
``evidence["failure_kind"] == "precondition"``; a failure of the kernel's
own accumulator (its ``int_mm`` raised, returned the wrong shape, or
disagrees with the exact accumulator while the bound holds) has
``failure_kind == "kernel"``.

Where some summation order leaves int32 the kernel's accumulator is compared
with what its *declared* overflow behaviour gives (``KernelSpec.overflow``,
:mod:`conformance.checks.overflow`: ``wrap`` -> the wrapped int32,
``saturate`` -> clamped where every order agrees, ``undefined`` -> not
compared), never with the unwrapped int64 sum: overflowing is a precondition,
not a fault, but behaving otherwise than declared is a fault.

Both checks are ``n/a`` when the kernel could not run on the case at all
(not runnable here: device missing, shape outside its declared constraints):
passing on the reference's accumulator alone would verify nothing about it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch
from torch import Tensor

from conformance.checks.compare import skipped_reason
from conformance.checks.result import CheckResult, not_applicable

C3, C4 = "C3", "C4"


@dataclass
class ObservedAccumulator:
    """The accumulator a check looks at.

    Attributes:
        acc: int32 (or int64) [M, N] on the CPU (or the kernel's device:
            ``observe_accumulator(keep_on_device=True)``), or None when unavailable.
        source: ``"kernel int_mm"`` or ``"reference exact_int_mm"``.
        error: the kernel's accumulator-entry failure, if any (one line).
        manifest: the accumulator run's manifest (path taken), if any.
    """

    acc: Optional[Tensor]
    source: str
    error: Optional[str] = None
    manifest: Optional[dict] = None


def observe_accumulator(spec, ops, device: Optional[str] = None,
                        keep_on_device: bool = False) -> ObservedAccumulator:
    """Run the kernel's accumulator-only entry on ``ops.a, ops.b``.

    With ``keep_on_device`` the accumulator stays where the kernel returned
    it (the sweep: compared there with the on-device exact one) instead of
    being copied to the CPU.

    Uses ``conformance.kernels.runner.run_int_mm(spec, a, b)`` when
    ``spec.int_mm`` is set; otherwise returns ``acc=None`` with source
    ``"reference exact_int_mm"`` (the checks then use the exact accumulator).
    ``device`` as in ``run_int_mm`` (None = CUDA when the kernel supports it
    and one is present, else CPU). Never raises for the kernel's own failure
    (the error is kept); a kernel that cannot run here falls back to the
    exact accumulator, saying so in ``source``.
    """
    if getattr(spec, "int_mm", None) is None:
        return ObservedAccumulator(None, "reference exact_int_mm (kernel has no int_mm entry)")
    from conformance.kernels.runner import run_int_mm
    r = run_int_mm(spec, ops.a, ops.b, device=device, keep_on_device=keep_on_device)
    man = getattr(r, "manifest", None) or {}
    if man.get("skipped"):
        return ObservedAccumulator(None, f"reference exact_int_mm (kernel int_mm not runnable "
                                         f"here: {getattr(r, 'error', '')})", None, man)
    acc = getattr(r, "acc", None)
    if acc is None:
        acc = getattr(r, "output", None)
    err = getattr(r, "error", None)
    if acc is not None and not err and not keep_on_device:
        acc = acc.cpu()
    return ObservedAccumulator(None if err else acc, "kernel int_mm", err,
                               getattr(r, "manifest", None))


def _as_observed(acc: Union[None, Tensor, ObservedAccumulator]) -> ObservedAccumulator:
    if isinstance(acc, ObservedAccumulator):
        return acc
    if acc is None:
        return ObservedAccumulator(None, "reference exact_int_mm")
    return ObservedAccumulator(acc, "given accumulator")


def _exact(ops, exact: Optional[Tensor]) -> Tensor:
    if exact is not None:
        return exact
    from reference.accumulate import exact_int_mm
    return exact_int_mm(ops.a, ops.b)


def _per_tensor(kind: str, t: Tensor, fn):
    """``fn(t)`` memoized on ``t`` inside a ``reference.memo`` scope: the
    exact accumulator and the bound of a sweep layer are the same tensors in
    every cell, so their maxima are read back from the device once."""
    from reference import memo
    return memo.cached(kind, (t,), lambda: fn(t))


def _max(t: Tensor) -> int:
    return int(t.max()) if t.numel() else 0


def _copy_worst(w: dict) -> dict:
    return dict(w, index=list(w["index"]))  # the memoized dict is never handed out


def _acc_stats(t: Tensor, extra: tuple = ()):
    """Headline numbers of an accumulator, read back together.

    Args:
        t: integer [M, N] accumulator (int32 / int64), M * N > 0, any device.
        extra: 0-d integer tensors on ``t``'s device to read back in the
            same transfer (C3's mismatch count), or ().

    Returns:
        ``{"max_abs": int, "n_at_or_over": int (|t| >= 2**24), "worst":
        {"index": [i, j], "value": int}}`` (worst = the first element of
        largest magnitude); with ``extra``, ``(that dict, [ints])``. One
        device read-back, memoized on ``t`` inside a ``reference.memo``
        scope: C3 and C4 ask about the same observed accumulator, and about
        the same exact one in every cell of a sweep layer (a call with
        ``extra`` reads anyway, and leaves the stats for the next caller).
    """
    from reference import memo
    from reference.accumulate import FP32_EXACT_INT

    def read() -> tuple:
        t64 = t.to(torch.int64).reshape(-1)
        a = t64.abs()
        w = a.argmax().reshape(1)  # the first maximal element; index_select: no sync
        vals = torch.cat([a.index_select(0, w), (a >= FP32_EXACT_INT).sum().reshape(1), w,
                          t64.index_select(0, w)] + [x.reshape(1) for x in extra]).tolist()
        mx, n_over, wi, val = vals[:4]
        i, j = divmod(int(wi), t.shape[1])
        return ({"max_abs": int(mx), "n_at_or_over": int(n_over),
                 "worst": {"index": [i, j], "value": int(val)}}, [int(v) for v in vals[4:]])
    if not extra:
        return memo.cached("acc_stats", (t,), lambda: read()[0])
    stats, vals = read()
    return memo.cached("acc_stats", (t,), lambda: stats), vals


def check_int32_headroom(spec, ops, run=None, acc=None, exact=None) -> CheckResult:
    """C3: bound on |acc| from the operands and K, and observed |acc|, vs 2**31.

    Bounds (``reference.accumulate``): the cheap ``K * max|a| * max|b|`` and
    the tight per-element ``|a| @ |b|.T`` (an upper bound on every partial sum
    in every summation order, so tight bound <= INT32_MAX proves no order can
    overflow). Verdict: fail (precondition) when the tight bound exceeds
    INT32_MAX, unless the observed accumulator also differs from the
    declared-overflow one (then fail, kernel); else fail (kernel) when the
    observed accumulator errs or differs from the exact int64 one; else pass.

    Args:
        spec: KernelSpec (its ``overflow`` declaration, see module docstring).
        run: the KernelRun (``n/a`` when it was not runnable here), or None.
        ops: GemmOperands (a int8 [M,K], b int8 [N,K]).
        acc: observed accumulator: Tensor int32/int64 [M,N], an
            :class:`ObservedAccumulator`, or None (use the exact one).
        exact: exact int64 accumulator if already computed.

    Returns:
        CheckResult; evidence ``{bound_cheap, bound_tight_max, exact_max_abs,
        observed_max_abs, acc_source, n_acc_mismatch, worst_exact,
        failure_kind, int32_max, operand_digests}``.
    """
    from reference.accumulate import INT32_MAX, accumulator_bound, accumulator_row_col_bound
    name = "int32_headroom"
    if run is not None and skipped_reason(run):
        return not_applicable(C3, skipped_reason(run))
    obs = _as_observed(acc)
    exact = _exact(ops, exact)
    a, b = ops.a, ops.b  # on their own device, like ``exact`` (reference.accumulate)
    from reference import memo
    cheap = memo.cached("bound_cheap", (a, b), lambda: int(accumulator_bound(a, b)))
    tight = accumulator_row_col_bound(a, b)
    tight_max = _per_tensor("max", tight, _max)
    ev: dict = {"int32_max": int(INT32_MAX), "k": ops.k, "bound_cheap": cheap,
                "bound_tight_max": tight_max,
                "exact_max_abs": _acc_stats(exact)["max_abs"] if exact.numel() else 0,
                "worst_exact": _copy_worst(_acc_stats(exact)["worst"]) if exact.numel() else None,
                "acc_source": obs.source, "operand_digests": ops.digests()}
    if obs.manifest:
        ev["acc_manifest"] = {k: obs.manifest.get(k) for k in ("path", "device", "padded")}
    mismatch_line = None
    if obs.error:
        ev["acc_error"] = obs.error
        mismatch_line = f"kernel accumulator entry failed: {obs.error}"
    elif obs.acc is not None:
        o = obs.acc
        if tuple(o.shape) != tuple(exact.shape):
            mismatch_line = f"kernel accumulator shape {tuple(o.shape)} != {tuple(exact.shape)}"
        else:
            from conformance.checks.output_bits import overflow_of, run_device
            from conformance.checks.overflow import declared_accumulator
            dacc = declared_accumulator(ops, exact, overflow_of(spec, run_device(obs)))
            ev.update(dacc.evidence())
            want = dacc.acc
            o64 = o.to(device=exact.device, dtype=torch.int64)
            diff = (o64 != want) & dacc.defined
            if dacc.alternative is not None:  # wrap: a wider accumulator's exact sum is fine
                diff &= ~(dacc.at_risk & (o64 == dacc.alternative))
            if o.numel():  # the mismatch count comes back with the observed maxima
                stats, (n_mismatch,) = _acc_stats(o, (diff.sum().to(o.device),))
            else:
                stats, n_mismatch = {"max_abs": 0}, 0
            ev["observed_max_abs"] = stats["max_abs"]
            ev["observed_dtype"] = str(o.dtype)
            ev["n_acc_mismatch"] = n_mismatch
            if ev["n_acc_mismatch"]:
                i, j = diff.nonzero()[0].tolist()
                ev["first_acc_mismatch"] = {"index": [i, j], "observed": int(o64[i, j]),
                                            "declared": int(want[i, j]),
                                            "exact": int(exact[i, j])}
                what = ("exact" if not dacc.n_at_risk else
                        f"declared (overflow {dacc.behaviour})")
                mismatch_line = (f"kernel accumulator differs from the {what} one at "
                                 f"{ev['n_acc_mismatch']} elements (first [{i},{j}]: "
                                 f"{int(o64[i, j])} vs {int(want[i, j])})")
    if tight_max > INT32_MAX:
        # a kernel accumulator that differs from its declared overflow
        # behaviour is the kernel's fault even on a precondition case
        ev["failure_kind"] = "kernel" if mismatch_line else "precondition"
        n_over = int((tight > INT32_MAX).sum())
        ex_over = int((exact.abs() > INT32_MAX).sum())
        s = (f"bound |acc| <= {tight_max} exceeds 2^31-1 at {n_over} elements "
             f"(exact |acc| > 2^31-1 at {ex_over})")
        if mismatch_line:
            s = mismatch_line + "; " + s
        ev["n_bound_over"], ev["n_exact_over"] = n_over, ex_over
        return CheckResult(C3, name, "fail", s, ev)
    if mismatch_line:
        ev["failure_kind"] = "kernel"
        return CheckResult(C3, name, "fail", mismatch_line, ev)
    return CheckResult(C3, name, "pass",
                       f"bound |acc| <= {tight_max} < 2^31 (K={ops.k}); observed accumulator "
                       f"from {obs.source} matches exact" if obs.acc is not None else
                       f"bound |acc| <= {tight_max} < 2^31 (K={ops.k})", ev)


def check_fp32_exact_accumulator(spec, ops, run=None, acc=None, exact=None) -> CheckResult:
    """C4: observed |acc| < 2**24, so ``float32(acc)`` is exact.

    Uses the observed accumulator when available (kernel ``int_mm``), else
    the exact one. A failure is a precondition violation (fault F7 family):
    the kernel is not wrong, but its int32 -> float32 conversion rounds.

    Args/Returns: as :func:`check_int32_headroom`; evidence ``{fp32_exact_int,
    max_abs, n_at_or_over, worst, acc_source, bound_tight_max}``.
    """
    from reference.accumulate import FP32_EXACT_INT, accumulator_row_col_bound
    name = "fp32_exact_accumulator"
    if run is not None and skipped_reason(run):
        return not_applicable(C4, skipped_reason(run))
    obs = _as_observed(acc)
    src = obs.source
    t = obs.acc if (obs.acc is not None and not obs.error) else None
    if t is None or tuple(t.shape) != (ops.m, ops.n):
        t = _exact(ops, exact)
        if obs.source == "kernel int_mm":
            src = "reference exact_int_mm (kernel int_mm unusable)"
    stats = _acc_stats(t) if t.numel() else {"max_abs": 0, "n_at_or_over": 0, "worst": None}
    n_over = stats["n_at_or_over"]
    tight = accumulator_row_col_bound(ops.a, ops.b)
    ev = {"fp32_exact_int": int(FP32_EXACT_INT), "acc_source": src,
          "max_abs": stats["max_abs"], "n_at_or_over": n_over,
          "n_elements": int(t.numel()),
          "worst": _copy_worst(stats["worst"]) if stats["worst"] else None,
          "bound_tight_max": _per_tensor("max", tight, _max),
          "operand_digests": ops.digests()}
    if n_over:
        ev["failure_kind"] = "precondition"
        return CheckResult(C4, name, "fail",
                           f"|acc| >= 2^24 at {n_over}/{t.numel()} elements (max {ev['max_abs']} "
                           f"at {ev['worst']['index']}): float32(acc) is inexact", ev)
    return CheckResult(C4, name, "pass", f"max |acc| = {ev['max_abs']} < 2^24 ({src})", ev)
