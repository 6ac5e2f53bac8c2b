"""E1 engine_hash: the integer engine's greedy decode with the kernel's ``int_mm``
hashes as with the exact accumulator (``detllm.oracle.engine_hash_check``, as a CheckResult)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from conformance.checks.result import CheckResult
from detllm.oracle import engine_hash_check

if TYPE_CHECKING:
    from conformance.kernels.spec import KernelSpec


def check_engine_hash(kernel: KernelSpec, **kwargs: Any) -> CheckResult:
    return CheckResult(**engine_hash_check(kernel, **kwargs))
