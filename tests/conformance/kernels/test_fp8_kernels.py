"""The FP8 built-ins (``fp8-cpu``, ``torch-fp8``, ``torch-fp8-fast``, ``triton-fp8``) against the exact sum and their
declared epilogue on small-integer e4m3 operands (every partial sum exact in any order), their declarations
(operands, accumulator) and the discriminating row of DESIGN.md 3b natively (CUDA tests skip without a GPU)."""

from __future__ import annotations

import pytest
import torch

from conformance.checks.fp8_accumulator import check_fp8_accumulator
from conformance.kernels.loader import declare, spec_from_object
from conformance.kernels.registry import get_kernel, resolve_kernels
from conformance.kernels.spec import FP8_BUILTINS, INT8_BUILTINS, KernelSpec, parse_declared_accumulator
from reference import fp8
from reference.contract import NAMED, select_steps
from reference.epilogue import acc_to_fp32, apply_steps
from reference.errors import ContractError, KernelLoadError, OperandError

E4M3 = torch.float8_e4m3fn
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _exact_sum_fp32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Test stand-in for ``reference.fp8.exact_sum_fp32``: e4m3 * 2**9 is an integer, so the sum is an int64
    multiple of 2**-18, rounded once (RNE) to float32."""
    ai = (a.float().double() * 2**9).long()
    bi = (b.float().double() * 2**9).long()
    return acc_to_fp32(ai @ bi.T) * 2.0**-18


@pytest.fixture(autouse=True)
def _exact_sum(monkeypatch):
    if not hasattr(fp8, "exact_sum_fp32"):
        monkeypatch.setattr(fp8, "exact_sum_fp32", _exact_sum_fp32, raising=False)


def _operands(m: int, k: int, n: int, scales: str, out_dtype, with_bias: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-8, 9, (m, k), generator=g).float().to(E4M3)
    b = torch.randint(-8, 9, (n, k), generator=g).float().to(E4M3)
    if scales == "tensor":
        sa, sb = torch.rand((), generator=g) + 0.01, torch.rand((), generator=g) + 0.01
    else:
        sa, sb = torch.rand(m, 1, generator=g) * 0.1 + 1e-3, torch.rand(n, generator=g) * 0.1 + 1e-3
    bias = (torch.randn(n, generator=g) * 4).to(out_dtype) if with_bias else None
    return a, b, sa, sb, bias


def _expected(spec: KernelSpec, a, b, sa, sb, bias, out_dtype, device: str = "cpu"):
    steps = select_steps(spec.steps, device, out_dtype) or spec.contract.steps
    return apply_steps(fp8.exact_sum_fp32(a, b), sa, sb, steps, bias, out_dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({torch.float32: torch.int32}.get(t.dtype, torch.int16))


@pytest.mark.parametrize("name", FP8_BUILTINS)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cpu_bits_equal_exact_sum_and_declared_epilogue(name, out_dtype):
    spec = get_kernel(name)
    shape = (5, 40, 24) if name == "triton-fp8" else (33, 100, 40)
    for i, (scales, with_bias) in enumerate((("row", True), ("tensor", False))):
        a, b, sa, sb, bias = _operands(*shape, scales, out_dtype, with_bias, seed=i)
        out = spec.scaled_mm(a, b, sa, sb, out_dtype=out_dtype, bias=bias)
        want = _expected(spec, a, b, sa, sb, bias, out_dtype)
        assert out.dtype == out_dtype and out.shape == want.shape and out.is_contiguous()
        assert torch.equal(_bits(out), _bits(want)), (name, scales, out_dtype)


def test_layouts_are_read_through_strides():
    spec = get_kernel("triton-fp8")
    a, b, sa, sb, bias = _operands(6, 48, 20, "row", torch.bfloat16, True)
    wide = torch.zeros(6, 64).to(E4M3)
    wide[:, :48] = a
    bt = b.t().contiguous().t()  # the transposed view of a [K, N] buffer
    want = _expected(spec, a, b, sa, sb, bias, torch.bfloat16)
    for s in (spec, get_kernel("torch-fp8"), get_kernel("fp8-cpu")):
        out = s.scaled_mm(wide[:, :48], bt, sa, sb, out_dtype=torch.bfloat16, bias=bias)
        assert torch.equal(_bits(out), _bits(_expected(s, a, b, sa, sb, bias, torch.bfloat16))), s.name
    assert torch.equal(_bits(spec.scaled_mm(wide[:, :48], bt, sa, sb, torch.bfloat16, bias)), _bits(want))


def _row(k: int):
    """The discriminating row: one product 256 (16 * 16), then K - 1 products 2**-6 (0.125 * 0.125)."""
    v = torch.full((1, k), 0.125)
    v[0, 0] = 16.0
    return v.to(E4M3), v.to(E4M3)


@pytest.mark.parametrize("name", FP8_BUILTINS)
def test_cpu_discriminating_row_keeps_small_products(name):
    spec = get_kernel(name)
    one = torch.ones((), dtype=torch.float32)
    a, b = _row(128)
    out = spec.scaled_mm(a, b, one, one, out_dtype=torch.float32)
    assert out.item() == 256 + 127 * 2**-6  # 257.984375: exact, and exact in float32 too


def test_fp8_cpu_is_exact_where_float32_is_not():
    a = torch.tensor([[448.0, 2**-9, -448.0]]).to(E4M3)
    b = torch.tensor([[448.0, 2**-9, 448.0]]).to(E4M3)
    one = torch.ones((), dtype=torch.float32)
    assert get_kernel("fp8-cpu").scaled_mm(a, b, one, one, out_dtype=torch.float32).item() == 2.0**-18


def test_operand_errors_are_one_line():
    spec = get_kernel("torch-fp8")
    a, b, sa, sb, _ = _operands(4, 16, 8, "row", torch.bfloat16, False)
    with pytest.raises(OperandError, match=r"^a has dtype torch.int8; expected torch.float8_e4m3fn$"):
        spec.scaled_mm(torch.zeros(4, 16, dtype=torch.int8), b, sa, sb)
    bad = a.clone()
    bad.view(torch.uint8)[1, 2] = 0x7F
    with pytest.raises(OperandError, match=r"^a has 1 NaN value\(s\) \(first at index 18\)$"):
        get_kernel("fp8-cpu").scaled_mm(bad, b, sa, sb)


def test_declarations_round_trip_in_manifest():
    for name in FP8_BUILTINS:
        spec = get_kernel(name)
        man = spec.manifest()
        assert man["operands"] == "e4m3"
        assert parse_declared_accumulator(man["accumulator"]) == spec.accumulator
        assert spec.accumulator_on("cuda:0") is not None and spec.accumulator_on("cpu") is not None
    assert get_kernel("fp8-cpu").manifest()["accumulator"] == "exact"
    assert get_kernel("torch-fp8").manifest()["accumulator"] == {
        "cpu": "fp32",
        "cuda": "fp32 bits=14 truncate promote=128",
    }
    assert get_kernel("torch-fp8-fast").accumulator_on("cuda").label() == "fp32 bits=14 truncate"
    assert get_kernel("triton-fp8").accumulator_on("cuda").promote_every == 128
    man = get_kernel("cpu").manifest()
    assert man["operands"] == "int8" and "accumulator" not in man
    assert [s.name for s in resolve_kernels(["all"])] == list(INT8_BUILTINS)


def _fn(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    return None


@pytest.mark.parametrize(
    "kw, why",
    [
        (dict(operands="e4m3"), "an e4m3 kernel must declare its accumulator"),
        (dict(operands="fp16", accumulator="fp32"), "operands='fp16' is not one of"),
        (dict(accumulator="fp32"), "an int8 kernel declares no accumulator"),
        (dict(operands="e4m3", accumulator="fp32 bits=99"), "accumulator"),
        (dict(operands="e4m3", accumulator={"cuda": "fp32"}), "names ['cuda'] but not ['cpu']"),
        (dict(operands="e4m3", accumulator={"gpu": "fp32"}), "accumulator selector(s) ['gpu']"),
        (dict(int_mm=5), "int_mm=5 is not callable"),
    ],
)
def test_bad_declarations_are_one_line(kw, why):
    fn = declare("cutlass", **kw)(lambda *a, **k: None)
    with pytest.raises(KernelLoadError) as e:
        spec_from_object(fn, "m:f", "module:m:f")
    assert why in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ContractError) as e:
        KernelSpec("k", _fn, NAMED["a_then_w/after_round"].nearest_contract(), **kw)
    assert why in str(e.value) and "\n" not in str(e.value)


def test_declaration_by_decorator_attributes_and_query():
    fn = declare("triton", operands="e4m3", accumulator={"cpu": "exact", "*": "fp32"})(lambda *a, **k: None)
    spec = spec_from_object(fn, "m:f", "module:m:f")
    assert (spec.operands, spec.accumulator_on("cpu").kind, spec.accumulator_on("cuda").label()) == (
        "e4m3",
        "exact",
        "fp32",
    )

    def attrs(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        return None

    attrs.int8conf_contract = "cutlass"
    attrs.int8conf_operands = "e4m3"
    attrs.int8conf_accumulator = "fp32 bits=14 truncate promote=128"
    spec = spec_from_object(attrs, "m:attrs", "module:m:attrs")
    assert spec.manifest()["accumulator"] == "fp32 bits=14 truncate promote=128"
    spec = spec_from_object(
        _fn, "m:_fn", "module:m:_fn", {"contract": "cutlass", "operands": "e4m3", "accumulator": "exact"}
    )
    assert (spec.operands, spec.accumulator.kind) == ("e4m3", "exact")
    with pytest.raises(KernelLoadError, match="must declare its accumulator"):
        spec_from_object(_fn, "m:_fn", "module:m:_fn", {"contract": "cutlass", "operands": "e4m3"})


def test_apply_steps_takes_a_float32_accumulator():
    acc = torch.tensor([[3, -7], [1 << 20, 5]], dtype=torch.int32)
    sa, sb = torch.tensor([0.3, 1.7]), torch.tensor([0.011, 2.5])
    bias = torch.tensor([0.25, -1.0], dtype=torch.bfloat16)
    for steps in NAMED.values():
        want = apply_steps(acc, sa, sb, steps, bias, torch.bfloat16)
        assert torch.equal(_bits(apply_steps(acc.float(), sa, sb, steps, bias, torch.bfloat16)), _bits(want))
    frac = torch.tensor([[0.5, 2.0**-18]])
    out = apply_steps(frac, torch.ones(()), torch.ones(()), NAMED["fused/fp32_before_round"], None, torch.float32)
    assert out.tolist() == [[0.5, 2.0**-18]]
    with pytest.raises(OperandError, match="acc must be an int32 or int64 tensor"):
        apply_steps(frac.double(), torch.ones(()), torch.ones(()), NAMED["fused/fp32_before_round"])


# -- native (CUDA): the discriminating row as issue 30 measured it on an H200 (fp32 output, unit scales)


def _native_row(name: str, k: int) -> float:
    a, b = _row(k)
    one = torch.ones((), dtype=torch.float32, device="cuda")
    return get_kernel(name).scaled_mm(a.cuda(), b.cuda(), one, one, out_dtype=torch.float32).item()


@pytest.mark.cuda
@CUDA
@pytest.mark.parametrize("name", ["torch-fp8", "triton-fp8"])
def test_native_discriminating_row_promoted_every_128(name):
    assert _native_row(name, 128) == 256.0
    assert _native_row(name, 4096) == 318.0


@pytest.mark.cuda
@CUDA
def test_native_discriminating_row_fast_accum_never_promoted():
    assert _native_row("torch-fp8-fast", 4096) == 256.0


@pytest.mark.cuda
@CUDA
def test_fast_accumulation_declared_precise_fails_c11():
    """torch._scaled_mm with use_fast_accum=True under torch-fp8's declaration (promotion every 128 products): C11
    measures no promotion and fails it; under its own declaration it passes."""
    fast = get_kernel("torch-fp8-fast")
    declared = get_kernel("torch-fp8").accumulator_on("cuda")
    lying = KernelSpec(
        "fast-declared-precise", fast.scaled_mm, fast.contract, devices=("cuda",), operands="e4m3", accumulator=declared
    )
    r = check_fp8_accumulator(lying, device="cuda")
    assert r.verdict == "fail" and any("promotes never" in w for w in r.evidence["shortfall"]), r.summary
    assert check_fp8_accumulator(fast, device="cuda").verdict == "pass"


@pytest.mark.cuda
@CUDA
@pytest.mark.parametrize("name", FP8_BUILTINS)
def test_native_bits_equal_exact_sum_and_declared_epilogue(name):
    spec = get_kernel(name)
    for out_dtype, scales in ((torch.bfloat16, "row"), (torch.float16, "tensor"), (torch.float32, "tensor")):
        a, b, sa, sb, bias = _operands(70, 200, 90, scales, out_dtype, True)
        out = spec.scaled_mm(a.cuda(), b.cuda(), sa.cuda(), sb.cuda(), out_dtype, bias.cuda()).cpu()
        want = _expected(spec, a, b, sa, sb, bias, out_dtype, "cuda")
        assert torch.equal(_bits(out), _bits(want)), (name, out_dtype)
