"""Noisy Kuramoto model on every test device: the mean-field and all-pairs
kernels against each other and against NumPy, and the order parameter
against the N -> inf self-consistency and the subcritical fluctuations."""

import numpy as np
import pytest

from clphys import exact
from clphys.sde import Kuramoto, kuramoto
from clphys.sde.reference import kuramoto_normals
from conftest import require_fp64


def _angle_diff(a, b):
    return np.abs(np.angle(np.exp(1j * (a - b)))).max()


def _numpy_kuramoto(theta, K, omega, kT, gamma, dt, steps, seed, scheme):
    """Reference: the same Gaussians, float64, K an (N, N) matrix."""
    th = theta.astype(np.float64)
    amp = np.sqrt(2 * kT * dt / gamma)

    def drift(x):
        s, c = np.sin(x), np.cos(x)
        return (omega + c * (K @ s) - s * (K @ c)) / gamma

    for n in range(steps):
        w = amp * kuramoto_normals(seed, len(th), n)
        a = drift(th)
        if scheme == "euler":
            th = th + a * dt + w
        else:
            th = th + 0.5 * dt * (a + drift(th + a * dt + w)) + w
        th = np.mod(th, 2 * np.pi)
    return th


@pytest.mark.parametrize("scheme", ["euler", "srk2"])
def test_kernels_match_numpy(device, scheme):
    """A general K_ij (all-pairs, matrix), K/N (mean-field and all-pairs) and
    frequencies omega_i against NumPy with the same Gaussians. N = 203 is not
    a multiple of 4 nor of the tile; 3 slices of the j range."""
    n, steps, dt = 203, 12, 0.05
    rng = np.random.default_rng(1)
    th0 = rng.uniform(0, 2 * np.pi, n)
    om = rng.normal(size=n)
    Kmat = rng.uniform(-1, 3, (n, n)) / n
    cases = [(Kmat, "all-pairs", Kmat), (2.0, "all-pairs", np.full((n, n), 2.0 / n)),
             (2.0, "mean-field", np.full((n, n), 2.0 / n))]
    for coupling, kernel, K in cases:
        sim = Kuramoto(n, coupling, kT=0.3, gamma=1.5, omega=om, dt=dt, kernel=kernel, scheme=scheme,
                       seed=9, initial=th0, work_group_size=32, slices=3, device=device)
        res = sim.run(steps=steps, sample_every=5)
        want = _numpy_kuramoto(th0, K, om, 0.3, 1.5, dt, steps, 9, scheme)
        assert _angle_diff(res.theta, want) < 2e-4, kernel
        z = np.exp(1j * want).mean()
        assert res.r[-1] == pytest.approx(abs(z), abs=1e-4)
        assert np.angle(np.exp(1j * (res.psi[-1] - np.angle(z)))) == pytest.approx(0, abs=1e-3)
        assert res.times.tolist() == pytest.approx([0, 0.25, 0.5, 0.6])


def test_all_pairs_and_mean_field_agree(device):
    a = Kuramoto(1000, 3.0, kT=0.5, dt=0.02, kernel="mean-field", seed=3, device=device)
    b = Kuramoto(1000, 3.0, kT=0.5, dt=0.02, kernel="all-pairs", seed=3, device=device)
    ra, rb = a.run(steps=60, sample_every=20), b.run(steps=60, sample_every=20)
    assert _angle_diff(a.theta, b.theta) < 1e-3
    assert np.allclose(ra.r, rb.r, atol=1e-4)


def test_order_parameter_above_onset(device):
    """K/kT = 4: r = I1(K r/kT)/I0(K r/kT) = 0.8315 for N -> inf; N = 2048
    fluctuates by ~0.02 around it with correlation time ~0.5: averaged over
    t in [4, 15] the error is ~0.005."""
    res = kuramoto(2048, 4.0, kT=1.0, t_end=15.0, dt=0.02, sample_every=5, initial="sync",
                   seed=2, device=device)
    late = res.r[res.times >= 4.0]
    want = exact.kuramoto_order_parameter(4.0, 1.0)
    assert want == pytest.approx(0.8315, abs=1e-4)
    assert abs(late.mean() - want) < 0.015


def test_order_parameter_with_friction(device):
    """gamma = 2.5: gamma dtheta = K r sin(psi - theta) dt + sqrt(2 gamma kT) dW
    has the stationary density exp((K r/kT) cos(theta - psi)) whatever gamma,
    so r solves r = I1(K r/kT)/I0(K r/kT) with K/kT = 4 (r = 0.8315), not
    K/D = K gamma/kT = 10 (r = 0.947, what the exact value with D = kT/gamma
    gave). gamma slows the dynamics 2.5 times: t_end and dt scale with it;
    the error of the time average is ~0.005 as in the gamma = 1 test."""
    import scipy.special as sp
    gamma = 2.5
    res = kuramoto(2048, 4.0, kT=1.0, gamma=gamma, t_end=15.0 * gamma, dt=0.02 * gamma,
                   sample_every=5, initial="sync", seed=7, device=device)
    r = res.r[res.times >= 4.0 * gamma].mean()
    want = exact.kuramoto_order_parameter(4.0, 1.0)
    assert abs(r - want) < 0.015, (r, want)
    assert abs(r - exact.kuramoto_order_parameter(4.0, 1.0 / gamma)) > 0.08
    # the self-consistency equation itself, at the simulated r
    x = 4.0 * r / 1.0
    assert abs(sp.i1e(x) / sp.i0e(x) - r) < 0.015


def test_incoherent_below_onset(device):
    """K < 2 kT: <r^2> = 1/(N (1 - K/2kT)); K = 1, kT = 1, N = 1024 gives 2/N.
    r^2 decorrelates in ~1 time unit: 100 of them give a 10% error; 30% is
    3 sigma. Above onset (K = 2.5) r approaches the nonzero root instead."""
    n = 1024
    res = kuramoto(n, 1.0, kT=1.0, t_end=110.0, dt=0.05, sample_every=4, seed=4, device=device)
    r2 = (res.r[res.times >= 10.0] ** 2).mean()
    want = exact.kuramoto_subcritical_r2(1.0, 1.0, n)
    assert abs(r2 / want - 1) < 0.3, (r2, want)
    above = kuramoto(n, 2.5, kT=1.0, t_end=40.0, dt=0.05, sample_every=4, initial="sync", seed=4,
                     device=device)
    r_above = above.r[above.times >= 10.0].mean()
    assert abs(r_above - exact.kuramoto_order_parameter(2.5, 1.0)) < 0.05
    assert np.sqrt(r2) < 0.2 * r_above


def test_float64(device):
    require_fp64(device)
    a = Kuramoto(300, 2.0, kT=0.5, dt=0.02, seed=5, dtype="float64", device=device)
    b = Kuramoto(300, 2.0, kT=0.5, dt=0.02, seed=5, dtype="float32", device=device)
    a.run(steps=30)
    b.run(steps=30)
    assert _angle_diff(a.theta, b.theta) < 1e-4


def test_bad_input(device):
    cases = [
        (dict(n=0), ValueError, "n must be >= 1"),
        (dict(coupling=np.ones((3, 3))), ValueError, r"shape \(10, 10\)"),
        (dict(coupling="strong"), ValueError, "real number K"),
        (dict(coupling=np.nan), ValueError, "non-finite"),
        (dict(coupling=np.ones((10, 10)), kernel="mean-field"), ValueError, "constant coupling"),
        (dict(kernel="fft"), ValueError, "kernel"),
        (dict(kT=-1.0), ValueError, "kT must be >= 0"),
        (dict(gamma=0.0), ValueError, "gamma must be > 0"),
        (dict(dt=0.0), ValueError, "dt must be > 0"),
        (dict(omega=np.ones(3)), ValueError, "omega"),
        (dict(initial="random"), ValueError, "initial"),
        (dict(initial=np.ones(4)), ValueError, "initial"),
        (dict(scheme="rk4"), ValueError, "scheme"),
        (dict(dtype="half"), ValueError, "dtype"),
        (dict(work_group_size=48), ValueError, "power of two"),
        (dict(slices=0), ValueError, "slices"),
    ]
    for kw, exc, what in cases:
        args = {"n": 10, "coupling": 1.0, "device": device, **kw}
        with pytest.raises(exc, match=what):
            Kuramoto(args.pop("n"), args.pop("coupling"), **args)
    sim = Kuramoto(10, 1.0, device=device)
    for kw, what in ((dict(), "exactly one"), (dict(t_end=0.0), "later than"),
                     (dict(steps=2, sample_every=0), "sample_every")):
        with pytest.raises(ValueError, match=what):
            sim.run(**kw)
