"""Trigger-condition families (conformance.cases.families): every family
reaches its trigger, is deterministic, and one hand-made case per family has
its exact output bits pinned (derived by hand in the comments)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conformance.cases.families import FAMILIES, family_cases
from conformance.cases.reach import partial_sum_extremes
from conformance.kernels.registry import get_kernel
from conformance.suite.coverage import case_coverage
from conformance.suite.evaluate import evaluate_case
from reference.bits import bits_of
from reference.contract import CUTLASS_STYLE, TRITON_STYLE, EpilogueContract
from reference.epilogue import reference_scaled_mm
from reference.operands import GemmOperands

I8 = torch.int8
BF, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
BITS = {BF: (torch.int16, 0xFFFF), FP16: (torch.int16, 0xFFFF), FP32: (torch.int32, 0xFFFFFFFF)}


def bits(t: torch.Tensor) -> list[int]:
    it, mask = BITS[t.dtype]
    return [int(v) & mask for v in t.reshape(-1).view(it)]


def out(a, b, sa, sb, dtype=BF, contract=CUTLASS_STYLE, bias=None, kernel=None):
    """Reference bits, and (when ``kernel``) the built-in's bits on the same operands."""
    a, b = torch.as_tensor(a, dtype=I8), torch.as_tensor(b, dtype=I8)
    sa, sb = torch.tensor(sa, dtype=FP32), torch.tensor(sb, dtype=FP32)
    ref = bits(reference_scaled_mm(a, b, sa, sb, contract, bias=bias, out_dtype=dtype))
    if kernel is None:
        return ref
    got = bits(get_kernel(kernel).scaled_mm(a, b, sa, sb, out_dtype=dtype, bias=bias))
    return ref, got


@pytest.fixture(scope="module")
def fams() -> dict:
    cases = family_cases()
    by: dict = {}
    for c in cases:
        by.setdefault(c.meta["family"], []).append(c)
    return by


#: Families whose coverage the trigger test measures (the others are checked
#: from their shapes / tie counts directly, which is cheaper).
MEASURED = (
    "partial_sums",
    "large_acc",
    "int32_overflow",
    "subnormal",
    "overflow_inf",
    "signed_zero",
    "negative_scales",
    "zero_scales",
    "bias_cancel",
    "extreme_pairs",
    "layouts",
)


@pytest.fixture(scope="module")
def covs(fams) -> dict:
    cpu = get_kernel("cpu")
    return {f: [case_coverage(cpu, c) for c in fams[f]] for f in MEASURED}


def _marker_cases() -> list:
    return [
        GemmOperands(
            torch.ones((1, 1), dtype=I8), torch.ones((1, 1), dtype=I8), torch.ones(1), torch.ones(1), name="marker"
        )
    ]


def test_families_are_in_the_default_suite_and_deterministic(fams, monkeypatch):
    import conformance.cases.families as fam_mod
    from conformance.suite.run import default_cases

    monkeypatch.setenv("INT8CONF_CASE_CACHE", "0")  # build: the patched families, not a cached list
    monkeypatch.setattr(fam_mod, "family_builders", lambda: [_marker_cases])  # module level: built in a fork too
    cases, _ = default_cases(include_captures=False)
    assert cases[-1].name == "marker" and sum(c.name == "marker" for c in cases) == 1  # after synthetic + tile_edges
    cases, _ = default_cases(include_captures=False, include_tile_edges=False)
    assert all(c.name != "marker" for c in cases)  # --no-tile-edges skips them
    monkeypatch.undo()
    assert set(fams) == set(FAMILIES)
    counts = {f: len(cs) for f, cs in fams.items()}
    assert counts == {
        "partial_sums": 12,
        "large_acc": 6,
        "int32_overflow": 2,
        "subnormal": 6,
        "subnormal_scales": 12,
        "overflow_inf": 6,
        "signed_zero": 6,
        "negative_scales": 6,
        "zero_scales": 6,
        "bias_cancel": 6,
        "extreme_pairs": 6,
        "k_residues": 135,
        "m_n_edges": 17,
        "ties": 25,
        "layouts": 10,
        "large_shapes": 17,
        "dispatch": 36,
        "regimes": 204,
        "covering": 181,
    }
    assert len({c.name for cs in fams.values() for c in cs}) == 699
    again = family_cases(["partial_sums", "layouts"])
    assert [c.digests() for c in again] == [c.digests() for c in fams["partial_sums"] + fams["layouts"]]
    assert family_cases(["subnormal"], seed=1)[0].digests() != fams["subnormal"][0].digests()
    # both scale modes and all three output dtypes wherever the grid applies
    for f in (
        "partial_sums",
        "large_acc",
        "subnormal",
        "subnormal_scales",
        "overflow_inf",
        "signed_zero",
        "negative_scales",
        "zero_scales",
        "bias_cancel",
        "extreme_pairs",
    ):
        grid = {(c.scale_mode, c.out_dtype) for c in fams[f]}
        assert grid == {(m, d) for m in ("synthetic", "pow2") for d in (BF, FP16, FP32)}, f
    with pytest.raises(ValueError, match="unknown case families"):
        family_cases(["nope"])


def test_each_family_reaches_its_trigger(fams, covs):
    from conformance.cases import tie_discrimination

    for cv in covs["partial_sums"]:
        assert min(cv["max_partial_fwd"], cv["max_partial_bwd"]) >= 2**24
        assert cv["max_abs_acc"] < 600 and cv["partial_step"] == 1
    assert all(cv["n_acc_ge_2_24"] == 32 for cv in covs["large_acc"])
    assert [(cv["n_acc_gt_int32"], cv["max_abs_acc"]) for cv in covs["int32_overflow"]] == [
        (1, 131073 * 16384),
        (4, 132110 * 16384),
    ]  # the second in both directions
    assert all(cv["out"]["subnormal"] >= 10 for cv in covs["subnormal"])
    assert all(cv["out"]["pos_inf"] >= 2 and cv["out"]["neg_inf"] >= 2 for cv in covs["overflow_inf"])
    assert all(cv["out"]["neg_zero"] > 0 and cv["out"]["pos_zero"] > 0 for cv in covs["signed_zero"])
    assert all(cv["neg_scale_a"] and cv["neg_scale_b"] for cv in covs["negative_scales"])
    assert all(cv["zero_scale_a"] and cv["zero_rows_a"] == 2 for cv in covs["zero_scales"])
    assert all(cv["bias_cancel"] >= 16 for cv in covs["bias_cancel"])
    assert all(cv["pair_alignments"] == list(range(32)) for cv in covs["extreme_pairs"])
    assert all(cv["max_abs_acc"] < 200 for cv in covs["extreme_pairs"])
    ks = {c.k for c in fams["k_residues"]}
    assert {k % 128 for k in ks} == set(range(128)) and set(range(1, 8)) <= ks
    shapes = {(c.m, c.k, c.n) for c in fams["m_n_edges"]}
    assert (17, 16, 16) in shapes and {s[0] for s in shapes} == set(range(1, 18))
    tie_m = {c.m for c in fams["ties"] if tie_discrimination(c)["a_then_w!=w_then_a"] > 0}
    assert set(range(1, 18)) | {64, 96} <= tie_m
    # dispatch: the tie accumulators reach every path threshold unchanged
    from reference.accumulate import exact_int_mm

    disp = {c.meta["variant"].split("-")[0]: [] for c in fams["dispatch"]}
    for c in fams["dispatch"]:
        disp[c.meta["variant"].split("-")[0]].append(c)
    assert {k: len(v) for k, v in disp.items()} == {
        "m_gap": 15,
        "small_acc": 4,
        "bias0": 2,
        "negative": 1,
        "scalar": 2,
        "big_acc": 2,
        "fp32_ties": 3,
        "deep_k_bias": 7,
    }
    assert all(
        tie_discrimination(c)["a_then_w!=w_then_a"] > 0 for v, cs in disp.items() if v != "deep_k_bias" for c in cs
    )
    assert {c.k for c in disp["deep_k_bias"]} == {2048, 4096, 8195}
    assert {c.m for c in disp["m_gap"]} == {18, 24, 31, 40, 48, 56, 63, 65, 72, 80, 100, 112, 127}
    assert all(int(exact_int_mm(c.a, c.b).abs().max()) < 2**16 for c in disp["small_acc"])
    assert all(int(exact_int_mm(c.a, c.b).abs().max()) > 2**19 for c in disp["big_acc"])
    assert all(c.bias is not None and not c.bias.any() for c in disp["bias0"])
    assert all((c.scale_a < 0).any() and (c.scale_b < 0).any() for c in disp["negative"])
    assert all(c.scale_a.dim() == c.scale_b.dim() == 0 for c in disp["scalar"])
    assert {c.scale_mode for c in disp["deep_k_bias"]} == {"synthetic", "pow2"}
    lay = [cv["layouts"] for cv in covs["layouts"]]
    assert sum(x["a"] == "row-major padded" for x in lay) == 4
    assert sum(x["b"] == "column-major" for x in lay) == 4
    assert sum(x["b"] == "row-major padded" for x in lay) == 2
    assert sum(x["scale_a"] == "strided" and x["bias"] == "strided" for x in lay) == 4


def test_partial_sum_extremes_by_hand():
    # a = [127]*1100 + [-127]*1100 + [3], b = [127]*2200 + [1]: acc = 3;
    # forward the prefix peaks at 1100 * 16129 = 17741900 > 2**24,
    # backward (from k = K-1) at |3 - 17741900| = 17741897
    a = torch.tensor([[127] * 1100 + [-127] * 1100 + [3]], dtype=I8)
    b = torch.tensor([[127] * 2200 + [1]], dtype=I8)
    fwd, bwd, step = partial_sum_extremes(a, b)
    assert (int(fwd), int(bwd), step) == (17741900, 17741897, 1)
    # sampled every g products when over budget: a lower bound, here every 2nd k
    fwd2, _, step2 = partial_sum_extremes(a, b, budget=1200)
    assert step2 == 2 and int(fwd2) == 17741900
    # and the pinned output: 3 * 1.0 * 0.25 = 0.75 = 1.5 * 2**-1
    # bf16 0 01111110 1000000 = 0x3F40, fp16 0 01110 1000000000 = 0x3A00
    assert out(a, b, [1.0], [0.25], BF, kernel="cpu") == ([0x3F40], [0x3F40])
    assert out(a, b, [1.0], [0.25], FP16) == [0x3A00]
    assert out(a, b, [1.0], [0.25], FP32) == [0x3F400000]


def test_partial_sum_extremes_in_float32_below_2_24_match_int64_prefix_sums():
    """Below 2**24 in every order the partial sums are taken in float32: the extremes equal int64 prefix sums,
    at K = 1023 (1023 * 128**2 < 2**24: float32 by K alone) and at K = 4096 with small b (by the row-sum bound)."""
    g = torch.Generator().manual_seed(3)
    for k, b_hi in ((1023, 128), (4096, 8)):
        a = torch.randint(-128, 128, (5, k), generator=g, dtype=I8)
        b = torch.randint(-b_hi, b_hi, (6, k), generator=g, dtype=I8)
        prefix = torch.cumsum(a.to(torch.int64)[:, None, :] * b.to(torch.int64)[None, :, :], dim=2)  # [M, N, K]
        total = prefix[:, :, -1:]
        want_fwd = prefix.abs().amax(2)
        want_bwd = torch.cat([total, total - prefix[:, :, :-1]], dim=2).abs().amax(2)  # suffixes from k = K-1
        fwd, bwd, step = partial_sum_extremes(a, b)
        assert step == 1 and torch.equal(fwd, want_fwd) and torch.equal(bwd, want_bwd)


def test_large_acc_rounds_half_to_even_by_hand():
    # acc = 1041 * 16129 = 16790289 = 2**24 + 13073, odd: float32 spacing is 2 there,
    # a tie between 16790288 (significand field 6536, even) and 16790290 (6537):
    # RNE -> 16790288 -> bits (151 << 23) | 6536 = 0x4B801988
    a = torch.full((1, 1041), 127, dtype=I8)
    assert out(a, a, [1.0], [1.0], FP32, kernel="int_mm") == ([0x4B801988], [0x4B801988])


def test_int32_overflow_wraps_by_hand():
    # acc = 131073 * 16384 = 2**31 + 16384; int32 wraps to -(2**31 - 16384) =
    # -2**14 * (2**17 - 1): exponent 30 (field 157), significand field
    # 2**23 - 2**7 = 0x7FFF80 -> 0xCEFFFF80
    a = torch.full((1, 131073), -128, dtype=I8)
    cpu = get_kernel("cpu")
    assert int(cpu.int_mm(a, a)[0, 0]) == -2147467264
    got = cpu.scaled_mm(a, a, torch.tensor([1.0]), torch.tensor([1.0]), out_dtype=FP32)
    assert bits(got) == [0xCEFFFF80]


def test_subnormal_outputs_by_hand():
    # 3 * 2**-130 = 24 * 2**-133: bf16 subnormal significand 24 -> 0x0018;
    # float32: 3 * 2**19 units of 2**-149 -> 0x00180000;
    # 3 * 2**-135 = 0.75 * 2**-133 rounds up to the smallest bf16 subnormal 0x0001;
    # fp16: 3 * 2**-20 = 48 * 2**-24 -> 0x0030
    a = torch.tensor([[3]], dtype=I8)
    one = torch.ones((1, 1), dtype=I8)
    assert out(a, one, [2.0**-130], [1.0], BF, kernel="cpu") == ([0x0018], [0x0018])
    assert out(a, one, [2.0**-130], [1.0], FP32, kernel="int_mm") == ([0x00180000], [0x00180000])
    assert out(a, one, [2.0**-135], [1.0], BF) == [0x0001]
    assert out(a, one, [2.0**-20], [1.0], FP16) == [0x0030]


def test_overflow_boundary_by_hand():
    # bf16: 511 * 2**119 lies halfway between the largest bf16 255 * 2**120 (0x7F7F)
    # and 2**128; RNE picks the even significand: +inf 0x7F80; 510 * 2**119 = 0x7F7F
    one = torch.ones((1, 1), dtype=I8)
    acc = lambda v: torch.tensor([[v]], dtype=torch.int64)  # noqa: E731
    from conformance.cases import realize_acc

    a, b = realize_acc(torch.tensor([[511, 510, -511]]))
    assert out(a, b, [1.0], [2.0**119] * 3, BF, kernel="cpu") == ([0x7F80, 0x7F7F, 0xFF80], [0x7F80, 0x7F7F, 0xFF80])
    # fp16: 4095 * 16 = 65520, halfway between 65504 (0x7BFF) and 65536: -> inf 0x7C00
    a, b = realize_acc(torch.tensor([[4095, 4094]]))
    assert out(a, b, [1.0], [16.0, 16.0], FP16) == [0x7C00, 0x7BFF]
    assert out(one, one, [2.0**127], [2.0], FP32) == [0x7F800000]
    assert acc(1).dtype == torch.int64


def test_signed_zero_negative_and_zero_scales_by_hand():
    zero = torch.zeros((1, 4), dtype=I8)
    b = torch.ones((2, 4), dtype=I8)
    # acc = 0: 0 * (-1) * 1 = -0 (0x8000), 0 * (-1) * (-1) = +0; bias -0.0 keeps -0
    assert out(zero, b, [-1.0], [1.0, -1.0], BF, kernel="cpu") == ([0x8000, 0x0000], [0x8000, 0x0000])
    mz = torch.tensor([-0.0, -0.0], dtype=BF)
    assert out(zero, b, [-1.0], [1.0, -1.0], BF, bias=mz) == [0x8000, 0x0000]
    # negative scales: acc = 4, 4 * (-0.5) * 0.25 = -0.5 -> 0xBF00
    assert out(torch.ones((1, 4), dtype=I8), b[:1], [-0.5], [0.25], BF, kernel="int_mm") == ([0xBF00], [0xBF00])
    # zero scales: acc = 4 with s_a = -0.0 -> -0 (0x8000); the all-zero row with
    # scale 0 and bias 0.5 -> 0.5 (0x3F00)
    a = torch.cat([torch.ones((1, 4), dtype=I8), zero])
    assert out(a, b[:1], [-0.0, 0.0], [1.0], BF, kernel="cpu") == ([0x8000, 0x0000], [0x8000, 0x0000])
    assert out(a, b[:1], [-0.0, 0.0], [1.0], BF, bias=torch.tensor([0.5], dtype=BF)) == [0x3F00, 0x3F00]


def test_bias_cancellation_by_hand():
    # acc = 3, s_w = 1 + 2**-8: y = 3 + 3 * 2**-8, bias -3.
    # bias before the rounding: 3 * 2**-8 = 1.5 * 2**-7 -> bf16 0x3C40;
    # after (triton style): rnd(y) = 3 + 2**-6 (3 + 0.75 spacings rounds up), -3 ->
    # 2**-6 -> 0x3C80
    a, b = torch.tensor([[3]], dtype=I8), torch.ones((1, 1), dtype=I8)
    bias = torch.tensor([-3.0], dtype=BF)
    assert out(a, b, [1.0], [1 + 2**-8], BF, bias=bias, kernel="cpu") == ([0x3C40], [0x3C40])
    assert out(a, b, [1.0], [1 + 2**-8], BF, TRITON_STYLE, bias=bias) == [0x3C80]


def test_extreme_pair_cancellation_and_k_residue_by_hand():
    # (-128)(-128) * 2 = 32768 (one past int16), cancelled by 2 * (-128 * 127) and
    # -4 * 64: exact acc 0 -> +0; pairwise int16 saturation gives 32767 - 32768 = -1
    # -> bf16 -1.0 = 0xBF80
    from buggy_kernels import pair_saturation_int16

    a = torch.tensor([[-128, -128, -128, -128, -4]], dtype=I8)
    b = torch.tensor([[-128, -128, 127, 127, 64]], dtype=I8)
    assert out(a, b, [1.0], [1.0], BF, kernel="cpu") == ([0x0000], [0x0000])
    one = torch.ones(1)
    assert bits(pair_saturation_int16(a, b, one, one)) == [0xBF80]
    # K = 33 all ones: acc 33 = 1.03125 * 2**5 -> bf16 0x4204; a K loop over whole
    # 32-tiles sees 32 -> 0x4200
    from buggy_kernels import k_tail_dropped

    ones = torch.ones((1, 33), dtype=I8)
    assert out(ones, ones, [1.0], [1.0], BF, kernel="triton") == ([0x4204], [0x4204])
    assert bits(k_tail_dropped(ones, ones, one, one)) == [0x4200]


def test_m_n_edge_and_ties_by_hand():
    # (17, 16, 16) all ones: acc 16 everywhere -> bf16 0x4180 on all 272 elements
    ones_a, ones_b = torch.ones((17, 16), dtype=I8), torch.ones((16, 16), dtype=I8)
    ref, got = out(ones_a, ones_b, [1.0] * 17, [1.0] * 16, BF, kernel="triton")
    assert ref == got == [0x4180] * 272
    # the tie family at M = 1 tells the decode path's scale order apart (C8)
    from buggy_kernels import ORDER_SA_BITS, ORDER_SB_BITS, _f32, decode_path_order

    a = torch.tensor([[127, 127, 127, 127, 37]], dtype=I8)  # acc = 545
    b = torch.ones((1, 5), dtype=I8)
    sa, sb = [_f32(ORDER_SA_BITS)], [_f32(ORDER_SB_BITS)]
    assert out(a, b, sa, sb, BF) == [0x3C32]  # declared w_then_a
    assert bits(decode_path_order(a, b, torch.tensor(sa), torch.tensor(sb))) == [0x3C31]


def test_dispatch_spread_and_widen_by_hand():
    # the M = 1 tie above (acc 545, declared w_then_a -> 0x3C32, a_then_w -> 0x3C31) spread
    # over K = 4096: columns j -> j * 4096 // 5 = 0, 819, 1638, 2457, 3276, zeros in a elsewhere
    from buggy_kernels import ORDER_SA_BITS, ORDER_SB_BITS, _f32, deep_k_scale_order

    from conformance.cases.dispatch import spread_k, widen_n

    a = torch.tensor([[127, 127, 127, 127, 37]], dtype=I8)
    b = torch.ones((1, 5), dtype=I8)
    a2, b2 = spread_k(a, b, 4096, torch.Generator().manual_seed(0))
    assert a2.shape == (1, 4096) and b2.shape == (1, 4096)
    assert torch.nonzero(a2[0]).reshape(-1).tolist() == [0, 819, 1638, 2457, 3276]
    assert a2[0, [0, 819, 1638, 2457, 3276]].tolist() == [127, 127, 127, 127, 37]
    assert int((b2 != 0).sum()) > 4000  # real weights between them
    assert int(a2.long() @ b2.long().T) == 545
    sa, sb = [_f32(ORDER_SA_BITS)], [_f32(ORDER_SB_BITS)]
    assert out(a2, b2, sa, sb, BF) == [0x3C32]  # cutlass: w_then_a
    ref, got = out(a2, b2, sa, sb, BF, contract=TRITON_STYLE, kernel="triton")
    assert ref == got == [0x3C31]  # triton declares a_then_w: its K loop over 4096
    ta, tb = torch.tensor(sa), torch.tensor(sb)
    assert bits(deep_k_scale_order(a2, b2, ta, tb)) == [0x3C31]  # its K >= 2048 path
    assert bits(deep_k_scale_order(a, b, ta, tb)) == [0x3C32]  # below the threshold
    # widen_n: channel c is channel c % 3
    b3, sb3 = widen_n(torch.tensor([[1], [2], [3]], dtype=I8), torch.tensor([1.0, 2.0, 3.0]), 7)
    assert b3.reshape(-1).tolist() == [1, 2, 3, 1, 2, 3, 1] and sb3.tolist() == [1, 2, 3, 1, 2, 3, 1]


def test_layouts_by_hand():
    # a = buf[:, :2] of [[1, 2, 9], [3, 4, 9]] (padding 9), b = [[1, 1]]: acc = [3, 7]
    # -> bf16 3 = 0x4040, 7 = 0x40E0; read as dense the storage gives rows [1, 2],
    # [9, 3] -> 3, 12 (0x4140)
    from buggy_kernels import b_as_contiguous, ignores_lda

    buf = torch.tensor([[1, 2, 9], [3, 4, 9]], dtype=I8)
    a, b = buf[:, :2], torch.ones((1, 2), dtype=I8)
    assert a.stride() == (3, 1)
    one = torch.ones(2)
    for name in ("cpu", "int_mm", "triton"):
        assert out(a, b, [1.0, 1.0], [1.0], BF, kernel=name) == ([0x4040, 0x40E0],) * 2
    assert bits(ignores_lda(a, b, one, one[:1])) == [0x4040, 0x4140]
    # b = w.t() of w [K=2, N=2] = [[1, 2], [3, 4]]: b = [[1, 3], [2, 4]], a = [[1, 1]]:
    # acc = [4, 6] -> 0x4080, 0x40C0; read as dense b = [[1, 2], [3, 4]] -> [3, 7]
    w = torch.tensor([[1, 2], [3, 4]], dtype=I8)
    bt, a1 = w.t(), torch.ones((1, 2), dtype=I8)
    for name in ("cpu", "int_mm"):
        assert out(a1, bt, [1.0], [1.0, 1.0], BF, kernel=name) == ([0x4080, 0x40C0],) * 2
    assert bits(b_as_contiguous(a1, bt, one[:1], one)) == [0x4040, 0x40E0]
    # strided scales: a column of an [M, 2] buffer
    s = torch.tensor([[2.0, 5.0], [0.5, 5.0]])[:, 0]
    assert bits(get_kernel("cpu").scaled_mm(a, b, s, torch.ones(1))) == [0x40C0, 0x4060]


def test_fp32_real_cases_keep_c6_premise(fams):
    """Real-scale cases with float32 output use power-of-two token scales, so
    every legal scale order gives the same float32 bits; the float32 ties of
    ``dispatch`` keep real scales, and every order stays within one float32
    spacing of C6's reference (a_then_w) while differing from it everywhere."""
    from reference.accumulate import exact_int_mm
    from reference.epilogue import apply_epilogue

    n_ties = 0
    for cs in fams.values():
        for c in cs:
            if c.out_dtype != FP32 or c.scale_mode == "pow2" or c.k > 5000:
                continue
            acc = exact_int_mm(c.a, c.b)
            outs = [  # |x|'s float32 bits as int64 (tensor ops: the regime cases reach 2**25 elements)
                apply_epilogue(acc, c.scale_a, c.scale_b, EpilogueContract(o), out_dtype=FP32)
                .view(torch.int32)
                .to(torch.int64)
                & 0x7FFFFFFF
                for o in ("a_then_w", "w_then_a", "fused")
            ]
            if "planted" in c.meta:  # planted probe rows: every order within one spacing
                assert all(int((o - outs[0]).abs().max()) <= 1 for o in outs[1:]), c.name
                continue
            if c.meta["variant"].startswith("fp32_ties"):
                n_ties += 1
                assert all(int((o - outs[0]).abs().max()) == 1 for o in outs[1:]), c.name
                assert all(bool(((o - outs[0]) != 0).all()) for o in outs[1:]), c.name
                continue
            assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2]), c.name
    assert n_ties == 3


def test_subnormal_scales_are_order_free_and_fail_a_kernel_that_flushes_them():
    """Every subnormal_scales case: s_w (weight variant) or the per-token s_a at M = 1 (activation variant)
    float32-subnormal everywhere, every scale order the same bits, nonzero outputs; a kernel that flushes a subnormal
    weight scale to zero (a new user's escape: only s_a was ever subnormal) fails C8 on every weight case, one that
    flushes a subnormal per-token scale on its decode path (M = 1: a later new user's kernel failed on one covering
    case only) on every activation case."""
    cases = family_cases(["subnormal_scales"])
    assert len(cases) == 12
    cpu = get_kernel("cpu")
    tiny = torch.finfo(torch.float32).tiny

    def flush(x):
        return torch.where(x.abs() < tiny, torch.zeros_like(x), x)

    def flushes_subnormal_weight_scales(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        return cpu.scaled_mm(a, b, scale_a, flush(scale_b), out_dtype=out_dtype, bias=bias)

    def flushes_subnormal_token_scales_at_m1(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        sa = flush(scale_a) if a.shape[0] == 1 else scale_a
        return cpu.scaled_mm(a, b, sa, scale_b, out_dtype=out_dtype, bias=bias)

    buggy = {
        "weight": dataclasses.replace(cpu, name="flush-subnormal-s_w", scaled_mm=flushes_subnormal_weight_scales),
        "activation": dataclasses.replace(
            cpu, name="flush-subnormal-s_a-m1", scaled_mm=flushes_subnormal_token_scales_at_m1
        ),
    }
    assert sorted(c.name.split("/")[2].split("-")[0] for c in cases) == ["activation"] * 6 + ["weight"] * 6
    for c in cases:
        role = c.name.split("/")[2].split("-")[0]
        tiny_scale = c.scale_b if role == "weight" else c.scale_a
        assert bool((tiny_scale.abs() < tiny).all()) and (role == "weight" or c.m == 1), c.name
        outs = [
            reference_scaled_mm(
                c.a, c.b, c.scale_a, c.scale_b, EpilogueContract(o, "fp32_before_round"), None, c.out_dtype
            )
            for o in ("a_then_w", "w_then_a", "fused")
        ]
        assert all(torch.equal(bits_of(outs[0]), bits_of(o)) for o in outs), c.name
        assert int((outs[0] != 0).sum()) >= c.m * c.n // 2, c.name
        assert evaluate_case(cpu, c).verdict == "pass", c.name
        assert evaluate_case(buggy[role], c).checks["C8"].verdict == "fail", c.name
        other = buggy["activation" if role == "weight" else "weight"]
        assert evaluate_case(other, c).verdict == "pass", c.name  # each variant reaches its own trigger
