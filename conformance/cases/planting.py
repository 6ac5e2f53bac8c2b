"""Planted discriminators: a case of any shape tells every legal epilogue apart (README.md here).

:func:`planted_case` plants, in probe rows and columns at tile-grid positions
(:func:`probe_positions`), one degree of freedom of the epilogue per probe column
(:data:`KINDS`), each in its own K positions so correct kernels keep C6's premise.
``meta["planted"]``: the discriminating elements per kind (:func:`discrimination`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from conformance.cases.tie_search import MANT_BITS, pick_fp32_ties, pick_ties, tie_orders_bits
from reference.accumulate import exact_int_mm
from reference.bits import bits_of, spacing_distance
from reference.contract import BIAS_POINTS, SCALE_ORDERS, EpilogueContract
from reference.epilogue import apply_epilogue
from reference.operands import GemmOperands

KINDS = (
    "scale_order",
    "bias_point",
    "signed_zero",
    "overflow",
    "subnormal",
    "partial_sums",
    "big_acc",
    "bias_value",
    "subnormal_scale",
)
ROW_KINDS = ("short", "real", "tiny")
TILE_EDGES = (16, 128, 64, 256, 32)
MAX_ROWS, MAX_COLS = 8, 12
#: partial_sums: run length (run * 127^2 > 2^24) and the K it needs
RUN = 1100
PARTIAL_K, BIG_ACC_K = 2 * RUN + 3, 1200
#: ``deep_acc`` partial_sums column: positions of its own (some unused, see ``planted_case``), products 127 * 126
#: (even: every running sum stays odd, so float32 rounds it once it passes 2^24), peak below 2^25
PARTIAL_K_DEEP = 3600
OUT_TAG = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
#: scale magnitude classes: ``huge`` multiplies every s_a by 2^HUGE and s_w by 2^-HUGE (exact: every legal epilogue
#: keeps its bits); ``subnormal`` gives the ``tiny`` probe rows float32-subnormal s_a = short * 2^SUBNORMAL_EXP
MAGNITUDES = ("typical", "pow2", "subnormal", "huge")
HUGE, SUBNORMAL_EXP = 60, -130
#: a scalar power-of-two s_w (pow2 mode) is lifted from 2^-10 to 2^LIFT_EXP (s_a * 2^-(LIFT_EXP + 10): every legal
#: order keeps its bits), so |acc| * s_w passes 2^31 from |acc| >= 2^(31 - LIFT_EXP): an exponent / shift fold of
#: s_w into the int32 accumulator wraps
LIFT_EXP = 20
#: bias value classes of a ``bias_value`` column (zero accumulators: the output is the bias itself)
BIAS_VALUES = ("full", "other_range", "tiny")


def generator(name: str, seed: int) -> torch.Generator:
    """``torch.Generator`` seeded with CRC-32 of ``"<name>/<seed>"``."""
    return torch.Generator().manual_seed(zlib.crc32(f"{name}/{seed}".encode()))


def probe_positions(size: int, limit: int) -> list[int]:
    """Up to ``limit`` distinct indices in ``[0, size)``, by priority: 0, size - 1, per
    tile t of :data:`TILE_EDGES` t - 1, t and the last tile's start, then eighths."""
    cand = [0, size - 1]
    for t in TILE_EDGES:
        cand += [t - 1, t, (size - 1) // t * t]
    cand += [(i * size) // 8 for i in range(1, 8)]
    out: list[int] = []
    for x in cand:
        if 0 <= x < size and x not in out:
            out.append(x)
    return out[:limit]


@dataclass(frozen=True)
class _Col:
    kind: str
    index: int
    k_pos: tuple


def short_mantissa(g: torch.Generator, n: int, bits: int) -> Tensor:
    """float64 [n] significands in [1, 2) with ``bits`` fractional bits (exact products in float32)."""
    return 1.0 + torch.randint(0, 2**bits, (n,), generator=g).double() / 2**bits


def _kinds(
    out_dtype, mode: str, bias: bool, k: int, sb_tensor: bool, magnitude=None, bias_value=None, deep_acc=False
) -> list[str]:
    budget = 3 * k // 4
    ks = ["subnormal_scale"] if magnitude == "subnormal" and budget >= 8 else []
    if bias and bias_value is not None:
        ks.append("bias_value")
    if mode == "real":
        ks.append("scale_order")
    if bias and out_dtype != torch.float32 and not (sb_tensor and mode == "real"):
        ks.append("bias_point")  # needs exact products: a short or power-of-two s_w
    ks.append("signed_zero")
    if sb_tensor and deep_acc and not (out_dtype == torch.float32 and mode == "real"):
        # no per-column scale needed: a scalar s_w keeps C6's premise except with float32 output and a real s_w
        ks += [x for x, kk in (("partial_sums", PARTIAL_K), ("big_acc", BIG_ACC_K)) if budget >= kk + 64]
    if sb_tensor:
        return ks
    if budget >= 8:
        ks += ["overflow", "subnormal"]
    if budget >= PARTIAL_K + 64:
        ks.append("partial_sums")
    if budget >= BIG_ACC_K + 64 and (out_dtype != torch.float32 or deep_acc):
        ks.append("big_acc")
    return ks


def _decompose(v: Tensor, bk: int) -> Tensor:
    """int64 [R, bk] entries in [-128, 127] with ``127 * sum(e[:-1]) + e[-1] == v``
    (``b`` holds 127 on the first bk - 1 positions and 1 on the last)."""
    if bk == 1:
        return v.clamp(-128, 127).unsqueeze(-1)
    nbig = bk - 1
    s = torch.clamp(torch.round(v.double() / 127).to(torch.int64), -127 * nbig, 127 * nbig)
    r = v - 127 * s
    q = torch.div(s, nbig, rounding_mode="floor")
    rem = s - nbig * q
    big = q.unsqueeze(-1) + (torch.arange(nbig) < rem.unsqueeze(-1)).to(torch.int64)
    return torch.cat([big, r.unsqueeze(-1)], -1)


def _capacity(bk: int) -> int:
    return 127 if bk == 1 else 127 * 127 * (bk - 1) + 127


def _column_scale(kind: str, mode: str, out_dtype, g, j: int) -> float:
    u = 1.0 if mode == "pow2" else float(short_mantissa(g, 1, 8)[0])
    if kind == "overflow":
        return (2.0**4 if out_dtype == torch.float16 else 2.0**119) * u
    if kind == "subnormal":
        e = ((16, 20, 25) if out_dtype == torch.float16 else (62, 66, 70))[j % 3]
        return 2.0**-e * u
    if kind == "signed_zero":
        return -(2.0**-10) * u
    if kind == "big_acc":  # float32 output: a power of two (float32(acc) * s_w exact, one rounding in every order)
        return 2.0**-14 * (1.0 if out_dtype == torch.float32 else u)
    if kind == "subnormal_scale":  # s_a * s_w normal (2^-110, fp16 2^-22) or float32-subnormal (2^-134)
        return 2.0 ** ((108 if out_dtype == torch.float16 else 20) if j % 2 == 0 else -4) * u
    return 2.0**-10 * u  # bias_point, partial_sums


def _tie_column(
    g, sa: Tensor, out_dtype, cap: int, tries: int = 3, fixed: Optional[float] = None
) -> tuple[Tensor, float]:
    """``(acc int64 [R], s_w)`` of a ``scale_order`` column: of ``tries`` seeded scales
    ``(1 + U) * 2^-10`` (``fixed``: that scale, a scalar s_w's), the one with the most rows whose scale orders differ."""
    best, best_n = None, -1
    vmax = min(cap, 500126)
    for _ in range(tries if cap > 2**12 else 4 * tries):  # few candidates: more scales
        sbc = float((1.0 + torch.rand(1, generator=g, dtype=torch.float64)[0]) * 2.0**-10)
        sbc = sbc if fixed is None else fixed
        sbt = torch.tensor([sbc], dtype=torch.float32)
        if out_dtype == torch.float32:
            v = pick_fp32_ties(g, sa.float(), sbt, vmax)[:, 0]
        else:
            v = pick_ties(g, sa.float(), sbt, out_dtype, vmax)[:, 0]
        y1, y2, y3 = tie_orders_bits(v.abs().double().reshape(-1, 1, 1), sa.float(), sbt, out_dtype)
        n_d = int(((y1 != y2) | (y1 != y3)).sum())
        if n_d > best_n:
            best, best_n = (v, sbc), n_d
    return best


def _targets(
    kind: str, rows: list, sa: Tensor, sbc: float, out_dtype, cap: int, g, j: int = 0, scalar_sb=False
) -> Tensor:
    """int64 [R]: the accumulators of one probe column (0 where a row takes none)."""
    r = len(rows)
    fp32 = out_dtype == torch.float32
    short = torch.tensor([k == "short" for k in rows])
    tiny = torch.tensor([k == "tiny" for k in rows])
    if kind == "signed_zero":
        return torch.zeros(r, dtype=torch.int64)
    if kind == "bias_point":
        lim = min(cap, 2**11 - 1)
        v = torch.zeros(r, dtype=torch.int64)
        idx = torch.nonzero(short).reshape(-1)
        if len(idx) == 0:
            return v
        v0 = int(torch.randint(lim // 2, lim + 1, (1,), generator=g)[0]) | 1
        for i in idx.tolist():
            x = round(v0 * float(sa[idx[0]]) / float(sa[i])) | 1
            v[i] = max(1, min(lim, abs(x))) * (1 if x >= 0 else -1)
        return v
    if kind == "overflow":
        t0, base = (4090, 2.0**4) if out_dtype == torch.float16 else (505, 2.0**119)
        ok = short if fp32 else short | torch.tensor([k == "real" for k in rows])
        t = t0 + (5 * torch.arange(r) + 7 * j) % 12  # both sides of the boundary
        v = torch.round(t.double() * base / (sa.abs() * sbc)).to(torch.int64)
        return torch.where(ok & (v <= cap), v, 0)
    if kind == "subnormal":
        ok = short if out_dtype == torch.float16 else tiny
        v = torch.randint(1, 32, (r,), generator=g) * torch.where(torch.rand(r, generator=g) < 0.5, -1, 1)
        return torch.where(ok, v, 0)
    if kind == "subnormal_scale":  # tiny rows only (float32-subnormal s_a); every legal order exact before rounding
        if scalar_sb:  # s_w = 2^-10: y = acc * 2^-140 * short, nonzero in bf16 from acc >= 2^7, zero in fp16
            lo, hi = 2**7, max(2**7 + 1, min(cap, 2**14))
            v = (
                torch.randint(lo, hi, (r,), generator=g)
                if out_dtype != torch.float16
                else torch.zeros(r, dtype=torch.int64)
            )
        else:
            v = torch.randint(1, 32, (r,), generator=g)
        return torch.where(tiny, v * torch.where(torch.rand(r, generator=g) < 0.5, -1, 1), 0)
    if kind == "big_acc":
        ok = ~tiny
        v = 2**24 + 1 + 2 * torch.randint(0, 2**20, (r,), generator=g)
        v = v * torch.where(torch.rand(r, generator=g) < 0.5, -1, 1)
        return torch.where(ok & (v.abs() <= cap), v, 0)
    raise ValueError(f"unknown planted kind {kind!r}")


def odd_ints(g: torch.Generator, shape) -> Tensor:
    """int64 odd values in {-5, -3, -1, 1, 3, 5}."""
    return (2 * torch.randint(0, 3, tuple(shape), generator=g) + 1) * torch.where(
        torch.rand(tuple(shape), generator=g) < 0.5, -1, 1
    )


def planted_case(
    m: int,
    k: int,
    n: int,
    out_dtype: torch.dtype = torch.bfloat16,
    mode: str = "real",
    bias: bool = False,
    seed: int = 0,
    name: str = "planted",
    scale_a_tensor: bool = False,
    scale_b_tensor: bool = False,
    rotate: int = 0,
    meta: Optional[dict] = None,
    magnitude: Optional[str] = None,
    bias_value: Optional[str] = None,
    lead: Optional[str] = None,
    scalar_ties: bool = False,
    distinct_offsets: bool = False,
    deep_acc: bool = False,
) -> GemmOperands:
    """Dense random (M, K, N) operands with planted discriminators; ``mode`` ``real``
    | ``pow2`` (weight scales); ``scale_*_tensor``: one scale value for every row /
    column (as a [M] / [N] vector); ``rotate``: offset into the kind cycles.
    ``magnitude`` (:data:`MAGNITUDES`): ``subnormal`` plants ``subnormal_scale`` (a scalar s_w becomes 2^-10),
    ``huge`` rescales s_a / s_w by 2^+-HUGE; ``bias_value`` (:data:`BIAS_VALUES`, with ``bias``): a ``bias_value``
    column; ``lead``: that kind first; ``scalar_ties``: ties searched at a scalar s_w's own value;
    ``distinct_offsets``: pow2 s_w = 2^-(7 + j % 5), so s_w[j] != s_w[j + 16 / 32 / 64 / 128 / 256];
    ``deep_acc``: ``partial_sums`` and ``big_acc`` wherever K affords them, also with float32 output (``big_acc``
    then a power-of-two s_w column) and a scalar s_w (not both with a real s_w: C6's premise).
    A real-mode case without a scalar s_w gets s_w = 0 on one non-probe column (``meta["probes"]["zero_scale_col"]``);
    a pow2-mode scalar s_w is 2^LIFT_EXP (s_a scaled down to match); the ``signed_zero`` column's bias is -0.0 for
    an even ``rotate``, +0.0 for an odd one.
    ``meta["probes"]``: probe rows and columns; ``meta["planted"]``: :func:`discrimination`."""
    g = generator(f"{name}/{m}x{k}x{n}/{OUT_TAG[out_dtype]}/{mode}", seed)
    hi = 127 if 16384 * k >= 2**31 else 128
    a = torch.randint(-hi, 128, (m, k), generator=g, dtype=torch.int16)
    b = torch.randint(-hi, 128, (n, k), generator=g, dtype=torch.int16)
    sa = (0.5 + 7.5 * torch.rand(m, generator=g, dtype=torch.float64)) / 127.0
    if mode == "pow2":
        sb = torch.pow(2.0, -torch.randint(7, 13, (n,), generator=g).double())
        if distinct_offsets:
            sb = torch.pow(2.0, -(7 + torch.arange(n) % 5).double())
    else:
        sb = (0.02 + 0.28 * torch.rand(n, generator=g, dtype=torch.float64)) / 127.5
    if scale_b_tensor:
        sb.fill_(
            2.0**-10 if mode == "pow2" else float(1.0 + torch.rand(1, generator=g, dtype=torch.float64)[0]) * 2.0**-10
        )
        if magnitude == "subnormal":  # a power-of-two scalar s_w: s_a * s_w stays exact in the subnormal range
            sb.fill_(2.0**-10)
    fp32 = out_dtype == torch.float32
    if fp32 and mode == "real":  # every order agrees where s_a is a power of two
        sa = torch.pow(2.0, torch.round(torch.log2(sa)))
        scale_a_tensor_kind = "pow2"
    else:
        scale_a_tensor_kind = "short"
    bvec = (0.5 * torch.randn(n, generator=g)).to(out_dtype) if bias else None

    prow = probe_positions(m, MAX_ROWS)
    kinds_r = [ROW_KINDS[(i + rotate) % 3] for i in range(len(prow))]
    subnormal = magnitude == "subnormal"
    if subnormal and "tiny" not in kinds_r:
        kinds_r[-1] = "tiny"
    tiny_exp = SUBNORMAL_EXP if subnormal else -64
    sgn_r = torch.tensor([-1.0 if i % 4 in (1, 2) else 1.0 for i in range(len(prow))], dtype=torch.float64)
    if scale_a_tensor:
        kinds_r = ["short"] * len(prow)
        s0 = (1.0 if scale_a_tensor_kind == "pow2" else float(short_mantissa(g, 1, 3)[0])) * float(sgn_r[0])
        sa = torch.full((m,), s0, dtype=torch.float64)
    else:
        for i, (r, kind) in enumerate(zip(prow, kinds_r)):
            v = (
                float(short_mantissa(g, 1, 3)[0])
                if kind != "real"
                else float(1.0 + torch.rand(1, generator=g, dtype=torch.float64)[0])
            )
            sa[r] = v * float(sgn_r[i]) * (2.0**tiny_exp if kind == "tiny" else 1.0)
    sa_probe = sa[prow].clone()

    ks = _kinds(out_dtype, mode, bias, k, scale_b_tensor, magnitude, bias_value, deep_acc)
    pcol = probe_positions(n, MAX_COLS)
    ks = ks[rotate % len(ks) :] + ks[: rotate % len(ks)]
    first = [x for x in (lead, "subnormal_scale", "bias_value") if x in ks]
    ks = list(dict.fromkeys(first + ks))
    extra = [x for x in ("scale_order", "bias_point") if x in ks] or ks
    col_kinds = (ks + extra * len(pcol))[: len(pcol)]
    budget = 3 * k // 4 if k > 1 else 0
    fixed = {"partial_sums": PARTIAL_K_DEEP if deep_acc else PARTIAL_K, "big_acc": BIG_ACC_K, "bias_value": 0}
    big = sum(fixed.get(c, 0) for c in col_kinds)
    n_small = sum(c not in fixed for c in col_kinds)
    bk = max(1, min(32, (budget - big) // max(1, n_small)))
    sizes = [fixed.get(c, bk) for c in col_kinds]
    while sizes and sum(sizes) > budget:  # K too small for every probe column
        col_kinds, pcol, sizes = col_kinds[:-1], pcol[:-1], sizes[:-1]
    total = sum(sizes)
    pos = [(i * k) // total for i in range(total)] if total else []
    # round robin over the spread positions: column j takes its r-th position in round r
    col_of = torch.tensor([j for j, z in enumerate(sizes) for _ in range(z)], dtype=torch.int64)
    rnd = torch.cat([torch.arange(z) for z in sizes]) if sizes else torch.zeros(0)
    order = torch.argsort(rnd * max(1, len(sizes)) + col_of, stable=True)
    slot_col = torch.empty_like(col_of)
    slot_col[order] = torch.arange(total)
    pos_t = torch.tensor(pos, dtype=torch.int64)
    slots = [pos_t[slot_col[col_of == j]].tolist() for j in range(len(sizes))]
    if len(pos):  # plant positions carry probe products only
        a[:, pos_t] = 0
        b[:, pos_t] = 0
    if fp32:  # probe rows isolated: two roundings per order could exceed C6's spacing
        a[prow] = 0
    tiny_rows = torch.tensor([x == "tiny" for x in kinds_r])
    if subnormal:  # subnormal s_a: products only where planted (every legal order exact there)
        a[[r for r, x in zip(prow, kinds_r) if x == "tiny"]] = 0
    cols: list[_Col] = []
    bias_vals: dict[int, float] = {}
    for j, (c, kind) in enumerate(zip(pcol, col_kinds)):
        kp = torch.tensor(sorted(slots[j]), dtype=torch.int64)
        sbc = float(sb[0]) if scale_b_tensor else _column_scale(kind, mode, out_dtype, g, j)
        sb[c] = sbc
        b[c] = 0
        if kind == "bias_value":
            bias_vals[c] = bias_class_value(bias_value, out_dtype, g, j)
            cols.append(_Col(kind, c, ()))
            continue
        if kind == "partial_sums":
            odd_b = odd_ints(g, (3,))
            b[c, kp[:3]] = odd_b.to(b.dtype)
            b[c, kp[3:]] = 127
            sgn = torch.where(torch.rand(len(prow), generator=g) < 0.5, -1, 1)
            ok = torch.ones(len(prow), dtype=torch.bool) if not fp32 else torch.tensor([x != "real" for x in kinds_r])
            ok &= ~tiny_rows if subnormal else ok
            up, down = kp[3 : 3 + RUN], kp[3 + RUN :]
            if deep_acc:  # the positives before K / 2, as many negatives at the end: the running sum peaks (odd,
                # in (2^24, 2^25)) at K / 2 and stays there until the last quarter, so a float32 reduction of 2, 3
                # or 4 K slices rounds it
                rest = kp[3:]
                up, down = rest[rest < k // 2], rest[rest >= k // 2]
                n_run = min(len(up), len(down))
                up, down = up[:n_run], down[len(down) - n_run :]
                b[c, kp[3:]] = 0
                b[c, up], b[c, down] = 126, 126
            for i, r in enumerate(prow):
                if ok[i]:
                    a[r, kp[:3]] = odd_ints(g, (3,)).to(a.dtype)
                    a[r, up] = 127 * int(sgn[i])
                    a[r, down] = -127 * int(sgn[i])
        else:
            b[c, kp[:-1]] = 127
            b[c, kp[-1]] = 1
            if kind == "scale_order":
                fixed_sb = sbc if scale_b_tensor and scalar_ties else None
                v, tie_sb = _tie_column(g, sa_probe, out_dtype, _capacity(len(kp)), fixed=fixed_sb)
                if not scale_b_tensor:
                    sbc = sb[c] = tie_sb
            else:
                v = _targets(kind, kinds_r, sa_probe, sbc, out_dtype, _capacity(len(kp)), g, j, scale_b_tensor)
            if subnormal and kind != "subnormal_scale":
                v = torch.where(tiny_rows, 0, v)
            if fp32 and kind != "scale_order":
                v = torch.where(torch.tensor([x != "real" for x in kinds_r]), v, 0)
            a[torch.tensor(prow).unsqueeze(-1), kp.unsqueeze(0)] = _decompose(v, len(kp)).to(a.dtype)
            if kind == "bias_point" and bias and bool((v != 0).any()):
                r0 = int(torch.nonzero(v).reshape(-1)[0])
                y0 = (
                    torch.tensor(float(v[r0]), dtype=torch.float32)
                    * torch.tensor(float(sa_probe[r0]), dtype=torch.float32)
                    * torch.tensor(sbc, dtype=torch.float32)
                )  # exact: <= 24 bits
                bias_vals[c] = float(-(y0.to(out_dtype)).float())
        cols.append(_Col(kind, c, tuple(kp.tolist())))
    # signed_zero: a -0.0 bias (a +0 added shows) in even-rotated cases, +0.0 (a skipped add shows) in odd ones
    sz_bias = -0.0 if rotate % 2 == 0 else 0.0
    zcol = _zero_scale_column(n, [c.index for c in cols]) if mode == "real" and not scale_b_tensor else None
    # s_w = 0 on a random column (real mode: C5 notes a pow2 case's non-pow2 s_w): the output keeps the sign of
    # acc * s_a (-0.0 where it is negative), so a zero-scale column written +0 shows
    if zcol is not None:
        sb[zcol] = 0.0
    if bias:
        for col in cols:
            bvec[col.index] = bias_vals.get(col.index, sz_bias if col.kind == "signed_zero" else -0.0)
        if mode == "real" and not fp32:
            _keep_c6_premise(a, b, sa, sb, bvec, out_dtype, {c.index for c in cols}, g)
    if magnitude == "huge":  # exact rescaling: s_a * s_w and every legal order's bits unchanged
        sa, sb = sa * 2.0**HUGE, sb * 2.0**-HUGE
    if mode == "pow2" and scale_b_tensor:  # exact too: a scalar pow2 s_w >= 2 meets |acc| * s_w >= 2^31
        sa, sb = sa * 2.0 ** -(LIFT_EXP + 10), sb * 2.0 ** (LIFT_EXP + 10)
    scale_mode, meta = "pow2" if mode == "pow2" else "synthetic", dict(meta or {})
    a, b, sa, sb = a.to(torch.int8), b.to(torch.int8), sa.to(torch.float32), sb.to(torch.float32)
    ops = GemmOperands(a, b, sa, sb, bvec, out_dtype, name, scale_mode, meta)
    ops.meta["probes"] = {"rows": prow, "row_kinds": kinds_r, "cols": [[c.index, c.kind] for c in cols]}
    if zcol is not None:
        ops.meta["probes"]["zero_scale_col"] = zcol
    ops.meta["planted"] = discrimination(ops)
    if ops.meta["planted"]["big_acc"]:  # C4 (float32-exact accumulator) fails by design
        ops.meta["violates"] = sorted(set(ops.meta.get("violates", [])) | {"C4"})
    return ops


def _zero_scale_column(n: int, probe_cols: list) -> Optional[int]:
    """The column given s_w = 0 (a zero scale is legal, DESIGN.md 3): the middle non-probe column (random
    accumulators of both signs), or None where every column is a probe."""
    free = [c for c in range(n) if c not in set(probe_cols)]
    return free[len(free) // 2] if free else None


def bias_class_value(cls: str, out_dtype, g: torch.Generator, j: int) -> float:
    """A bias of class ``cls`` (:data:`BIAS_VALUES`) in ``out_dtype`` whose bits change when narrowed to the other
    16-bit format(s): ``full`` every significand bit of the out dtype (bf16: in fp16's range, kept), ``other_range``
    outside the other format's range (bf16 2^20 / 2^-30; fp16 near 65504; fp32 2^70), ``tiny`` subnormal (bf16
    2^-130; fp16 2^-24 * odd; fp32 2^-140 * odd)."""
    frac = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}[out_dtype]
    odd = float(2 * int(torch.randint(2 ** (frac - 2), 2 ** (frac - 1), (1,), generator=g)[0]) + 1)
    sig = 1.0 + odd / 2**frac  # the lowest significand bit set
    sgn = -1.0 if j % 2 else 1.0
    if cls == "full":
        v = sig * 2.0 ** int(torch.randint(-6, 7, (1,), generator=g)[0])
    elif cls == "other_range":
        e = {torch.bfloat16: (20, -30)[j % 2], torch.float16: 15, torch.float32: (70, -140)[j % 2]}[out_dtype]
        v = sig * 2.0**e
    elif cls == "tiny":
        v = {torch.bfloat16: sig * 2.0**-130, torch.float16: odd * 2.0**-24, torch.float32: odd * 2.0**-149}[out_dtype]
    else:
        raise ValueError(f"unknown bias value class {cls!r}; known: {BIAS_VALUES}")
    return float(torch.tensor(sgn * v, dtype=torch.float64).to(out_dtype).float())


def _keep_c6_premise(
    a: Tensor,
    b: Tensor,
    sa: Tensor,
    sb: Tensor,
    bias: Tensor,
    out_dtype,
    probe_cols: set,
    g: torch.Generator,
    tries: int = 4,
) -> None:
    """In place: redraw (finally -0) the bias of every non-probe column where two
    legal epilogues end more than one spacing apart (C6's premise)."""
    acc = exact_int_mm(a.to(torch.int8), b.to(torch.int8))
    s_a, s_b = sa.to(torch.float32), sb.to(torch.float32)
    y = acc.double() * sa.double().reshape(-1, 1) * sb.double().reshape(1, -1)
    free = torch.ones(bias.shape[0], dtype=torch.bool)
    free[list(probe_cols)] = False
    for attempt in range(tries + 1):
        # only a near-cancellation can move two legal orders more than a spacing apart
        near = ((y + bias.double()).abs() <= 2.0**-10 * y.abs()).any(0) & free
        idx = torch.nonzero(near).reshape(-1)
        if len(idx) == 0:
            return
        bad = torch.zeros(len(idx), dtype=torch.bool)
        for point in BIAS_POINTS:
            outs = [
                apply_epilogue(
                    acc[:, idx], s_a, s_b[idx], EpilogueContract(o, point), bias=bias[idx], out_dtype=out_dtype
                )
                for o in SCALE_ORDERS
            ]
            for z in outs[1:]:
                bad |= (spacing_distance(z, outs[0]) > 1).any(0)
        idx = idx[bad]
        if len(idx) == 0:
            return
        new = (0.5 * torch.randn(len(idx), generator=g)).to(out_dtype)
        bias[idx] = new if attempt < tries else torch.full_like(new, -0.0)


def discrimination(ops: GemmOperands) -> dict:
    """Per planted kind, the discriminating probe elements of the reference: scale
    orders differ, bias points differ, -0 products, +-inf, subnormal or zero
    outputs of nonzero accumulators, odd |acc| < 2^24, |acc| > 2^24 inexact in float32."""
    pr = ops.meta["probes"]
    rows = torch.tensor(pr["rows"], dtype=torch.int64)
    out = {kind: 0 for kind in KINDS}
    if not pr["cols"] or len(rows) == 0:
        return out
    cols = torch.tensor([c for c, _ in pr["cols"]], dtype=torch.int64)
    kinds = [kd for _, kd in pr["cols"]]
    a, b = ops.a[rows], ops.b[cols]
    sa = ops.scale_a.reshape(-1).expand(ops.m)[rows] if ops.scale_a.numel() == 1 else ops.scale_a.reshape(-1)[rows]
    sb = ops.scale_b.reshape(-1).expand(ops.n)[cols] if ops.scale_b.numel() == 1 else ops.scale_b.reshape(-1)[cols]
    bias = None if ops.bias is None else ops.bias[cols]
    acc = exact_int_mm(a, b)

    def ref(order, point="fp32_before_round", with_bias=True):
        return apply_epilogue(
            acc, sa, sb, EpilogueContract(order, point), bias=bias if with_bias else None, out_dtype=ops.out_dtype
        )

    r = {o: bits_of(ref(o)) for o in ("a_then_w", "w_then_a", "fused")}
    y = ref("a_then_w").float()
    y0 = ref("a_then_w", with_bias=False).float()
    for j, kind in enumerate(kinds):
        col = slice(j, j + 1)
        if kind == "scale_order":
            d = (r["a_then_w"][:, col] != r["w_then_a"][:, col]) | (r["a_then_w"][:, col] != r["fused"][:, col])
            out[kind] += int(d.sum())
        elif kind == "bias_point" and bias is not None:
            after = bits_of(ref("a_then_w", "after_round"))
            out[kind] += int((after[:, col] != r["a_then_w"][:, col]).sum())
        elif kind == "signed_zero":  # -0 products (a +0 bias, or a skipped one, shows)
            out[kind] += int(((y0[:, col] == 0) & torch.signbit(y0[:, col])).sum())
        elif kind == "overflow":
            out[kind] += int(torch.isinf(y[:, col]).sum())
        elif kind == "subnormal":
            tiny = torch.finfo(ops.out_dtype).tiny
            out[kind] += int(((acc[:, col] != 0) & (y[:, col].abs() < tiny)).sum())
        elif kind == "partial_sums":
            out[kind] += int(((acc[:, col] % 2 != 0) & (acc[:, col].abs() < 2**24)).sum())
        elif kind == "bias_value" and bias is not None:
            narrowed = [
                bias[col].to(dt).to(ops.out_dtype) for dt in (torch.bfloat16, torch.float16) if dt != ops.out_dtype
            ]
            changed = torch.stack([bits_of(x) != bits_of(bias[col]) for x in narrowed]).any(0)
            out[kind] += int(changed.sum()) * len(rows)
        elif kind == "subnormal_scale":  # nonzero outputs of a float32-subnormal s_a or s_a * s_w
            prod = (sa.reshape(-1, 1) * sb[col].reshape(1, -1)).abs()
            sub = (sa.abs().reshape(-1, 1) < 2.0**-126) | ((prod < 2.0**-126) & (prod > 0))
            out[kind] += int(((acc[:, col] != 0) & sub & (y[:, col] != 0)).sum())
        elif kind == "big_acc":
            big = acc[:, col].abs() > 2**24
            out[kind] += int((big & (acc[:, col].double().float().double() != acc[:, col].double())).sum())
    return out


assert set(MANT_BITS) == set(OUT_TAG)
