"""The ``epilogue_ties`` synthetic case: many elements whose bf16
result depends on the scale order, so a wrong order fails C8 on hundreds of
elements instead of one in millions."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conformance.cases import SYNTHETIC_KINDS, TIE_BLOCK, make_case, synthetic_cases, tie_discrimination
from conformance.kernels.registry import get_kernel
from conformance.kernels.spec import KernelSpec
from conformance.suite.evaluate import evaluate_case
from conformance.suite.run import default_cases
from reference.accumulate import exact_int_mm, int_mm_int64_naive
from reference.contract import CUTLASS_STYLE, TRITON_STYLE, EpilogueContract
from reference.epilogue import apply_epilogue

#: meta["discriminating"] of synthetic/epilogue_ties-s0 (pinned; recomputed
#: independently with numpy below).
SEED0 = {
    "elements": 1024,
    "a_then_w!=w_then_a": 787,
    "a_then_w!=fused": 465,
    "w_then_a!=fused": 532,
    "any": 892,
    "all_three": 0,
}


@pytest.fixture(scope="module")
def ties():
    return {s: make_case("epilogue_ties", s) for s in (0, 1)}


def _np_bf16_bits(y: np.ndarray) -> np.ndarray:
    """float32 -> bf16 RNE bits with numpy integer ops (independent of torch)."""
    u = y.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def _np_orders(ops) -> dict:
    acc = int_mm_int64_naive(ops.a, ops.b).numpy()
    assert np.abs(acc).max() < 2**24  # float32(acc) exact
    x = acc.astype(np.float32)
    sa = ops.scale_a.numpy().astype(np.float32).reshape(-1, 1)
    sw = ops.scale_b.numpy().astype(np.float32).reshape(1, -1)
    with np.errstate(all="raise"):  # ordinary magnitudes: no overflow, no underflow
        return {
            "a_then_w": _np_bf16_bits((x * sa) * sw),
            "w_then_a": _np_bf16_bits((x * sw) * sa),
            "fused": _np_bf16_bits(x * (sa * sw)),
        }


def test_structure_block_diagonal_and_exact(ties):
    ops = ties[0]
    assert (ops.m, ops.k, ops.n) == (32, 32 * TIE_BLOCK, 32) and ops.bias is None
    assert ops.out_dtype == torch.bfloat16 and ops.scale_mode == "synthetic"
    b = ops.b.to(torch.int64)
    for j in (0, 17, 31):
        row = torch.zeros(ops.k, dtype=torch.int64)
        row[j * TIE_BLOCK : (j + 1) * TIE_BLOCK - 1] = 127
        row[(j + 1) * TIE_BLOCK - 1] = 1
        assert torch.equal(b[j], row)
    a = ops.a.to(torch.int64).reshape(32, 32, TIE_BLOCK)
    want = 127 * a[..., :-1].sum(-1) + a[..., -1]
    acc = exact_int_mm(ops.a, ops.b)
    assert torch.equal(acc, want)
    assert int(acc.abs().max()) <= 127 * 127 * (TIE_BLOCK - 1) + 127 == 500126
    assert int((acc > 0).sum()) not in (0, 1024)  # both signs
    # ordinary magnitudes: per-token absmax/127 in [0.5, 8), per-channel absmax/127.5
    assert 0.5 / 127 <= float(ops.scale_a.min()) and float(ops.scale_a.max()) < 8 / 127
    assert 0.02 / 127.5 <= float(ops.scale_b.min()) and float(ops.scale_b.max()) < 0.3 / 127.5


def test_deterministic_per_seed(ties):
    again = make_case("epilogue_ties", 0)
    assert again.digests() == ties[0].digests()
    assert ties[1].digests()["a"] != ties[0].digests()["a"]
    assert json.loads(json.dumps(ties[0].meta))["discriminating"] == SEED0


@pytest.mark.parametrize("seed", [0, 1])
def test_discriminating_counts_independent(ties, seed):
    ops = ties[seed]
    bits = _np_orders(ops)
    aw = bits["a_then_w"] != bits["w_then_a"]
    af = bits["a_then_w"] != bits["fused"]
    wf = bits["w_then_a"] != bits["fused"]
    got = {
        "elements": aw.size,
        "a_then_w!=w_then_a": int(aw.sum()),
        "a_then_w!=fused": int(af.sum()),
        "w_then_a!=fused": int(wf.sum()),
        "any": int((aw | af | wf).sum()),
        "all_three": int((aw & af & wf).sum()),
    }
    assert ops.meta["discriminating"] == got
    assert got["a_then_w!=w_then_a"] >= 0.3 * 1024 and got["any"] >= 0.6 * 1024
    assert min(got["a_then_w!=fused"], got["w_then_a!=fused"]) >= 0.3 * 1024
    if seed == 0:
        assert got == SEED0
    # the differences are ties: one bf16 spacing apart, never more
    assert int(np.abs(bits["a_then_w"].astype(np.int64) - bits["w_then_a"]).max()) == 1


def test_plain_random_cases_never_discriminate_planted_ones_do():
    # why planting exists: random operands have no scale-order tie (384 elements);
    # the planted probe rows and columns of the same kinds do (real scales only)
    for kind in ("ordinary", "bias", "pow2"):
        d = tie_discrimination(make_case(kind, 0, plant=False))
        assert d["any"] == 0 and d["elements"] == 384
    assert tie_discrimination(make_case("ordinary", 0))["any"] > 0
    assert make_case("ordinary", 0).meta["planted"]["scale_order"] > 0


def test_in_default_synthetic_set():
    # new kinds go last (a kind's index seeds its generator)
    assert SYNTHETIC_KINDS[-3:] == ("epilogue_ties", "column_scales", "scalar_scales")
    names = [c.name for c in synthetic_cases()]
    assert "synthetic/epilogue_ties-s0" in names and "synthetic/epilogue_ties-s1" in names
    cases, _ = default_cases(include_captures=False, include_tile_edges=False)
    assert sum(c.meta["kind"] == "epilogue_ties" for c in cases) == 2


def _emulating(order: str, declared: EpilogueContract) -> KernelSpec:
    """Declares ``declared`` but computes scale order ``order`` (fault F3/F5)."""

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        return apply_epilogue(
            exact_int_mm(a, b), scale_a, scale_b, EpilogueContract(order, declared.bias_point), bias, out_dtype
        )

    return KernelSpec(
        name=f"computes-{order}", scaled_mm=scaled_mm, contract=declared, source_digest="e" * 64, origin="test"
    )


@pytest.mark.parametrize(
    "declared,order,key",
    [
        (CUTLASS_STYLE, "a_then_w", "a_then_w!=w_then_a"),
        (CUTLASS_STYLE, "fused", "w_then_a!=fused"),
        (TRITON_STYLE, "w_then_a", "a_then_w!=w_then_a"),
        (TRITON_STYLE, "fused", "a_then_w!=fused"),
    ],
)
def test_wrong_scale_order_fails_c8_on_many_elements(ties, declared, order, key):
    ops = ties[0]
    cr = evaluate_case(_emulating(order, declared), ops)
    c8 = cr.checks["C8"]
    assert c8.verdict == "fail" and cr.verdict == "fail"
    assert c8.evidence["n_differ"] == SEED0[key] >= 100
    assert c8.evidence["max_ulp"] == 1
    # within one spacing, so C6 (real scales) passes: only C8 sees the order
    assert cr.checks["C6"].verdict == "pass"


@pytest.mark.parametrize("name", ["cpu", "triton"])
@pytest.mark.parametrize("seed", [0, 1])
def test_builtins_pass(ties, name, seed):
    if name == "triton":
        pytest.importorskip("triton")
    cr = evaluate_case(get_kernel(name), ties[seed], device="cpu")
    assert cr.checks["C8"].verdict == "pass" and cr.checks["C8"].evidence["n_differ"] == 0
    assert cr.verdict == "pass"


def test_scale_layout_cases_catch_a_kernel_that_only_takes_1d_scales():
    """The contract admits [M]/[M,1]/scalar scales: the suite feeds all three,
    so a kernel that handles only 1-D scales fails the call (CALL) exactly on
    the two layout cases (and passes the ordinary one)."""
    from conformance.cases import make_case
    from conformance.kernels.registry import get_kernel
    from conformance.kernels.spec import KernelSpec
    from conformance.suite.evaluate import evaluate_case

    cpu = get_kernel("cpu")

    def only_1d(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        if scale_a.dim() != 1 or scale_b.dim() != 1:
            raise ValueError("scales must be 1-D")
        return cpu.scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype, bias=bias)

    spec = KernelSpec(name="only1d", scaled_mm=only_1d, contract=cpu.contract, origin="test")
    col, sc = make_case("column_scales", 0), make_case("scalar_scales", 0)
    assert tuple(col.scale_a.shape) == (8, 1) and tuple(col.scale_b.shape) == (48, 1)
    assert sc.scale_a.dim() == 0 and sc.scale_b.dim() == 0
    for ops in (col, sc):
        cr = evaluate_case(spec, ops, device="cpu")
        assert cr.checks["CALL"].verdict == "fail" and cr.checks["C8"].verdict == "n/a"  # a raise, not numerics
        assert "scales must be 1-D" in cr.checks["CALL"].summary
    assert evaluate_case(spec, make_case("ordinary", 0), device="cpu").checks["C8"].verdict == "pass"
