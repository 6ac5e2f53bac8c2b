"""Part 5 of the power-of-two study: teacher-forced flips.

Both kernels replay the same held-out windows; a flip is a position where their argmax tokens differ. Positions
fall into ten equal-count deciles of kernel A's top-2 margin (sorted by margin, ties by position, so ties at
margin 0 cannot empty a decile). A legal epilogue difference moves logits by about one bf16 spacing, so flips
belong in the lowest deciles; flips at large margins point at a kernel off its contract.
"""

from __future__ import annotations

import numpy as np

from conformance.checks.token_flip import bf16_spacing

N_BINS = 10
# Descriptive cut for the report; C7's own threshold is the legal-epilogue envelope (checks/token_flip.py).
REPORTED_MARGIN_SPACINGS = 4


def flip_deciles(tf_a, tf_b, n_bins: int = N_BINS) -> dict:
    """Flip rate per margin decile of two ``TeacherForced`` replays of the same ``[W, T]`` windows.

    Returns ``{"positions", "flips", "flip_rate", "flips_above_4_spacings", "max_flip_margin_spacings",
    "deciles": [{"decile", "positions", "flips", "rate", "margin_min", "margin_max", "margin_median_spacings"}]}``
    (margins in logit units). Raises ValueError when the shapes differ.
    """
    if tuple(tf_a.argmax.shape) != tuple(tf_b.argmax.shape):
        raise ValueError(f"replays differ in shape {tuple(tf_a.argmax.shape)} vs {tuple(tf_b.argmax.shape)}")
    margin = tf_a.margin.reshape(-1).double().numpy()
    spacing = bf16_spacing(tf_a.top1.reshape(-1)).double().numpy()
    flip = (tf_a.argmax != tf_b.argmax).reshape(-1).numpy()
    order = np.lexsort((np.arange(margin.size), margin))
    deciles = []
    for i, idx in enumerate(np.array_split(order, n_bins)):
        if idx.size == 0:
            continue
        m = margin[idx]
        deciles.append(
            {
                "decile": i + 1,
                "positions": int(idx.size),
                "flips": int(flip[idx].sum()),
                "rate": float(flip[idx].mean()),
                "margin_min": float(m.min()),
                "margin_max": float(m.max()),
                "margin_median_spacings": float(np.median(m / spacing[idx])),
            }
        )
    above = flip & (margin > REPORTED_MARGIN_SPACINGS * spacing)
    return {
        "positions": int(margin.size),
        "flips": int(flip.sum()),
        "flip_rate": float(flip.mean()),
        "flips_above_4_spacings": int(above.sum()),
        "max_flip_margin_spacings": float((margin / spacing)[flip].max()) if flip.any() else 0.0,
        "deciles": deciles,
    }


def run_flips(ctx, n_windows, window_len, modes=("own", "pow2-nearest"), batch_size=8, progress=None) -> dict:
    """Part 5 on a ``StudyContext``: ``{"windows", "window_len", "modes": {mode: flip_deciles(...)}}``."""
    say = progress or (lambda s: None)
    win = ctx.windows(n_windows, window_len)
    a, b = ctx.kernels
    out = {"windows": int(win.shape[0]), "window_len": int(win.shape[1]), "modes": {}}
    for mode in modes:
        m = out["modes"][mode] = flip_deciles(
            ctx.teacher_forced(a, mode, win, batch_size), ctx.teacher_forced(b, mode, win, batch_size)
        )
        say(f"flips {mode}: {m['flips']} of {m['positions']} positions")
    return out
