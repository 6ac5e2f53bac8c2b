"""FlagGems adapters (flag_gems 5.0.2 ``fused/cutlass_scaled_mm.py``): the package needs a CUDA sm_90 device, so
stand-ins with its signature ``(c, a, b[K,N], a_scale, b_scale, bias)`` do the kernel's math op for op (L268-291:
``tl.dot`` into int32 / float32, ``s_a *`` float32, ``s_b *``, cast to c's dtype, ``+ bias`` in it) and assert its
asserts (L368-375, L470-494); they run through ``evaluate_case`` on the CPU. A stand-in with the other scale order
must fail C8. The real package runs natively only where it imports on CUDA sm_90 (skipped otherwise)."""

import dataclasses
import importlib.util
from types import SimpleNamespace

import pytest
import torch

from conformance.cases import make_case
from conformance.cases.fp8 import FP8_FAMILIES
from conformance.kernels import adapters, trace
from conformance.kernels.adapters.flaggems import CONFIGS, build_spec, m_bucket, pinned_tiles
from conformance.kernels.runner import run_kernel
from conformance.kernels.spec import conformance_run
from conformance.suite.evaluate import evaluate_case
from reference.errors import OperandError

NAMES = ("flaggems-int8", "flaggems-fp8")


def _asserts(c, a, b, a_scale, b_scale, bias):
    """The source's asserts on what the adapter hands over (L368-375, L482-494)."""
    assert a.stride(1) == 1 and c.stride(1) == 1 and b.stride(0) == 1
    assert c.stride(0) % 16 == 0 and b.stride(1) % 16 == 0
    assert a_scale.dtype == b_scale.dtype == torch.float32
    assert a_scale.is_contiguous() and b_scale.is_contiguous()
    assert a_scale.numel() in (1, a.shape[0]) and b_scale.numel() in (1, b.shape[1])
    assert bias is None or (bias.dim() == 1 and bias.is_contiguous() and bias.numel() == b.shape[1])


def _acc(a, b):
    """``tl.dot(a, b, acc, out_dtype=ACC_DTYPE)`` (L268, L318): int32 (wrapping) for int8, float32 sums of the exact
    e4m3 products for e4m3 (the CPU meaning of the declared ``fp32`` accumulator)."""
    if a.dtype == torch.int8:
        return (a.long() @ b.long()).to(torch.int32)
    return a.float() @ b.float()


def standin(c, a, b, a_scale, b_scale, bias=None):
    """``_pertensor_or_pertoken_smm_kernel``'s epilogue, op for op."""
    _asserts(c, a, b, a_scale, b_scale, bias)
    acc = _acc(a, b)
    acc = a_scale.reshape(-1, 1) * acc.to(torch.float32)  # L277
    acc = b_scale.reshape(1, -1) * acc.to(torch.float32)  # L282
    out = acc.to(c.dtype)  # L284
    if bias is not None:
        out = out + bias  # L291, in c's dtype
    c.copy_(out)


def swapped_standin(c, a, b, a_scale, b_scale, bias=None):
    """The same with s_b applied first (w_then_a): must fail C8 where the order decides the bits."""
    _asserts(c, a, b, a_scale, b_scale, bias)
    acc = b_scale.reshape(1, -1) * _acc(a, b).to(torch.float32)
    out = (a_scale.reshape(-1, 1) * acc).to(c.dtype)
    c.copy_(out + bias if bias is not None else out)


def _cpu(spec):
    acc = None if spec.accumulator is None else {"cpu": "fp32", **{k: v for k, v in spec.accumulator.items()}}
    return dataclasses.replace(spec, devices=("cpu",), accumulator=acc)


def _fp8_cases(family: str, limit: int):
    spec = build_spec("flaggems-fp8", standin)
    cases = [c for c in FP8_FAMILIES[family][0](0) if not spec.constraints.violations(*_mkn(c))]
    return cases[:limit]


def _mkn(ops):
    return ops.a.shape[0], ops.a.shape[1], ops.b.shape[0]


@pytest.mark.parametrize("kind", ["epilogue_ties", "bias", "column_scales", "scalar_scales", "m1"])
def test_int8_standin_holds_to_the_declared_steps(kind):
    spec = _cpu(build_spec("flaggems-int8", standin, "standin"))
    kw = {"bias": dict(out_dtype=torch.float32), "m1": dict(n=48)}.get(kind, {})
    ops = make_case(kind, 0, **kw)
    assert not spec.constraints.violations(*_mkn(ops)), "case outside the constraints: nothing would be checked"
    r = evaluate_case(spec, ops, device="cpu")
    assert r.checks["C8"].verdict == "pass", r.checks["C8"].summary
    assert r.verdict == "pass"


@pytest.mark.parametrize("family", ["scale_order_ties", "small_int"])
def test_fp8_standin_holds_to_the_declared_steps_and_accumulator(family):
    spec = _cpu(build_spec("flaggems-fp8", standin, "standin"))
    cases = _fp8_cases(family, 2)
    assert cases
    for ops in cases:
        r = evaluate_case(spec, ops, device="cpu")
        assert r.checks["C8"].verdict == "pass", (ops.name, r.checks["C8"].summary)
        assert r.verdict == "pass", ops.name


def test_the_other_scale_order_fails_c8():
    int8 = _cpu(build_spec("flaggems-int8", swapped_standin, "standin"))
    assert evaluate_case(int8, make_case("epilogue_ties", 0), device="cpu").checks["C8"].verdict == "fail"
    fp8 = _cpu(build_spec("flaggems-fp8", swapped_standin, "standin"))
    verdicts = [evaluate_case(fp8, ops, device="cpu").checks["C8"].verdict for ops in _fp8_cases("scale_order_ties", 3)]
    assert "fail" in verdicts


def test_declarations_and_constraints():
    int8, fp8 = (build_spec(n, standin) for n in NAMES)
    assert int8.steps.to_list() == ["cast fp32", "mul s_a", "mul s_w", "cast out", "add bias"]
    assert fp8.steps is int8.steps and int8.contract.label() == fp8.contract.label()
    assert (int8.operands, int8.accumulator) == ("int8", None)
    assert fp8.operands == "e4m3" and fp8.accumulator_on("cuda").label() == "fp32 bits=14 truncate"
    assert fp8.accumulator_on("cuda").promote_every is None  # no max_num_imprecise_acc: never promoted
    assert int8.devices == fp8.devices == ("cuda",)
    assert int8.dense_operands() == {"b", "bias", "scale_a", "scale_b"}
    assert int8.constraints.violations(8, 40, 12) == ["K=40 is not a multiple of 16", "N=12 is not a multiple of 16"]
    assert int8.constraints.violations(1, 16, 16) == []
    assert int8.warm_up is True


def test_pinned_config_is_a_function_of_the_m_bucket():
    assert [m_bucket(m) for m in (1, 2, 17, 32, 33, 64, 65, 1000)] == [1, 2, 32, 32, 64, 64, 128, 1024]
    assert [pinned_tiles(m) for m in (1, 32, 33, 64, 65)] == [
        CONFIGS[0],
        CONFIGS[0],
        CONFIGS[1],
        CONFIGS[1],
        CONFIGS[2],
    ]


def _fake_tuner():
    cfgs = [
        SimpleNamespace(kwargs=dict(TILE_M=tm, TILE_N=tn, TILE_K=tk), num_warps=4, num_stages=3)
        for tm, tn, tk in CONFIGS
    ]
    return SimpleNamespace(configs=list(cfgs), best_config=cfgs[2])


def _operands(m, k, n, dtype=torch.int8):
    g = torch.Generator().manual_seed(5)
    a = torch.randint(-8, 8, (m, k), generator=g, dtype=torch.int8).to(dtype)
    b = torch.randint(-8, 8, (n, k), generator=g, dtype=torch.int8).to(dtype)
    return a, b, torch.full((m,), 0.5), torch.full((1,), 0.25)


def test_the_path_names_scales_config_and_rule():
    tuner = _fake_tuner()
    seen = []

    def entry(c, a, b, a_scale, b_scale, bias):
        seen.append([c.kwargs["TILE_K"] for c in tuner.configs])
        standin(c, a, b, a_scale, b_scale, bias)

    fn = build_spec("flaggems-fp8", entry, tuner=tuner).scaled_mm
    a, b, sa, sb = _operands(40, 32, 16, torch.float8_e4m3fn)
    with conformance_run(), trace.capture() as t:
        fn(a, b, sa, sb, torch.bfloat16, None)
    assert seen == [[128]] and len(tuner.configs) == 3  # one config while called, the list restored
    assert t.path == "flaggems/sm90-pertensor-or-pertoken/e4m3/per-token-a/per-tensor-b"
    assert (t.extra["config"], t.extra["m_bucket"], t.extra["max_num_imprecise_acc"]) == ("64x128x128 w4 s3", 64, 2**30)
    assert t.extra["config_rule"].startswith("shape")
    with trace.capture() as t:  # outside a conformance run: the autotuner's own (timed) choice
        fn(a, b, sa, sb, torch.bfloat16, None)
    assert (t.extra["config"], t.extra["config_rule"]) == ("128x128x128 w4 s3", "triton.autotune (timed)")


def test_bad_operands_and_devices_are_one_line():
    a, b, sa, sb = _operands(4, 32, 16)
    with pytest.raises(OperandError, match="must be torch.float8_e4m3fn"):
        build_spec("flaggems-fp8", standin).scaled_mm(a, b, sa, sb)
    with pytest.raises(OperandError, match="sm_90 only .* this is sm_80"):
        build_spec("flaggems-int8", standin, sm=80).scaled_mm(a, b, sa, sb)
    run = run_kernel(_cpu(build_spec("flaggems-int8", standin, sm=100)), make_case("bias", 0), device="cpu")
    assert "\n" not in run.error and "sm_100" in run.error


def test_catalogue_entries():
    for name in NAMES:
        info = adapters.ADAPTERS[name]
        assert (info.requires, info.devices, info.module) == (
            ("flag_gems",),
            ("cuda",),
            "conformance.kernels.adapters.flaggems",
        )


def _native_reason() -> str:
    if importlib.util.find_spec("flag_gems") is None:
        return "flag_gems is not installed (pip install flag-gems==5.0.2)"
    if not torch.cuda.is_available():
        return "no CUDA device"
    if torch.cuda.get_device_capability() != (9, 0):
        return "FlagGems cutlass_scaled_mm has a kernel for sm_90 only"
    return ""


@pytest.mark.skipif(bool(_native_reason()), reason=_native_reason() or "runs")
@pytest.mark.parametrize("name", NAMES)
def test_native_cases_pass_and_name_the_path(name):
    spec = adapters.make_spec(name)
    if name == "flaggems-int8":
        cases = [make_case(k, 0) for k in ("epilogue_ties", "scalar_scales")] + [make_case("m1", 0, n=48)]
        cases.append(make_case("bias", 0, out_dtype=torch.float32))  # a bias FMA would fail C8 here
    else:
        cases = _fp8_cases("scale_order_ties", 3) + _fp8_cases("small_int", 2)
    for ops in cases:
        r = evaluate_case(spec, ops, device="cuda")
        assert r.checks["C8"].verdict == "pass", (ops.name, r.checks["C8"].summary)
        assert r.manifest["path"].startswith("flaggems/sm90-pertensor-or-pertoken/"), r.manifest
