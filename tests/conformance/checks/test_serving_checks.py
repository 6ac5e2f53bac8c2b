"""C13 graph_replay, C14 compile, C15 streams_devices (issue 45): on the CPU each is ``n/a`` with its reason, except
C14 on a registered custom op (one tiny case): the control passes, the wrong fake fails. The CUDA tests (skipped
without CUDA) pin that each serving-bug kernel of ``buggy_kernels`` fails its check and the built-ins pass."""

from __future__ import annotations

import argparse
import dataclasses
import itertools

import pytest
import torch

from conformance.checks import serving
from conformance.checks.compile import CPU_REASON, check_compile, registered_op
from conformance.checks.graph_replay import check_graph_replay
from conformance.checks.serving import CORE, DECODE_M, PREFILL_M, fresh_like, sample_cases
from conformance.checks.streams import ONE_GPU, check_streams_devices
from conformance.kernels.loader import load_module_function
from conformance.kernels.registry import get_kernel
from conformance.kernels.spec import ShapeConstraints
from conformance.suite.plan import run_kernel_check

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="C13-C15 call the kernel on a CUDA device: no CUDA here")
SERVING = (check_graph_replay, check_compile, check_streams_devices)


def _buggy(name: str):
    return load_module_function(f"buggy_kernels:{name}")


def test_the_sample_is_a_decode_and_a_prefill_case_fitted_to_the_constraints():
    decode, prefill = sample_cases(get_kernel("cpu"))[:CORE]
    assert (decode.m, prefill.m) == (DECODE_M, PREFILL_M) and DECODE_M <= 16 and PREFILL_M >= 128
    assert decode.bias is not None and decode.scale_a.shape == (DECODE_M,) and prefill.scale_a.dim() == 0
    assert (decode.out_dtype, prefill.out_dtype) == (torch.bfloat16, torch.float16)
    new = fresh_like(get_kernel("cpu"), decode, 7)
    assert new.a.shape == decode.a.shape and not torch.equal(new.a, decode.a)
    assert new.scale_a.shape == decode.scale_a.shape and not torch.equal(new.scale_a, decode.scale_a)
    # a serving stack replays new tokens through the same layer: weight, weight scale and bias are the captured ones
    assert new.b is decode.b and new.scale_b is decode.scale_b and new.bias is decode.bias


def _attributes(ops) -> tuple:
    return ops.m, "tensor" if ops.scale_a.dim() == 0 else "token", ops.bias is not None, ops.out_dtype


def test_the_sample_covers_m_scale_form_bias_and_out_dtype_3_wise():
    got = [_attributes(o) for o in sample_cases(get_kernel("cpu"))]
    assert len(got) == len(set(got)) and got[:CORE] == [
        (8, "token", True, torch.bfloat16),
        (128, "tensor", False, torch.float16),
    ]
    values = ((1, 8, 128, 512), ("tensor", "token"), (False, True), (torch.bfloat16, torch.float16, torch.float32))
    for idx in itertools.combinations(range(4), 3):
        want = set(itertools.product(*(values[i] for i in idx)))
        assert want <= {tuple(g[i] for i in idx) for g in got}, idx
    # a kernel taking no bias, 0-d scales only and bf16 only: the rows fold onto the cases it takes, none repeated
    only = ShapeConstraints(scales="tensor", bias=False, no_bias_reason="none", out_dtypes=("bfloat16",))
    narrow = [_attributes(o) for o in sample_cases(dataclasses.replace(get_kernel("cpu"), constraints=only))]
    assert sorted(narrow) == [(m, "tensor", False, torch.bfloat16) for m in (1, 8, 128, 512)]


@pytest.mark.skipif(CUDA, reason="pins the CPU verdicts")
def test_on_the_cpu_each_check_is_na_with_its_reason():
    spec = get_kernel("cpu")
    got = {r.check_id: (r.verdict, r.summary) for r in (f(spec) for f in SERVING)}
    assert got == {
        "C13": ("n/a", "CUDA graphs need a CUDA device: the kernel declares no CUDA device (devices ['cpu'])"),
        "C14": ("n/a", CPU_REASON),
        "C15": ("n/a", "streams and devices are CUDA's: the kernel declares no CUDA device (devices ['cpu'])"),
    }
    cuda_kernel = _buggy("own_stream_no_wait")  # declares CUDA, none here
    r13, r15 = check_graph_replay(cuda_kernel), check_streams_devices(cuda_kernel)
    assert r13.summary == "CUDA graphs need a CUDA device: no CUDA device here (torch.cuda.is_available() is False)"
    assert (r13.verdict, r15.verdict) == ("n/a", "n/a") and r15.summary.endswith("is False)")
    # the plan's step runs the same function
    assert run_kernel_check("C13", spec, []).summary == got["C13"][1]


def test_custom_op_detection():
    assert registered_op(get_kernel("cpu").scaled_mm) is None
    assert str(registered_op(_buggy("custom_op_control").scaled_mm)) == "int8conf_buggy.scaled_mm_ok.default"
    assert registered_op(torch.ops.int8conf_buggy.scaled_mm_ok) == torch.ops.int8conf_buggy.scaled_mm_ok.default


@pytest.mark.skipif(CUDA, reason="pins the CPU custom-op case")
def test_c14_on_the_cpu_passes_a_custom_op_with_a_right_fake_and_fails_a_wrong_one():
    ok = check_compile(_buggy("custom_op_control"))
    assert ok.verdict == "pass", ok.summary
    assert ok.evidence["cases"][0]["fake"] == "agrees" and ok.evidence["cases"][0]["opcheck"] == "all passed"
    sample = sample_cases(get_kernel("cpu"))
    assert ok.summary.endswith(f"bit-identical on 1 case(s) on cpu; the fake agrees on {len(sample)} more")
    bad = check_compile(_buggy("wrong_fake_custom_op"))  # float32 for any out dtype: wrong on every other row
    wrong = 1 + sum(o.out_dtype != torch.float32 for o in sample)  # the compiled bf16 case, then the sample
    assert bad.verdict == "fail" and bad.summary.endswith(f"({wrong} of {len(sample) + 1} cases)")
    assert "fake output shape/dtype/strides ((4, 256), torch.float32, (256, 1)) != the real output's " in bad.summary
    assert "opcheck test_faketensor:" in bad.summary and bad.evidence["failure_kind"] == "kernel"


@pytest.mark.skipif(CUDA, reason="pins the CPU custom-op case")
def test_c14_names_a_missing_fake_before_the_compile_error_it_causes():
    r = check_compile(_buggy("no_fake_custom_op"))
    first = r.evidence["cases"][0]["line"]
    assert r.verdict == "fail" and first.startswith("fake implementation raised RuntimeError: "), first
    assert "; torch.compile raised " in first and all(not row["ok"] for row in r.evidence["cases"])


@pytest.mark.skipif(CUDA, reason="pins the CPU custom-op case")
def test_c14_on_the_cpu_checks_the_fake_of_a_custom_op_called_through_a_plain_wrapper():
    """The ``ops.cutlass_scaled_mm`` form: a plain function over a custom op. Its fake, traced through the wrapper, is
    compared on the whole sample: wrong only for float32 outputs, it fails on exactly those rows; right, it passes."""
    bad, good = check_compile(_buggy("wrapped_fp32_fake")), check_compile(_buggy("wrapped_custom_op"))
    rows = [r["case"] for r in bad.evidence["cases"] if not r["ok"]]
    sample = sample_cases(_buggy("wrapped_fp32_fake"))
    assert bad.verdict == "fail" and "torch.float32" in bad.summary, bad.summary
    assert "custom op int8conf_buggy.scaled_mm_fp32_fake.default, called by the kernel: fake output" in bad.summary
    assert rows == [serving.case_label(o) for o in sample if o.out_dtype == torch.float32]
    assert good.verdict == "pass" and "int8conf_buggy.scaled_mm_ok.default" in good.summary, good.summary
    assert check_compile(get_kernel("cpu")).verdict == "n/a"  # a plain kernel calling no custom op


@pytest.mark.parametrize(
    "kernel, wrong_on",
    [
        ("fp32_fake_custom_op", lambda o: o.out_dtype == torch.float32),  # bf16 for float32
        ("large_m_fake_custom_op", lambda o: o.m > 256 and o.out_dtype != torch.float32),  # float32 past M = 256
    ],
)
def test_c14_finds_a_fake_wrong_on_one_path_only_on_the_covering_rows(kernel, wrong_on):
    r = check_compile(_buggy(kernel))
    bad = [row["case"] for row in r.evidence["cases"] if not row["ok"]]
    want = [serving.case_label(o) for o in sample_cases(get_kernel("cpu")) if wrong_on(o)]
    # the compiled tiny case and the two core cases pass; exactly the rows on the wrong path fail
    assert r.verdict == "fail" and all(row["ok"] for row in r.evidence["cases"][:3]) and bad == want and want, bad


# --- CUDA: run natively (skipped without CUDA) ---


@needs_cuda
@pytest.mark.parametrize("kernel", ["triton", "int_mm", "triton-fp8", "triton-block", "triton-block-fp8"])
def test_builtins_pass_c13_c14_c15(kernel):
    spec = get_kernel(kernel)
    for f in SERVING:
        r = f(spec)
        assert r.verdict == "pass", f"{r.check_id}: {r.summary}"


@needs_cuda
@pytest.mark.parametrize(
    "kernel, check, says",
    [
        ("host_scalar_scale", check_graph_replay, "capture raised"),
        ("wrong_fake_custom_op", check_compile, "fake output shape/dtype/strides"),
        ("own_stream_no_wait", check_streams_devices, "on a side stream"),
        # one path only: the covering rows reach it (M = 1 with 0-d scales; a float32 output)
        ("gemv_host_scale", check_graph_replay, "serving/cover-M1-tensor-"),
        ("fp32_fake_custom_op", check_compile, "torch.float32"),
        # a caller's stream that never waits for the kernel's; a stream kept from the first call (its capture replays
        # right: natively, C13 passes it); host scales reused under capture (replayed stale)
        ("no_output_wait", check_streams_devices, "on a side stream"),
        ("first_call_stream", check_streams_devices, "on a side stream"),
        ("capture_cached_scale", check_graph_replay, "replay on new activations"),
    ],
)
def test_each_serving_bug_fails_its_check(kernel, check, says):
    r = check(_buggy(kernel))
    assert r.verdict == "fail" and says in r.summary, r.summary


@needs_cuda
def test_a_custom_op_with_a_right_fake_passes_c14_on_cuda():
    r = check_compile(_buggy("custom_op_control"))
    assert r.verdict == "pass", r.summary


@needs_cuda
@pytest.mark.skipif(CUDA and torch.cuda.device_count() < 2, reason="the cuda:1 part needs two GPUs: one GPU here")
def test_a_kernel_hard_coding_cuda0_fails_c15_on_two_gpus():
    r = check_streams_devices(_buggy("hardcoded_cuda0"))
    assert r.verdict == "fail" and "operands on cuda:1, output on cuda:0" in r.summary, r.summary


@needs_cuda
def test_with_one_gpu_the_device_part_is_na():
    r = check_streams_devices(get_kernel("int_mm"))
    if torch.cuda.device_count() > 1:
        assert r.evidence["devices"][1] is not None
    else:
        assert r.evidence["device_part"] == f"n/a: {ONE_GPU}" and ONE_GPU in r.summary


def test_no_serving_leaves_c13_to_c15_out_of_the_plan_and_says_so():
    from conformance.commands.check import _state
    from conformance.suite.plan import CHECK, SERVING_CHECKS, suite_steps

    def checks(**kw) -> list:
        return [s.check_id for s in suite_steps([], 0, False, False, **kw) if s.kind == CHECK]

    assert checks() == ["C9", *SERVING_CHECKS] and checks(serving_checks=False) == ["C9"]
    args = argparse.Namespace(
        no_captures=True,
        no_tile_edges=True,
        examples=0,
        no_model=True,
        no_serving=True,
        no_large_cases=False,
        device="cpu",
    )
    cases_of = type("Cases", (), {"for_kernel": lambda self, spec, inj: ([], None)})()
    state = _state(args, get_kernel("cpu"), None, None, cases_of)
    assert [s.check_id for s in state.steps(0, False, False) if s.kind == CHECK] == ["C9"]
    assert "the serving checks (C13, C14, C15)" in state.skipped


def test_a_block_kernel_s_sample_is_block_scaled_and_called_with_its_block_size():
    from conformance.checks.serving import call, kernel_fn, on_device
    from conformance.kernels.runner import run_kernel

    spec = get_kernel("block-cpu")
    sample = sample_cases(spec)
    decode = sample[0]
    bn, bk = spec.block.sizes[0]
    # the scale form is the block's on every case: the rows fold onto M x bias x out dtype (4 x 2 x 3 = 24 cases)
    assert len(sample) == 24 and len({(o.m, o.bias is not None, o.out_dtype) for o in sample}) == 24
    for ops in sample:
        kb = -(-ops.k // bk)
        assert ops.block_size == (bn, bk) and ops.scale_a.shape == (ops.m, kb)
        assert ops.scale_b.shape == (-(-ops.n // bn), kb)
    got = call(kernel_fn(spec, decode), on_device(decode, "cpu"), decode.out_dtype)
    assert torch.equal(got.view(torch.int16), run_kernel(spec, decode).output.view(torch.int16))


def test_c14_compiles_without_dynamo_noise_and_restores_its_logger(capfd):
    import logging

    from conformance.checks.compile import quiet_dynamo

    def item_graph_break(x):
        return x * int(x.sum())  # Tensor.item(): dynamo logs a graph-break warning

    before = logging.getLogger("torch._dynamo").level
    torch.compiler.reset()
    with quiet_dynamo():
        out = torch.compile(item_graph_break, backend="eager")(torch.ones(3))
    torch.compiler.reset()
    assert out.tolist() == [3.0, 3.0, 3.0] and logging.getLogger("torch._dynamo").level == before
    assert "Graph break" not in capfd.readouterr().err
