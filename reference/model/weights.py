"""Quantized weights of a Qwen3 model for a scale mode (DESIGN.md 5): ``own`` (per-channel absmax/127.5),
``pow2-nearest`` / ``pow2-ceiling`` (requantized with power-of-two scales, ``reference.model.pow2``) or ``bf16`` (none);
or read from a compressed-tensors W8A8 checkpoint with the scale mode it carries."""

from __future__ import annotations

import torch

from reference.errors import Int8confError
from reference.model import forward as wf
from reference.model.compressed_tensors import read_w8a8_checkpoint

WEIGHT_SCALE_MODES = ("own", "pow2-nearest", "pow2-ceiling", "bf16")


def checkpoint_scale_mode(ck) -> tuple[str, str]:
    """``(mode, label)`` of a ``W8A8Checkpoint``: mode ``pow2-nearest`` | ``pow2-ceiling`` (our recorded scale_rule, if
    the scales agree), ``pow2`` (all scales powers of two, rule unknown) or ``own``; label for output."""
    all_pow2 = all(bool(torch.all(torch.frexp(ck.scale_b(n)).mantissa == 0.5)) for n in ck.scales)
    rule = (ck.meta or {}).get("scale_rule")
    if all_pow2 and rule in ("pow2-nearest", "pow2-ceiling"):
        return rule, f"{rule} scales (from checkpoint)"
    if all_pow2:
        return "pow2", "power-of-two scales (from checkpoint)"
    if rule == "own":
        return "own", "own scales (from checkpoint)"
    return "own", "per-channel scales (from checkpoint)"


def checkpoint_weights(model, checkpoint) -> tuple[dict, str, str]:
    """``({layer: QuantWeight}, mode, label)`` of a W8A8 checkpoint dir; CheckpointError: unreadable, or a layer missing."""
    ck = read_w8a8_checkpoint(checkpoint)
    tensors = {f"{n}.weight": q for n, q in ck.weights.items()} | {f"{n}.weight_scale": s for n, s in ck.scales.items()}
    mode, label = checkpoint_scale_mode(ck)
    return wf.weights_from_tensors(tensors, model.config.num_hidden_layers), mode, label


def load_weights(model, scale_mode: str, checkpoint=None) -> dict:
    """Quantized weights for ``scale_mode``, or from a W8A8 checkpoint dir. CheckpointError: bad checkpoint;
    Int8confError: checkpoint with a non-``own`` mode."""
    if checkpoint is None:
        return wf.weights_for_scale_mode(model, scale_mode)
    check_checkpoint_mode(checkpoint, scale_mode)
    return checkpoint_weights(model, checkpoint)[0]


def check_checkpoint_mode(checkpoint, scale_mode: str) -> None:
    """Int8confError when a checkpoint (which carries its own scales) comes with a scale mode other than ``own``."""
    if checkpoint is not None and scale_mode != "own":
        raise Int8confError(
            f"--checkpoint takes its weights and scales from {checkpoint}; drop --scale-mode {scale_mode}"
        )
