"""The study's pictures (matplotlib, Agg): ``layer_agreement.png`` (elements differing A vs B per layer and scale
mode), ``flip_rate.png`` (teacher-forced flip rate per decile of A's margin) and ``perplexity.png`` (perplexity per
arm and change vs own scales, with their bootstrap intervals). Same numbers -> same bytes.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from reference.fileio import atomic_write_bytes


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> str:
    """Write ``fig`` to ``path`` as PNG (atomically), close it; returns the file name."""
    fig.tight_layout()
    buf = io.BytesIO()
    # fixed metadata: same numbers -> same bytes
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    atomic_write_bytes(path, buf.getvalue())
    _plt().close(fig)
    return path.name


def plot_layer_agreement(layers: dict, path: Path, title: str) -> str:
    """Grouped bars of differing elements per million; ``layers``: ``{mode: [per-layer records]}``."""
    plt = _plt()
    modes = list(layers)
    names = [r["layer"] for r in layers[modes[0]]]
    short = [n.replace("model.layers.", "L").replace("self_attn.", "").replace("mlp.", "") for n in names]
    short = [n.replace("_proj", "") for n in short]
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
        d, label = rec["deciles"], f"{mode} ({rec['flips']}/{rec['positions']} flips)"
        ax.plot([r["decile"] for r in d], [100 * r["rate"] for r in d], marker="o", label=label)
    ax.set_xlabel("decile of kernel A's top-2 logit margin (1 = smallest)")
    ax.set_ylabel("flip rate A vs B (%)")
    ax.set_xticks(range(1, 11))
    ax.set_ylim(bottom=0)  # a rate: no negative axis when every decile is 0
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _intervals(ax, labels: list, ivs: list, scale: float, **kw) -> None:
    """Points with asymmetric error bars, ``scale`` times each interval dict's ``point`` / ``lo`` / ``hi``."""
    lo, hi = [scale * (r["point"] - r["lo"]) for r in ivs], [scale * (r["hi"] - r["point"]) for r in ivs]
    ax.errorbar(range(len(labels)), [scale * r["point"] for r in ivs], yerr=[lo, hi], fmt="o", capsize=4, **kw)


def plot_perplexity(acc: dict, path: Path, title: str) -> str:
    """Perplexity per arm, and relative change vs own scales (%), with their intervals."""
    plt = _plt()
    arms = list(acc["arms"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    _intervals(ax1, arms, [acc["arms"][a]["perplexity"] for a in arms], 1)
    ax1.set_xticks(range(len(arms)))
    ax1.set_xticklabels(arms, rotation=20, fontsize=8)
    ax1.set_ylabel("held-out perplexity")
    ax1.set_title("perplexity (window-bootstrap interval)", fontsize=9)
    rel = [a for a in arms if "rel_change_vs_own" in acc["arms"][a]]
    _intervals(ax2, rel, [acc["arms"][a]["rel_change_vs_own"] for a in rel], 100, color="C3")
    ax2.axhline(0.0, color="grey", lw=0.8)
    ax2.set_xticks(range(len(rel)))
    ax2.set_xticklabels(rel, rotation=20, fontsize=8)
    ax2.set_ylabel("change vs W8A8 own scales (%)")
    ax2.set_yscale("symlog", linthresh=1.0)
    ax2.set_title("relative change, paired bootstrap interval", fontsize=9)
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)
