"""The conformance checks C1-C8 of DESIGN.md section 6.

Each check is a plain function returning a :class:`CheckResult`
(``pass`` / ``fail`` / ``n/a`` plus evidence). Per-case checks share one
signature, ``check(spec, ops, run, acc=None, exact=None) -> CheckResult``
(``spec`` KernelSpec, ``ops`` the reference's GemmOperands, ``run`` the
KernelRun of ``spec`` on ``ops``, ``acc`` the observed accumulator as a
tensor or ``accumulator.ObservedAccumulator``, ``exact`` the exact int64
accumulator if already computed); ``conformance.suite.evaluate.evaluate_case`` runs
them all on one case:

* ``conformance.checks.manifest``: C1 kernel_manifest
* ``conformance.checks.operand_sharing``: C2 operand_sharing
* ``conformance.checks.accumulator``: C3 int32_headroom, C4 fp32_exact_accumulator
* ``conformance.checks.output_bits``: C5 pow2_bit_identity, C6 real_scale_spacing,
  C8 declared_contract
* ``conformance.checks.token_flip``: C7 token_flip (model-level)
* ``conformance.checks.compare``: the shared bit-level comparison (spacing
  distance, ulp histogram, worst element with its operands)

This package module stays import-light (only the result type) so that
check modules of other owners can import ``CheckResult`` from here.
"""

from conformance.checks.result import CHECK_NAMES, PRECONDITION_CHECKS, VERDICTS, CheckResult, aggregate, not_applicable  # noqa: F401
