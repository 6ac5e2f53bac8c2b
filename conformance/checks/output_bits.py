"""Output checks C5 pow2_bit_identity, C6 real_scale_spacing, C8 declared_contract (DESIGN.md section 6).

Output bits vs ``reference.epilogue`` on the exact accumulator of the reference's
operands (int64; for e4m3 operands the exact sum rounded once to float32, DESIGN.md 3b)
under the declared overflow behaviour: C8 the declared contract, 0 ulp;
C5 (pow2 scales) order ``a_then_w`` with the declared bias point, 0 ulp where
the scale orders agree; C6 (real scales) the same reference within ``C6_TOL_ULP`` (1) spacing.
The declaration is the one for the case's device and out dtype (:func:`case_epilogue`).
A failing C5 / C6 says who its failing elements are due to (:func:`attribution`):
the kernel (it deviates from its declaration) or the declaration (the kernel gives
its declaration's bits, which are not interchangeable with the reference there).
Rationale in README.md here.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from conformance.checks.case_check import ObservedAccumulator
from conformance.checks.compare import bit_differences, compare_bits, output_problem, problem_kind, skipped_reason
from conformance.checks.overflow import DeclaredAccumulator, declared_accumulator, saturated_accumulator, wrap32
from conformance.checks.result import DECLARATION, CheckResult, Verdict, not_applicable
from conformance.kernels.runner import KernelRun
from conformance.kernels.spec import DeclaredEpilogue, KernelSpec, declared_epilogue
from reference import memo, readback
from reference.bits import bits_of, spacing_distance
from reference.contract import SCALE_ORDERS, EpilogueContract, steps_label
from reference.epilogue import apply_steps, cached_epilogue
from reference.fp8 import exact_accumulator
from reference.operands import GemmOperands

C5, C6, C8 = "C5", "C6", "C8"

#: C6's tolerance: the most spacings (ulp of the output dtype) an output element may lie from the
#: ``a_then_w`` reference under real scales and still pass (``spacing_distance <= C6_TOL_ULP``).
C6_TOL_ULP = 1


def _exact(ops, exact: Optional[Tensor]) -> Tensor:
    return exact if exact is not None else exact_accumulator(ops.a, ops.b)


def overflow_of(spec, device_type: Optional[str] = None) -> str:
    """The kernel's declared overflow behaviour on ``device_type``
    (``KernelSpec.overflow_on``; ``wrap`` when it declares none)."""
    on = getattr(spec, "overflow_on", None)
    if on is not None:
        return on(device_type)
    return getattr(spec, "overflow", None) or "wrap"


def run_device(run) -> Optional[str]:
    """The device type a KernelRun / AccRun ran on (its manifest), or None."""
    man = getattr(run, "manifest", None) or {}
    return man.get("device") or None


def reference_output(
    ops, contract: EpilogueContract, exact: Optional[Tensor] = None, acc: Optional[DeclaredAccumulator] = None
) -> Tensor:
    """out_dtype [M, N]: ``reference.epilogue`` under ``contract`` on ``acc.acc``
    (the declared accumulator) or else the exact one, on the accumulator's device
    (the same bits on any device)."""
    x = acc.acc if acc is not None else _exact(ops, exact)
    return cached_epilogue(x, ops.scale_a, ops.scale_b, contract, bias=ops.bias, out_dtype=ops.out_dtype)


def accepted_reference(out: Tensor, ops, contract: EpilogueContract, dacc: DeclaredAccumulator) -> Tensor:
    """The reference under ``dacc``, except that an at-risk element takes the
    reference of ``dacc.alternative`` where ``out`` is closer to it (``wrap``
    accepts the wrapped and the exact sum). Chosen element-wise: no read-back."""
    ref = reference_output(ops, contract, acc=dacc)
    if dacc.alternative is None or not isinstance(out, Tensor):
        return ref
    out = memo.moved(out, ref.device)

    def choose() -> Tensor:
        alt = reference_output(ops, contract, exact=dacc.alternative)
        take = dacc.at_risk & (spacing_distance(out, alt) < spacing_distance(out, ref))
        return torch.where(take, alt, ref)

    return memo.cached(("accepted", contract), (out, ref, dacc.alternative, dacc.at_risk), choose)


def _declared(spec, ops, exact: Tensor, run=None) -> DeclaredAccumulator:
    return declared_accumulator(ops, exact, overflow_of(spec, run_device(run)))


def _bad(out: Tensor, ref: Tensor, tol_ulp: int) -> Tensor:
    """bool [M, N]: bits differ (``tol_ulp == 0``) or spacing distance over ``tol_ulp``."""
    if tol_ulp == 0:
        return bit_differences(out, ref)[0]
    return spacing_distance(out, ref) > tol_ulp


def risky_count(dacc: DeclaredAccumulator, out: Tensor, ops, contract, tol_ulp: int) -> tuple:
    """``(risky, count)``: bool [M, N] of at-risk, defined elements over tolerance
    against the accepted reference, and the Deferred of their number."""
    ref = accepted_reference(out, ops, contract, dacc)

    def ask() -> tuple:
        risky = dacc.at_risk & dacc.defined & _bad(out, ref, tol_ulp)
        return risky, readback.ask([risky.sum()], lambda v: int(v[0]))

    return memo.cached(("risky", contract, int(tol_ulp)), (out, ref, dacc.at_risk, dacc.defined), ask)


def _overflow_evidence(
    ev: dict, dacc: DeclaredAccumulator, out: Tensor, ops, contract, exact: Tensor, tol_ulp: int
) -> None:
    """Add the overflow counts and, for at-risk elements over tolerance, which
    behaviour (wrap / saturate / exact int64) the output matches there."""
    ev.update(dacc.evidence())
    if not dacc.n_at_risk:
        return
    risky, n_risky = risky_count(dacc, out, ops, contract, tol_ulp)
    if not n_risky.get():
        return
    labels = ("wrap", "saturate", "exact_int64")
    parts = [
        (risky & ~_bad(out, reference_output(ops, contract, exact=a), tol_ulp)).sum()
        for a in (wrap32(exact), saturated_accumulator(exact), exact)
    ]
    diag = {"over_tolerance_at_risk": n_risky.get()}
    diag.update(readback.read(parts, lambda v: {f"matches_{k}": int(x) for k, x in zip(labels, v)}))
    ev["overflow_diagnosis"] = diag


def _result(check_id: str, name: str, n_over: int, ev: dict, what: str) -> CheckResult:
    n = ev["n_compared"]
    if n == 0 and ev.get("overflow_excluded"):
        return not_applicable(
            check_id,
            f"all {ev['overflow_excluded']} elements excluded: their "
            f"accumulator may leave int32 and the kernel declares "
            f"overflow {ev['overflow_behaviour']}",
            **ev,
        )
    excl = (
        f"; {ev['overflow_excluded']} elements excluded (accumulator may leave int32, "
        f"overflow declared {ev['overflow_behaviour']})"
        if ev.get("overflow_excluded")
        else ""
    )
    if n_over == 0:
        extra = f" ({ev['n_differ']} within tolerance)" if ev["n_differ"] else ""
        return CheckResult(
            check_id, name, Verdict.PASS, f"{n} elements within {ev['tol_ulp']} ulp of {what}{extra}{excl}", ev
        )
    w = ev.get("worst", {})
    nz = ev.get("n_signed_zero", 0)
    if ev["tol_ulp"] == 0:
        head = f"{n_over}/{n} elements differ in bits from {what}"
        if nz:
            head += f" ({nz} of them +0 vs -0: sign of zero lost or invented)"
        head += f" (max {ev['max_ulp']} ulp)"
    else:
        head = f"{n_over}/{n} elements over {ev['tol_ulp']} ulp of {what} (max {ev['max_ulp']} ulp)"
    diag = ev.get("overflow_diagnosis")
    if diag:
        head += (
            f"; {diag['over_tolerance_at_risk']} at elements whose accumulator leaves "
            f"int32: output matches wrap at {diag['matches_wrap']}, saturate at "
            f"{diag['matches_saturate']}, exact int64 at {diag['matches_exact_int64']} "
            f"(declared {ev.get('overflow_behaviour')})"
        )
    return CheckResult(
        check_id,
        name,
        Verdict.FAIL,
        f"{head}; worst at {w.get('index')}: out {w.get('out_bits')} vs ref {w.get('ref_bits')}" + excl,
        ev,
    )


def unusable_output(check_id: str, name: str, ops, run) -> Optional[CheckResult]:
    """The verdict when there is no output to compare (``n/a`` when the kernel
    could not run here; a failure with ``problem_kind`` for an error, a wrong
    shape / dtype or NaN), else None."""
    why = skipped_reason(run)
    if why:
        return not_applicable(check_id, why)
    problem = output_problem(run.output, (ops.m, ops.n), ops.out_dtype, run.error)
    if not problem:
        return None
    kind = problem_kind(run.output, (ops.m, ops.n), ops.out_dtype, run.error)
    ev = {"kernel_error": problem, "problem_kind": kind, "operand_digests": ops.digests()}
    return CheckResult(check_id, name, Verdict.FAIL, problem, ev)


def _against(spec, ops, run, exact: Tensor, contract: EpilogueContract) -> tuple:
    """``(out, ref, mask, dacc)``: the output on the reference's device, the
    accepted reference, and the mask of defined elements (None when all are by
    construction; else the mask, even if all True: no read-back to decide)."""
    dacc = _declared(spec, ops, exact, run)
    out = memo.moved(run.output, exact.device)
    ref = accepted_reference(out, ops, contract, dacc)
    return out, ref, None if dacc.all_defined else dacc.defined, dacc


def case_epilogue(spec, ops, run) -> DeclaredEpilogue:
    """The declaration that applies to this case: ``kernels.spec.declared_epilogue`` on the device the kernel ran
    on (its manifest; ``cpu`` when unknown) and the case's out dtype."""
    return declared_epilogue(spec, run_device(run), ops.out_dtype)


def interchangeable_reference(spec, ops, run) -> EpilogueContract:
    """C5 / C6's reference contract: order ``a_then_w`` with the bias point of the case's declaration."""
    return EpilogueContract("a_then_w", case_epilogue(spec, ops, run).contract.bias_point)


def c8_inputs(spec, ops, run, exact: Tensor) -> tuple:
    """C8's ``(out, ref, mask, dacc)`` for a case whose declaration is a standard contract."""
    return _against(spec, ops, run, exact, case_epilogue(spec, ops, run).contract)


def c8_reference(spec, ops, run, exact: Tensor) -> tuple:
    """``(out, ref, mask, dacc, declared)``: the output and the case's declaration emulated (C8's reference). A
    standard contract: :func:`c8_inputs` on the exact accumulator's device; a step list: ``apply_steps`` on the
    CPU of the declared accumulator, an at-risk element taking its alternative where ``out`` is closer to it (as
    :func:`accepted_reference`), ``out`` and ``mask`` moved there (``mask`` None when every element is defined)."""
    de = case_epilogue(spec, ops, run)
    if de.standard:
        return c8_inputs(spec, ops, run, exact) + (de,)
    dacc = _declared(spec, ops, exact, run)
    mask = None if not dacc.n_undefined else dacc.defined.cpu()
    bias = None if ops.bias is None else ops.bias.cpu()

    def steps_of(acc: Tensor) -> Tensor:
        return apply_steps(
            acc.cpu(), ops.scale_a.cpu(), ops.scale_b.cpu(), de.steps, bias=bias, out_dtype=ops.out_dtype
        )

    out, ref = run.output.cpu(), steps_of(dacc.acc)
    if dacc.alternative is not None:  # as accepted_reference: ``wrap`` accepts the exact sum too
        alt = steps_of(dacc.alternative)
        ref = torch.where(dacc.at_risk.cpu() & (spacing_distance(out, alt) < spacing_distance(out, ref)), alt, ref)
    return out, ref, mask, dacc, de


def declared_output(ops, declared: DeclaredEpilogue, exact: Optional[Tensor] = None) -> Tensor:
    """out_dtype [M, N]: ``declared`` (a :class:`DeclaredEpilogue`) emulated on the exact accumulator, no overflow
    choice: :func:`reference_output` of a standard contract, else ``apply_steps`` on the CPU."""
    if declared.standard:
        return reference_output(ops, declared.contract, exact=exact)
    x = _exact(ops, exact).cpu()
    bias = None if ops.bias is None else ops.bias.cpu()
    return apply_steps(x, ops.scale_a.cpu(), ops.scale_b.cpu(), declared.steps, bias=bias, out_dtype=ops.out_dtype)


def c6_inputs(spec, ops, run, exact: Tensor) -> tuple:
    """C6's ``(out, ref, mask, dacc)``: the ``a_then_w`` reference at the declared bias point
    (:func:`interchangeable_reference`), except where another standard scale order (``w_then_a``, ``fused``) at that
    bias point lies more than ``C6_TOL_ULP`` from it and ``out`` has exactly that order's bits: there, that order's. Legal orders differ by one spacing before the
    bias; an ``after_round`` bias added in a 16-bit out dtype can cancel most of the value, so they may end several
    spacings of the sum apart: C6 never fails a standard contract, and tolerates one spacing around ``a_then_w``
    only (not around every order: a fault of two spacings would hide there)."""
    bp = interchangeable_reference(spec, ops, run).bias_point
    out, ref, mask, dacc = _against(spec, ops, run, exact, EpilogueContract("a_then_w", bp))

    def legal() -> Tensor:
        best = ref
        for o in SCALE_ORDERS[1:]:
            alt = accepted_reference(out, ops, EpilogueContract(o, bp), dacc)
            apart = spacing_distance(alt, ref) > C6_TOL_ULP  # where the one-spacing premise fails
            best = torch.where(apart & (spacing_distance(out, alt) == 0), alt, best)
        return best

    return out, memo.cached("c6_legal", (out, ref, dacc.defined), legal), mask, dacc


def c5_inputs(spec, ops, run, exact: Tensor) -> tuple:
    """C5's ``((out, ref, mask, dacc), premise)``: C6's reference masked to where
    every scale order agrees and the declaration defines, and the Deferred of
    ``(n_bad, all_pow2)``. The mask is None when the premise is already read and
    holds everywhere (then C5 shares C8's comparison), else the mask itself."""
    bp = interchangeable_reference(spec, ops, run).bias_point
    out, ref, _, dacc = _against(spec, ops, run, exact, EpilogueContract("a_then_w", bp))
    refs = [ref] + [
        accepted_reference(out, ops, EpilogueContract(o, bp), dacc) for o in SCALE_ORDERS if o != "a_then_w"
    ]
    keep, premise = _pow2_premise(refs, dacc.defined, ops.scale_b)

    def mask():
        return None if premise.done and premise.get()[2] else keep

    key = (out,) + tuple(refs) + (dacc.defined, ops.scale_b)
    return (out, ref, memo.cached("c5_mask", key, mask), dacc), premise.then(lambda p: p[::2])


#: The line a failing C5 / C6 adds where the kernel gives exactly its declaration's bits.
DECLARATION_LINE = "the declared contract, emulated, gives these bits: the declaration is not interchangeable here"


def ask_attribution(spec, ops, run, exact: Tensor, out: Tensor, ref: Tensor, mask, tol_ulp: int):
    """The Deferred of :func:`attribution` (memoized in a ``reference.memo`` scope, so a prefetch asks it with the
    failure evidence: no read-back of its own)."""
    dout, dref, dmask, _, _ = c8_reference(spec, ops, run, exact)

    def ask():
        over = _bad(out, ref, tol_ulp)
        if mask is not None:
            over = over & mask.to(over.device)
        same = bits_of(dout) == bits_of(dref)
        if dmask is not None:
            same = same & dmask
        same = same.to(over.device)
        parts = [(over & same).sum(), (over & ~same).sum()]
        return readback.ask(parts, lambda v: (int(v[0]), int(v[1])))

    return memo.cached(("attribution", int(tol_ulp)), (out, ref, mask, dout, dref, dmask), ask)


def attribution(spec, ops, run, exact: Tensor, out: Tensor, ref: Tensor, mask, tol_ulp: int) -> dict:
    """Who a failing C5 / C6 comparison (``out`` vs ``ref`` over ``mask``, ``tol_ulp``) is due to: at each element
    over tolerance, the kernel's bits either are those of its declaration emulated (:func:`c8_reference`:
    the declaration deviates from the reference) or not (the kernel deviates from its declaration). Returns
    ``{"attribution": "declaration" | "kernel" | "kernel and declaration", "n_declaration", "n_kernel"}``."""
    n_decl, n_kern = ask_attribution(spec, ops, run, exact, out, ref, mask, tol_ulp).get()
    who = "kernel" if not n_decl else DECLARATION if not n_kern else "kernel and declaration"
    return {"attribution": who, "n_declaration": n_decl, "n_kernel": n_kern}


def _attributed(res: CheckResult, spec, ops, run, exact: Tensor, out: Tensor, ref: Tensor, mask, tol: int):
    """``res`` with :func:`attribution` in its evidence and, where the declaration is to blame for some failing
    elements, :data:`DECLARATION_LINE` in its summary (``failure_kind`` :data:`DECLARATION` when for all)."""
    if res.verdict != Verdict.FAIL or "n_compared" not in res.evidence:
        return res
    at = attribution(spec, ops, run, exact, out, ref, mask, tol)
    res.evidence.update(at)
    if at["attribution"] == DECLARATION:
        res.evidence["failure_kind"] = DECLARATION
        res.summary += f"; {DECLARATION_LINE}"
    elif at["n_declaration"]:
        res.summary += (
            f"; at {at['n_declaration']} of them {DECLARATION_LINE}; at the other {at['n_kernel']} the kernel "
            "deviates from its declaration"
        )
    else:
        res.summary += "; the kernel deviates from its declaration there (C8)"
    return res


def check_declared_contract(
    spec: KernelSpec,
    ops: GemmOperands,
    run: KernelRun,
    acc: Optional[ObservedAccumulator] = None,
    exact: Optional[Tensor] = None,
) -> CheckResult:
    """C8: output bits vs the reference of the declaration that applies to the case (:func:`case_epilogue`: a
    standard contract, or a step list compared on the CPU), 0 ulp. ``acc`` is unused. Evidence:
    :func:`conformance.checks.compare.compare_bits`' plus ``contract`` (and ``steps``, ``selector``)."""
    name = "declared_contract"
    early = unusable_output(C8, name, ops, run)
    if early:
        return early
    exact = _exact(ops, exact)
    out, ref, mask, dacc, de = c8_reference(spec, ops, run, exact)
    if not de.standard:
        n_over, ev = compare_bits(out, ref, 0, ops, exact.cpu(), mask=mask)
        ev["contract"], ev["steps"] = de.contract.to_dict(), de.steps.to_dict()
        ev.update(dacc.evidence())
    else:
        n_over, ev = compare_bits(out, ref, 0, ops, exact, mask=mask)
        ev["contract"] = de.contract.to_dict()
        _overflow_evidence(ev, dacc, out, ops, de.contract, exact, 0)
    if de.selector:
        ev["selector"] = de.selector
    what = f"declared contract {de.contract.label()}" if de.standard else f"declared steps [{steps_label(de.steps)}]"
    return _result(C8, name, n_over, ev, what + (f" (for {de.selector})" if de.selector else ""))


def _is_pow2(s: Tensor) -> Tensor:
    mant, _ = torch.frexp(s.to(torch.float32))
    return mant.abs() == 0.5


def _pow2_premise(refs: list, defined: Tensor, scale_b: Tensor) -> tuple:
    """``(keep, premise)``: bool [M, N] where the references of every scale order
    agree and ``defined``, and the Deferred of ``(n_bad, all_pow2, keep_all)``."""

    def ask():
        b0 = bits_of(refs[0])
        agree = torch.ones_like(b0, dtype=torch.bool)
        for r in refs[1:]:
            agree &= bits_of(r) == b0
        keep = agree & defined
        parts = [(~agree).sum(), _is_pow2(scale_b).all(), keep.all()]
        return keep, readback.ask(parts, lambda v: (int(v[0]), bool(v[1]), bool(v[2])))

    return memo.cached("pow2_premise", tuple(refs) + (defined, scale_b), ask)


def check_pow2_bit_identity(
    spec: KernelSpec,
    ops: GemmOperands,
    run: KernelRun,
    acc: Optional[ObservedAccumulator] = None,
    exact: Optional[Tensor] = None,
) -> CheckResult:
    """C5: under pow2 scales, output bits vs the ``a_then_w`` reference with the
    declared bias point, 0 ulp, where the scale orders agree. Evidence adds
    ``reference``, ``premise_violations`` and ``scale_b_all_pow2``."""
    name = "pow2_bit_identity"
    if ops.scale_mode != "pow2":
        return not_applicable(C5, f"scale mode {ops.scale_mode!r}: C5 applies to power-of-two weight scales only")
    early = unusable_output(C5, name, ops, run)
    if early:
        return early
    exact = _exact(ops, exact)
    bp = interchangeable_reference(spec, ops, run).bias_point
    (out, ref, keep, dacc), premise = c5_inputs(spec, ops, run, exact)
    n_bad, all_pow2 = premise.get()
    n_over, ev = compare_bits(out, ref, 0, ops, exact, mask=keep)
    ev["reference"] = EpilogueContract("a_then_w", bp).to_dict()
    _overflow_evidence(ev, dacc, out, ops, EpilogueContract("a_then_w", bp), exact, 0)
    ev["premise_violations"] = n_bad
    ev["scale_b_all_pow2"] = all_pow2
    res = _result(C5, name, n_over, ev, f"the pow2 reference (bias {bp})")
    if n_bad:
        res.summary += f"; {n_bad} elements excluded (scale orders disagree in the reference)"
    if not ev["scale_b_all_pow2"]:
        res.summary += "; note: scale_b is not all powers of two"
    return _attributed(res, spec, ops, run, exact, out, ref, keep, 0)


def check_real_scale_spacing(
    spec: KernelSpec,
    ops: GemmOperands,
    run: KernelRun,
    acc: Optional[ObservedAccumulator] = None,
    exact: Optional[Tensor] = None,
) -> CheckResult:
    """C6: under real scales, output within ``C6_TOL_ULP`` spacings of the ``a_then_w`` reference with the declared
    bias point, or exactly another standard order's (:func:`c6_inputs`). Evidence adds ``reference``. n/a on a case whose
    ``meta["c6_not_applicable"]`` gives the reason its legal epilogues may end more than one spacing apart (C8
    judges it against the declaration)."""
    name = "real_scale_spacing"
    if ops.scale_mode == "pow2":
        return not_applicable(C6, "scale mode 'pow2': C6 applies to real scales (C5 covers pow2)")
    if ops.meta.get("c6_not_applicable"):
        return not_applicable(C6, f"case outside C6's premise: {ops.meta['c6_not_applicable']}")
    early = unusable_output(C6, name, ops, run)
    if early:
        return early
    exact = _exact(ops, exact)
    c = interchangeable_reference(spec, ops, run)
    out, ref, mask, dacc = c6_inputs(spec, ops, run, exact)
    n_over, ev = compare_bits(out, ref, C6_TOL_ULP, ops, exact, mask=mask)
    ev["reference"] = c.to_dict()
    _overflow_evidence(ev, dacc, out, ops, c, exact, C6_TOL_ULP)
    res = _result(C6, name, n_over, ev, f"the reference ({c.label()})")
    return _attributed(res, spec, ops, run, exact, out, ref, mask, C6_TOL_ULP)
