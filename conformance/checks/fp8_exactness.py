"""How the per-case checks apply to an FP8 (e4m3) kernel (DESIGN.md section 3b).

The int8 checks' premise is an exact accumulator. For e4m3 it holds where the declared accumulator provably keeps the
exact sum: always for ``exact``; else where every partial sum has fewer than 2**B units (B the declared retained
bits, 24 for ``fp32``; ``reference.fp8.exact_at_bits``, the lemma of ``conformance.cases.fp8``). There C5 / C6 / C8
judge the output bit-exactly against the declared epilogue of the exact sum (rounded once to float32), as for int8;
elsewhere they are n/a and C12 holds the output within the bound the declaration implies. C12 also runs on every
captured case. C3 (int32 headroom) does not apply: the accumulator is floating point. C4 says which of the two a
case is (pass: provably exact at the declared precision; n/a otherwise, with the count of elements)."""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from conformance.checks.case_check import CaseCheck, ObservedAccumulator
from conformance.checks.fp8_error_bound import C12, check_fp8_error_bound, no_model_reason
from conformance.checks.output_bits import run_device
from conformance.checks.result import CHECK_NAMES, CheckResult, Verdict, not_applicable
from conformance.kernels.runner import KernelRun
from conformance.kernels.spec import KernelSpec
from reference import memo
from reference.fp8 import FP32_BITS, AccumulatorModel, exact_at_bits
from reference.operands import GemmOperands

C3, C4 = "C3", "C4"


def declared_model(spec: KernelSpec, run: KernelRun) -> Optional[AccumulatorModel]:
    """The accumulator ``spec`` declares on the device ``run`` ran on (``KernelSpec.accumulator_on``)."""
    return spec.accumulator_on(run_device(run))


def retained_bits(model: AccumulatorModel) -> int:
    """Significant bits every partial sum keeps under ``model`` (``exact`` and ``fp32``: 24)."""
    return FP32_BITS if model.kind == "exact" else model.bits


def inexact_count(spec: KernelSpec, ops: GemmOperands, run: KernelRun) -> Optional[int]:
    """Elements of ``ops`` whose accumulator the declaration does not make provably exact: 0 for ``exact``; None
    when the kernel declares no accumulator here."""
    model = declared_model(spec, run)
    if model is None:
        return None
    if model.kind == "exact":
        return 0
    bits = retained_bits(model)
    a, b = ops.a.cpu(), ops.b.cpu()
    return memo.cached(("fp8_inexact", bits), (ops.a, ops.b), lambda: int((~exact_at_bits(a, b, bits)).sum()))


def check_no_int32_accumulator(
    spec: KernelSpec,
    ops: GemmOperands,
    run: KernelRun,
    acc: Optional[ObservedAccumulator] = None,
    exact: Optional[Tensor] = None,
) -> CheckResult:
    """C3 for an e4m3 kernel: n/a (its accumulator is floating point, not int32)."""
    return not_applicable(C3, "e4m3 operands: the accumulator is floating point, no int32 headroom to check")


def check_fp8_exact_accumulator(
    spec: KernelSpec,
    ops: GemmOperands,
    run: KernelRun,
    acc: Optional[ObservedAccumulator] = None,
    exact: Optional[Tensor] = None,
) -> CheckResult:
    """C4 for an e4m3 kernel: pass when the declared accumulator provably keeps the exact sum on every element
    (module docstring), else n/a with the count (C12 then bounds the output). Evidence: ``accumulator``,
    ``retained_bits``, ``n_inexact``."""
    model = declared_model(spec, run)
    if model is None:
        return not_applicable(C4, no_model_reason(run))
    n_bad = inexact_count(spec, ops, run)
    ev = {"accumulator": model.label(), "retained_bits": retained_bits(model), "n_inexact": n_bad}
    n = ops.m * ops.n
    if n_bad:
        why = (
            f"accumulator not provably exact at {retained_bits(model)} retained bits on {n_bad}/{n} elements "
            f"(declared {model.label()!r}): C5/C6/C8 n/a, C12 bounds the output"
        )
        return not_applicable(C4, why, **ev)
    how = "declared exact" if model.kind == "exact" else f"every partial sum < 2^{retained_bits(model)} units"
    return CheckResult(C4, CHECK_NAMES[C4], Verdict.PASS, f"accumulator provably exact on all {n} elements ({how})", ev)


def exact_only(check_id: str, fn: CaseCheck) -> CaseCheck:
    """Per-case check ``fn`` (C5 / C6 / C8) where the declared accumulator is provably exact on every element of the
    case, else n/a."""

    def check(
        spec: KernelSpec,
        ops: GemmOperands,
        run: KernelRun,
        acc: Optional[ObservedAccumulator] = None,
        exact: Optional[Tensor] = None,
    ) -> CheckResult:
        n_bad = inexact_count(spec, ops, run)
        if n_bad is None:
            return not_applicable(check_id, no_model_reason(run))
        if n_bad:
            return not_applicable(
                check_id,
                f"FP8 accumulator not provably exact on {n_bad}/{ops.m * ops.n} elements: C12 bounds the output",
            )
        return fn(spec, ops, run, acc=acc, exact=exact)

    check.__name__ = getattr(fn, "__name__", "check")
    return check


def check_fp8_bound_where_inexact(
    spec: KernelSpec,
    ops: GemmOperands,
    run: KernelRun,
    acc: Optional[ObservedAccumulator] = None,
    exact: Optional[Tensor] = None,
) -> CheckResult:
    """C12 (``fp8_error_bound.check_fp8_error_bound``) on captured cases and on cases whose accumulator is not
    provably exact; n/a where C5 / C6 / C8 judge the output bit-exactly."""
    captured = (ops.meta or {}).get("source") == "capture"
    if not captured and inexact_count(spec, ops, run) == 0:
        return not_applicable(C12, "accumulator provably exact on this case: C5/C6/C8 judge it bit-exactly")
    return check_fp8_error_bound(spec, ops, run, acc=acc, exact=exact)
