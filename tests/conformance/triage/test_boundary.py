"""Triage of a failing check (conformance.triage, issue 43): the boundary search pins the threshold each
shape-gated buggy kernel of ``tests/helpers/buggy_kernels.py`` was written with (a case of the project's case
builders as the start), an M*N*K-gated kernel's product boundary (a per-dimension one has none), the categorical
flips name the attribute a gated bug needs (a scale's magnitude class included), a non-monotone failure is
reported as points, the minimal case fails and keeps only the elements its failure needs, and ``at_shape`` keeps
every operand's form, the scales, the bias and the out dtype."""

from __future__ import annotations

import dataclasses
import functools
import json

import pytest
import torch
from buggy_kernels import SPLITK_MACS, TILED_OUTPUTS, emulate, exact_acc32

from conformance.cases.common import generator
from conformance.cases.large_shapes import prefill_case, wide_n_case
from conformance.cases.layouts import layout_case, with_forms
from conformance.cases.planting import planted_case
from conformance.kernels.loader import declare, spec_from_object
from conformance.kernels.registry import get_kernel
from conformance.suite.report import triage_lines, triage_summary
from conformance.triage.boundary import Boundary, fails, find_boundaries
from conformance.triage.flips import flips, scale_class, to_scale_class
from conformance.triage.minimal import minimal_case, nonzero_count
from conformance.triage.reshape import META_KEY, at_shape, operand_forms
from reference.operands import tensor_digest

BF, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


@functools.lru_cache(maxsize=None)
def _kernel(name: str):
    return get_kernel(f"buggy_kernels:{name}")


def _failing_flips(search) -> set:
    return {(f.attribute, f.value) for f in search.flips if not f.fails}


def _pair(b: Boundary) -> tuple:
    return (b.passes_at, b.fails_at, b.monotone)


def test_prefill_scale_order_fails_past_m_128():
    # M > 128 takes a_then_w; the large_shapes prefill case has a tie on every row
    spec, ops = _kernel("prefill_scale_order"), prefill_case(257, BF)
    s = find_boundaries(spec, ops, "C8")
    assert _pair(s.boundaries["m"]) == (128, 129, True) and s.boundaries["m"].exact
    assert s.boundaries["n"].passes_at is None  # any N fails
    assert all(len(b.points) <= 24 for b in s.boundaries.values())  # values probed (a retry is the same value's)
    assert s.product is not None and not s.product.verified and s.product.passes_at is None  # M alone decides
    assert s.product.calls == 0 and "act separately" in s.product.note
    mc = minimal_case(spec, ops, "C8", s.boundaries)
    assert mc.fails and mc.shape[0] == 129 and fails(spec, mc.ops, "C8")


@pytest.mark.parametrize("i", [0, 2, 4])  # N = 257 (bias, bf16), 520 (no bias, fp32), 383 (bias, fp16)
def test_wide_n_tail_tile_dropped_fails_past_n_256(i):
    # N > 256 drops the partial last 128-wide tile: a multiple of 128 above 256 passes again (periodic)
    spec, ops = _kernel("wide_n_tail_tile_dropped"), wide_n_case(i)
    s = find_boundaries(spec, ops, "C8")
    b = s.boundaries["n"]
    assert (b.passes_at, b.fails_at) == (256, 257) and b.upper_passes_at is None
    assert all(f == (v > 256 and v % 128 != 0) for v, f in b.points), b.points  # every probe as the code says
    assert b.monotone == all(v <= 256 or v % 128 for v, _ in b.points)
    assert _failing_flips(s) == set()  # any dtype, bias, layout, scale form
    assert minimal_case(spec, ops, "C8", s.boundaries).shape[2] == 257


def test_bias_cache_wraps_fails_past_n_256_only_with_a_bias():
    spec, ops = _kernel("bias_cache_wraps"), wide_n_case(1)  # N = 300, bias, fp16
    s = find_boundaries(spec, ops, "C8")
    assert _pair(s.boundaries["n"]) == (256, 257, True)
    assert _failing_flips(s) == {("bias", "absent")}
    d = json.loads(json.dumps(s.to_dict()))
    assert d["check"] == "C8" and d["boundaries"]["n"]["exact"] and d["calls"] == s.calls
    assert {"attribute": "bias", "value": "absent", "fails": False, "from": "present"} in d["flips"]


def test_splitk_order_past_mnk_2_20_has_a_product_boundary():
    # M * N * K > 2^20 at M,K,N 129,768,24: M 56/57 (N*K = 18,432), N 10/11, K 338/339 (cropping K keeps the
    # ties of columns 0..9); the product verified at N = 48: M 28 (1,032,192) passes, M 29 (1,069,056) fails
    spec, ops = _kernel("splitk_order_past_mnk_2_20"), prefill_case(129, BF)
    s = find_boundaries(spec, ops, "C8", categorical=False)
    assert [_pair(s.boundaries[d]) for d in "mnk"] == [(56, 57, True), (10, 11, True), (338, 339, True)]
    p = s.product
    assert (p.passes_at, p.fails_at, p.verified, p.calls) == (129 * 24 * 338, 129 * 24 * 339, True, 2)
    assert p.passes_at <= SPLITK_MACS < p.fails_at
    assert p.probes == ((28, 768, 48, False), (29, 768, 48, True))
    assert s.calls == 1 + sum(b.calls for b in s.boundaries.values()) + 2  # the differing lines, the product
    d = json.loads(json.dumps(s.to_dict()))["product"]
    assert d["verified"] and d["probes"][1] == [29, 768, 48, True] and d["note"] == ""


def test_tiles_past_mn_2_11_has_an_output_size_product_boundary():
    # M * N > 2^11 at M,K,N 129,768,24 whatever K: M 85/86 (85 * 24 = 2040, 86 * 24 = 2064), N 15/16 (129 * 15 =
    # 1935, 129 * 16 = 2064); cropping K below 18 loses the planted ties (values-limited), so M*N*K's probes
    # disagree and M*N is the product verified, at N = 48: M 42 (2016) passes, M 43 (2064) fails
    spec, ops = _kernel("tiles_past_mn_2_11"), prefill_case(129, BF)
    s = find_boundaries(spec, ops, "C8", categorical=False)
    assert [_pair(s.boundaries[d]) for d in "mn"] == [(85, 86, True), (15, 16, True)]
    assert s.boundaries["k"].blind and s.boundaries["k"].fails_at == 18
    p = s.product
    assert (p.passes_at, p.fails_at, p.verified, p.calls, p.label) == (2040, 2064, True, 2, "M*N")
    assert p.passes_at <= TILED_OUTPUTS < p.fails_at
    assert p.probes == ((42, 768, 48, False), (43, 768, 48, True))
    d = json.loads(json.dumps(s.to_dict()))
    line = triage_summary(
        {"C8": {"case": "x", "shape": d["shape"], "boundaries": d["boundaries"], "product": d["product"]}}
    )[0]
    assert line.endswith("K passes at 17 (values-limited), fails at 18; M*N passes at 2040, fails at 2064"), line


def test_a_dimension_failing_at_every_probe_names_the_values_probed_and_a_budget_stop():
    # the helper's bias-folding triage read "N fails at every probe" after 4 calls that stopped at 512
    stopped = {"passes_at": None, "fails_at": 512, "monotone": True, "calls": 4, "points": [[512, True], [2049, True]]}
    floor = dict(stopped, points=[[1, True], [64, True], [8192, True]])
    rec = {"case": "x", "shape": [3, 32, 2049], "boundaries": {"n": stopped, "k": floor}}
    line = triage_summary({"C5": rec})[0]
    assert (
        "N fails at every probe (512 to 2049; its calls ran out before 1); K fails at every probe (1 to 8192)" in line
    )


def test_order_past_m_4096_fails_past_m_4096():
    # issue 27: the long-prefill configuration; the tie rows of the prefill case tiled to M = 4097
    spec = _kernel("order_past_m_4096")
    ops = at_shape(prefill_case(129, BF), m=4097)
    s = find_boundaries(spec, ops, "C8", dims=("m",), categorical=False)
    assert _pair(s.boundaries["m"]) == (4096, 4097, True) and s.boundaries["m"].calls <= 24


def test_fused_for_fp16_fails_past_m_64_only_in_fp16():
    # issue 27's out-dtype-gated kernel: float16 output and M > 64 fuse the scales
    spec, ops = _kernel("fused_for_fp16"), planted_case(100, 32, 16, FP16, "real")
    s = find_boundaries(spec, ops, "C8")
    assert _pair(s.boundaries["m"]) == (64, 65, True)
    assert {("out_dtype", "bf16"), ("out_dtype", "fp32")} <= _failing_flips(s)


def test_splitk_fused_epilogue_fails_at_m_16_and_below_from_k_4096():
    # the failing side lies below M = 17: the search goes up; K extended with zeros keeps every accumulator
    spec = _kernel("splitk_fused_epilogue")
    ops = at_shape(prefill_case(129, BF), m=8, k=4100)
    s = find_boundaries(spec, ops, "C8", categorical=False)
    assert _pair(s.boundaries["m"]) == (17, 16, True) and not s.boundaries["m"].fails_above
    assert _pair(s.boundaries["k"]) == (4095, 4096, True)
    mc = minimal_case(spec, ops, "C8", s.boundaries)
    assert mc.fails and mc.shape[:2] == [1, 4096]


@declare(contract="cutlass", name="fails_at_m_200_and_400")
def _nonmonotone(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Right (w_then_a) except at M = 200 and 400, which multiply by s_a first."""
    order = "a_then_w" if a.shape[0] in (200, 400) else "w_then_a"
    return emulate(exact_acc32(a, b), scale_a, scale_b, order, "fp32_before_round", bias, out_dtype)


def test_a_non_monotone_failure_is_reported_as_points():
    spec = spec_from_object(_nonmonotone, "fails_at_m_200_and_400", "test")
    ops = at_shape(prefill_case(129, BF), m=400)
    s = find_boundaries(spec, ops, "C8", dims=("m",), categorical=False)
    b = s.boundaries["m"]
    assert not b.monotone and not b.exact
    points = dict(b.points)
    assert points[400] and points[200] and not points[300] and not points[199]
    assert [v for v, f in b.points if f] == [200, 400]


def test_a_raising_kernel_counts_as_failing():
    @declare(contract="cutlass", name="raises_past_m_20")
    def raises(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        if a.shape[0] > 20:
            raise RuntimeError("no config for this M")
        return emulate(exact_acc32(a, b), scale_a, scale_b, "w_then_a", "fp32_before_round", bias, out_dtype)

    spec = spec_from_object(raises, "raises_past_m_20", "test")
    s = find_boundaries(spec, planted_case(40, 16, 8, BF), "C8", dims=("m",), categorical=False)
    assert _pair(s.boundaries["m"]) == (20, 21, True)


FORMS = (
    {"a": "padded", "b": "transposed", "scale_a": "column", "scale_b": "0d", "bias": "strided"},
    {"a": "dense", "b": "padded", "scale_a": "0d", "scale_b": "one", "bias": "contiguous"},
    {"a": "padded", "b": "transposed_padded", "scale_a": "strided", "scale_b": "column"},
)


@pytest.mark.parametrize("forms", FORMS)
@pytest.mark.parametrize("shape", [(40, 33, 5), (5, 7, 40), (17, 16, 16)])
def test_at_shape_keeps_layout_scale_form_bias_and_dtype(forms, shape):
    bias = forms.get("bias", "none") != "none"
    base = planted_case(17, 16, 16, FP16, "real", bias, scale_a_tensor=True, scale_b_tensor=True)
    ops = with_forms(base, forms, generator("test", "triage", 0))
    m, k, n = shape
    r = at_shape(ops, m=m, n=n, k=k)
    assert (r.m, r.k, r.n) == (m, k, n)
    assert operand_forms(r) == operand_forms(ops) and r.layouts() == ops.layouts()
    assert r.scale_a.dim() == ops.scale_a.dim() and r.scale_b.dim() == ops.scale_b.dim()
    assert r.out_dtype == FP16 and (r.bias is None) == (ops.bias is None)
    assert r.bias is None or (r.bias.dtype == FP16 and r.bias.shape == (n,))
    assert r.scale_mode == ops.scale_mode and r.meta[META_KEY] == {"from_shape": [17, 16, 16], "shape": [m, k, n]}
    # the planted values stay: rows tiled, columns cropped or zero-extended
    mm, kk = min(m, 17), min(k, 16)
    assert torch.equal(r.a[:mm, :kk], ops.a[:mm, :kk]) and torch.equal(r.b[: min(n, 16), :kk], ops.b[: min(n, 16), :kk])
    if m > 17:
        assert torch.equal(r.a[17:34, :kk], ops.a[: min(17, m - 17), :kk])
    if k > 16:
        assert not r.a[:, 16:].any()
    again = at_shape(ops, m=m, n=n, k=k)
    assert r.digests() == again.digests()


def test_at_shape_keeps_the_layouts_family_forms_and_tiles_k_on_request():
    for v in ("a_padded", "b_transposed", "b_padded", "scales_strided", "all"):
        ops = layout_case(v, "real", BF, (17, 16, 16))
        r = at_shape(ops, m=40, n=7, k=33, k_fill="tile")
        assert r.layouts() == ops.layouts(), v
        assert torch.equal(r.a[:17, 16:32], ops.a)
    with pytest.raises(ValueError):
        at_shape(ops, m=0)


def test_flips_change_one_attribute_each():
    ops = layout_case("all", "real", BF, (17, 16, 16))
    got = {(attr, value): v for attr, value, v in flips(ops)}
    assert set(got) == {
        ("out_dtype", "fp16"),
        ("out_dtype", "fp32"),
        ("bias", "absent"),
        ("layout:a", "dense"),
        ("layout:b", "dense"),
        ("layout:b", "padded"),
        ("scale_form:scale_a", "scalar"),
        ("scale_form:scale_b", "scalar"),
        ("scale_form:scale_b", "vector"),  # its [N, 1] strided column as a dense [N]
        ("magnitude:scale_a", "pow2"),
        ("magnitude:scale_a", "subnormal"),
        ("magnitude:scale_b", "pow2"),
        ("magnitude:scale_b", "subnormal"),
        ("strides", "contiguous"),  # a padded, b transposed-padded, scale_b a strided column: all at once
    }
    joint = got[("strides", "contiguous")]
    assert {k: operand_forms(joint)[k] for k in ("a", "b", "scale_b")} == {
        "a": "dense",
        "b": "transposed",
        "scale_b": "column",
    }
    sub = got[("magnitude:scale_b", "subnormal")]
    assert sub.layouts() == ops.layouts() and scale_class(sub.scale_b) == "subnormal"
    assert torch.equal(sub.scale_a, ops.scale_a) and tensor_digest(sub.a) == tensor_digest(ops.a)
    f = got[("out_dtype", "fp32")]
    assert f.out_dtype == FP32 and f.bias.dtype == FP32 and f.layouts() == ops.layouts()
    assert tensor_digest(f.a) == tensor_digest(ops.a)
    assert got[("layout:b", "dense")].layouts()["b"] == "dense"
    assert got[("scale_form:scale_a", "scalar")].scale_a.dim() == 0
    vec = got[("scale_form:scale_b", "vector")].scale_b
    assert vec.dim() == 1 and torch.equal(vec, ops.scale_b.reshape(-1))


def _pair_case() -> tuple:
    """M,K,N 16,64,16 of small nonzero values in [-8, 8]; a[5, 16:18] = b[9, 16:18] = -128: the one int16 pair
    that saturates (32768) is acc[5, 9]'s. a padded, b transposed-padded."""
    g = torch.Generator().manual_seed(43)
    a, b = (
        torch.randint(1, 9, (16, 64), generator=g) * torch.where(torch.rand(16, 64, generator=g) < 0.5, -1, 1)
        for _ in range(2)
    )
    a[5, 16:18], b[9, 16:18] = -128, -128
    base = planted_case(16, 64, 16, BF, "real")
    ops = dataclasses.replace(base, a=a.to(torch.int8), b=b.to(torch.int8), bias=None, meta={})
    return ops, with_forms(ops, {"a": "padded", "b": "transposed_padded"}, generator("test", "pair", 0))


def test_minimal_case_keeps_the_one_saturating_pair_and_zeroes_the_rest():
    # C3 of pair_saturation_int16: one differing element (5, 9); its row and column re-planted fail at every M and
    # N (the pair is the bug, not the shape; N stops at 2: a transposed padded b needs N > 1), K 17/18 (the pair's
    # columns 16, 17 cropped away); the minimal case 1,18,2 (row 5 / column 9 tiled) has 18 / 36 nonzero, halving
    # K's columns keeps 16 and 17: the four -128 alone (b's second row zeroed with the others)
    spec, (_, ops) = _kernel("pair_saturation_int16"), _pair_case()
    s = find_boundaries(spec, ops, "C3", categorical=False)
    assert [_pair(s.boundaries[d]) for d in "mnk"] == [(None, 1, True), (None, 2, True), (17, 18, True)]
    assert [s.boundaries[d].form_floor for d in "mnk"] == [None, 1, None]
    assert (s.lines.rows.tolist(), s.lines.cols.tolist(), s.lines.n) == ([5], [9], 1)
    assert s.boundaries["m"].replanted and s.boundaries["n"].replanted
    assert not s.product.verified and s.product.passes_at is None  # M has no passing value
    mc = minimal_case(spec, ops, "C3", s.boundaries, lines=s.lines)
    assert mc.shape == [1, 18, 2] and mc.fails and fails(spec, mc.ops, "C3")
    assert mc.nonzero == {"a": (18, 2), "b": (36, 2)}
    assert operand_forms(mc.ops) == operand_forms(ops)  # zeroed through the padded / transposed-padded views
    assert mc.ops.a.nonzero().tolist() == [[0, 16], [0, 17]] and mc.ops.b.nonzero().tolist() == [[0, 16], [0, 17]]
    assert int(mc.ops.a[0, 16]) == int(mc.ops.b[0, 17]) == -128
    assert nonzero_count(mc.ops.a) == 2 and mc.ops.meta[META_KEY]["nonzero"] == {"a": [18, 2], "b": [36, 2]}
    cropped = minimal_case(spec, ops, "C3", s.boundaries, zero_budget=0)  # without the lines only K shrinks
    assert cropped.shape == [ops.m, 18, ops.n] and cropped.fails and cropped.nonzero == {}


def test_scale_classes_and_their_flips():
    s = torch.tensor([1.5 * 2.0**-136, 0.3, 0.0, -(2.0**-140)])
    assert scale_class(s) == "subnormal"
    assert to_scale_class(s, "typical").tolist() == [1.5 * 2.0**-6, pytest.approx(0.3), 0.0, -(2.0**-10)]
    assert to_scale_class(s, "pow2").tolist() == [2.0**-5, 0.25, 0.0, -(2.0**-10)]
    assert scale_class(to_scale_class(s, "pow2")) == "pow2"
    assert to_scale_class(torch.tensor(0.25), "subnormal").item() == 2.0**-132
    assert to_scale_class(torch.tensor([0.25, 2.0]), "typical").tolist() == [0.375, 3.0]
    assert scale_class(torch.zeros(3)) == "typical"
    with pytest.raises(ValueError):
        to_scale_class(s, "huge")


def test_decode_subnormal_token_scale_ftz_needs_a_subnormal_scale_a():
    # the decode path (M <= 16) flushes a float32-subnormal s_a: s_a moved to a normal class (typical, pow2) passes,
    # the case's own class (subnormal) fails, and s_w's class does not matter (pow2 still fails)
    spec = _kernel("decode_subnormal_token_scale_ftz")
    ops = planted_case(16, 32, 16, BF, "real", magnitude="subnormal")
    assert scale_class(ops.scale_a) == "subnormal" and fails(spec, ops, "C8")
    s = find_boundaries(spec, ops, "C8", dims=())
    mag = {(f.attribute, f.value): (f.was, f.fails) for f in s.flips if f.attribute.startswith("magnitude:")}
    assert mag[("magnitude:scale_a", "typical")] == ("subnormal", False)
    assert mag[("magnitude:scale_a", "pow2")] == ("subnormal", False)
    assert mag[("magnitude:scale_b", "pow2")] == ("typical", True)
    variants = {(attr, v): o for attr, v, o in flips(ops)}
    moved = variants[("magnitude:scale_a", "typical")]
    assert scale_class(moved.scale_a) == "typical" and operand_forms(moved) == operand_forms(ops)


def test_report_renders_the_product_the_nonzero_counts_and_a_flips_own_value():
    product = {"passes_at": 1046448, "fails_at": 1049544, "verified": True, "calls": 2, "note": ""}
    product["probes"] = [[28, 768, 48, False], [29, 768, 48, True]]
    rec = {
        "case": "x",
        "shape": [129, 768, 24],
        "boundaries": {},
        "product": product,
        "flips": [{"attribute": "magnitude:scale_a", "value": "typical", "fails": False, "from": "subnormal"}],
        "minimal": {"shape": [57, 768, 24], "fails": True, "calls": 20, "nonzero": {"a": [43724, 32], "b": [768, 32]}},
        "calls": 50,
    }
    doc = {"checks": [{"check_id": "C8", "name": "declared_contract"}], "triage": {"C8": rec}}
    text = "\n".join(triage_lines(doc))
    assert any(line.replace(" ", "") == "|M*N*K|1046448|1049544|2|" for line in text.splitlines())
    assert "M,K,N 29,768,48 fails" in text and "`magnitude:scale_a subnormal -> typical`" in text
    assert "`a` 43724 -> 32, `b` 768 -> 32" in text
    line = triage_summary({"C8": rec})[0]
    assert "M*N*K passes at 1046448, fails at 1049544" in line and "magnitude:scale_a subnormal -> typical" in line
    rec["product"] = {"verified": False, "note": "the dimensions act separately (N: no passing value)"}
    assert "Products of M, N, K: the dimensions act separately (N: no passing value)." in "\n".join(triage_lines(doc))


@pytest.mark.parametrize(("kernel", "period"), [("k_padded_with_ones", 16), ("k_tail_dropped", 32)])
def test_a_k_alignment_bug_is_reported_as_its_period_not_a_threshold(kernel, period):
    """A kernel wrong wherever K % period != 0 passes at a K between failing ones: the search names the period
    (both neighbours of the passing K fail, K +- period pass), not the threshold a bisection would pin."""
    spec = _kernel(kernel)
    ops = planted_case(4, 131, 16, BF)
    assert fails(spec, ops, "C8")
    s = find_boundaries(spec, ops, "C8", dims=("k",), categorical=False)
    b = s.boundaries["k"]
    assert b.period == period and not b.monotone and b.passes_at % period == 0
    points = dict(b.points)
    p = b.passes_at
    assert points[p - 1] and points[p + 1] and not points[p + period]
    assert all(f == (v % period != 0) for v, f in b.points)  # every probe agrees with the alignment
    t = {"C8": {"case": "k131", **json.loads(json.dumps(s.to_dict()))}}
    want = f"where C8 lives (case k131): K passes only at multiples of {period}, fails at {b.fails_at}"
    assert abs(b.fails_at - p) == 1 and triage_summary(t) == [want]
    row = [r for r in triage_lines({"triage": t}) if "multiples of" in r]
    assert row and f"multiples of {period} only" in row[0]


def test_a_bug_read_through_either_strided_scale_passes_only_the_joint_strides_flip():
    """Both scales read as if contiguous (their storage from offset 0): a case with both strided fails every single
    flip (each leaves the other scale strided) and passes ``strides -> contiguous``, both made contiguous at once."""

    @declare(contract="cutlass", name="scales_read_unstrided")
    def scales_read_unstrided(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        def flat(s):
            return s if s.dim() == 0 else torch.as_strided(s, (s.numel(),), (1,)).reshape(s.shape)

        return emulate(
            exact_acc32(a, b), flat(scale_a), flat(scale_b), "w_then_a", "fp32_before_round", bias, out_dtype
        )

    spec = spec_from_object(scales_read_unstrided, "scales_read_unstrided", "test")
    g = generator("test", "strided-scales", 0)
    ops = with_forms(layout_case("all", "real", BF, (33, 130, 65)), {"scale_a": "strided", "scale_b": "strided"}, g)
    forms = operand_forms(ops)
    assert {forms["scale_a"], forms["scale_b"]} <= {"strided", "column_strided"} and fails(spec, ops, "C8")
    s = find_boundaries(spec, ops, "C8")
    passing = [(f.attribute, f.value) for f in s.flips if not f.fails]
    assert ("strides", "contiguous") in passing
    assert not [p for p in passing if p[0].startswith(("scale_form", "layout"))]  # no single operand's flip
