"""Check C9 batch_invariance: a row's output bits do not depend on the batch.

Needs no reference and holds for every contract. Integer accumulation of
int8 products is exact and order-free while the sums fit int32 (DESIGN.md
section 1), and the epilogue of output element ``[m, n]`` is a function of
``acc[m, n]``, ``scale_a[m]``, ``scale_b[n]`` and ``bias[n]`` alone. So for a
correct W8A8 kernel the bits of row ``m`` are the same whether the row is
computed alone (M = 1, a decode step), inside batches of other sizes with
other rows around it (prefill), or in a repeated call with the same inputs.
Any difference is a kernel fault: an M-dependent epilogue path (another
scale order or rounding on the decode path), an accumulator that is not
reset between calls, a split-K / tile choice that leaks into the epilogue,
a read past the row's own data. (A kernel that lets a float32 accumulator
take over for some M is caught too, wherever its rounding shows.)

Procedure (:func:`check_batch_invariance`), per selected case ``ops`` with
``M0`` rows:

1. call the kernel on ``ops`` twice: the two outputs must be bit-identical
   (repeated call; every row);
2. for each sampled row ``r``: call the kernel on row ``r`` alone (M = 1);
3. for each batch size ``S`` of :data:`BATCH_SIZES`: one batch of ``S`` rows
   holding every sampled row at a seeded position, the other rows random
   int8 with random per-token scales (per-tensor scales stay per-tensor);
4. every sampled row's bits in 2 and 3 must equal its bits in call 1 (NaN
   payloads canonical, the sign of zero counts).

Cases: the suite's fixed cases, of which at most ``max_cases`` are used,
chosen so the probe sees the epilogue: cases whose rows discriminate
between legal epilogues (references under the scale orders ``a_then_w``,
``w_then_a``, ``fused`` and both bias points disagree on them; a
decode-path scale-order bug can only show there) first, one per output dtype
and bias presence, then by discrimination; plus C9's own three seeded probe
cases (:func:`probe_cases`: float32 output, where scale orders differ on
many elements; bfloat16 with bias; float16). Rows: the ``rows_per_case``
most discriminating rows. Cost: per case ``2 + rows + len(batch_sizes)``
kernel calls; cases above :data:`MAX_CASE_WORK` multiply-accumulates or
:data:`MAX_CASE_K` are not selected.

Batch sizes the kernel's declared shape constraints exclude (e.g. ``min_m``)
are skipped and listed in the evidence; a run that raises where the case
itself ran is a failure (the kernel cannot compute that batch size).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from conformance.checks.result import CheckResult, not_applicable

CHECK_ID = "C9"
NAME = "batch_invariance"
#: Batch sizes a sampled row is computed in (besides M = 1 and the case's own
#: M): small prefills, both sides of the usual 16-row tile edge (and of
#: torch._int_mm's CUDA minimum M = 17), and a larger prefill.
BATCH_SIZES = (2, 5, 16, 17, 64)
#: Fixed cases sampled from the suite (C9's own probes come on top).
MAX_CASES = 4
#: Rows sampled per case.
ROWS_PER_CASE = 2
#: Largest M * K * N of a fixed case C9 selects (bounds the cost of a batch of 64).
MAX_CASE_WORK = 1 << 21
#: Largest K of a fixed case C9 selects: batch dependence lives in the tiling of
#: M and N and in the epilogue, which any K shows; a K = 131,073 overflow case
#: would only make 64-row batches expensive.
MAX_CASE_K = 4096
#: Differences listed individually in the evidence (the count is complete).
MAX_LISTED = 10


def probe_cases(seed: int = 0) -> list:
    """C9's own seeded probe cases (``reference.operands.GemmOperands``).

    Random int8 operands with real (non power-of-two) float32 scales:
    ``probe-fp32`` (M=6, K=72, N=40, float32 output: legal scale orders give
    different bits on many elements, so an M-dependent scale order shows),
    ``probe-bf16-bias`` (M=5, K=48, N=24, bfloat16 output and bias),
    ``probe-fp16`` (M=4, K=40, N=24, float16 output).
    """
    from reference.operands import GemmOperands

    g = torch.Generator().manual_seed(1000 + seed)

    def mk(m, k, n, dtype, bias, name):
        a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int16).to(torch.int8)
        b = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int16).to(torch.int8)
        sa = (torch.rand(m, generator=g) * 0.02 + 1e-3).to(torch.float32)
        sb = (torch.rand(n, generator=g) * 0.002 + 1e-4).to(torch.float32)
        bb = (torch.randn(n, generator=g) * 4).to(dtype) if bias else None
        return GemmOperands(
            a,
            b,
            sa,
            sb,
            bias=bb,
            out_dtype=dtype,
            name=f"c9/{name}",
            scale_mode="synthetic",
            meta={"source": "c9-probe", "seed": seed},
        )

    return [
        mk(6, 72, 40, torch.float32, False, "probe-fp32"),
        mk(5, 48, 24, torch.bfloat16, True, "probe-bf16-bias"),
        mk(4, 40, 24, torch.float16, False, "probe-fp16"),
    ]


def _row_discrimination(ops) -> Tensor:
    """int64 [M]: per row, elements where references under the legal
    epilogues (every scale order x every bias point) disagree."""
    from reference.accumulate import exact_int_mm
    from reference.bits import bits_of
    from reference.contract import BIAS_POINTS, SCALE_ORDERS, EpilogueContract
    from reference.epilogue import apply_epilogue

    exact = exact_int_mm(ops.a.cpu(), ops.b.cpu())
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
    """``[(ops, row discrimination int64 [M])]``: at most ``max_cases`` of
    ``cases`` (module docstring: epilogue-discriminating first, one per
    (out_dtype, bias) group, then by discrimination; M*K*N <= MAX_CASE_WORK,
    K <= MAX_CASE_K)."""
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
    picked, groups = [], set()
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
    """int64 bit patterns with every NaN mapped to one value (canonical)."""
    from reference.bits import bits_of

    b = bits_of(x)
    return torch.where(torch.isnan(x), torch.full_like(b, -1), b)


def _batch(ops, rows: list[int], size: int, g: torch.Generator):
    """A batch of ``size`` rows holding ``ops``' rows ``rows`` at seeded
    positions; other rows random int8 with per-token scales drawn from
    ``ops.scale_a``'s range. Returns ``(GemmOperands, positions)``."""
    from reference.operands import GemmOperands

    m0, k = ops.m, ops.k
    a0 = ops.a.contiguous()
    perm = torch.randperm(size, generator=g).tolist()
    pos = perm[: len(rows)]
    a = torch.randint(-128, 128, (size, k), generator=g, dtype=torch.int16).to(torch.int8)
    for p, r in zip(pos, rows):
        a[p] = a0[r]
    sa0 = ops.scale_a
    if sa0.dim() == 0 or (sa0.numel() == 1 and m0 != 1):
        sa = sa0.clone()  # per-tensor: stays per-tensor
    else:
        flat = sa0.reshape(-1).to(torch.float32)
        lo, hi = float(flat.min()), float(flat.max())
        s = (torch.rand(size, generator=g) * (hi - lo) + lo).to(torch.float32)
        for p, r in zip(pos, rows):
            s[p] = flat[r]
        sa = s.reshape(size, 1) if sa0.dim() == 2 else s
    return GemmOperands(
        a,
        ops.b,
        sa,
        ops.scale_b,
        bias=ops.bias,
        out_dtype=ops.out_dtype,
        name=f"{ops.name}/batch{size}",
        scale_mode=ops.scale_mode,
        meta={"source": "c9-batch"},
    ), pos


def _alone(ops, r: int):
    """Row ``r`` of ``ops`` as its own M = 1 case (per-tensor scales kept)."""
    from reference.operands import GemmOperands

    sa0 = ops.scale_a
    if sa0.dim() == 0 or (sa0.numel() == 1 and ops.m != 1):
        sa = sa0.clone()
    else:
        sa = sa0.reshape(-1)[r : r + 1].clone()
        sa = sa.reshape(1, 1) if sa0.dim() == 2 else sa
    return GemmOperands(
        ops.a[r : r + 1].contiguous(),
        ops.b,
        sa,
        ops.scale_b,
        bias=ops.bias,
        out_dtype=ops.out_dtype,
        name=f"{ops.name}/row{r}",
        scale_mode=ops.scale_mode,
        meta={"source": "c9-alone"},
    )


def _hex(v: int, dtype) -> str:
    return "NaN" if v == -1 else f"0x{v:0{8 if dtype == torch.float32 else 4}X}"


def _diff(ref_row: Tensor, got_row: Tensor, dtype) -> Optional[dict]:
    """None when the two rows' (canonical) bits agree, else the differing
    columns (first MAX_LISTED with both bit patterns)."""
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
    """C9 batch_invariance (module docstring).

    Args:
        spec: KernelSpec under test.
        cases: the suite's fixed cases (GemmOperands) to sample from.
        device: passed to ``conformance.kernels.runner.run_kernel``.
        seed: seeds the probe cases, the batch contents and the positions.
        batch_sizes: M of the batches holding the sampled rows.
        max_cases: fixed cases sampled from ``cases``.
        rows_per_case: rows sampled per case.
        include_probes: add :func:`probe_cases`.

    Returns:
        ``CheckResult("C9", "batch_invariance", verdict, summary, evidence)``:
        ``fail`` on any bit difference (or a call that raises where the case
        ran), ``pass`` when at least one comparison was made, ``n/a`` when the
        kernel could run on none of the selected cases. Evidence: ``cases``
        (case, M, rows, sizes run, sizes skipped), ``batch_sizes``,
        ``n_calls``, ``n_comparisons``, ``n_differences``, ``differences``
        (first MAX_LISTED: case, row, context ``repeat`` / ``alone (M=1)`` /
        ``batch M=S at position p``, n_differ, columns with both bit
        patterns), ``errors``.
    """
    from conformance.kernels.runner import run_kernel

    g = torch.Generator().manual_seed(seed)
    chosen = select_cases(list(cases), max_cases)
    if include_probes:
        chosen += [(p, _row_discrimination(p)) for p in probe_cases(seed)]
    diffs: list[dict] = []
    errors: list[str] = []
    per_case: list[dict] = []
    n_calls = n_cmp = n_diff = 0
    skipped_cases: list[str] = []
    for ops, disc in chosen:
        first = run_kernel(spec, ops, device=device)
        n_calls += 1
        if first.manifest.get("skipped") or first.output is None:
            skipped_cases.append(f"{ops.name}: {first.error or 'no output'}")
            continue
        ref = _bits(first.output)
        rows = sorted(range(ops.m), key=lambda r: (-int(disc[r]), r))[:rows_per_case]
        info = {
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

        def record(context: str, row: int, got: Optional[Tensor], err: Optional[str]):
            nonlocal n_cmp, n_diff
            if got is None:
                n_diff += 1
                line = f"{ops.name} row {row} {context}: kernel failed ({err}) where the case ran"
                errors.append(line)
                if len(diffs) < MAX_LISTED:
                    diffs.append({"case": ops.name, "row": row, "context": context, "error": err})
                return
            n_cmp += 1
            d = _diff(ref[row], got, ops.out_dtype)
            if d is not None:
                n_diff += 1
                if len(diffs) < MAX_LISTED:
                    diffs.append({"case": ops.name, "row": row, "context": context, **d})

        again = run_kernel(spec, ops, device=device)
        n_calls += 1
        if again.output is None:
            record("repeat", rows[0], None, again.error)
        else:
            rb = _bits(again.output)
            for r in range(ops.m):
                record("repeat (same inputs, second call)", r, rb[r], None)
        for r in rows:
            run = run_kernel(spec, _alone(ops, r), device=device)
            n_calls += 1
            if run.manifest.get("skipped"):
                info["sizes_skipped"]["1"] = run.error
                continue
            record("alone (M=1)", r, None if run.output is None else _bits(run.output)[0], run.error)
        for size in batch_sizes:
            if size < len(rows):
                continue
            bops, pos = _batch(ops, rows, int(size), g)
            run = run_kernel(spec, bops, device=device)
            n_calls += 1
            if run.manifest.get("skipped"):
                info["sizes_skipped"][str(size)] = run.error
                continue
            info["sizes_run"].append(int(size))
            out = None if run.output is None else _bits(run.output)
            for r, p in zip(rows, pos):
                record(f"batch M={size} at position {p}", r, None if out is None else out[p], run.error)
    ev = {
        "cases": per_case,
        "batch_sizes": [int(s) for s in batch_sizes],
        "n_calls": n_calls,
        "n_comparisons": n_cmp,
        "n_differences": n_diff,
        "differences": diffs,
        "errors": errors[:MAX_LISTED],
        "cases_not_run": skipped_cases[:MAX_LISTED],
        "seed": seed,
    }
    if n_diff:
        d0 = diffs[0]
        where = f"{d0['case']} row {d0['row']} {d0['context']}: " + (
            f"kernel failed: {d0['error']}"
            if "error" in d0
            else f"{d0['n_differ']} element(s) differ, first col {d0['columns'][0]['col']} "
            f"{d0['columns'][0]['bits']} vs {d0['columns'][0]['reference_call_bits']} "
            f"in the case's own call"
        )
        return CheckResult(
            CHECK_ID,
            NAME,
            "fail",
            f"row bits depend on the batch or the call: {n_diff} of "
            f"{n_cmp + len(errors)} comparisons differ; first: {where}",
            ev,
        )
    if not n_cmp:
        why = "; ".join(skipped_cases[:3]) or "no case selected"
        return not_applicable(CHECK_ID, f"kernel ran on none of the C9 cases: {why}", **ev)
    return CheckResult(
        CHECK_ID,
        NAME,
        "pass",
        f"{n_cmp} row comparisons bit-identical across M=1, batches "
        f"{sorted({s for c in per_case for s in c['sizes_run']})}, the cases' own "
        f"M and a repeated call ({len(per_case)} cases, {n_calls} kernel calls)",
        ev,
    )
