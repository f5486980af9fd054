"""Exact references for fluctuation analysis (DFA, MF-DFA): fractional Gaussian noise
drawn exactly by circulant embedding (Davies and Harte), and the binomial multiplicative
cascade with its generalised Hurst exponents h(q), mass exponents tau(q) and singularity
spectrum f(alpha) in closed form.

Fractional Gaussian noise (fGn) with Hurst exponent H in (0, 1) is the stationary
Gaussian series with autocovariance

    gamma(k) = sigma^2 / 2 (|k + 1|^(2H) - 2 |k|^(2H) + |k - 1|^(2H));

its cumulative sum is fractional Brownian motion, and DFA of the noise (profile = the
cumulative sum) has F(s) ~ s^H.  H = 1/2 is white noise.

Binomial cascade (J. W. Kantelhardt et al., Physica A 316, 87 (2002), section 4): for
N = 2^n values, x_k = a^(n(k)) (1 - a)^(n_max - n(k)), k = 0 .. N - 1, with n(k) the
number of ones in the binary digits of k and 1/2 < a < 1.  MF-DFA of x (as noise) has

    h(q)     = 1/q - ln(a^q + (1 - a)^q) / (q ln 2),   h(0) = -log2(a (1 - a)) / 2,
    tau(q)   = q h(q) - 1 = -ln(a^q + (1 - a)^q) / ln 2,
    alpha(q) = tau'(q),  f(alpha) = q alpha - tau(q).
"""

from __future__ import annotations

import math

import numpy as np

from .. import _validate
from .._typing import ArrayLike

__all__ = ["fgn_autocovariance", "fgn_davies_harte", "binomial_cascade", "binomial_cascade_h",
           "binomial_cascade_tau", "binomial_cascade_spectrum"]


def _hurst(H) -> float:
    H = _validate.real("H", H, 0.0, 1.0)
    if not 0.0 < H < 1.0:
        raise ValueError(f"H must be in (0, 1), got {H}")
    return H


def fgn_autocovariance(H: float, k: ArrayLike, sigma: float = 1.0) -> np.ndarray:
    """gamma(k) of fractional Gaussian noise with Hurst exponent H and variance sigma^2
    (k: integer lags, any sign)."""
    H = _hurst(H)
    sigma = _validate.real("sigma", sigma, 0.0, strict_min=True)
    k = np.abs(np.asarray(k, dtype=np.float64))
    e = 2.0 * H
    return 0.5 * sigma * sigma * (np.abs(k + 1) ** e - 2.0 * k ** e + np.abs(k - 1) ** e)


def fgn_davies_harte(n: int, H: float, size: int | None = None, seed: int | None = None,
                     sigma: float = 1.0) -> np.ndarray:
    """Fractional Gaussian noise of n values, exactly (Davies and Harte's circulant
    embedding: the covariance of the result is gamma(k) to rounding).

    Parameters
    ----------
    n : int
        Length of each series (>= 2).
    H : float
        Hurst exponent, 0 < H < 1.
    size : int, optional
        Number of independent series; the result is then (size, n).
    seed : int or numpy.random.Generator, optional
        Seed of NumPy's default generator (or a generator to draw from).
    sigma : float
        Standard deviation of each value.

    Returns
    -------
    numpy.ndarray
        float64, shape (n,) or (size, n).

    Notes
    -----
    The 2n-point circulant whose first row is gamma(0 .. n), gamma(n - 1 .. 1) has
    eigenvalues lambda >= 0 for every H in (0, 1); with V = sqrt(lambda / 2n) (A + iB),
    A, B independent standard normal, the real and imaginary parts of the FFT of V are
    two independent exact samples (both are used, so one FFT gives two series).
    """
    n = _validate.integer("n", n, 2)
    H = _hurst(H)
    count = 1 if size is None else _validate.integer("size", size, 1)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    gam = fgn_autocovariance(H, np.arange(n + 1), sigma)
    row = np.concatenate([gam, gam[-2:0:-1]])
    lam = np.fft.fft(row).real
    if lam.min() < -1e-9 * lam.max():          # never for fGn; a guard against misuse
        raise ValueError(f"the circulant embedding of fGn with H = {H} is not positive")
    amp = np.sqrt(np.maximum(lam, 0.0) / row.size)
    out = np.empty((count, n))
    for i in range(0, count, 2):
        z = rng.standard_normal(row.size) + 1j * rng.standard_normal(row.size)
        y = np.fft.fft(amp * z)
        out[i] = y.real[:n]
        if i + 1 < count:
            out[i + 1] = y.imag[:n]
    return out[0] if size is None else out


def _cascade_a(a) -> float:
    a = _validate.real("a", a, 0.5, 1.0)
    if not 0.5 < a < 1.0:
        raise ValueError(f"a must be in (1/2, 1), got {a}")
    return a


def binomial_cascade(levels: int, a: float = 0.75) -> np.ndarray:
    """The binomial multiplicative cascade of 2^levels values (Kantelhardt et al. 2002):
    x_k = a^n(k) (1 - a)^(levels - n(k)), n(k) the number of ones in k's binary digits.
    float64; the values sum to 1."""
    levels = _validate.integer("levels", levels, 1, 30)
    a = _cascade_a(a)
    k = np.arange(1 << levels, dtype=np.int64)
    ones = np.zeros(k.size, dtype=np.int64)
    for bit in range(levels):
        ones += (k >> bit) & 1
    return np.exp(ones * math.log(a) + (levels - ones) * math.log1p(-a))


def _qs(q) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)
    if not np.all(np.isfinite(q)):
        raise ValueError("q must be finite")
    return q


def binomial_cascade_tau(q: ArrayLike, a: float = 0.75) -> np.ndarray:
    """tau(q) = -ln(a^q + (1 - a)^q) / ln 2 of the binomial cascade."""
    q, a = _qs(q), _cascade_a(a)
    return -np.logaddexp(q * math.log(a), q * math.log1p(-a)) / math.log(2.0)


def binomial_cascade_h(q: ArrayLike, a: float = 0.75) -> np.ndarray:
    """h(q) = (tau(q) + 1) / q of the binomial cascade; h(0) = -log2(a (1 - a)) / 2."""
    q, a = _qs(q), _cascade_a(a)
    with np.errstate(invalid="ignore", divide="ignore"):
        h = (binomial_cascade_tau(q, a) + 1.0) / q
    return np.where(q == 0, -math.log2(a * (1.0 - a)) / 2.0, h)


def binomial_cascade_spectrum(q: ArrayLike, a: float = 0.75) -> tuple[np.ndarray, np.ndarray]:
    """(alpha(q), f(alpha(q))) of the binomial cascade: alpha = tau'(q), f = q alpha - tau."""
    q, a = _qs(q), _cascade_a(a)
    la, lb = math.log(a), math.log1p(-a)
    wa = 1.0 / (1.0 + np.exp(q * (lb - la)))          # a^q / (a^q + (1 - a)^q)
    alpha = -(wa * la + (1.0 - wa) * lb) / math.log(2.0)
    return alpha, q * alpha - binomial_cascade_tau(q, a)
