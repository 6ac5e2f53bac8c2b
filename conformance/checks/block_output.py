"""The per-case checks of a block-scaled kernel (issue 46; ``KernelSpec.block``): C8 bit-exact against the declared
block accumulation, C5 contract-independent on power-of-two block scales, the rest n/a with the reason.

C8 (:func:`check_block_declared`): ``reference.block.evaluate.reference_block_scaled_mm`` of the kernel's declaration
(sizes, accumulation, epilogue; an e4m3 partial through the accumulator declared on the device it ran on), 0 ulp. A
failure names the first differing element, both bit patterns and the declaration, and says when the kernel's bits are
those of another form of ``reference.block.contract.FIELD_FORMS`` (same order).

C5 (:func:`check_block_pow2`), on ``pow2`` cases. Claim: where every intermediate a form may round (``p*s_a``,
``p*s_w``, ``s_a*s_w``, ``t = p*s_a*s_w``) is exact in float32 and the scaled partials ``t_kb`` of an element are
multiples of ``u`` (the lowest set bit of any nonzero ``t_kb``, ``u >= 2**-149``) with ``sum_kb |t_kb| < 2**24 u``
(``order_free_elements``), every legal block accumulation gives the same bits. Proof: every ``mul`` step is exact,
so each form's block term is exactly ``t_kb``, and ``fmaf(x, s, acc) = r(x*s + acc) = r(t_kb + acc)``, so every form
computes ``acc <- r(acc + t_kb)`` from ``+0.0``. Any partial sum of any order, chunk or chunk total is the sum of a
subset of the ``t_kb``: a multiple ``c u`` with ``|c| < 2**24``, a float32 value (``u >= 2**-149``, subnormals
included), so no addition rounds; a zero sum is ``+0.0`` in every order (RNE gives ``+0`` for ``x + (-x)`` and
``+0 + -0``, and every accumulator starts at ``+0.0``). The float32 results are equal, so the declared epilogue gives
equal bits. Power-of-two scales with small partials meet it (the cases assert it); elements that do not are excluded
and counted (``premise_violations``). C5 compares with ``mul s_a; mul s_w; add`` sequential and the declared
epilogue."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import torch
from torch import Tensor

from conformance.checks.case_check import CaseCheck, ObservedAccumulator
from conformance.checks.compare import bit_differences, compare_bits
from conformance.checks.output_bits import run_device, unusable_output
from conformance.checks.result import CHECK_NAMES, CheckResult, Verdict, not_applicable
from conformance.kernels.declared import declared_reference
from conformance.kernels.runner import KernelRun
from conformance.kernels.spec import KernelSpec
from reference.bits import bits_of
from reference.block.contract import FIELD_FORMS, parse_block_accumulation
from reference.block.evaluate import order_free_elements
from reference.operands import GemmOperands

C5, C8 = "C5", "C8"
#: the form C5 compares with (any legal form gives its bits where C5's premise holds)
POW2_FORM = "mul s_a; mul s_w; add"
#: why the per-case checks a block-scaled kernel does not take are n/a (check id -> one line)
BLOCK_NOT_APPLICABLE = {
    "C3": "block-scaled: each K-block's int32 partial is at most block_k * 2^14 (< 2^31); no int32 headroom to check",
    "C4": "block-scaled: the accumulator is float32 across K-blocks by contract; C8 emulates it bit for bit",
    "C6": "block-scaled: C8 is bit-exact against the declared block accumulation on every case (C5: pow2 scales)",
    "C12": "block-scaled: the e4m3 block cases are accumulator-safe per K-block, so C8 judges them bit-exactly",
}


def block_reference(spec: KernelSpec, ops: GemmOperands, run: KernelRun, accumulation=None) -> Tensor:
    """[M, N] out dtype on ``ops``' device: ``kernels.declared.declared_reference`` of the kernel's block
    declaration (``accumulation`` overrides its block accumulation) on the device ``run`` ran on."""
    assert spec.block is not None  # only a block-scaled kernel's checks call this
    return declared_reference(spec, ops, run_device(run), accumulation).output


def _hex(v: int, dtype: torch.dtype) -> str:
    return f"0x{int(v) & (0xFFFFFFFF if dtype == torch.float32 else 0xFFFF):0{8 if dtype == torch.float32 else 4}X}"


def first_difference(out: Tensor, ref: Tensor, mask: Optional[Tensor] = None) -> Optional[dict]:
    """``{"index": [i, j], "out_bits", "ref_bits", "out", "ref"}`` of the first element (row-major) whose bits
    differ (NaN payloads alike, the sign of zero counts), or None."""
    differ = bit_differences(out, ref)[0]
    if mask is not None:
        differ &= mask
    nz = differ.nonzero()
    if nz.numel() == 0:
        return None
    i, j = (int(v) for v in nz[0])
    o, r = out[i, j].reshape(1), ref[i, j].reshape(1)
    return {
        "index": [i, j],
        "out_bits": _hex(int(bits_of(o)[0]), out.dtype),
        "ref_bits": _hex(int(bits_of(r)[0]), out.dtype),
        "out": float(o[0]),
        "ref": float(r[0]),
    }


def other_field_form(spec: KernelSpec, ops: GemmOperands, run: KernelRun, out: Tensor) -> Optional[str]:
    """The first form of ``FIELD_FORMS`` (in the declared order, other than the declared form) whose reference has
    the kernel's bits on every element, or None."""
    blk = spec.block
    assert blk is not None
    declared = blk.accumulation
    for text in FIELD_FORMS:
        form = parse_block_accumulation(text)
        form = replace(form, split_k=declared.split_k, interleaved=declared.interleaved)
        if (form.muls, form.fma) == (declared.muls, declared.fma):
            continue
        ref = block_reference(spec, ops, run, form)
        if not bit_differences(out, ref)[0].any():
            return form.label()
    return None


def _compared(spec: KernelSpec, ops: GemmOperands, run: KernelRun, ref: Tensor, mask: Optional[Tensor]):
    assert run.output is not None and ops.block_size is not None  # unusable_output returned None first
    out = run.output.to(ref.device)
    n_over, ev = compare_bits(out, ref, 0, mask=mask)
    ev["declaration"] = spec.block.to_dict() if spec.block is not None else None
    ev["block_size"] = list(ops.block_size)
    first = first_difference(out, ref, mask) if n_over else None
    if first is not None:
        ev["first_difference"] = first
    return out, n_over, ev, first


def _failure_line(n_over: int, ev: dict, first: dict, what: str) -> str:
    i, j = first["index"]
    return (
        f"{n_over}/{ev['n_compared']} elements differ in bits from {what}; first at [{i}, {j}]: out "
        f"{first['out_bits']} ({first['out']!r}) vs ref {first['ref_bits']} ({first['ref']!r})"
    )


#: block case values whose K-block sums are not exact at 14 bits (``conformance.cases.block``): C8 judges them
#: against an ``exact`` declared accumulator only (an emulated float32 accumulator would assume a summation order)
EXACT_ONLY_VALUES = ("fp8wide",)
NOT_EXACT_DECLARED = (
    "this case's K-block sums need more than 24 bits: judged only against an 'exact' declared accumulator "
    "(declared {}; the emulation of another would assume a summation order)"
)


def check_block_declared(
    spec: KernelSpec,
    ops: GemmOperands,
    run: KernelRun,
    acc: Optional[ObservedAccumulator] = None,
    exact: Optional[Tensor] = None,
) -> CheckResult:
    """C8 of a block-scaled case (module docstring), 0 ulp. Evidence: ``compare_bits``' plus ``declaration``,
    ``block_size``, ``first_difference`` and ``kernel_form`` (the other field form whose bits the kernel gives)."""
    name = CHECK_NAMES[C8]
    early = unusable_output(C8, name, ops, run)
    if early:
        return early
    assert spec.block is not None
    model = spec.accumulator_on(run_device(run)) if spec.is_fp8 else None
    if (ops.meta or {}).get("block", {}).get("values") in EXACT_ONLY_VALUES and (
        model is None or model.kind != "exact"
    ):
        return not_applicable(C8, NOT_EXACT_DECLARED.format(model.label() if model is not None else "none"))
    ref = block_reference(spec, ops, run)
    out, n_over, ev, first = _compared(spec, ops, run, ref, None)
    what = f"the declared block accumulation [{spec.block.label()}]"
    if first is None:
        return CheckResult(C8, name, Verdict.PASS, f"{ev['n_compared']} elements bit-identical to {what}", ev)
    line = _failure_line(n_over, ev, first, what)
    other = other_field_form(spec, ops, run, out)
    if other is not None:
        ev["kernel_form"] = other
        line += f"; the kernel's bits are those of {other!r}"
    return CheckResult(C8, name, Verdict.FAIL, line, ev)


def check_block_pow2(
    spec: KernelSpec,
    ops: GemmOperands,
    run: KernelRun,
    acc: Optional[ObservedAccumulator] = None,
    exact: Optional[Tensor] = None,
) -> CheckResult:
    """C5 of a block-scaled case (module docstring): on a ``pow2`` case (scale mode, or ``meta["scale_kind"]`` of a
    ue8m0 capture, ``reference.model.capture.iter_layer_operands_block``), the output bits vs :data:`POW2_FORM` with
    the declared epilogue where the premise holds, 0 ulp. Evidence adds ``premise_violations``, ``reference``."""
    name = CHECK_NAMES[C5]
    if ops.scale_mode != "pow2" and (ops.meta or {}).get("scale_kind") != "pow2":
        return not_applicable(C5, f"scale mode {ops.scale_mode!r}: C5 applies to power-of-two block scales only")
    early = unusable_output(C5, name, ops, run)
    if early:
        return early
    model = spec.accumulator_on(run_device(run)) if spec.is_fp8 else None
    keep = order_free_elements(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.block_size, model)
    ref = block_reference(spec, ops, run, POW2_FORM)
    out, n_over, ev, first = _compared(spec, ops, run, ref, keep)
    ev["premise_violations"] = int((~keep).sum())
    ev["reference"] = POW2_FORM
    assert spec.block is not None
    what = f"every legal block accumulation (power-of-two block scales; epilogue {spec.block.epilogue.label()})"
    excluded = f"; {ev['premise_violations']} elements excluded (premise)" if ev["premise_violations"] else ""
    if ev["n_compared"] == 0:
        return not_applicable(C5, "no element meets the power-of-two premise", **ev)
    if first is None:
        return CheckResult(C5, name, Verdict.PASS, f"{ev['n_compared']} elements bit-identical to {what}{excluded}", ev)
    return CheckResult(C5, name, Verdict.FAIL, _failure_line(n_over, ev, first, what) + excluded, ev)


def block_not_applicable(check_id: str) -> CaseCheck:
    """The per-case check ``check_id`` of a block-scaled kernel: n/a with :data:`BLOCK_NOT_APPLICABLE`'s reason."""
    reason = BLOCK_NOT_APPLICABLE[check_id]

    def check(
        spec: KernelSpec,
        ops: GemmOperands,
        run: KernelRun,
        acc: Optional[ObservedAccumulator] = None,
        exact: Optional[Tensor] = None,
    ) -> CheckResult:
        return not_applicable(check_id, reason)

    check.__name__ = f"block_{check_id}_not_applicable"
    return check
