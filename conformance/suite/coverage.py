"""Trigger-condition coverage: what a conformance run actually exercised.

:func:`case_coverage` measures per case, from the operands, the exact accumulator and the
*declared* contract's reference output (not the kernel's: a kernel flushing subnormals must not
hide that they were exercised): partial-sum and accumulator extremes vs 2**24 / int32, subnormal /
inf / signed-zero outputs, negative / zero scales, zero rows, (-128)*(-128) product pairs, bias
cancellation, scale-order-discriminating elements, shape residues, layouts handed to the kernel.
:func:`coverage_table` aggregates the cases with output into report rows
``{"condition", "reached", "cases", "covered"}``.
"""

from __future__ import annotations

import math
import shlex
from typing import Optional, Sequence

import torch
from torch import Tensor

from conformance.cases.covering import ATTRIBUTES, SPACE
from conformance.cases.fp8 import FP8_FAMILIES
from conformance.cases.reach import FP32_EXACT, INT32_MAX, PAIR_ALIGN, reach_of
from conformance.checks.output_bits import run_device
from conformance.kernels.spec import declared_epilogue
from reference.accumulate import exact_int_mm
from reference.epilogue import apply_epilogue
from reference.operands import OPERAND_NAMES, layout_label

#: Residue moduli of K reported (usual K tiles).
K_MODULI = (8, 16, 32, 64, 128)
#: M values the table wants (decode and small-batch tails).
M_WANTED = tuple(range(1, 18))
#: N values around tile edges the table looks for.
N_EDGES = (15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129)
#: Layouts of ``a`` / ``b`` / scales the contract admits (reference.operands.layout_label).
LAYOUTS_WANTED = {
    "a": ("dense", "row-major padded"),
    "b": ("dense", "row-major padded", "column-major"),
    "scale_a": ("dense", "strided"),
    "scale_b": ("dense", "strided"),
}


def _float_counts(y: Tensor) -> dict:
    """Subnormal / inf / signed-zero element counts of an output tensor."""
    f = y.to(torch.float32) if y.dtype != torch.float32 else y
    tiny = torch.finfo(y.dtype).tiny
    sub = (f != 0) & (f.abs() < tiny) & torch.isfinite(f)
    zero = f == 0
    neg = torch.signbit(f)
    return {
        "subnormal": int(sub.sum()),
        "pos_inf": int((f == math.inf).sum()),
        "neg_inf": int((f == -math.inf).sum()),
        "neg_zero": int((zero & neg).sum()),
        "pos_zero": int((zero & ~neg).sum()),
    }


def case_coverage(spec, ops, run=None, exact: Optional[Tensor] = None) -> dict:
    """Trigger conditions one case reaches (module docstring): a JSON-able dict. ``ops``:
    GemmOperands on one device (measured there: exact integer sums and element-wise IEEE float32,
    so every device gives the same dict); ``run``: its KernelRun (layouts handed to the kernel) or
    None; ``exact``: the int64 [M, N] accumulator on that device if already computed."""
    acc = exact if exact is not None else exact_int_mm(ops.a, ops.b)
    bias = ops.bias
    contract = declared_epilogue(spec, run_device(run), ops.out_dtype).contract
    ref = apply_epilogue(acc, ops.scale_a, ops.scale_b, contract, bias=bias, out_dtype=ops.out_dtype)
    cov = dict(reach_of(ops, acc))
    cov.update(
        out=_float_counts(ref),
        out_dtype=str(ops.out_dtype).replace("torch.", ""),
        scale_mode=ops.scale_mode,
        m=ops.m,
        k=ops.k,
        n=ops.n,
    )
    if bias is not None:
        y = apply_epilogue(acc, ops.scale_a, ops.scale_b, contract, bias=None, out_dtype=torch.float32)
        bf = bias.to(torch.float32).reshape(1, -1)
        cov["bias_cancel"] = int(((y + bf).abs() < bf.abs() * 2.0**-8).sum())
    else:
        cov["bias_cancel"] = 0
    extra = ((getattr(run, "manifest", None) or {}).get("extra") or {}) if run is not None else {}
    cov["layouts"] = extra.get("operand_layouts") or {k_: layout_label(getattr(ops, k_)) for k_ in OPERAND_NAMES}
    cov["densified"] = list(extra.get("densified") or [])
    for key in ("config", "config_space", "config_candidates"):
        if extra.get(key) is not None:
            cov[key] = extra[key]
    meta = ops.meta or {}
    cov["planted"] = dict(meta.get("planted") or {})
    if meta.get("regime"):
        cov["regime"] = dict(meta["regime"])
    if meta.get("attributes"):
        cov["attributes"] = dict(meta["attributes"])
    return cov


def _log2(v: int) -> str:
    return f"2^{math.log2(v):.2f}" if v > 0 else "0"


def _list(xs, limit: int = 20) -> str:
    xs = list(xs)
    s = ", ".join(str(x) for x in xs[:limit])
    return s + (f", ... ({len(xs)})" if len(xs) > limit else "")


def fp8_coverage_table(case_results: Sequence) -> list[dict]:
    """An e4m3 kernel's coverage rows (the int8 conditions are not measured for it): per FP8 family (its trigger,
    ``conformance.cases.fp8.FP8_FAMILIES``) and for the e4m3 captures, how many of their cases the kernel produced
    output on; ``covered`` ``yes`` (all), ``partial`` or ``no``."""
    groups: dict[str, list] = {}
    for cr in case_results:
        meta = getattr(cr, "meta", None) or {}
        fam = meta.get("family")
        key = fam if fam in FP8_FAMILIES else "captures" if cr.source == "capture" else None
        if key is not None:
            groups.setdefault(key, []).append(bool(getattr(cr, "produced_output", False)))
    rows = []
    for key, ran in groups.items():
        cond = FP8_FAMILIES[key][1] if key in FP8_FAMILIES else "captured layers quantized to e4m3 (C12)"
        n = sum(ran)
        covered = "yes" if n == len(ran) else "partial" if n else "no"
        rows.append(
            {"condition": f"{key}: {cond}", "reached": f"{n} of {len(ran)} cases ran", "cases": n, "covered": covered}
        )
    return rows


#: the block case attributes the block coverage rows report (``conformance.cases.block``: ``meta["block"]``)
BLOCK_ATTRIBUTES = ("m", "k", "n", "magnitude", "layout")


def block_coverage_table(case_results: Sequence) -> list[dict]:
    """A block-scaled kernel's coverage rows: per declared block size and block case attribute
    (:data:`BLOCK_ATTRIBUTES`, out dtype, bias), the values its cases hold and how many the kernel produced output on;
    ``covered`` ``yes`` (every value reached with output), ``partial`` or ``no``."""
    groups: dict[tuple, dict] = {}
    for cr in case_results:
        blk = (getattr(cr, "meta", None) or {}).get("block")
        if not isinstance(blk, dict):
            continue
        ran = bool(getattr(cr, "produced_output", False))
        values = {a: str(blk.get(a)) for a in BLOCK_ATTRIBUTES}
        values["out dtype"] = str(cr.out_dtype).replace("torch.", "")
        values["bias"] = "bias" if cr.bias else "no bias"
        for attr, v in values.items():
            seen = groups.setdefault((blk.get("size"), attr), {})
            seen[v] = seen.get(v, False) or ran
    rows = []
    for (size, attr), seen in groups.items():
        got = [v for v, ran in seen.items() if ran]
        covered = "yes" if len(got) == len(seen) else "partial" if got else "no"
        reached = ", ".join(sorted(got)) + (
            f" (not: {', '.join(sorted(set(seen) - set(got)))})" if covered != "yes" else ""
        )
        rows.append({"condition": f"block {size}: {attr}", "reached": reached, "cases": len(got), "covered": covered})
    return rows


def coverage_table(case_results: Sequence) -> list[dict]:
    """Rows ``{"condition", "reached", "cases", "covered"}`` over the cases
    the kernel produced output on (``CaseResult.coverage`` set).

    ``covered`` is ``"yes"`` / ``"no"`` / ``"partial"`` against what the
    default suite aims for (module docstring); ``cases`` counts the cases
    that reached the condition.
    """
    covs = [
        cr.coverage
        for cr in case_results
        if getattr(cr, "produced_output", False) and getattr(cr, "coverage", None) and "error" not in cr.coverage
    ]
    rows: list[dict] = []

    def row(cond, reached, n, covered):
        rows.append(
            {
                "condition": cond,
                "reached": reached,
                "cases": n,
                "covered": covered if isinstance(covered, str) else ("yes" if covered else "no"),
            }
        )

    def count(pred):
        return sum(1 for c in covs if pred(c))

    row("cases that ran", f"{len(covs)} of {len(case_results)}", len(covs), bool(covs))
    if not covs:
        return rows
    mp = max(max(c["max_partial_fwd"], c["max_partial_bwd"]) for c in covs)
    sampled = count(lambda c: c["partial_step"] > 1)
    row(
        "max |partial sum| (forward / backward K order)",
        f"{mp} ({_log2(mp)}); forward {max(c['max_partial_fwd'] for c in covs)}, backward "
        f"{max(c['max_partial_bwd'] for c in covs)}"
        + (
            f"; {sampled} large cases sampled every 2..{max(c['partial_step'] for c in covs)} k (lower bound)"
            if sampled
            else ""
        ),
        count(lambda c: max(c["max_partial_fwd"], c["max_partial_bwd"]) >= FP32_EXACT),
        mp >= FP32_EXACT,
    )
    n_ps = sum(c["n_partial_big_final_small"] for c in covs)
    row(
        "partial sums >= 2^24 with final |acc| < 2^24",
        f"{n_ps} elements",
        count(lambda c: c["n_partial_big_final_small"] > 0),
        n_ps > 0,
    )
    ma = max(c["max_abs_acc"] for c in covs)
    row("max |acc|", f"{ma} ({_log2(ma)})", len(covs), True)
    row(
        "|acc| >= 2^24 (float32(acc) inexact)",
        f"{sum(c['n_acc_ge_2_24'] for c in covs)} elements",
        count(lambda c: c["n_acc_ge_2_24"] > 0),
        ma >= FP32_EXACT,
    )
    row(
        "|acc| > 2^31 - 1 (int32 overflow)",
        f"{sum(c['n_acc_gt_int32'] for c in covs)} elements",
        count(lambda c: c["n_acc_gt_int32"] > 0),
        ma > INT32_MAX,
    )
    dts = sorted({c["out_dtype"] for c in covs})
    for key, label in (
        ("subnormal", "subnormal outputs"),
        ("pos_inf", "+inf outputs"),
        ("neg_inf", "-inf outputs"),
        ("neg_zero", "-0 outputs"),
        ("pos_zero", "+0 outputs"),
    ):
        per = {dt: sum(c["out"][key] for c in covs if c["out_dtype"] == dt) for dt in dts}
        got = [dt for dt in dts if per[dt]]
        row(
            f"{label} (reference of the declared contract)",
            ", ".join(f"{dt} {per[dt]}" for dt in dts),
            count(lambda c: c["out"][key] > 0),
            "yes" if len(got) == len(dts) else ("partial" if got else "no"),
        )
    row(
        "negative scales",
        f"scale_a in {count(lambda c: c['neg_scale_a'])} cases, scale_b in {count(lambda c: c['neg_scale_b'])}",
        count(lambda c: c["neg_scale_a"] or c["neg_scale_b"]),
        count(lambda c: c["neg_scale_a"]) > 0 and count(lambda c: c["neg_scale_b"]) > 0,
    )
    row(
        "zero scales",
        f"scale_a in {count(lambda c: c['zero_scale_a'])} cases, scale_b in {count(lambda c: c['zero_scale_b'])}",
        count(lambda c: c["zero_scale_a"] or c["zero_scale_b"]),
        count(lambda c: c["zero_scale_a"]) > 0,
    )
    row(
        "all-zero rows of a",
        f"{sum(c['zero_rows_a'] for c in covs)} rows",
        count(lambda c: c["zero_rows_a"] > 0),
        count(lambda c: c["zero_rows_a"] > 0) > 0,
    )
    row(
        "bias near cancellation (|y + bias| < 2^-8 |bias|)",
        f"{sum(c['bias_cancel'] for c in covs)} elements",
        count(lambda c: c["bias_cancel"] > 0),
        count(lambda c: c["bias_cancel"] > 0) > 0,
    )
    al = sorted({x for c in covs for x in c["pair_alignments"]})
    row(
        f"adjacent (-128)*(-128) products, start k mod {PAIR_ALIGN}",
        f"{len(al)}/{PAIR_ALIGN} alignments",
        count(lambda c: bool(c["pair_alignments"])),
        "yes" if len(al) == PAIR_ALIGN else ("partial" if al else "no"),
    )
    res = {mod: {c["k"] % mod for c in covs} for mod in K_MODULI}
    row(
        "K residues (mod " + "/".join(map(str, K_MODULI)) + ")",
        ", ".join(f"{len(res[mod])}/{mod}" for mod in K_MODULI),
        len(covs),
        "yes" if all(len(res[mod]) == mod for mod in K_MODULI) else "partial",
    )
    ms = sorted({c["m"] for c in covs})
    miss = [m for m in M_WANTED if m not in ms]
    row(
        "M values",
        f"1..17 {'all' if not miss else 'missing ' + _list(miss)}; max M {max(ms)}; {len(ms)} distinct",
        len(covs),
        not miss,
    )
    ns = {c["n"] for c in covs}
    nmiss = [n for n in N_EDGES if n not in ns]
    row(
        "N around tile edges (" + _list(N_EDGES) + ")",
        "all" if not nmiss else "missing " + _list(nmiss),
        len(covs),
        not nmiss,
    )
    tie_ms = sorted({c["m"] for c in covs if c["discriminating"] > 0})
    tmiss = [m for m in M_WANTED if m not in tie_ms]
    row(
        "scale-order-discriminating elements (a_then_w != w_then_a), by M",
        f"{sum(c['discriminating'] for c in covs)} elements at M = {_list(tie_ms)}"
        + (f"; missing M {_list(tmiss)}" if tmiss else ""),
        count(lambda c: c["discriminating"] > 0),
        "yes" if not tmiss else ("partial" if tie_ms else "no"),
    )
    row(
        "output dtypes",
        ", ".join(f"{dt} {count(lambda c, d=dt: c['out_dtype'] == d)}" for dt in dts),
        len(covs),
        len(dts) == 3,
    )
    modes = sorted({c["scale_mode"] for c in covs})
    row(
        "scale modes",
        ", ".join(f"{md} {count(lambda c, x=md: c['scale_mode'] == x)}" for md in modes),
        len(covs),
        "pow2" in modes and len(modes) > 1,
    )
    kinds: dict = {}
    for c in covs:
        for kind, v in (c.get("planted") or {}).items():
            e, n = kinds.get(kind, (0, 0))
            kinds[kind] = (e + v, n + (v > 0))
    if kinds:
        row(
            "planted discriminators (elements / cases, conformance.cases.planting)",
            ", ".join(f"{k} {e}/{n}" for k, (e, n) in kinds.items()),
            count(lambda c: sum((c.get("planted") or {}).values()) > 0),
            "yes" if all(n for _, n in kinds.values()) else "partial",
        )
    axes: dict = {}
    for c in covs:
        if c.get("regime"):
            axes.setdefault(c["regime"]["axis"], set()).add(c["regime"]["value"])
    for axis, vals in sorted(axes.items()):
        vs = sorted(vals)
        row(
            f"regime {axis} (family regimes)",
            f"{len(vs)} values, {vs[0]} .. {vs[-1]}",
            count(lambda c, a=axis: (c.get("regime") or {}).get("axis") == a),
            True,
        )
    spaces: dict = {}
    for c in covs:
        if c.get("config") and c.get("config_space"):  # a kernel choosing among candidates, not interpreter tiles
            ran, size = spaces.get(c["config_space"], (set(), 0))
            spaces[c["config_space"]] = (ran | {c["config"]}, max(size, int(c.get("config_candidates") or 0)))
    if spaces:
        row(
            "launch configurations the kernel recorded (ran / candidates, per space)",
            "; ".join(f"{sp}: {len(ran)}" + (f"/{size}" if size else "") for sp, (ran, size) in sorted(spaces.items())),
            count(lambda c: bool(c.get("config_space"))),
            "yes" if all(size and len(ran) >= size for ran, size in spaces.values()) else "partial",
        )
    sl = sorted({c["scale_layout"] for c in covs})
    row("scale shapes ([M] / [M,1] / scalar)", ", ".join(sl), len(covs), len(sl) == 3)
    attrs = [c["attributes"] for c in covs if c.get("attributes")]
    if attrs:
        tw = SPACE.t_wise_coverage(attrs)
        row(
            "covering array: legal attribute tuples the cases that ran hold (conformance.cases.covering)",
            "; ".join(f"{t} {held}/{legal} ({100 * held / max(1, legal):.1f} %)" for t, (held, legal) in tw.items()),
            len(attrs),
            "yes" if all(h == n for h, n in tw.values()) else "partial",
        )
        for kind in ("scale_order", "bias_point", "bias_value", "subnormal_scale", "subnormal", "overflow"):
            met: dict[str, set] = {a: set() for a in ATTRIBUTES}
            for c in covs:
                if c.get("attributes") and (c.get("planted") or {}).get(kind, 0) > 0:
                    for a, v in c["attributes"].items():
                        met[a].add(v)
            txt = "; ".join(f"{a}: {', '.join(v for v in ATTRIBUTES[a] if v in met[a])}" for a in met if met[a])
            n_kind = sum(1 for c in covs if c.get("attributes") and (c.get("planted") or {}).get(kind, 0) > 0)
            row(
                f"attribute values with {kind} discriminators (C5 / C6 / C8 see them)", txt or "none", n_kind, bool(txt)
            )
    for op, wanted in LAYOUTS_WANTED.items():
        seen: dict[str, int] = {}
        dens = 0
        for c in covs:
            lab = c["layouts"].get(op)
            if op in c["densified"]:
                dens += 1
                continue
            seen[lab] = seen.get(lab, 0) + 1
        missing = [w for w in wanted if w not in seen]
        txt = ", ".join(f"{k} {v}" for k, v in sorted(seen.items()))
        if dens:
            txt += f"; NOT covered: {dens} cases handed as dense copies (kernel declares contiguous_only)"
        row(
            f"layout of {op}",
            txt,
            len(covs),
            "yes" if not missing else ("partial" if len(missing) < len(wanted) else "no"),
        )
    return rows


def invocation(args=None, prog: str = "int8conf check") -> dict:
    """``{"command", "options"}`` of a report: ``args`` is the parsed Namespace (or a dict; None =
    none); ``command`` re-creates the run (options not None / False / empty, in parser order)."""
    opts = dict(vars(args)) if args is not None and not isinstance(args, dict) else dict(args or {})
    # ``command``: the subcommand's argparse dest (already in ``prog``)
    opts = {k: v for k, v in opts.items() if not callable(v) and not k.startswith("_") and k != "command"}
    parts: list[str] = []
    for k, v in opts.items():
        flag = "--" + k.replace("_", "-")
        if v is None or v is False or v == [] or v == "":
            continue
        if v is True:
            parts.append(flag)
        elif isinstance(v, (list, tuple)):
            for x in v:
                parts += [flag, str(x)]
        else:
            parts += [flag, str(v)]
    clean = {k: (list(v) if isinstance(v, tuple) else v) for k, v in opts.items()}
    return {"command": " ".join([prog] + ([shlex.join(parts)] if parts else [])), "options": clean}
