"""gemlite adapters (gemlite-int8, gemlite-fp8): gemlite needs CUDA at import, so the adapter's own code runs
here against a stand-in for gemlite's pieces doing the source's math op for op (pack's layout, the Triton
kernels' epilogue ``acc.to(fp32) * (s_a * s_w)``, cast, then ``out += bias``); the declared steps are pinned
against numpy float32 arithmetic; one test runs the real package when it and CUDA are present."""

import contextlib
import dataclasses
import hashlib
import importlib.util
import sys
import types

import numpy as np
import pytest
import torch

from conformance.cases import make_case
from conformance.cases.fp8 import scale_order_ties_case
from conformance.kernels import adapters
from conformance.kernels.adapters import gemlite as gl
from conformance.kernels.runner import run_kernel
from conformance.suite.evaluate import evaluate_case
from reference.epilogue import apply_steps
from reference.operands import GemmOperands

#: gemlite DType codes (dtypes.py:9-14) of the out dtypes
_OUT_CODE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_CODE_OUT = {v: k for k, v in _OUT_CODE.items()}


class StandIn:
    """gemlite's pieces on the CPU. ``order``: ``fused`` (the kernels' ``acc * (s_a * s_w)``) or ``a_then_w``;
    ``bias_in_fp32``: add the bias before the cast (not what core.py:271-272 does)."""

    def __init__(self, order: str = "fused", bias_in_fp32: bool = False):
        self.order, self.bias_in_fp32 = order, bias_in_fp32
        self.calls: list = []

    def make_layer(self, b, scale_b, bias, out_dtype, fp8):
        n, k = b.shape
        assert scale_b.shape == (n, 1) and scale_b.dtype == torch.float32
        w_q = b.t()  # core.py:606
        scales = scale_b.view((n, -1)).t().contiguous()  # core.py:659, 723-724
        zeros = torch.tensor([[]], dtype=torch.int32)
        in_code = 3 if fp8 else 4  # DType.FP8 / DType.INT8
        acc_code = 0 if fp8 else 7  # GEMLITE_ACC_DTYPE: FP32 / INT32
        meta = [1, 8, k, 255, 1, in_code, _OUT_CODE[out_dtype], acc_code, 0, 3, 0, 0]
        bias = None if bias is None else bias.to(out_dtype)  # helper.py:670
        return types.SimpleNamespace(
            bias=bias, get_tensor_args=lambda: [w_q, scales, zeros, torch.tensor(0.0)], get_meta_args=lambda: meta
        )

    def matmul_type(self, m, w_nbits):
        assert w_nbits == 8
        return "GEMM" if m >= 64 else ("GEMM_SPLITK" if m > 2 else "GEMV_SPLITK")  # core.py:171-179

    def forward(self, mt):
        def fwd(
            x, w_q, scales, zeros, scales_x, w_nbits, g, mask, e, in_code, out_code, acc, meta, csm, wgm, *rest, **kw
        ):
            m, n = x.shape[0], w_q.shape[1]
            assert (csm, wgm, meta, e) == (3, 0, 0, 1) and x.is_contiguous()
            assert scales_x.shape == (m, 1) and scales_x.dtype == torch.float32 and scales.shape == (1, n)
            if in_code == 4:  # int8: exact int32 accumulator (tl.dot out_dtype int32)
                accum = (x.long() @ w_q.long()).to(torch.float32)
            else:  # e4m3: exact products summed in float64 (the accumulator-safe cases are exact)
                accum = (x.double() @ w_q.double()).to(torch.float32)
            if self.order == "fused":  # gemm_kernels.py:484
                y = accum * (scales_x * scales)
            else:
                y = (accum * scales_x) * scales
            self.calls.append(mt)
            self.out_dtype = _CODE_OUT[out_code]
            return y if self.bias_in_fp32 else y.to(self.out_dtype)  # gemm_kernels.py:488

        return fwd

    def m_closest(self, mt, m):
        return m

    @contextlib.contextmanager
    def pinned(self, mt, m, n, k, type_id):
        yield "standin"

    def launched(self, mt):
        return None


class BiasFirst(StandIn):
    """Bias added to the fp32 value, one rounding (a kernel this adapter's declaration does not describe)."""

    def __init__(self):
        super().__init__(bias_in_fp32=True)

    def make_layer(self, b, scale_b, bias, out_dtype, fp8):
        layer = super().make_layer(b, scale_b, bias, out_dtype, fp8)
        self.bias = layer.bias
        layer.bias = None
        return layer

    def forward(self, mt):
        inner = super().forward(mt)

        def fwd(*args, **kw):
            y = inner(*args, **kw)
            return (y + self.bias.float() if self.bias is not None else y).to(self.out_dtype)

        return fwd


def _cpu(name, lib):
    spec = gl.build_spec(name, lib, digest=hashlib.sha256(b"gemlite stand-in").hexdigest())
    acc = {"cpu": "fp32"} if spec.is_fp8 else None  # the stand-in's exact e4m3 sum
    return dataclasses.replace(spec, devices=("cpu",), accumulator=acc)


@pytest.mark.parametrize("kind", ["epilogue_ties", "bias", "column_scales", "scalar_scales"])
def test_int8_standin_holds_the_declared_steps(kind):
    r = evaluate_case(_cpu("gemlite-int8", StandIn()), make_case(kind, 0), device="cpu")
    assert r.checks["C8"].verdict == "pass", r.checks["C8"].summary
    assert r.verdict == "pass"


@pytest.mark.parametrize("m", [1, 8, 129])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_fp8_standin_holds_the_declared_steps_on_every_path(m, out_dtype):
    lib = StandIn()
    r = evaluate_case(_cpu("gemlite-fp8", lib), scale_order_ties_case(out_dtype, m=m), device="cpu")
    assert r.checks["C8"].verdict == "pass", r.checks["C8"].summary
    assert set(lib.calls) == {{1: "GEMV_SPLITK", 8: "GEMM_SPLITK", 129: "GEMM"}[m]}


def test_another_scale_order_fails_c8():
    r = evaluate_case(_cpu("gemlite-int8", StandIn("a_then_w")), make_case("epilogue_ties", 0), device="cpu")
    assert r.checks["C8"].verdict == "fail"
    r = evaluate_case(_cpu("gemlite-fp8", StandIn("a_then_w")), scale_order_ties_case(torch.bfloat16), device="cpu")
    assert r.checks["C8"].verdict == "fail"


def test_bias_before_the_cast_fails_c8():
    ops = make_case("epilogue_ties", 0, bias=True)
    assert evaluate_case(_cpu("gemlite-int8", StandIn()), ops, device="cpu").checks["C8"].verdict == "pass"
    r = evaluate_case(_cpu("gemlite-int8", BiasFirst()), ops, device="cpu")
    assert r.checks["C8"].verdict == "fail"


def _np_bf16(x):
    """float32 -> bf16 RNE -> float32 on the bits (numpy, independent of reference.bits)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return (r & 0xFFFFFFFF).astype(np.uint32).view(np.float32)


def test_declared_steps_are_the_kernels_float32_arithmetic():
    """fused/after_round equals numpy: fl(acc) * fl(s_a * s_w), bf16 RNE, + bias, bf16 RNE; and the adapter
    through the stand-in gives those bits."""
    g = torch.Generator().manual_seed(7)
    m, k, n = 3, 64, 16
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
    sa = (torch.rand(m, generator=g) * 0.02 + 1e-3).float()
    sw = (torch.rand(n, generator=g) * 0.004 + 1e-4).float()
    bias = (torch.randn(n, generator=g) * 2).to(torch.bfloat16)
    acc = (a.numpy().astype(np.int64) @ b.numpy().astype(np.int64).T).astype(np.float32)
    s = (sa.numpy()[:, None] * sw.numpy()[None, :]).astype(np.float32)
    want = _np_bf16(_np_bf16(acc * s) + bias.float().numpy()[None, :])
    got = apply_steps(torch.from_numpy(acc.astype(np.int64)), sa, sw, gl.STEPS, bias, torch.bfloat16)
    assert np.array_equal(got.float().numpy().view(np.uint32), want.view(np.uint32))
    ops = GemmOperands(a=a, b=b, scale_a=sa, scale_b=sw, bias=bias, out_dtype=torch.bfloat16, name="hand")
    run = run_kernel(_cpu("gemlite-int8", StandIn()), ops, device="cpu")
    assert run.error is None, run.error
    assert np.array_equal(run.output.float().numpy().view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("m,path", [(1, "gemv_splitK"), (2, "gemv_splitK"), (3, "gemm_splitK"), (63, "gemm_splitK")])
def test_the_path_is_recorded_per_call(m, path):
    ops = make_case("bias", 0)
    ops = dataclasses.replace(ops, a=ops.a[:1].expand(m, -1).contiguous(), scale_a=ops.scale_a[:1].expand(m))
    run = run_kernel(_cpu("gemlite-int8", StandIn()), ops, device="cpu")
    assert run.error is None, run.error
    assert run.manifest["path"] == f"gemlite/{path}"
    assert run.manifest["extra"]["split_k"] == 1
    assert run.manifest["extra"]["config"] == "standin"


def test_declaration_constraints_and_registration():
    spec = gl.build_spec("gemlite-fp8", StandIn())
    assert spec.steps.to_list() == ["cast fp32", "mul s_a*s_w", "cast out", "add bias"]
    assert spec.contract.label() == "fused/bias:after_round/rne"
    assert spec.accumulator_on("cuda").label() == "fp32 bits=14 truncate"
    assert gl.build_spec("gemlite-int8", StandIn()).accumulator is None
    assert spec.constraints.violations(8, 48, 17) == ["K=48 is not a multiple of 32"]
    assert spec.constraints.violations(1, 32, 1) == []
    one = torch.ones(())
    assert spec.constraints.operand_violations(one, one, torch.zeros(3), torch.float16) == []
    for name in ("gemlite-int8", "gemlite-fp8"):
        info = adapters.ADAPTERS[name]
        assert (info.module, info.requires, info.devices) == (gl.__name__, ("gemlite",), ("cuda",))


def test_pinned_writes_the_pruners_cache_signature_and_restores_it(monkeypatch):
    """Gemlite.pinned: the entry ``kernel_config_pruner`` reads (gemm_splitK_kernels.py:31-33) for this call,
    SPLIT_K 1 from the module's default list, and the cache as it was afterwards."""
    cfg = types.SimpleNamespace(kwargs={"BLOCK_SIZE_M": 16, "SPLIT_K": 1}, num_warps=4, num_stages=2)
    kmod = types.ModuleType("fake_gemlite_kernels")
    kmod.get_default_config_nvidia = lambda: [cfg]
    kmod.get_closest_m = lambda m: 16 if m <= 16 else 64
    monkeypatch.setitem(sys.modules, kmod.__name__, kmod)
    kernel_cls = type("gemm_splitK", (), {"__module__": kmod.__name__, "kernel": [types.SimpleNamespace()]})
    core = types.SimpleNamespace(GEMLITE_TRITON_MAPPING={"GEMM_SPLITK": kernel_cls}, GEMLITE_TRITON_CONFIG_CACHE={})
    lib = object.__new__(gl.Gemlite)
    lib.core = core
    with lib.pinned("GEMM_SPLITK", 9, 48, 64, 408) as text:
        assert core.GEMLITE_TRITON_CONFIG_CACHE["GEMM_SPLITK"] == {
            "(16, 48, 64, 64, 1, 408)": {"BLOCK_SIZE_M": 16, "SPLIT_K": 1, "num_warps": 4, "num_stages": 2}
        }
        assert text == "BLOCK_SIZE_M=16 SPLIT_K=1 num_stages=2 num_warps=4"
    assert core.GEMLITE_TRITON_CONFIG_CACHE["GEMM_SPLITK"] == {}
    cfg.kwargs["SPLIT_K"] = 4
    with pytest.raises(gl.OperandError, match="SPLIT_K=4"):
        with lib.pinned("GEMM_SPLITK", 9, 48, 64, 408):
            pass


def _real_ready():
    if importlib.util.find_spec("gemlite") is None:
        return "gemlite is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device (gemlite's Triton kernels need one)"
    return ""


@pytest.mark.skipif(bool(_real_ready()), reason=_real_ready() or "ready")
@pytest.mark.parametrize("name", ["gemlite-int8", "gemlite-fp8"])
def test_real_gemlite_natively(name):
    spec = adapters.make_spec(name)
    if spec.is_fp8:
        cases = [
            scale_order_ties_case(dt, m=m) for dt, m in ((torch.bfloat16, 1), (torch.float16, 8), (torch.bfloat16, 129))
        ]
    else:
        cases = [make_case(kind, 0) for kind in ("epilogue_ties", "bias", "column_scales", "scalar_scales")]
    for ops in cases:
        r = evaluate_case(spec, ops, device="cuda")
        assert r.checks["C8"].verdict == "pass", (ops.name, r.checks["C8"].summary)


def test_the_layer_is_built_once_per_weight_and_again_after_an_in_place_update():
    from conformance.kernels.adapters import gemlite as gl

    built = []

    class Lib:
        def make_layer(self, b, scale_b, bias, out_dtype, fp8):
            built.append(b.clone())
            return object()

    lib, b, sb = Lib(), torch.ones(4, 8, dtype=torch.int8), torch.ones(4)

    def layer(out_dtype=torch.bfloat16):  # as the adapter calls it: a fresh [N, 1] view of the caller's scale
        return gl._layer(lib, b, sb.reshape(4, 1), None, (b, sb, None))(out_dtype, False)

    first = layer()
    assert layer() is first and len(built) == 1  # a new view object each call, the same caller tensors
    b.add_(1)  # the caller updates the weight in place: a new layer on the new values
    assert layer() is not first and len(built) == 2
    assert int(built[-1][0, 0]) == 2
    layer(torch.float16)  # another out dtype: its own layer
    assert len(built) == 3
