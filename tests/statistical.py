"""Statistical checks for ops whose outputs are random (Bernoulli,
RandomNormal, RandomUniform, their *Like forms, Multinomial): they cannot be
compared with stored outputs, so their samples are tested against the
distribution the spec names. Each check has the power to catch a wrong
mean, a wrong spread or a wrong probability (the sample sizes make such a
bug fail by many standard deviations) and fails a right implementation
with probability ``ALPHA`` at most (one in a million), so an unseeded op may
be tested too without a flaky test."""

from __future__ import annotations

import numpy as np

ALPHA = 1e-6


def assert_bernoulli(draws: np.ndarray, p: np.ndarray, what: str = "") -> None:
    """``draws`` ([n, *p.shape], 0/1) are n independent Bernoulli(p) draws per
    element: counts against n*p by a chi-square test (elements with p in
    {0, 1} must be constant)."""
    from scipy import stats

    draws = np.asarray(draws, dtype=np.float64).reshape(draws.shape[0], -1)
    p = np.asarray(p, dtype=np.float64).ravel()
    assert set(np.unique(draws)) <= {0.0, 1.0}, f"{what}: values other than 0 and 1: {np.unique(draws)[:10]}"
    n = draws.shape[0]
    counts = draws.sum(axis=0)
    fixed = (p == 0) | (p == 1)
    np.testing.assert_array_equal(counts[fixed], n * p[fixed], err_msg=f"{what}: p = 0 or 1 must be certain")
    var = n * p[~fixed] * (1 - p[~fixed])
    chi2 = float((((counts[~fixed] - n * p[~fixed]) ** 2) / var).sum())
    dof = int((~fixed).sum())
    pvalue = stats.chi2.sf(chi2, dof)
    assert pvalue > ALPHA, f"{what}: frequencies {counts[~fixed][:8] / n} vs p {p[~fixed][:8]} (chi2 {chi2:.1f}, dof {dof})"
    # A small bias shared by all elements shows better in the total count.
    z = (counts[~fixed].sum() - n * p[~fixed].sum()) / np.sqrt(var.sum()) if dof else 0.0
    assert abs(z) < _z_bound(), f"{what}: {counts[~fixed].sum():.0f} ones in all, expected {n * p[~fixed].sum():.0f} (z {z:.1f})"


def _z_bound() -> float:
    """|z| beyond this happens with probability ALPHA for a standard normal."""
    from scipy import stats

    return float(stats.norm.isf(ALPHA / 2))


def assert_distribution(samples: np.ndarray, dist, what: str = "") -> None:
    """``samples`` against ``dist`` (a frozen scipy distribution): a
    Kolmogorov-Smirnov test of the whole shape, plus z-tests of the mean and
    the variance, which KS is slow to notice (a spread 4% off passes KS on
    20,000 samples)."""
    from scipy import stats

    x = np.asarray(samples, dtype=np.float64).ravel()
    n = x.size
    result = stats.kstest(x, dist.cdf)
    assert result.pvalue > ALPHA, f"{what}: KS statistic {result.statistic:.4f}, p {result.pvalue:.2e}"
    mean, var = dist.mean(), dist.var()
    z = (x.mean() - mean) / np.sqrt(var / n)
    assert abs(z) < _z_bound(), f"{what}: mean {x.mean():.5g}, expected {mean:.5g} (z {z:.1f})"
    # The sample variance's own variance is (mu4 - var^2) / n for large n.
    mu4 = dist.expect(lambda v: (v - mean) ** 4)
    z = (x.var(ddof=1) - var) / np.sqrt((mu4 - var**2) / n)
    assert abs(z) < _z_bound(), f"{what}: variance {x.var(ddof=1):.5g}, expected {var:.5g} (z {z:.1f})"


def assert_categorical(samples: np.ndarray, probs: np.ndarray, what: str = "") -> None:
    """``samples`` (class indices) against class probabilities ``probs`` by a
    chi-square goodness-of-fit test."""
    from scipy import stats

    samples = np.asarray(samples).ravel()
    k = len(probs)
    assert samples.min() >= 0 and samples.max() < k, f"{what}: class index out of range"
    counts = np.bincount(samples, minlength=k)
    expected = probs * samples.size
    keep = expected > 0
    assert counts[~keep].sum() == 0, f"{what}: a class of probability 0 was drawn"
    result = stats.chisquare(counts[keep], expected[keep])
    assert result.pvalue > ALPHA, f"{what}: counts {counts} vs expected {np.round(expected, 1)}"
