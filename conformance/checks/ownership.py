"""Check C10 output_ownership: the caller owns the tensor a kernel returns.

The output must share no storage with an operand and keep its bits when the
kernel is called again (a cached output buffer rewrites results the caller
holds). Evidence from the runner's ownership probe (``conformance.kernels.runner``).
"""

from __future__ import annotations

from conformance.checks.result import CheckResult, not_applicable

CHECK_ID, NAME = "C10", "output_ownership"


def check_output_ownership(spec, ops, run, acc=None, exact=None) -> CheckResult:
    """C10 from ``run.manifest["extra"]["ownership"]``; ``n/a`` when no probe ran."""
    ev = ((getattr(run, "manifest", None) or {}).get("extra") or {}).get("ownership")
    if ev is None:
        return not_applicable(
            CHECK_ID,
            "not probed (no output, a case above the runner's "
            "OWNERSHIP_MAX_WORK, or another case of its size "
            "class was probed)",
        )
    problems = []
    if ev.get("aliases"):
        problems.append(f"the output shares storage with operand(s) {', '.join(ev['aliases'])}")
    if ev.get("held_result_changed"):
        problems.append(
            f"a held result changed in {ev['held_result_changed']} elements when "
            f"the kernel was called again with other operands of the same shape"
        )
    if ev.get("second_output_shares_storage"):
        problems.append("the second call returned the same storage as the first")
    if ev.get("second_call_error"):
        problems.append(f"a second call with other operands of the same shape failed: {ev['second_call_error']}")
    evidence = dict(ev)
    if problems:
        evidence["failure_kind"] = "kernel"
        return CheckResult(CHECK_ID, NAME, "fail", "; ".join(problems), evidence)
    return CheckResult(
        CHECK_ID, NAME, "pass", "the output is the caller's: no shared storage, unchanged by a later call", evidence
    )
