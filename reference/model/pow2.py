"""Power-of-two weight scales by requantization from the parent weights.

Under scales ``2^k`` every legal epilogue order gives the same bits (DESIGN.md sections 1, 5, C5); snapping stored
scales without requantizing is fault F9.

Rules, per output channel with ``absmax = max_j |w[n, j]|``:

* ``nearest``: ``k = round(log2 s)`` of the own scale ``s = absmax / 127.5`` (as
  :func:`reference.quantize.quantize_weight_per_channel` computes it). Exact: with
  ``s = m * 2^e``, ``m in [0.5, 1)``, ``k = e`` if ``m^2 >= 1/2`` else ``e - 1``.
  Values above ``127.5 * 2^k`` clamp to 127.
* ``ceiling``: the smallest ``k`` with ``127 * 2^k >= absmax`` (never clamps); an
  all-zero row takes the ``nearest`` scale of its floored own scale.

``q = clamp(round_half_even(w / 2^k), -128, 127)`` in float64 (exact for a power of two). :func:`reconstruction_gate`
must pass before any pow2 checkpoint is built."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Mapping, Optional

import torch

from reference import memo
from reference.errors import CheckpointError
from reference.model.checkpoint import load_qwen3_state, read_config, state_digest
from reference.model.compressed_tensors import parent_with_digest, quantize_state_w8a8, write_w8a8_dir
from reference.operands import tensor_digest, tensor_digests
from reference.quantize import quantize_weight_per_channel

POW2_RULES = ("nearest", "ceiling")


class ReconstructionGateError(CheckpointError):
    """The committed checkpoint is not reproduced byte for byte from its parents. ``tensor`` (name), ``index`` (tuple;
    None for a dtype / shape / presence mismatch), ``committed`` and ``rebuilt`` (element values as strings)."""

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
    """Per-channel scale exponents ``k`` (int64 [N]) of ``rule`` for a parent weight ``[N, K]``; CheckpointError for an
    unknown rule or a weight not 2-D float."""
    _check_rule(rule)
    w = parent_weight
    if not isinstance(w, torch.Tensor) or w.dim() != 2 or not w.is_floating_point():
        raise CheckpointError(
            f"pow2: parent weight must be a 2-D float tensor, got "
            f"{getattr(w, 'dtype', type(w))} {list(getattr(w, 'shape', []))}"
        )
    # The own scale depends only on the row absmax, so quantizing the [N, 1] column of row absmaxes gives the very same
    # scales, at 1/K of the cost.
    absmax_col = w.detach().abs().amax(dim=1, keepdim=True)
    _, s_own = quantize_weight_per_channel(absmax_col)
    k = _nearest_exponent(s_own.reshape(-1))
    if rule == "ceiling":
        absmax = absmax_col.reshape(-1).to(torch.float64)
        kc = _ceiling_exponent(torch.where(absmax > 0, absmax, torch.ones_like(absmax)))
        k = torch.where(absmax > 0, kc, k)
    return k


def requantize_pow2(parent_weight: torch.Tensor, rule: str = "nearest") -> tuple[torch.Tensor, torch.Tensor]:
    """``(q int8 [N, K], scale [N, 1] = 2^k in the weight's dtype)`` of a float parent weight ``[N, K]`` under ``rule``.
    CheckpointError: unknown rule, bad weight, or a ``2^k`` not exactly representable in the weight dtype."""
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

    Snaps stored positive scales (any float dtype, ``[N]`` or ``[N, 1]``) to powers of two (``nearest`` in log2, or
    ``ceiling`` = ``2^ceil(log2 s)``) and returns ``q`` unchanged (same object): the pair no longer represents the
    parent model. Returns ``(q, scale_pow2)``, ``scale_pow2`` of ``scale``'s shape and dtype."""
    _check_rule(rule)
    s64 = scale.to(torch.float64)
    if rule == "nearest":
        k = _nearest_exponent(s64)
    else:
        m, e = torch.frexp(s64)
        k = torch.where(m == 0.5, e - 1, e).to(torch.int64)
    return q, torch.ldexp(torch.ones_like(s64), k).to(scale.dtype)


def _first_difference(a: torch.Tensor, b: torch.Tensor) -> tuple[tuple, str, str]:
    if a.is_floating_point():
        ia = a.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()])
        ib = b.contiguous().view(ia.dtype)
    else:
        ia, ib = a, b
    i = int(torch.nonzero((ia != ib).reshape(-1))[0])
    idx = tuple(int(v) for v in torch.unravel_index(torch.tensor(i), a.shape)) if a.dim() else ()
    return idx, repr(a.reshape(-1)[i].item()), repr(b.reshape(-1)[i].item())


def compare_states(
    committed: Mapping[str, torch.Tensor], rebuilt: Mapping[str, torch.Tensor], committed_where: str = "committed"
) -> dict[str, str]:
    """``{tensor name: tensor_digest}`` if the two states are byte-for-byte equal, else ReconstructionGateError for the
    first tensor (natural name order) missing on one side or differing in dtype, shape or bytes (index and values)."""
    digests = {}
    for name in sorted(
        set(committed) | set(rebuilt), key=lambda n: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", n)]
    ):
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
        dc = tensor_digest(c)
        if dc != tensor_digest(r):  # same dtype and shape: some bytes differ
            idx, vc, vr = _first_difference(c, r)
            msg = f"tensor {name!r} element {list(idx)}: committed {vc}, rebuilt {vr}"
            raise ReconstructionGateError(f"reconstruction gate failed: {committed_where}: {msg}", name, idx, vc, vr)
        digests[name] = dc
    return digests


def reconstruction_gate(
    parent_dir, committed_dir, quantizer: Optional[Callable] = None, parent: Optional[tuple] = None, device="cpu"
) -> dict:
    """Rebuild the committed checkpoint from its parents with ``quantizer`` (run on ``device``:
    ``quantize_state_w8a8``; ``parent`` as ``build_w8a8_checkpoint``'s) and require a byte-for-byte match
    (:func:`compare_states`); returns
    ``{"passed": True, "tensors", "state_digest", "parent_digest", "tensor_digests"}``. CheckpointError: unreadable
    inputs."""
    ccfg = read_config(committed_dir)
    if not isinstance(ccfg.get("quantization_config") or ccfg.get("compression_config"), dict):
        raise CheckpointError(
            f"{Path(committed_dir) / 'config.json'}: no quantization_config (not a committed W8A8 checkpoint)"
        )
    config, state, pdigest = parent_with_digest(parent_dir, parent)
    _, committed = load_qwen3_state(committed_dir)
    with memo.scope():  # the committed tensors hashed once (comparison, then state digest)
        rebuilt = quantize_state_w8a8(config, state, quantizer, device)
        tensor_digests([*committed.values(), *rebuilt.values()])  # in threads, remembered for compare_states
        digests = compare_states(committed, rebuilt, committed_where=str(committed_dir))
        return {
            "passed": True,
            "tensors": len(digests),
            "state_digest": state_digest(committed),
            "parent_digest": pdigest(),
            "tensor_digests": digests,
        }


def build_pow2_checkpoint(
    parent_dir,
    committed_dir,
    out_dir,
    rule: str = "nearest",
    gate_quantizer: Optional[Callable] = None,
    parent: Optional[tuple] = None,
    device="cpu",
    gate: Optional[dict] = None,
):
    """The ``W8A8Checkpoint`` with power-of-two scales under ``rule``, requantized from the parent and written to
    ``out_dir`` only after :func:`reconstruction_gate` (with ``gate_quantizer``) passed against ``committed_dir``;
    both quantize on ``device`` (``quantize_state_w8a8``: the same bytes). ``parent``: as
    ``build_w8a8_checkpoint``'s; ``gate``: the passed gate's result for these very parent and committed checkpoint
    (``reference.model.artifacts`` keeps one per pair), else the gate runs here."""
    _check_rule(rule)
    config, state, pdigest = parent_with_digest(parent_dir, parent)
    if gate is None:
        gate = reconstruction_gate(parent_dir, committed_dir, gate_quantizer, (config, state, pdigest()), device)
    with memo.scope():  # each built tensor hashed once (meta, then the returned checkpoint)
        tensors = quantize_state_w8a8(config, state, lambda t: requantize_pow2(t, rule), device)
        meta = {"scale_rule": f"pow2-{rule}", "parent_digest": gate["parent_digest"]}
        meta |= {"committed_digest": gate["state_digest"], "reconstruction_gate": "passed"}
        meta |= {"state_digest": state_digest(tensors), "quantizer": "reference.model.pow2.requantize_pow2"}
        return write_w8a8_dir(parent_dir, out_dir, config, tensors, meta)
