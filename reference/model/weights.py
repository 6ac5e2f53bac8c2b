"""Quantized weights of a Qwen3 model for one scale mode, or read from a
compressed-tensors W8A8 checkpoint together with the scale mode it carries.

Scale modes (DESIGN.md section 5): ``own`` (the reference quantizer,
llm-compressor's per-channel absmax/127.5 rule), ``pow2-nearest`` /
``pow2-ceiling`` (requantized from the parent weights with power-of-two
per-channel scales, ``reference.model.pow2``), ``bf16`` (no quantization).
"""

from __future__ import annotations

from reference.errors import Int8confError

SCALE_MODES = ("own", "pow2-nearest", "pow2-ceiling", "bf16")


def checkpoint_scale_mode(ck) -> tuple[str, str]:
    """Scale mode of a W8A8 checkpoint, read from the checkpoint itself.

    Sources, in order: our ``int8conf.scale_rule`` record (written by
    ``reference.model.pow2.build_pow2_checkpoint``: ``pow2-nearest`` /
    ``pow2-ceiling``; by ``reference.model.compressed_tensors.build_w8a8_checkpoint``:
    ``own``), checked against the stored scales; otherwise inferred: every
    ``weight_scale`` an exact power of two (float32 mantissa 0.5 in
    ``frexp``) -> ``pow2``.

    Args:
        ck: ``reference.model.compressed_tensors.W8A8Checkpoint``.

    Returns:
        ``(mode, label)``: mode ``pow2-nearest`` | ``pow2-ceiling`` | ``pow2``
        (rule unknown) | ``own`` (any other per-channel scales); label for
        output, e.g. ``"power-of-two scales (from checkpoint)"``.
    """
    import torch

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
    """Weights of a compressed-tensors W8A8 checkpoint plus its scale mode.

    Returns:
        ``(weights, mode, label)``: ``{layer: QuantWeight}`` and
        :func:`checkpoint_scale_mode`'s pair.

    Raises:
        CheckpointError: checkpoint unreadable or missing a layer.
    """
    from reference.model import forward as wf
    from reference.model.compressed_tensors import read_w8a8_checkpoint

    ck = read_w8a8_checkpoint(checkpoint)
    tensors = {}
    for name, q in ck.weights.items():
        tensors[f"{name}.weight"] = q
        tensors[f"{name}.weight_scale"] = ck.scales[name]
    mode, label = checkpoint_scale_mode(ck)
    return wf.weights_from_tensors(tensors, model.config.num_hidden_layers), mode, label


def load_weights(model, scale_mode: str, checkpoint=None) -> dict:
    """Quantized weights for ``scale_mode`` (or from a W8A8 checkpoint dir).

    Raises:
        CheckpointError: checkpoint unreadable or missing a layer.
        Int8confError: checkpoint combined with a pow2 scale mode.
    """
    from reference.model import forward as wf

    if checkpoint is None:
        return wf.weights_for_scale_mode(model, scale_mode)
    check_checkpoint_mode(checkpoint, scale_mode)
    return checkpoint_weights(model, checkpoint)[0]


def check_checkpoint_mode(checkpoint, scale_mode: str) -> None:
    """Int8confError when a checkpoint (which carries its own scales) is
    combined with a scale mode other than ``own``."""
    if checkpoint is not None and scale_mode != "own":
        raise Int8confError(
            f"--checkpoint takes its weights and scales from {checkpoint}; drop --scale-mode {scale_mode}"
        )
