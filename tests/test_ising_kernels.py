"""Ising kernels bit for bit: device spins against the NumPy twin
(clphys.ising.reference), algorithms against each other, PoCL against
Oclgrind; every template renders for fake devices; every kernel runs on Oclgrind."""

import numpy as np
import pytest

from clphys.ising import Ensemble2D, Ensemble3D, backends
from clphys.ising import reference as ref
from clphys.ising.multispin_plan import tuned
from clphys.ising.multispin_source import kernel_params
from clphys.ising.thresholds import metropolis_thresholds
from clphys.runtime import fake_facts, kernel_dir, launched_kernels, render
from conftest import _KERNEL_DECL

ALGORITHMS = backends.available()
ENSEMBLE = {2: Ensemble2D, 3: Ensemble3D}


def _thr(dim, temps, J=1.0, h=0.0):
    return np.stack([metropolis_thresholds(dim, T, J, h) for T in temps])


def _run(dev, shape, temps, n, *, algorithm, rng="philox", seed=5, J=1.0, h=0.0, **options):
    ens = tuned(ENSEMBLE[len(shape)], shape, temps, J=J, h=h, algorithm=algorithm, rng=rng, seed=seed,
                device=dev, **options)
    start = ens.spins()
    ens.sweep(n)
    return ens, start


def _allowed(algorithm, shape):
    try:
        backends.load(algorithm).check_shape(shape)
        return True
    except ValueError:
        return False


# --------------------------------------------------------------- NumPy twins
@pytest.mark.parametrize("shape,J,h", [((8, 6), 1.0, 0.0), ((6, 4, 4), 1.0, 0.3),
                                       ((10, 4), -0.7, -0.4)])
def test_checkerboard_philox_matches_numpy(device, shape, J, h):
    temps = [1.8, 2.6, 4.5]
    ens, start = _run(device, shape, temps, 3, algorithm="checkerboard", J=J, h=h)
    np.testing.assert_array_equal(start, ref.random_spins(shape, 3, 5))
    want = ref.checkerboard_sweeps(start, _thr(len(shape), temps, J, h), 3, seed=5)
    np.testing.assert_array_equal(ens.spins(), want)
    bond, mag = ens.sums()
    np.testing.assert_array_equal(np.stack([bond, mag]), np.stack(ref.sums(want)))
    assert ens._backend.get_state() == {"sweeps": 3}


@pytest.mark.parametrize("shape,rng", [((64, 6), "philox"), ((32, 4, 4), "philox"), ((96, 4), "lcg"),
                                       ((32, 2, 2), "xorshift32")])
def test_checkerboard_chunks_match_numpy(device, shape, rng):
    """The 16-sites-per-item kernel (Lx a multiple of 32) draws the same words
    as the twin and the one-group-per-item kernel."""
    temps = [1.8, 2.6, 4.5]
    ens, start = _run(device, shape, temps, 3, algorithm="checkerboard", rng=rng, h=0.2)
    assert ens._backend.chunks
    if rng == "philox":
        want = ref.checkerboard_sweeps(start, _thr(len(shape), temps, h=0.2), 3, seed=5)
    else:
        want, states = ref.checkerboard_sweeps(start, _thr(len(shape), temps, h=0.2), 3, rng=rng,
                                               states=ref.stateful_states(shape, 3, 5))
        np.testing.assert_array_equal(ens.state()["backend"]["rng_states"], states)
    np.testing.assert_array_equal(ens.spins(), want)
    generic, _ = _run(device, shape, temps, 3, algorithm="checkerboard", rng=rng, h=0.2, chunks=False)
    np.testing.assert_array_equal(generic.spins(), want)
    with pytest.raises(ValueError, match="chunks=True needs Lx a multiple of 32"):
        _run(device, (16, 4), temps, 1, algorithm="checkerboard", chunks=True)


@pytest.mark.parametrize("rng", ["lcg", "xorshift32"])
def test_checkerboard_stateful_matches_numpy(device, rng):
    shape, temps = (6, 6), [2.0, 3.0]        # 18 sites per colour: a partial group of 4
    ens, start = _run(device, shape, temps, 4, algorithm="checkerboard", rng=rng)
    want, states = ref.checkerboard_sweeps(start, _thr(2, temps), 4, rng=rng,
                                           states=ref.stateful_states(shape, 2, 5))
    np.testing.assert_array_equal(ens.spins(), want)
    np.testing.assert_array_equal(ens.state()["backend"]["rng_states"], states)


# --------------------------------------------------------------- across algorithms
CASES = [((16, 6), 1.0, 0.0), ((128, 4), 1.0, 0.3), ((64, 2), -1.0, 0.0), ((8, 4, 6), 1.0, 0.0),
         ((128, 2, 4), 0.5, -0.2)]


# the option that makes each algorithm draw one Philox word per site update
# (and multispin's plain sweep kernel, which small lattices on CPUs would
# otherwise leave to the multi-sweep kernel, tests/test_ising_multisweep.py)
ONE_WORD = {"multispin": {"spins_per_word": 1, "sweeps_per_launch": 1}}


@pytest.mark.parametrize("shape,J,h", CASES)
def test_algorithms_identical_spins(device, shape, J, h):
    """Same seed, same update order, same Philox words (multispin's one-word
    mode): same spins bit for bit."""
    temps = [1.7, 2.4, 4.5]
    runs = {}
    for alg in backends.PLAIN_ORDER:
        if len(shape) not in backends.load(alg).dims or not _allowed(alg, shape):
            continue
        ens, start = _run(device, shape, temps, 4, algorithm=alg, J=J, h=h, **ONE_WORD.get(alg, {}))
        np.testing.assert_array_equal(start, ref.random_spins(shape, 3, 5))
        runs[alg] = (ens.spins(), ens.sums())
    assert "checkerboard" in runs and "multispin" in runs
    want_spins, want_sums = runs["checkerboard"]
    np.testing.assert_array_equal(want_spins, ref.checkerboard_sweeps(
        ref.random_spins(shape, 3, 5), _thr(len(shape), temps, J, h), 4, seed=5))
    for alg, (spins, sums) in runs.items():
        np.testing.assert_array_equal(spins, want_spins, err_msg=alg)
        np.testing.assert_array_equal(np.stack(sums), np.stack(want_sums), err_msg=alg)


@pytest.mark.parametrize("W,lanes", [(1, 4), (2, 8), (4, 4), (8, 8)])
def test_multispin_tuning_variants(device, W, lanes):
    """Every tuning variant draws the same words: spins do not depend on it."""
    shape, temps = (512, 4), [2.2, 3.1]
    ens, start = _run(device, shape, temps, 2, algorithm="multispin", words_per_item=W, lanes=lanes,
                      wg=8, spins_per_word=1, sweeps_per_launch=1)
    want = ref.checkerboard_sweeps(start, _thr(2, temps), 2, seed=5)
    np.testing.assert_array_equal(ens.spins(), want)


@pytest.mark.parametrize("shape,h,W,accept", [((512, 4), 0.0, 4, "select"), ((512, 8), 0.2, 32, "compare"),
                                               ((16, 6), 0.3, 2, "select"), ((128, 2, 4), -0.2, 1, "select"),
                                               ((64, 4, 2), 0.0, 2, "compare")])
def test_multispin_scalar_lanes_matches_numpy(device, shape, h, W, accept):
    """lanes=1 (the GPU design: scalar Philox, work items walking rows) draws
    the same words as the twin: full and partial rows, 2D and 3D, h != 0."""
    temps = [1.9, 2.6, 4.6]
    ens, start = _run(device, shape, temps, 2, algorithm="multispin", lanes=1, words_per_item=W,
                      accept=accept, wg=4, h=h, spins_per_word=1, sweeps_per_launch=1)
    want = ref.checkerboard_sweeps(start, _thr(len(shape), temps, h=h), 2, seed=5)
    np.testing.assert_array_equal(ens.spins(), want)
    np.testing.assert_array_equal(np.stack(ens.sums()), np.stack(ref.sums(want)))


def test_multispin_options_checked():
    from clphys.ising.multispin import MultispinBackend as B
    with pytest.raises(ValueError, match="lanes must be one of"):
        B.check_options({"lanes": 2})
    with pytest.raises(ValueError, match="words_per_item must be one of 1, 2, 4, 8;"):
        B.check_options({"lanes": 4, "words_per_item": 16})
    with pytest.raises(ValueError, match="accept must be one of"):
        B.check_options({"accept": "float"})
    assert B.check_options({"lanes": 1, "words_per_item": 32})["words_per_item"] == 32


def test_multispin_set_spins_roundtrip(device):
    rng = np.random.default_rng(3)
    for shape in [(24, 4), (192, 2, 2)]:
        spins = np.where(rng.random((2,) + tuple(reversed(shape))) < 0.5, -1, 1).astype(np.int8)
        ens = ENSEMBLE[len(shape)](shape, [2.0, 3.0], device=device)
        ens.set_spins(spins)
        np.testing.assert_array_equal(ens.spins(), spins)
        np.testing.assert_array_equal(np.stack(ens.sums()), np.stack(ref.sums(spins)))


def test_threshold_structure():
    from clphys.ising.multispin import threshold_structure
    thr = _thr(2, [2.0, 3.0])
    always, slots, table = threshold_structure(thr)
    assert always == (0, 1, 2, 5, 6, 7)                # k <= 2 for either spin sign
    assert slots == ((3, 8), (4, 9))                     # k = 3, 4 shared by both signs
    np.testing.assert_array_equal(table, thr[:, 0, 3:])
    always, slots, _ = threshold_structure(_thr(3, [4.0], h=0.1))
    assert len(slots) + len(always) == 14 > len(slots) > 3


# --------------------------------------------------------------- devices
@pytest.mark.slow
def test_oclgrind_runs_every_kernel_and_matches(device, oclgrind):
    """Every Ising kernel once on Oclgrind (race and uninitialised checks), with
    the same spins and sums as on the test device."""
    cases = [((6, 4), "checkerboard", "philox", {}), ((4, 2, 2), "checkerboard", "lcg", {}),
             ((8, 2), "checkerboard", "xorshift32", {}), ((32, 2), "checkerboard", "philox", {}),
             ((32, 2, 2), "checkerboard", "lcg", {"chunks": True}),
             ((16, 4), "multispin", "philox", {"sweeps_per_launch": 2}),
             ((16, 2), "multispin", "philox", {"sweeps_per_launch": 1}),
             ((128, 2), "multispin", "philox", {"words_per_item": 2, "sweeps_per_launch": 1}),
             ((8, 2, 2), "multispin", "philox", {"sweeps_per_launch": 1}),
             ((16, 2), "multispin", "philox", {"lanes": 1, "sweeps_per_launch": 1}),
             ((128, 4), "multispin", "philox",
              {"lanes": 1, "words_per_item": 2, "accept": "compare", "spins_per_word": 1, "sweeps_per_launch": 1}),
             ((64, 2), "multispin", "philox", {"spins_per_word": 1, "sweeps_per_launch": 1}),
             ((64, 2, 2), "multispin", "philox", {"lanes": 1, "words_per_item": 2, "sweeps_per_launch": 1}),
             ((64, 4), "multispin", "philox", {})]                  # the device's default launch mode
    cases += [((128, 2), alg, backends.load(alg).rngs[0], {}) for alg in ALGORITHMS
              if alg not in ("checkerboard", "multispin") and _allowed(alg, (128, 2))]
    for shape, alg, rng, opts in cases:
        out = []
        for dev in (device, oclgrind):
            ens = tuned(ENSEMBLE[len(shape)], shape, [2.0, 3.5], algorithm=alg, rng=rng, seed=9, h=0.2,
                        device=dev, **opts)
            ens.set_spins(ens.spins())                   # pack / unpack
            ens.sweep(1)
            s = ens.sample(1)
            out.append((ens.spins(), s.energy, s.magnetization))
        for a, b in zip(*out):
            np.testing.assert_array_equal(a, b, err_msg=f"{alg} {rng} {shape}")
    from clphys.ising.multispin import decision_counts
    a, b = (decision_counts(_thr(2, [2.3]), 4, items=2, device=d) for d in (device, oclgrind))
    np.testing.assert_array_equal(a["class"], b["class"])
    ran = {name for vendor, name in launched_kernels() if vendor == "oclgrind"}
    mine = set()
    for path in (kernel_dir() / "ising").glob("*.cl"):
        if path.name != "blocks.cl":
            mine |= set(_KERNEL_DECL.findall(path.read_text()))
    assert len(mine) >= 11 and mine <= ran, sorted(mine - ran)


# --------------------------------------------------------------- templates
def _params(name, dim):
    lat = dict(dim=dim, Lx=16, Ly=4, Lz=4 if dim == 3 else 1)
    ncls = 2 * (2 * dim + 1)
    return {
        "ising/common.cl": {},
        "ising/init.cl": lat,
        "ising/sums.cl": {"wg": 64},
        "ising/checkerboard.cl": dict(lat, rng="lcg" if dim == 3 else "philox", wg=64, rwg=64),
        "ising/multispin.cl": dict(lat, W=1, lanes=4 if dim == 3 else 8, wg=None, rwg=64, always=tuple(range(0, ncls, 2)),
                                   slots=tuple((c,) for c in range(1, ncls, 2))),
    }[name]


def _render(name, facts, **params):
    """render(); multispin.cl takes the parameters its Python plan computes."""
    return render(name, facts, **(kernel_params(**params) if name == "ising/multispin.cl" else params))


@pytest.mark.parametrize("vendor", ["nvidia", "amd", "pocl"])
@pytest.mark.parametrize("fp64", [True, False])
def test_templates_render(vendor, fp64):
    from clphys.runtime import template_names
    names = [n for n in template_names() if n.startswith("ising/") and n != "ising/blocks.cl"]
    assert {"ising/checkerboard.cl", "ising/multispin.cl", "ising/init.cl", "ising/sums.cl"} <= set(names)
    facts = fake_facts(vendor, fp64)
    for name in names:
        for dim in (2, 3):
            src = _render(name, facts, **_params(name, dim))
            assert "${" not in src
            if name == "ising/multispin.cl":
                assert "ising_ms_sweep" in src and "ms_philox_lanes" in src
                for accept in ("select", "compare"):
                    src = _render(name, facts, **dict(_params(name, dim), lanes=1, W=2, accept=accept))
                    assert "ising_ms_sweep" in src and "ms_philox_lanes" not in src
                for lanes in (1, 4):       # joint decisions: 2 slots, k = 4, 4-bit fields, 128 cells
                    src = _render(name, facts, **dict(_params(name, dim), lanes=lanes, joint=(4, 4, 25, 128),
                                                     slots=((1,), (3,)), always=tuple(
                                                         c for c in range(2 * (2 * dim + 1)) if c not in (1, 3))))
                    assert "tb[" in src and "ja0" in src


def test_template_rejects_bad_params():
    facts = fake_facts("nvidia")
    with pytest.raises(ValueError, match="multiple of 4"):
        _render("ising/multispin.cl", facts, **dict(_params("ising/multispin.cl", 2), Lx=12))
    with pytest.raises(ValueError, match="lanes must be 1, 4 or 8"):
        _render("ising/multispin.cl", facts, **dict(_params("ising/multispin.cl", 2), lanes=2))
    with pytest.raises(ValueError, match="accept must be"):
        _render("ising/multispin.cl", facts, **dict(_params("ising/multispin.cl", 2), lanes=1, accept="x"))
    with pytest.raises(ValueError, match="partition"):
        _render("ising/multispin.cl", facts, **dict(_params("ising/multispin.cl", 2), always=()))
    with pytest.raises(ValueError, match="joint"):       # 5 slots x 4-bit fields > 16 mask bits
        _render("ising/multispin.cl", facts, **dict(_params("ising/multispin.cl", 2), joint=(4, 4, 25, 128)))
    with pytest.raises(ValueError, match="rng"):
        render("ising/checkerboard.cl", facts, **dict(_params("ising/checkerboard.cl", 2), rng="halfbit-lcg"))
