"""Part 1 of the power-of-two study: the reconstruction gate, knowing both
quantization rules that real tools use.

compressed-tensors (the library llm-compressor writes W8A8 checkpoints with)
computes the per-channel scale ``absmax / 127.5`` in the weight's dtype and
then quantizes ``q = clamp(rint(w / scale), -128, 127)`` by one of two paths:

* ``cpu``: its torch path (``_quantize`` in
  compressed_tensors/quantization/lifecycle/forward_helpers.py) divides in
  the weight's dtype -- what :func:`reference.quantize.quantize_weight_per_channel`
  reproduces (``division="weight_dtype"``, verified against the library in
  tests/conformance/study/test_gate.py);
* ``cuda-triton``: for CUDA tensors its Triton kernel (``_quantize_triton``,
  ``tl.div_rn(x.to(float32), scale.to(float32))``) divides in float32
  (``division="float32"``). For bf16 weights about 8 % of the int8 values
  then differ by one (e.g. w = 0x3CC7, scale = 0x3A25: the bf16 quotient
  38.5 rounds to 38, the float32 quotient 38.59 to 39).

The gate rebuilds a committed own-scale checkpoint from its float parent
under each rule (:func:`reference.model.pow2.reconstruction_gate` with that
rule's quantizer) and says which rule reproduces it byte for byte, or that
neither does (naming each rule's first differing tensor and element).

Requantized power-of-two arms and the rule: dividing by ``2^k`` is exact in
bf16, fp16 and float32 alike (absent underflow), so ``w / 2^k`` is the same
number under both rules and :func:`reference.model.pow2.requantize_pow2`
(float64 division) gives the one int8 tensor both rules give. The gate
verifies this on every layer (:func:`pow2_rule_independence`) instead of
assuming it; if a layer ever differed, the study stops.
"""

from __future__ import annotations

from typing import Optional

import torch

from reference.errors import CheckpointError, first_line
from reference.model.checkpoint import linear_names

#: Rule name -> ``division`` argument of reference.quantize.quantize_weight_per_channel.
RULES = {"cpu": "weight_dtype", "cuda-triton": "float32"}
RULE_TEXT = {
    "cpu": "compressed-tensors torch path (CPU): w / scale in the weight dtype",
    "cuda-triton": "compressed-tensors Triton path (CUDA): float32(w) / float32(scale)",
}


def rule_quantizer(rule: str):
    """The weight quantizer of a rule: ``w [N,K] float -> (q int8 [N,K], scale [N,1])``.

    Raises:
        CheckpointError: unknown rule.
    """
    if rule not in RULES:
        raise CheckpointError(f"quantization rule {rule!r} is not one of {sorted(RULES)}")
    from reference.quantize import quantize_weight_per_channel

    division = RULES[rule]

    def quantize(w: torch.Tensor):
        return quantize_weight_per_channel(w, division=division)

    quantize.__name__ = f"quantize_weight_per_channel[division={division}]"
    return quantize


def which_rule(parent_dir, committed_dir, parent: Optional[tuple] = None) -> dict:
    """Run the reconstruction gate under every rule.

    Args:
        parent_dir: float parent Qwen3 directory.
        committed_dir: committed own-scale compressed-tensors W8A8 checkpoint.
        parent: optional pre-loaded ``(config, state)`` of ``parent_dir``.

    Returns:
        ``{"committed_dir", "reproduced_by": [rules], "rule": first rule that
        passed, "results": {rule: {"passed", "tensors", "state_digest"} or
        {"passed": False, "message", "tensor", "index", "committed",
        "rebuilt"}}}``.

    Raises:
        ReconstructionGateError: no rule reproduces the checkpoint (the
            message names each rule's first differing tensor / element).
        CheckpointError: unreadable parent or committed checkpoint.
    """
    from reference.model.pow2 import ReconstructionGateError, reconstruction_gate

    results = {}
    for rule in RULES:
        try:
            g = reconstruction_gate(parent_dir, committed_dir, quantizer=rule_quantizer(rule), parent=parent)
            results[rule] = {
                "passed": True,
                "tensors": g["tensors"],
                "state_digest": g["state_digest"],
                "parent_digest": g["parent_digest"],
            }
        except ReconstructionGateError as e:
            results[rule] = {
                "passed": False,
                "message": str(e),
                "tensor": e.tensor,
                "index": None if e.index is None else list(e.index),
                "committed": e.committed,
                "rebuilt": e.rebuilt,
            }
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
            first["tensor"],
            first["index"],
            first["committed"],
            first["rebuilt"],
        )
    return {"committed_dir": str(committed_dir), "reproduced_by": passed, "rule": passed[0], "results": results}


def rule_disagreement(config: dict, state: dict) -> dict:
    """How far the two rules are apart on this model's weights.

    Returns:
        ``{"elements", "differing", "fraction", "max_abs_diff",
        "layers": {name: differing}, "first": {layer, index, w_bits,
        scale_bits, cpu, cuda_triton}}`` (int8 values that differ between the
        ``cpu`` and ``cuda-triton`` rules; the scales are equal by
        construction).
    """
    qa, qb = rule_quantizer("cpu"), rule_quantizer("cuda-triton")
    total = diff = 0
    max_abs = 0
    layers, first = {}, None
    for name in linear_names(config):
        w = state[f"{name}.weight"]
        a, sa = qa(w)
        b, sb = qb(w)
        if not torch.equal(sa.view(torch.uint8), sb.view(torch.uint8)):  # pragma: no cover - same code path
            raise CheckpointError(f"{name}: the two rules computed different scales")
        d = a != b
        n = int(d.sum())
        layers[name] = n
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
    """Verify that the power-of-two arms are the same under both division rules.

    For every layer and pow2 rule: :func:`reference.model.pow2.requantize_pow2`
    (float64 division) vs the division by the same ``2^k`` scale in the
    weight dtype (``cpu`` rule) and in float32 (``cuda-triton`` rule).

    Returns:
        ``{pow2 rule: {"layers", "differing_cpu", "differing_cuda_triton"}}``.

    Raises:
        CheckpointError: any element differs (the arms would then depend on
            the rule, which the study does not support).
    """
    from reference.model.pow2 import requantize_pow2

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
            dc += n_c
            dt += n_t
        out[prule] = {"layers": len(linear_names(config)), "differing_cpu": dc, "differing_cuda_triton": dt}
    return out


def library_check(config: dict, state: dict, max_layers: Optional[int] = None) -> dict:
    """Quantize the parent weights with compressed-tensors itself (its torch
    path on CPU tensors: ``calculate_qparams`` on the row min / max, then
    ``quantize(..., dtype=int8)``) and compare bytes with the ``cpu`` rule.

    Args:
        max_layers: quantize only the first ``max_layers`` linears (None: all).

    Returns:
        ``{"installed": False, "reason"}`` when the library cannot be
        imported; else ``{"installed": True, "version", "layers",
        "identical_q", "identical_scale", "first_difference"}``.
    """
    try:
        import compressed_tensors
        from compressed_tensors.quantization import QuantizationArgs
        from compressed_tensors.quantization.lifecycle.forward import quantize
        from compressed_tensors.quantization.utils import calculate_qparams
    except Exception as e:  # noqa: BLE001 -- optional dependency, any import failure
        return {"installed": False, "reason": f"{type(e).__name__}: {first_line(e, None)}"}
    args = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="channel")
    ours = rule_quantizer("cpu")
    names = linear_names(config)[: max_layers if max_layers is not None else None]
    same_q = same_s = 0
    first = None
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
    """The whole gate section of the study report.

    Args:
        parent_dir: float parent directory; committed_dir: its committed
            own-scale W8A8 checkpoint; parent: ``(config, state)``.
        library_layers: passed to :func:`library_check` as ``max_layers``.

    Returns:
        ``{"which_rule": ..., "rule_disagreement": ..., "pow2_rule_independence":
        ..., "library": ..., "rules": RULE_TEXT}``.

    Raises:
        ReconstructionGateError: neither rule reproduces the checkpoint.
        CheckpointError: the pow2 arms would depend on the rule.
    """
    config, state = parent
    return {
        "rules": dict(RULE_TEXT),
        "which_rule": which_rule(parent_dir, committed_dir, parent=parent),
        "rule_disagreement": rule_disagreement(config, state),
        "pow2_rule_independence": pow2_rule_independence(config, state),
        "library": library_check(config, state, library_layers),
    }
