"""Check C2 operand_sharing (DESIGN.md section 6): digests of the operands received vs the reference's."""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from conformance.checks.case_check import ObservedAccumulator
from conformance.checks.compare import skipped_reason
from conformance.checks.result import CheckResult, Verdict, not_applicable
from conformance.kernels.runner import KernelRun
from conformance.kernels.spec import KernelSpec
from reference.operands import GemmOperands

C2 = "C2"
KEYS = ("a", "b", "scale_a", "scale_b", "bias")


def check_operand_sharing(
    spec: KernelSpec,
    ops: GemmOperands,
    run: KernelRun,
    acc: Optional[ObservedAccumulator] = None,
    exact: Optional[Tensor] = None,
) -> CheckResult:
    """C2: ``run.received_digests`` (the kernel's, else the runner's at the call
    boundary) vs ``ops.digests()`` (dtype, shape, bytes), key by key. ``n/a``
    without digests or output. Evidence ``{expected, received, mismatched, recorded_by}``."""
    name = "operand_sharing"
    if why := skipped_reason(run):
        return not_applicable(C2, why)
    if getattr(run, "output", None) is None:
        # nothing came back: "pass" would certify a run that verified nothing
        return not_applicable(
            C2, "kernel produced no output on this case" + (f" ({run.error})" if getattr(run, "error", None) else "")
        )
    got = dict(run.received_digests or {})
    by = (run.manifest or {}).get("operands_recorded_by") or "kernel"
    want = ops.digests()
    if not got:
        return not_applicable(C2, "kernel did not record the operands it received", expected=want)
    bad = [k for k in KEYS if got.get(k) != want.get(k)]
    ev = {"expected": want, "received": got, "mismatched": bad, "recorded_by": by}
    if bad:
        return CheckResult(
            C2,
            name,
            Verdict.FAIL,
            "kernel received operands other than the reference's: "
            + ", ".join(f"{k} {str(got.get(k))[:12]}... != {want[k][:12]}..." for k in bad),
            ev,
        )
    note = (
        ""
        if by == "kernel"
        else " (digests taken by the runner at the call boundary: the kernel does not record what it received)"
    )
    return CheckResult(
        C2,
        name,
        Verdict.PASS,
        "kernel received the reference's operands (a, b, scale_a, scale_b, bias digests equal)" + note,
        ev,
    )
