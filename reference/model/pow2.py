"""Power-of-two weight scales by requantization from the parent weights.

Under per-channel weight scales ``s_w = 2^k`` every legal epilogue order
gives the same bits (``rnd(x) * 2^k == rnd(x * 2^k)`` barring overflow /
underflow), so checks can demand bit equality (DESIGN.md sections 1, 5, C5).
Such a checkpoint must be *requantized from the parent float weights*: the
weights change together with the scales. Rewriting the stored scales of an
existing int8 checkpoint to powers of two without touching the int8 weights
gives a different (wrong) model; that is fault F9 (operand mismatch) and
lives here only as :func:`rewrite_scales_pow2_without_requant`, clearly
named, for the fault catalogue and the control arm.

Snapping rules (per output channel, ``absmax = max_j |w[n, j]|``):

* ``nearest``: ``2^k`` nearest to the checkpoint's own scale
  ``s = absmax / 127.5`` (as :func:`reference.quantize.quantize_weight_per_channel`
  computes it, in the weight dtype, with its floor) in log2, i.e.
  ``k = round(log2 s)``. Computed exactly: with ``s = m * 2^e``,
  ``m in [0.5, 1)``, ``k = e`` if ``m^2 >= 1/2`` else ``e - 1`` (``m^2`` is
  exact in float64; ``m^2 == 1/2`` is impossible for a rational ``m``). Values
  above ``127.5 * 2^k`` clamp to 127 (at most a factor sqrt(2) of clipping).
* ``ceiling``: the smallest ``2^k`` with ``127 * 2^k >= absmax`` (exact
  float64 comparison), so ``|w / 2^k| <= 127`` and no element is ever
  clamped. An all-zero row takes the ``nearest`` scale of its floored own
  scale.

Requantization: ``q = clamp(round_half_even(w / 2^k), -128, 127)``, division
in float64. Dividing by a power of two is exact in any binary float format
(absent overflow / underflow), so this equals the division in the weight's
own dtype that llm-compressor performs.

The **reconstruction gate** (:func:`reconstruction_gate`) must pass before
any constrained checkpoint is built: it rebuilds the committed (own-scale)
checkpoint from the parents with the unconstrained rule and requires every
tensor to match byte for byte (and digest for digest); on failure it raises
:class:`ReconstructionGateError` naming the first differing tensor and
element.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Mapping, Optional

import torch

from reference.errors import CheckpointError
from reference.model.checkpoint import load_qwen3_state, state_digest

POW2_RULES = ("nearest", "ceiling")


class ReconstructionGateError(CheckpointError):
    """The committed checkpoint is not reproduced byte for byte from its
    parents. Attributes: ``tensor`` (name), ``index`` (tuple, or None for a
    dtype / shape / presence mismatch), ``committed`` and ``rebuilt``
    (element values as strings)."""

    def __init__(self, msg: str, tensor: str, index=None, committed=None, rebuilt=None):
        super().__init__(msg)
        self.tensor, self.index, self.committed, self.rebuilt = tensor, index, committed, rebuilt


def _check_rule(rule: str) -> None:
    if rule not in POW2_RULES:
        raise CheckpointError(f"pow2 rule={rule!r} is not one of {POW2_RULES}")


def _nearest_exponent(s: torch.Tensor) -> torch.Tensor:
    """``k = round(log2 s)`` exactly, for positive finite ``s`` (any float)."""
    m, e = torch.frexp(s.to(torch.float64))
    return torch.where(m * m >= 0.5, e, e - 1).to(torch.int64)


def _ceiling_exponent(absmax: torch.Tensor) -> torch.Tensor:
    """Smallest ``k`` with ``127 * 2^k >= absmax`` (absmax > 0), exact."""
    a = absmax.to(torch.float64)
    k = torch.ceil(torch.log2(a / 127.0)).to(torch.int64)
    # log2 may be off by one near exact powers; fix with exact comparisons.
    k = torch.where(torch.ldexp(torch.full_like(a, 127.0), k) < a, k + 1, k)
    k = torch.where(torch.ldexp(torch.full_like(a, 127.0), k - 1) >= a, k - 1, k)
    return k


def pow2_exponents(parent_weight: torch.Tensor, rule: str = "nearest") -> torch.Tensor:
    """Per-channel scale exponents ``k`` (int64 [N]) of ``rule`` for a parent
    weight ``[N, K]`` (see the module docstring for the rules).

    Raises:
        CheckpointError: unknown rule, or weight not 2-D floating point.
    """
    _check_rule(rule)
    w = parent_weight
    if not isinstance(w, torch.Tensor) or w.dim() != 2 or not w.is_floating_point():
        raise CheckpointError(
            f"pow2: parent weight must be a 2-D float tensor, got "
            f"{getattr(w, 'dtype', type(w))} {list(getattr(w, 'shape', []))}"
        )
    from reference.quantize import quantize_weight_per_channel

    # The own scale depends only on the row absmax, so quantizing the [N, 1]
    # column of row absmaxes gives the very same scales, at 1/K of the cost.
    absmax_col = w.detach().abs().amax(dim=1, keepdim=True)
    _, s_own = quantize_weight_per_channel(absmax_col)
    k = _nearest_exponent(s_own.reshape(-1))
    if rule == "ceiling":
        absmax = absmax_col.reshape(-1).to(torch.float64)
        kc = _ceiling_exponent(torch.where(absmax > 0, absmax, torch.ones_like(absmax)))
        k = torch.where(absmax > 0, kc, k)
    return k


def requantize_pow2(parent_weight: torch.Tensor, rule: str = "nearest") -> tuple[torch.Tensor, torch.Tensor]:
    """Requantize a parent weight with per-channel power-of-two scales.

    Args:
        parent_weight: float (bf16 / fp16 / fp32) ``[N, K]``, nn.Linear layout.
        rule: ``"nearest"`` (nearest power of two to the own scale, in log2)
            or ``"ceiling"`` (smallest power of two that never clips).

    Returns:
        ``(q, scale)``: ``q`` int8 ``[N, K]`` = clamp(RNE(w / 2^k), -128, 127);
        ``scale`` ``[N, 1]`` in the weight's dtype, every entry exactly ``2^k``.

    Raises:
        CheckpointError: unknown rule; bad weight; a ``2^k`` not exactly
            representable in the weight dtype.
    """
    k = pow2_exponents(parent_weight, rule)
    w64 = parent_weight.to(torch.float64)
    scale64 = torch.ldexp(torch.ones_like(k, dtype=torch.float64), k)
    q = torch.clamp(torch.round(w64 / scale64[:, None]), -128, 127).to(torch.int8)
    scale = scale64.to(parent_weight.dtype)
    if not torch.equal(scale.to(torch.float64), scale64):
        raise CheckpointError(
            f"pow2: a scale 2^k (k in [{int(k.min())}, {int(k.max())}]) is not representable in {parent_weight.dtype}"
        )
    return q.contiguous(), scale.reshape(-1, 1).contiguous()


def rewrite_scales_pow2_without_requant(
    q: torch.Tensor, scale: torch.Tensor, rule: str = "nearest"
) -> tuple[torch.Tensor, torch.Tensor]:
    """THE WRONG VARIANT -- fault F9 (operand_mismatch) / control arm only.

    Snaps already-stored per-channel scales to powers of two (``nearest`` in
    log2, or ``ceiling`` = ``2^ceil(log2 s)``) and keeps the int8 weights as
    they are. The pair no longer represents the parent model (every channel
    is rescaled by ``2^k / s``, up to a factor sqrt(2) or 2); never use it to
    build a deployable checkpoint -- use :func:`requantize_pow2` on the
    parent weights instead (DESIGN.md section 5).

    Args:
        q: int8 ``[N, K]`` weight, returned unchanged (same object).
        scale: positive per-channel scales, any float dtype, shape ``[N]`` or
            ``[N, 1]``.
        rule: ``"nearest"`` or ``"ceiling"``.

    Returns:
        ``(q, scale_pow2)`` with ``scale_pow2`` of ``scale``'s shape and dtype.
    """
    _check_rule(rule)
    s64 = scale.to(torch.float64)
    if rule == "nearest":
        k = _nearest_exponent(s64)
    else:
        m, e = torch.frexp(s64)
        k = torch.where(m == 0.5, e - 1, e).to(torch.int64)
    return q, torch.ldexp(torch.ones_like(s64), k).to(scale.dtype)


def _natural_key(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _first_difference(a: torch.Tensor, b: torch.Tensor) -> tuple[tuple, str, str]:
    """Index and values of the first element whose bytes differ."""
    if a.is_floating_point():
        ia = a.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()])
        ib = b.contiguous().view(ia.dtype)
    else:
        ia, ib = a, b
    flat = torch.nonzero((ia != ib).reshape(-1))
    i = int(flat[0])
    idx = tuple(int(v) for v in torch.unravel_index(torch.tensor(i), a.shape)) if a.dim() else ()
    return idx, repr(a.reshape(-1)[i].item()), repr(b.reshape(-1)[i].item())


def compare_states(
    committed: Mapping[str, torch.Tensor], rebuilt: Mapping[str, torch.Tensor], committed_where: str = "committed"
) -> dict[str, str]:
    """Byte-for-byte comparison of two checkpoint states.

    Returns:
        ``{tensor name: tensor_digest}`` (equal on both sides) if identical.

    Raises:
        ReconstructionGateError: on the first (natural name order) tensor
            missing on one side, or differing in dtype, shape, bytes or
            digest; names tensor and, for bytes, the element index and both
            values.
    """
    from reference.operands import tensor_digest

    digests = {}
    for name in sorted(set(committed) | set(rebuilt), key=_natural_key):
        if name not in committed or name not in rebuilt:
            side = "committed checkpoint" if name not in committed else "rebuild"
            raise ReconstructionGateError(
                f"reconstruction gate failed: {committed_where}: tensor {name!r} missing from the {side}", name
            )
        c, r = committed[name], rebuilt[name]
        if c.dtype != r.dtype or tuple(c.shape) != tuple(r.shape):
            raise ReconstructionGateError(
                f"reconstruction gate failed: {committed_where}: tensor {name!r} is {c.dtype} {list(c.shape)}, "
                f"rebuild gives {r.dtype} {list(r.shape)}",
                name,
            )
        dc, dr = tensor_digest(c), tensor_digest(r)
        if dc != dr:
            if c.numel() and not torch.equal(c.contiguous().view(torch.uint8), r.contiguous().view(torch.uint8)):
                idx, vc, vr = _first_difference(c, r)
                raise ReconstructionGateError(
                    f"reconstruction gate failed: {committed_where}: tensor {name!r} element {list(idx)}: "
                    f"committed {vc}, rebuilt {vr}",
                    name,
                    idx,
                    vc,
                    vr,
                )
            raise ReconstructionGateError(  # pragma: no cover - equal bytes imply equal digests
                f"reconstruction gate failed: {committed_where}: tensor {name!r} digest {dc[:12]} != {dr[:12]}", name
            )
        digests[name] = dc
    return digests


def reconstruction_gate(
    parent_dir, committed_dir, quantizer: Optional[Callable] = None, parent: Optional[tuple] = None
) -> dict:
    """Rebuild the committed own-scale W8A8 checkpoint from its parents and
    require a byte-for-byte match (every tensor's bytes and digest).

    Args:
        parent_dir: the float parent Qwen3 directory.
        committed_dir: the committed compressed-tensors W8A8 checkpoint.
        quantizer: the unconstrained weight quantizer used for the rebuild
            (default :func:`reference.quantize.quantize_weight_per_channel`);
            a test injects a float32-division variant here to see it fail.
        parent: optional pre-loaded ``(config, state)`` of ``parent_dir``.

    Returns:
        ``{"passed": True, "tensors": count, "state_digest": hex,
        "parent_digest": hex, "tensor_digests": {name: hex}}``.

    Raises:
        ReconstructionGateError: first differing tensor / element.
        CheckpointError: unreadable parent or committed checkpoint.
    """
    from reference.model.checkpoint import read_config
    from reference.model.compressed_tensors import quantize_state_w8a8

    ccfg = read_config(committed_dir)
    if not isinstance(ccfg.get("quantization_config") or ccfg.get("compression_config"), dict):
        raise CheckpointError(
            f"{Path(committed_dir) / 'config.json'}: no quantization_config (not a committed W8A8 checkpoint)"
        )
    config, state = parent if parent is not None else load_qwen3_state(parent_dir)
    _, committed = load_qwen3_state(committed_dir)
    rebuilt = quantize_state_w8a8(config, state, quantizer)
    digests = compare_states(committed, rebuilt, committed_where=str(committed_dir))
    return {
        "passed": True,
        "tensors": len(digests),
        "state_digest": state_digest(committed),
        "parent_digest": state_digest(state),
        "tensor_digests": digests,
    }


def build_pow2_checkpoint(
    parent_dir,
    committed_dir,
    out_dir,
    rule: str = "nearest",
    gate_quantizer: Optional[Callable] = None,
    parent: Optional[tuple] = None,
):
    """Build a power-of-two-scale W8A8 checkpoint from the parent weights,
    after the reconstruction gate passes.

    Args:
        parent_dir: float parent Qwen3 directory.
        committed_dir: the committed own-scale W8A8 checkpoint of that parent.
        out_dir: output directory (compressed-tensors layout, written atomically).
        rule: ``"nearest"`` or ``"ceiling"``.
        gate_quantizer: quantizer for the gate's rebuild (tests only).
        parent: optional pre-loaded ``(config, state)``.

    Returns:
        The written :class:`reference.model.compressed_tensors.W8A8Checkpoint`.

    Raises:
        ReconstructionGateError: the gate failed; nothing is written.
        CheckpointError: bad inputs or rule.
    """
    from reference.model.checkpoint import linear_names
    from reference.model.compressed_tensors import read_w8a8_checkpoint, w8a8_quantization_config, write_checkpoint_dir

    _check_rule(rule)
    config, state = parent if parent is not None else load_qwen3_state(parent_dir)
    gate = reconstruction_gate(parent_dir, committed_dir, quantizer=gate_quantizer, parent=(config, state))
    layers = set(linear_names(config))
    tensors = {}
    for name, t in state.items():
        base = name[: -len(".weight")] if name.endswith(".weight") else None
        if base in layers:
            q, s = requantize_pow2(t, rule)
            tensors[f"{base}.weight"], tensors[f"{base}.weight_scale"] = q, s
        else:
            tensors[name] = t
    meta = {
        "scale_rule": f"pow2-{rule}",
        "parent_digest": gate["parent_digest"],
        "committed_digest": gate["state_digest"],
        "reconstruction_gate": "passed",
        "state_digest": state_digest(tensors),
        "quantizer": "reference.model.pow2.requantize_pow2",
    }
    write_checkpoint_dir(
        out_dir,
        config,
        tensors,
        side_files_from=parent_dir,
        quantization_config=w8a8_quantization_config(),
        int8conf_meta=meta,
    )
    return read_w8a8_checkpoint(out_dir)
