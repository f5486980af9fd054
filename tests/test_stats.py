"""clphys.stats against analytic results for iid Gaussian and AR(1) data."""

import math

import numpy as np
import pytest
from scipy.signal import lfilter

from clphys.stats import (
    Estimate,
    autocorrelation,
    binned_error,
    binning,
    binning_levels,
    integrated_autocorrelation_time,
    jackknife,
    jackknife_blocks,
    mean_error,
)


def ar1(phi, n, seed):
    """x_t = phi x_{t-1} + e_t, started from the stationary law.
    tau_int = (1 + phi) / (2 (1 - phi)), Var x = 1/(1 - phi^2)."""
    rng = np.random.default_rng(seed)
    e = rng.standard_normal(n)
    e[0] /= math.sqrt(1 - phi * phi)
    return lfilter([1.0], [1.0, -phi], e)


def test_estimate():
    est = Estimate(1.23456, 0.0067)
    v, e = est
    assert (v, e) == (1.23456, 0.0067)
    assert str(est) == "1.2346(67)"
    assert str(Estimate(1.23456, 0.0996)) == "1.23(10)"
    assert str(Estimate(12345.6, 67)) == "12346(67)"
    assert "±" in str(Estimate(1.0, 0.0))


def test_binning():
    x = np.arange(10.0)
    np.testing.assert_allclose(binning(x, 3), [2.0, 5.0, 8.0])   # x[0] dropped
    np.testing.assert_allclose(binning(x, 10), x)
    with pytest.raises(ValueError, match="fewer than n_bins"):
        binning(x, 11)
    with pytest.raises(ValueError, match="n_bins must be >= 1"):
        binning(x, 0)


def test_autocorrelation_direct():
    x = np.random.default_rng(0).standard_normal(50)
    d = x - x.mean()
    ref = [np.dot(d[:50 - t], d[t:]) / (50 - t) for t in range(50)]
    np.testing.assert_allclose(autocorrelation(x), np.array(ref) / ref[0], atol=1e-12)


@pytest.mark.parametrize("phi,seed", [(0.0, 1), (0.5, 2), (0.8, 3), (0.95, 4)])
def test_tau_int_ar1(phi, seed):
    tau = 0.5 * (1 + phi) / (1 - phi)
    est = integrated_autocorrelation_time(ar1(phi, 2 ** 17, seed))
    assert abs(est.value - tau) < 3 * est.error
    assert est.error < 0.08 * tau                 # and the error bar is informative


def test_binned_error_ar1():
    phi, n = 0.8, 2 ** 17
    x = ar1(phi, n, 7)
    tau = 0.5 * (1 + phi) / (1 - phi)
    expected = math.sqrt(2 * tau / n) * math.sqrt(1 / (1 - phi * phi))
    levels = binning_levels(x)
    n_last = n >> (len(levels) - 1)                 # blocks at the deepest level
    assert 32 <= n_last < 64
    rel = 1 / math.sqrt(2 * (n_last - 1))           # statistical error of an error
    assert binned_error(x) == pytest.approx(expected, rel=3 * rel)
    assert levels[0] == pytest.approx(x.std(ddof=1) / math.sqrt(n))   # naive at level 0
    assert binned_error(x, max_levels=0) == levels[0]
    m, e = mean_error(x)
    assert m == pytest.approx(x.mean()) and e == binned_error(x)
    m, e = mean_error(x, method="tau")
    assert e == pytest.approx(expected, rel=0.05)
    assert mean_error(np.ones(100)).error == 0.0


def test_jackknife_mean_iid():
    x = np.random.default_rng(11).normal(3.0, 2.0, 20000)
    est = jackknife(x, n_blocks=400)
    assert est.value == pytest.approx(x[x.size % 400:].mean())
    assert est.error == pytest.approx(x.std(ddof=1) / math.sqrt(x.size), rel=0.10)
    # for a linear func the block jackknife is exactly the naive error of block means
    b = binning(x, 32)
    assert jackknife(x, n_blocks=32).error == pytest.approx(b.std(ddof=1) / math.sqrt(32),
                                                            rel=1e-12)


def test_jackknife_nonlinear():
    n = 40000
    x = np.random.default_rng(5).standard_normal(n)
    rows = np.vstack([x, x ** 2, x ** 4])
    # variance <x^2> - <x>^2 = 1 with error sqrt(2/n) for a unit Gaussian
    var = jackknife(rows, lambda m: m[1] - m[0] ** 2, n_blocks=200)
    assert var.error == pytest.approx(math.sqrt(2 / n), rel=0.2)
    assert abs(var.value - 1.0) < 3 * var.error
    # kurtosis ratio <x^4>/<x^2>^2 = 3; delta method with the Gaussian moments
    # (m2, m4, m6, m8) = (1, 3, 15, 105): Var = 96 + 36*2 - 2*6*12 = 24 per sample
    kurt = jackknife(rows, lambda m: m[2] / m[1] ** 2, n_blocks=200)
    assert kurt.error == pytest.approx(math.sqrt(24 / n), rel=0.25)   # its own spread: ~7%
    assert abs(kurt.value - 3.0) < 3 * kurt.error


def test_jackknife_bias_correction():
    """Delete-one jackknife of the plug-in variance, bias corrected, is exactly
    the unbiased sample variance."""
    x = np.random.default_rng(9).standard_normal(200)
    rows = np.vstack([x, x * x])
    f = lambda m: m[1] - m[0] ** 2
    assert jackknife(rows, f, n_blocks=200).value == pytest.approx(x.var(), rel=1e-12)
    assert jackknife(rows, f, n_blocks=200, bias_correct=True).value == pytest.approx(
        x.var(ddof=1), rel=1e-12)


def test_short_series_warns():
    x = np.sin(0.05 * np.arange(40))     # a slow trend: tau(W) ~ W/2 up to W = N/2
    with pytest.warns(RuntimeWarning, match="too short"):
        integrated_autocorrelation_time(x)


def test_stats_value_errors():
    with pytest.raises(ValueError, match="x has 1 non-finite"):
        mean_error([1.0, np.nan, 2.0])
    with pytest.raises(ValueError, match="x must be 1-D"):
        binned_error(np.ones((3, 3)))
    with pytest.raises(ValueError, match="at least 2 samples"):
        mean_error([1.0])
    with pytest.raises(ValueError, match="max_levels must be >= 0"):
        binned_error(np.arange(100.0), max_levels=-1)
    with pytest.raises(ValueError, match="fewer than n_blocks"):
        jackknife(np.arange(10.0), n_blocks=32)
    with pytest.raises(ValueError, match="n_blocks must be >= 2"):
        jackknife(np.arange(10.0), n_blocks=1)
    with pytest.raises(ValueError, match="func must return a scalar"):
        jackknife(np.ones((2, 100)), lambda m: m)
    with pytest.raises(ValueError, match="func must be callable"):
        jackknife(np.arange(100.0), func=3)
    with pytest.raises(ValueError, match="1-D or 2-D"):
        jackknife(np.ones((2, 2, 40)))
    with pytest.raises(ValueError, match="constant"):
        integrated_autocorrelation_time(np.ones(100))
    with pytest.raises(ValueError, match="c must be > 0"):
        integrated_autocorrelation_time(np.arange(100.0), c=0)
    with pytest.raises(ValueError, match="method must be one of"):
        mean_error(np.arange(10.0), method="bootstrap")


def test_jackknife_blocks_vectorized_equals_the_loop():
    rng = np.random.default_rng(3)
    data = rng.exponential(size=(9, 4))
    loop = jackknife_blocks(data, lambda m: np.log(m) - np.log(m.sum()))
    vec = jackknife_blocks(data, lambda m: np.log(m) - np.log(m.sum(axis=-1, keepdims=True)), vectorized=True)
    np.testing.assert_allclose(vec[0], loop[0], rtol=1e-14)
    np.testing.assert_allclose(vec[1], loop[1], rtol=1e-12)
