"""Part 1 of the power-of-two study: the reconstruction gate, under both quantization rules real tools use.

compressed-tensors computes the per-channel scale ``absmax / 127.5`` in the weight's dtype and quantizes
``q = clamp(rint(w / scale), -128, 127)``, dividing in the weight's dtype on its torch path (rule ``cpu``,
``_quantize`` in compressed_tensors/quantization/lifecycle/forward_helpers.py) or in float32 in its CUDA Triton
kernel (rule ``cuda-triton``, ``_quantize_triton``). The gate rebuilds a committed own-scale checkpoint from its
float parent under each rule and says which reproduces it byte for byte, or names each rule's first difference.
Dividing by ``2^k`` is exact in every float dtype, so the power-of-two arms are rule-independent; the gate
verifies that on every layer (:func:`pow2_rule_independence`).
"""

from __future__ import annotations

from typing import Optional

import torch

from reference.errors import CheckpointError, first_line
from reference.model.checkpoint import linear_names
from reference.model.pow2 import ReconstructionGateError, reconstruction_gate, requantize_pow2
from reference.quantize import quantize_weight_per_channel

#: Rule name -> ``division`` argument of reference.quantize.quantize_weight_per_channel.
RULES = {"cpu": "weight_dtype", "cuda-triton": "float32"}
RULE_TEXT = {
    "cpu": "compressed-tensors torch path (CPU): w / scale in the weight dtype",
    "cuda-triton": "compressed-tensors Triton path (CUDA): float32(w) / float32(scale)",
}


def rule_quantizer(rule: str):
    """A rule's weight quantizer ``w [N,K] float -> (q int8 [N,K], scale [N,1])``; CheckpointError: unknown rule."""
    if rule not in RULES:
        raise CheckpointError(f"quantization rule {rule!r} is not one of {sorted(RULES)}")
    division = RULES[rule]

    def quantize(w: torch.Tensor):
        return quantize_weight_per_channel(w, division=division)

    quantize.__name__ = f"quantize_weight_per_channel[division={division}]"
    return quantize


def which_rule(parent_dir, committed_dir, parent: Optional[tuple] = None) -> dict:
    """The reconstruction gate under every rule, ``parent``: optional pre-loaded ``(config, state)``.

    Returns ``{"committed_dir", "reproduced_by": [rules], "rule": the first that passed, "results": {rule:
    {"passed": True, "tensors", "state_digest", "parent_digest"} or {"passed": False, "message", "tensor",
    "index", "committed", "rebuilt"}}}``. Raises ReconstructionGateError when no rule reproduces the checkpoint
    (naming each rule's first difference), CheckpointError for an unreadable checkpoint.
    """
    results = {}
    for rule in RULES:
        try:
            g = reconstruction_gate(parent_dir, committed_dir, quantizer=rule_quantizer(rule), parent=parent)
            results[rule] = {"passed": True, **{k: g[k] for k in ("tensors", "state_digest", "parent_digest")}}
        except ReconstructionGateError as e:
            index = None if e.index is None else list(e.index)
            results[rule] = dict(passed=False, message=str(e), tensor=e.tensor, index=index)
            results[rule].update(committed=e.committed, rebuilt=e.rebuilt)
    passed = [r for r in RULES if results[r]["passed"]]
    if not passed:
        first = results["cpu"]
        raise ReconstructionGateError(
            f"reconstruction gate failed under both rules: {committed_dir} is reproduced neither by "
            + "; nor by ".join(
                f"{r} (first difference: tensor {res['tensor']!r} element {res['index']}: "
                f"committed {res['committed']}, rebuilt {res['rebuilt']})"
                for r, res in results.items()
            ),
            *(first[k] for k in ("tensor", "index", "committed", "rebuilt")),
        )
    return {"committed_dir": str(committed_dir), "reproduced_by": passed, "rule": passed[0], "results": results}


def rule_disagreement(config: dict, state: dict) -> dict:
    """Int8 values that differ between the two rules on this model's weights (the scales are equal by
    construction): ``{"elements", "differing", "fraction", "max_abs_diff", "layers": {name: differing}, "first":
    {layer, index, w_bits, scale_bits, w, scale, cpu, cuda_triton} or None}``."""
    qa, qb = rule_quantizer("cpu"), rule_quantizer("cuda-triton")
    total = diff = max_abs = 0
    layers, first = {}, None
    for name in linear_names(config):
        w = state[f"{name}.weight"]
        a, sa = qa(w)
        b, sb = qb(w)
        if not torch.equal(sa.view(torch.uint8), sb.view(torch.uint8)):  # pragma: no cover - same code path
            raise CheckpointError(f"{name}: the two rules computed different scales")
        d = a != b
        n = layers[name] = int(d.sum())
        total += a.numel()
        diff += n
        if n:
            max_abs = max(max_abs, int((a.to(torch.int16) - b.to(torch.int16)).abs().max()))
            if first is None and w.dtype in (torch.bfloat16, torch.float16):
                r, c = (int(v) for v in d.nonzero()[0])
                first = {
                    "layer": name,
                    "index": [r, c],
                    "w_bits": f"0x{int(w[r, c].view(torch.int16)) & 0xFFFF:04X}",
                    "scale_bits": f"0x{int(sa[r, 0].view(torch.int16)) & 0xFFFF:04X}",
                    "w": float(w[r, c]),
                    "scale": float(sa[r, 0]),
                    "cpu": int(a[r, c]),
                    "cuda_triton": int(b[r, c]),
                }
    return {
        "elements": total,
        "differing": diff,
        "fraction": diff / total if total else 0.0,
        "max_abs_diff": max_abs,
        "layers": layers,
        "first": first,
    }


def pow2_rule_independence(config: dict, state: dict, rules=("nearest", "ceiling")) -> dict:
    """Per layer and pow2 rule, ``requantize_pow2`` (float64 division) vs division by the same ``2^k`` in the
    weight dtype and in float32: ``{pow2 rule: {"layers", "differing_cpu", "differing_cuda_triton"}}``. Raises
    CheckpointError when any element differs (the arms would depend on the rule)."""
    out = {}
    for prule in rules:
        dc = dt = 0
        for name in linear_names(config):
            w = state[f"{name}.weight"]
            q, s = requantize_pow2(w, prule)
            s_w = s.to(w.dtype)
            # the same RNE + clamp as the library's round_to_quantized_type_args
            q_cpu = torch.round(torch.clamp(w / s_w, -128, 127)).to(torch.int8)
            q_f32 = torch.round(torch.clamp(w.float() / s_w.float(), -128, 127)).to(torch.int8)
            n_c, n_t = int((q_cpu != q).sum()), int((q_f32 != q).sum())
            if n_c or n_t:
                raise CheckpointError(
                    f"{name}: pow2-{prule} weights depend on the division rule "
                    f"({n_c} / {n_t} elements differ from the exact division)"
                )
            dc, dt = dc + n_c, dt + n_t
        out[prule] = {"layers": len(linear_names(config)), "differing_cpu": dc, "differing_cuda_triton": dt}
    return out


def library_check(config: dict, state: dict, max_layers: Optional[int] = None) -> dict:
    """The first ``max_layers`` (None: all) parent linears quantized by compressed-tensors itself (torch path:
    ``calculate_qparams`` on the row min / max, ``quantize(..., dtype=int8)``), compared bytewise with rule ``cpu``:
    ``{"installed": False, "reason"}`` or ``{"installed": True, "version", "layers", "identical_q",
    "identical_scale", "first_difference", "path"}``."""
    try:
        import compressed_tensors
        from compressed_tensors.quantization import QuantizationArgs
        from compressed_tensors.quantization.lifecycle.forward import quantize
        from compressed_tensors.quantization.utils import calculate_qparams
    except Exception as e:  # noqa: BLE001 -- optional dependency, any import failure
        return {"installed": False, "reason": f"{type(e).__name__}: {first_line(e, None)}"}
    args = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="channel")
    ours = rule_quantizer("cpu")
    names = linear_names(config)[:max_layers]
    same_q, same_s, first = 0, 0, None
    for name in names:
        w = state[f"{name}.weight"].cpu()
        s, zp = calculate_qparams(torch.amin(w, dim=1, keepdim=True), torch.amax(w, dim=1, keepdim=True), args)
        q = quantize(w, s, zp, args, dtype=torch.int8)
        rq, rs = ours(w)
        eq_q = torch.equal(q, rq)
        eq_s = s.dtype == rs.dtype and torch.equal(s.reshape(-1).view(torch.uint8), rs.reshape(-1).view(torch.uint8))
        same_q += eq_q
        same_s += eq_s
        if (not eq_q or not eq_s) and first is None:
            first = {"layer": name, "q_equal": eq_q, "scale_equal": eq_s}
    return {
        "installed": True,
        "version": compressed_tensors.__version__,
        "layers": len(names),
        "identical_q": same_q,
        "identical_scale": same_s,
        "first_difference": first,
        "path": "compressed_tensors.quantization.lifecycle.forward.quantize on CPU tensors (torch path)",
    }


def run_gate(parent_dir, committed_dir, parent: tuple, library_layers: Optional[int] = None) -> dict:
    """The gate section of the study report (``parent``: ``(config, state)`` of ``parent_dir``): ``{"rules",
    "which_rule", "rule_disagreement", "pow2_rule_independence", "library"}``. Raises as :func:`which_rule` and
    :func:`pow2_rule_independence`."""
    config, state = parent
    return {
        "rules": dict(RULE_TEXT),
        "which_rule": which_rule(parent_dir, committed_dir, parent=parent),
        "rule_disagreement": rule_disagreement(config, state),
        "pow2_rule_independence": pow2_rule_independence(config, state),
        "library": library_check(config, state, library_layers),
    }
