"""The exit codes of every ``int8conf`` command (``check``, ``gate``, ``sweep``, ``bench``, ...) and of
``pytest --kernel`` where pytest's own codes allow; one table, :data:`EXIT_CODES`, also in README.md.

A command that does not reach a verdict of its own (``sweep``, ``bench``, ``faults``) exits :data:`OK` when
done. :data:`NOT_RUN` is ``check``'s (the kernel could not be called here on any case: nothing verified; a kernel
called that crashed, raised or returned no valid output on every case is not conformant, :data:`FAILED`) and
``replay``'s (no verdict on its one case: the kernel crashed, hung, raised or could not be called);
:data:`INTERNAL` is int8conf's own bug (an exception no check expected), for every command.
"""

from __future__ import annotations

#: conformant (check), the swap may go in (gate), done (every other command)
OK = 0
#: not conformant, a kernel crash or timeout included (check), blocked by the policy (gate)
FAILED = 1
#: bad input: a usage error, an unknown kernel, an unusable path; not comparable (gate)
BAD_INPUT = 2
#: not run / inconclusive: the kernel could not be called here on any case (check)
NOT_RUN = 3
#: internal error: int8conf itself failed (please report it)
INTERNAL = 4
#: stopped by Ctrl-C or SIGTERM; the report of what finished is written, headed PARTIAL RUN
INTERRUPTED = 130

#: code -> meaning, the README's table
EXIT_CODES = {
    OK: "conformant (check); pass (gate); the check passes (replay); done (other commands)",
    FAILED: "not conformant, a crash or a timeout included (check); blocked by the policy (gate); the check fails "
    "again (replay)",
    BAD_INPUT: "bad input, one line naming it (usage, unknown kernel, unusable path; gate: not comparable); "
    "under `pytest --kernel` the same line is pytest's usage error, exit 4",
    NOT_RUN: "not run: the kernel could not be called here at all, every case not runnable on this machine "
    "(its devices, its shape constraints), nothing verified (check); the kernel crashed, hung, raised or could not "
    "be called on the case (replay)",
    INTERNAL: "internal error: int8conf's own bug, with its traceback (please report it); under pytest also "
    "pytest's usage error (one line, no traceback: bad input above)",
    INTERRUPTED: "stopped (Ctrl-C, SIGTERM): the report of what finished is written, headed PARTIAL RUN",
}


def exit_code_table() -> str:
    """:data:`EXIT_CODES` as a Markdown table (README.md holds this text; a test compares)."""
    return "\n".join(["| exit | meaning |", "|---|---|", *(f"| {k} | {v} |" for k, v in EXIT_CODES.items())])
