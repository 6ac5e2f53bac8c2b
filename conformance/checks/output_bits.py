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
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from conformance.checks.compare import compare_bits, output_problem, skipped_reason
from conformance.checks.result import CheckResult, not_applicable
from reference.contract import SCALE_ORDERS, EpilogueContract

C5, C6, C8 = "C5", "C6", "C8"


def _exact(ops, exact: Optional[Tensor]) -> Tensor:
    if exact is not None:
        return exact
    from reference.accumulate import exact_int_mm
    return exact_int_mm(ops.a.cpu(), ops.b.cpu())


def reference_output(ops, contract: EpilogueContract, exact: Optional[Tensor] = None) -> Tensor:
    """Reference output of ``ops`` under ``contract``.

    Returns:
        out_dtype [M, N] (CPU): ``reference.epilogue.apply_epilogue`` on the
        exact int64 accumulator of ``ops.a @ ops.b.T``.
    """
    from reference.epilogue import apply_epilogue
    return apply_epilogue(_exact(ops, exact), ops.scale_a.cpu(), ops.scale_b.cpu(), contract,
                          bias=None if ops.bias is None else ops.bias.cpu(),
                          out_dtype=ops.out_dtype)


def _result(check_id: str, name: str, n_over: int, ev: dict, what: str) -> CheckResult:
    n = ev["n_compared"]
    if n_over == 0:
        extra = f" ({ev['n_differ']} within tolerance)" if ev["n_differ"] else ""
        return CheckResult(check_id, name, "pass",
                           f"{n} elements within {ev['tol_ulp']} ulp of {what}{extra}", ev)
    w = ev.get("worst", {})
    return CheckResult(
        check_id, name, "fail",
        f"{n_over}/{n} elements over {ev['tol_ulp']} ulp of {what} (max {ev['max_ulp']} ulp); "
        f"worst at {w.get('index')}: out {w.get('out_bits')} vs ref {w.get('ref_bits')}", ev)


def _kernel_failure(check_id: str, name: str, problem: str, ops) -> CheckResult:
    return CheckResult(check_id, name, "fail", problem,
                       {"kernel_error": problem, "operand_digests": ops.digests()})


def _unusable_output(check_id: str, name: str, ops, run) -> Optional[CheckResult]:
    """The verdict when there is no output to compare: ``n/a`` if the kernel
    could not run here, a kernel failure if it raised or returned a wrong
    shape / dtype / NaN output; None when the output can be compared."""
    why = skipped_reason(run)
    if why:
        return not_applicable(check_id, why)
    problem = output_problem(run.output, (ops.m, ops.n), ops.out_dtype, run.error)
    return _kernel_failure(check_id, name, problem, ops) if problem else None


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
    if steps is not None:  # a step-list declaration (reference.epilogue_steps)
        from reference.epilogue_steps import apply_steps, steps_label
        ref = apply_steps(exact, ops.scale_a.cpu(), ops.scale_b.cpu(), steps,
                          bias=None if ops.bias is None else ops.bias.cpu(),
                          out_dtype=ops.out_dtype)
        n_over, ev = compare_bits(run.output, ref, 0, ops, exact)
        ev["contract"], ev["steps"] = spec.contract.to_dict(), steps.to_dict()
        return _result(C8, name, n_over, ev, f"declared steps [{steps_label(steps)}]")
    ref = reference_output(ops, spec.contract, exact)
    n_over, ev = compare_bits(run.output, ref, 0, ops, exact)
    ev["contract"] = spec.contract.to_dict()
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
        return not_applicable(C5, f"scale mode {ops.scale_mode!r}: C5 applies to power-of-two "
                                  f"weight scales only")
    early = _unusable_output(C5, name, ops, run)
    if early:
        return early
    exact = _exact(ops, exact)
    bp = spec.contract.bias_point
    refs = [reference_output(ops, EpilogueContract(o, bp), exact) for o in SCALE_ORDERS]
    from reference.bits import bits_of
    b0 = bits_of(refs[0])
    agree = torch.ones_like(b0, dtype=torch.bool)
    for r in refs[1:]:
        agree &= bits_of(r) == b0
    n_bad = int((~agree).sum())
    n_over, ev = compare_bits(run.output, refs[0], 0, ops, exact,
                              mask=None if n_bad == 0 else agree)
    ev["reference"] = EpilogueContract("a_then_w", bp).to_dict()
    ev["premise_violations"] = n_bad
    ev["scale_b_all_pow2"] = bool(_is_pow2(ops.scale_b).all())
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
    ref = reference_output(ops, c, exact)
    n_over, ev = compare_bits(run.output, ref, 1, ops, exact)
    ev["reference"] = c.to_dict()
    return _result(C6, name, n_over, ev, f"the reference ({c.label()})")
