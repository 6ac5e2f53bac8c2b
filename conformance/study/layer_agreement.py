"""Part 2 of the power-of-two study: layer-level agreement of two kernels.

Every captured decoder linear (real activations on held-out text) runs through kernels A and B under own and
power-of-two (``nearest``, ``ceiling``) weight scales; outputs are compared on bf16 bits, next to the count the two
*declared* contracts predict on the same operands (``reference.epilogue``). Under power-of-two scales every legal
scale order gives the same bits (DESIGN.md section 1) provided these hold in the layer, which a differing pow2
layer is checked against (if all hold, a kernel departs from its contract):

* ``pow2_scales``: every ``s_w`` is an exact power of two;
* ``bias_point``: no bias, or both kernels add it at the same point;
* ``int32_headroom``: the exact accumulator fits int32;
* ``fp32_normal_range``: every nonzero ``|acc| s_a``, ``|acc| s_w``, ``|acc| s_a s_w`` lies in [2^-126, max].
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch

from conformance.checks.result import merge_histograms
from conformance.kernels.runner import run_kernel
from conformance.kernels.spec import declared_epilogue
from conformance.suite.pairwise import compare_pair
from reference.accumulate import exact_int_mm
from reference.bits import bits_of
from reference.epilogue import apply_epilogue
from reference.model.capture import cached_capture, iter_layer_operands
from reference.validate import normalize_scales, validate_operands

#: Weight modes compared, as (capture scale_mode, pow2 rule, label).
MODES = (("own", "nearest", "own"), ("pow2", "nearest", "pow2-nearest"), ("pow2", "ceiling", "pow2-ceiling"))
#: Tokens kept per capture window (window length 128).
TOKENS_PER_WINDOW = 64
WINDOW_LEN = 128
_FP32_MIN_NORMAL = 2.0**-126
_FP32_MAX = float(torch.finfo(torch.float32).max)


def ensure_capture(
    model_dir,
    tokens: int,
    cache=None,
    committed_dir=None,
    progress: Optional[Callable[[str], None]] = None,
    device: str = "cpu",
):
    """``CaptureSet`` of ``model_dir`` with at least ``tokens`` rows per layer (``ceil(tokens / 64)`` held-out
    windows of 128 tokens, 64 positions each), built once into the cache, resumed if interrupted; ``device``: where
    the float64 forward runs (``capture_model``; the same capture on any device). Raises CaptureError /
    CheckpointError."""
    windows = max(1, math.ceil(tokens / TOKENS_PER_WINDOW))
    return cached_capture(
        model_dir,
        windows=windows,
        window_len=WINDOW_LEN,
        tokens_per_window=TOKENS_PER_WINDOW,
        w8a8_dir=committed_dir,
        cache=cache,
        store_raw=False,
        progress=progress,
        device=device,
    )


def pow2_preconditions(
    ops, spec_a, spec_b, acc: Optional[torch.Tensor] = None, devices: tuple = (None, None)
) -> dict[str, bool]:
    """``{precondition: holds}`` (module docstring) on one layer's GemmOperands; ``acc``: its
    ``exact_int_mm(ops.a, ops.b)`` (int64 [M, N], any device), None computes it; ``devices``: the device types the
    two kernels ran on (their declarations may differ by device: ``kernels.spec.declared_epilogue``)."""
    if acc is None:
        acc = exact_int_mm(ops.a, ops.b)
    sb = ops.scale_b.reshape(-1).to(device=acc.device, dtype=torch.float32)
    sa = ops.scale_a.reshape(-1).to(device=acc.device, dtype=torch.float32)
    acc = acc.to(torch.float64).abs()
    nz = acc > 0
    pa = acc * sa.to(torch.float64)[:, None]
    pw = acc * sb.to(torch.float64)[None, :]
    p = pa * sb.to(torch.float64)[None, :]

    def in_range(x):
        v = x[nz]
        return bool(v.numel() == 0 or (float(v.min()) >= _FP32_MIN_NORMAL and float(v.max()) <= _FP32_MAX))

    return {
        "pow2_scales": bool(torch.all(torch.frexp(sb).mantissa.abs() == 0.5)),
        "bias_point": ops.bias is None
        or len({declared_epilogue(s, d, ops.out_dtype).contract.bias_point for s, d in zip((spec_a, spec_b), devices)})
        == 1,
        "int32_headroom": bool(float(acc.max()) < 2.0**31) if acc.numel() else True,
        "fp32_normal_range": in_range(pa) and in_range(pw) and in_range(p),
    }


def compare_layer(ops, spec_a, spec_b, device: Optional[str] = None) -> dict:
    """Both kernels on one layer's operands, compared: ``compare_pair``'s fields plus ``layer``, ``block``,
    ``proj``, ``M``, ``K``, ``N``, ``paths``, ``differing``, ``predicted_differing`` (where the two declared
    contracts differ), ``a_vs_declared`` / ``b_vs_declared`` (where a kernel departs from its own contract) and,
    for pow2 operands, ``preconditions`` / ``failed_preconditions``."""
    ra = run_kernel(spec_a, ops, device=device)
    rb = run_kernel(spec_b, ops, device=device)
    rec = compare_pair(spec_a, spec_b, ops, ra, rb)
    rec.update(
        layer=ops.name,
        block=ops.meta.get("block"),
        proj=ops.meta.get("proj"),
        M=int(ops.a.shape[0]),
        K=int(ops.a.shape[1]),
        N=int(ops.b.shape[0]),
        paths=[ra.manifest.get("path"), rb.manifest.get("path")],
    )
    # the declared contracts' outputs from one exact accumulator, on the kernels' GPU when they run there
    # (the reference gives the same bits on every device)
    rdev = torch.device(device) if device and torch.device(device).type == "cuda" else ops.a.device
    m, _k, n = validate_operands(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias, ops.out_dtype)
    sa, sw = (s.to(rdev) for s in normalize_scales(ops.scale_a, ops.scale_b, m, n))
    bias = None if ops.bias is None else ops.bias.to(rdev)
    acc = exact_int_mm(ops.a.to(rdev), ops.b.to(rdev))
    ref_a, ref_b = (
        apply_epilogue(
            acc,
            sa,
            sw,
            declared_epilogue(s, r.manifest.get("device"), ops.out_dtype).contract,
            bias=bias,
            out_dtype=ops.out_dtype,
        )
        for s, r in ((spec_a, ra), (spec_b, rb))
    )
    bits = lambda t: bits_of(t.to(rdev))  # noqa: E731
    rec["predicted_differing"] = int((bits(ref_a) != bits(ref_b)).sum())
    if rec["status"] != "error":
        rec["differing"] = rec["n_elements"] - rec["n_equal"]
        rec["a_vs_declared"] = int((bits(ra.output) != bits(ref_a)).sum())
        rec["b_vs_declared"] = int((bits(rb.output) != bits(ref_b)).sum())
    if ops.scale_mode == "pow2":
        pre = rec["preconditions"] = pow2_preconditions(
            ops, spec_a, spec_b, acc=acc, devices=(ra.manifest.get("device"), rb.manifest.get("device"))
        )
        rec["failed_preconditions"] = [k for k, v in pre.items() if not v]
    return rec


def summarize_mode(layers: list[dict], label: str) -> dict:
    """Totals of one mode over :func:`compare_layer` records; for pow2 modes also the differing layers with the
    precondition that failed."""
    ok = [r for r in layers if r["status"] != "error"]
    elements = sum(r["n_elements"] for r in ok)
    differing = sum(r["differing"] for r in ok)
    out = {
        "mode": label,
        "layers": len(layers),
        "layers_identical": sum(r["status"] == "identical" for r in ok),
        "layers_error": [r["layer"] for r in layers if r["status"] == "error"],
        "elements": elements,
        "differing": differing,
        "per_million": differing / elements * 1e6 if elements else 0.0,
        "predicted_differing": sum(r["predicted_differing"] for r in layers),
        "a_vs_declared": sum(r.get("a_vs_declared", 0) for r in ok),
        "b_vs_declared": sum(r.get("b_vs_declared", 0) for r in ok),
        "max_ulp": max((r["max_ulp"] for r in ok), default=0),
        "ulp_histogram": merge_histograms([r["ulp_histogram"] for r in ok]) if ok else {},
    }
    if label != "own":
        out["differing_layers"] = [
            {
                "layer": r["layer"],
                "differing": r["differing"],
                "failed_preconditions": r.get("failed_preconditions", []),
                "explanation": ("precondition failed: " + ", ".join(r["failed_preconditions"]))
                if r.get("failed_preconditions")
                else "all preconditions hold: a kernel departs from its declared contract",
            }
            for r in ok
            if r["differing"]
        ]
    return out


def run_layer_agreement(ctx, tokens: int, progress: Optional[Callable[[str], None]] = None) -> dict:
    """Part 2 on a ``StudyContext``: ``{"capture": {dir, windows, window_len, tokens_per_layer, layers},
    "modes": {label: summary}, "layers": {label: [per-layer records]}}``. The capture is built on
    ``ctx.work_device``."""
    say = progress or (lambda s: None)
    cs = ensure_capture(ctx.model_dir, tokens, ctx.cache, ctx.committed_dir, progress=say, device=ctx.work_device)
    a, b = ctx.kernels
    st = cs.manifest["settings"]
    capture = {"dir": str(cs.dir), **{k: st[k] for k in ("windows", "window_len", "tokens_per_layer")}}
    out = {"capture": dict(capture, layers=len(cs.layer_names())), "modes": {}, "layers": {}}
    for scale_mode, rule, label in MODES:
        recs = out["layers"][label] = [
            compare_layer(ops, a, b, ctx.device) for ops in iter_layer_operands(cs, scale_mode, rule)
        ]
        m = out["modes"][label] = summarize_mode(recs, label)
        say(
            f"layers {label}: {m['layers_identical']}/{m['layers']} bit-identical, "
            f"{m['differing']} of {m['elements']} elements differ (declared contracts predict "
            f"{m['predicted_differing']})"
        )
    return out
