"""Part 4 of the power-of-two study: the accuracy cost.

Held-out perplexity of :data:`ARMS` on the same windows, every W8A8 arm through kernel A; each arm's change vs
``own`` (``ppl_arm / ppl_own - 1``) with a paired window bootstrap. ``wrong`` and ``pow2-nearest`` carry the same
scales (checked), so in log perplexity, exactly::

    log(ppl_wrong / ppl_own) = log(ppl_wrong / ppl_pow2n)  (weight-scale mismatch)
                             + log(ppl_pow2n / ppl_own)    (the power-of-two constraint)
"""

from __future__ import annotations

import numpy as np
import torch

from conformance.study.bootstrap import paired_log_ratio_interval, perplexity_interval, relative_change_interval

ARMS = ("bf16", "own", "pow2-nearest", "pow2-ceiling", "wrong")


def window_nll(tf) -> tuple[np.ndarray, np.ndarray]:
    """Per-window NLL sums (float64 [W], nats) and predicted-token counts ([W]) of a ``TeacherForced``."""
    nll = tf.nll.double().numpy()
    return nll.sum(axis=1), np.full(nll.shape[0], nll.shape[1], dtype=np.float64)


def same_scales(ctx, a: str = "wrong", b: str = "pow2-nearest") -> bool:
    """Whether two weight arms carry bit-identical scales on every layer."""
    wa, wb = ctx.weights(a), ctx.weights(b)
    return all(torch.equal(wa[n].scale.view(torch.int32), wb[n].scale.view(torch.int32)) for n in wa)


def accuracy_from_nll(sums: dict, counts: np.ndarray, n_resamples: int, seed: int, level: float) -> dict:
    """``{"arms": {arm: {"perplexity", "mean_nll", "rel_change_vs_own" (not for own)}}, "decomposition"
    (when wrong and pow2-nearest are present)}`` from ``sums`` ``{arm: float [W]}`` (needs ``own``) and
    ``counts`` [W]; intervals as ``Interval.to_dict()``."""
    boot = (n_resamples, seed, level)
    out = {"arms": {}}
    for arm, s in sums.items():
        rec = {"perplexity": perplexity_interval(s, counts, *boot).to_dict(), "mean_nll": float(s.sum() / counts.sum())}
        if arm != "own":
            rec["rel_change_vs_own"] = relative_change_interval(s, sums["own"], counts, *boot).to_dict()
        out["arms"][arm] = rec
    if "wrong" in sums and "pow2-nearest" in sums:
        total = paired_log_ratio_interval(sums["wrong"], sums["own"], counts, *boot)
        mism = paired_log_ratio_interval(sums["wrong"], sums["pow2-nearest"], counts, *boot)
        cons = paired_log_ratio_interval(sums["pow2-nearest"], sums["own"], counts, *boot)
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


def run_accuracy(ctx, n_windows, window_len, n_resamples, seed, level, batch_size=8, progress=None) -> dict:
    """Part 4 on a ``StudyContext`` (``progress``: optional ``str -> None`` callback): :func:`accuracy_from_nll`'s dict plus ``windows``, ``window_len``,
    ``predicted_tokens``, ``kernel``, ``same_scales_wrong_vs_pow2_nearest`` and ``bootstrap``."""
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
