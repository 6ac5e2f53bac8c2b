"""Hypothesis property test: random operands against the reference under the kernel's declared
contract (C1-C6 and C8 on every example). Fixed CI profile (:func:`ci_settings`): derandomized, no
database, no deadline, no shrinking (the first failing example is reported), health checks off.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

import torch

from conformance.suite.evaluate import evaluate_case
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


def _property_test(spec, sink: Callable, max_examples: int, device: Optional[str], evaluate_case: Callable):
    """The ``@given`` test of :func:`run_property_test` (the arguments as there; ``evaluate_case`` as
    ``conformance.suite.evaluate``'s) and its run state ``{"n", "failing"}``. The draws depend on this test's
    source (``derandomize`` seeds from it): :func:`run_property_test` and :func:`property_operands` share it.
    Raises ImportError when hypothesis or ``reference.strategies`` is not importable."""
    from hypothesis import given  # heavy: loaded when the property test runs

    from reference.strategies import gemm_operands

    strategy = gemm_operands(max_m=MAX_M, max_k=MAX_K, max_n=MAX_N, out_dtypes=(torch.bfloat16, torch.float16))
    names: dict = {}
    state: dict[str, Any] = {"n": 0, "failing": None}

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

    return prop, state


def property_operands(max_examples: int = 25) -> list:
    """The ``GemmOperands`` the property test evaluates, in order, when every example passes (repeats
    included; names as the run gives them): the same test drawn with an evaluation that only collects. No
    kernel is called. ``[]`` when the property test would be skipped (not importable). Hypothesis also draws
    constants found in the loaded project modules: the run matches a draw made in its process."""
    drawn: list = []

    def collect(spec, ops, **kw):
        drawn.append(ops)
        return _PASSED

    with warnings.catch_warnings():
        # the plugin draws inside pytest's configure step, where hypothesis warns about every lazy strategy
        warnings.filterwarnings("ignore", message="Slow code in plugin")
        try:
            prop, _ = _property_test(None, lambda cr: None, max_examples, None, collect)
        except ImportError:
            return []
        prop()
    return drawn


class _Passed:
    """What :func:`property_operands`' evaluation returns: a case without kernel failures."""

    kernel_failures: tuple = ()


_PASSED = _Passed()


def run_property_test(
    spec, sink: Callable, max_examples: int = 25, device: Optional[str] = None, evaluate: Optional[Callable] = None
) -> dict:
    """Run the property test for one kernel; every example's ``CaseResult``
    (``property/<i>:<shape>``, ``source == "property"``) goes to ``sink`` once. Stops at the first
    failing example. ``evaluate``: how an example is evaluated (``evaluate_case``'s signature; None:
    ``evaluate_case`` here; the suite's contained runs pass a child process's). Returns ``{"examples", "failed", "falsifying_case", "failure", "strategy",
    "settings"}``, or ``{"skipped": reason, ...}`` when ``reference.strategies`` is not importable.
    """
    try:
        prop, state = _property_test(spec, sink, max_examples, device, evaluate or evaluate_case)
    except ImportError as e:
        return {"skipped": f"reference.strategies not importable: {e}", "examples": 0, "failed": False}
    summary: dict[str, Any] = {
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
