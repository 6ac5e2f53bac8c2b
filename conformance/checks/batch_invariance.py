"""Check C9 batch_invariance: a row's output bits do not depend on the batch or the call.

:func:`check_batch_invariance` recomputes sampled rows of the most
epilogue-discriminating cases (:func:`select_cases`) and of :func:`probe_cases`
alone, in batches of :data:`BATCH_SIZES` and in a repeated call, and compares
canonical bits (README.md here). A block-scaled case (``GemmOperands.block_size``) keeps its block size; its rows'
discrimination counts where the field's block accumulation forms disagree, its other rows carry scale_a rows
of the case, and the per-token probes do not apply.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from conformance.checks.result import CheckResult, Verdict, not_applicable
from conformance.kernels.runner import run_kernel
from conformance.kernels.spec import FP8
from reference.bits import bits_of
from reference.block.contract import FIELD_FORMS
from reference.block.evaluate import reference_block_scaled_mm
from reference.contract import BIAS_POINTS, SCALE_ORDERS, EpilogueContract
from reference.epilogue import apply_epilogue
from reference.fp8 import E4M3, exact_accumulator
from reference.operands import GemmOperands

CHECK_ID = "C9"
NAME = "batch_invariance"
#: Batch sizes besides M = 1 and the case's own: both sides of the 16-row tile
#: edge (and torch._int_mm's CUDA minimum M = 17) and a larger prefill.
BATCH_SIZES = (2, 5, 16, 17, 64)
#: Fixed cases sampled from the suite (C9's own probes come on top).
MAX_CASES = 4
#: Rows sampled per case.
ROWS_PER_CASE = 2
#: Largest M * K * N of a fixed case C9 selects (bounds the cost of a batch of 64).
MAX_CASE_WORK = 1 << 21
#: Largest K of a fixed case C9 selects (batch dependence shows at any K).
MAX_CASE_K = 4096
#: Differences listed individually in the evidence (the count is complete).
MAX_LISTED = 10


def random_operand(shape, g: torch.Generator, dtype: torch.dtype = torch.int8) -> Tensor:
    """Seeded random int8 [shape] in [-128, 127], or e4m3 (``dtype`` float8_e4m3fn): random bytes, the two NaN
    encodings (0x7F, 0xFF) replaced by +-448 (0x7E, 0xFE)."""
    v = torch.randint(-128, 128, tuple(shape), generator=g, dtype=torch.int16).to(torch.int8)
    if dtype != E4M3:
        return v
    u = v.view(torch.uint8)
    return torch.where((u & 0x7F) == 0x7F, u ^ 1, u).view(E4M3)


def probe_cases(seed: int = 0, operands: str = "int8") -> list:
    """C9's seeded GemmOperands: random int8 (``operands="e4m3"``: random e4m3, :func:`random_operand`), real float32
    scales; ``probe-fp32`` (6x72x40, where scale orders differ on many elements), ``probe-bf16-bias`` (5x48x24),
    ``probe-fp16`` (4x40x24)."""
    g = torch.Generator().manual_seed(1000 + seed)
    dt = E4M3 if operands == FP8 else torch.int8

    def mk(m, k, n, dtype, bias, name):
        a = random_operand((m, k), g, dt)
        b = random_operand((n, k), g, dt)
        sa = (torch.rand(m, generator=g) * 0.02 + 1e-3).to(torch.float32)
        sb = (torch.rand(n, generator=g) * 0.002 + 1e-4).to(torch.float32)
        bb = (torch.randn(n, generator=g) * 4).to(dtype) if bias else None
        meta = {"source": "c9-probe", "seed": seed}
        return GemmOperands(a, b, sa, sb, bb, dtype, f"c9/{name}", "synthetic", meta)

    return [
        mk(6, 72, 40, torch.float32, False, "probe-fp32"),
        mk(5, 48, 24, torch.bfloat16, True, "probe-bf16-bias"),
        mk(4, 40, 24, torch.float16, False, "probe-fp16"),
    ]


def _row_discrimination(ops) -> Tensor:
    """int64 [M]: per row, elements where the legal epilogues' references disagree (a block case: the
    ``FIELD_FORMS`` block accumulations with bias added before the cast)."""
    if ops.block_size is not None:
        args = (ops.a.cpu(), ops.b.cpu(), ops.scale_a.cpu(), ops.scale_b.cpu(), ops.block_size)
        bias = None if ops.bias is None else ops.bias.cpu()
        outs = [
            bits_of(reference_block_scaled_mm(*args, form, "add bias; cast out", bias, ops.out_dtype))
            for form in FIELD_FORMS
        ]
        differ = torch.zeros_like(outs[0], dtype=torch.bool)
        for o in outs[1:]:
            differ |= o != outs[0]
        return differ.sum(dim=1)
    exact = exact_accumulator(ops.a.cpu(), ops.b.cpu())
    bias = None if ops.bias is None else ops.bias.cpu()
    points = BIAS_POINTS if bias is not None else BIAS_POINTS[:1]
    outs = [
        bits_of(
            apply_epilogue(
                exact, ops.scale_a.cpu(), ops.scale_b.cpu(), EpilogueContract(o, p), bias=bias, out_dtype=ops.out_dtype
            )
        )
        for o in SCALE_ORDERS
        for p in points
    ]
    differ = torch.zeros_like(outs[0], dtype=torch.bool)
    for o in outs[1:]:
        differ |= o != outs[0]
    return differ.sum(dim=1)


def select_cases(cases: Sequence, max_cases: int = MAX_CASES) -> list[tuple]:
    """``[(ops, row discrimination int64 [M])]``: at most ``max_cases`` of ``cases``
    within :data:`MAX_CASE_WORK` / :data:`MAX_CASE_K`, the most discriminating of
    each (out_dtype, bias) group first, then by discrimination."""
    scored = []
    for i, ops in enumerate(cases):
        if ops.m * ops.k * ops.n > MAX_CASE_WORK or ops.k > MAX_CASE_K:
            continue
        try:
            disc = _row_discrimination(ops)
        except Exception:  # noqa: BLE001 -- a case the reference refuses: not a probe
            continue
        scored.append((int(disc.sum()), -i, ops, disc))
    scored.sort(key=lambda t: (t[0], t[1]), reverse=True)
    picked: list[tuple] = []
    groups: set[tuple] = set()
    for t in scored:  # one per group first
        g = (t[2].out_dtype, t[2].bias is not None)
        if g not in groups and len(picked) < max_cases:
            groups.add(g)
            picked.append(t)
    for t in scored:
        if len(picked) >= max_cases:
            break
        if t not in picked:
            picked.append(t)
    return [(t[2], t[3]) for t in picked]


def _bits(x: Tensor) -> Tensor:
    """int64 bit patterns, every NaN mapped to -1."""
    b = bits_of(x)
    return torch.where(torch.isnan(x), torch.full_like(b, -1), b)


def batch_operands(ops, rows: list[int], size: int, g: torch.Generator):
    """``(GemmOperands, positions)``: ``size`` rows, ``ops``' ``rows`` at seeded positions among random ones."""
    m0, k = ops.m, ops.k
    a0 = ops.a.contiguous()
    perm = torch.randperm(size, generator=g).tolist()
    pos = perm[: len(rows)]
    a = random_operand((size, k), g, a0.dtype)
    for p, r in zip(pos, rows):
        a[p] = a0[r]
    sa0 = ops.scale_a
    if ops.block_size is not None:  # block scales: the case's rows, the others' rows drawn from the case's
        sa = sa0[torch.randint(0, m0, (size,), generator=g)].contiguous()
        for p, r in zip(pos, rows):
            sa[p] = sa0[r]
    elif sa0.dim() == 0 or (sa0.numel() == 1 and m0 != 1):
        sa = sa0.clone()  # per-tensor: stays per-tensor
    else:
        flat = sa0.reshape(-1).to(torch.float32)
        lo, hi = float(flat.min()), float(flat.max())
        s = (torch.rand(size, generator=g) * (hi - lo) + lo).to(torch.float32)
        for p, r in zip(pos, rows):
            s[p] = flat[r]
        sa = s.reshape(size, 1) if sa0.dim() == 2 else s
    name, meta = f"{ops.name}/batch{size}", {"source": "c9-batch"}
    bs = ops.block_size
    return GemmOperands(a, ops.b, sa, ops.scale_b, ops.bias, ops.out_dtype, name, ops.scale_mode, meta, bs), pos


def alone_operands(ops, r: int):
    """GemmOperands of row ``r`` of ``ops`` alone (M = 1; a per-tensor scale stays per-tensor)."""
    sa0 = ops.scale_a
    if ops.block_size is not None:
        sa = sa0[r : r + 1].contiguous()
    elif sa0.dim() == 0 or (sa0.numel() == 1 and ops.m != 1):
        sa = sa0.clone()
    else:
        sa = sa0.reshape(-1)[r : r + 1].clone()
        sa = sa.reshape(1, 1) if sa0.dim() == 2 else sa
    a, name, meta = ops.a[r : r + 1].contiguous(), f"{ops.name}/row{r}", {"source": "c9-alone"}
    return GemmOperands(a, ops.b, sa, ops.scale_b, ops.bias, ops.out_dtype, name, ops.scale_mode, meta, ops.block_size)


def _hex(v: int, dtype) -> str:
    return "NaN" if v == -1 else f"0x{v:0{8 if dtype == torch.float32 else 4}X}"


def _diff(ref_row: Tensor, got_row: Tensor, dtype) -> Optional[dict]:
    """None when the rows' canonical bits agree, else the count and first differing columns."""
    d = (ref_row != got_row).nonzero().reshape(-1)
    if d.numel() == 0:
        return None
    cols = d[:MAX_LISTED].tolist()
    return {
        "n_differ": int(d.numel()),
        "columns": [
            {"col": int(j), "reference_call_bits": _hex(int(ref_row[j]), dtype), "bits": _hex(int(got_row[j]), dtype)}
            for j in cols
        ],
    }


def _failed_call(run) -> Optional[tuple]:
    """``(kind, line)`` of a call that gave no output: ``interface`` (the runner's ``interface_violation``, the same
    judgement as a case's IF) or ``raised`` (``<type>: <first line>``) or ``error``; None when it gave one."""
    if run.output is not None:
        return None
    if getattr(run, "interface", None):
        return "interface", run.interface
    if getattr(run, "raised", None):
        return "raised", run.raised
    return "error", run.error or "no output"


def check_batch_invariance(
    spec,
    cases: Sequence = (),
    device: Optional[str] = None,
    seed: int = 0,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    max_cases: int = MAX_CASES,
    rows_per_case: int = ROWS_PER_CASE,
    include_probes: bool = True,
) -> CheckResult:
    """C9 (module docstring) on ``cases`` (the suite's GemmOperands); ``seed``
    seeds probes, batch contents and positions. ``n/a`` when the kernel ran on
    no selected case. Evidence: ``cases``, ``batch_sizes``, ``n_calls``,
    ``n_comparisons``, ``n_differences``, ``differences`` (first
    :data:`MAX_LISTED`, with context and both bit patterns), ``errors`` (a line per call that gave no output),
    ``failed_calls``.

    A call that gave no output is no batch dependence: where a call's output breaks the interface, C9 fails as an
    interface failure (``failure_kind`` ``interface``, summary ``interface: <line> ...``); else where rows differ,
    as batch dependence; else where calls raised, as the kernel raising (``failure_kind`` ``raised``; evidence
    ``raised``: the first exception, its call, how many calls raised)."""
    g = torch.Generator().manual_seed(seed)
    chosen = select_cases(list(cases), max_cases)
    if include_probes and not spec.is_block:  # the probes are per-token x per-channel
        chosen += [(p, _row_discrimination(p)) for p in probe_cases(seed, getattr(spec, "operands", "int8"))]
    diffs: list[dict] = []
    failed: list[dict] = []  # {"kind", "line", "call", "error"} per call that gave no output
    per_case: list[dict] = []
    n_calls = n_cmp = n_diff = 0
    skipped_cases: list[str] = []

    def output_of(run, ops, context: str) -> Optional[Tensor]:
        """The call's output, or None (recorded in ``failed``) when it gave none."""
        bad = _failed_call(run)
        if bad is not None:
            failed.append({"kind": bad[0], "line": bad[1], "call": f"{ops.name} {context}", "error": run.error})
            return None
        return run.output

    for ops, disc in chosen:
        first = run_kernel(spec, ops, device=device)
        n_calls += 1
        if first.manifest.get("skipped"):
            skipped_cases.append(f"{ops.name}: {first.error or 'no output'}")
            continue
        first_out = output_of(first, ops, "(the case's own call)")
        if first_out is None:
            skipped_cases.append(f"{ops.name}: {first.error or 'no output'}")
            continue
        ref = _bits(first_out)
        rows = sorted(range(ops.m), key=lambda r: (-int(disc[r]), r))[:rows_per_case]
        info: dict[str, Any] = {
            "case": ops.name,
            "M": ops.m,
            "K": ops.k,
            "N": ops.n,
            "out_dtype": str(ops.out_dtype),
            "rows": rows,
            "rows_discriminating": [int(disc[r]) for r in rows],
            "sizes_run": [],
            "sizes_skipped": {},
        }
        per_case.append(info)

        def record(context: str, row: int, got: Tensor):
            nonlocal n_cmp, n_diff
            n_cmp += 1
            d = _diff(ref[row], got, ops.out_dtype)
            if d is not None:
                n_diff += 1
                if len(diffs) < MAX_LISTED:
                    diffs.append({"case": ops.name, "row": row, "context": context, **d})

        again = run_kernel(spec, ops, device=device)
        n_calls += 1
        if (again_out := output_of(again, ops, "repeat (same inputs, second call)")) is not None:
            rb = _bits(again_out)
            for r in range(ops.m):
                record("repeat (same inputs, second call)", r, rb[r])
        for r in rows:
            run = run_kernel(spec, alone_operands(ops, r), device=device)
            n_calls += 1
            if run.manifest.get("skipped"):
                info["sizes_skipped"]["1"] = run.error
                continue
            if (alone_out := output_of(run, ops, f"row {r} alone (M=1)")) is not None:
                record("alone (M=1)", r, _bits(alone_out)[0])
        for size in batch_sizes:
            if size < len(rows):
                continue
            bops, pos = batch_operands(ops, rows, int(size), g)
            run = run_kernel(spec, bops, device=device)
            n_calls += 1
            if run.manifest.get("skipped"):
                info["sizes_skipped"][str(size)] = run.error
                continue
            info["sizes_run"].append(int(size))
            if (batch_out := output_of(run, ops, f"rows {rows} in a batch M={size}")) is not None:
                out = _bits(batch_out)
                for r, p in zip(rows, pos):
                    record(f"batch M={size} at position {p}", r, out[p])
    ev: dict[str, Any] = {
        "cases": per_case,
        "batch_sizes": [int(s) for s in batch_sizes],
        "n_calls": n_calls,
        "n_comparisons": n_cmp,
        "n_differences": n_diff,
        "differences": diffs,
        "errors": [f"{f['call']}: {f['error']}" for f in failed[:MAX_LISTED]],
        "failed_calls": len(failed),
        "cases_not_run": skipped_cases[:MAX_LISTED],
        "seed": seed,
    }
    raised = [f for f in failed if f["kind"] == "raised"]
    if raised:
        ev["raised"] = {"exception": raised[0]["line"], "line": raised[0]["error"], "call": raised[0]["call"]}
        ev["raised"]["calls"] = len(raised)
    iface = [f for f in failed if f["kind"] == "interface"]
    besides = f"; besides, {n_diff} of {n_cmp} row comparisons differ" if n_diff else ""
    if iface:
        f0 = iface[0]
        line = f"interface: {f0['line']}; on C9's call {f0['call']} ({len(iface)} of {n_calls} C9 calls){besides}"
        return CheckResult(CHECK_ID, NAME, Verdict.FAIL, line, dict(ev, failure_kind="interface", interface=f0["line"]))
    if n_diff:
        d0 = diffs[0]
        where = (
            f"{d0['case']} row {d0['row']} {d0['context']}: {d0['n_differ']} element(s) differ, first col "
            f"{d0['columns'][0]['col']} {d0['columns'][0]['bits']} vs {d0['columns'][0]['reference_call_bits']} "
            f"in the case's own call"
        )
        return CheckResult(
            CHECK_ID,
            NAME,
            Verdict.FAIL,
            f"row bits depend on the batch or the call: {n_diff} of {n_cmp} comparisons differ; first: {where}",
            ev,
        )
    if failed:
        f0 = failed[0]
        kind = "raised" if f0["kind"] == "raised" else "kernel"
        line = f"the kernel gave no output on {len(failed)} of {n_calls} C9 calls; first: {f0['call']}: {f0['error']}"
        return CheckResult(CHECK_ID, NAME, Verdict.FAIL, line, dict(ev, failure_kind=kind))
    if not n_cmp:
        why = "; ".join(skipped_cases[:3]) or "no case selected"
        return not_applicable(CHECK_ID, f"kernel ran on none of the C9 cases: {why}", **ev)
    return CheckResult(
        CHECK_ID,
        NAME,
        Verdict.PASS,
        f"{n_cmp} row comparisons bit-identical across M=1, batches "
        f"{sorted({s for c in per_case for s in c['sizes_run']})}, the cases' own "
        f"M and a repeated call ({len(per_case)} cases, {n_calls} kernel calls)",
        ev,
    )
