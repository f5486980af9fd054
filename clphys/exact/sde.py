"""Exact results for simple Langevin equations (k_B = 1, unit mass).

* Overdamped particle in the washboard V(x) = V0 sin(2 pi x / L) with tilt f:
      gamma dx = (-V'(x) + f) dt + sqrt(2 gamma kT) dW.
* Free Brownian motion dx = sqrt(2D) dW.
* Ornstein-Uhlenbeck velocity dv = -gamma v dt + sqrt(2 gamma kT) dW.

References: H. Risken, The Fokker-Planck Equation, 2nd ed. (1989), ch. 11;
P. Reimann, Phys. Rep. 361, 57 (2002), eq. (2.37)-(2.39);
R. L. Stratonovich, Radiotekhnika i Elektronika 3, 497 (1958).
"""

from __future__ import annotations

import math

import numpy as np

from .. import _validate
from .._typing import ArrayLike
from .kuramoto import _scaled

_GL_ORDER = 16
_GL_T, _GL_W = np.polynomial.legendre.leggauss(_GL_ORDER)


def _times(t):
    t = _validate.finite_array("t", t, dtype=float)
    if np.any(t < 0):
        raise ValueError(f"t must be >= 0, got {t[t < 0].flat[0]}")
    return t


def _out(a):
    return float(a) if np.ndim(a) == 0 else a


def washboard_stationary_sin_mean(kT: ArrayLike, V0: float = 1.0) -> float | np.ndarray:
    """<sin(2 pi x)> in the equilibrium density prop. to exp(-V(x)/kT) with
    V(x) = V0 sin(2 pi x) on one period:

        <sin> = int sin e^{-(V0/kT) sin} / int e^{-(V0/kT) sin}
              = -I1(V0/kT) / I0(V0/kT),

    from the generating function e^{a sin t} averaged over t giving I0(a).
    Computed with the exponentially scaled Bessel functions, so kT = 1e-3
    (-> -1 + kT/(2 V0)) does not overflow.  kT > 0, V0 >= 0; vectorised
    over kT.
    """
    kT = _validate.finite_array("kT", kT, dtype=float)
    if np.any(kT <= 0):
        raise ValueError(f"kT must be > 0, got {kT[kT <= 0].flat[0]}")
    V0 = _validate.real("V0", V0, minimum=0.0)
    a = np.atleast_1d(V0 / kT)
    return _out((-_scaled(a, 1) / _scaled(a, 0)).reshape(kT.shape))


def _log_double_integral(f, kT, V0, L, nx, npanel):
    """ln of  int_0^L dx int_0^L dy exp([V(x+y) - V(x) - f y]/kT):
    periodic trapezoid in x (spectrally accurate), composite Gauss-Legendre
    in y (the y-integrand is not periodic), accumulated in log space."""
    dy = L / npanel
    y = ((np.arange(npanel)[:, None] + 0.5 * (_GL_T + 1.0)) * dy).ravel()
    logw_y = np.log(np.tile(0.5 * dy * _GL_W, npanel)) - f * y / kT
    x = np.arange(nx) * (L / nx)
    k = 2.0 * np.pi / L
    parts = []
    rows = max(1, 2_000_000 // y.size)          # bound memory to ~16 MB
    for i in range(0, nx, rows):
        xs = x[i:i + rows, None]
        E = V0 * (np.sin(k * (xs + y)) - np.sin(k * xs)) / kT + logw_y
        top = E.max()
        parts.append(top + math.log(np.exp(E - top).sum()))
    parts = np.array(parts)
    top = parts.max()
    return top + math.log(np.exp(parts - top).sum()) + math.log(L / nx)


def overdamped_tilted_washboard_velocity(f: float, kT: float, gamma: float = 1.0, V0: float = 1.0,
                                         period: float = 1.0) -> float:
    """Exact stationary mean velocity <dx/dt> of the overdamped particle

        gamma dx = (-V'(x) + f) dt + sqrt(2 gamma kT) dW,  V = V0 sin(2 pi x/L),

    L = period.  Solving the stationary Fokker-Planck equation with constant
    probability current j and periodic density (Stratonovich; Risken
    sec. 11.5; Reimann eq. 2.37) gives v = j L with

        v = L (kT/gamma) (1 - e^{-f L/kT})
            / int_0^L dx int_0^L dy exp([V(x+y) - V(x) - f y] / kT).

    The double integral is done numerically in log space (periodic
    trapezoid in x, composite 16-point Gauss-Legendre panels in y), with grids
    sized from V0/kT and f L/kT so the relative error is ~1e-12; the cost
    grows like (V0/kT)^(3/2) (~0.1 s at kT = 0.01 V0).  v(-f) = -v(f) by the
    symmetry x -> L/2 - x of the sine potential, so f < 0 is mapped to f > 0.
    Limits: v -> f/gamma for kT >> V0; v -> f/(gamma I0(V0/kT)^2) for f -> 0;
    v -> sqrt(f^2 - (2 pi V0/L)^2)/gamma for kT -> 0 when f > 2 pi V0/L.
    Returns 0 where v underflows (deep Arrhenius regime).

    f: real; kT, gamma, period > 0; V0 >= 0 (all scalars).
    """
    f = _validate.real("f", f)
    kT = _validate.real("kT", kT, minimum=0.0, strict_min=True)
    gamma = _validate.real("gamma", gamma, minimum=0.0, strict_min=True)
    V0 = _validate.real("V0", V0, minimum=0.0)
    L = _validate.real("period", period, minimum=0.0, strict_min=True)
    if f == 0.0:
        return 0.0
    if f < 0:
        return -overdamped_tilted_washboard_velocity(-f, kT, gamma, V0, L)
    return _washboard_velocity(f, kT, gamma, V0, L, 1.0)


def _washboard_velocity(f, kT, gamma, V0, L, refine):
    a = V0 / kT                                   # barrier scale in units of kT
    # x: exp(A cos) needs ~9 sqrt(A) Fourier modes for 1e-16; A <= 2 V0/kT
    nx = int(refine * (48 + 12 * math.sqrt(2 * a)))
    # y: |d exponent/dy| <= (2 pi V0/L + f)/kT; keep it <= 6 per panel
    slope = (2 * math.pi * V0 / L + f) * L / kT
    npanel = int(refine * max(4, math.ceil(slope / 6.0)))
    log_d2 = _log_double_integral(f, kT, V0, L, nx, npanel)
    log_v = math.log(L * kT / gamma) + math.log(-math.expm1(-f * L / kT)) - log_d2
    return math.exp(log_v) if log_v > -745 else 0.0


def free_brownian_variance(D: float, t: ArrayLike) -> float | np.ndarray:
    """<(x(t) - x(0))^2> = 2 D t for dx = sqrt(2D) dW (one dimension).
    D >= 0; t >= 0, vectorised."""
    D = _validate.real("D", D, minimum=0.0)
    t = _times(t)
    return _out(2.0 * D * t)


def ou_velocity_mean(v0: float, gamma: float, t: ArrayLike) -> float | np.ndarray:
    """<v(t)> = v0 e^{-gamma t} for dv = -gamma v dt + sqrt(2 gamma kT) dW
    started at v(0) = v0.  gamma >= 0; t >= 0, vectorised."""
    v0 = _validate.real("v0", v0)
    gamma = _validate.real("gamma", gamma, minimum=0.0)
    t = _times(t)
    return _out(v0 * np.exp(-gamma * t))


def ou_velocity_second_moment(v0: float, gamma: float, kT: float, t: ArrayLike) -> float | np.ndarray:
    """<v(t)^2> = kT + (v0^2 - kT) e^{-2 gamma t} for the same process (unit
    mass, so equipartition <v^2> -> kT).  gamma >= 0, kT >= 0; t >= 0,
    vectorised."""
    v0 = _validate.real("v0", v0)
    gamma = _validate.real("gamma", gamma, minimum=0.0)
    kT = _validate.real("kT", kT, minimum=0.0)
    t = _times(t)
    return _out(kT + (v0 * v0 - kT) * np.exp(-2.0 * gamma * t))
