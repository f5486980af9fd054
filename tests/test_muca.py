"""Multicanonical sampling against exact results: ln g(E) against Beale's exact
density of states (2D) and enumeration (3D L = 2), exact low-energy counts in
3D, canonical averages by reweighting against Kaufman's finite lattice and
enumeration, flat histograms from exact weights; reproducibility, bit-exact
checkpoint/resume, bad input.

Statistical checks use 4 sigma (jackknife over independent walker groups), so
they pass for essentially any seed; every check also bounds the error bar, so
a run with useless statistics cannot pass."""

import json
import math
import os
import signal
import warnings

import numpy as np
import pytest

from clphys import muca
from clphys.exact import density_of_states, enumerate_lattice, finite_lattice
from clphys.muca import Multicanonical
from clphys.runtime import checkpoint as ck
from clphys.runtime.checkpoint import CheckpointError, save_checkpoint
from clphys.runtime.longrun import Interrupted

Z = 4.0
_RUNS = {}


def _pipeline(device, L, dim=2, walkers=256, seed=1, blocks=32, **produce):
    """Iterate to d_k < 1e-4 and produce; cached per device for the module."""
    key = (device.facts.index, L, dim, walkers, seed, blocks, tuple(sorted(produce.items())))
    if key not in _RUNS:
        sim = Multicanonical(L, dim=dim, walkers=walkers, seed=seed, device=device)
        sim.iterate(kl=1e-4)
        assert sim.converged
        _RUNS[key] = (sim, sim.produce(blocks=blocks, **produce))
    return _RUNS[key]


def _assert_within(value, err, exact, what, max_err):
    value, err, exact = map(np.asarray, (value, err, exact))
    assert np.all(err > 0) and np.all(err < max_err), f"{what}: error bars {err} not in (0, {max_err})"
    z = (value - exact) / err
    assert np.all(np.abs(z) < Z), f"{what}: deviations {z} sigma (value {value}, exact {exact})"


def _enumerate_3d(L):
    """(E, |M|) of every state of the L^3 periodic lattice."""
    N = L**3
    states = np.arange(2**N)
    s = np.array([1 - 2 * ((states >> i) & 1) for i in range(N)]).reshape(L, L, L, -1)
    bond = sum((s * np.roll(s, -1, axis=a)).sum(axis=(0, 1, 2)) for a in range(3))
    return -bond, np.abs(s.sum(axis=(0, 1, 2)))


# ------------------------------------------------------------------ 2D against Beale
@pytest.mark.slow
def test_2d_l4_density_of_states_and_canonical(device):
    sim, res = _pipeline(device, 4)
    E, ln_g = density_of_states(4)
    np.testing.assert_array_equal(res.energies, E)
    _assert_within(res.ln_g, res.ln_g_err, ln_g, "ln g, L=4", 0.25)
    assert res.histogram.sum() == res.walkers * res.updates          # no lost counts
    np.testing.assert_array_equal(res.block_histograms.sum(axis=0), res.histogram)
    # flat production histogram: within the bound the final d_k allows (sum of
    # squared relative deviations <= 2 n d_k) plus its own statistics
    n = len(res.energies)
    stat = 1.0 / math.sqrt(res.histogram.min() / (res.updates * res.walkers / res.histogram.sum()))
    assert res.chebyshev < math.sqrt(2 * n * sim.history[-1].d_k) + Z * res.ln_g_err.max() + stat
    temps = [1.5, 2.0, 2.5, 3.5]
    c = res.canonical(temps)
    exact = finite_lattice(4, temps)
    _assert_within(c.energy, c.energy_err, exact.energy, "<E>/N, L=4", 0.05)
    _assert_within(c.specific_heat, c.specific_heat_err, exact.specific_heat, "C/N, L=4", 0.1)
    enum = enumerate_lattice(4, 4, temps)
    _assert_within(c.abs_magnetization, c.abs_magnetization_err, enum.abs_magnetization, "<|m|>", 0.05)
    _assert_within(c.m2, c.m2_err, enum.m2, "<m^2>", 0.05)
    binder = 1 - enum.m4 / (3 * enum.m2**2)
    _assert_within(c.binder, c.binder_err, binder, "U4", 0.1)


@pytest.mark.slow
def test_2d_l8_density_of_states_and_reweighting(device):
    """L = 8: every ln g(E) and <E>/N, C/N at T = 2.0 and 2.5 (Kaufman)."""
    sim, res = _pipeline(device, 8, walkers=512, magnetization=False)
    E, ln_g = density_of_states(8)
    np.testing.assert_array_equal(res.energies, E)
    _assert_within(res.ln_g, res.ln_g_err, ln_g, "ln g, L=8", 0.3)
    c = res.canonical([2.0, 2.5])
    exact = finite_lattice(8, [2.0, 2.5])
    _assert_within(c.energy, c.energy_err, exact.energy, "<E>/N, L=8", 0.03)
    _assert_within(c.specific_heat, c.specific_heat_err, exact.specific_heat, "C/N, L=8", 0.06)
    assert c.abs_magnetization is None and c.binder is None
    scalar = res.canonical(2.0)
    assert isinstance(scalar.energy, float) and scalar.energy == pytest.approx(c.energy[0], rel=1e-12)


@pytest.mark.slow
def test_symmetric_run_samples_half_the_range_and_mirrors_it(device):
    """symmetric=True: the walkers stay at E <= 0 (bin `top`), the iteration's
    width is at most half the range, and ln g over the whole range, mirrored,
    agrees with Beale's (2D L = 8) within Z sigma, as do <E>/N and C/N."""
    sim = Multicanonical(8, walkers=1024, seed=3, device=device, symmetric=True)
    assert sim.top == 32 and sim.geom.energies()[sim.top] == 0
    sim.iterate(kl=1e-4)
    assert sim.converged and sim.history.width.max() <= sim.top
    res = sim.produce(blocks=32)
    assert res.symmetric and res.moments is None and res.therm_passages >= sim.therm_passages == 1.0
    assert sim.walker_state()[1].max() <= sim.top
    E, ln_g = density_of_states(8)
    np.testing.assert_array_equal(res.energies, E)
    np.testing.assert_array_equal(res.ln_g, res.ln_g[::-1])
    np.testing.assert_array_equal(res.ln_g_err, res.ln_g_err[::-1])
    _assert_within(res.ln_g, res.ln_g_err, ln_g, "ln g, L=8, symmetric", 0.1)
    assert res.histogram[res.energies <= 0].sum() == res.walkers * res.updates
    c = res.canonical([2.0, 2.5, 10.0])
    exact = finite_lattice(8, [2.0, 2.5, 10.0])
    _assert_within(c.energy, c.energy_err, exact.energy, "<E>/N, L=8, symmetric", 0.03)
    _assert_within(c.specific_heat, c.specific_heat_err, exact.specific_heat, "C/N, L=8, symmetric", 0.06)


def test_exact_weights_give_a_flat_histogram(device):
    """ln W = -ln g (Beale): every accessible energy is visited equally often
    (tests the update without the iteration)."""
    L = 8
    E, ln_g = density_of_states(L)
    sim = Multicanonical(L, walkers=256, seed=7, device=device)
    w = np.zeros(sim.geom.nbins)
    w[(E - sim.geom.e_min) // 4] = -ln_g
    sim.set_log_weights(w)
    res = sim.produce(blocks=32, therm=100_000, updates=20_000, magnetization=False)
    np.testing.assert_array_equal(res.energies, E)
    assert res.histogram.sum() == 256 * 20_000
    frac = res.block_histograms / res.block_histograms.sum(axis=1, keepdims=True)
    mean = frac.mean(axis=0)
    err = frac.std(axis=0, ddof=1) / math.sqrt(len(frac))
    _assert_within(mean, err, 1.0 / len(E), "visit fractions", 0.1 / len(E))
    _assert_within(res.ln_g, res.ln_g_err, ln_g, "ln g from exact weights", 0.2)


# ------------------------------------------------------------------ 3D
def test_3d_l2_against_enumeration(device):
    sim, res = _pipeline(device, 2, dim=3, walkers=128)
    E_all, M_all = _enumerate_3d(2)
    E, g = np.unique(E_all, return_counts=True)
    np.testing.assert_array_equal(res.energies, E)
    _assert_within(res.ln_g, res.ln_g_err, np.log(g), "ln g, 3D L=2", 0.1)
    temps = np.array([3.0, 5.0])
    wts = np.exp(-E_all[None, :] / temps[:, None])
    Zs = wts.sum(axis=1)
    e_mean = (wts * E_all).sum(axis=1) / Zs
    c_exact = ((wts * E_all**2).sum(axis=1) / Zs - e_mean**2) / (temps**2 * 8)
    m_exact = (wts * M_all).sum(axis=1) / Zs / 8
    c = res.canonical(temps)
    _assert_within(c.energy, c.energy_err, e_mean / 8, "<E>/N 3D", 0.05)
    _assert_within(c.specific_heat, c.specific_heat_err, c_exact, "C/N 3D", 0.1)
    _assert_within(c.abs_magnetization, c.abs_magnetization_err, m_exact, "<|m|> 3D", 0.05)


def test_3d_l2_symmetric_against_enumeration(device):
    """3D L = 2 (g(E) from all 2^8 states): the E <= 0 half mirrored."""
    sim = Multicanonical(2, dim=3, walkers=128, seed=1, device=device, symmetric=True)
    sim.iterate(kl=1e-4)
    res = sim.produce(blocks=32)
    E, g = np.unique(_enumerate_3d(2)[0], return_counts=True)
    np.testing.assert_array_equal(res.energies, E)
    _assert_within(res.ln_g, res.ln_g_err, np.log(g), "ln g, 3D L=2, symmetric", 0.1)


@pytest.mark.slow
def test_3d_l4_low_energy_counts(device):
    """3D L = 4 (64 spins, no enumeration): the exact degeneracies next to the
    ground state, relative to g(E0) = 2: one flipped spin N (E0 + 12), a
    flipped bond 3N (E0 + 20), two separate flipped spins N(N-1)/2 - 3N (E0 + 24)."""
    sim, res = _pipeline(device, 4, dim=3, walkers=256, magnetization=False)
    N = 64
    E0 = -3 * N
    np.testing.assert_array_equal(res.energies[:4], [E0, E0 + 12, E0 + 20, E0 + 24])
    assert res.energies[-1] == 3 * N
    d = res.ln_g[1:4] - res.ln_g[0]
    err = np.hypot(res.ln_g_err[1:4], res.ln_g_err[0])
    _assert_within(d, err, np.log([N, 3 * N, N * (N - 1) / 2 - 3 * N]), "3D low-energy ratios", 0.2)
    assert res.ln_g[0] == pytest.approx(math.log(2), abs=Z * res.ln_g_err[0])


# ------------------------------------------------------------------ reproducibility
def _short(device, seed=3, **options):
    sim = Multicanonical(4, walkers=48, seed=seed, device=device, **options)
    sim.iterate(kl=1e-4, max_iterations=6)
    res = sim.produce(blocks=6, updates=300)
    return sim, res


def _records(sim):
    return [(r.iteration, r.width, r.therm, r.updates, r.d_k, r.d_c, r.visited, r.flips)
            for r in sim.history]


def test_same_seed_same_bits_for_every_kernel_variant(device):
    sim, res = _short(device)
    for opts in (dict(wg=8, lattice="global", table="global", hist="global"),
                 dict(wg=16, lattice="local", table="local", hist="local"),
                 dict(wg=2, lattice="global", table="global", hist="local")):
        other, other_res = _short(device, **opts)
        assert _records(other) == _records(sim)
        np.testing.assert_array_equal(other.log_weights, sim.log_weights)
        np.testing.assert_array_equal(other_res.block_histograms, res.block_histograms)
        np.testing.assert_array_equal(other_res.moments, res.moments)
    diff, diff_res = _short(device, seed=4)
    assert _records(diff) != _records(sim)


def test_covered_iterations_count_one_step_in_four(device):
    """While the range widens an iteration's histogram counts every recorded
    step; once it is covered, the steps t that are multiples of COUNT_EVERY
    (the histogram totals say so, walkers x counted steps)."""
    from clphys.muca.simulation import COUNT_EVERY
    sim = Multicanonical(4, walkers=64, seed=3, device=device)
    finish, seen = sim._finish_iteration, []

    def recorded():
        covered = sim.width >= sim.top
        rec = finish()
        eng = sim._engine
        steps = range(eng.t - rec.updates, eng.t)
        seen.append((covered, eng.every, int(eng.hist.sum()), sum(t % eng.every == 0 for t in steps)))
        return rec

    sim._finish_iteration = recorded
    sim.iterate()
    assert sim.converged
    assert {covered for covered, *_ in seen} == {False, True}
    for covered, every, total, counted in seen:
        assert every == (COUNT_EVERY if covered else 1)
        assert total == 64 * counted


def test_an_empty_histogram_does_not_stop_the_iteration(device):
    """With many walkers per bin the first covered iterations record one
    step, often none of them counted: d_k of that empty histogram is 0, yet
    the weights are far from -ln g. The iteration goes on until a histogram
    over the whole range is flat, and its weights are then Beale's ln g."""
    L, walkers = 4, 4096
    sim = Multicanonical(L, walkers=walkers, seed=0, device=device)
    history = sim.iterate(kl=1e-4)
    assert sim.converged
    assert min(history.visited) == 0            # the case: some iteration counted nothing
    E, ln_g = density_of_states(L)
    bins = (E - sim.geom.e_min) // 4
    assert history[-1].visited == len(E)
    est = -sim.log_weights[bins]
    est += ln_g[0] - est[0]
    # d_k < 1e-4 over 15 bins bounds each ln H within ~0.05 of flat
    np.testing.assert_allclose(est, ln_g, atol=0.1)


def _interrupt_on_call(sim, call):
    """SIGINT to ourselves on the call-th launch slice: run_sliced stops after it."""
    real = sim._engine.advance
    count = [0]

    def advance(n, n_skip):
        count[0] += 1
        if count[0] == call:
            os.kill(os.getpid(), signal.SIGINT)
        return real(n, n_skip)

    sim._engine.advance = advance


@pytest.mark.slow
def test_checkpoint_resumes_bit_for_bit(device, tmp_path):
    ref = Multicanonical(6, walkers=64, seed=5, device=device)
    ref.iterate(kl=1e-3)
    ref_res = ref.produce(blocks=8)

    sim = Multicanonical(6, walkers=64, seed=5, device=device)
    _interrupt_on_call(sim, 9)
    with pytest.raises(Interrupted):
        sim.iterate(kl=1e-3)
    assert sim._iter is not None or len(sim.history) < len(ref.history)
    path = tmp_path / "muca.npz"
    sim.save(path)
    sim = Multicanonical.load(path, device=device)
    sim.iterate(kl=1e-3)
    assert _records(sim) == _records(ref)
    assert sim.converged and sim.steps == ref.steps - ref_res.therm - ref_res.updates

    sim._slice = 100                           # small first slices: stop inside the production
    _interrupt_on_call(sim, 3)
    with pytest.raises(Interrupted):
        sim.produce(blocks=8)
    assert 0 < sim._prod["done"] < sim._prod["therm"] + sim._prod["updates"]
    assert sim._prod["phase"] == "therm"                 # inside the passage-driven thermalisation
    progress = sim.production_progress
    assert progress["phase"] == "therm" and progress["flips_per_walker"] == sim._prod["done"]
    assert progress["therm_flips_per_walker"] is None and progress["max_error"] is None
    assert 0 <= progress["passages"] < 0.5 and progress["seconds"] > 0
    sim.save(path)
    sim = Multicanonical.load(path, device=device, wg=2, lattice="global")   # other kernel options
    res = sim.produce(blocks=8)
    np.testing.assert_array_equal(res.block_histograms, ref_res.block_histograms)
    np.testing.assert_array_equal(res.moments, ref_res.moments)
    np.testing.assert_array_equal(res.ln_g, ref_res.ln_g)
    assert (res.therm, res.updates, res.passages) == (ref_res.therm, ref_res.updates, ref_res.passages)
    np.testing.assert_array_equal(sim.walker_state()[0], ref.walker_state()[0])
    assert sim.production_progress is None


@pytest.mark.slow
def test_symmetric_checkpoint_resumes_bit_for_bit(device, tmp_path):
    ref = Multicanonical(6, walkers=64, seed=5, device=device, symmetric=True)
    ref.iterate(kl=1e-3)
    ref_res = ref.produce(blocks=8)
    sim = Multicanonical(6, walkers=64, seed=5, device=device, symmetric=True)
    sim.iterate(kl=1e-3)
    sim._slice = 50                            # small first slices: stop inside the production
    _interrupt_on_call(sim, 3)
    with pytest.raises(Interrupted):
        sim.produce(blocks=8)
    assert sim._prod["phase"] == "therm"
    path = tmp_path / "muca.npz"
    sim.save(path)
    sim = Multicanonical.load(path, device=device)
    assert sim.symmetric and sim.top == ref.top
    res = sim.produce(blocks=8)
    assert res.symmetric
    np.testing.assert_array_equal(res.block_histograms, ref_res.block_histograms)
    assert (res.therm, res.updates, res.passages) == (ref_res.therm, ref_res.updates, ref_res.passages)


def test_checkpoint_errors(device, tmp_path):
    sim = Multicanonical(4, walkers=16, seed=1, device=device)
    path = tmp_path / "a.npz"
    sim.save(path)
    save_checkpoint(tmp_path / "other.npz", "ising-ensemble", {}, {"x": np.zeros(3)})
    with pytest.raises(CheckpointError, match="not a 'muca'"):
        Multicanonical.load(tmp_path / "other.npz", device=device)
    (tmp_path / "cut.npz").write_bytes(path.read_bytes()[:200])
    with pytest.raises(CheckpointError, match="truncated"):
        Multicanonical.load(tmp_path / "cut.npz", device=device)
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    header = json.loads(arrays.pop("__header__").tobytes())
    arrays["bins"] = arrays["bins"] + 1                         # energies that do not fit the spins
    np.savez(tmp_path / "bad.npz", __header__=np.frombuffer(json.dumps(header).encode(), np.uint8), **arrays)
    with pytest.raises(CheckpointError, match="array 'bins' does not match its SHA-256 digest"):
        Multicanonical.load(tmp_path / "bad.npz", device=device)
    ck._write(tmp_path / "bad.npz", header, arrays)             # sealed again, as a buggy writer would
    with pytest.raises(CheckpointError, match="energies do not match"):
        Multicanonical.load(tmp_path / "bad.npz", device=device)
    arrays["bins"] = arrays["bins"][:8]
    header["arrays"]["bins"]["shape"] = [8]
    ck._write(tmp_path / "short.npz", header, arrays)
    with pytest.raises(CheckpointError, match="shape"):
        Multicanonical.load(tmp_path / "short.npz", device=device)


def test_checkpoint_without_magnetization_stores_no_magnetization_arrays(device, tmp_path):
    """Without (E, |M|) histograms a checkpoint holds none (they were zeros of
    bins x |M| bins: 537 MB at 2D L = 128); one of that earlier layout loads and
    goes on as the new one does."""
    ref = Multicanonical(8, walkers=64, seed=3, device=device)
    ref.iterate(max_iterations=2, progress=False)
    path = tmp_path / "new.npz"
    ref.save(path)
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    assert arrays["moments"].shape == (0, ref.geom.nbins, 3)
    assert arrays["pending_mhist"].shape == (0, ref.geom.nbins, ref.geom.nm)
    header = json.loads(arrays.pop("__header__").tobytes())
    header.pop(ck.DIGESTS)
    ck._write(tmp_path / "bad.npz", {**header, "magnet": True}, arrays)   # says magnetization, holds none
    with pytest.raises(CheckpointError, match="mslots = 0 does not match slots = 1 and magnet = True"):
        Multicanonical.load(tmp_path / "bad.npz", device=device)
    assert header.pop("mslots") == 0
    slots = header["slots"]
    arrays["moments"] = np.zeros((slots, header["nbins"], 3))
    arrays["pending_mhist"] = np.zeros((slots, header["nbins"], header["nm"]), np.uint32)
    for name in ("moments", "pending_mhist"):
        header["arrays"][name]["shape"] = list(arrays[name].shape)
    ck._write(tmp_path / "old.npz", header, arrays)
    runs = [Multicanonical.load(tmp_path / name, device=device) for name in ("new.npz", "old.npz")]
    for sim in runs:
        sim.iterate(max_iterations=2, progress=False)
    assert _records(runs[0]) == _records(runs[1])
    np.testing.assert_array_equal(runs[0].walker_state()[0], runs[1].walker_state()[0])


# ------------------------------------------------------------------ API and bad input
def test_run_and_history(device):
    with pytest.warns(RuntimeWarning, match="producing with the last weights"):
        res = muca.run(4, walkers=32, seed=2, device=device, max_iterations=2, blocks=4, updates=50)
    assert not res.converged and res.iterations == 2
    sim = Multicanonical(4, walkers=32, seed=2, device=device)
    seen = []
    hist = sim.iterate(max_iterations=3, callback=seen.append, progress=False)
    assert len(hist) == 3 and list(hist) == seen and hist.width.shape == (3,)
    assert hist.width[0] == 10 and hist.therm[0] == 300
    assert hist.updates[0] == int(6 * 10**2.25 / 32) + 1          # the published rule
    assert "d_k" in str(hist) and "Multicanonical 2D L = 4" in repr(sim)


def test_production_on_other_walkers(device):
    """for_production / run(production_walkers=): new walkers on new lattices
    with the weights the iterating walkers' production would have used, the
    bits of the same steps spelled out; bad counts refused before device work."""
    sim = Multicanonical(4, walkers=256, seed=3, device=device)
    sim.iterate(max_iterations=3, progress=False)
    ref = Multicanonical(4, walkers=96, seed=3, device=device)
    ref.set_log_weights(sim.production_weights())
    few = sim.for_production(96)
    assert (few.walkers, few.seed, few.symmetric, len(few.history)) == (96, 3, False, 0)
    want = ref.produce(blocks=12, updates=4000)
    with pytest.warns(RuntimeWarning, match="producing with the last weights"):
        res = muca.run(4, walkers=256, seed=3, device=device, max_iterations=3, production_walkers=96,
                       blocks=12, updates=4000)
    got = few.produce(blocks=12, updates=4000)
    for r in (res, got):
        assert r.walkers == 96 and r.histogram.sum() == 96 * 4000
        np.testing.assert_array_equal(r.ln_g, want.ln_g)
        np.testing.assert_array_equal(r.log_weights, want.log_weights)
    assert (res.converged, res.iterations) == (False, 3)
    with pytest.raises(ValueError, match="production_walkers must be >= 1"):
        muca.run(4, walkers=16, production_walkers=0, device="no such device")
    with pytest.raises(ValueError, match="blocks must be <= 8"):
        muca.run(4, walkers=16, production_walkers=8, blocks=12, device="no such device")
    with pytest.raises(ValueError, match=r"must stay below 2\^29"):
        sim.for_production(2**31 - 1)
    sim._slice = 8                                  # small slices: Ctrl-C inside an iteration
    _interrupt_on_call(sim, 2)
    with pytest.raises(Interrupted):
        sim.iterate(max_iterations=1, progress=False)
    with pytest.raises(ValueError, match="an iteration was interrupted"):
        sim.for_production(96)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(L=5), ValueError, "even"), (dict(L=0), ValueError, "L must be >= 2"),
    (dict(L=4, dim=4), ValueError, "dim"), (dict(L=4.0), TypeError, "integer"),
    (dict(L=4, walkers=0), ValueError, "walkers must be >= 1"),
    (dict(L=4, f_therm=float("nan")), ValueError, "f_therm must be finite"),
    (dict(L=4, z=-1.0), ValueError, "z must be > 0"), (dict(L=4, seed=-1), ValueError, "seed"),
    (dict(L=4, lattice="texture"), ValueError, "lattice must be one of"),
    (dict(L=64, walkers=2**31 - 1), ValueError, r"must stay below 2\^29"),
    (dict(L=4, per_item=3), ValueError, "per_item must be one of"),
    (dict(L=4, symmetric="yes"), TypeError, "symmetric must be True or False"),
])
def test_bad_input_before_device_work(device, kwargs, error, match):
    with pytest.raises(error, match=match):
        Multicanonical(device=device, **kwargs)


def test_symmetric_refuses_magnetization_before_device_work(device):
    with pytest.raises(ValueError, match="magnetization=True needs the whole energy range"):
        muca.run(4, walkers=32, device=device, symmetric=True, magnetization=True)
    with pytest.raises(TypeError, match="symmetric must be True or False"):
        muca.run(4, walkers=32, device=device, symmetric=1)
    sim = Multicanonical(4, walkers=32, seed=1, device=device, symmetric=True)
    with pytest.raises(ValueError, match="magnetization=True needs the whole energy range"):
        sim.produce(blocks=4, magnetization=True)
    assert sim.steps == 0


def test_bad_arguments_of_the_methods(device):
    sim = Multicanonical(4, walkers=16, seed=1, device=device)
    with pytest.raises(ValueError, match="kl must be > 0"):
        sim.iterate(kl=0.0)
    with pytest.raises(ValueError, match="kl must be finite"):
        sim.iterate(kl=float("nan"))
    with pytest.raises(ValueError, match="max_iterations must be >= 0"):
        sim.iterate(max_iterations=-1)
    with pytest.raises(TypeError, match="progress must be"):
        sim.iterate(progress="yes")
    with pytest.raises(TypeError, match="callback must be callable"):
        sim.iterate(callback=3)
    with pytest.raises(TypeError, match="progress must be"):
        sim.produce(blocks=4, progress=1.5)
    with pytest.raises(TypeError, match="magnetization must be"):
        sim.produce(blocks=4, magnetization="on")
    with pytest.raises(ValueError, match="blocks must be >= 2"):
        sim.produce(blocks=1)
    with pytest.raises(ValueError, match="blocks must be <= 16"):
        sim.produce(blocks=17)
    with pytest.raises(ValueError, match="updates must be >= 1"):
        sim.produce(blocks=4, updates=0)
    with pytest.raises(ValueError, match="target_error must be > 0"):
        sim.produce(blocks=4, target_error=0.0)
    with pytest.raises(ValueError, match="max_seconds must be finite"):
        sim.produce(blocks=4, max_seconds=float("inf"))
    with pytest.raises(ValueError, match="log_weights must have 17 entries"):
        sim.set_log_weights(np.zeros(16))
    with pytest.raises(ValueError, match="non-finite"):
        sim.set_log_weights(np.full(17, np.nan))
    with pytest.warns(RuntimeWarning):
        res = sim.produce(blocks=4, updates=20)
    for T in (0.0, -1.0, float("inf"), [[1.0]]):
        with pytest.raises(ValueError, match="T"):
            res.canonical(T)


@pytest.mark.slow
def test_production_thermalises_under_the_final_weights(device):
    """Walkers started far from equilibrium (random spins, E ~ 0) under exact
    weights: a production that records from the start (1/100 of a passage
    through the energy range per walker) samples the start and gives ln g many
    sigma off Beale in many bins, with a RuntimeWarning; the default production
    (thermalised once to half a passage per walker, recorded to the target
    error) agrees in every bin, without a warning."""
    from clphys.exact import density_of_states
    E, ln_g = density_of_states(8)

    def production(**kwargs):
        sim = Multicanonical(8, walkers=4096, seed=3, device=device)
        w = np.zeros(sim.geom.nbins)
        w[(E - sim.geom.e_min) // 4] = -ln_g
        sim.set_log_weights(w)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = sim.produce(**kwargs)
        assert np.array_equal(res.energies, E)
        return res, np.abs(res.ln_g - ln_g) / res.ln_g_err, [str(c.message) for c in caught]

    old, z_old, warned = production(therm=0, updates=math.ceil(100 * 6 * 64**2.25 / 4096))
    assert z_old.max() > 5 and np.sum(z_old > 4) >= 10                  # measured 7-9 sigma, 26-35 bins
    assert old.passages < 0.05 and any("thermalisation" in m for m in warned)
    new, z_new, warned = production()
    assert z_new.max() < 4 and not warned                                # measured 1.4-2.5 sigma
    assert new.therm_passages >= 0.5 and new.reached and new.max_error <= 0.02
    assert np.all(new.ln_g_err < 0.05)                                   # errors that can fail the check


def test_production_stops_at_the_requested_error(device):
    """The recording stops at the first check (every `check` flips per walker)
    where the largest jackknife error of ln g is at most target_error: the
    result is at or below it, the same run one check shorter is above it, and a
    smaller target records longer."""
    def produce(**kwargs):
        sim = Multicanonical(4, walkers=256, seed=6, device=device)
        sim.iterate(kl=1e-3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            res = sim.produce(blocks=16, magnetization=False, **kwargs)
        return sim, res
    sim, loose = produce(target_error=0.06)
    check = max(64, sim.geom.full_width ** 2 // 4)
    assert loose.reached and loose.max_error <= 0.06 and loose.updates > check
    _, shorter = produce(therm=loose.therm, updates=loose.updates - check)
    assert shorter.max_error > 0.06
    _, tight = produce(target_error=0.03)
    assert tight.reached and tight.max_error <= 0.03 and tight.updates > loose.updates
    _, budget = produce(target_error=1e-4, max_seconds=0.5)            # the time budget ends it
    assert not budget.reached and budget.max_error > 1e-4 and budget.updates > 0


def test_production_progress_has_a_bar_for_each_phase(device):
    """The production reports the thermalisation, then the recording, each from
    0 to 1000 in what ends the phase: flips when its length is given, else the
    passages and (target / error)^2, which grow like the flips."""
    seen = []

    def report(done, total):
        seen.append((done, total))

    sim = Multicanonical(4, walkers=64, seed=6, device=device)
    check = max(64, sim.geom.full_width ** 2 // 4)
    sim.produce(blocks=8, therm=3 * check, updates=2 * check, progress=report)
    assert seen == [(333, 1000), (666, 1000), (1000, 1000), (500, 1000), (1000, 1000)]

    seen.clear()
    sim = Multicanonical(4, walkers=256, seed=6, device=device)
    sim.iterate(kl=1e-3)
    res = sim.produce(blocks=16, magnetization=False, target_error=0.03, progress=report)
    assert res.reached and res.therm_passages >= 0.5
    back = [i for i in range(1, len(seen)) if seen[i][0] < seen[i - 1][0]]
    assert len(back) == 1 and seen[back[0] - 1][0] == 1000 and seen[-1][0] == 1000
    assert seen[back[0]][0] < 1000 and {t for _, t in seen} == {1000}


def test_a_time_budget_ends_the_production_inside_a_check(device):
    """max_seconds is looked at after every launch slice, not only at the
    error checks: at 2D L = 32 a check is 2^18 flips per walker (seconds on a
    CPU), and a budget of 0.05 s ends the thermalisation and then the recording
    after a slice or two each, well inside the first check (before, the run
    went on to the end of a check in both phases: at least two checks)."""
    sim = Multicanonical(32, walkers=1024, seed=3, device=device)
    check = max(64, sim.geom.full_width ** 2 // 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = sim.produce(blocks=8, magnetization=False, max_seconds=0.05)
    assert 0 < res.therm and 0 < res.updates and res.therm + res.updates < check // 2
    assert not res.reached and any("above the target" in str(c.message) for c in caught)


@pytest.mark.slow
@pytest.mark.parametrize("symmetric", [False, True])
def test_errors_are_honest_over_seeds(device, symmetric):
    """2D L = 8 with Beale's weights, 16 seeds of the default production: the
    spread of ln g over the seeds matches the reported errors (var / sigma^2 per
    energy near 1), and so does the deviation from Beale (chi^2 per energy near
    1); also when the walkers sample E <= 0 and ln g is mirrored. With these
    seeds (the same bits on every device): 1.03 and 1.11 over the whole range,
    0.83 and 0.98 symmetric. The energies' errors are correlated, so a mean
    over 8 seeds still varies by ~0.3 (seeds 0-7: 1.50 over the whole range,
    seeds 8-15: 0.59)."""
    E, ln_g = density_of_states(8)
    values, errors = [], []
    for seed in range(16):
        sim = Multicanonical(8, walkers=256, seed=seed, device=device, symmetric=symmetric)
        w = np.zeros(sim.geom.nbins)
        w[(E - sim.geom.e_min) // 4] = -ln_g
        sim.set_log_weights(w)
        res = sim.produce(blocks=32, magnetization=False, target_error=0.03)
        assert res.reached and np.array_equal(res.energies, E)
        values.append(res.ln_g)
        errors.append(res.ln_g_err)
    values, errors = np.array(values), np.array(errors)
    spread = np.mean(np.var(values, axis=0, ddof=1) / np.mean(errors**2, axis=0))
    chi2 = np.mean((values - ln_g) ** 2 / errors**2)
    assert 0.6 < spread < 1.5 and 0.6 < chi2 < 1.5, (spread, chi2)
    assert np.max(np.abs(values - ln_g) / errors) < 5


def _canonical_3d(device, L, temps, replicas=16, sweeps=20000):
    """<E>/N and C/N from independent canonical Ensemble3D replicas: the mean
    over replicas and its standard error."""
    from clphys.ising import Ensemble3D
    ens = Ensemble3D(L, np.repeat(temps, replicas), seed=11, device=device, algorithm="checkerboard")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = ens.sample(sweeps, n_therm=2000, progress=False)
        e, c = s.mean_energy(), s.specific_heat()
    out = []
    for i in range(len(temps)):
        part = slice(i * replicas, (i + 1) * replicas)
        ev, cv = np.array([x.value for x in e[part]]), np.array([x.value for x in c[part]])
        out.append((ev.mean(), ev.std(ddof=1) / math.sqrt(replicas), cv.mean(), cv.std(ddof=1) / math.sqrt(replicas)))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("L,symmetric", [(4, False), (6, False), (4, True)])
def test_3d_canonical_averages_against_ising3d(device, L, symmetric):
    """3D L = 4 and 6: <E>/N and C/N at T = 4.5115 and 4.0 by reweighting the
    multicanonical production agree with long canonical runs of Ensemble3D (an
    independent method of the library) within 4 combined sigma. Weights from a
    loose iteration (d_k < 1e-3): any weights that cover the range give unbiased
    reweighted averages."""
    temps = [4.5115, 4.0]
    sim = Multicanonical(L, dim=3, walkers=256, seed=2, device=device, symmetric=symmetric)
    sim.iterate(kl=1e-3)
    res = sim.produce(blocks=32, magnetization=False, target_error=0.05)
    assert res.symmetric == symmetric
    c = res.canonical(temps)
    for i, (e, de, cv, dcv) in enumerate(_canonical_3d(device, L, temps)):
        _assert_within(c.energy[i], np.hypot(c.energy_err[i], de), e, f"<E>/N 3D L={L}", 0.02)
        _assert_within(c.specific_heat[i], np.hypot(c.specific_heat_err[i], dcv), cv, f"C/N 3D L={L}", 0.1)


# ------------------------------------------------------------------ defaults and flags (issue 27, 30)
def test_blocks_default_follows_walkers(device):
    """The production's blocks default to min(100, walkers) for walker counts
    that are no multiple of 50 * 1024: 64 and 16 walkers run; one walker is refused before any device work, naming the default."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = muca.run(4, walkers=64, seed=0, device=device, updates=200)
        assert res.blocks == 64
        res = muca.run(4, walkers=16, seed=0, device=device, max_iterations=1, updates=200)
        assert res.blocks == 16 and not res.converged
    with pytest.raises(ValueError, match=r"blocks: the default min\(100, walkers\) = 1 is below 2"):
        muca.run(4, walkers=1, seed=0, device="no such device")     # checked before the device
    with pytest.raises(ValueError, match="blocks must be <= 16"):
        muca.run(4, walkers=16, blocks=17, device="no such device")


def test_default_blocks_keep_work_groups_whole():
    """Where the walkers allow it, the default groups are multiples of 1024 walkers
    (100 down to 50 of them), else min(100, walkers): at 2D L = 128 on an NVIDIA
    GPU's 48 KiB the production then keeps the iterations' 16-bit local histogram,
    where 100 groups split work groups and needed the global one."""
    from clphys.muca.engine import choose_options, default_walkers, hist_flush_steps, histogram_plan
    from clphys.muca.geometry import Geometry
    from clphys.muca.simulation import default_blocks
    from clphys.runtime.facts import fake_facts
    walkers = [1, 16, 64, 100_000, 102_400, 135_168, 67_584, 53_248, 106_496]
    assert [default_blocks(w) for w in walkers] == [1, 16, 64, 100, 100, 66, 66, 52, 52]
    facts, geom = fake_facts("nvidia"), Geometry(2, 128)
    o, W = choose_options(facts, geom), default_walkers(facts)
    plan = lambda slots: histogram_plan(facts, geom, o, o["wg"], o["per_item"],     # noqa: E731
                                        hist_flush_steps(o["wg"], o["per_item"]), W, 0, slots)
    assert W == 67_584 and plan(1)[:2] == ("local", 16)
    assert plan(100)[0] == "global" and plan(default_blocks(W)) == plan(1)


def test_short_production_is_flagged_not_infinite(device):
    """produce(updates=10): ln g finite and NaN-free wherever it was recorded,
    the result flagged (reached False, a RuntimeWarning), never inf."""
    sim = Multicanonical(4, walkers=64, seed=0, device=device)
    sim.iterate(max_iterations=3)
    with pytest.warns(RuntimeWarning, match="above the target|seen by one group"):
        res = sim.produce(updates=10)
    assert np.all(np.isfinite(res.ln_g)) and not np.any(np.isnan(res.ln_g_err))
    assert not res.reached and res.histogram.sum() == 64 * 10
    assert np.isclose(np.log(np.sum(np.exp(res.ln_g - res.ln_g.max()))) + res.ln_g.max(), 16 * math.log(2))


def test_save_to_a_missing_folder(device, tmp_path):
    sim = Multicanonical(4, walkers=16, seed=1, device=device)
    with pytest.raises(FileNotFoundError, match="the folder .*nope.* does not exist") as info:
        sim.save(tmp_path / "nope" / "state.npz")
    assert ".tmp" not in str(info.value)
