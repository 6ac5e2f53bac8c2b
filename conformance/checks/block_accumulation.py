"""C16 block_accumulation (issue 46): measure a block-scaled kernel's block accumulation from its own outputs on
planted block operands, compare it with the declared one (``reference.block.contract``).

Two calls ``scaled_mm(a [M, 8*bk], b [16, 8*bk], scale_a, scale_b, float32, block_size=(bn, bk))``, M = 16 and 128
(the rows of M = 16 repeated: kernels switch paths past M = 64), at the kernel's first declared block size
(``(bn, bk)``): KB = 8 K-blocks, one nonzero product per block (``b`` = 1 at each block's first k, ``a``
there the partial: -1, 1 or 3, exact in any accumulator and in e4m3), ``s_w[:, kb]`` = 1 except at block 1, unused
blocks ``s_a`` = 1. The output (float32, no bias) is the accumulator through the declared epilogue. Rows (:data:`ROWS`):

* ``form``: block 0 puts ``P = -(fl(3 s_a s_w) + 2 ulp)`` in the accumulator (partial -1 times ``s_a = -P``, ``s_w``
  = 1: exact in every form); block 1's ``3 * s_a * s_w`` nearly cancels it, so the output is a residual a few ulps of
  ``P`` wide. An ``add`` form leaves the scaled partial's own rounding there (``r(r(3 s_a) s_w)``, ``r(r(3 s_w) s_a)``,
  ``r(3 r(s_a s_w))``: for :data:`FORM_SA`, :data:`FORM_SW` three neighbouring float32s, 2**-37 apart); an ``fma``
  form keeps the exact product (``r(3 s_a) s_w``, ``r(3 s_w) s_a``, ``3 r(s_a s_w)``, three other reals whose residual
  is exact in float32). The :data:`LEGAL_FORMS` give, in order, -1024, -2048, -1144.72, -1875.55, -3072, -2560 x 2**-47.
* ``split at b`` (b = 2, 3, 4, 6): 1 in a block before b, then ``2**24`` at b and ``-2**24`` at b + 1 (partials +-1,
  ``s_a`` = 2**24: exact in every form). Summed in one chain ``1 + 2**24`` rounds the 1 away (a tie, to even) and
  the row gives 0; with the 1 in an earlier chunk than ``2**24`` and ``+-2**24`` in one chunk (total 0) it gives 1.
  ``order split_k=S`` cuts the 8 blocks at {4} (S=2), {3, 6} (S=3), {2, 4, 6} (S=4): the four rows read 0000,
  0010, 0101, 1011 for S = 1..4; ``order split_k=S interleaved`` (split s takes blocks s, s+S, ...) 0111, 1101, 0110
  for S = 2..4.

The form row lies in blocks 0 and 1 (one chunk for every contiguous S <= 4) and the split rows hold exact terms, so
the :data:`CANDIDATES` (6 forms x S in :data:`SPLITS`, contiguous, and S >= 2 interleaved) give 33 distinct outputs
of 42: interleaved, blocks 0 and 1 fall in different splits and each ``fma`` form gives the bits of its ``add`` twin
(``mul s_a; fma s_w`` = ``mul s_a; mul s_w; add``): the probe names both, C8 on real operands tells them apart. The
declared accumulation is evaluated
too (``reference.block.evaluate.reference_block_scaled_mm`` for each, through the declared epilogue). Verdict: pass
when the declared form is among those matching the output bit for bit, fail naming the measured form(s) beside the
declaration, or "no legal form matches" with the first element differing from the declared form."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

import torch

from conformance.checks.result import CheckResult, Verdict
from conformance.kernels.runner import pick_device, run_kernel
from conformance.kernels.spec import KernelSpec
from reference.block.contract import BlockAccumulation, parse_block_accumulation
from reference.block.evaluate import reference_block_scaled_mm
from reference.fp8 import E4M3
from reference.operands import GemmOperands

C16, NAME = "C16", "block_accumulation"
#: K-blocks of the probe, the split-K counts it tells apart (every chunk of >= 2 blocks: an fma shows in each)
KB_PROBE = 8
SPLITS = (1, 2, 3, 4)
#: the probe's M: a small-M and a large-M call (kernels switch tiles or paths past M = 64); N
PROBE_MS, N_PROBE = (16, 128), 16
#: rows per probe tile: M = 128 repeats the rows of M = 16
M_TILE = 16
#: every form of the block accumulation language (``reference.block.contract``): two muls then add, a mul then
#: fma, the scale product then add or fma
LEGAL_FORMS = (
    "mul s_a; mul s_w; add",
    "mul s_w; mul s_a; add",
    "mul s_a; fma s_w",
    "mul s_w; fma s_a",
    "mul s_a*s_w; add",
    "fma s_a*s_w",
)
#: the form row's scales at block 1 (found by a seeded search over s_a in [2**-7, 2**-6), s_w in [2**-9, 2**-8) for
#: six distinct residuals; ``tests/conformance/checks/test_block_accumulation.py`` derives each one independently)
FORM_SA, FORM_SW = float.fromhex("0x1.c13fe4p-7"), float.fromhex("0x1.6d6bp-9")
FORM_Q = 3
BIG = 2.0**24


def _fl32(x: float) -> float:
    return float(torch.tensor(x, dtype=torch.float64).to(torch.float32))


def _form_offset() -> float:
    """``P``: minus (``fl(3 s_a s_w)`` plus two float32 ulps)."""
    s = torch.tensor(_fl32(FORM_Q * FORM_SA * FORM_SW), dtype=torch.float32)
    up = torch.tensor(math.inf, dtype=torch.float32)
    return -float(torch.nextafter(torch.nextafter(s, up), up))


@dataclass(frozen=True)
class Row:
    """A probe row: ``name`` and its ``terms`` ((K-block, partial, s_a), ...); other blocks: partial 0, s_a = 1."""

    name: str
    terms: tuple


def _split_row(b: int) -> Row:
    before = 0 if b == 2 else b - 1  # block 1 carries the form row's s_w: the split rows leave it empty
    return Row(f"split at {b}", ((before, 1, 1.0), (b, 1, BIG), (b + 1, -1, BIG)))


ROWS = (Row("form", ((0, -1, -_form_offset()), (1, FORM_Q, FORM_SA))),) + tuple(_split_row(b) for b in (2, 3, 4, 6))
#: the weight scale of each K-block (every weight-block row alike)
SW_BY_BLOCK = tuple(FORM_SW if kb == 1 else 1.0 for kb in range(KB_PROBE))
#: the legal block accumulations C16 tells apart, as :class:`BlockAccumulation`
CANDIDATES = tuple(replace(parse_block_accumulation(f), split_k=s) for s in SPLITS for f in LEGAL_FORMS) + tuple(
    replace(parse_block_accumulation(f), split_k=s, interleaved=True) for s in SPLITS[1:] for f in LEGAL_FORMS
)


def probe_case(operands: str = "int8", block_size=(128, 128), m: int = M_TILE) -> GemmOperands:
    """The probe call (module docstring) for ``operands`` ``"int8"`` | ``"e4m3"`` at ``block_size`` (bn, bk):
    a [m, 8 bk] (row r holds ``ROWS[r % 16]``, zero past them), b [16, 8 bk], scale_a [m, 8], scale_b
    [ceil(16 / bn), 8], float32 output, no bias."""
    bn, bk = (int(v) for v in block_size)
    k = KB_PROBE * bk
    a = torch.zeros(m, k, dtype=torch.float32)
    sa = torch.ones(m, KB_PROBE, dtype=torch.float32)
    for r in range(m):
        for kb, p, s in ROWS[r % M_TILE].terms if r % M_TILE < len(ROWS) else ():
            a[r, kb * bk], sa[r, kb] = p, s
    b = torch.zeros(N_PROBE, k, dtype=torch.float32)
    b[:, ::bk] = 1.0
    sw = torch.tensor(SW_BY_BLOCK, dtype=torch.float32).expand(-(-N_PROBE // bn), KB_PROBE).contiguous()
    dtype = E4M3 if operands == "e4m3" else torch.int8
    return GemmOperands(a.to(dtype), b.to(dtype), sa, sw, None, torch.float32, name="c16-probe", block_size=(bn, bk))


def candidate_outputs(ops: GemmOperands, forms, epilogue, accumulator=None) -> dict[str, torch.Tensor]:
    """label -> float32 [M, N] the declared ``epilogue`` gives on ``ops`` after each block accumulation of
    ``forms`` (``reference_block_scaled_mm``; ``accumulator``: an e4m3 kernel's declared one)."""
    out = {}
    for f in forms:
        form = parse_block_accumulation(f)
        out[form.label()] = reference_block_scaled_mm(
            ops.a, ops.b, ops.scale_a, ops.scale_b, ops.block_size, form, epilogue, None, torch.float32, accumulator
        )
    return out


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def _value(x: float) -> str:
    return f"{x!r} ({_fl32_hex(x)})"


def _fl32_hex(x: float) -> str:
    return "0x%08X" % (int(torch.tensor([x], dtype=torch.float32).view(torch.int32)) & 0xFFFFFFFF)


def _row_name(r: int) -> str:
    return ROWS[r % M_TILE].name if r % M_TILE < len(ROWS) else f"zero row {r}"


def _first_difference(got: torch.Tensor, want: torch.Tensor) -> dict:
    r, c = (int(v) for v in (_bits(got) != _bits(want)).nonzero()[0])
    return dict(row=_row_name(r), column=c, observed=float(got[r, c]), declared=float(want[r, c]))


def _na(reason: str) -> CheckResult:
    return CheckResult(C16, NAME, Verdict.NOT_APPLICABLE, reason, {"reason": reason})


def _labels(labels: list) -> str:
    return " or ".join(repr(m) for m in labels)


def _measure(spec: KernelSpec, ops: GemmOperands, dev: str, table: dict) -> dict:
    """One probe call: ``matches`` (labels of ``table``, label -> the 16-row tile's output, whose rows repeated
    give the output's bits), ``output``, ``table`` (at the call's M), or ``error``."""
    run = run_kernel(spec, ops, dev)
    if run.error is not None or run.output is None:
        return {"error": f"kernel call failed: {run.error}"}
    got = run.output.to(torch.float32)
    reps = -(-ops.m // M_TILE)
    table = {label: out.repeat(reps, 1)[: ops.m] for label, out in table.items()}  # rows are independent
    matches = [label for label, out in table.items() if torch.equal(_bits(out), _bits(got))]
    return {"matches": matches, "output": got, "table": table}


def check_block_accumulation(spec: KernelSpec, device: Optional[str] = None) -> CheckResult:
    """C16 for a block-scaled KernelSpec on ``device`` (None: CUDA when supported and present, else the CPU): the
    probe (module docstring) at its first declared block size and each M of :data:`PROBE_MS` its constraints admit,
    each output matched bit for bit against every :data:`CANDIDATES` and the declared accumulation through the
    declared epilogue. pass: the declared one matches at every M; fail: others match (``measured 'X', declared
    'Y'``, per M when they differ), none does (the first element differing from the declared form), or a call
    fails; n/a: no block declaration, no device here, no probe shape or no float32 output inside the kernel's
    constraints. Evidence: ``declared``, ``measured`` (matching labels; ``by_m``: M -> them), ``block_size``,
    ``rows`` (row -> column 0 observed at the first M), ``first_difference`` (on no match)."""
    block = spec.block
    if block is None:
        return _na("not a block-scaled kernel (it declares no block=): C16 probes a block accumulation")
    dev, why = pick_device(spec, device)
    if dev is None:
        return _na(why)
    block_size = block.sizes[0]
    cons = spec.constraints
    k = KB_PROBE * block_size[1]
    outside = {m: "; ".join(cons.violations(m, k, N_PROBE)) for m in PROBE_MS}
    ms = [m for m in PROBE_MS if not outside[m]]
    if not ms:
        return _na(f"probe shapes outside the kernel's constraints: {'; '.join(outside.values())}")
    if cons.out_dtypes and "float32" not in cons.out_dtypes:
        return _na(
            f"C16 reads the accumulator through a float32 output; the kernel writes {', '.join(cons.out_dtypes)}"
        )
    declared = block.accumulation
    forms: list[BlockAccumulation] = list(CANDIDATES) + ([] if declared in CANDIDATES else [declared])
    ev: dict = dict(declared=declared.label(), block_size=list(block_size), probe_k=k, probe_n=N_PROBE)
    ev["skipped_m"] = {m: why for m, why in outside.items() if why}
    accumulator = spec.accumulator_on(torch.device(dev).type) if spec.operands == "e4m3" else None
    tile = probe_case(spec.operands, block_size, M_TILE)
    table = candidate_outputs(tile, forms, block.epilogue, accumulator)
    runs = {}
    for m in ms:
        runs[m] = res = _measure(spec, probe_case(spec.operands, block_size, m), dev, table)
        if "error" in res:
            line = f"{res['error']} (probe M={m})"
            return CheckResult(C16, NAME, Verdict.FAIL, line, dict(ev, error=res["error"], failure_kind="kernel"))
    by_m = {m: r["matches"] for m, r in runs.items()}
    first = runs[ms[0]]["output"]
    ev.update(
        measured=by_m[ms[0]], by_m=by_m, rows={_row_name(r): _value(float(first[r, 0])) for r in range(len(ROWS))}
    )
    one = all(v == by_m[ms[0]] for v in by_m.values())
    measured = _labels(by_m[ms[0]]) if one else ", ".join(f"{_labels(v) or 'none'} at M={m}" for m, v in by_m.items())
    head = f"declared {declared.label()!r}"
    if all(declared.label() in v for v in by_m.values()):
        others = sorted({x for v in by_m.values() for x in v} - {declared.label()})
        tail = f" (the probe cannot tell it from {_labels(others)})" if others else ""
        return CheckResult(C16, NAME, Verdict.PASS, f"measured {declared.label()!r}, as declared{tail}", ev)
    if all(by_m.values()):
        return CheckResult(C16, NAME, Verdict.FAIL, f"measured {measured}, {head}", dict(ev, failure_kind="kernel"))
    m = next(m for m, v in by_m.items() if not v)
    diff = _first_difference(runs[m]["output"], runs[m]["table"][declared.label()])
    line = (
        f"no legal form matches ({head}) at M={m}: row {diff['row']!r} column {diff['column']} gave "
        f"{_value(diff['observed'])}, the declared form gives {_value(diff['declared'])}"
    )
    return CheckResult(C16, NAME, Verdict.FAIL, line, dict(ev, first_difference=dict(diff, m=m), failure_kind="kernel"))
