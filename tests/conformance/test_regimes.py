"""The trigger map (family ``regimes``): every boundary visited, every layout at
large shapes, correct kernels pass, and one buggy kernel per regime family --
gated by M, N, K, M*N*K, the output size M*N, a layout, an out dtype, an unmasked K tail, a dropped
column tile, a one-sided overflow saturation, a reused output buffer -- fails
the default suite on exactly its pinned cases, by the pinned check."""

from __future__ import annotations

import functools

import pytest
import torch

from conformance.cases.families import COVERING_PARTS, FAMILIES, REGIME_PARTS, family_builders, family_cases
from conformance.cases.regimes import LAYOUTS, POW2, VOCAB, regime_shapes, regimes_family
from conformance.cases.synthetic import synthetic_cases
from conformance.kernels.registry import get_kernel
from conformance.runtime.forking import map_forked
from conformance.suite.evaluate import evaluate_case
from conformance.suite.plan import mark_ownership_probes
from reference.operands import tensor_digest


@functools.lru_cache(maxsize=None)
def _family(name: str) -> tuple:
    """The family's cases, C10 probing them as the suite's plan does (the first case of each size class)."""
    return tuple(mark_ownership_probes(family_cases([name])))


def _axis(axis: str) -> list:
    """The axis' cases a CPU run affords (``native_only`` ones left out, as the suite's plan does)."""
    return [c for c in _family("regimes") if c.meta["regime"]["axis"] == axis and not c.meta.get("native_only")]


def test_the_map_visits_both_sides_of_every_power_of_two_on_each_axis():
    shapes = regime_shapes()
    for axis, pos in (("M", 1), ("K", 2), ("N", 3)):
        seen = {s[pos] for s in shapes if s[0] == axis}
        for k in range(6, 18):
            assert {2**k - 1, 2**k, 2**k + 1} <= seen, (axis, k)
    assert VOCAB in {s[3] for s in shapes if s[0] == "N"}
    assert max(s[1] for s in shapes if s[0] == "M") == 131073 > 65535
    mnk = sorted(m * k * n for a, m, k, n in shapes if a == "MNK")
    assert mnk[0] > 2**28 and mnk[-1] > 2**30
    outputs = sorted(m * n for a, m, k, n in shapes if a == "MN")
    assert outputs[0] > 2**22 and outputs[-1] > 2**24
    assert max(m * n for a, m, k, n in shapes if a != "MN") < 2**22  # only the MN cases reach it
    assert len(POW2) == 50


def test_every_layout_is_met_at_large_shapes_on_every_axis():
    for axis in ("M", "N", "K"):
        big = {c.meta["layout"] for c in _axis(axis) if c.meta["regime"]["value"] >= 4096}
        assert big == set(LAYOUTS), axis


def test_every_regime_case_carries_planted_discriminators():
    cases = _family("regimes")
    assert len(cases) == len(regime_shapes()) == 204
    assert all(sum(c.meta["planted"].values()) > 0 for c in cases)
    total = {k: sum(c.meta["planted"][k] for c in cases) for k in cases[0].meta["planted"]}
    assert total == {  # the two MN cases (M2049 with a bias, M4097 without) add 16, 12, 8, 6 and 2 of the first five
        "scale_order": 2977,
        "bias_point": 369,
        "signed_zero": 1864,
        "overflow": 290,
        "subnormal": 302,
        "partial_sums": 223,
        "big_acc": 113,
        "bias_value": 0,  # the covering family's discriminators: not planted in the regimes family
        "subnormal_scale": 0,
    }


@pytest.mark.parametrize("name", ["int_mm", "cpu"])
def test_exact_builtins_pass_every_grid_case_and_the_small_regime_cases(name):
    """int_mm (torch._int_mm) and cpu (the reference's own arithmetic) on every ``grid`` case and every case up to
    2^22 multiply-adds. The larger M / N / K / MNK cases are passed by every regime-gated buggy kernel below outside
    its gate (each is exact there), so a false failure of the framework at a large shape fails those tests."""
    spec = get_kernel(name)
    cases = [c for c in _family("regimes") if c.meta["regime"]["axis"] == "grid" or c.m * c.n * c.k <= 2**22]
    bad = [c.name for c in cases if evaluate_case(spec, c, device="cpu").verdict != "pass"]
    assert bad == [] and len(cases) == 144


def test_triton_passes_the_small_regime_cases():
    """The interpreter on the cases up to 2^21 multiply-adds (every axis, every layout; the whole family runs in
    ``int8conf check --kernel=triton``, natively in reports/h100-native)."""
    pytest.importorskip("triton")
    spec = get_kernel("triton")
    small = [c for c in _family("regimes") if c.m * c.n * c.k <= 2**21]
    assert len(small) == 102
    assert {c.meta["regime"]["axis"] for c in small} == {"M", "N", "K"}
    assert {c.meta["layout"] for c in small} == set(LAYOUTS)
    bad = [c.name for c in small if evaluate_case(spec, c, device="cpu").verdict != "pass"]
    assert bad == []


#: buggy kernel -> (the cases it runs on, the check that must fail, the failing cases)
BUGS = {
    "order_past_m_4096": (
        "M",
        "C8",
        [
            "M-M12288xK17xN24-b_transposed-real-fp16",
            "M-M131071xK17xN24-a_padded-real-fp32",
            "M-M131073xK17xN24-scale_a_0d-real-fp16",
            "M-M16383xK32xN16-a_padded-real-fp32",
            "M-M16385xK32xN16-scale_a_0d-real-fp16",
            "M-M24576xK32xN16-b_padded-real-fp32",
            "M-M32767xK32xN16-scales_strided-real-bf16",
            "M-M32769xK17xN24-bias_strided-real-fp32",
            "M-M4097xK32xN16-bias_strided-real-fp32",
            "M-M49152xK17xN24-all-real-bf16",
            "M-M6144xK32xN16-all-real-bf16",
            "M-M65535xK17xN24-scale_a_uniform-real-fp16",
            "M-M65537xK17xN24-dense-real-bf16",
            "M-M8191xK32xN16-scale_a_uniform-real-fp16",
            "M-M8193xK32xN16-dense-real-bf16",
            "M-M98304xK17xN24-b_transposed-real-fp16",
        ],
    ),
    "bias_after_round_past_n_32768": (
        "N",
        "C8",
        [
            "N-M3xK32xN131071-all-real-bf16",
            "N-M3xK32xN151936-dense-real-bf16",
            "N-M3xK32xN65536-scales_strided-real-bf16",
        ],
    ),
    "fused_past_k_16384": (
        "K",
        "C8",
        [
            "K-M17xK24576xN24-b_padded-real-fp32",
            "K-M17xK32767xN24-scales_strided-real-bf16",
            "K-M24xK32769xN16-bias_strided-real-fp32",
            "K-M3xK131073xN16-scale_a_0d-real-fp16",
            "K-M3xK49152xN16-all-real-bf16",
            "K-M3xK65535xN16-scale_a_uniform-real-fp16",
            "K-M3xK65537xN16-dense-real-bf16",
            "K-M3xK98304xN16-b_transposed-real-fp16",
            "K-M40xK16385xN9-scale_a_0d-real-fp16",
        ],
    ),
    "order_past_mnk_2_30": ("MNK", "C8", ["MNK-M64xK4097xN4096-b_transposed-real-fp16"]),
    # the 2^24-element output (M4097xN4096) is native only: on the CPU the 2^22 one catches it
    "persistent_past_mn_2_22": ("MN", "C8", ["MN-M2049xK32xN2048-dense-real-bf16"]),
    "order_for_transposed_b": (
        "M",
        "C8",
        [
            "M-M12288xK17xN24-b_transposed-real-fp16",
            "M-M1536xK17xN24-b_transposed-real-fp16",
            "M-M255xK17xN24-b_transposed-real-fp16",
            "M-M49152xK17xN24-all-real-bf16",
            "M-M6144xK32xN16-all-real-bf16",
            "M-M768xK300xN40-all-real-bf16",
            "M-M98304xK17xN24-b_transposed-real-fp16",
        ],
    ),
    "fused_for_fp16": (
        "M",
        "C8",
        [
            "M-M1023xK300xN40-scale_a_uniform-real-fp16",
            "M-M12288xK17xN24-b_transposed-real-fp16",
            "M-M129xK300xN40-scale_a_uniform-real-fp16",
            "M-M131073xK17xN24-scale_a_0d-real-fp16",
            "M-M1536xK17xN24-b_transposed-real-fp16",
            "M-M16385xK32xN16-scale_a_0d-real-fp16",
            "M-M2049xK32xN16-scale_a_0d-real-fp16",
            "M-M255xK17xN24-b_transposed-real-fp16",
            "M-M384xK300xN40-scale_a_0d-real-fp16",
            "M-M65535xK17xN24-scale_a_uniform-real-fp16",
            "M-M8191xK32xN16-scale_a_uniform-real-fp16",
            "M-M98304xK17xN24-b_transposed-real-fp16",
        ],
    ),
    "unmasked_k_tail_large_even_k": (
        "K",
        "C8",
        [
            "K-M17xK8198xN24-scale_b_1-pow2-fp16",
            "K-M17xK8204xN24-bias_strided-real-fp32",
            "K-M17xK8392xN24-dense-real-bf16",
            "K-M24xK8194xN16-b_padded-real-fp32",
            "K-M24xK8240xN16-scale_a_uniform-real-fp16",
            "K-M3xK8216xN16-all-real-bf16",
        ],
    ),
    "wide_n_last_tile_dropped": (
        "N",
        "C8",
        [
            "N-M3xK32xN131071-all-real-bf16",
            "N-M3xK32xN131073-scale_b_uniform-pow2-fp32",
            "N-M3xK32xN151936-dense-real-bf16",
            "N-M3xK32xN65537-scale_b_1-pow2-fp16",
        ],
    ),
    "deep_k_scale_order": (
        "K",
        "C8",
        [
            "K-M17xK12288xN24-b_transposed-real-fp16",
            "K-M17xK24576xN24-b_padded-real-fp32",
            "K-M17xK32767xN24-scales_strided-real-bf16",
            "K-M17xK8191xN24-a_padded-real-fp32",
            "K-M17xK8204xN24-bias_strided-real-fp32",
            "K-M17xK8392xN24-dense-real-bf16",
            "K-M24xK32769xN16-bias_strided-real-fp32",
            "K-M24xK8194xN16-b_padded-real-fp32",
            "K-M24xK8240xN16-scale_a_uniform-real-fp16",
            "K-M3xK131071xN16-a_padded-real-fp32",
            "K-M3xK131073xN16-scale_a_0d-real-fp16",
            "K-M3xK16383xN16-a_padded-real-fp32",
            "K-M3xK49152xN16-all-real-bf16",
            "K-M3xK65535xN16-scale_a_uniform-real-fp16",
            "K-M3xK65537xN16-dense-real-bf16",
            "K-M3xK8216xN16-all-real-bf16",
            "K-M3xK98304xN16-b_transposed-real-fp16",
            "K-M40xK16385xN9-scale_a_0d-real-fp16",
            "K-M40xK2049xN9-bias_strided-real-fp32",
            "K-M40xK6144xN9-b_transposed-real-fp16",
            "K-M40xK8195xN9-scales_strided-real-bf16",
        ],
    ),
    "splitk_fused_epilogue": (
        "K",
        "C8",
        [
            "K-M3xK131073xN16-scale_a_0d-real-fp16",
            "K-M3xK16383xN16-a_padded-real-fp32",
            "K-M3xK49152xN16-all-real-bf16",
            "K-M3xK65535xN16-scale_a_uniform-real-fp16",
            "K-M3xK65537xN16-dense-real-bf16",
            "K-M3xK8216xN16-all-real-bf16",
            "K-M3xK98304xN16-b_transposed-real-fp16",
        ],
    ),
    "wide_n_fused_epilogue": (
        "N",
        "C8",
        [
            "N-M3xK32xN131071-all-real-bf16",
            "N-M3xK32xN131072-scale_a_uniform-real-fp16",
            "N-M3xK32xN151936-dense-real-bf16",
            "N-M3xK32xN24576-dense-real-bf16",
            "N-M3xK32xN32767-b_transposed-real-fp16",
            "N-M3xK32xN32768-a_padded-real-fp32",
            "N-M3xK32xN49152-scale_a_0d-real-fp16",
            "N-M3xK32xN65535-b_padded-real-fp32",
            "N-M3xK32xN8191-b_padded-real-fp32",
            "N-M3xK32xN98304-bias_strided-real-fp32",
            "N-M40xK17xN12288-bias_strided-real-fp32",
            "N-M40xK17xN16383-all-real-bf16",
            "N-M40xK17xN4096-a_padded-real-fp32",
            "N-M40xK17xN6144-scale_a_0d-real-fp16",
        ],
    ),
}


def _failing(kernel: str, cases: list, check: str) -> list:
    """The cases of ``cases`` the buggy kernel fails, each failing ``check`` (the case checks as the suite runs them,
    C10 probes marked as the plan marks them; C9, a suite-level check, is not the point here)."""
    spec = get_kernel(f"buggy_kernels:{kernel}")
    results = [evaluate_case(spec, c, device="cpu") for c in mark_ownership_probes(cases)]
    failed = [cr for cr in results if cr.verdict == "fail"]
    assert failed
    assert all(cr.checks[check].verdict == "fail" for cr in failed)
    return sorted(cr.case.split("/")[-1] for cr in failed)


@pytest.mark.parametrize("kernel", sorted(BUGS))
def test_a_regime_gated_bug_fails_on_its_pinned_cases(kernel):
    axis, check, expected = BUGS[kernel]
    assert _failing(kernel, _axis(axis), check) == expected


def test_a_one_sided_overflow_saturation_fails_the_two_direction_case():
    assert _failing("negative_overflow_saturates", list(_family("int32_overflow")), "C8") == [
        "both_directions-pow2-fp32"
    ]


def test_a_reused_output_buffer_fails_c10_on_every_decode_case():
    cases = synthetic_cases()
    spec = get_kernel("buggy_kernels:reuses_output_buffer")
    res = {c.name: evaluate_case(spec, c, device="cpu") for c in cases}
    failed = sorted(n for n, r in res.items() if r.verdict == "fail")
    assert failed == sorted(c.name for c in cases if c.m <= 16)
    for n in failed:
        assert [f.split(":")[0] for f in res[n].failure_lines()] == ["C10 call_independence"]
        ev = res[n].checks["C10"].evidence
        assert ev["second_output_shares_storage"] is True and ev["held_result_changed"] > 0


def test_c10_evidence_of_a_hand_made_case():
    """a = [[1, 2], [3, 4]], b = [[1, 0], [0, 1], [1, 1]], unit scales (result [[1, 2, 3], [3, 4, 7]]):
    the second call uses ~a = [[-2, -3], [-4, -5]], ~b = [[-2, -1], [-1, -2], [-2, -2]] and halved scales
    (acc [[7, 8, 10], [13, 14, 18]] * 0.25 = [[1.75, 2, 2.5], [3.25, 3.5, 4.5]]), so 5 of the 6 held
    elements change ([0, 1] stays 2)."""
    from reference.operands import GemmOperands

    a = torch.tensor([[1, 2], [3, 4]], dtype=torch.int8)
    b = torch.tensor([[1, 0], [0, 1], [1, 1]], dtype=torch.int8)
    ops = GemmOperands(a, b, torch.ones(2), torch.ones(3), name="c10-hand", meta={"source": "synthetic"})
    bad = evaluate_case(get_kernel("buggy_kernels:reuses_output_buffer"), ops, device="cpu")
    assert bad.checks["C10"].verdict == "fail"
    assert bad.checks["C10"].evidence["held_result_changed"] == 5
    assert bad.checks["C10"].evidence["aliases"] == []
    good = evaluate_case(get_kernel("cpu"), ops, device="cpu")
    assert good.checks["C10"].verdict == "pass"
    assert good.checks["C10"].evidence["held_result_changed"] == 0


def test_the_regimes_family_built_in_forked_slices_is_the_serial_family():
    serial = regimes_family(0, max_macs=1 << 22)
    slices = [functools.partial(regimes_family, 0, 1 << 22, part=(j, 5)) for j in range(5)]
    got = [c for part in map_forked(slices, 2) for c in part]
    assert len(serial) > 50 and [c.name for c in got] == [c.name for c in serial]
    for x, y in zip(got, serial):
        assert x.meta == y.meta and x.out_dtype == y.out_dtype and x.scale_mode == y.scale_mode
        for f in ("a", "b", "scale_a", "scale_b", "bias"):
            tx, ty = getattr(x, f), getattr(y, f)
            assert (tx is None) == (ty is None), (x.name, f)
            if tx is not None:  # the same bits in the same layout (views, strides, offsets kept)
                assert (tx.shape, tx.stride(), tx.storage_offset(), tx.dtype) == (
                    ty.shape,
                    ty.stride(),
                    ty.storage_offset(),
                    ty.dtype,
                ), (x.name, f)
                assert tensor_digest(tx) == tensor_digest(ty), (x.name, f)


def test_the_family_builders_are_the_families_in_order_with_regimes_in_slices():
    got = [(b.func.__name__, b.args, b.keywords) for b in family_builders(seed=3)]
    want = []
    for name, (builder, _) in FAMILIES.items():
        if name == "regimes":
            want += [("regimes_family", (3,), {"part": (j, REGIME_PARTS)}) for j in range(REGIME_PARTS)]
        elif name == "covering":
            want += [("covering_family", (3,), {"part": (j, COVERING_PARTS)}) for j in range(COVERING_PARTS)]
        else:
            want.append((builder.__name__, (3,), {}))
    assert got == want and REGIME_PARTS > 1
