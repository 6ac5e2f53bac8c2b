"""Part 6 of the power-of-two study: the pictures (matplotlib, Agg backend).

* ``layer_agreement.png`` -- per captured layer, elements where kernels A
  and B differ (per million) under own, pow2-nearest and pow2-ceiling scales;
* ``flip_rate.png`` -- teacher-forced flip rate per decile of A's top-2
  logit margin, own vs power-of-two scales;
* ``perplexity.png`` -- perplexity of every arm with its bootstrap interval,
  and the relative change vs own scales with its paired interval.
"""

from __future__ import annotations

from pathlib import Path


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> str:
    """Lay out ``fig``, write it to ``path`` as PNG (atomically), close it;
    returns the file name."""
    import io

    from reference.fileio import atomic_write_bytes

    fig.tight_layout()
    buf = io.BytesIO()
    # fixed metadata: same numbers -> same bytes
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    atomic_write_bytes(path, buf.getvalue())
    _plt().close(fig)
    return path.name


def plot_layer_agreement(layers: dict, path: Path, title: str) -> str:
    """Grouped bars: differing elements per million per layer and mode.

    Args:
        layers: ``{mode: [per-layer records]}`` (``layer_agreement``).
    """
    plt = _plt()
    import numpy as np

    modes = list(layers)
    names = [r["layer"] for r in layers[modes[0]]]
    short = [
        n.replace("model.layers.", "L").replace("self_attn.", "").replace("mlp.", "").replace("_proj", "")
        for n in names
    ]
    x = np.arange(len(names))
    w = 0.8 / max(1, len(modes))
    fig, ax = plt.subplots(figsize=(max(8, len(names) * 0.32), 4))
    for i, mode in enumerate(modes):
        vals = [(r.get("differing", 0) / r["n_elements"] * 1e6) if r.get("n_elements") else 0.0 for r in layers[mode]]
        ax.bar(x + (i - (len(modes) - 1) / 2) * w, vals, w, label=mode)
    ax.set_xticks(x)
    ax.set_xticklabels(short, rotation=90, fontsize=7)
    ax.set_ylabel("elements differing A vs B (per million)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_flip_rate(modes: dict, path: Path, title: str) -> str:
    """Flip rate (%) per margin decile, one line per scale mode."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for mode, rec in modes.items():
        d = rec["deciles"]
        ax.plot(
            [r["decile"] for r in d],
            [100 * r["rate"] for r in d],
            marker="o",
            label=f"{mode} ({rec['flips']}/{rec['positions']} flips)",
        )
    ax.set_xlabel("decile of kernel A's top-2 logit margin (1 = smallest)")
    ax.set_ylabel("flip rate A vs B (%)")
    ax.set_xticks(range(1, 11))
    ax.set_ylim(bottom=0)  # a rate: no negative axis when every decile is 0
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_perplexity(acc: dict, path: Path, title: str) -> str:
    """Two panels: perplexity per arm with its interval; relative change vs
    own scales (%) with its paired interval."""
    plt = _plt()
    arms = list(acc["arms"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    pp = [acc["arms"][a]["perplexity"] for a in arms]
    ax1.errorbar(
        range(len(arms)),
        [p["point"] for p in pp],
        yerr=[[p["point"] - p["lo"] for p in pp], [p["hi"] - p["point"] for p in pp]],
        fmt="o",
        capsize=4,
    )
    ax1.set_xticks(range(len(arms)))
    ax1.set_xticklabels(arms, rotation=20, fontsize=8)
    ax1.set_ylabel("held-out perplexity")
    ax1.set_title("perplexity (window-bootstrap interval)", fontsize=9)
    rel = [a for a in arms if "rel_change_vs_own" in acc["arms"][a]]
    rc = [acc["arms"][a]["rel_change_vs_own"] for a in rel]
    ax2.errorbar(
        range(len(rel)),
        [100 * r["point"] for r in rc],
        yerr=[[100 * (r["point"] - r["lo"]) for r in rc], [100 * (r["hi"] - r["point"]) for r in rc]],
        fmt="o",
        capsize=4,
        color="C3",
    )
    ax2.axhline(0.0, color="grey", lw=0.8)
    ax2.set_xticks(range(len(rel)))
    ax2.set_xticklabels(rel, rotation=20, fontsize=8)
    ax2.set_ylabel("change vs W8A8 own scales (%)")
    ax2.set_yscale("symlog", linthresh=1.0)
    ax2.set_title("relative change, paired bootstrap interval", fontsize=9)
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)
