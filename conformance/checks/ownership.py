"""Check C10 call_independence: the caller owns the tensor a kernel returns, and a call's result does not depend
on the calls before it.

The output must share no storage with an operand, keep its bits when the kernel is called again (a cached output
buffer rewrites results the caller holds), and the case's bits must come back when it is replayed after a call on
other values whose tensors the caller then rewrote in place with the case's (a cache keyed by ``data_ptr`` or
``id``), and after calls with another out dtype, the other bias presence and another scale form (a per-shape
configuration or workspace kept from the previous call). A call with the same scale values in another form must give
the case's bits too (int8 operands). Evidence from the runner's probe (``conformance.kernels.runner``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from conformance.checks.result import CheckResult, not_applicable

if TYPE_CHECKING:
    from torch import Tensor

    from conformance.kernels.runner import KernelRun
    from conformance.kernels.spec import KernelSpec
    from reference.operands import GemmOperands

CHECK_ID, NAME = "C10", "call_independence"


def _step_problem(step: dict) -> str:
    """One line for a failed step of the runner's ``sequence`` evidence ('' when it passed)."""
    what = "a replay of the case" if step["compared"] == "replay" else step["compared"].removeprefix("variant: ")
    if step.get("error"):
        return f"{what} after {step['after']} failed: {step['error']}"
    if not step.get("differing"):
        return ""
    f = step["first"]
    i, j = f["index"]
    return (
        f"{what} after {step['after']} differs from the case's first result at {step['differing']} elements; "
        f"first at [{i},{j}]: {f['later_bits']} ({f['later_value']!r}) where the first call gave "
        f"{f['first_bits']} ({f['first_value']!r})"
    )


def check_call_independence(
    spec: KernelSpec, ops: GemmOperands, run: KernelRun, acc: object = None, exact: Optional[Tensor] = None
) -> CheckResult:
    """C10 from ``run.manifest["extra"]["ownership"]``; ``n/a`` when no probe ran. The evidence's ``sequence`` steps
    (when probed) are compared bit for bit with the case's first result; a variant call whose output broke the
    interface (a step's ``interface``) is IF's to judge, named in the summary, not a C10 failure."""
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
    problems += [p for p in map(_step_problem, ev.get("sequence") or ()) if p]
    evidence = dict(ev)
    if problems:
        evidence["failure_kind"] = "kernel"
        return CheckResult(CHECK_ID, NAME, "fail", "; ".join(problems), evidence)
    seq = ev.get("sequence") or ()
    compared = sum("differing" in step for step in seq)
    calls = f", and {compared} calls in sequence gave the case's bits" if compared else ""
    skipped = [step["interface"] for step in seq if step.get("interface")]
    if skipped:  # judged by IF on the cases of that variant, not here
        calls += f" ({len(skipped)} variant call(s) broke the interface, not judged here: {skipped[0]})"
    return CheckResult(
        CHECK_ID,
        NAME,
        "pass",
        f"the output is the caller's: no shared storage, unchanged by a later call{calls}",
        evidence,
    )
