"""The conformance checks of DESIGN.md section 6: plain functions returning a :class:`CheckResult`.

Per-case checks are ``case_check.CaseCheck`` s: ``check(spec, ops, run, acc=None, exact=None)`` (``acc``: the
observed accumulator; ``exact``: the exact one) returning a ``CheckResult`` whose ``verdict`` is a ``Verdict``.
Module map and rationale: README.md here. Import-light: only the result type.
"""

from conformance.checks.result import (  # noqa: F401
    CHECK_NAMES,
    PRECONDITION_CHECKS,
    VERDICTS,
    CheckResult,
    Verdict,
    aggregate,
    not_applicable,
)
