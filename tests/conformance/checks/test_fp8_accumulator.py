"""C11 fp8_accumulator: the measured model of an emulated kernel is the model it emulates (any k order for the
two-product probes), and the verdict fails exactly the kernels that keep less than they declare."""

from __future__ import annotations

import random

import pytest
import torch
from fp8_kernels import fp8_kernel

from conformance.checks.fp8_accumulator import (
    K_PROBE,
    K_PROBES,
    check_fp8_accumulator,
    measure_accumulator,
    probe_operands,
    probes,
    shortfall,
)
from conformance.checks.result import CHECK_NAMES
from conformance.kernels.spec import KernelSpec, ShapeConstraints
from reference.contract import CUTLASS_STYLE
from reference.fp8 import E4M3, AccumulatorModel, parse_accumulator

MODELS = (
    "exact",
    "fp32",
    "fp32 bits=14 truncate promote=128",
    "fp32 bits=14 truncate",
    "fp32 bits=13 rne promote=32",
    "fp32 bits=24 truncate",
    "fp32 bits=20 rne promote=16",
    "fp32 bits=8 truncate promote=512",
)
REVERSED = list(range(K_PROBE - 1, -1, -1))
SHUFFLED = random.Random(0).sample(range(K_PROBE), K_PROBE)


def test_check_is_named():
    assert CHECK_NAMES["C11"] == "fp8_accumulator"


def test_probe_values_are_e4m3_and_rows_unique():
    rows = probes()
    a, b = probe_operands(rows)
    assert a.dtype == b.dtype == E4M3 and a.shape == (192, K_PROBE) and b.shape == (16, K_PROBE)
    assert len({p.name for p in rows}) == len(rows) <= a.shape[0]
    got = (a.double() @ b.double().T)[: len(rows), 0]  # float64: dyadic, exact
    assert got.tolist() == [p.exact for p in rows]


@pytest.mark.parametrize("text", MODELS)
def test_measured_model_is_the_emulated_one(text):
    m = measure_accumulator(fp8_kernel(text))
    assert m.model == parse_accumulator(text)
    assert m.evidence["measured"] == parse_accumulator(text).label() and m.evidence["notes"] == []


@pytest.mark.parametrize(
    "text, order",
    [
        ("fp32 bits=14 truncate", SHUFFLED),
        ("fp32 bits=13 rne", SHUFFLED),
        ("fp32 bits=14 truncate", REVERSED),
        ("fp32 bits=14 truncate promote=128", REVERSED),  # promotion: contiguous chunks of k
    ],
)
def test_bits_rounding_and_promotion_do_not_depend_on_the_k_order(text, order):
    assert measure_accumulator(fp8_kernel(text, order=order)).model == parse_accumulator(text)


def test_never_promoting_kernel_fails_a_promote_declaration():
    r = check_fp8_accumulator(fp8_kernel("fp32 bits=14 truncate"), "fp32 bits=14 truncate promote=128")
    assert r.verdict == "fail" and r.check_id == "C11" and r.evidence["failure_kind"] == "kernel"
    assert r.evidence["shortfall"] == ["promotes never, declared every 128"]
    assert r.evidence["measured"] == "fp32 bits=14 truncate"
    assert r.evidence["declared"] == "fp32 bits=14 truncate promote=128"


def test_twelve_bit_kernel_fails():
    r = check_fp8_accumulator(fp8_kernel("fp32 bits=12 truncate promote=128"), "fp32 bits=14 truncate promote=128")
    assert r.verdict == "fail" and r.evidence["shortfall"] == ["keeps 12 significant bits, declared 14"]
    probe = r.evidence["probes"]["bits 12 + k=0,1"]
    assert probe["kept"] is False and probe["observed"] == 2.0**11 and probe["exact"] == 2.0**11 + 2.0**-1


@pytest.mark.parametrize(
    "kernel, declared",
    [
        ("fp32", "fp32 bits=12 truncate promote=128"),
        ("exact", "fp32"),
        ("fp32 bits=16 truncate promote=64", "fp32 bits=14 rne promote=128"),
        ("fp32 bits=14 truncate promote=128", "fp32 bits=14 truncate promote=128"),
    ],
)
def test_at_least_as_precise_passes(kernel, declared):
    r = check_fp8_accumulator(fp8_kernel(kernel), declared)
    assert r.verdict == "pass", r.summary


@pytest.mark.parametrize(
    "kernel, declared, why",
    [
        ("fp32", "exact", "declared exact, measured 'fp32'"),
        ("fp32 bits=14 truncate promote=128", "fp32 bits=14 rne promote=128", "truncates at 14 bits where rne"),
        ("fp32 bits=24 truncate", "fp32", "truncates at 24 bits where rne"),
        ("fp32 bits=14 truncate promote=256", "fp32 bits=14 truncate promote=128", "promotes every 256 products"),
    ],
)
def test_keeping_less_fails(kernel, declared, why):
    r = check_fp8_accumulator(fp8_kernel(kernel), declared)
    assert r.verdict == "fail" and r.evidence["shortfall"][0].startswith(why), r.summary


def test_shortfall_rules():
    m = AccumulatorModel("fp32", 15, "truncate", 128)
    assert shortfall(m, parse_accumulator("fp32 bits=14 rne promote=128")) == []
    assert shortfall(m, parse_accumulator("fp32 bits=15 rne promote=128")) == [
        "truncates at 15 bits where rne is declared"
    ]
    assert shortfall(m, parse_accumulator("fp32 bits=14 truncate promote=64")) == [
        "promotes every 128 products, declared every 64"
    ]


def test_spec_declaration_device_and_constraints():
    fn = fp8_kernel("fp32 bits=14 truncate promote=128")
    assert check_fp8_accumulator(fn).verdict == "n/a"  # a bare callable declares nothing
    assert check_fp8_accumulator(KernelSpec("int8", fn, CUTLASS_STYLE)).verdict == "n/a"  # int8 operands
    e4m3 = {"operands": "e4m3", "accumulator": {"cpu": "fp32 bits=14 truncate promote=128", "*": "fp32"}}
    spec = KernelSpec("emulated", fn, CUTLASS_STYLE, **e4m3)
    assert check_fp8_accumulator(spec).verdict == "pass"  # the cpu entry of the declaration
    assert check_fp8_accumulator(spec, "fp32").verdict == "fail"  # an explicit declaration wins
    narrow = KernelSpec("emulated", fn, CUTLASS_STYLE, constraints=ShapeConstraints(max_k=1024), **e4m3)
    r = check_fp8_accumulator(narrow, "fp32")
    assert r.verdict == "n/a" and "max_k=1024" in r.summary
    bf16_only = KernelSpec(
        "emulated", fn, CUTLASS_STYLE, constraints=ShapeConstraints(out_dtypes=("bfloat16",)), **e4m3
    )
    r = check_fp8_accumulator(bf16_only)
    assert r.verdict == "n/a" and r.summary.endswith("the kernel writes bfloat16 only"), r.summary
    gpu = KernelSpec("emulated", fn, CUTLASS_STYLE, devices=("cuda",), **e4m3)
    if not torch.cuda.is_available():
        assert check_fp8_accumulator(gpu, "fp32").verdict == "n/a"


def test_a_failing_kernel_call_is_a_one_line_failure():
    def broken(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        raise RuntimeError("no fp8 here\nsecond line")

    def wrong_dtype(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        return torch.zeros(a.shape[0], b.shape[0], dtype=torch.bfloat16)

    r = check_fp8_accumulator(broken, "fp32")
    assert r.verdict == "fail" and "no fp8 here" in r.summary and "\n" not in r.summary
    r = check_fp8_accumulator(wrong_dtype, "fp32")
    assert r.verdict == "fail" and "torch.bfloat16" in r.summary

    def zeros(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        return torch.zeros(a.shape[0], b.shape[0], dtype=out_dtype)

    r = check_fp8_accumulator(zeros, "fp32")
    assert r.verdict == "fail" and r.summary.startswith("the output is not the accumulator: probe 'bits 1 + k=0,1'")


def test_a_kernel_that_stops_promoting_at_large_k_fails_at_that_k():
    """A kernel taking another path above K = 4096 (no promotion there) passes at the first probe K and fails at
    the second (found by a new-user trial: one probe K let it pass)."""
    good, never = fp8_kernel("fp32 bits=14 truncate promote=128"), fp8_kernel("fp32 bits=14 truncate")

    def switch(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        return (never if a.shape[1] > K_PROBE else good)(a, b, scale_a, scale_b, out_dtype, bias)

    r = check_fp8_accumulator(switch, "fp32 bits=14 truncate promote=128")
    assert r.verdict == "fail" and r.evidence["probe_k"] == K_PROBES[1] == 6144  # the first K above 4096
    never = {k: "fp32 bits=14 truncate" for k in K_PROBES if k > K_PROBE}
    assert r.evidence["by_k"] == {K_PROBE: "fp32 bits=14 truncate promote=128", **never}
    assert r.evidence["shortfall"] == ["promotes never, declared every 128"] and f"at K={K_PROBES[1]}" in r.summary
    assert check_fp8_accumulator(good, "fp32 bits=14 truncate promote=128").evidence["by_k"] == {
        k: "fp32 bits=14 truncate promote=128" for k in K_PROBES
    }
