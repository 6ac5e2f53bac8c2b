"""C17 zero_point: asymmetric activations bit-exact against the declared reference (``reference.asymmetric``).

On every case of ``conformance.cases.asymmetric.asymmetric_cases(spec)`` (the zero-point forms the kernel declares):
the output's bits equal the declared epilogue (``kernels.spec.declared_epilogue`` for the case's device and out
dtype) applied to ``float32(acc - azp * azp_adj)`` formed in int32, as C8 holds a symmetric call, 0 ulp. The
correction's int32 headroom follows the accumulator rule of ``checks/overflow.py``: an element whose exact corrected
value is inside int32 is judged whatever its intermediates (int32 arithmetic wraps back), except that where the raw
``a @ b.T`` leaves int32 only a ``wrap`` kernel is judged; an element whose corrected value leaves int32 is judged
for ``wrap`` (``wrap32`` of it, or the exact value: a wider correction never wraps) and excluded for ``saturate`` /
``undefined`` (counted: ``n_excluded``). Then the STALE precomputed correction probe (``stale_pair``): one call, ``b``
updated in place by the caller, a second call with the matching new ``azp_adj``: its bits must be the new operands'
reference. A case outside the kernel's declaration or constraints is recorded as not run; no case run is ``n/a``."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from conformance.cases.asymmetric import asymmetric_cases, stale_pair
from conformance.checks.output_bits import overflow_of
from conformance.checks.result import CheckResult, Verdict
from conformance.kernels.declared import declared_reference
from conformance.kernels.runner import pick_device, run_kernel
from conformance.kernels.spec import declared_epilogue
from reference.bits import bits_of, isnan_of
from reference.epilogue import apply_steps
from reference.errors import first_line
from reference.operands import GemmOperands

CHECK_ID, NAME = "C17", "zero_point"


def _same(out: Tensor, ref: Tensor) -> Tensor:
    """bool [M, N]: same bits, or both NaN."""
    return (bits_of(out) == bits_of(ref)) | (isnan_of(out) & isnan_of(ref))


def judge(spec, ops: GemmOperands, out: Tensor, device_type: Optional[str] = None) -> dict:
    """One case's comparison (module docstring): ``n_bad``, ``n_judged``, ``n_excluded``, ``outside_int32``,
    ``raw_outside_int32``, ``first`` (index, kernel and reference values, exact corrected value) when ``n_bad``."""
    steps = declared_epilogue(spec, device_type, ops.out_dtype).steps
    ref = declared_reference(spec, ops, device_type).asymmetric
    assert ref is not None  # an asymmetric case carries azp_adj
    out = out.to("cpu")
    wrap = overflow_of(spec, device_type) == "wrap"
    ok = _same(out, ref.output)
    if wrap and bool(ref.outside.any()):  # the exact corrected value also accepted
        sa, sw = _scales(ops)
        exact = apply_steps(ref.corrected, sa, sw, steps, bias=ops.bias, out_dtype=ops.out_dtype)
        ok |= ref.outside & _same(out, exact)
    judged = (~ref.outside & (~ref.raw_outside | wrap)) | (ref.outside & wrap)
    bad = judged & ~ok
    ev = {
        "case": ops.name,
        "zero_point": ops.zero_point,
        "family": (ops.meta or {}).get("family"),
        "n_bad": int(bad.sum()),
        "n_judged": int(judged.sum()),
        "n_excluded": int((~judged).sum()),
        "outside_int32": ref.outside_int32,
        "raw_outside_int32": ref.raw_outside_int32,
    }
    if ev["n_bad"]:
        i, j = (int(v) for v in bad.nonzero()[0])
        ev["first"] = {
            "index": [i, j],
            "kernel": float(out[i, j]),
            "reference": float(ref.output[i, j]),
            "corrected": int(ref.corrected[i, j]),
        }
    return ev


def _scales(ops: GemmOperands) -> tuple:
    m, n = ops.m, ops.n
    sa = ops.scale_a.reshape(-1).expand(m) if ops.scale_a.numel() == 1 else ops.scale_a.reshape(m)
    sw = ops.scale_b.reshape(-1).expand(n) if ops.scale_b.numel() == 1 else ops.scale_b.reshape(n)
    return sa.contiguous(), sw.contiguous()


def stale_probe(spec, kind: str, device: Optional[str] = None) -> dict:
    """The stale precomputed correction probe for ``kind`` (module docstring) -> ``{"kind", "verdict" ("pass" /
    "fail" / "not run"), "summary", ...}``. The kernel is called directly on tensors the probe owns (``b`` updated in
    place between the calls, as a caller reloading weights does); an exception is a failure."""
    first, second = stale_pair(kind)
    dev, why = pick_device(spec, device)
    viol = spec.constraints.violations(first.m, first.k, first.n) + spec.azp_violations(kind)
    if dev is None or viol:
        return {"kind": kind, "verdict": "not run", "summary": why if dev is None else "; ".join(viol)}
    d1, d2 = first.to(dev).dense(), second.to(dev)
    assert d1.azp_adj is not None and d2.azp_adj is not None
    b = d1.b  # the caller's weight buffer (a copy the probe owns)
    kw = dict(out_dtype=first.out_dtype, bias=d1.bias)
    try:
        spec.scaled_mm(d1.a, b, d1.scale_a, d1.scale_b, **kw, azp_adj=d1.azp_adj, azp=d1.azp)
        b.copy_(d2.b)
        out = spec.scaled_mm(d1.a, b, d1.scale_a, d1.scale_b, **kw, azp_adj=d2.azp_adj.clone(), azp=d1.azp)
    except Exception as e:  # noqa: BLE001 -- the kernel's failure is the probe's verdict
        return {"kind": kind, "verdict": "fail", "summary": f"the kernel raised {type(e).__name__}: {first_line(e)}"}
    ev = judge(spec, second, out, torch.device(dev).type)
    if ev["n_bad"]:
        summary = (
            f"stale correction: after b was updated in place and the matching azp_adj passed, {ev['n_bad']} of "
            f"{ev['n_judged']} elements differ from the new operands' reference (first {ev['first']})"
        )
        return {"kind": kind, "verdict": "fail", "summary": summary, **ev}
    return {"kind": kind, "verdict": "pass", "summary": "the second call gives the updated operands' bits", **ev}


def check_zero_point(spec, device: Optional[str] = None) -> CheckResult:
    """C17 on ``spec`` (module docstring): ``fail`` when a case or the stale probe differs from the declared
    reference or the kernel raised / broke the interface there; ``pass`` when at least one case ran and none did;
    ``n/a`` for a kernel declaring no zero point, or when nothing could run here. Evidence: ``cases`` (one row per
    case run), ``not_run`` (case, reason), ``stale`` (one per declared form), ``n_failed``."""
    if not spec.is_azp:
        why = "the kernel declares no asymmetric activations (azp=)"
        return CheckResult(CHECK_ID, NAME, Verdict.NOT_APPLICABLE, why, {"reason": why})
    rows: list[dict] = []
    not_run: list[dict] = []
    failed: list[str] = []
    for ops in asymmetric_cases(spec):
        run = run_kernel(spec, ops, device)
        if run.manifest.get("skipped"):
            not_run.append({"case": ops.name, "reason": run.error})
            continue
        if run.output is None:
            failed.append(f"{ops.name}: {run.error}")
            rows.append({"case": ops.name, "error": run.error})
            continue
        ev = judge(spec, ops, run.output, run.manifest.get("device"))
        rows.append(ev)
        if ev["n_bad"]:
            failed.append(f"{ops.name}: {ev['n_bad']} of {ev['n_judged']} elements differ (first {ev['first']})")
    stale = [stale_probe(spec, kind, device) for kind in spec.azp.kinds]
    failed += [f"stale {s['kind']}: {s['summary']}" for s in stale if s["verdict"] == "fail"]
    evidence = {"cases": rows, "not_run": not_run, "stale": stale, "n_failed": len(failed)}
    if failed:
        summary = f"{len(failed)} failure(s): {failed[0]}" + (f" (+{len(failed) - 1} more)" if len(failed) > 1 else "")
        return CheckResult(CHECK_ID, NAME, Verdict.FAIL, summary, evidence)
    if not rows:
        why = "no asymmetric case could run here: " + (str(not_run[0]["reason"]) if not_run else "none generated")
        return CheckResult(CHECK_ID, NAME, Verdict.NOT_APPLICABLE, why, evidence)
    excl = sum(r.get("n_excluded", 0) for r in rows)
    summary = f"{len(rows)} asymmetric case(s) bit-exact to the declared int32 correction, stale probe passed"
    if excl:
        summary += f"; {excl} element(s) past int32 excluded (declared overflow {overflow_of(spec, None)})"
    return CheckResult(CHECK_ID, NAME, Verdict.PASS, summary, evidence)
