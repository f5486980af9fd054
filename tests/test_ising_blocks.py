"""The "blocks" (double red-black) Ising backend: bit-exact against its NumPy
twin, identical on PoCL and Oclgrind, exact thermodynamics for every RNG and
for inner_sweeps 1 and > 1, checkpoints, bad input, template rendering."""

import numpy as np
import pytest

from clphys.exact import finite_lattice
from clphys.ising.blocks import BlocksBackend, default_tile, reference_sweeps
from clphys.ising.thresholds import metropolis_thresholds
from clphys.runtime import Device, fake_facts, render

RNGS = BlocksBackend.rngs


def _random_spins(shape, seed):
    return np.random.default_rng(seed).choice(np.array([-1, 1], np.int8), size=shape)


def _thresholds_pair():
    # replica 0: ferromagnet in a field; replica 1: antiferromagnet, other field
    return np.stack([metropolis_thresholds(2, 2.3, 1.0, 0.2),
                     metropolis_thresholds(2, 1.7, -0.6, -0.1)])


def _numpy_sums(s):
    bonds = (s * np.roll(s, 1, 1)).sum((1, 2)) + (s * np.roll(s, 1, 2)).sum((1, 2))
    return bonds, s.sum((1, 2))


# ------------------------------------------------------------ bit-exact
# (tile, lattice): narrow tiles (several plane rows per word), one word per
# plane row, and interleaved multi-word rows.
GEOMETRIES = [((16, 16), (32, 32)), ((32, 16), (64, 32)), ((128, 16), (256, 32))]


@pytest.mark.parametrize("rng", RNGS)
@pytest.mark.parametrize("tile,shape", GEOMETRIES)
def test_matches_numpy_twin(device, rng, tile, shape):
    Lx, Ly = shape
    s0 = _random_spins((2, Ly, Lx), 1)
    thr = _thresholds_pair()
    b = BlocksBackend(device, shape, 2, rng=rng, seed=7, inner_sweeps=2, tile=tile)
    b.set_spins(s0)
    b.sweep(1, thr)
    b.sweep(2, thr)           # a second call continues the counters
    got = b.spins()
    want, states = reference_sweeps(s0, thr, 3, tile=tile, rng=rng, seed=7, inner_sweeps=2)
    assert (got != s0).mean() > 0.2             # something happened
    np.testing.assert_array_equal(got, want)
    for a, w in zip(b.sums(), _numpy_sums(got)):
        np.testing.assert_array_equal(a, w)
    if rng == "halfbit-lcg":
        np.testing.assert_array_equal(b.get_state()["rng_states"], states)


@pytest.mark.parametrize("rng", RNGS)
@pytest.mark.parametrize("unroll", [0, 1, 4])
def test_site_loop_variants_match_twin(device, rng, unroll):
    """The `unroll` tuning knob changes the code, not the results."""
    for tile, shape in (GEOMETRIES[0], GEOMETRIES[2]):
        Lx, Ly = shape
        s0 = _random_spins((2, Ly, Lx), 4)
        thr = _thresholds_pair()
        b = BlocksBackend(device, shape, 2, rng=rng, seed=3, tile=tile, unroll=unroll)
        b.set_spins(s0)
        b.sweep(2, thr)
        want, _ = reference_sweeps(s0, thr, 2, tile=tile, rng=rng, seed=3)
        np.testing.assert_array_equal(b.spins(), want)


@pytest.mark.parametrize("rng", RNGS)
def test_state_round_trip(device, rng):
    thr = _thresholds_pair()
    kw = dict(rng=rng, seed=11, inner_sweeps=3)
    a = BlocksBackend(device, (64, 32), 2, **kw)
    a.set_spins(_random_spins((2, 32, 64), 2))
    a.sweep(2, thr)
    spins, state = a.spins(), a.get_state()
    a.sweep(3, thr)
    b = BlocksBackend(device, (64, 32), 2, **kw)
    b.set_spins(spins)
    b.set_state(state)
    b.sweep(3, thr)
    np.testing.assert_array_equal(a.spins(), b.spins())
    assert b.get_state()["sweeps"] == 5
    other = BlocksBackend(device, (64, 32), 2, rng=rng, seed=12, inner_sweeps=3)
    with pytest.raises(ValueError, match="seed"):
        other.set_state(state)
    with pytest.raises(ValueError, match="lacks"):
        b.set_state({"sweeps": 1})


@pytest.mark.slow
def test_pocl_and_oclgrind_agree(device, oclgrind):
    """Every kernel on Oclgrind (races, uninitialised reads), same spins and sums."""
    for rng in RNGS:
        for (tile, shape), unroll in ((GEOMETRIES[0], 0), (GEOMETRIES[2], 1), (GEOMETRIES[0], 4)):
            Lx, Ly = shape
            s0 = _random_spins((2, Ly, Lx), 3)
            out = []
            for dev in (device, oclgrind):
                b = BlocksBackend(dev, shape, 2, rng=rng, seed=5, inner_sweeps=2, tile=tile,
                                  unroll=unroll)
                b.set_spins(s0)
                b.sweep(1, _thresholds_pair())
                out.append((b.spins(), b.sums()))
            np.testing.assert_array_equal(out[0][0], out[1][0])
            for a, w in zip(out[1][1], _numpy_sums(out[1][0])):
                np.testing.assert_array_equal(a, w)


# ------------------------------------------------------------ physics
def _jackknife(f, *cols):
    """f of per-replica column means, with the jackknife error over replicas."""
    n = cols[0].shape[1]
    full = f(*(c.mean(0).mean() for c in cols))
    loo = np.array([f(*(np.delete(c.mean(0), i).mean() for c in cols)) for i in range(n)])
    return full, np.sqrt((n - 1) / n * ((loo - loo.mean()) ** 2).sum())


def _sample(b, thr, n_therm, n_meas):
    """Per-sweep (bond sum, magnetisation) series, shape (n_meas, n_replicas)."""
    b.sweep(n_therm, thr)
    bonds, mags = np.empty((2, n_meas, b.n_replicas))
    for t in range(n_meas):
        b.sweep(1, thr)
        bonds[t], mags[t] = b.sums()
    return bonds, mags


@pytest.mark.slow
@pytest.mark.parametrize("rng,inner", [("halfbit-lcg", 1), ("halfbit-lcg", 4),
                                       ("philox", 1), ("philox", 2)])
def test_exact_thermodynamics(device, rng, inner):
    """L = 32, 32 replicas per case in one launch: <E>/N and C/N at T = 2.0
    and 2.5 (Kaufman), an antiferromagnet J = -1 at T = 2.0 (same values on
    the bipartite torus) and free spins in a field (J = 0, <m> = tanh(h/T));
    each within 3 sigma (jackknife over replicas)."""
    L, n = 32, 32
    cases = [(2.0, 1.0, 0.0), (2.5, 1.0, 0.0), (2.0, -1.0, 0.0), (1.0, 0.0, 0.3)]
    T, J, h = (np.repeat([c[i] for c in cases], n) for i in range(3))
    thr = np.stack([metropolis_thresholds(2, *c) for c in zip(T, J, h)])
    start = np.ones((len(T), L, L), np.int8)
    start[2 * n:3 * n] *= np.where(np.add.outer(np.arange(L), np.arange(L)) % 2, -1, 1).astype(np.int8)
    b = BlocksBackend(device, (L, L), len(T), rng=rng, seed=2024, inner_sweeps=inner)
    assert b.tile == (16, 16)
    b.set_spins(start)
    bonds, mags = _sample(b, thr, 300, 1500)
    N = L * L
    exact = finite_lattice(L, [2.0, 2.5])
    E = -J * bonds - h * mags
    for c, (t, want_e, want_c) in enumerate([(2.0, exact.energy[0], exact.specific_heat[0]),
                                             (2.5, exact.energy[1], exact.specific_heat[1]),
                                             (2.0, exact.energy[0], exact.specific_heat[0])]):
        Ec = E[:, c * n:(c + 1) * n]
        e, de = _jackknife(lambda m1: m1 / N, Ec)
        cv, dc = _jackknife(lambda m1, m2: (m2 - m1 ** 2) / (t * t * N), Ec, Ec ** 2)
        assert abs(e - want_e) < 3 * de, (c, e, de, want_e)
        assert abs(cv - want_c) < 3 * dc, (c, cv, dc, want_c)
        assert de < 2e-3 and dc < 0.06          # the test has teeth
    m, dm = _jackknife(lambda m1: m1 / N, mags[:, 3 * n:])
    assert abs(m - np.tanh(0.3)) < 3 * dm and dm < 3e-3, (m, dm)


# ------------------------------------------------------------ input checks
def _no_device(vendor="amd"):
    """A Device with facts but no context: any device work would fail."""
    dev = Device.__new__(Device)
    dev.facts = fake_facts(vendor)
    return dev


@pytest.mark.parametrize("shape", [(30, 32), (32, 48), (16, 16), (0, 32)])
def test_shape_errors_name_the_allowed_sizes(shape):
    with pytest.raises(ValueError, match="multiples of 32"):
        BlocksBackend.check_shape(shape)
    with pytest.raises(ValueError, match="multiples of 32"):
        BlocksBackend(_no_device(), shape, 1, rng="philox", seed=0)


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(shape=(32,)), TypeError, "pair"),
    (dict(shape=(32.0, 32)), TypeError, "Lx"),
    (dict(rng="lcg"), ValueError, "halfbit-lcg"),
    (dict(rng="xorshift32"), ValueError, "rng"),
    (dict(inner_sweeps=0), ValueError, "inner_sweeps"),
    (dict(inner_sweeps=1.5), TypeError, "inner_sweeps"),
    (dict(n_replicas=0), ValueError, "n_replicas"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(tile=24), ValueError, "tile width"),
    (dict(tile=(64, 16)), ValueError, r"allowed: \[16, 32\]"),
    (dict(tile=(32, 8)), ValueError, "tile height"),
    (dict(tile="big"), TypeError, "tile"),
    (dict(shape=(512, 512), tile=256), ValueError, "work items"),
    (dict(colour="red"), TypeError, "colour"),
    (dict(unroll=3), ValueError, "unroll"),
])
def test_bad_arguments_raise_before_device_work(kwargs, exc, match):
    args = dict(shape=(64, 32), n_replicas=2, rng="philox", seed=0)
    args.update(kwargs)
    shape, R = args.pop("shape"), args.pop("n_replicas")
    with pytest.raises(exc, match=match):
        BlocksBackend(_no_device("amd"), shape, R, **args)


def test_bad_sweep_and_spins_arguments(device):
    b = BlocksBackend(device, (32, 32), 2, rng="philox", seed=0)
    thr = _thresholds_pair()
    with pytest.raises(ValueError, match=r"shape \(2, 2, 5\)"):
        b.sweep(1, thr[:1])
    with pytest.raises(ValueError, match="unsigned 32-bit"):
        b.sweep(1, thr.astype(np.float64))
    with pytest.raises(ValueError, match="n must be >= 0"):
        b.sweep(-1, thr)
    with pytest.raises(ValueError, match=r"shape \(n_replicas, Ly, Lx\)"):
        b.set_spins(np.ones((2, 32, 16), np.int8))
    with pytest.raises(ValueError, match=r"\+1 or -1"):
        b.set_spins(np.zeros((2, 32, 32), np.int8))
    b.sweep(0, thr)
    assert (b.spins() == 1).all()


def test_default_tile():
    assert default_tile((32, 32)) == (16, 16)
    assert default_tile((256, 96)) == (128, 16)
    assert default_tile((4096, 4096)) == (128, 128)
    assert default_tile((4096, 4096), max_work_group=64) == (64, 64)
    assert default_tile((4096, 4096), largest=64) == (64, 64)
    assert default_tile((4096, 1024), largest=256) == (256, 256)


# ------------------------------------------------------------ templates
@pytest.mark.parametrize("vendor", ["nvidia", "amd", "pocl"])
@pytest.mark.parametrize("fp64", [True, False])
def test_template_renders_for_fake_devices(vendor, fp64):
    facts = fake_facts(vendor, fp64)
    for rng, kernel in (("halfbit-lcg", "ising_blocks_sweep_lcg"),
                        ("philox", "ising_blocks_sweep_philox")):
        for (W, H), unroll in (((16, 16), 0), ((32, 64), 2), ((128, 128), 0), ((256, 16), 16)):
            src = render("ising/blocks.cl", facts, W=W, H=H, rng=rng, unroll=unroll)
            assert f"void {kernel}(" in src and "ising_blocks_sums_finish" in src
            assert f"reqd_work_group_size({W * H // 64}, 1, 1)" in src
            assert ("#pragma unroll" in src) == bool(unroll)
    with pytest.raises(ValueError, match="work items"):
        render("ising/blocks.cl", fake_facts("amd", fp64), W=256, H=256, rng="philox", unroll=0)
    with pytest.raises(ValueError, match="tile sides"):
        render("ising/blocks.cl", facts, W=48, H=16, rng="philox", unroll=0)
    with pytest.raises(ValueError, match="unroll"):
        render("ising/blocks.cl", facts, W=16, H=16, rng="philox", unroll=3)
