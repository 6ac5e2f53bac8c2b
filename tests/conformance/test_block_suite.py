"""Block-scaled kernels through the suite (issue 46): the block plan (``conformance.cases.block`` cases of every
declared size, the block per-case checks, C9, C16 looked up by name), what its cases discriminate (each alternative
block accumulation, a wrong K-block / weight-block index, a tail K-block's scale: bits change, the reference
evaluating the alternative), C5's premise on the pow2 cases (every legal form and order gives the same bits), C8's
failure line, ``int8conf check`` / the pytest plugin / the gate taking a block kernel with no new flags, and a dense
kernel's plan unchanged."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conformance.cases.block import VARIANTS, cancelling_rows
from conformance.cases.block_covering import block_covering_rows, block_space
from conformance.cases.fp8 import SAFE_BITS
from conformance.checks.result import CHECK_NAMES
from conformance.cli import main
from conformance.kernels.loader import declare, load_module_function
from conformance.kernels.registry import get_kernel
from conformance.suite import plan
from conformance.suite.evaluate import evaluate_fixed
from conformance.suite.plan import CASE, PROPERTY, SuiteState, default_cases, suite_steps
from reference.block.contract import FIELD_FORMS
from reference.block.evaluate import block_accumulate, order_free_elements, reference_block_scaled_mm

SIZES = ((128, 128), (64, 128), (128, 64), (1, 128))
DECLARED = "mul s_a; mul s_w; add"


@functools.lru_cache(maxsize=2)
def _plan(operands: str = "int8") -> tuple:
    return tuple(default_cases(operands=operands, block_sizes=SIZES)[0])


def _ref(c, accumulation=DECLARED, sa=None, sw=None, block=None):
    sa = c.scale_a if sa is None else sa
    sw = c.scale_b if sw is None else sw
    return reference_block_scaled_mm(
        c.a, c.b, sa, sw, block or c.block_size, accumulation, "add bias; cast out", c.bias, c.out_dtype
    )


def _differ(x, y) -> bool:
    return not torch.equal(x.view(torch.uint8), y.view(torch.uint8))


def test_the_block_plan_holds_every_variant_per_declared_size_and_the_block_steps():
    cases = _plan()
    int_variants = [v for v in VARIANTS if v.values == "int"]  # the e4m3-only value variants: 3 of them
    assert len(VARIANTS) - len(int_variants) == 3
    # every variant per size, less the ones the covering rows subsume at the first size (10 int8, 12 e4m3), the
    # covering rows (50 int8, 106 e4m3) at the first size, the wide-N case at the first size
    assert len(_plan("e4m3")) == len(SIZES) * len(VARIANTS) - 12 + 106 + 1 == 183
    assert len(cases) == len(SIZES) * len(int_variants) - 10 + 50 + 1 == 117
    assert sum(c.meta["variant"].startswith("cov") for c in cases) == 50
    assert {c.block_size for c in cases} == set(SIZES)
    assert cases[0].name == "block/128x128/prefill129-tail1-bf16" and cases[-1].n == 4096 + 64
    ks = {(c.block_size, c.meta["block"]["k"]) for c in cases}
    assert {((128, 64), "multiple"), ((128, 64), "tail 1"), ((128, 64), "tail 63")} <= ks
    assert all(c.n % c.block_size[0] for c in cases if c.block_size[0] > 1 and c.meta["block"]["n"] == "partial")
    assert {c.m for c in cases} >= {1, 3, 128, 129} and {str(c.out_dtype) for c in cases} == {
        "torch.bfloat16",
        "torch.float16",
        "torch.float32",
    }
    col = next(c for c in cases if c.meta["block"]["layout"] == "all")
    assert col.scale_a.stride() == (1, col.m) and col.b.stride() == (1, col.n) and col.a.stride(0) == col.k + 5
    names = [s.name for s in suite_steps(cases, 25, True, False, "int8", block=True) if s.kind != CASE]
    assert names == ["C9-batch_invariance", "C16-block_accumulation"] + [
        f"{cid}-{CHECK_NAMES[cid]}" for cid in ("C7", "E1", "C13", "C14", "C15")
    ]
    fp8 = [s.name for s in suite_steps([], 25, False, False, "e4m3", serving_checks=False, block=True)]
    assert fp8 == ["C9-batch_invariance", "C16-block_accumulation", "C11-fp8_accumulator"]


def test_scales_are_distinct_per_k_block_and_weight_block_row_with_full_mantissas():
    for c in _plan():
        if c.meta["block"]["magnitude"] in ("pow2", "pow2_tiny", "k_uniform"):  # powers of two; constant along K
            continue
        for s in (c.scale_a, c.scale_b):
            assert all(len(set(row.tolist())) == s.shape[1] for row in s)  # per K-block
            if s.abs().min() >= 2.0**-126:  # per row (a subnormal class's ~16 bits may repeat over 130 rows)
                assert len(set(s[:, 0].tolist())) == s.shape[0]
            mant, _ = torch.frexp(s)
            if s.abs().min() >= 2.0**-126:  # a subnormal class's tiny scale keeps only ~16 significant bits
                assert bool(((mant * 2**24).to(torch.int64) & 0xFF != 0).any())  # low mantissa bits in use
            else:
                assert bool((s.abs() < 2.0**-126).all()) and bool((s != 0).all())  # subnormal, never flushed here


def _alternatives(c) -> dict:
    """name -> the reference of a kernel that differs from the declaration that way."""
    kb = c.scale_a.shape[1]
    prev = [max(0, j - 1) for j in range(kb)]
    tail_a, tail_w = c.scale_a.clone(), c.scale_b.clone()
    tail_a[:, kb - 1], tail_w[:, kb - 1] = c.scale_a[:, kb - 2], c.scale_b[:, kb - 2]
    bn, bk = c.block_size
    rows = torch.clamp(torch.arange(c.n) // bk, max=c.scale_b.shape[0] - 1)  # weight block from block_k
    return {
        "fma": _ref(c, "mul s_a; fma s_w"),
        "fused scale product": _ref(c, "mul s_a*s_w; add"),
        "fma of the fused product": _ref(c, "fma s_a*s_w"),
        "split_k=2": _ref(c, DECLARED + "; order split_k=2"),
        "split_k=3": _ref(c, DECLARED + "; order split_k=3"),
        "scale of the previous K-block": _ref(c, DECLARED, c.scale_a[:, prev], c.scale_b[:, prev]),
        "tail K-block with the previous block's scale": _ref(c, DECLARED, tail_a, tail_w),
        "weight block index from block_k": _ref(c, DECLARED, None, c.scale_b[rows], (1, bk)) if bn != bk else None,
    }


def test_every_alternative_changes_bits_on_the_decode_cases_of_every_size():
    """On the decode cases alone (M < 128; the e4m3 cases hold the same kind of integers, their partials are the
    int8 computation's: :func:`test_e4m3_block_partials_are_exact_at_14_bits_and_odd_rows_cancel`)."""
    for size in SIZES:
        seen: dict = {}
        sixteen: dict = {}  # ... also on a 16-bit output (the cancelling rows)
        for c in (c for c in _plan() if c.block_size == size and c.scale_a.shape[1] > 1 and c.m < 128 < 4096 > c.n):
            base = _ref(c)
            for name, alt in _alternatives(c).items():
                hit = alt is not None and _differ(base, alt)
                seen[name] = seen.get(name, False) or hit
                if c.out_dtype != torch.float32 and "split" not in name:
                    sixteen[name] = sixteen.get(name, False) or hit
        expected = {n for n in seen if not (n.startswith("weight") and size[0] == size[1])}
        assert {n for n, hit in seen.items() if hit} == expected, size
        assert {n for n, hit in sixteen.items() if hit} == expected - {"split_k=2", "split_k=3"}, size


def test_e4m3_block_partials_are_exact_at_14_bits_and_odd_rows_cancel():
    for c in _plan("e4m3"):
        bk = c.block_size[1]
        values = c.meta["block"]["values"]
        if values not in (
            "int",
            "fp8negzero",
        ):  # e4m3-only values: each K-block's sum is exact at 14 bits, except fp8wide by design
            # each K-block's partial starts from 0, so the first three K-blocks and the last (the tail) decide it
            kb = -(-c.k // bk)
            keep = sorted({*range(min(3, kb)), kb - 1})
            cols = torch.cat([torch.arange(j * bk, min(c.k, (j + 1) * bk)) for j in keep])
            ops = (c.a[:, cols], c.b[:, cols], c.scale_a[:, keep], c.scale_b[:, keep], c.block_size)
            exact = block_accumulate(*ops, "mul s_a; mul s_w; add", "exact")
            b14 = block_accumulate(*ops, "mul s_a; mul s_w; add", "fp32 bits=14 truncate")
            assert torch.equal(exact, b14) == (values != "fp8wide"), c.name
            continue
        assert torch.equal(c.a.float(), c.a.float().round()) and float(c.b.float().abs().max()) <= 15
        a, b = c.a.to(torch.float64).abs(), c.b.to(torch.float64).abs()
        for j in range(0, c.k, bk):
            assert float((a[:, j : j + bk] @ b[:, j : j + bk].T).max()) < 2**SAFE_BITS, c.name
        if c.meta["block"]["cancelling_pairs"]:
            rows = cancelling_rows(c.m)
            lo = 1 if c.meta["block"]["magnitude"] == "k_uniform" else 0  # its residual column: a 3 and -2
            assert torch.equal(c.a[rows, bk + lo : 2 * bk].float(), -c.a[rows, lo:bk].float())


def test_on_the_pow2_cases_every_field_form_and_split_order_gives_the_same_bits():
    pow2 = [c for c in _plan() if c.scale_mode == "pow2"]
    assert len(pow2) == 2 * len(SIZES) - 1 + 12  # pow2-tail left out at the first size; 12 covering rows
    for c in pow2:
        assert bool(order_free_elements(c.a, c.b, c.scale_a, c.scale_b, c.block_size).all())
        base = _ref(c)
        for form in FIELD_FORMS:
            for order in ("", "; order split_k=2", "; order split_k=3"):
                assert not _differ(base, _ref(c, form + order)), (c.name, form, order)


def test_the_premise_fails_where_a_sum_rounds():
    a = torch.tensor([[127] * 4 + [1]], dtype=torch.int8)
    b = torch.tensor([[127] * 4 + [1], [1] * 5], dtype=torch.int8)
    sa = torch.tensor([[2.0**10, 2.0**-20]])  # 4 * 127^2 * 2^10 + 2^-20: not exact in float32
    sw = torch.tensor([[1.0, 1.0], [2.0**-10, 2.0**20]])  # column 1: 508 + 1, exact
    ok = order_free_elements(a, b, sa, sw, (1, 4))
    assert ok.tolist() == [[False, True]]


def _kernel(sa_shift: int = 0, accumulation: str = DECLARED):
    """A block kernel on the CPU computing ``accumulation`` with K-block kb >= 1 scaled by scale_a[:, kb - sa_shift]
    (a wrong K-block index when ``sa_shift``)."""

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
        kb = scale_a.shape[1]
        idx = [max(0, j - sa_shift) for j in range(kb)]
        return reference_block_scaled_mm(
            a, b, scale_a[:, idx], scale_b, block_size, accumulation, "add bias; cast out", bias, out_dtype
        )

    return scaled_mm


wrong_kblock_kernel = declare(block={"accumulation": DECLARED, "sizes": list(SIZES)})(_kernel(sa_shift=1))
fused_fma_kernel = declare(block={"accumulation": DECLARED, "sizes": list(SIZES)})(_kernel(0, "fma s_a*s_w"))


def test_a_wrong_k_block_scale_index_fails_c8_on_a_case_of_the_default_block_plan():
    spec = load_module_function(f"{__name__}:wrong_kblock_kernel")
    cases, _ = plan.default_cases(operands="int8", block_sizes=spec.block.sizes)
    cr = evaluate_fixed(spec, cases[0], None)
    assert cr.case == "block/128x128/prefill129-tail1-bf16" and cr.verdict == "fail"
    assert [r.check_id for r in cr.kernel_failures] == ["C8"]
    line = cr.checks["C8"].summary
    assert "from the declared block accumulation [blocks 128x128, 64x128, 128x64, 1x128; mul s_a; mul s_w; add;" in line
    first = cr.checks["C8"].evidence["first_difference"]
    assert line.split("; first at ")[1].startswith(
        f"[{first['index'][0]}, {first['index'][1]}]: out {first['out_bits']}"
    )


def test_c8_names_the_field_form_whose_bits_the_kernel_gives():
    spec = load_module_function(f"{__name__}:fused_fma_kernel")
    c = next(c for c in _plan() if c.name == "block/64x128/decode3-tail1-fp32")
    cr = evaluate_fixed(spec, c, None)
    assert cr.checks["C8"].verdict == "fail" and cr.checks["C8"].evidence["kernel_form"] == "fma s_a*s_w"
    assert cr.checks["C8"].summary.endswith("; the kernel's bits are those of 'fma s_a*s_w'")
    pow2 = next(c for c in _plan() if c.name == "block/128x128/pow2-kmul-fp32")
    assert evaluate_fixed(spec, pow2, None).verdict == "pass"  # C5 / C8: pow2 scales cannot tell the forms apart


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name,operands", [("block-cpu", "int8"), ("triton-block", "int8"), ("block-fp8-cpu", "e4m3")])
def test_builtins_pass_the_block_plans_fixed_cases(name, operands, size):
    """The decode cases in process (the prefill ones run in the ``int8conf check`` test and the CLI)."""
    spec = get_kernel(name)
    for c in (c for c in _plan(operands) if c.block_size == size and c.m < 128):
        cr = evaluate_fixed(spec, c, None)
        assert cr.verdict == "pass", (c.name, cr.failure_lines())
        assert cr.checks["C8"].verdict == "pass"
        assert cr.checks["C5"].verdict == ("pass" if c.scale_mode == "pow2" else "n/a")


def test_c16_is_n_a_not_built_while_its_module_is_missing(monkeypatch):
    missing = (("C16", "conformance.checks.no_such_block_check", "check"),)
    monkeypatch.setitem(plan.PLANS, plan.BLOCK, dataclasses.replace(plan.PLANS[plan.BLOCK], checks=missing))
    r = plan.run_kernel_check("C16", get_kernel("block-cpu"), [])
    assert r.verdict == "n/a" and r.summary == "not built: conformance.checks.no_such_block_check is missing"
    r = plan.run_kernel_check("C7", get_kernel("block-cpu"), [])
    assert r.verdict == "n/a" and r.summary.startswith("int8-engine check")


def test_a_dense_kernels_plan_is_unchanged():
    cases, cap = default_cases(include_captures=False, include_tile_edges=False)
    ids = [c.name for c in cases]
    again, _ = default_cases(include_captures=False, include_tile_edges=False, block_sizes=None)
    assert [c.name for c in again] == ids
    state = SuiteState(get_kernel("cpu"), list(cases), cap)
    steps = state.steps(25, True, False)
    assert [s.name for s in steps if s.kind == CASE] == ids
    assert [s.name for s in steps] == [s.name for s in suite_steps(cases, 25, True, False)]
    assert any(s.kind == PROPERTY for s in steps) and "C16-block_accumulation" not in {s.name for s in steps}


def test_int8conf_check_runs_the_block_plan_with_no_new_flags(tmp_path, capsys):
    code = main(["check", "--kernel=block-cpu", "--no-model", "--no-serving", f"--out={tmp_path}"])
    assert code == 0, capsys.readouterr().out[-2000:]
    doc = json.loads((tmp_path / "block-cpu" / "conformance.json").read_text())
    assert len(doc["cases"]) == len(_plan()) and doc["overall"]["verdict"] == "pass"
    assert doc["kernel"]["block"]["accumulation"] == DECLARED
    by = {c["check_id"]: c for c in doc["checks"]}
    assert by["C8"]["verdict"] == "pass" and by["C5"]["verdict"] == "pass" and by["C9"]["verdict"] == "pass"
    assert "C16" in by and by["C6"]["verdict"] == "n/a"
    rows = {r["condition"]: r for r in doc["coverage"]}
    assert rows["block 128x64: k"]["reached"] == "multiple, tail 1, tail 3, tail 5, tail 63, tail 7"
    assert rows["block 128x64: k"]["covered"] == "yes"
    md = (tmp_path / "block-cpu" / "conformance.md").read_text()
    assert "## Block declaration" in md and "block accumulation: mul s_a; mul s_w; add" in md
    # the Kernel table names the block declaration, not the per-token contract it does not follow
    assert "| declared block accumulation |" in md and "| declared contract " not in md


TESTS = Path(__file__).resolve().parents[1]


def test_pytest_kernel_takes_a_block_kernel(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(TESTS.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = ["--kernel=block-cpu", "-k", "(decode1 and kmul) or C9 or C16", "--int8conf-no-model"]
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, f"--int8conf-reports={tmp_path}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:]
    # the decode1 case of every size but the first (covering rows subsume it there) and C9 pass; C16 is n/a
    # (skipped) until its module is built, or passes
    assert r.stdout.splitlines()[-1].startswith((f"{len(SIZES)} passed, 1 skipped", f"{len(SIZES) + 1} passed"))
    doc = json.loads((tmp_path / "block-cpu" / "conformance.json").read_text())
    assert {c["case"] for c in doc["cases"]} == {f"block/{bn}x{bk}/decode1-kmul-bf16" for bn, bk in SIZES[1:]}


def test_the_gate_runs_a_block_kernels_plan(tmp_path):
    from conformance.gate.run import GateOptions, run_gate
    from conformance.runtime.pool import KernelRef

    opts = GateOptions(model_checks=False, serving_checks=False, timeout_s=120)
    res = run_gate(KernelRef("block-cpu"), KernelRef("block-cpu"), out_dir=tmp_path, options=opts)
    assert [d.status for d in res.cases] == ["pass"] * len(_plan())
    assert res.overall["verdict"] == "pass"


def test_c9_keeps_the_block_size_of_a_block_case():
    spec = get_kernel("block-cpu")
    c = next(c for c in _plan() if c.name == "block/64x128/decode4-tailbk1-fp16")
    r = plan.run_kernel_check("C9", spec, [dataclasses.replace(c, meta=dict(c.meta))])
    assert r.verdict == "pass" and r.evidence["cases"][0]["case"] == c.name and not r.evidence["cases_not_run"]


def test_the_block_covering_rows_meet_every_legal_pair_and_triple_and_plant_their_classes():
    """The block covering array (``conformance.cases.block_covering``): every legal pair of all attributes and every
    legal triple of (out dtype, layouts, magnitude, values), legal rows only; its classes planted as named."""
    for operands, n, cover in (
        ("int8", 50, {"3-wise": [212, 212], "2-wise": [384, 384]}),
        ("e4m3", 106, {"3-wise": [458, 458], "2-wise": [489, 489]}),
    ):
        space, rows = block_space(operands), block_covering_rows(operands)
        assert len(rows) == n and all(space.legal(r) for r in rows)
        assert space.t_wise_coverage(rows) == cover
    for c in (c for c in _plan("e4m3") if c.meta["variant"].startswith("cov")):
        attrs = c.meta["attributes"]
        assert (c.m <= 16) == (attrs["m"] == "decode") and (c.k >= 7168) == (attrs["k"] == "deep")
        if attrs["magnitude"] == "k_uniform":
            assert all(len(set(s.tolist())) == 1 for s in (*c.scale_a, *c.scale_b))
        if attrs["magnitude"] == "pow2_tiny":
            assert bool((c.scale_a < 2.0**-126).all()) and c.scale_mode == "pow2"
        if attrs["values"] == "fp8negzero":  # row 0 x the first and last columns: every product -0
            for j in (0, c.n - 1):
                prod = c.a[0].float() * c.b[j].float()
                assert bool((prod == 0).all()) and bool(torch.signbit(prod).all())
                assert c.bias is None or (c.bias[j] == 0 and bool(torch.signbit(c.bias[j])))
        assert (c.scale_a.stride(0) == 1 and c.m > 1) == (attrs["scale_a"] == "column_major" and c.m > 1)
        assert (c.b.stride(0) == 1) == (attrs["b_layout"] == "transposed")
