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
from reference import memo, readback

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


def observe_accumulator(
    spec, ops, device: Optional[str] = None, keep_on_device: bool = False, launch=None
) -> ObservedAccumulator:
    """Run the kernel's accumulator-only entry on ``ops.a, ops.b``.

    With ``keep_on_device`` the accumulator stays where the kernel returned
    it (the sweep: compared there with the on-device exact one) instead of
    being copied to the CPU.

    Uses ``conformance.kernels.runner.run_int_mm(spec, a, b)`` when
    ``spec.int_mm`` is set; otherwise returns ``acc=None`` with source
    ``"reference exact_int_mm"`` (the checks then use the exact accumulator).
    ``device`` as in ``run_int_mm`` (None = CUDA when the kernel supports it
    and one is present, else CPU). ``launch``: the
    ``conformance.kernels.runner.AccLaunch`` of that very call when the
    caller started it already (``start_int_mm``: its verdicts are read here,
    with whatever else is pending). Never raises for the kernel's own failure
    (the error is kept); a kernel that cannot run here falls back to the
    exact accumulator, saying so in ``source``.
    """
    if getattr(spec, "int_mm", None) is None:
        return ObservedAccumulator(None, "reference exact_int_mm (kernel has no int_mm entry)")
    if launch is None:
        from conformance.kernels.runner import start_int_mm

        launch = start_int_mm(spec, ops.a, ops.b, device=device, keep_on_device=keep_on_device)
    r = launch.result()
    man = getattr(r, "manifest", None) or {}
    if man.get("skipped"):
        return ObservedAccumulator(
            None, f"reference exact_int_mm (kernel int_mm not runnable here: {getattr(r, 'error', '')})", None, man
        )
    acc = getattr(r, "acc", None)
    if acc is None:
        acc = getattr(r, "output", None)
    err = getattr(r, "error", None)
    if acc is not None and not err and not keep_on_device:
        acc = acc.cpu()
    return ObservedAccumulator(None if err else acc, "kernel int_mm", err, getattr(r, "manifest", None))


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


def _tensor_max(t: Tensor):
    """``reference.readback.Deferred`` of ``int(t.max())`` (0 for an empty
    tensor), memoized on ``t`` inside a ``reference.memo`` scope: the bound
    of a sweep layer is the same tensor in every cell, so its maximum is
    read back from the device once."""
    return memo.cached(
        "max", (t,), lambda: readback.ask([t.max()] if t.numel() else [], lambda v: int(v[0]) if v else 0)
    )


def _copy_worst(w: dict) -> dict:
    return dict(w, index=list(w["index"]))  # the memoized dict is never handed out


def _acc_stats(t: Tensor):
    """Headline numbers of an accumulator, asked together.

    Args:
        t: integer [M, N] accumulator (int32 / int64), M * N > 0, any device.

    Returns:
        ``reference.readback.Deferred`` of ``{"max_abs": int, "n_at_or_over":
        int (|t| >= 2**24), "worst": {"index": [i, j], "value": int}}``
        (worst = the first element of largest magnitude; callers copy it,
        :func:`_copy_worst`). One read-back, shared with whatever else is
        pending, memoized on ``t`` inside a ``reference.memo`` scope: C3 and
        C4 ask about the same observed accumulator, and about the same exact
        one in every cell of a sweep layer.
    """
    from reference.accumulate import FP32_EXACT_INT

    def ask():
        t64 = t.to(torch.int64).reshape(-1)
        a = t64.abs()
        w = a.argmax().reshape(1)  # the first maximal element; index_select: no sync
        parts = [a.index_select(0, w), (a >= FP32_EXACT_INT).sum(), w, t64.index_select(0, w)]

        def convert(v: list) -> dict:
            i, j = divmod(int(v[2]), t.shape[1])
            return {"max_abs": int(v[0]), "n_at_or_over": int(v[1]), "worst": {"index": [i, j], "value": int(v[3])}}

        return readback.ask(parts, convert)

    return memo.cached("acc_stats", (t,), ask)


def _acc_mismatch(o: Tensor, exact: Tensor, dacc) -> tuple:
    """Where the observed accumulator ``o`` differs from the declared one.

    Args:
        o: observed integer [M, N] accumulator (any device); exact: exact
            int64 [M, N]; dacc: its ``conformance.checks.overflow.DeclaredAccumulator``.

    Returns:
        ``(o64, diff)``: ``o`` as int64 on exact's device and bool [M, N]
        (differs where the declaration defines the value; under ``wrap`` an
        at-risk element equal to the exact sum is fine: a wider accumulator
        never wraps).
    """
    o64 = o.to(device=exact.device, dtype=torch.int64)
    diff = (o64 != dacc.acc) & dacc.defined
    if dacc.alternative is not None:
        diff &= ~(dacc.at_risk & (o64 == dacc.alternative))
    return o64, diff


def _ask_mismatch(o: Tensor, exact: Tensor, dacc):
    """``reference.readback.Deferred`` of the number of :func:`_acc_mismatch`
    elements, memoized on the tensors inside a ``reference.memo`` scope (the
    sweep asks it before C3 reads it; only the count is kept, not the
    [M, N] masks: C3 rebuilds them in the rare case it is not 0)."""
    return memo.cached(
        ("acc_mismatch", dacc.behaviour),
        (o, exact, dacc.acc, dacc.defined),
        lambda: readback.ask([_acc_mismatch(o, exact, dacc)[1].sum()], lambda v: int(v[0])),
    )


def _declared_for(spec, ops, exact: Tensor, manifest: Optional[dict]):
    """The declared accumulator C3 compares the observed one with (the
    kernel's overflow behaviour on the device the accumulator came from)."""
    from conformance.checks.output_bits import overflow_of
    from conformance.checks.overflow import declared_accumulator

    device = (manifest or {}).get("device") or None
    return declared_accumulator(ops, exact, overflow_of(spec, device))


def prefetch_accumulator_questions(spec, ops, acc: Optional[Tensor], manifest: Optional[dict], exact: Tensor) -> None:
    """Ask (``reference.readback``) what C3 and C4 will read on this case,
    so that they find it in the ``reference.memo`` scope and it is read with
    the case's other questions (:func:`_headroom_questions`: bounds, the
    exact and the observed accumulator's maxima, the mismatch count).
    ``acc`` / ``manifest``: the kernel's ``int_mm`` result and its
    manifest, known before its verdicts are read (an accumulator the checks
    then judge unusable was asked about for nothing). No-op outside a
    scope; results are unchanged."""
    from reference import memo

    if not memo.active():
        return
    _headroom_questions(spec, ops, ObservedAccumulator(acc, "", None, manifest), exact)


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
    from reference.accumulate import INT32_MAX, accumulator_row_col_bound

    name = "int32_headroom"
    if run is not None and skipped_reason(run):
        return not_applicable(C3, skipped_reason(run))
    obs = _as_observed(acc)
    exact = _exact(ops, exact)
    a, b = ops.a, ops.b  # on their own device, like ``exact`` (reference.accumulate)
    tight = accumulator_row_col_bound(a, b)
    # every question is asked before the first answer is read: one read-back
    # for all of them (none in the sweep, which asked them with the case's others)
    asked = _headroom_questions(spec, ops, obs, exact)
    tight_max = asked["tight_max"].get()
    ex = asked["exact"].get() if asked["exact"] is not None else None
    ev: dict = {
        "int32_max": int(INT32_MAX),
        "k": ops.k,
        "bound_cheap": asked["cheap"].get(),
        "bound_tight_max": tight_max,
        "exact_max_abs": ex["max_abs"] if ex else 0,
        "worst_exact": _copy_worst(ex["worst"]) if ex else None,
        "acc_source": obs.source,
        "operand_digests": ops.digests(),
    }
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
            dacc = asked["dacc"]
            ev.update(dacc.evidence())
            want = dacc.acc
            if o.numel():
                stats, n_mismatch = asked["observed"].get(), asked["mismatch"].get()
            else:
                stats, n_mismatch = {"max_abs": 0}, 0
            ev["observed_max_abs"] = stats["max_abs"]
            ev["observed_dtype"] = str(o.dtype)
            ev["n_acc_mismatch"] = n_mismatch
            if ev["n_acc_mismatch"]:
                o64, diff = _acc_mismatch(o, exact, dacc)
                i, j = diff.nonzero()[0].tolist()
                ev["first_acc_mismatch"] = {
                    "index": [i, j],
                    "observed": int(o64[i, j]),
                    "declared": int(want[i, j]),
                    "exact": int(exact[i, j]),
                }
                what = "exact" if not dacc.n_at_risk else f"declared (overflow {dacc.behaviour})"
                mismatch_line = (
                    f"kernel accumulator differs from the {what} one at "
                    f"{ev['n_acc_mismatch']} elements (first [{i},{j}]: "
                    f"{int(o64[i, j])} vs {int(want[i, j])})"
                )
    if tight_max > INT32_MAX:
        # a kernel accumulator that differs from its declared overflow
        # behaviour is the kernel's fault even on a precondition case
        ev["failure_kind"] = "kernel" if mismatch_line else "precondition"
        n_over, ex_over = _over_int32(tight, exact).get()
        s = f"bound |acc| <= {tight_max} exceeds 2^31-1 at {n_over} elements (exact |acc| > 2^31-1 at {ex_over})"
        if mismatch_line:
            s = mismatch_line + "; " + s
        ev["n_bound_over"], ev["n_exact_over"] = n_over, ex_over
        return CheckResult(C3, name, "fail", s, ev)
    if mismatch_line:
        ev["failure_kind"] = "kernel"
        return CheckResult(C3, name, "fail", mismatch_line, ev)
    return CheckResult(
        C3,
        name,
        "pass",
        f"bound |acc| <= {tight_max} < 2^31 (K={ops.k}); observed accumulator from {obs.source} matches exact"
        if obs.acc is not None
        else f"bound |acc| <= {tight_max} < 2^31 (K={ops.k})",
        ev,
    )


def _over_int32(tight: Tensor, exact: Tensor):
    """``reference.readback.Deferred`` of ``(elements whose tight bound
    exceeds INT32_MAX, elements whose exact |acc| does)``, memoized on the
    two tensors inside a ``reference.memo`` scope."""
    from reference.accumulate import INT32_MAX

    return memo.cached(
        "over_int32",
        (tight, exact),
        lambda: readback.ask(
            [(tight > INT32_MAX).sum(), (exact.abs() > INT32_MAX).sum()], lambda v: (int(v[0]), int(v[1]))
        ),
    )


def _headroom_questions(spec, ops, obs: ObservedAccumulator, exact: Tensor) -> dict:
    """Everything C3 reads, asked (``reference.readback``) and not read:
    ``cheap`` bound, ``tight_max``, ``exact`` stats (None for an empty
    case), and for a usable observed accumulator of the right shape its
    declared accumulator ``dacc``, ``mismatch`` (:func:`_ask_mismatch`) and
    ``observed`` stats (None when empty); for a tight bound over int32 the
    counts over it (:func:`_over_int32`), asked now so that they come back
    with the rest. Memoized pieces make a second call free."""
    from reference import memo
    from reference.accumulate import accumulator_row_col_bound, ask_accumulator_bound

    a, b = ops.a, ops.b
    tight = accumulator_row_col_bound(a, b)
    q = {
        "cheap": memo.cached("bound_cheap", (a, b), lambda: ask_accumulator_bound(a, b)),
        "tight_max": _tensor_max(tight),
        "exact": _acc_stats(exact) if exact.numel() else None,
    }
    o = obs.acc
    if not obs.error and o is not None and tuple(o.shape) == tuple(exact.shape):
        q["dacc"] = _declared_for(spec, ops, exact, obs.manifest)
        q["mismatch"] = _ask_mismatch(o, exact, q["dacc"])
        q["observed"] = _acc_stats(o) if o.numel() else None
    from conformance.checks.overflow import may_leave_int32

    if memo.active() and may_leave_int32(ops.k):  # else the bound cannot exceed int32
        _over_int32(tight, exact)  # kept in the memo until C3 reads it
    return q


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
    tight = _tensor_max(accumulator_row_col_bound(ops.a, ops.b))  # asked with the stats
    stats = _acc_stats(t).get() if t.numel() else {"max_abs": 0, "n_at_or_over": 0, "worst": None}
    n_over = stats["n_at_or_over"]
    ev = {
        "fp32_exact_int": int(FP32_EXACT_INT),
        "acc_source": src,
        "max_abs": stats["max_abs"],
        "n_at_or_over": n_over,
        "n_elements": int(t.numel()),
        "worst": _copy_worst(stats["worst"]) if stats["worst"] else None,
        "bound_tight_max": tight.get(),
        "operand_digests": ops.digests(),
    }
    if n_over:
        ev["failure_kind"] = "precondition"
        return CheckResult(
            C4,
            name,
            "fail",
            f"|acc| >= 2^24 at {n_over}/{t.numel()} elements (max {ev['max_abs']} "
            f"at {ev['worst']['index']}): float32(acc) is inexact",
            ev,
        )
    return CheckResult(C4, name, "pass", f"max |acc| = {ev['max_abs']} < 2^24 ({src})", ev)
