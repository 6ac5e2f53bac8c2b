"""The per-case check interface: what every check that judges one operand case takes and returns.

A :class:`CaseCheck` reads the kernel's declaration (``spec``), the case's operands (``ops``), the kernel's run on
them (``run``: output, manifest, error), the accumulator observed through the kernel's ``int_mm`` entry (``acc``,
None when the caller has none) and the exact accumulator (``exact``: int64 [M, N] for int8 operands, the exact sum
rounded once to float32 for e4m3; None: the check computes it) and returns a :class:`CheckResult`. It raises only
for a harness error (the suite reports it as the check's failure); a kernel's misbehaviour is a ``fail`` verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

from torch import Tensor

from conformance.checks.result import CheckResult
from conformance.kernels.runner import KernelRun
from conformance.kernels.spec import KernelSpec
from reference.operands import GemmOperands


@dataclass
class ObservedAccumulator:
    """The accumulator a check looks at: ``acc`` int32/int64 [M, N] (CPU, or the
    kernel's device with ``keep_on_device``) or None; ``source`` ``"kernel int_mm"``
    or ``"reference exact_int_mm"``; ``error`` one line; ``manifest`` of the run."""

    acc: Optional[Tensor]
    source: str
    error: Optional[str] = None
    manifest: Optional[dict] = None


class CaseCheck(Protocol):
    """``check(spec, ops, run, acc=None, exact=None) -> CheckResult`` (module docstring)."""

    def __call__(
        self,
        spec: KernelSpec,
        ops: GemmOperands,
        run: KernelRun,
        acc: Optional[ObservedAccumulator] = None,
        exact: Optional[Tensor] = None,
    ) -> CheckResult: ...
