"""E1 engine_hash: the integer engine's greedy decode with the kernel's ``int_mm``
hashes as with the exact accumulator (``detllm.oracle.engine_hash_check``, as a CheckResult)."""

from __future__ import annotations

from conformance.checks.result import CheckResult
from detllm.oracle import engine_hash_check


def check_engine_hash(kernel, **kwargs) -> CheckResult:
    return CheckResult(**engine_hash_check(kernel, **kwargs))
