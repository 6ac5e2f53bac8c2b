"""Output checks C5 (pow2_bit_identity), C6 (real_scale_spacing) and C8
(declared_contract) of DESIGN.md section 6.

All three compare the kernel's output bits with ``reference.epilogue``
applied to the exact int64 accumulator of the *reference's* operands (not of
what the kernel received: a kernel fed other operands, fault F9, must differ).

* C8 declared_contract: reference emulating the kernel's declared epilogue
  contract (scale order, bias point, RNE), any scale mode; 0 ulp allowed.
* C5 pow2_bit_identity: only when ``ops.scale_mode == "pow2"``. With
  power-of-two per-channel scales ``s_w = 2**k``, ``rnd(x) * 2**k ==
  rnd(x * 2**k)`` exactly (IEEE 754 scaling by a power of two is exact
  barring overflow / subnormal results), so every legal scale order
  (``a_then_w``, ``w_then_a``, ``fused``) gives the same bits and C5 demands
  0 ulp against the canonical ``a_then_w`` reference. Bias: the two legal
  bias points (float32 before the one rounding, or out_dtype after it) are
  *not* equivalent under pow2 scales, so with a bias C5 compares against the
  reference with the kernel's *declared* bias point (and any scale order).
  Elements where the three scale orders do not agree in the reference (the
  power-of-two premise fails: subnormal or overflowing products, or a
  ``scale_b`` that is not a power of two) are excluded and counted in
  ``evidence["premise_violations"]``.
* C6 real_scale_spacing: under real scales (``scale_mode`` ``own`` or
  ``synthetic``; n/a for ``pow2``, which C5 covers), the output must be within
  1 spacing (ulp) of the canonical reference: scale order ``a_then_w`` and the
  kernel's declared bias point. Any two legal scale orders differ by at most
  one spacing (both float32 results are within two float32 ulps of the exact
  product, and bf16 rounding is monotone), so the canonical order does not
  change the verdict for a correct kernel; the bias point is taken from the
  declaration because ``rnd(rnd(x) + b)`` and ``rnd(x + b)`` can differ by
  many spacings when the bias cancels the product.

Accumulators that leave int32 (DESIGN.md section 3) are a precondition, never
a failure: all three checks apply the epilogue to the accumulator the
kernel's *declared* overflow behaviour gives (``KernelSpec.overflow``:
``wrap`` -> the wrapped int32 (or the exact sum of a wider accumulator),
``saturate`` -> clamped where every order agrees, ``undefined`` ->
excluded), see :mod:`conformance.checks.overflow`.
Elements the declaration leaves undefined are excluded and counted
(``evidence["overflow_excluded"]``); a mismatch on an at-risk element says
which behaviour the output matches instead (``overflow_diagnosis``).

Bit identity (C5, C8) compares bits: the sign of zero counts (a lost sign
is reported as its own category, ``n_signed_zero``), NaN payloads are
canonical (:func:`conformance.checks.compare.bit_differences`). A wrong
output dtype or shape is reported as a dtype / shape error.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from conformance.checks.compare import compare_bits, output_problem, problem_kind, skipped_reason
from conformance.checks.overflow import DeclaredAccumulator, declared_accumulator
from conformance.checks.result import CheckResult, not_applicable
from reference import memo, readback
from reference.contract import SCALE_ORDERS, EpilogueContract

C5, C6, C8 = "C5", "C6", "C8"


def _exact(ops, exact: Optional[Tensor]) -> Tensor:
    if exact is not None:
        return exact
    from reference.accumulate import exact_int_mm

    return exact_int_mm(ops.a, ops.b)


def overflow_of(spec, device_type: Optional[str] = None) -> str:
    """The kernel's declared overflow behaviour on the device it ran on
    (``KernelSpec.overflow_on``; ``wrap`` when it declares none: the
    contract's accumulator is int32, DESIGN.md section 3)."""
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
    """Reference output of ``ops`` under ``contract``.

    Args:
        ops: GemmOperands.
        contract: the epilogue to emulate.
        exact: exact int64 accumulator [M, N] if already computed.
        acc: the declared accumulator (:func:`conformance.checks.overflow.declared_accumulator`)
            to use instead of the exact one (they differ only where the sum
            can leave int32).

    Returns:
        out_dtype [M, N] on the accumulator's device (the CPU for CPU
        operands): ``reference.epilogue.apply_epilogue`` on the accumulator
        (IEEE float32 element-wise operations, the same bits on any device:
        ``tests/conformance/checks/test_device_references.py``).
    """
    from reference.epilogue import cached_epilogue

    x = acc.acc if acc is not None else _exact(ops, exact)
    # memoized inside a reference.memo scope (the sweep): the same reference
    # serves every check of every cell of a layer
    return cached_epilogue(x, ops.scale_a, ops.scale_b, contract, bias=ops.bias, out_dtype=ops.out_dtype)


def accepted_reference(out: Tensor, ops, contract: EpilogueContract, dacc: DeclaredAccumulator) -> Tensor:
    """The reference output under ``dacc``, where an at-risk element takes the
    output of ``dacc.alternative`` instead when the kernel's output is closer
    to it (``wrap`` accepts the wrapped and the exact sum).

    Memoized on the tensors inside a ``reference.memo`` scope (the sweep's
    prefetched comparisons are keyed on it). The choice is made element-wise
    whether or not any element is at risk (where none is, it takes the
    reference everywhere), so it needs no read-back of the at-risk count."""
    ref = reference_output(ops, contract, acc=dacc)
    if dacc.alternative is None or not isinstance(out, Tensor):
        return ref
    out = memo.moved(out, ref.device)

    def choose() -> Tensor:
        from reference.bits import spacing_distance

        alt = reference_output(ops, contract, exact=dacc.alternative)
        take = dacc.at_risk & (spacing_distance(out, alt) < spacing_distance(out, ref))
        return torch.where(take, alt, ref)

    return memo.cached(("accepted", contract), (out, ref, dacc.alternative, dacc.at_risk), choose)


def _declared(spec, ops, exact: Tensor, run=None) -> DeclaredAccumulator:
    return declared_accumulator(ops, exact, overflow_of(spec, run_device(run)))


def _bad(out: Tensor, ref: Tensor, tol_ulp: int) -> Tensor:
    """bool [M, N]: elements of ``out`` over ``tol_ulp`` from ``ref`` (bits
    differ for 0, spacing distance above it otherwise)."""
    from conformance.checks.compare import bit_differences
    from reference.bits import spacing_distance

    if tol_ulp == 0:
        return bit_differences(out, ref)[0]
    return spacing_distance(out, ref) > tol_ulp


def _ask_risky(dacc: DeclaredAccumulator, out: Tensor, ops, contract, tol_ulp: int) -> tuple:
    """``(risky, count)``: at-risk, defined elements over tolerance against
    the accepted reference (bool [M, N]) and the ``reference.readback.Deferred``
    of their number, memoized on the tensors inside a ``reference.memo``
    scope (asked by the sweep's prefetch, read by the check)."""
    ref = accepted_reference(out, ops, contract, dacc)

    def ask() -> tuple:
        risky = dacc.at_risk & dacc.defined & _bad(out, ref, tol_ulp)
        return risky, readback.ask([risky.sum()], lambda v: int(v[0]))

    return memo.cached(("risky", contract, int(tol_ulp)), (out, ref, dacc.at_risk, dacc.defined), ask)


def _overflow_evidence(
    ev: dict, dacc: DeclaredAccumulator, out: Tensor, ops, contract, exact: Tensor, tol_ulp: int
) -> None:
    """Add the overflow counts and, where at-risk elements are over tolerance,
    which behaviour (wrap / saturate / exact int64) the output matches there
    (the three counts read back together)."""
    ev.update(dacc.evidence())
    if not dacc.n_at_risk:
        return
    from conformance.checks.overflow import saturated_accumulator, wrap32

    risky, n_risky = _ask_risky(dacc, out, ops, contract, tol_ulp)
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
            check_id, name, "pass", f"{n} elements within {ev['tol_ulp']} ulp of {what}{extra}{excl}", ev
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
        "fail",
        f"{head}; worst at {w.get('index')}: out {w.get('out_bits')} vs ref {w.get('ref_bits')}" + excl,
        ev,
    )


def _kernel_failure(check_id: str, name: str, problem: str, ops, kind: Optional[str]) -> CheckResult:
    return CheckResult(
        check_id,
        name,
        "fail",
        problem,
        {"kernel_error": problem, "problem_kind": kind, "operand_digests": ops.digests()},
    )


def _unusable_output(check_id: str, name: str, ops, run) -> Optional[CheckResult]:
    """The verdict when there is no output to compare: ``n/a`` if the kernel
    could not run here, a kernel failure if it raised or returned a wrong
    shape / dtype (reported as a dtype / shape error, evidence
    ``problem_kind``) / NaN output; None when the output can be compared."""
    why = skipped_reason(run)
    if why:
        return not_applicable(check_id, why)
    problem = output_problem(run.output, (ops.m, ops.n), ops.out_dtype, run.error)
    if not problem:
        return None
    kind = problem_kind(run.output, (ops.m, ops.n), ops.out_dtype, run.error)
    return _kernel_failure(check_id, name, problem, ops, kind)


def _against(spec, ops, run, exact: Tensor, contract: EpilogueContract) -> tuple:
    """``(out, ref, mask, dacc)`` of an output check against ``contract``:
    the output on the reference's device, the accepted reference under the
    declared accumulator ``dacc``, and the mask of the elements the
    declaration defines (None when that is all of them)."""
    dacc = _declared(spec, ops, exact, run)
    out = memo.moved(run.output, exact.device)  # compared where the reference lives
    ref = accepted_reference(out, ops, contract, dacc)
    # unmasked where every element is defined by construction; else the
    # mask, even if it turns out to be all True (the same comparison, and no
    # read-back of the undefined count to decide)
    return out, ref, None if dacc.all_defined else dacc.defined, dacc


def _c8_inputs(spec, ops, run, exact: Tensor) -> tuple:
    """C8's ``(out, ref, mask, dacc)``: the declared contract (:func:`_against`)."""
    return _against(spec, ops, run, exact, spec.contract)


def _c6_inputs(spec, ops, run, exact: Tensor) -> tuple:
    """C6's ``(out, ref, mask, dacc)``: order ``a_then_w``, declared bias point."""
    return _against(spec, ops, run, exact, EpilogueContract("a_then_w", spec.contract.bias_point))


def _c5_inputs(spec, ops, run, exact: Tensor) -> tuple:
    """C5's ``((out, ref, mask, dacc), premise)``: the ``a_then_w``
    reference with the declared bias point, masked to where every scale
    order agrees and the declaration defines, and the
    ``reference.readback.Deferred`` of ``(n_bad, all_pow2)``
    (:func:`_pow2_premise`).

    The mask is None (compare everything) when the premise was already read
    and holds everywhere, else the mask itself -- also when it turns out to
    be all True: the same comparison, without waiting for the premise's
    read-back to decide (a sweep layer's premise is read once, in its first
    cell; an F6 / F7 case has references, and a premise, of its own). The
    choice is memoized per output and references, so the sweep's prefetch
    and the check make the same one."""
    bp = spec.contract.bias_point
    out, ref, _, dacc = _against(spec, ops, run, exact, EpilogueContract("a_then_w", bp))
    refs = [ref] + [
        accepted_reference(out, ops, EpilogueContract(o, bp), dacc) for o in SCALE_ORDERS if o != "a_then_w"
    ]
    keep, premise = _pow2_premise(refs, dacc.defined, ops.scale_b)

    def mask():
        return None if premise.done and premise.get()[2] else keep

    key = (out,) + tuple(refs) + (dacc.defined, ops.scale_b)
    return (out, ref, memo.cached("c5_mask", key, mask), dacc), premise.then(lambda p: p[::2])


def _prefetchable(spec, ops, run, exact: Tensor) -> list:
    """The ``(out, ref, tol_ulp, mask, dacc, contract)`` comparisons the
    output checks will make on this case, for the prefetches below: C8's
    (unless the kernel declares a step list: compared on the CPU by C8
    itself) and C5's (pow2) or C6's (otherwise). Empty without a comparable
    output. ``run``: a KernelRun, or a ``KernelLaunch`` whose output is known and
    verdicts are not (its comparisons are then asked speculatively: a
    verdict that makes the output unusable leaves them unread)."""
    if _unusable_output(C8, "", ops, run):
        return []
    out = []
    bp = spec.contract.bias_point
    if _declared_steps(spec, ops, run) is None:
        o, r, m, d = _c8_inputs(spec, ops, run, exact)
        out.append((o, r, 0, m, d, spec.contract))
    if ops.scale_mode == "pow2":
        o, r, m, d = _c5_inputs(spec, ops, run, exact)[0]
        out.append((o, r, 0, m, d, EpilogueContract("a_then_w", bp)))
    else:
        o, r, m, d = _c6_inputs(spec, ops, run, exact)
        out.append((o, r, 1, m, d, EpilogueContract("a_then_w", bp)))
    return out


def prefetch_output_comparisons(spec, ops, run, exact: Tensor) -> list:
    """Ask the comparisons C5 / C6 and C8 will make on this case
    (``conformance.checks.compare.prefetch_comparisons``), so that each
    check finds its own in the ``reference.memo`` scope and all are read
    with the case's other questions (the sweep: one device sync per cell for
    every output check, not one per check). Nothing happens outside a scope
    or where :func:`_prefetchable` finds nothing; results are unchanged.

    Returns:
        The comparisons asked (:func:`_prefetchable`'s list, [] outside a
        scope), for :func:`prefetch_output_evidence` and
        :func:`declared_output_differs` on the same output.
    """
    if not memo.active():
        return []
    from conformance.checks.compare import prefetch_comparisons

    pre = _prefetchable(spec, ops, run, exact)
    prefetch_comparisons([(o, r, m) for o, r, _, m, _, _ in pre])
    for o, _, tol, _, dacc, contract in pre:  # _overflow_evidence's count, where it is asked
        if dacc.known("at_risk") != 0:
            _ask_risky(dacc, o, ops, contract, tol)
    return pre


def _settled(spec, ops, run, exact: Tensor, pre: Optional[list]) -> list:
    """The comparisons of the settled ``run``: ``pre`` (asked on its launch,
    the same output) unless its verdicts made the output unusable; computed
    when ``pre`` is None."""
    if pre is None:
        return _prefetchable(spec, ops, run, exact)
    return [] if _unusable_output(C8, "", ops, run) else pre


def prefetch_output_evidence(spec, ops, run, exact: Tensor, pre: Optional[list] = None) -> None:
    """Ask the failure evidence (worst element, first offending elements)
    of every output check whose comparison has differing elements
    (``conformance.checks.compare.prefetch_failure_evidence``), so that the
    failing checks of a case read theirs in one read-back. Call after the
    comparisons were read (:func:`prefetch_output_comparisons`, whose list
    ``pre`` is, then any read-back), with the settled KernelRun. No-op
    outside a scope."""
    if not memo.active():
        return
    from conformance.checks.compare import prefetch_failure_evidence

    for o, r, tol, m, _, _ in _settled(spec, ops, run, exact, pre):
        prefetch_failure_evidence(o, r, tol, ops, exact, mask=m)


def declared_output_differs(spec, ops, run, exact: Tensor, pre: Optional[list] = None) -> bool:
    """Whether the output may differ from the declared-contract reference
    (C8 may fail): False only when C8's comparison was prefetched, has been
    read and found no differing bit, or there is no output; True otherwise
    (an error, a step-list declaration, a comparison not read yet). A hint
    for asking failure-related questions early, never a verdict. ``pre``:
    as :func:`prefetch_output_evidence`."""
    from conformance.checks.compare import ask_comparison

    if run.output is None:
        return False
    if run.error or not memo.active() or _declared_steps(spec, ops, run) is not None:
        return True
    pre = _settled(spec, ops, run, exact, pre)
    if not pre:
        return True
    o, r, _, m = pre[0][:4]  # C8's (out, ref, tol, mask)
    d = ask_comparison(o, r, m)
    if not d.done:
        return True
    ev = d.get()["ev"]
    return bool(ev["n_bits_differ"] or ev["max_ulp"])


def check_declared_contract(spec, ops, run, acc=None, exact=None) -> CheckResult:
    """C8: output bits vs the reference emulating the kernel's declared
    epilogue contract (any scale mode), 0 ulp.

    Args:
        spec: KernelSpec (its ``contract`` is the declaration).
        ops: GemmOperands the reference uses.
        run: KernelRun of ``spec`` on ``ops`` (output on CPU, or ``error``).
        acc: unused (uniform check signature).
        exact: exact int64 accumulator of ``ops`` if already computed.

    Returns:
        CheckResult; evidence from :func:`conformance.checks.compare.compare_bits`
        plus ``contract``. A kernel error / wrong shape / wrong dtype / NaN
        where the reference has none fails; a kernel that cannot run here at
        all (runner's ``manifest["skipped"]``) gives ``n/a``.
    """
    name = "declared_contract"
    early = _unusable_output(C8, name, ops, run)
    if early:
        return early
    exact = _exact(ops, exact)
    steps = _declared_steps(spec, ops, run)
    if steps is not None:  # a step-list declaration (reference.epilogue_steps), on the CPU
        from reference.epilogue_steps import apply_steps, steps_label

        dacc = _declared(spec, ops, exact, run)
        mask = None if not dacc.n_undefined else dacc.defined
        ref = apply_steps(
            dacc.acc.cpu(),
            ops.scale_a.cpu(),
            ops.scale_b.cpu(),
            steps,
            bias=None if ops.bias is None else ops.bias.cpu(),
            out_dtype=ops.out_dtype,
        )
        n_over, ev = compare_bits(run.output.cpu(), ref, 0, ops, exact.cpu(), mask=None if mask is None else mask.cpu())
        ev["contract"], ev["steps"] = spec.contract.to_dict(), steps.to_dict()
        ev.update(dacc.evidence())
        return _result(C8, name, n_over, ev, f"declared steps [{steps_label(steps)}]")
    out, ref, mask, dacc = _c8_inputs(spec, ops, run, exact)
    n_over, ev = compare_bits(out, ref, 0, ops, exact, mask=mask)
    ev["contract"] = spec.contract.to_dict()
    _overflow_evidence(ev, dacc, out, ops, spec.contract, exact, 0)
    return _result(C8, name, n_over, ev, f"declared contract {spec.contract.label()}")


def _declared_steps(spec, ops, run):
    """The kernel's declared step list for this call's device / out dtype, or
    None (no ``steps`` declared, or none for this device: then the standard
    ``contract`` applies)."""
    decl = getattr(spec, "steps", None)
    if decl is None:
        return None
    from reference.epilogue_steps import select_steps

    dev = (run.manifest or {}).get("device") or "cpu"
    return select_steps(decl, dev, ops.out_dtype)


def _is_pow2(s: Tensor) -> Tensor:
    mant, _ = torch.frexp(s.to(torch.float32))
    return mant.abs() == 0.5


def _pow2_premise(refs: list, defined: Tensor, scale_b: Tensor) -> tuple:
    """Where C5's power-of-two premise holds.

    Args:
        refs: the reference outputs [M, N] of every scale order (same dtype
            and device); defined: bool [M, N] (declared accumulator defined);
        scale_b: the weight scales (any shape, float).

    Returns:
        ``(keep, premise)``: the comparison mask (bool [M, N]: orders agree
        and defined) and the ``reference.readback.Deferred`` of ``(n_bad,
        all_pow2, keep_all)``: elements where the scale orders disagree
        (int), whether every ``scale_b`` is a power of two and whether
        ``keep`` is all True. Memoized on the tensors inside a
        ``reference.memo`` scope: without an overflow at risk the references
        are the layer's memoized ones, so a sweep batch computes this once,
        not once per cell.
    """
    from reference.bits import bits_of

    def ask():
        b0 = bits_of(refs[0])
        agree = torch.ones_like(b0, dtype=torch.bool)
        for r in refs[1:]:
            agree &= bits_of(r) == b0
        keep = agree & defined
        parts = [(~agree).sum(), _is_pow2(scale_b).all(), keep.all()]
        return keep, readback.ask(parts, lambda v: (int(v[0]), bool(v[1]), bool(v[2])))

    return memo.cached("pow2_premise", tuple(refs) + (defined, scale_b), ask)


def check_pow2_bit_identity(spec, ops, run, acc=None, exact=None) -> CheckResult:
    """C5: in power-of-two scale mode, output bits vs the reference, 0 ulp.

    n/a unless ``ops.scale_mode == "pow2"``. The reference is the canonical
    ``a_then_w`` order with the kernel's declared bias point (see module
    docstring for why the bias point is the declared one); elements where the
    reference's three scale orders disagree are excluded and counted.

    Args/Returns: as :func:`check_declared_contract`; evidence adds
    ``reference`` (contract used), ``premise_violations`` and
    ``scale_b_all_pow2``.
    """
    name = "pow2_bit_identity"
    if ops.scale_mode != "pow2":
        return not_applicable(C5, f"scale mode {ops.scale_mode!r}: C5 applies to power-of-two weight scales only")
    early = _unusable_output(C5, name, ops, run)
    if early:
        return early
    exact = _exact(ops, exact)
    bp = spec.contract.bias_point
    (out, ref, keep, dacc), premise = _c5_inputs(spec, ops, run, exact)
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
    return res


def check_real_scale_spacing(spec, ops, run, acc=None, exact=None) -> CheckResult:
    """C6: under real scales, output within 1 bf16 spacing of the reference.

    n/a when ``ops.scale_mode == "pow2"`` (C5 covers it). Reference: scale
    order ``a_then_w`` with the kernel's declared bias point (module docstring).

    Args/Returns: as :func:`check_declared_contract`; evidence adds ``reference``.
    """
    name = "real_scale_spacing"
    if ops.scale_mode == "pow2":
        return not_applicable(C6, "scale mode 'pow2': C6 applies to real scales (C5 covers pow2)")
    early = _unusable_output(C6, name, ops, run)
    if early:
        return early
    exact = _exact(ops, exact)
    c = EpilogueContract("a_then_w", spec.contract.bias_point)
    out, ref, mask, dacc = _c6_inputs(spec, ops, run, exact)
    n_over, ev = compare_bits(out, ref, 1, ops, exact, mask=mask)
    ev["reference"] = c.to_dict()
    _overflow_evidence(ev, dacc, out, ops, c, exact, 1)
    return _result(C6, name, n_over, ev, f"the reference ({c.label()})")
