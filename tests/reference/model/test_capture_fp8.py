"""FP8 capture operands (reference.model.capture.iter_layer_operands_fp8): the captured x quantized to e4m3 per token
or per tensor, the parent model's float weight per channel, as the field's FP8 W8A8 quantizers do."""

from __future__ import annotations

import pytest
import torch

from reference.errors import CaptureError
from reference.fp8 import (
    E4M3,
    quantize_activation_fp8_per_tensor,
    quantize_activation_fp8_per_token,
    quantize_weight_fp8_per_channel,
)
from reference.model.artifacts import load_parent
from reference.model.capture import FP8_ACTIVATION_MODES, iter_layer_operands_fp8


@pytest.mark.parametrize("mode", sorted(FP8_ACTIVATION_MODES))
def test_operands_are_the_field_quantizers_of_x_and_the_parent_weight(cs, mode):
    ops = next(iter_layer_operands_fp8(cs, mode))
    name = cs.layer_names()[0]
    x, w = cs.load_layer(name)["x"], load_parent(cs.model_dir)[1][f"{name}.weight"]
    qa, sa = (quantize_activation_fp8_per_token if mode == "per_token" else quantize_activation_fp8_per_tensor)(x)
    qb, sb = quantize_weight_fp8_per_channel(w)
    assert ops.name == name and ops.scale_mode == FP8_ACTIVATION_MODES[mode] and ops.out_dtype == torch.bfloat16
    assert ops.a.dtype == ops.b.dtype == E4M3 and torch.equal(ops.a.view(torch.uint8), qa.view(torch.uint8))
    assert torch.equal(ops.b.view(torch.uint8), qb.view(torch.uint8)) and torch.equal(ops.scale_a, sa)
    assert ops.scale_b.dtype == torch.float32 and torch.equal(ops.scale_b, sb.float().reshape(-1))
    assert tuple(ops.scale_a.shape) == ((ops.m,) if mode == "per_token" else (1,))
    assert ops.meta["operands"] == "e4m3" and ops.meta["source"] == "capture" and ops.meta["activations"] == mode


def test_every_layer_in_forward_order_and_a_bad_mode(cs):
    assert [o.name for o in iter_layer_operands_fp8(cs)] == cs.layer_names()
    with pytest.raises(CaptureError, match="activations='per_row'"):
        next(iter_layer_operands_fp8(cs, "per_row"))
