"""``faults.inject``: the wrapper machinery on any kernel (built-in, emulated,
third-party by import path), F8, merge of selected elements, accumulator
source, names, resolver, errors, pickling."""

from __future__ import annotations

import json
import pickle
from dataclasses import replace

import pytest
import torch
from buggy_kernels import emulate, exact_acc32, make_kernel

from conformance.cases import make_case
from conformance.kernels import trace
from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import run_kernel
from conformance.suite.evaluate import evaluate_case
from faults import FaultError, ground_truth, inject, injection_of, parse_injection, wrapped_kernel
from faults.catalogue import faults_for
from faults.mask import case_key, element_mask


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


def _call(spec, ops):
    return spec.scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b, out_dtype=ops.out_dtype, bias=ops.bias)


@pytest.mark.parametrize("kind", ["ordinary", "bias", "pow2", "fp16_out", "scalar_scales"])
def test_f8_null_changes_nothing_and_passes_every_check(kind):
    ops = make_case(kind, 0)
    clean = _call(get_kernel("cpu"), ops)
    for cov in ("one", "1%", "all"):
        spec = inject("cpu", "F8", cov, 0)
        assert torch.equal(_bits(_call(spec, ops)), _bits(clean))
        gt = ground_truth("cpu", "F8", cov, 0, ops)
        assert gt.no_op and gt.changed == 0 and gt.max_spacing == 0
    cr = evaluate_case(inject("cpu", "null", "all", 0), ops)
    assert cr.verdict == "pass", cr.failure_lines()
    assert {r.verdict for r in cr.checks.values()} <= {"pass", "n/a"}


def test_selected_elements_get_the_fault_others_keep_the_kernels_bits():
    ops = make_case("bias", 1)  # 8 x 64 x 48, bias, cpu contract w_then_a / fp32 bias
    spec = inject("cpu", "F4", "1%", 5)
    out = _call(spec, ops)
    clean = _call(get_kernel("cpu"), ops)
    mask = element_mask(ops.m, ops.n, case_key(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias), "F4", "1%", 5)
    assert int(mask.sum()) == 4  # 384 outputs: round(3.84) = 4
    trunc = emulate(
        exact_acc32(ops.a, ops.b),
        ops.scale_a,
        ops.scale_b,
        "w_then_a",
        "fp32_before_round",
        ops.bias,
        ops.out_dtype,
        "rtz",
    )
    assert torch.equal(_bits(out)[mask], _bits(trunc)[mask])
    assert torch.equal(_bits(out)[~mask], _bits(clean)[~mask])
    gt = ground_truth("cpu", "F4", "1%", 5, ops)
    assert gt.selected == 4 and gt.changed == int((_bits(trunc) != _bits(clean))[mask].sum())
    assert gt.changed_outside == 0 and gt.accumulator_source == "kernel int_mm"
    json.dumps(gt.to_dict())


def test_post_processing_recomputes_from_the_kernels_own_int_mm():
    # the kernel's int_mm adds 1 at [0, 0]: the fault is recomputed from that accumulator
    k = make_kernel("off-by-one-acc", acc_off_by_one=True)
    ops = make_case("ordinary", 0)
    out = _call(inject(k, "F3", "all", 0), ops)
    acc = exact_acc32(ops.a, ops.b)
    acc[0, 0] += 1
    want = emulate(acc, ops.scale_a, ops.scale_b, "a_then_w", "fp32_before_round", None, ops.out_dtype)
    assert torch.equal(_bits(out), _bits(want))
    # without an int_mm entry the exact reference accumulator is used, and recorded
    k2 = replace(make_kernel("no-int-mm"), int_mm=None)
    gt = ground_truth(k2, "F3", "all", 0, ops)
    assert gt.accumulator_source == "exact reference"
    assert inject(k2, "F3").int_mm is None


def test_inject_into_a_third_party_kernel_loaded_by_import_path():
    spec = inject("buggy_kernels:truncating_kernel", "F1", "one", 2)
    assert spec.name == "truncating+F1@one#s2"
    assert spec.origin == "fault-injection:module:buggy_kernels:truncating_kernel"
    inner = get_kernel("buggy_kernels:truncating_kernel")
    assert spec.contract == inner.contract and wrapped_kernel(spec).name == "truncating"
    inj = injection_of(spec)
    assert (inj.fault, inj.coverage, inj.seed, inj.name) == ("F1", "one", 2, "scale_precision")
    # the name resolves anywhere a kernel name does (faults registers a resolver)
    again = get_kernel("buggy_kernels:truncating_kernel+F1@one#s2")
    assert again.name == spec.name and again.source_digest == spec.source_digest
    ops = make_case("ordinary", 1)
    assert torch.equal(_bits(_call(spec, ops)), _bits(_call(again, ops)))
    gt = ground_truth("buggy_kernels:truncating_kernel", "F1", "one", 2, ops)
    assert gt.selected == 1 and gt.kernel == "truncating"


def test_injected_kernel_reports_its_path_and_digest_for_c1():
    ops = make_case("ordinary", 0)
    spec = inject("cpu", "F4", "all", 0)
    run = run_kernel(spec, ops)
    assert run.manifest["path"] == "cpu-exact+F4"
    assert run.manifest["source_digest"] == spec.source_digest != get_kernel("cpu").source_digest
    ex = run.manifest["extra"]
    assert (ex["fault"], ex["coverage"], ex["seed"], ex["fault_selected"]) == ("F4", "all", 0, 384)
    with trace.capture():  # no leak outside a capture
        pass
    assert evaluate_case(spec, ops).checks["C1"].verdict == "pass"


def test_every_catalogue_fault_injects_and_names_are_canonical():
    ops = make_case("bias", 0)
    for f in faults_for("int8"):
        for key in (f.id, f.name):
            spec = inject("cpu", key, "all", 0)
            assert spec.name == f"cpu+{f.id}@all#s0"
            out = _call(spec, ops)
            assert out.shape == (ops.m, ops.n) and out.dtype == ops.out_dtype
    assert inject("cpu", "F9.stale", "1%", 3).name == "cpu+F9.stale@1%#s3"
    assert inject("cpu", "F6", prepared=False).name == "cpu+F6@all#s0!"


@pytest.mark.parametrize(
    "bad,msg",
    [
        ("F16", "unknown fault"),
        ("F10.d23", "unknown F10 variant"),
        ("F10.stale", "unknown F10 variant"),
        ("F4:5%", "unknown coverage"),
        ("F4:all:x", "not an integer"),
        ("F4.stale", "only F9"),
        ("F9.sideways", "unknown F9 variant"),
        ("", "expected FAULT"),
        ("F4:all:-1", "seed -1 is out of range"),
        ("F4:all:18446744073709551616", "seed 18446744073709551616 is out of range"),
    ],
)
def test_bad_injection_specs_are_one_line_errors(bad, msg):
    with pytest.raises(FaultError) as e:
        parse_injection(bad)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_parse_injection_forms():
    assert parse_injection("output_truncation:1%").fault == "F4"
    i = parse_injection("F9.transposed:one:7")
    assert (i.fault, i.variant, i.coverage, i.seed) == ("F9", "transposed", "one", 7)
    assert parse_injection("f2").coverage == "all" and parse_injection("F2:1pct").coverage == "1%"
    with pytest.raises(FaultError):
        inject(inject("cpu", "F4"), "F3")  # no fault on top of a fault
    with pytest.raises(FaultError):
        inject("cpu", "F4", "all", seed=-1)


def test_injected_builtin_kernel_pickles():
    spec = inject("cpu", "F2", "1%", 1)
    back = pickle.loads(pickle.dumps(spec))
    ops = make_case("ordinary", 0)
    assert back.name == spec.name and torch.equal(_bits(_call(back, ops)), _bits(_call(spec, ops)))


def test_a_malformed_injection_suffix_is_named_not_an_unknown_kernel():
    """``cpu+F4@all#sx`` used to read "unknown kernel"; a name without ``+F<digit>``
    (or with it only inside a ``?query``) is no injection at all."""
    from faults.spec import FaultError, split_injected_name

    for bad in ("cpu+F4@all#sx", "cpu+F4@two#s0", "triton+F4", "cpu+F4@all#s-1"):
        with pytest.raises(FaultError, match=r"an injection suffix reads KERNEL\+F<1-15>"):
            get_kernel(bad)
    name, inj = split_injected_name("triton+F4@1%#s7")
    assert (name, inj.fault, inj.coverage, inj.seed) == ("triton", "F4", "1%", 7)
    assert split_injected_name("mod:fn?contract=cutlass+F4") is None
    assert split_injected_name("triton") is None


def test_an_injected_kernel_keeps_every_declaration_of_the_wrapped_one():
    # found on the H200 sweep: the wrapper dropped `overflow`, so F6 on `triton` was
    # checked as if it declared int32 wrap on CUDA, where it declares nothing
    import dataclasses

    from conformance.kernels.registry import get_kernel

    tri = get_kernel("triton")
    assert tri.overflow_on("cuda") == "undefined" and tri.overflow_on("cpu") == "wrap"
    inner = dataclasses.replace(get_kernel("cpu"), name="mine", contiguous_only=("a",), overflow="saturate")
    for spec in (tri, inner):
        for fault in ("F6", "F4", "F8"):
            got = inject(spec, fault, "all", 0)
            for f in dataclasses.fields(spec):
                if f.name not in ("name", "scaled_mm", "int_mm", "source_digest", "origin", "description"):
                    assert getattr(got, f.name) == getattr(spec, f.name), (spec.name, f.name)
            assert got.overflow_on("cuda") == spec.overflow_on("cuda")
