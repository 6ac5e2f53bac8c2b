"""The conformance checks of DESIGN.md section 6: plain functions returning a :class:`CheckResult`.

Per-case checks share ``check(spec, ops, run, acc=None, exact=None)`` (``acc``: the
observed accumulator; ``exact``: the exact int64 one). Module map and rationale:
README.md here. Import-light: only the result type.
"""

from conformance.checks.result import CHECK_NAMES, PRECONDITION_CHECKS, VERDICTS, CheckResult, aggregate, not_applicable  # noqa: F401
