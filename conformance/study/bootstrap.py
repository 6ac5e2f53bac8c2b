"""Seeded bootstrap statistics over whole evaluation windows (numpy).

The unit of resampling is the evaluation window, never the token: tokens of
one window share context, so they are not independent, while windows are
disjoint stretches of held-out text (``reference.model.corpus.eval_windows``).
A *paired* bootstrap draws one set of window indices per resample and applies
it to every arm, so the between-window variation that all arms share cancels
in a comparison (Efron & Tibshirani, "An Introduction to the Bootstrap",
1993, ch. 13; Koehn, "Statistical significance tests for machine translation
evaluation", EMNLP 2004, for the paired form).

Intervals are percentile intervals: the ``(1-level)/2`` and ``(1+level)/2``
quantiles of the resampled statistic (Efron & Tibshirani ch. 13.3), numpy's
default linear interpolation. Same seed, same inputs -> bit-identical
numbers (``numpy.random.Generator(PCG64(seed))``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from reference.errors import Int8confError

#: Minimum number of resamples the study accepts (the issue's floor).
MIN_RESAMPLES = 10_000


class BootstrapError(Int8confError, ValueError):
    """Bad bootstrap input (empty data, mismatched arms, bad level)."""


@dataclass(frozen=True)
class Interval:
    """A point estimate with its bootstrap percentile interval.

    Attributes:
        point: the statistic on the original sample.
        lo, hi: interval bounds (same units as ``point``).
        level: nominal coverage, e.g. 0.9.
        n_resamples: bootstrap resamples drawn.
        seed: generator seed.
        se: standard deviation of the resampled statistic.
    """

    point: float
    lo: float
    hi: float
    level: float
    n_resamples: int
    seed: int
    se: float

    def to_dict(self) -> dict:
        """JSON-able dict of the fields."""
        return asdict(self)

    def covers(self, value: float) -> bool:
        """Whether ``lo <= value <= hi``."""
        return self.lo <= value <= self.hi


def resample_indices(n_units: int, n_resamples: int, seed: int) -> np.ndarray:
    """Bootstrap index matrix: int64 ``[n_resamples, n_units]``, each row drawn
    uniformly with replacement from ``range(n_units)``.

    Raises:
        BootstrapError: ``n_units < 1`` or ``n_resamples < 1``.
    """
    if n_units < 1 or n_resamples < 1:
        raise BootstrapError(f"bootstrap needs n_units >= 1 and n_resamples >= 1, got {n_units}, {n_resamples}")
    rng = np.random.Generator(np.random.PCG64(seed))
    return rng.integers(0, n_units, size=(n_resamples, n_units), dtype=np.int64)


def percentile_interval(samples: np.ndarray, level: float) -> tuple[float, float]:
    """``((1-level)/2, (1+level)/2)`` quantiles of ``samples`` (1-D float).

    Raises:
        BootstrapError: level not in (0, 1) or no samples.
    """
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
    """Generic bootstrap of a statistic that is vectorized over resamples.

    Args:
        stat: ``idx int64 [R, n_units] -> float64 [R]``, the statistic of
            each resample (``idx`` rows are unit indices).
        point: the statistic on the original sample.
        n_units: number of resampling units (windows).
        n_resamples, seed, level: see :class:`Interval`.

    Returns:
        :class:`Interval`.
    """
    idx = resample_indices(n_units, n_resamples, seed)
    vals = np.asarray(stat(idx), dtype=np.float64)
    lo, hi = percentile_interval(vals, level)
    return Interval(
        float(point),
        lo,
        hi,
        float(level),
        int(n_resamples),
        int(seed),
        float(vals.std(ddof=1)) if vals.size > 1 else 0.0,
    )


def _check_units(sums: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(sums, dtype=np.float64).reshape(-1)
    c = np.asarray(counts, dtype=np.float64).reshape(-1)
    if s.size == 0 or s.shape != c.shape:
        raise BootstrapError(f"per-window sums {s.shape} and counts {c.shape} must be non-empty and equal in length")
    if np.any(c <= 0):
        raise BootstrapError("every window must hold at least one predicted token")
    return s, c


def mean_interval(values, n_resamples: int = MIN_RESAMPLES, seed: int = 0, level: float = 0.9) -> Interval:
    """Bootstrap interval of the mean of per-unit values (float [n]).

    Source: Efron & Tibshirani 1993, ch. 13 (percentile interval)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0:
        raise BootstrapError("mean_interval: no values")
    return bootstrap(lambda idx: v[idx].mean(axis=1), float(v.mean()), v.size, n_resamples, seed, level)


def perplexity_interval(
    nll_sums, counts, n_resamples: int = MIN_RESAMPLES, seed: int = 0, level: float = 0.9
) -> Interval:
    """Perplexity ``exp(sum NLL / tokens)`` with a window-bootstrap interval.

    Args:
        nll_sums: float [W] summed next-token NLL (nats) per window.
        counts: [W] predicted tokens per window.
    """
    s, c = _check_units(nll_sums, counts)
    point = float(np.exp(s.sum() / c.sum()))
    return bootstrap(
        lambda idx: np.exp(s[idx].sum(axis=1) / c[idx].sum(axis=1)), point, s.size, n_resamples, seed, level
    )


def paired_log_ratio_interval(
    nll_sums_arm, nll_sums_base, counts, n_resamples: int = MIN_RESAMPLES, seed: int = 0, level: float = 0.9
) -> Interval:
    """``log(ppl_arm / ppl_base)`` = difference of mean NLL (nats/token),
    paired over windows (same resampled windows for both arms).

    Args:
        nll_sums_arm, nll_sums_base: float [W] per-window NLL sums of the two
            arms on the same windows; counts: [W] tokens per window.
    """
    a, c = _check_units(nll_sums_arm, counts)
    b, _ = _check_units(nll_sums_base, counts)
    if a.shape != b.shape:
        raise BootstrapError(f"paired arms differ in windows: {a.shape} vs {b.shape}")
    d = a - b
    point = float(d.sum() / c.sum())
    return bootstrap(lambda idx: d[idx].sum(axis=1) / c[idx].sum(axis=1), point, d.size, n_resamples, seed, level)


def relative_change_interval(
    nll_sums_arm, nll_sums_base, counts, n_resamples: int = MIN_RESAMPLES, seed: int = 0, level: float = 0.9
) -> Interval:
    """Relative perplexity change ``ppl_arm / ppl_base - 1`` (unitless, e.g.
    0.012 = +1.2 %), paired window bootstrap: each resample applies the same
    window indices to both arms (same seed -> same resamples as
    :func:`paired_log_ratio_interval`)."""
    a, c = _check_units(nll_sums_arm, counts)
    b, _ = _check_units(nll_sums_base, counts)
    if a.shape != b.shape:
        raise BootstrapError(f"paired arms differ in windows: {a.shape} vs {b.shape}")
    d = a - b
    point = float(np.expm1(d.sum() / c.sum()))
    return bootstrap(
        lambda idx: np.expm1(d[idx].sum(axis=1) / c[idx].sum(axis=1)), point, d.size, n_resamples, seed, level
    )
