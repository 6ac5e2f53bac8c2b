"""The fixed set of case statuses of ``int8conf gate`` and its exit codes.

Every case (and every model-level check) of a gate run ends in exactly one
of :data:`STATUSES`, never a bare boolean:

* ``pass`` -- the candidate's output bits equal the incumbent's and no check
  got worse;
* ``warn`` -- within the policy but not bit-identical (e.g. one spacing under
  an ``allow: within_one_spacing_real_scales`` policy), or a deviation an
  expectation of the policy accepts;
* ``fail`` -- the policy blocks it (the reasons say which rule);
* ``not-supported`` -- the candidate declines this shape / layout / device
  (the runner's "not runnable here");
* ``crash`` -- the candidate's process died on this case (segfault, abort,
  a fatal CUDA error, ``os._exit``): the child process is gone, the gate is not;
* ``timeout`` -- the candidate did not return within the gate's timeout and
  its child process was killed.
"""

from __future__ import annotations

PASS, WARN, FAIL = "pass", "warn", "fail"
NOT_SUPPORTED, CRASH, TIMEOUT = "not-supported", "crash", "timeout"
#: Every status a gate case can end in (report order).
STATUSES = (PASS, WARN, FAIL, NOT_SUPPORTED, CRASH, TIMEOUT)

#: ``int8conf gate`` exit codes.
EXIT_PASS = 0  # the swap may go in (warnings allowed by the policy included)
EXIT_BLOCKED = 1  # the policy blocks the swap
EXIT_NOT_COMPARABLE = 2  # bad input: unknown kernel, bad policy, stale / incomparable baseline
EXIT_INTERNAL = 3  # int8conf itself failed (a bug: please report it)
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
