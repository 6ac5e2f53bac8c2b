"""C12 fp8_error_bound (DESIGN.md section 3b): an FP8 kernel's output on real operands lies within the bound its
*declared* accumulator and epilogue imply, element by element; the observed error is reported beside the bound.

Derivation. Let ``S`` be the exact sum of the e4m3 products of an element (``reference.fp8.exact_fp8_mm``) and ``A``
the float32 accumulator of a kernel obeying the declared model. ``reference.fp8.accumulation_bound`` gives ``beta``
with ``|A - S| <= beta`` for every order and grouping; so ``A`` is a float32 in ``[lo, hi]``, ``lo`` = ``S - beta``
rounded down to float32, ``hi`` = ``S + beta`` rounded up (float64 arithmetic, rounded outward). Every epilogue step
(``reference.contract``: ``cast``, ``mul`` by a fixed operand, ``add bias``, ``fma``, each one monotone rounding of a
monotone function of the current value) is monotone in the accumulator: non-decreasing where the product of the
element's multipliers is >= 0, non-increasing where it is < 0. So the declared epilogue ``E`` maps ``[lo, hi]`` into
``[min(E(lo), E(hi)), max(E(lo), E(hi))]``: the kernel's output must lie there (the tightest interval that holds for
every kernel obeying the declaration; no tolerance). Reported error: ``|out - E(fl32(S))|`` against the bound
``max(|E(lo) - E(fl32(S))|, |E(hi) - E(fl32(S))|)`` at that element. ``exact``: ``beta = 0`` and ``A = fl32(S)``, so
the output must equal ``E(fl32(S))`` bit for bit (the sign of zero included). Where an endpoint is NaN, only NaN is
accepted there.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Union

import torch
from torch import Tensor

from conformance.checks.case_check import ObservedAccumulator
from conformance.checks.output_bits import case_epilogue, run_device, unusable_output
from conformance.checks.result import CheckResult, Verdict, not_applicable
from conformance.kernels.runner import KernelRun
from conformance.kernels.spec import KernelSpec
from reference import memo
from reference.bits import bits_of
from reference.contract import EpilogueContract, EpilogueSteps, from_contract
from reference.epilogue import apply_steps
from reference.fp8 import PRODUCT_SHIFT, AccumulatorModel, accumulation_bound, exact_fp8_mm, parse_accumulator
from reference.fp8.exact import fixed_to_fp32
from reference.operands import GemmOperands

C12 = "C12"
NAME = "fp8_error_bound"


def _outward_fp32(x: Tensor, down: bool) -> Tensor:
    """float64 ``x`` rounded to float32 toward -inf (``down``) or +inf (exact where representable)."""
    y = x.to(torch.float32)
    off = (y.to(torch.float64) > x) if down else (y.to(torch.float64) < x)
    step = torch.full_like(y, -math.inf if down else math.inf)
    return torch.where(off, torch.nextafter(y, step), y)


def accumulator_interval(
    a: Tensor, b: Tensor, model: Union[str, AccumulatorModel]
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(exact32, lo, hi, beta)``: the exact sum rounded once to float32 and the float32 interval ``[lo, hi]`` holding
    the accumulator of every kernel obeying ``model`` (module docstring), all [M, N] on a's device; ``beta`` float64.
    a: e4m3 [M, K]; b: e4m3 [N, K]; ``model``: text or model. OperandError as :func:`reference.fp8.exact_fp8_mm`."""
    model = parse_accumulator(model)
    units = exact_fp8_mm(a, b)
    exact32 = fixed_to_fp32(units, PRODUCT_SHIFT)
    beta = accumulation_bound(a, b, model)
    if model.kind == "exact":
        return exact32, exact32, exact32, beta
    s = units.to(torch.float64) * 2.0**-PRODUCT_SHIFT  # |units| < 2**53 for K <= 2**17: exact
    lo64 = torch.nextafter(s - beta, torch.full_like(s, -math.inf))
    hi64 = torch.nextafter(s + beta, torch.full_like(s, math.inf))
    return exact32, _outward_fp32(lo64, True), _outward_fp32(hi64, False), beta


def _steps(epilogue: Union[EpilogueContract, EpilogueSteps, object]) -> object:
    return from_contract(epilogue) if isinstance(epilogue, EpilogueContract) else epilogue


def fp8_error_bound(
    out: Tensor,
    ops: GemmOperands,
    accumulator: Union[str, AccumulatorModel],
    epilogue: Union[EpilogueContract, EpilogueSteps],
    max_listed: int = 8,
) -> CheckResult:
    """C12 on one output: ``out`` [M, N] ``ops.out_dtype`` of ``scaled_mm`` on ``ops`` (GemmOperands with e4m3
    ``a`` / ``b``), held within the interval the declared ``accumulator`` (text or model) and ``epilogue`` (an
    EpilogueContract or anything ``reference.contract.parse_steps`` reads) imply (module docstring), on the CPU.
    Evidence: ``accumulator``, ``n_compared``, ``n_bound_over``, ``max_abs_err`` with ``bound_at_max_err`` and
    ``ratio_at_max_err``, ``max_bound``, ``max_ratio``, ``worst`` (index, out, reference, interval) and the first
    ``max_listed`` elements out of bound. ContractError / OperandError on a bad declaration or operands."""
    model = parse_accumulator(accumulator)
    steps = _steps(epilogue)
    # on the operands' device (exact there: float64 GEMMs of integers), once per operands in a reference.memo scope
    a, b = ops.a, ops.b
    interval = memo.cached(("fp8_interval", model.label()), (a, b), lambda: accumulator_interval(a, b, model))
    exact32, lo, hi, beta = (t.cpu() for t in interval)
    sa, sb = ops.scale_a.cpu(), ops.scale_b.cpu()
    bias = None if ops.bias is None else ops.bias.cpu()

    def e(x: Tensor) -> Tensor:
        return apply_steps(x, sa, sb, steps, bias=bias, out_dtype=ops.out_dtype)

    ref = e(exact32)
    o = out.detach().cpu()
    if model.kind == "exact":
        lo_e = hi_e = ref
        ok = bits_of(o) == bits_of(ref)
    else:
        e_lo, e_hi = e(lo).double(), e(hi).double()
        lo_e, hi_e = torch.minimum(e_lo, e_hi), torch.maximum(e_lo, e_hi)  # NaN propagates
        od = o.double()
        nan_end = torch.isnan(lo_e)
        ok = torch.where(nan_end, torch.isnan(od), (od >= lo_e) & (od <= hi_e))
    od, rd = o.double(), ref.double()
    err = torch.where((od == rd) | (torch.isnan(od) & torch.isnan(rd)), torch.zeros_like(od), (od - rd).abs())
    err = torch.nan_to_num(err, nan=math.inf)
    bound = torch.maximum((lo_e.double() - rd).abs(), (hi_e.double() - rd).abs())
    bound = torch.where(lo_e.double() == hi_e.double(), torch.zeros_like(bound), torch.nan_to_num(bound, nan=0.0))
    ratio = torch.where(err == 0, torch.zeros_like(err), err / bound)  # x / 0 -> inf
    n_over = int((~ok).sum())
    n = int(ok.numel())
    i = int(torch.argmax(err).item()) if n else 0
    r = int(torch.argmax(torch.nan_to_num(ratio, nan=math.inf)).item()) if n else 0
    cols = max(int(ops.n), 1)

    def at(idx: int) -> dict:
        m, c = divmod(idx, cols)
        return {
            "index": [m, c],
            "out": float(od.reshape(-1)[idx]),
            "reference": float(rd.reshape(-1)[idx]),
            "interval": [float(lo_e.reshape(-1)[idx]), float(hi_e.reshape(-1)[idx])],
            "accumulator_bound": float(beta.reshape(-1)[idx]) if beta.numel() else 0.0,
            "abs_err": float(err.reshape(-1)[idx]),
            "bound": float(bound.reshape(-1)[idx]),
        }

    over_idx = (~ok).reshape(-1).nonzero().reshape(-1)[:max_listed].tolist()
    ev: dict[str, Any] = {
        "accumulator": model.label(),
        "epilogue": getattr(epilogue, "label", lambda: str(epilogue))(),
        "n_compared": n,
        "n_bound_over": n_over,
        "max_abs_err": float(err.max()) if n else 0.0,
        "bound_at_max_err": float(bound.reshape(-1)[i]) if n else 0.0,
        "ratio_at_max_err": float(ratio.reshape(-1)[i]) if n else 0.0,
        "max_bound": float(bound.max()) if n else 0.0,
        "max_ratio": float(ratio.reshape(-1)[r]) if n else 0.0,
        "max_accumulator_bound": float(beta.max()) if beta.numel() else 0.0,
        "worst": at(r if n_over == 0 else int(over_idx[0])) if n else {},
        "over": [at(int(j)) for j in over_idx],
    }
    head = (
        f"max |err| {ev['max_abs_err']:.6g} (bound there {ev['bound_at_max_err']:.6g}, "
        f"ratio {ev['ratio_at_max_err']:.3g}) under accumulator {model.label()!r}"
    )
    if model.kind == "exact":
        head = f"bit-exact against the exact sum's epilogue required (accumulator 'exact'); {head}"
    if n_over:
        w = ev["worst"]
        line = f"{n_over}/{n} elements outside the declared bound; first at {w['index']}: out {w['out']!r} "
        line += f"not in {w['interval']}; {head}"
        return CheckResult(C12, NAME, Verdict.FAIL, line, dict(ev, failure_kind="kernel"))
    return CheckResult(C12, NAME, Verdict.PASS, f"{n} elements within the declared bound; {head}", ev)


def no_model_reason(run: KernelRun) -> str:
    """Why no declared accumulator applies to ``run``: it ran on no device here, or on one the kernel declares none
    for."""
    dev = run_device(run)
    if dev is None:
        return "the case did not run on any device here (no declared accumulator applies)"
    return f"kernel declares no FP8 accumulator for device {dev!r}"


def check_fp8_error_bound(
    spec: KernelSpec,
    ops: GemmOperands,
    run: KernelRun,
    acc: Optional[ObservedAccumulator] = None,
    exact: Optional[Tensor] = None,
) -> CheckResult:
    """C12 as a per-case check (``check(spec, ops, run, acc=None, exact=None)``; ``acc`` / ``exact`` unused): the
    run's output against the accumulator ``spec`` declares on the device it ran on and its declared epilogue (its
    step list for that device / out dtype, else its contract). n/a: int8 operands, no declared accumulator, no
    output to compare (a wrong shape / dtype or a kernel error fails, as for C8)."""
    if getattr(spec, "operands", "int8") != "e4m3" or getattr(ops.a, "dtype", None) != torch.float8_e4m3fn:
        return not_applicable(C12, "int8 operands: C12 bounds FP8 (e4m3) accumulation")
    early = unusable_output(C12, NAME, ops, run)
    if early:
        return early
    assert run.output is not None  # else unusable_output gave the verdict
    model: Optional[AccumulatorModel] = spec.accumulator_on(run_device(run))
    if model is None:
        return not_applicable(C12, no_model_reason(run))
    return fp8_error_bound(run.output, ops, model, case_epilogue(spec, ops, run).steps)
