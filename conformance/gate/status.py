"""The case statuses of ``int8conf gate`` (:data:`STATUSES`: pass, warn, fail, not-supported,
crash, timeout; meanings in README.md) and its exit codes."""

from __future__ import annotations

from conformance.runtime import exit_codes

PASS, WARN, FAIL = "pass", "warn", "fail"
NOT_SUPPORTED, CRASH, TIMEOUT = "not-supported", "crash", "timeout"
#: Every status a gate case can end in (report order).
STATUSES = (PASS, WARN, FAIL, NOT_SUPPORTED, CRASH, TIMEOUT)

#: ``int8conf gate`` exit codes: the names of ``conformance.runtime.exit_codes`` in the gate's words.
EXIT_PASS = exit_codes.OK  # the swap may go in (warnings allowed by the policy included)
EXIT_BLOCKED = exit_codes.FAILED  # the policy blocks the swap
EXIT_NOT_COMPARABLE = exit_codes.BAD_INPUT  # bad input: unknown kernel, bad policy, stale / incomparable baseline
EXIT_INTERNAL = exit_codes.INTERNAL  # int8conf itself failed (a bug: please report it)
EXIT_CODES = {
    EXIT_PASS: "pass",
    EXIT_BLOCKED: "blocked by policy",
    EXIT_NOT_COMPARABLE: "not comparable / bad input",
    EXIT_INTERNAL: "internal error",
}


def status_counts(statuses) -> dict[str, int]:
    """``{status: count}`` over :data:`STATUSES` (zeros included, fixed order).

    Raises:
        ValueError: a status outside :data:`STATUSES`.
    """
    out = {s: 0 for s in STATUSES}
    for s in statuses:
        if s not in out:
            raise ValueError(f"unknown gate status {s!r}; known: {STATUSES}")
        out[s] += 1
    return out
