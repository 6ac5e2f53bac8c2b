"""E1 engine_hash: the integer engine's greedy decode with the kernel's
``int_mm`` hashes identically to the decode with the exact accumulator
(``detllm.oracle.engine_hash_check`` measures; this module gives the verdict
the suite's form). Arguments as ``engine_hash_check``; returns a CheckResult."""

from __future__ import annotations

from conformance.checks.result import CheckResult
from detllm.oracle import engine_hash_check


def check_engine_hash(kernel, **kwargs) -> CheckResult:
    return CheckResult(**engine_hash_check(kernel, **kwargs))
