"""What a kernel's child process answers for the suite, the gate and the scoreboard: the request handlers handed to
``runtime.pool.IsolatedKernel`` (:data:`SUITE_REQUESTS`). Each takes ``(spec, arg, served)`` (``served``: the
pool's cases, device and pairwise kernel) and returns a picklable value."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from conformance.checks.fp8_accumulator import check_fp8_accumulator
from conformance.checks.result import CheckResult
from conformance.kernels.runner import pick_device
from conformance.runtime.pool import Served
from conformance.suite.evaluate import CaseResult, evaluate_case
from conformance.suite.plan import evaluate_fixed, run_kernel_check, run_model_check

if TYPE_CHECKING:
    from conformance.kernels.spec import KernelSpec
    from reference.operands import GemmOperands


def case(spec: KernelSpec, index: int, served: Served) -> CaseResult:
    """Case ``index`` evaluated with its outputs kept (the gate, the scoreboard)."""
    return evaluate_case(spec, served.cases[index], device=served.device, keep_output=True)


def evaluate(spec: KernelSpec, index: int, served: Served) -> CaseResult:
    """The suite's own evaluation of fixed case ``index`` (pairwise with ``served.against``; outputs not kept)."""
    return evaluate_fixed(spec, served.cases[index], served.device, served.against)


def operands(spec: KernelSpec, ops: GemmOperands, served: Served) -> CaseResult:
    """A property example: its operands come with the request."""
    return evaluate_case(spec, ops, device=served.device, source="property")


def check(spec: KernelSpec, check_id: str, served: Served) -> CheckResult:
    """A kernel-level check over the pool's cases (``plan.run_kernel_check``: C9, ...)."""
    return run_kernel_check(check_id, spec, served.cases, served.device)


def accumulator(spec: KernelSpec, _arg: object, served: Served) -> CheckResult:
    """C11: an FP8 kernel's measured accumulator."""
    return check_fp8_accumulator(spec, device=served.device)


def model(spec: KernelSpec, check_id: str, served: Served) -> CheckResult:
    """A model-level check (C7, E1) on the device the kernel runs on."""
    return run_model_check(check_id, spec, device=pick_device(spec, served.device)[0])


#: request kind -> handler (``runtime.pool`` module docstring)
SUITE_REQUESTS: dict[str, Callable[..., object]] = {
    f.__name__: f for f in (case, evaluate, operands, check, accumulator, model)
}
