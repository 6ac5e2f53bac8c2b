"""C16 block_accumulation: the probe's candidates give distinct bits (the form row's residuals derived here in numpy
float32 and exact fractions, the split rows' pattern by hand), a kernel of each field form is measured as that form
and fails any other declaration, split-K and non-legal accumulations are named, the built-ins pass."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from conformance.checks.block_accumulation import (
    CANDIDATES,
    FORM_Q,
    FORM_SA,
    FORM_SW,
    ROWS,
    candidate_outputs,
    check_block_accumulation,
    probe_case,
)
from conformance.kernels.loader import block_contract, load_module_function
from conformance.kernels.registry import get_kernel
from conformance.kernels.spec import KernelSpec, ShapeConstraints
from reference.block.contract import FIELD_FORMS, parse_block_declaration
from reference.block.evaluate import reference_block_scaled_mm

SIZES = [(128, 128), (1, 128), (64, 128), (128, 64)]


def _spec(computes: str, declares: str, operands: str = "int8", size=(128, 128), **kw) -> KernelSpec:
    """A kernel computing the block accumulation ``computes`` (``reference_block_scaled_mm``) declaring ``declares``."""

    def fn(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=size):
        return reference_block_scaled_mm(
            a, b, scale_a, scale_b, block_size, computes, "add bias; cast out", bias, out_dtype
        )

    decl = parse_block_declaration({"accumulation": declares, "sizes": [size]})
    acc = "exact" if operands == "e4m3" else None
    return KernelSpec("k", fn, block_contract(decl), block=decl, operands=operands, accumulator=acc, **kw)


@pytest.mark.parametrize("operands", ["int8", "e4m3"])
@pytest.mark.parametrize("size", SIZES)
def test_every_candidate_gives_other_bits(operands, size):
    outs = candidate_outputs(probe_case(operands, size), CANDIDATES, "add bias; cast out")
    assert len(outs) == 42
    groups: dict = {}
    for label, o in outs.items():
        groups.setdefault(o.view(torch.int32).numpy().tobytes(), []).append(label)
    # interleaved, the form row's blocks 0 and 1 lie in different splits: each fma form gives its add twin's bits
    twins = {"mul s_a; mul s_w; add": "mul s_a; fma s_w", "mul s_w; mul s_a; add": "mul s_w; fma s_a"}
    twins["mul s_a*s_w; add"] = "fma s_a*s_w"
    want = [sorted(f"{f}; order split_k={s} interleaved" for f in pair) for pair in twins.items() for s in (2, 3, 4)]
    assert len(groups) == 33
    assert sorted(sorted(g) for g in groups.values() if len(g) > 1) == sorted(want)


def test_form_row_is_the_residual_of_each_form():
    f32 = np.float32
    q, sa, sw = f32(FORM_Q), f32(FORM_SA), f32(FORM_SW)
    s = f32(float(FORM_Q) * FORM_SA * FORM_SW)  # exact in float64 (50 bits), one RNE
    p = -np.nextafter(np.nextafter(s, f32(np.inf)), f32(np.inf))
    adds = {
        "mul s_a; mul s_w; add": (q * sa) * sw,
        "mul s_w; mul s_a; add": (q * sw) * sa,
        "mul s_a*s_w; add": q * (sa * sw),
    }
    fmas = {"mul s_a; fma s_w": (q * sa, sw), "mul s_w; fma s_a": (q * sw, sa), "fma s_a*s_w": (q, sa * sw)}
    want = {k: float(p + y) for k, y in adds.items()}
    for k, (x, c) in fmas.items():
        exact = Fraction(float(x)) * Fraction(float(c)) + Fraction(float(p))
        assert Fraction(float(f32(float(exact)))) == exact  # the residual is a float32: the fma does not round
        want[k] = float(exact)
    assert sorted(v * 2**47 for v in want.values()) == [-3072, -2560, -2048, -1875.5546875, -1144.71875, -1024]
    outs = candidate_outputs(probe_case(), CANDIDATES[:6], "cast out")
    assert {k: float(o[0, 0]) for k, o in outs.items()} == want


def test_split_rows_read_the_chunk_boundaries():
    outs = candidate_outputs(probe_case(), CANDIDATES[::6], "cast out")
    n = len(ROWS)
    got = {s: o[1:n, 0].tolist() for s, o in zip((1, 2, 3, 4), outs.values())}
    assert got == {1: [0, 0, 0, 0], 2: [0, 0, 1, 0], 3: [0, 1, 0, 1], 4: [1, 0, 1, 1]}
    interleaved = [c for c in CANDIDATES if c.interleaved and c.label().startswith("mul s_a; mul s_w; add")]
    outs = candidate_outputs(probe_case(), interleaved, "cast out")
    got = {c.split_k: o[1:n, 0].tolist() for c, o in zip(interleaved, outs.values())}
    assert got == {2: [0, 1, 1, 1], 3: [1, 1, 0, 1], 4: [0, 1, 1, 0]}


@pytest.mark.parametrize("declares", list(FIELD_FORMS))
@pytest.mark.parametrize("computes", list(FIELD_FORMS))
def test_a_field_form_is_measured_and_judged_against_the_declaration(computes, declares):
    r = check_block_accumulation(_spec(computes, declares))
    assert r.check_id == "C16" and r.evidence["measured"] == [computes]
    if computes == declares:
        assert r.verdict == "pass" and r.summary == f"measured {computes!r}, as declared"
    else:
        assert r.verdict == "fail" and r.summary == f"measured {computes!r}, declared {declares!r}"


def test_split_k_is_measured_with_its_form():
    r = check_block_accumulation(_spec("fma s_a*s_w; order split_k=3", "fma s_a*s_w", "e4m3", (1, 128)))
    assert r.verdict == "fail" and r.summary == "measured 'fma s_a*s_w; order split_k=3', declared 'fma s_a*s_w'"


def test_an_interleaved_split_k_declared_contiguous_is_measured():
    r = check_block_accumulation(
        _spec("mul s_a*s_w; add; order split_k=2 interleaved", "mul s_a*s_w; add; order split_k=2")
    )
    assert r.verdict == "fail" and r.evidence["measured"] == [
        "mul s_a*s_w; add; order split_k=2 interleaved",
        "fma s_a*s_w; order split_k=2 interleaved",
    ]


def test_a_declaration_the_probe_cannot_separate_passes_and_says_so():
    # split_k=8 of 8 K-blocks: one block per chunk, the chunk totals added in order = the sequential sum
    r = check_block_accumulation(
        _spec("mul s_a; mul s_w; add; order split_k=8", "mul s_a; mul s_w; add; order split_k=8")
    )
    assert r.verdict == "pass"
    assert r.summary.endswith("(the probe cannot tell it from 'mul s_a; mul s_w; add')")


def test_no_legal_form_names_the_first_differing_element():
    def exact(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=(128, 128)):
        bk = block_size[1]
        p = torch.stack([a[:, j : j + bk].double() @ b[:, j : j + bk].double().T for j in range(0, a.shape[1], bk)])
        sw = scale_b[0].double()[:, None, None]  # one weight-block row (N <= block_n)
        return (p * scale_a.double().T[:, :, None] * sw).sum(0).to(out_dtype)  # float64 throughout

    decl = parse_block_declaration("mul s_a; mul s_w; add")
    r = check_block_accumulation(KernelSpec("x", exact, block_contract(decl), block=decl))
    assert r.verdict == "fail" and r.evidence["measured"] == []
    assert r.summary.startswith(
        "no legal form matches (declared 'mul s_a; mul s_w; add') at M=16: row 'form' column 0 "
    )
    assert r.evidence["first_difference"]["row"] == "form"


@pytest.mark.parametrize("name", ["block-cpu", "block-fp8-cpu", "triton-block"])
def test_builtins_pass(name):
    r = check_block_accumulation(get_kernel(name))
    assert r.verdict == "pass" and r.summary == "measured 'mul s_a; mul s_w; add', as declared"
    assert r.evidence["by_m"] == {16: ["mul s_a; mul s_w; add"], 128: ["mul s_a; mul s_w; add"]}


def test_not_applicable():
    assert check_block_accumulation(get_kernel("cpu")).verdict == "n/a"
    form = "mul s_a; mul s_w; add"
    bf16_only = _spec(form, form, constraints=ShapeConstraints(out_dtypes=("bfloat16",)))
    r = check_block_accumulation(bf16_only)
    assert r.verdict == "n/a" and "float32 output" in r.summary


@pytest.mark.parametrize(
    "name,line",
    [
        ("good_block", "measured 'mul s_a; mul s_w; add', as declared"),
        ("fma_where_add", "measured 'mul s_a; fma s_w', declared 'mul s_a; mul s_w; add'"),
        ("split_k_long_k", "measured 'mul s_a; mul s_w; add; order split_k=2', declared 'mul s_a; mul s_w; add'"),
        (
            "scale_b_next_kblock",
            "no legal form matches (declared 'mul s_a; mul s_w; add') at M=16: row 'form' column 0",
        ),
        (
            "scale_a_prev_kblock",
            "no legal form matches (declared 'mul s_a; mul s_w; add') at M=128: row 'form' column 0",
        ),
        (
            "scale_product_first_large_m",
            "measured 'mul s_a; mul s_w; add' at M=16, 'mul s_a*s_w; add' at M=128, declared 'mul s_a; mul s_w; add'",
        ),
    ],
)
def test_buggy_block_kernels(name, line):
    r = check_block_accumulation(load_module_function(f"buggy_block_kernels:{name}"))
    assert r.summary.startswith(line) and r.verdict == ("pass" if name == "good_block" else "fail")
