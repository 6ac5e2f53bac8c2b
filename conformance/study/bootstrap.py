"""Seeded percentile bootstrap over whole evaluation windows (numpy).

The resampling unit is the window, never the token (tokens of one window share context). A paired bootstrap
applies one set of window indices per resample to every arm (Efron & Tibshirani 1993, ch. 13; Koehn, EMNLP 2004).
Intervals are the ``(1-level)/2`` and ``(1+level)/2`` quantiles (numpy linear interpolation); same seed, same
inputs -> bit-identical numbers (``numpy.random.Generator(PCG64(seed))``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from reference.errors import Int8confError

#: Minimum number of resamples the study accepts.
MIN_RESAMPLES = 10_000


class BootstrapError(Int8confError, ValueError):
    """Bad bootstrap input (empty data, mismatched arms, bad level)."""


@dataclass(frozen=True)
class Interval:
    """A point estimate with its percentile interval ``[lo, hi]`` (units of ``point``); ``se``: standard
    deviation of the resampled statistic."""

    point: float
    lo: float
    hi: float
    level: float
    n_resamples: int
    seed: int
    se: float

    def to_dict(self) -> dict:
        return asdict(self)

    def covers(self, value: float) -> bool:
        return self.lo <= value <= self.hi


def resample_indices(n_units: int, n_resamples: int, seed: int) -> np.ndarray:
    """int64 ``[n_resamples, n_units]``, rows drawn uniformly with replacement from ``range(n_units)``.
    Raises BootstrapError when either count is < 1."""
    if n_units < 1 or n_resamples < 1:
        raise BootstrapError(f"bootstrap needs n_units >= 1 and n_resamples >= 1, got {n_units}, {n_resamples}")
    rng = np.random.Generator(np.random.PCG64(seed))
    return rng.integers(0, n_units, size=(n_resamples, n_units), dtype=np.int64)


def percentile_interval(samples: np.ndarray, level: float) -> tuple[float, float]:
    """``((1-level)/2, (1+level)/2)`` quantiles of 1-D ``samples``. Raises BootstrapError: level not in (0, 1)
    or no samples."""
    if not 0.0 < level < 1.0:
        raise BootstrapError(f"confidence level {level} is not in (0, 1)")
    s = np.asarray(samples, dtype=np.float64)
    if s.size == 0:
        raise BootstrapError("no bootstrap samples")
    lo, hi = np.quantile(s, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(lo), float(hi)


def bootstrap(
    stat: Callable[[np.ndarray], np.ndarray],
    point: float,
    n_units: int,
    n_resamples: int = MIN_RESAMPLES,
    seed: int = 0,
    level: float = 0.9,
) -> Interval:
    """Bootstrap of a statistic vectorized over resamples: ``stat(idx int64 [R, n_units]) -> float64 [R]``;
    ``point`` is its value on the original sample."""
    vals = np.asarray(stat(resample_indices(n_units, n_resamples, seed)), dtype=np.float64)
    lo, hi = percentile_interval(vals, level)
    se = float(vals.std(ddof=1)) if vals.size > 1 else 0.0
    return Interval(float(point), lo, hi, float(level), int(n_resamples), int(seed), se)


def _check_units(sums: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(sums, dtype=np.float64).reshape(-1)
    c = np.asarray(counts, dtype=np.float64).reshape(-1)
    if s.size == 0 or s.shape != c.shape:
        raise BootstrapError(f"per-window sums {s.shape} and counts {c.shape} must be non-empty and equal in length")
    if np.any(c <= 0):
        raise BootstrapError("every window must hold at least one predicted token")
    return s, c


def _paired(nll_sums_arm, nll_sums_base, counts) -> tuple[np.ndarray, np.ndarray]:
    a, c = _check_units(nll_sums_arm, counts)
    b, _ = _check_units(nll_sums_base, counts)
    if a.shape != b.shape:
        raise BootstrapError(f"paired arms differ in windows: {a.shape} vs {b.shape}")
    return a - b, c


def mean_interval(values, n_resamples: int = MIN_RESAMPLES, seed: int = 0, level: float = 0.9) -> Interval:
    """Interval of the mean of per-unit values (float [n])."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0:
        raise BootstrapError("mean_interval: no values")
    return bootstrap(lambda idx: v[idx].mean(axis=1), float(v.mean()), v.size, n_resamples, seed, level)


def perplexity_interval(nll_sums, counts, n_resamples=MIN_RESAMPLES, seed=0, level=0.9) -> Interval:
    """Perplexity ``exp(sum NLL / tokens)``; ``nll_sums`` float [W] (nats per window), ``counts`` [W] tokens."""
    s, c = _check_units(nll_sums, counts)
    stat = lambda idx: np.exp(s[idx].sum(axis=1) / c[idx].sum(axis=1))  # noqa: E731
    return bootstrap(stat, float(np.exp(s.sum() / c.sum())), s.size, n_resamples, seed, level)


def paired_log_ratio_interval(nll_sums_arm, nll_sums_base, counts, n_resamples=MIN_RESAMPLES, seed=0, level=0.9):
    """``log(ppl_arm / ppl_base)`` (difference of mean NLL, nats/token), paired over the same windows."""
    d, c = _paired(nll_sums_arm, nll_sums_base, counts)
    point = float(d.sum() / c.sum())
    return bootstrap(lambda idx: d[idx].sum(axis=1) / c[idx].sum(axis=1), point, d.size, n_resamples, seed, level)


def relative_change_interval(nll_sums_arm, nll_sums_base, counts, n_resamples=MIN_RESAMPLES, seed=0, level=0.9):
    """``ppl_arm / ppl_base - 1`` (unitless: 0.012 = +1.2 %), paired; same resamples as
    :func:`paired_log_ratio_interval` for the same seed."""
    d, c = _paired(nll_sums_arm, nll_sums_base, counts)
    stat = lambda idx: np.expm1(d[idx].sum(axis=1) / c[idx].sum(axis=1))  # noqa: E731
    return bootstrap(stat, float(np.expm1(d.sum() / c.sum())), d.size, n_resamples, seed, level)
