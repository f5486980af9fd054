"""Exact moments of the anti-correlated random walk (ACRW) and of the plain
random walk.

ACRW (T. Preis, P. Virnau, W. Paul, J. J. Schneider, New J. Phys. 11,
093024 (2009)): p(t) = a(t) + b(t) where

* a(t+1) = a(t) + 1 or - 1 with probability phi each, unchanged with
  probability 1 - 2 phi (0 <= phi <= 1/2);
* b(t) in {0, 1}, each with probability 1/2, drawn afresh every step.

Increments x(t) = p(t+1) - p(t) = xi(t) + b(t+1) - b(t), with xi the step
of a (Var xi = 2 phi) and b independent of xi (Var b = 1/4).  Hence

    Var x          = 2 phi + 2 Var b = 2 phi + 1/2,
    Cov(x_t, x_t+1) = Cov(b_t+1 - b_t, b_t+2 - b_t+1) = -Var b = -1/4,
    Cov(x_t, x_t+k) = 0 for k >= 2  (no shared b),

so rho(1) = -1/(2(1 + 4 phi)), and the MSD over Delta t >= 1 steps is
<(p(t+Dt) - p(t))^2> = 2 phi Dt + 2 Var b = 2 phi Dt + 1/2.
"""

from __future__ import annotations

import numpy as np

from .. import _validate
from .._typing import ArrayLike


def _phi(phi):
    return _validate.real("phi", phi, minimum=0.0, maximum=0.5)


def _lags(lag):
    lag = np.asarray(lag)
    if lag.dtype.kind not in "iu":
        raise ValueError(f"lag must be integer(s), got dtype {lag.dtype}")
    if np.any(lag < 0):
        raise ValueError(f"lag must be >= 0, got {lag[lag < 0].flat[0]}")
    return lag


def _out(a):
    return float(a) if np.ndim(a) == 0 else a


def acrw_increment_autocorrelation(phi: float, lag: ArrayLike) -> float | np.ndarray:
    """Autocorrelation rho(k) of the ACRW increments: 1 at k = 0,
    -1/(2(1 + 4 phi)) at k = 1, 0 for k >= 2.  phi in [0, 1/2]; lag: a
    non-negative integer or integer array."""
    phi = _phi(phi)
    lag = _lags(lag)
    rho1 = -1.0 / (2.0 * (1.0 + 4.0 * phi))
    return _out(np.where(lag == 0, 1.0, np.where(lag == 1, rho1, 0.0)))


def acrw_increment_variance(phi: float) -> float:
    """Var x = 2 phi + 1/2 of one ACRW increment."""
    return 2.0 * _phi(phi) + 0.5


def acrw_msd(phi: float, lag: ArrayLike) -> float | np.ndarray:
    """Mean squared displacement <(p(t+Dt) - p(t))^2> of the ACRW:
    2 phi Dt + 1/2 for Dt >= 1, 0 at Dt = 0.  phi in [0, 1/2]; lag = Dt: a
    non-negative integer or integer array."""
    phi = _phi(phi)
    lag = _lags(lag)
    return _out(np.where(lag == 0, 0.0, 2.0 * phi * lag + 0.5))


def random_walk_hurst() -> float:
    """Hurst exponent of any walk with finite-range correlated increments
    (plain random walk, ACRW at long times): 1/2."""
    return 0.5
