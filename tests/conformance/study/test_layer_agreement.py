"""conformance.study.layer_agreement: observed disagreement equals what the
declared contracts predict; under power-of-two scales none, or the failing
precondition / the kernel departing from its contract is named."""

import torch
from buggy_kernels import make_kernel, order_case

from conformance.study.layer_agreement import compare_layer, pow2_preconditions, summarize_mode
from reference.contract import CUTLASS_STYLE, TRITON_STYLE
from reference.operands import GemmOperands


def _ops(pow2: bool, seed: int = 0, sb_exp=None) -> GemmOperands:
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (64, 384), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (256, 384), generator=g, dtype=torch.int8)
    sa = (torch.rand(64, generator=g) * 1e-3 + 1e-4).float()
    if pow2:
        k = torch.randint(-12, -6, (256,), generator=g) if sb_exp is None else torch.full((256,), sb_exp)
        sb = torch.ldexp(torch.ones(256), k.float())
    else:
        sb = (torch.rand(256, generator=g) * 1e-3 + 1e-4).float()
    return GemmOperands(
        a,
        b,
        sa,
        sb,
        name="model.layers.0.mlp.up_proj",
        scale_mode="pow2" if pow2 else "own",
        meta={"block": 0, "proj": "up_proj"},
    )


A = make_kernel("a", CUTLASS_STYLE)
B = make_kernel("b", TRITON_STYLE)


def test_own_scales_disagree_exactly_where_the_declared_contracts_predict():
    # random scales: the two orders agree on all 16384 elements (~1 in 10^6 differ)
    rec = compare_layer(_ops(False), A, B)
    assert rec["predicted_differing"] == 0 and rec["differing"] == 0
    # acc = 545 with scales found where (acc*s_a)*s_w and (acc*s_w)*s_a round apart
    ops = order_case()
    ops.meta = {"block": 0, "proj": "q_proj"}
    ops.scale_mode = "own"
    rec = compare_layer(ops, A, B)
    assert rec["predicted_differing"] == 1 and rec["differing"] == 1
    assert rec["a_vs_declared"] == 0 and rec["b_vs_declared"] == 0
    assert rec["status"] == "differ-expected" and rec["max_ulp"] == 1


def test_pow2_scales_give_identical_bits_and_all_preconditions_hold():
    rec = compare_layer(_ops(True), A, B)
    assert rec["differing"] == 0 and rec["predicted_differing"] == 0 and rec["status"] == "identical"
    assert rec["failed_preconditions"] == []


def test_a_kernel_off_its_contract_under_pow2_is_named_as_such():
    liar = make_kernel("liar", TRITON_STYLE, order="w_then_a", rounding="rtz")
    rec = compare_layer(_ops(True), A, liar)
    assert rec["differing"] > 0 and rec["b_vs_declared"] == rec["differing"]
    s = summarize_mode([rec], "pow2-nearest")
    assert s["layers_identical"] == 0
    assert "departs from its declared contract" in s["differing_layers"][0]["explanation"]


def test_underflowing_power_of_two_scale_fails_the_normal_range_precondition():
    pre = pow2_preconditions(_ops(True, sb_exp=-140), A, B)
    assert pre["pow2_scales"] and not pre["fp32_normal_range"]
    ops = _ops(False)
    assert not pow2_preconditions(ops, A, B)["pow2_scales"]
