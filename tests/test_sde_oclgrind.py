"""Every SDE kernel once on the Oclgrind simulator at a tiny size (races,
uninitialised reads, out-of-bounds accesses fail the test), and the same
seed on Oclgrind and on the test devices."""

import numpy as np
import pytest

from clphys.sde import Ensemble, Kuramoto, Model, models

OU = Model(["v"], {"v": "-gamma*v"}, {"v": "sqrt(2*gamma*kT)"}, ["gamma", "kT"], name="ou")


@pytest.mark.parametrize("rng, scheme", [("philox", "srk2"), ("xorshift32", "euler")])
def test_ensemble_kernels_on_oclgrind(oclgrind, rng, scheme):
    """sde_init_uniform, sde_advance (observables, histograms, recorded paths,
    a grid of 2 points, 5 paths per point in work groups of 4) and sde_moments."""
    ens = Ensemble(models.JOSEPHSON, 5, {"gamma": 0.9, "a": [4.0, 4.2], "omega": 4.9, "f": 0.1,
                                         "kT": 0.01},
                   0.0128, rng=rng, scheme=scheme, work_group_size=4,
                   initial={"x": ("uniform", 0, 1), "v": 0.5}, device=oclgrind)
    res = ens.run(steps=3, sample_every=2, observables=["v", "unwrap(x)", "displacement(x)"],
                  histograms={"x": (4, 0.0, 1.0)}, record_paths=2)
    assert res.mean["v"].shape == (2, 2)
    assert res.hist["x"].sum() == 2 * 2 * 5
    assert np.array_equal(res.paths["v"][-1], ens.values()["v"][:, :2])
    # a second run continues from the time the first left (the carried t buffers)
    ens.set_origin()
    res = ens.run(steps=2, observables=["displacement(v)", "t"])
    assert res.mean["t"][-1] == pytest.approx(np.full(2, 5 * 0.0128), abs=1e-6)


def test_kuramoto_kernels_on_oclgrind(oclgrind):
    """Mean-field (Euler, SRK2) and all-pairs (uniform K/N and a matrix, 2
    slices) at N = 10, work groups of 4."""
    n = 10
    K = np.random.default_rng(0).uniform(0, 1, (n, n)) / n
    for coupling, kernel, scheme in ((2.0, "mean-field", "euler"), (2.0, "mean-field", "srk2"),
                                     (2.0, "all-pairs", "euler"), (K, "all-pairs", "srk2")):
        sim = Kuramoto(n, coupling, kT=0.5, dt=0.05, kernel=kernel, scheme=scheme, seed=1,
                       omega=np.linspace(-1, 1, n) if kernel == "all-pairs" else 0.0,
                       work_group_size=4, slices=2, device=oclgrind)
        res = sim.run(steps=2)
        assert res.r.shape == (3,) and np.all((res.r >= 0) & (res.r <= 1))


def test_same_seed_on_oclgrind_and_devices(oclgrind, device):
    """The Gaussians are identical words on every device; with the same
    arithmetic the trajectories agree to float32 rounding. (Both compilers
    are LLVM based here; bit-identity is not promised across vendors.)"""
    out = []
    for dev in (oclgrind, device):
        ens = Ensemble(OU, 6, {"gamma": 1.0, "kT": [0.5, 2.0]}, 0.05, seed=13, work_group_size=4,
                       initial={"v": 1.0}, device=dev)
        res = ens.run(steps=20, sample_every=10)
        out.append((ens.values()["v"], res.mean["v"]))
    assert np.allclose(out[0][0], out[1][0], rtol=0, atol=1e-6)
    assert np.allclose(out[0][1], out[1][1], rtol=0, atol=1e-6)
    k = [Kuramoto(12, 2.0, kT=0.5, dt=0.05, seed=2, work_group_size=4, device=d) for d in (oclgrind, device)]
    for sim in k:
        sim.run(steps=3)
    assert np.abs(np.angle(np.exp(1j * (k[0].theta - k[1].theta)))).max() < 1e-5
