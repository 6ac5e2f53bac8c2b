"""Block-quantized capture operands (reference.model.capture.iter_layer_operands_block): the captured x per token and
group of 128, the parent model's float weight in 128 x 128 blocks, as reference.block.quantize does on its own."""

from __future__ import annotations

import pytest
import torch

from reference.block.quantize import quantize_activation_per_token_group, quantize_weight_blocks
from reference.errors import CaptureError
from reference.model.artifacts import load_parent
from reference.model.capture import BLOCK_SCALE_MODES, iter_layer_operands_block


@pytest.mark.parametrize(("operands", "scales"), [("int8", "group"), ("e4m3", "group_ue8m0")])
def test_operands_are_the_block_quantizers_of_x_and_the_parent_weight(cs, operands, scales):
    ops = next(iter_layer_operands_block(cs, operands, scales))
    name = cs.layer_names()[0]
    x, w = cs.load_layer(name)["x"], load_parent(cs.model_dir)[1][f"{name}.weight"]
    ue8m0 = scales == "group_ue8m0"
    qa, sa = quantize_activation_per_token_group(x, 128, operands, rule="kernel", use_ue8m0=ue8m0)
    qb, sb = quantize_weight_blocks(w, (128, 128), operands, use_ue8m0=ue8m0)
    assert ops.name == name and ops.scale_mode == scales and ops.block_size == (128, 128)
    assert torch.equal(ops.a.view(torch.uint8), qa.view(torch.uint8))
    assert torch.equal(ops.b.view(torch.uint8), qb.view(torch.uint8))
    assert torch.equal(ops.scale_a, sa) and torch.equal(ops.scale_b, sb)
    m, k, n = ops.m, ops.k, ops.n
    assert tuple(ops.scale_a.shape) == (m, k // 128) and tuple(ops.scale_b.shape) == (n // 128, k // 128)
    assert ops.meta["block"]["k"] == "multiple" and ops.meta["scale_kind"] == ("pow2" if ue8m0 else "real")
    if ue8m0:  # every scale a power of two: frexp's mantissa is exactly 1/2
        for s in (ops.scale_a, ops.scale_b):
            assert bool((torch.frexp(s).mantissa == 0.5).all())
    else:  # vLLM's group scale absmax / 127 is not a power of two on captured activations
        assert not bool((torch.frexp(ops.scale_a).mantissa == 0.5).all())


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"operands": "fp4"}, "operands='fp4' is not one of"),
        ({"scales": "pow2"}, "scales='pow2' is not one of"),
        ({"block": (128, 0)}, "block_size"),
    ],
)
def test_bad_arguments_are_one_line_capture_errors(cs, kw, match):
    with pytest.raises(CaptureError, match=match) as e:
        next(iter_layer_operands_block(cs, **kw))
    assert "\n" not in str(e.value)


def test_the_block_scale_modes_are_the_block_matrix_domain():
    from predictions.matrix import DOMAINS

    assert DOMAINS["block"].scale_modes == tuple(BLOCK_SCALE_MODES) == ("group", "group_ue8m0")
