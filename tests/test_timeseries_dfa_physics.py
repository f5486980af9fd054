"""DFA and MF-DFA against exact results: fractional Gaussian noise (drawn exactly by
circulant embedding) with H = 0.3, 0.5, 0.7, 0.9 recovered within errors, and error bars
that match the scatter over independent series; white noise H = 1/2; the binomial
multiplicative cascade's h(q), tau(q), alpha and f(alpha) (exact at dyadic scales up to one
constant, and within errors); and the exact references themselves."""

import math

import numpy as np
import pytest

from clphys.exact import (
    binomial_cascade,
    binomial_cascade_h,
    binomial_cascade_spectrum,
    binomial_cascade_tau,
    fgn_autocovariance,
    fgn_davies_harte,
)
from clphys.timeseries import dfa, mfdfa
from clphys.timeseries.dfa import DEFAULT_Q

REPLICAS = 32


@pytest.mark.parametrize("H", [0.3, 0.5, 0.7, 0.9])
def test_fgn_hurst_recovered_with_honest_errors(device, H):
    """32 independent exact fGn series of 2^12 values in one batch, DFA-1 with the default
    scales (10 .. 640): the mean H within 3 standard errors plus 0.01 of the exact H (the
    estimator's own finite-size bias at this length: +0.006 at H = 0.3, -0.005 at 0.9 over
    25 x 32 series), and the jackknife errors' root mean square within 0.7 .. 1.45 of the
    replicas' scatter (0.81 .. 1.29 over those 100 batches, mean 1.05 - 1.08)."""
    X = fgn_davies_harte(2**12, H, size=REPLICAS, seed=int(100 * H))
    r = dfa(X, device=device)
    spread = r.H.std(ddof=1)
    assert abs(r.H.mean() - H) < 3 * spread / math.sqrt(REPLICAS) + 0.01, (r.H.mean(), spread)
    ratio = spread / math.sqrt(np.mean(r.H_err ** 2))
    assert 0.7 < ratio < 1.45, ratio
    assert np.all(r.F_err > 0) and r.F.shape == (REPLICAS, 7)


def test_white_noise_half(device):
    X = np.random.default_rng(5).standard_normal((16, 2**13)).astype(np.float32)
    r = dfa(X, order=2, segments="both", device=device)
    assert abs(r.H.mean() - 0.5) < 3 * r.H.std(ddof=1) / 4
    m = mfdfa(X[:4], q=[-2.0, 0.0, 2.0], device=device)
    assert np.all(np.abs(m.h - 0.5) < 4 * m.h_err)          # monofractal: h(q) = 1/2


def _dyadic(levels, lo, hi):
    return 2 ** np.arange(lo, hi + 1)


@pytest.mark.parametrize("order", [1, 2])
def test_cascade_exact_at_dyadic_scales(device, order):
    """At s = 2^k the segments are cells of the cascade: F_q(2^k) = g_k [(a^q + (1-a)^q)
    / 2]^((n - k)/q) with g_k the same for every q, so h(q) - h(2), alpha - its exact
    value (by the same finite differences along q) and f(alpha) are exact."""
    a, n = 0.75, 14
    x = binomial_cascade(n, a)
    q = np.array(DEFAULT_Q)
    m = mfdfa(x, q=q, scales=_dyadic(n, 4, n - 2), order=order, device=device)
    h = binomial_cascade_h(q, a)
    tol = 1e-9 if device.facts.fp64 else 1e-5
    np.testing.assert_allclose(m.h - m.h[q == 2], h - h[q == 2], atol=tol)
    tau = binomial_cascade_tau(q, a)
    alpha = np.gradient(tau, q)
    shift = m.alpha - alpha                                  # g_k's slope, for every q
    np.testing.assert_allclose(shift, shift[0], atol=tol)
    np.testing.assert_allclose(m.f_alpha, q * alpha - tau, atol=tol)


def test_cascade_within_errors(device):
    """N = 2^16, a = 0.75, MF-DFA-1 over s = 2^10 .. 2^14 (where g_k has converged to
    ~0.3 %): h(q), alpha and f(alpha) within their jackknife errors of the exact ones."""
    a, n = 0.75, 16
    q = np.array(DEFAULT_Q)
    m = mfdfa(binomial_cascade(n, a), q=q, scales=_dyadic(n, 10, n - 2), order=1,
              device=device)
    assert np.all(np.abs(m.h - binomial_cascade_h(q, a)) < 2 * m.h_err)
    tau = binomial_cascade_tau(q, a)
    alpha = np.gradient(tau, q)
    assert np.all(np.abs(m.alpha - alpha) < 3 * m.alpha_err)
    ok = m.f_alpha_err > 0
    assert np.all(np.abs(m.f_alpha - (q * alpha - tau))[ok] < 3 * m.f_alpha_err[ok])
    # and the closed-form alpha(q) that the finite differences approximate
    exact_alpha, exact_f = binomial_cascade_spectrum(q, a)
    assert np.max(np.abs(alpha - exact_alpha)) < 0.03 and np.max(np.abs(exact_f - (
        q * exact_alpha - tau))) < 1e-12


# ---------------------------------------------------------------- the exact references

def test_fgn_autocovariance():
    k = np.arange(6)
    np.testing.assert_allclose(fgn_autocovariance(0.5, k), [1, 0, 0, 0, 0, 0], atol=1e-15)
    g = fgn_autocovariance(0.8, np.arange(-4, 5), sigma=2.0)
    np.testing.assert_allclose(g, g[::-1])
    assert g[4] == 4.0
    # the variance of the sum of n values (fBm at n) is n^(2H) sigma^2
    n = 37
    i = np.arange(n)
    cov = fgn_autocovariance(0.8, i[:, None] - i[None, :])
    assert cov.sum() == pytest.approx(n ** 1.6, rel=1e-12)


@pytest.mark.parametrize("H", [0.3, 0.9])
def test_davies_harte_covariance(H):
    """The sample autocovariance of 2000 exact series of 128 values matches gamma(k) within
    4 standard errors (from the spread over the series)."""
    X = fgn_davies_harte(128, H, size=2000, seed=3)
    assert X.shape == (2000, 128)
    for k in range(5):
        prod = np.mean(X[:, :128 - k] * X[:, k:], axis=1)
        se = prod.std(ddof=1) / math.sqrt(prod.size)
        assert abs(prod.mean() - fgn_autocovariance(H, k)) < 4 * se
    one = fgn_davies_harte(100, H, seed=np.random.default_rng(1))
    assert one.shape == (100,)


def test_cascade_closed_forms():
    a, n = 0.7, 10
    x = binomial_cascade(n, a)
    assert x.size == 1024 and x.sum() == pytest.approx(1.0, abs=1e-12)
    ones = np.array([bin(k).count("1") for k in range(1024)])
    np.testing.assert_allclose(x, a ** ones * (1 - a) ** (n - ones), rtol=1e-12)
    q = np.linspace(-6, 6, 25)
    tau = binomial_cascade_tau(q, a)
    assert binomial_cascade_tau(1.0, a) == pytest.approx(0.0, abs=1e-15)
    assert binomial_cascade_h(1.0, a) == pytest.approx(1.0, abs=1e-15)
    assert binomial_cascade_h(0.0, a) == pytest.approx(
        binomial_cascade_h(1e-7, a), abs=1e-6)
    np.testing.assert_allclose(binomial_cascade_h(q[q != 0], a), (tau[q != 0] + 1) / q[q != 0])
    alpha, f = binomial_cascade_spectrum(q, a)
    d = 1e-6
    numeric = (binomial_cascade_tau(q + d, a) - binomial_cascade_tau(q - d, a)) / (2 * d)
    np.testing.assert_allclose(alpha, numeric, atol=1e-8)
    np.testing.assert_allclose(f, q * alpha - tau, atol=1e-12)
    assert f.max() == pytest.approx(1.0) and f[q == 0] == pytest.approx(1.0)


@pytest.mark.parametrize("call,match", [
    (lambda: fgn_davies_harte(100, 1.0), "H"), (lambda: fgn_davies_harte(1, 0.5), "n"),
    (lambda: binomial_cascade(4, 0.5), "a"), (lambda: binomial_cascade(31, 0.7), "levels"),
    (lambda: binomial_cascade_h([np.inf], 0.7), "finite")])
def test_exact_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
