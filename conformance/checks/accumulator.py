"""Precondition checks C3 int32_headroom and C4 fp32_exact_accumulator (DESIGN.md section 6).

C3: every partial sum fits int32 and the kernel's accumulator matches what its
declared overflow behaviour gives; C4: ``|acc| < 2**24`` (``float32(acc)`` exact).
``evidence["failure_kind"]``: ``precondition`` (the operands: F6 / F7) or
``kernel``. Both ``n/a`` when the kernel could not run.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import torch
from torch import Tensor

from conformance.checks.case_check import ObservedAccumulator
from conformance.checks.compare import skipped_reason
from conformance.checks.output_bits import overflow_of
from conformance.checks.overflow import declared_accumulator, may_leave_int32
from conformance.checks.result import CheckResult, Verdict, not_applicable
from conformance.kernels.runner import KernelRun
from conformance.kernels.spec import KernelSpec
from reference import memo, readback
from reference.accumulate import (
    FP32_EXACT_INT,
    INT32_MAX,
    accumulator_row_col_bound,
    ask_accumulator_bound,
    exact_int_mm,
)
from reference.operands import GemmOperands

C3, C4 = "C3", "C4"


def observe_accumulator(
    spec, ops, device: Optional[str] = None, keep_on_device: bool = False, launch=None
) -> ObservedAccumulator:
    """Run the kernel's ``int_mm`` entry on ``ops.a, ops.b`` (or read ``launch``,
    an ``AccLaunch`` of that call). ``acc=None`` when the kernel has no entry or
    cannot run here (``source`` says so). Never raises for the kernel's own failure."""
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
    return exact if exact is not None else exact_int_mm(ops.a, ops.b)


def _tensor_max(t: Tensor):
    """Deferred ``int(t.max())`` (0 for an empty tensor)."""
    return memo.cached(
        "max", (t,), lambda: readback.ask([t.max()] if t.numel() else [], lambda v: int(v[0]) if v else 0)
    )


def _copy_worst(w: dict) -> dict:
    return dict(w, index=list(w["index"]))  # the memoized dict is never handed out


def _acc_stats(t: Tensor):
    """Deferred ``{"max_abs", "n_at_or_over" (|t| >= 2**24), "worst": {"index": [i, j],
    "value"}}`` of an integer [M, N] accumulator, M * N > 0 (worst: first of largest |t|)."""

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
    """``(o64, diff)``: ``o`` as int64 on exact's device, bool [M, N] where it differs
    from the declared accumulator (``wrap``: the exact sum is accepted where at risk)."""
    o64 = o.to(device=exact.device, dtype=torch.int64)
    diff = (o64 != dacc.acc) & dacc.defined
    if dacc.alternative is not None:
        diff &= ~(dacc.at_risk & (o64 == dacc.alternative))
    return o64, diff


def _ask_mismatch(o: Tensor, exact: Tensor, dacc):
    return memo.cached(
        ("acc_mismatch", dacc.behaviour),
        (o, exact, dacc.acc, dacc.defined),
        lambda: readback.ask([_acc_mismatch(o, exact, dacc)[1].sum()], lambda v: int(v[0])),
    )


def _over_int32(tight: Tensor, exact: Tensor):
    """Deferred ``(elements whose tight bound exceeds INT32_MAX, elements whose |exact| does)``."""
    return memo.cached(
        "over_int32",
        (tight, exact),
        lambda: readback.ask(
            [(tight > INT32_MAX).sum(), (exact.abs() > INT32_MAX).sum()], lambda v: (int(v[0]), int(v[1]))
        ),
    )


def _declared_for(spec, ops, exact: Tensor, manifest: Optional[dict]):
    return declared_accumulator(ops, exact, overflow_of(spec, (manifest or {}).get("device") or None))


def headroom_questions(spec, ops, obs: ObservedAccumulator, exact: Tensor) -> dict:
    """Everything C3 reads, asked and not read: ``cheap`` bound, ``tight_max``,
    ``exact`` stats (None when empty); for a usable observed accumulator of the
    right shape ``dacc``, ``mismatch`` and ``observed`` stats; ``over`` (the counts
    over int32) when ``K`` may leave int32."""
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
    if may_leave_int32(ops.k):  # else the bound cannot exceed int32
        q["over"] = _over_int32(tight, exact)
    return q


def check_int32_headroom(
    spec: KernelSpec,
    ops: GemmOperands,
    run: Optional[KernelRun] = None,
    acc: Optional[ObservedAccumulator] = None,
    exact: Optional[Tensor] = None,
) -> CheckResult:
    """C3: the tight bound ``|a| @ |b|.T`` on every partial sum vs 2**31, and the
    observed accumulator (``acc``: tensor, :class:`ObservedAccumulator` or None)
    vs the declared one. Fail (precondition) when the bound exceeds INT32_MAX,
    (kernel) when the observed accumulator errs or differs."""
    name = "int32_headroom"
    if run is not None and (why := skipped_reason(run)):
        return not_applicable(C3, why)
    obs = _as_observed(acc)
    exact = _exact(ops, exact)
    tight = accumulator_row_col_bound(ops.a, ops.b)
    asked = headroom_questions(spec, ops, obs, exact)  # all asked before the first read: one read-back
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
            if n_mismatch:
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
                    f"{n_mismatch} elements (first [{i},{j}]: "
                    f"{int(o64[i, j])} vs {int(want[i, j])})"
                )
    if tight_max > INT32_MAX:
        # differing from the declared overflow behaviour is the kernel's fault even here
        ev["failure_kind"] = "kernel" if mismatch_line else "precondition"
        n_over, ex_over = (asked.get("over") or _over_int32(tight, exact)).get()
        s = f"bound |acc| <= {tight_max} exceeds 2^31-1 at {n_over} elements (exact |acc| > 2^31-1 at {ex_over})"
        if mismatch_line:
            s = mismatch_line + "; " + s
        ev["n_bound_over"], ev["n_exact_over"] = n_over, ex_over
        return CheckResult(C3, name, Verdict.FAIL, s, ev)
    if mismatch_line:
        ev["failure_kind"] = "kernel"
        return CheckResult(C3, name, Verdict.FAIL, mismatch_line, ev)
    return CheckResult(
        C3,
        name,
        Verdict.PASS,
        f"bound |acc| <= {tight_max} < 2^31 (K={ops.k}); observed accumulator from {obs.source} matches exact"
        if obs.acc is not None
        else f"bound |acc| <= {tight_max} < 2^31 (K={ops.k})",
        ev,
    )


def check_fp32_exact_accumulator(
    spec: KernelSpec,
    ops: GemmOperands,
    run: Optional[KernelRun] = None,
    acc: Optional[ObservedAccumulator] = None,
    exact: Optional[Tensor] = None,
) -> CheckResult:
    """C4: observed (else exact) |acc| < 2**24, so ``float32(acc)`` is exact; a
    failure is a precondition (F7). Evidence ``{fp32_exact_int, max_abs,
    n_at_or_over, worst, acc_source, bound_tight_max}``."""
    name = "fp32_exact_accumulator"
    if run is not None and (why := skipped_reason(run)):
        return not_applicable(C4, why)
    obs = _as_observed(acc)
    src = obs.source
    t = obs.acc if (obs.acc is not None and not obs.error) else None
    if t is None or tuple(t.shape) != (ops.m, ops.n):
        t = _exact(ops, exact)
        if obs.source == "kernel int_mm":
            src = "reference exact_int_mm (kernel int_mm unusable)"
    tight = _tensor_max(accumulator_row_col_bound(ops.a, ops.b))  # asked with the stats
    stats: dict[str, Any] = _acc_stats(t).get() if t.numel() else {"max_abs": 0, "n_at_or_over": 0, "worst": None}
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
            Verdict.FAIL,
            f"|acc| >= 2^24 at {n_over}/{t.numel()} elements (max {ev['max_abs']} "
            f"at {ev['worst']['index']}): float32(acc) is inexact",
            ev,
        )
    return CheckResult(C4, name, Verdict.PASS, f"max |acc| = {ev['max_abs']} < 2^24 ({src})", ev)
