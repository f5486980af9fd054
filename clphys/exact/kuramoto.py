"""Mean-field Kuramoto model with noise, and the modified Bessel functions it
needs (NumPy only).

Model (identical oscillators, all-to-all coupling K_ij = K/N), in the
convention of :func:`clphys.sde.kuramoto`:

    gamma d theta_i = K r sin(psi - theta_i) dt + sqrt(2 gamma kT) dW_i,

with r e^{i psi} = (1/N) sum_j e^{i theta_j} (k_B = 1). Divided by gamma it
is d theta = (K/gamma) r sin(psi - theta) dt + sqrt(2 D) dW with the phase
diffusion constant D = kT/gamma, so for N -> inf the stationary
one-oscillator density is prop. to exp(((K/gamma) r / D) cos(theta - psi))
= exp((K r / kT) cos(theta - psi)): gamma drops out, and

    r = I1(K r / kT) / I0(K r / kT),

which has a nonzero root only for K > K_c = 2 kT (Sakaguchi 1988; Strogatz,
Physica D 143, 1 (2000); Acebron et al., Rev. Mod. Phys. 77, 137 (2005)).
The functions here take (K, kT), as the simulation does; with gamma = 1,
kT = D. (A common frequency omega only rotates psi.)
"""

from __future__ import annotations

import numpy as np

from .. import _validate
from .._typing import ArrayLike

# |x| below this: power series; above: Hankel asymptotic expansion.  At the
# switch the asymptotic series' smallest term is ~e^{-2x} ~ 1e-17.
_SWITCH = 20.0
_N_SERIES = 64      # series terms: at x = 20 term 64 is ~1e-40 of the sum
_N_ASYMP = 30


def _real_array(name, x):
    return _validate.finite_array(name, x, dtype=float)


def _scaled(x, nu):
    """e^{-|x|} I_nu(|x|) for nu in {0, 1}, |x| as a float array."""
    ax = np.abs(x)
    out = np.empty_like(ax)
    small = ax <= _SWITCH
    # power series: sum_k (x/2)^(2k+nu) / (k! (k+nu)!) (all terms > 0, no cancellation)
    xs = ax[small]
    q = 0.25 * xs * xs
    term = (0.5 * xs) ** nu
    total = term.copy()
    for k in range(1, _N_SERIES):
        term = term * q / (k * (k + nu))
        total += term
    out[small] = total * np.exp(-xs)
    # Hankel: I_nu(x) ~ e^x / sqrt(2 pi x) sum_k (-1)^k a_k(nu) / x^k,
    # a_k = prod_{j=1}^k (4 nu^2 - (2j-1)^2) / (k! 8^k)  (A&S 9.7.1)
    xl = ax[~small]
    mu = 4.0 * nu * nu
    term = np.ones_like(xl)
    total = term.copy()
    for k in range(1, _N_ASYMP):
        term = -term * (mu - (2 * k - 1) ** 2) / (k * 8.0 * xl)
        total += term
    out[~small] = total / np.sqrt(2.0 * np.pi * xl)
    return out


def _finish(arr, x):
    return float(arr) if np.ndim(x) == 0 else arr


def bessel_i0e(x: ArrayLike) -> float | np.ndarray:
    """Exponentially scaled I0: e^{-|x|} I0(x).  Vectorised."""
    x = _real_array("x", x)
    return _finish(_scaled(np.atleast_1d(x), 0).reshape(x.shape), x)


def bessel_i1e(x: ArrayLike) -> float | np.ndarray:
    """Exponentially scaled I1: e^{-|x|} I1(x) (odd in x).  Vectorised."""
    x = _real_array("x", x)
    xa = np.atleast_1d(x)
    return _finish((np.sign(xa) * _scaled(xa, 1)).reshape(x.shape), x)


def bessel_i0(x: ArrayLike) -> float | np.ndarray:
    """Modified Bessel function I0(x), relative accuracy ~1e-14 (overflows to
    inf for |x| > ~713, as scipy.special.i0).  Vectorised."""
    x = _real_array("x", x)
    xa = np.atleast_1d(x)
    with np.errstate(over="ignore"):
        return _finish((_scaled(xa, 0) * np.exp(np.abs(xa))).reshape(x.shape), x)


def bessel_i1(x: ArrayLike) -> float | np.ndarray:
    """Modified Bessel function I1(x) (odd in x), relative accuracy ~1e-14.
    Vectorised."""
    x = _real_array("x", x)
    xa = np.atleast_1d(x)
    with np.errstate(over="ignore", invalid="ignore"):
        val = np.sign(xa) * _scaled(xa, 1) * np.exp(np.abs(xa))
    return _finish(val.reshape(x.shape), x)


def bessel_ratio_i1_i0(x: ArrayLike) -> float | np.ndarray:
    """I1(x)/I0(x), computed from the scaled functions so it is finite for
    any x (-> sign(x) (1 - 1/(2|x|)) for large |x|).  Vectorised."""
    x = _real_array("x", x)
    xa = np.atleast_1d(x)
    return _finish((np.sign(xa) * _scaled(xa, 1) / _scaled(xa, 0)).reshape(x.shape), x)


def kuramoto_order_parameter(K: ArrayLike, kT: float) -> float | np.ndarray:
    """Stationary order parameter r of the noisy mean-field Kuramoto model
    (module docstring) for N -> inf: the root in (0, 1) of
    r = I1(K r/kT) / I0(K r/kT) for K > 2 kT, else 0. It depends on K/kT
    only, for any friction gamma. K: any real (scalar or array); kT > 0
    (scalar). K/kT = 4 gives r = 0.83152...

    Solved by bisection on (0, 1] (to double precision): F(r) = R(a r) - r
    with a = K/kT is > 0 below the root and < 0 above it, since R = I1/I0 is
    concave on r > 0 with slope 1/2 at 0.
    """
    K = _real_array("K", K)
    kT = _validate.real("kT", kT, minimum=0.0, strict_min=True)
    a = np.atleast_1d(K / kT).astype(float)
    lo, hi = np.zeros_like(a), np.ones_like(a)
    for _ in range(64):
        mid = 0.5 * (lo + hi)
        pos = np.sign(mid * a) * _scaled(mid * a, 1) / _scaled(mid * a, 0) > mid
        lo, hi = np.where(pos, mid, lo), np.where(pos, hi, mid)
    r = np.where(a > 2.0, 0.5 * (lo + hi), 0.0)
    return _finish(r.reshape(K.shape), K)


def kuramoto_subcritical_r2(K: ArrayLike, kT: float, N: int) -> float | np.ndarray:
    """<r^2> = 1 / (N (1 - K/(2 kT))) in the incoherent phase K < 2 kT, to
    leading order in 1/N (linearised fluctuations of the N oscillators'
    first Fourier mode; K = 0 gives the exact 1/N of independent phases).
    Like r, it depends on K/kT only. K: real < 2 kT (scalar or array),
    kT > 0, N >= 1.
    """
    K = _real_array("K", K)
    kT = _validate.real("kT", kT, minimum=0.0, strict_min=True)
    N = _validate.integer("N", N, minimum=1)
    if np.any(K >= 2 * kT):
        raise ValueError(f"K must be < 2 kT = {2 * kT} (incoherent phase), got {K.max()}")
    return _finish(1.0 / (N * (1.0 - K / (2.0 * kT))), K)
