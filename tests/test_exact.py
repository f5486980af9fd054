"""Exact references in clphys.exact checked against independent computations
(brute force, scipy, numerical quadrature, small Monte Carlo runs)."""

import itertools
import math

import numpy as np
import pytest
import scipy.integrate as si
import scipy.special as sp

from clphys import exact
from clphys.exact import (
    TC_2D,
    enumerate_lattice,
    finite_lattice,
    onsager_energy,
    onsager_magnetization,
    onsager_specific_heat,
)


# ------------------------------------------------------------------ Ising
def test_constants():
    assert TC_2D == pytest.approx(2.269185314213022, abs=1e-14)
    assert exact.TC_3D == pytest.approx(4.511523, abs=1e-6)


def _naive_enumeration(Lx, Ly, T, J, h):
    """Plain-Python sum over states: an independent check of enumerate_lattice."""
    N = Lx * Ly
    Z = E1 = E2 = M1 = M2 = 0.0
    for s in itertools.product((1, -1), repeat=N):
        s = np.array(s).reshape(Ly, Lx)
        bonds = (s * np.roll(s, 1, 0)).sum() + (s * np.roll(s, 1, 1)).sum()
        M = s.sum()
        E = -J * bonds - h * M
        w = math.exp(-E / T)
        Z += w; E1 += w * E; E2 += w * E * E; M1 += w * M; M2 += w * M * M
    E1, E2, M1, M2 = E1 / Z, E2 / Z, M1 / Z, M2 / Z
    return math.log(Z), E1 / N, M1 / N, (E2 - E1 ** 2) / (T * T * N), (M2 - M1 ** 2) / (T * N)


@pytest.mark.parametrize("Lx,Ly,T,J,h", [(2, 3, 1.7, 1.0, 0.3), (3, 3, 2.5, -1.0, 0.7),
                                         (3, 4, 1.1, 0.5, -0.2)])
def test_enumeration_matches_naive_loop(Lx, Ly, T, J, h):
    r = enumerate_lattice(Lx, Ly, T, J=J, h=h)
    ref = _naive_enumeration(Lx, Ly, T, J, h)
    got = (r.log_z, r.energy, r.magnetization, r.specific_heat, r.susceptibility)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("T", [1.5, 2.27, 3.0])
def test_finite_lattice_equals_enumeration_4x4(T):
    f, e = finite_lattice(4, T), enumerate_lattice(4, 4, T)
    assert abs(f.log_z - e.log_z) < 1e-10
    assert abs(f.energy - e.energy) < 1e-10
    assert abs(f.specific_heat - e.specific_heat) < 1e-10


@pytest.mark.parametrize("Lx,Ly", [(2, 8), (8, 2), (3, 5), (5, 3), (4, 5), (2, 2)])
def test_finite_lattice_rectangular_and_odd(Lx, Ly):
    T = np.array([0.8, 1.9, TC_2D, 2.6, 7.0])
    f, e = finite_lattice((Lx, Ly), T), enumerate_lattice(Lx, Ly, T)
    np.testing.assert_allclose(f.log_z, e.log_z, rtol=1e-13)
    np.testing.assert_allclose(f.energy, e.energy, atol=1e-12)
    np.testing.assert_allclose(f.specific_heat, e.specific_heat, atol=1e-12)


def test_finite_lattice_required_value_L32():
    assert finite_lattice(32, 2.0).energy == pytest.approx(-1.745564527, abs=1e-8)


@pytest.mark.parametrize("L,T", [(16, 1.5), (16, TC_2D), (64, 2.4), (256, 3.0)])
def test_finite_lattice_derivatives_match_finite_differences(L, T):
    """<E> and C are analytic derivatives of ln Z; check with a 6th-order
    central difference in beta."""
    beta, h, N = 1.0 / T, 1e-3 * 16 / L, L * L
    f = [finite_lattice(L, 1.0 / (beta + k * h)).log_z for k in range(-3, 4)]
    d1 = (-f[0] + 9 * f[1] - 45 * f[2] + 45 * f[4] - 9 * f[5] + f[6]) / (60 * h)
    d2 = (2 * f[0] - 27 * f[1] + 270 * f[2] - 490 * f[3] + 270 * f[4] - 27 * f[5]
          + 2 * f[6]) / (180 * h * h)
    r = finite_lattice(L, T)
    assert r.energy == pytest.approx(-d1 / N, abs=1e-8)
    assert r.specific_heat == pytest.approx(beta ** 2 * d2 / N, rel=1e-6)


def test_finite_lattice_large_L_approaches_onsager():
    T = np.array([1.0, 1.5, 2.0, 2.6, 3.0, 5.0])       # off-critical
    r = finite_lattice(256, T)
    np.testing.assert_allclose(r.energy, onsager_energy(T), atol=1e-4)
    np.testing.assert_allclose(r.specific_heat, onsager_specific_heat(T), atol=1e-4)
    big = finite_lattice(2048, TC_2D)                  # no overflow at Tc
    assert np.isfinite([big.log_z, big.energy, big.specific_heat]).all()
    assert big.energy == pytest.approx(-math.sqrt(2), abs=1e-3)
    assert big.free_energy == pytest.approx(-TC_2D * big.log_z / 2048 ** 2)


def test_finite_lattice_limits_and_shapes():
    low = finite_lattice(8, 1.0 / 300)                 # two ground states
    assert low.energy == pytest.approx(-2.0, abs=1e-15)
    assert low.log_z == pytest.approx(2 * 64 * 300 + math.log(2), rel=1e-15)
    high = finite_lattice(8, 1e6)
    assert high.log_z == pytest.approx(64 * math.log(2), rel=1e-9)
    r = finite_lattice(6, [1.0, 2.0, 3.0])
    assert r.energy.shape == (3,) and isinstance(finite_lattice(6, 2.0).energy, float)


def test_antiferromagnet():
    T = np.array([0.5, 2.0, 4.0])
    f, e = finite_lattice(4, T, J=-1.0), enumerate_lattice(4, 4, T, J=-1.0)
    np.testing.assert_allclose(f.energy, e.energy, atol=1e-12)
    np.testing.assert_allclose(f.energy, finite_lattice(4, T).energy, atol=1e-14)
    cold = enumerate_lattice(4, 4, 0.1, J=-2.0)        # Neel state: E/N = -2|J|
    assert cold.energy == pytest.approx(-4.0, abs=1e-12)
    assert cold.m2 == pytest.approx(0.0, abs=1e-12)


def test_enumeration_field():
    r = enumerate_lattice(4, 4, 2.0, h=0.1)
    assert r.magnetization > 0.1
    d = 1e-5
    up, dn = enumerate_lattice(4, 4, 2.0, h=0.1 + d), enumerate_lattice(4, 4, 2.0, h=0.1 - d)
    # chi = d<m>/dh, and the energy includes the field term
    assert r.susceptibility == pytest.approx((up.magnetization - dn.magnetization) / (2 * d),
                                             rel=1e-7)
    zero = enumerate_lattice(4, 4, 2.0)
    assert zero.magnetization == pytest.approx(0.0, abs=1e-15)
    assert zero.susceptibility == pytest.approx(zero.m2 * 16 / 2.0)
    assert 0 < zero.susceptibility_abs < zero.susceptibility


def test_onsager():
    assert onsager_energy(TC_2D) == pytest.approx(-math.sqrt(2), abs=1e-12)
    assert onsager_energy(1e-3) == pytest.approx(-2.0, abs=1e-15)
    # high-T series: ln Z/N = ln 2 + 2 ln cosh K + t^4 + 2 t^6 + O(t^8), t = tanh K
    t = math.tanh(0.01)
    assert onsager_energy(100.0) == pytest.approx(-(2 * t + (4 * t ** 3 + 12 * t ** 5) * (1 - t * t)),
                                                  rel=1e-11)
    # magnetization: Yang's formula evaluated independently; 0 above Tc
    assert onsager_magnetization(2.0) == pytest.approx((1 - math.sinh(1.0) ** -4) ** 0.125,
                                                       abs=1e-15)
    assert onsager_magnetization(2.0) == pytest.approx(0.911319377877496, abs=1e-12)
    np.testing.assert_array_equal(onsager_magnetization([2.3, 5.0]), [0.0, 0.0])
    # c = du/dT
    for T in [1.0, 2.0, 2.2, 2.4, 3.0]:
        h = 1e-4
        du = (onsager_energy(T - 2 * h) - 8 * onsager_energy(T - h) + 8 * onsager_energy(T + h)
              - onsager_energy(T + 2 * h)) / (12 * h)
        assert onsager_specific_heat(T) == pytest.approx(du, abs=1e-8)
    assert onsager_specific_heat(TC_2D) > 10


def test_ising_value_errors():
    with pytest.raises(ValueError, match="T must be > 0"):
        finite_lattice(4, 0.0)
    with pytest.raises(ValueError, match="T must be > 0"):
        onsager_energy([1.0, -1.0])
    with pytest.raises(ValueError, match="T has .*non-finite"):
        onsager_energy(float("nan"))
    with pytest.raises(ValueError, match="T must not be empty"):
        onsager_specific_heat([])
    with pytest.raises(ValueError, match="L must be >= 2"):
        finite_lattice(1, 2.0)
    with pytest.raises(ValueError, match="Ly must be >= 2"):
        finite_lattice((4, 1), 2.0)
    with pytest.raises(ValueError, match="pair"):
        finite_lattice((4, 4, 4), 2.0)
    with pytest.raises(ValueError, match="J must be nonzero"):
        finite_lattice(4, 2.0, J=0.0)
    with pytest.raises(ValueError, match="even Lx and Ly"):
        finite_lattice(5, 2.0, J=-1.0)
    with pytest.raises(ValueError, match="T must be >="):
        finite_lattice(4, 1e-3)
    with pytest.raises(ValueError, match="J must be > 0"):
        onsager_magnetization(1.0, J=-1.0)
    with pytest.raises(ValueError, match="Lx\\*Ly must be <= 20"):
        enumerate_lattice(5, 5, 2.0)
    with pytest.raises(ValueError, match="Lx must be >= 2"):
        enumerate_lattice(1, 4, 2.0)
    with pytest.raises(ValueError, match="h must be finite"):
        enumerate_lattice(4, 4, 2.0, h=float("inf"))


# ------------------------------------------------------ Bessel / Kuramoto
def test_bessel_against_scipy():
    x = np.concatenate([np.linspace(-60, 60, 4001), np.geomspace(1e-10, 700, 800),
                        [0.0, 20.0, np.nextafter(20.0, 30.0)]])
    for ours, ref in [(exact.bessel_i0, sp.i0), (exact.bessel_i1, sp.i1),
                      (exact.bessel_i0e, sp.i0e), (exact.bessel_i1e, sp.i1e)]:
        np.testing.assert_allclose(ours(x), ref(x), rtol=1e-13, atol=0)
    big = np.array([-1e300, -1e4, 1e3, 1e8])
    np.testing.assert_allclose(exact.bessel_ratio_i1_i0(np.concatenate([x, big])),
                               sp.i1e(np.concatenate([x, big])) / sp.i0e(np.concatenate([x, big])),
                               rtol=1e-13)
    assert isinstance(exact.bessel_i0(1.0), float)


def test_kuramoto_order_parameter():
    assert exact.kuramoto_order_parameter(4.0, 1.0) == pytest.approx(0.8315, abs=5e-5)
    K = np.array([0.5, 2.0, 2.5, 4.0, 8.0, 50.0])
    r = exact.kuramoto_order_parameter(K * 0.3, 0.3)
    assert r[0] == 0.0 and r[1] == 0.0
    # self-consistency, checked with scipy's Bessel functions
    a = K[2:] * r[2:]
    np.testing.assert_allclose(sp.i1e(a) / sp.i0e(a), r[2:], rtol=1e-13)
    # near threshold r^2 ~ 8 (a - 2) / a^3 from R(x) ~ x/2 - x^3/16
    eps = 1e-3
    r2 = exact.kuramoto_order_parameter(2 + eps, 1.0) ** 2
    assert r2 == pytest.approx(8 * eps / (2 + eps) ** 3, rel=1e-2)


def test_kuramoto_takes_the_simulation_convention():
    """(K, kT) as in clphys.sde.kuramoto: the old D-named argument is gone (a
    caller passing D = kT/gamma by keyword gets a TypeError, not a wrong r)."""
    assert exact.kuramoto_order_parameter(K=4.0, kT=1.0) == exact.kuramoto_order_parameter(8.0, 2.0)
    with pytest.raises(TypeError):
        exact.kuramoto_order_parameter(4.0, D=0.4)
    with pytest.raises(TypeError):
        exact.kuramoto_subcritical_r2(1.0, D=1.0, N=10)


def test_kuramoto_subcritical_r2():
    assert exact.kuramoto_subcritical_r2(0.0, 1.0, 100) == pytest.approx(0.01)
    assert exact.kuramoto_subcritical_r2(1.0, 1.0, 100) == pytest.approx(0.02)
    np.testing.assert_allclose(exact.kuramoto_subcritical_r2([0.0, 1.5], 1.0, 10), [0.1, 0.4])


def test_kuramoto_value_errors():
    with pytest.raises(ValueError, match="kT must be > 0"):
        exact.kuramoto_order_parameter(1.0, 0.0)
    with pytest.raises(ValueError, match="K has .*non-finite"):
        exact.kuramoto_order_parameter(float("nan"), 1.0)
    with pytest.raises(ValueError, match="K must be < 2 kT"):
        exact.kuramoto_subcritical_r2(2.0, 1.0, 10)
    with pytest.raises(ValueError, match="N must be >= 1"):
        exact.kuramoto_subcritical_r2(1.0, 1.0, 0)
    with pytest.raises(ValueError, match="x has .*non-finite"):
        exact.bessel_i0([1.0, float("inf")])


# -------------------------------------------------------------- ACRW
def test_acrw_formulas():
    assert exact.acrw_increment_autocorrelation(0.25, 0) == 1.0
    assert exact.acrw_increment_autocorrelation(0.25, 1) == pytest.approx(-0.25)
    np.testing.assert_array_equal(exact.acrw_increment_autocorrelation(0.1, [2, 7]), [0, 0])
    np.testing.assert_allclose(exact.acrw_msd(0.1, [0, 1, 10]), [0.0, 0.7, 2.5])
    assert exact.acrw_increment_variance(0.1) == pytest.approx(0.7)
    assert exact.random_walk_hurst() == 0.5


def test_acrw_monte_carlo():
    rng = np.random.default_rng(12345)
    phi, walkers, steps = 0.1, 4000, 200
    u = rng.random((walkers, steps))
    xi = np.where(u < phi, 1, np.where(u < 2 * phi, -1, 0))
    a = np.cumsum(xi, axis=1)
    p = a + rng.integers(0, 2, (walkers, steps))
    x = np.diff(p, axis=1).astype(float)
    var = exact.acrw_increment_variance(phi)
    assert x.var() == pytest.approx(var, abs=3 * np.sqrt(2.0 / x.size) * var * 1.5)
    for k in (1, 2):
        rho = np.mean(x[:, :-k] * x[:, k:]) / var
        assert abs(rho - exact.acrw_increment_autocorrelation(phi, k)) < 3 / np.sqrt(x[:, k:].size)
    for dt in (1, 10, 100):
        d2 = (p[:, 50 + dt] - p[:, 50]).astype(float) ** 2      # one sample per walker: iid
        assert abs(d2.mean() - exact.acrw_msd(phi, dt)) < 3 * d2.std() / np.sqrt(walkers)


def test_acrw_value_errors():
    with pytest.raises(ValueError, match="phi must be <= 0.5"):
        exact.acrw_msd(0.6, 1)
    with pytest.raises(ValueError, match="phi must be >= 0"):
        exact.acrw_increment_autocorrelation(-0.1, 1)
    with pytest.raises(ValueError, match="lag must be >= 0"):
        exact.acrw_msd(0.1, [1, -1])
    with pytest.raises(ValueError, match="lag must be integer"):
        exact.acrw_msd(0.1, 1.5)


# ---------------------------------------------------------------- SDEs
def test_washboard_sin_mean():
    for kT in (0.3, 1.0, 5.0):
        Z = si.quad(lambda x, kT=kT: np.exp(-np.sin(2 * np.pi * x) / kT), 0, 1, epsabs=0, epsrel=1e-13)[0]
        S = si.quad(lambda x, kT=kT: np.sin(2 * np.pi * x) * np.exp(-np.sin(2 * np.pi * x) / kT), 0, 1,
                    epsabs=0, epsrel=1e-13)[0]
        assert exact.washboard_stationary_sin_mean(kT) == pytest.approx(S / Z, rel=1e-10)
    a = 1000.0           # kT = 1e-3: I1/I0 = 1 - 1/(2a) - 1/(8a^2) + O(a^-3)
    assert exact.washboard_stationary_sin_mean(1e-3) == pytest.approx(
        -(1 - 1 / (2 * a) - 1 / (8 * a * a)), abs=1e-9)
    assert exact.washboard_stationary_sin_mean(2.0, V0=0.0) == 0.0


def _velocity_bessel_series(f, kT, gamma, V0, L, kmax=200):
    """Independent route: Fourier coefficients of e^{+-V/kT} are Bessel I_k,
    giving v = (kT/gamma) / [I0^2/lam + 2 sum_k (-1)^k I_k^2 lam/(lam^2 + (2 pi k/L)^2)],
    lam = f/kT, I_k = I_k(V0/kT) (exponentially scaled here)."""
    A, lam = V0 / kT, f / kT
    k = np.arange(1, kmax)
    s = sp.ive(0, A) ** 2 / lam + 2 * np.sum((-1.0) ** k * sp.ive(k, A) ** 2 * lam
                                             / (lam ** 2 + (2 * np.pi * k / L) ** 2))
    return kT / gamma / s * np.exp(-2 * A)


@pytest.mark.parametrize("f,kT,gamma,V0,L", [(1.0, 1.0, 1.0, 1.0, 1.0), (3.0, 0.5, 1.0, 1.0, 1.0),
                                             (10.0, 0.3, 1.0, 1.0, 1.0), (6.0, 0.25, 1.0, 1.0, 1.0),
                                             (2.0, 1.0, 2.0, 0.5, 2.0), (0.05, 0.7, 0.5, 1.3, 0.5)])
def test_washboard_velocity_vs_bessel_series(f, kT, gamma, V0, L):
    v = exact.overdamped_tilted_washboard_velocity(f, kT, gamma=gamma, V0=V0, period=L)
    assert v == pytest.approx(_velocity_bessel_series(f, kT, gamma, V0, L), rel=1e-11)


def test_washboard_velocity_limits():
    v = exact.overdamped_tilted_washboard_velocity
    assert v(0.0, 1.0) == 0.0
    assert v(-2.0, 0.7) == pytest.approx(-v(2.0, 0.7), rel=1e-14)
    assert v(3.0, 0.5, gamma=2.0, V0=0.0) == pytest.approx(1.5, rel=1e-13)
    assert v(1.0, 1e4) == pytest.approx(1.0, rel=1e-6)               # kT >> V0
    f = 1e-6                                                         # linear response
    assert v(f, 1.0, gamma=2.0) / f == pytest.approx(1 / (2.0 * sp.i0(1.0) ** 2), rel=1e-5)
    a = 2 * np.pi                                                    # deterministic, f > 2 pi V0
    assert v(2 * a, 0.01) == pytest.approx(np.sqrt(3) * a, rel=1e-4)
    assert 0 < v(3.0, 0.02) < 1e-14                                  # locked: Arrhenius


def test_langevin_moments():
    assert exact.free_brownian_variance(0.5, 3.0) == 3.0
    np.testing.assert_allclose(exact.free_brownian_variance(2.0, [0, 1]), [0, 4])
    g, kT, v0, t, h = 0.7, 1.3, 2.0, 0.9, 1e-5
    m = lambda s: exact.ou_velocity_mean(v0, g, s)
    m2 = lambda s: exact.ou_velocity_second_moment(v0, g, kT, s)
    assert m(0.0) == v0 and m2(0.0) == pytest.approx(v0 * v0)
    assert m2(1e3) == pytest.approx(kT)                               # equipartition
    # moment equations of dv = -g v dt + sqrt(2 g kT) dW
    assert (m(t + h) - m(t - h)) / (2 * h) == pytest.approx(-g * m(t), rel=1e-8)
    assert (m2(t + h) - m2(t - h)) / (2 * h) == pytest.approx(-2 * g * m2(t) + 2 * g * kT,
                                                              rel=1e-8)


def test_sde_value_errors():
    with pytest.raises(ValueError, match="kT must be > 0"):
        exact.washboard_stationary_sin_mean(0.0)
    with pytest.raises(ValueError, match="kT must be > 0"):
        exact.overdamped_tilted_washboard_velocity(1.0, -1.0)
    with pytest.raises(ValueError, match="gamma must be > 0"):
        exact.overdamped_tilted_washboard_velocity(1.0, 1.0, gamma=0.0)
    with pytest.raises(ValueError, match="period must be > 0"):
        exact.overdamped_tilted_washboard_velocity(1.0, 1.0, period=0.0)
    with pytest.raises(ValueError, match="V0 must be >= 0"):
        exact.overdamped_tilted_washboard_velocity(1.0, 1.0, V0=-1.0)
    with pytest.raises(ValueError, match="f must be finite"):
        exact.overdamped_tilted_washboard_velocity(float("nan"), 1.0)
    with pytest.raises(ValueError, match="t must be >= 0"):
        exact.free_brownian_variance(1.0, -1.0)
    with pytest.raises(ValueError, match="D must be >= 0"):
        exact.free_brownian_variance(-1.0, 1.0)
    with pytest.raises(ValueError, match="gamma must be >= 0"):
        exact.ou_velocity_mean(1.0, -1.0, 1.0)
    with pytest.raises(ValueError, match="kT must be >= 0"):
        exact.ou_velocity_second_moment(1.0, 1.0, -1.0, 1.0)
