"""The conformance checks of DESIGN.md section 6: plain functions returning a :class:`CheckResult`.

Per-case checks share ``check(spec, ops, run, acc=None, exact=None)`` (``acc``:
the observed accumulator, a tensor or ``accumulator.ObservedAccumulator``;
``exact``: the exact int64 accumulator). Modules: ``manifest`` C1,
``operand_sharing`` C2, ``accumulator`` C3 / C4, ``output_bits`` C5 / C6 / C8,
``token_flip`` C7, ``batch_invariance`` C9, ``ownership`` C10, ``engine_hash``
E1, ``compare`` the shared bit comparison. Import-light: only the result type.
"""

from conformance.checks.result import CHECK_NAMES, PRECONDITION_CHECKS, VERDICTS, CheckResult, aggregate, not_applicable  # noqa: F401
