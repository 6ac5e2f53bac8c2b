"""conformance.study.bootstrap: reproducible, and right on data with a known answer."""

import numpy as np
import pytest

from conformance.study import bootstrap as bs


def test_same_seed_gives_identical_numbers_and_another_seed_does_not():
    rng = np.random.default_rng(1)
    sums, base = rng.normal(200, 5, 24), rng.normal(199, 5, 24)
    counts = np.full(24, 127.0)
    one = bs.relative_change_interval(sums, base, counts, 10_000, seed=7)
    two = bs.relative_change_interval(sums, base, counts, 10_000, seed=7)
    other = bs.relative_change_interval(sums, base, counts, 10_000, seed=8)
    assert one == two
    assert (other.lo, other.hi) != (one.lo, one.hi)
    assert other.point == one.point  # the point estimate does not depend on the seed


def _coverage(draw, interval, truth, level, n_sets=400):
    """Fraction of ``n_sets`` seeded synthetic data sets whose interval covers ``truth``."""
    rng = np.random.default_rng(7)
    return sum(interval(draw(rng), i, level).covers(truth) for i in range(n_sets)) / n_sets


#: 90 % +- 3 points: two binomial sds over 400 sets (1.5 points each)
BAND = (0.87, 0.93)


def test_mean_interval_covers_a_known_mean_at_its_nominal_rate_and_no_other():
    # skewed data (exponential, true mean 2.0), 200 draws per set so the percentile
    # interval's small-sample under-coverage is gone; a wrong level leaves the band
    # (new-user pass 2026-12-01e: the old [0.83, 0.96] band also passed 85 % and 95 %)
    def draw(rng):
        return rng.exponential(2.0, 200)

    def interval(d, i, level):
        return bs.mean_interval(d, n_resamples=2000, seed=i, level=level)

    cov = {lvl: _coverage(draw, interval, 2.0, lvl) for lvl in (0.85, 0.9, 0.95)}
    assert BAND[0] <= cov[0.9] <= BAND[1], cov
    assert cov[0.85] < BAND[0] and cov[0.95] > BAND[1], cov


def test_paired_window_interval_covers_a_known_shift_at_its_nominal_rate_and_no_other():
    # the study's own statistic: paired per-window NLL sums (128 windows of 100-127
    # tokens), the arm's per-token NLL higher by N(0.02, 0.05) per window, so the
    # true log perplexity ratio is 0.02 nats/token
    def draw(rng):
        base = rng.normal(400.0, 30.0, 128)
        counts = rng.integers(100, 128, 128).astype(float)
        return base + counts * rng.normal(0.02, 0.05, 128), base, counts

    def interval(d, i, level):
        return bs.paired_log_ratio_interval(*d, 2000, seed=i, level=level)

    cov = {lvl: _coverage(draw, interval, 0.02, lvl) for lvl in (0.85, 0.9, 0.95)}
    assert BAND[0] <= cov[0.9] <= BAND[1], cov
    assert cov[0.85] < BAND[0] and cov[0.95] > BAND[1], cov


def test_paired_change_with_a_constant_shift_is_exact_with_zero_width():
    # every window's NLL sum rises by exactly 2.54 nats over 127 tokens -> mean NLL
    # +0.02 nats/token, so ppl ratio = exp(0.02) in every resample
    base = np.linspace(300.0, 420.0, 16)
    counts = np.full(16, 127.0)
    iv = bs.relative_change_interval(base + 2.54, base, counts, 10_000, seed=0)
    assert iv.point == pytest.approx(np.expm1(0.02), rel=1e-12)
    assert iv.lo == pytest.approx(iv.point, rel=1e-12) and iv.hi == pytest.approx(iv.point, rel=1e-12)
    lr = bs.paired_log_ratio_interval(base + 2.54, base, counts, 10_000, seed=0)
    assert lr.point == pytest.approx(0.02, rel=1e-12)


def test_perplexity_point_is_exp_of_pooled_mean_nll():
    sums, counts = np.array([10.0, 30.0]), np.array([5.0, 15.0])
    iv = bs.perplexity_interval(sums, counts, 10_000, seed=0)
    assert iv.point == pytest.approx(np.exp(2.0))
    assert iv.lo == pytest.approx(np.exp(2.0)) and iv.hi == pytest.approx(np.exp(2.0))


def test_resampling_is_whole_units_with_replacement():
    idx = bs.resample_indices(5, 1000, seed=3)
    assert idx.shape == (1000, 5) and idx.min() == 0 and idx.max() == 4
    assert any(len(set(r)) < 5 for r in idx.tolist())  # with replacement


@pytest.mark.parametrize(
    "call",
    [
        lambda: bs.percentile_interval(np.ones(3), 1.5),
        lambda: bs.mean_interval([]),
        lambda: bs.relative_change_interval(np.ones(3), np.ones(4), np.ones(3)),
        lambda: bs.perplexity_interval(np.ones(2), np.zeros(2)),
    ],
)
def test_bad_input_raises_one_line_error(call):
    with pytest.raises(bs.BootstrapError):
        call()
