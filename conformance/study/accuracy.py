"""Part 4 of the power-of-two study: the accuracy cost.

Held-out perplexity (``reference.model.forward.teacher_forced``: exp of the
mean next-token NLL over every window position but the first) of five arms
on the same windows, all W8A8 arms through kernel A:

* ``bf16`` -- the float model;
* ``own`` -- W8A8 with the committed checkpoint's own scales (the baseline);
* ``pow2-nearest`` / ``pow2-ceiling`` -- requantized from the parents with
  power-of-two scales;
* ``wrong`` -- own int8 weights, scales snapped to the nearest power of two
  without requantizing (``reference.model.pow2.rewrite_scales_pow2_without_requant``).

Each arm's change relative to ``own`` is ``ppl_arm / ppl_own - 1`` with a
paired window bootstrap interval (``conformance.study.bootstrap``).

Decomposition of the wrong arm's damage. ``wrong`` and ``pow2-nearest`` carry
*the same* scales (both snap the own scale to the power of two nearest in
log2; checked here element for element) and differ only in the int8
weights. So, in log perplexity (mean NLL, nats/token), exactly::

    log(ppl_wrong / ppl_own) = log(ppl_wrong / ppl_pow2n)    weight-scale mismatch
                             + log(ppl_pow2n / ppl_own)      the power-of-two constraint

each term with its own paired bootstrap interval (same resamples).
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch

ARMS = ("bf16", "own", "pow2-nearest", "pow2-ceiling", "wrong")


def window_nll(tf) -> tuple[np.ndarray, np.ndarray]:
    """Per-window NLL sums (float64 [W], nats) and predicted-token counts
    ([W]) of a ``TeacherForced``."""
    nll = tf.nll.double().numpy()
    return nll.sum(axis=1), np.full(nll.shape[0], nll.shape[1], dtype=np.float64)


def same_scales(ctx, a: str = "wrong", b: str = "pow2-nearest") -> bool:
    """Whether two weight arms carry bit-identical scales on every layer."""
    wa, wb = ctx.weights(a), ctx.weights(b)
    return all(torch.equal(wa[n].scale.view(torch.int32), wb[n].scale.view(torch.int32)) for n in wa)


def accuracy_from_nll(sums: dict, counts: np.ndarray, n_resamples: int, seed: int, level: float) -> dict:
    """Statistics of part 4 from per-window NLL sums.

    Args:
        sums: ``{arm: float [W]}`` for :data:`ARMS` (at least ``own``).
        counts: [W] predicted tokens per window.

    Returns:
        ``{"arms": {arm: {"perplexity": Interval dict, "mean_nll",
        "rel_change_vs_own": Interval dict (not for own)}},
        "decomposition": {...} (when wrong and pow2-nearest are present)}``.
    """
    from conformance.study.bootstrap import paired_log_ratio_interval, perplexity_interval, relative_change_interval

    out = {"arms": {}}
    for arm, s in sums.items():
        rec = {
            "perplexity": perplexity_interval(s, counts, n_resamples, seed, level).to_dict(),
            "mean_nll": float(s.sum() / counts.sum()),
        }
        if arm != "own":
            rec["rel_change_vs_own"] = relative_change_interval(
                s, sums["own"], counts, n_resamples, seed, level
            ).to_dict()
        out["arms"][arm] = rec
    if "wrong" in sums and "pow2-nearest" in sums:
        total = paired_log_ratio_interval(sums["wrong"], sums["own"], counts, n_resamples, seed, level)
        mism = paired_log_ratio_interval(sums["wrong"], sums["pow2-nearest"], counts, n_resamples, seed, level)
        cons = paired_log_ratio_interval(sums["pow2-nearest"], sums["own"], counts, n_resamples, seed, level)
        out["decomposition"] = {
            "unit": "log perplexity ratio (nats per token)",
            "total_wrong_vs_own": total.to_dict(),
            "weight_scale_mismatch": mism.to_dict(),
            "pow2_constraint": cons.to_dict(),
            "mismatch_share": mism.point / total.point if total.point else float("nan"),
            "constraint_share": cons.point / total.point if total.point else float("nan"),
            "additive_check": abs(mism.point + cons.point - total.point),
        }
    return out


def run_accuracy(
    ctx,
    n_windows: int,
    window_len: int,
    n_resamples: int,
    seed: int,
    level: float,
    batch_size: int = 8,
    progress: Optional[Callable[[str], None]] = None,
) -> dict:
    """Part 4 on a :class:`conformance.study.arms.StudyContext` (kernel A).

    Returns:
        :func:`accuracy_from_nll`'s dict plus ``windows``, ``window_len``,
        ``predicted_tokens``, ``kernel``, ``same_scales_wrong_vs_pow2_nearest``,
        ``bootstrap`` ({n_resamples, seed, level, unit: "window"}).
    """
    say = progress or (lambda s: None)
    win = ctx.windows(n_windows, window_len)
    kern = ctx.kernels[0]
    sums, counts = {}, None
    for arm in ARMS:
        tf = ctx.teacher_forced(kern, arm, win, batch_size)
        sums[arm], counts = window_nll(tf)
        say(f"accuracy {arm}: perplexity {tf.perplexity:.4f}")
    out = accuracy_from_nll(sums, counts, n_resamples, seed, level)
    out.update(
        windows=int(win.shape[0]),
        window_len=int(win.shape[1]),
        predicted_tokens=int(counts.sum()),
        kernel=kern.name,
        same_scales_wrong_vs_pow2_nearest=same_scales(ctx),
        bootstrap={
            "n_resamples": n_resamples,
            "seed": seed,
            "level": level,
            "unit": "window",
            "method": "paired percentile bootstrap over whole windows",
        },
    )
    return out
