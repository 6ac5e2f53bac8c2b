"""Hypothesis property test: random operands against the reference under the kernel's declared
contract (C1-C6 and C8 on every example). Fixed CI profile (:func:`ci_settings`): derandomized, no
database, no deadline, no shrinking (the first failing example is reported), health checks off.
"""

from __future__ import annotations

from typing import Callable, Optional

from reference.errors import first_line

#: Operand bounds of the property test (shapes straddle 8/16/32/64 edges).
MAX_M, MAX_K, MAX_N = 48, 160, 48


def ci_settings(max_examples: int = 25):
    """The fixed CI profile (see module docstring): a ``hypothesis.settings``."""
    from hypothesis import HealthCheck, Phase, settings  # heavy: loaded when the property test runs

    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=(Phase.explicit, Phase.generate),
        print_blob=False,
        suppress_health_check=list(HealthCheck),
    )


def run_property_test(spec, sink: Callable, max_examples: int = 25, device: Optional[str] = None) -> dict:
    """Run the property test for one kernel; every example's ``CaseResult``
    (``property/<i>:<shape>``, ``source == "property"``) goes to ``sink`` once. Stops at the first
    failing example. Returns ``{"examples", "failed", "falsifying_case", "failure", "strategy",
    "settings"}``, or ``{"skipped": reason, ...}`` when ``reference.strategies`` is not importable.
    """
    try:
        from hypothesis import given  # heavy: loaded when the property test runs

        from reference.strategies import gemm_operands
    except ImportError as e:
        return {"skipped": f"reference.strategies not importable: {e}", "examples": 0, "failed": False}
    import torch

    from conformance.suite.evaluate import evaluate_case

    strategy = gemm_operands(max_m=MAX_M, max_k=MAX_K, max_n=MAX_N, out_dtypes=(torch.bfloat16, torch.float16))
    names: dict = {}
    state = {"n": 0, "failing": None}

    @ci_settings(max_examples)
    @given(ops=strategy)
    def prop(ops):
        key = tuple(sorted(ops.digests().items())) + (str(ops.out_dtype),)
        first = key not in names
        if first:
            state["n"] += 1
            names[key] = f"property/{state['n']}:M{ops.m}xK{ops.k}xN{ops.n}"
        ops.name = names[key]
        cr = evaluate_case(spec, ops, device=device, source="property")
        if first:
            sink(cr)
        if cr.kernel_failures:
            state["failing"] = cr
            raise AssertionError(f"{cr.case}: " + "; ".join(cr.failure_lines()))

    summary = {
        "strategy": f"reference.strategies.gemm_operands(max_m={MAX_M}, max_k={MAX_K}, "
        f"max_n={MAX_N}, out_dtypes=(bf16, fp16))",
        "settings": f"max_examples={max_examples}, derandomize=True, no shrinking",
    }
    try:
        prop()
        summary.update(examples=state["n"], failed=False)
    except Exception as e:  # noqa: BLE001 -- AssertionError = a failing example; others too
        line = first_line(e, None)
        if not isinstance(e, AssertionError):
            line = f"{type(e).__name__}: {line}"
        summary.update(
            examples=state["n"],
            failed=True,
            failure=line,
            falsifying_case=state["failing"].case if state["failing"] else None,
        )
    return summary
