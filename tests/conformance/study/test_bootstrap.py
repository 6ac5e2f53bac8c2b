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


def test_mean_interval_covers_a_known_mean_at_about_its_nominal_rate():
    # 200 synthetic data sets of 60 exponential draws (skewed) with true mean 2.0;
    # a 90 % interval must cover 2.0 in about 90 % of them. Binomial sd over 200
    # sets is 2.1 points; the percentile interval under-covers slightly for skewed
    # data at n = 60, so accept [0.83, 0.96].
    rng = np.random.default_rng(12345)
    covered = 0
    for i in range(200):
        data = rng.exponential(2.0, 60)
        iv = bs.mean_interval(data, n_resamples=2000, seed=i, level=0.9)
        covered += iv.covers(2.0)
    assert 0.83 <= covered / 200 <= 0.96, covered


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


@pytest.mark.parametrize("call", [
    lambda: bs.percentile_interval(np.ones(3), 1.5),
    lambda: bs.mean_interval([]),
    lambda: bs.relative_change_interval(np.ones(3), np.ones(4), np.ones(3)),
    lambda: bs.perplexity_interval(np.ones(2), np.zeros(2)),
])
def test_bad_input_raises_one_line_error(call):
    with pytest.raises(bs.BootstrapError):
        call()
