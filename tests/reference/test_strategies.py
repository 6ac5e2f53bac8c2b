"""reference.strategies: the generated cases cover what they promise and are valid."""

import math

import torch
from hypothesis import find, given, settings
from hypothesis import strategies as st

from reference.strategies import SCALE_KINDS, gemm_operands, int8_tensors, invalid_scales, scales, shapes
from reference.validate import validate_operands

FIND = settings(max_examples=400, database=None, derandomize=True)


def test_shapes_reach_m1_and_unaligned_tails():
    assert find(shapes(), lambda s: s[0] == 1, settings=FIND)[0] == 1
    for mult in (8, 16, 32):
        m, k, n = find(
            shapes(),
            lambda s, mult=mult: s[1] > mult and s[1] % mult != 0 and s[2] > mult and s[2] % mult != 0,
            settings=FIND,
        )
        assert k % mult and n % mult


def test_int8_tensors_reach_extremes():
    t = find(int8_tensors((4, 64)), lambda t: bool((t == -128).all()), settings=FIND)
    assert t.dtype == torch.int8 and int(t.sum()) == -128 * 256
    t = find(
        int8_tensors((4, 64)),
        lambda t: bool((t == -128).any()) and bool((t == 127).any()) and float((t == -128).float().mean()) > 0.2,
        settings=FIND,
    )
    assert int(t.min()) == -128 and int(t.max()) == 127


def _kind_of(s: torch.Tensor) -> set:
    e = torch.log2(s.abs().double())
    out = set()
    if bool((s < 0).any()):
        out.add("negative")
    if bool((e == e.round()).all()) and bool((s > 0).all()):
        out.add("pow2")
    if float(e.max()) < -60:
        out.add("tiny")
    if float(e.min()) > 50:
        out.add("large")
    return out


@given(st.data())
def test_scale_kinds_have_their_ranges(data):
    kind = data.draw(st.sampled_from(SCALE_KINDS))
    s = data.draw(scales(64, kinds=(kind,)))
    assert s.dtype == torch.float32 and s.shape == (64,) and bool(torch.isfinite(s).all())
    assert bool((s != 0).all())
    if kind in ("pow2", "tiny", "large"):
        assert kind in _kind_of(s)
    if kind == "tiny":  # s_a * s_w reaches below the float32 normal range (2**-126)
        assert float(s.double().min()) ** 2 < 2.0**-126
    if kind == "large":  # s_a * s_w >= 2**112: an accumulator >= 2**16 overflows float32
        assert float(s.double().min()) >= 2.0**56


def test_negative_kind_has_both_signs():
    s = find(scales(16, kinds=("negative",)), lambda s: bool((s < 0).any()) and bool((s > 0).any()), settings=FIND)
    assert bool((s < 0).any())


@given(gemm_operands(out_dtypes=(torch.bfloat16, torch.float16, torch.float32)))
def test_gemm_operands_are_valid(ops):
    m, k, n = validate_operands(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias, ops.out_dtype)
    assert (m, k, n) == (ops.m, ops.k, ops.n) == (ops.meta["M"], ops.meta["K"], ops.meta["N"])
    assert ops.scale_mode == ("pow2" if ops.meta["scale_kind_b"] == "pow2" else "synthetic")
    if ops.scale_mode == "pow2":
        assert all(math.log2(v) == round(math.log2(v)) for v in ops.scale_b.tolist())


@given(st.integers(1, 9).flatmap(invalid_scales))
def test_invalid_scales_contain_the_problem(bad):
    s, problem, idx = bad
    v = float(s[idx])
    assert {"zero": v == 0, "NaN": math.isnan(v), "inf": math.isinf(v)}[problem]
    assert bool(torch.isfinite(s[:idx]).all()) and bool((s[:idx] != 0).all())
