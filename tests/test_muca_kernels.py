"""Multicanonical kernels bit for bit: device walkers and histograms against the
NumPy twin (clphys.muca.reference) for every kernel variant, PoCL against
Oclgrind, walkers split over engines (as over MPI ranks) against one engine;
the templates render for fake devices."""

import re
from types import SimpleNamespace

import numpy as np
import pytest

from clphys.muca import protocol
from clphys.muca import reference as ref
from clphys.muca.engine import Engine, capped, choose_options, with_maxnreg
from clphys.muca.geometry import Geometry
from clphys.runtime import fake_facts, render

VARIANTS = [dict(wg=8, lattice="global", table="global", hist="global"),
            dict(wg=4, lattice="local", table="local", hist="local", sites="direct"),
            dict(wg=16, lattice="local", table="global", hist="global", sites="direct"),
            dict(wg=2, lattice="global", table="local", hist="local"),
            dict(wg=4, lattice="local", table="local", hist="local", sites="packed"),
            dict(wg=8, lattice="local", table="global", hist="local", sites="packed"),
            # the GPU default at L >= 64 (lattices and table in global memory)
            dict(wg=4, lattice="global", table="global", hist="local"),
            # 2D L = 32 direct without popc (the shifts, as at other L)
            dict(wg=4, lattice="local", table="local", hist="local", sites="direct", popc=False)]
ENGINE_ONLY = ("popc",)                  # options Engine takes that choose_options does not


def _engine(dev, geom, walkers, seed, offset=0, total=None, **opts):
    opts = dict(opts)
    extra = {k: opts.pop(k) for k in ENGINE_ONLY if k in opts}
    try:
        options = dict(choose_options(dev.facts, geom, **opts), **extra)
    except ValueError as exc:           # e.g. a large local table on PoCL (see engine.py)
        pytest.skip(f"{opts} does not fit {dev.name} for {geom}: {exc}")
    return Engine(dev, geom, walkers, seed, offset=offset, total=total, options=options)


def _random_thresholds(geom, seed=1):
    return protocol.thresholds(np.random.default_rng(seed).normal(0.0, 1.5, geom.nbins), geom.dim)


def _check_against_twin(dev, geom, walkers, opts, *, magnet, t0=5, n=37, n_skip=10, slots=None,
                        seed=11, tm=False):
    slots = slots or (3 if magnet else 1)       # one slot: the iterations' one-row local histogram
    trips = magnet or tm                        # passage counts with the production's options
    eng = _engine(dev, geom, walkers, seed, **opts)
    bins, mags = eng.randomize()
    lat0 = ref.initial_lattice(geom, walkers, seed)
    np.testing.assert_array_equal(eng.read_lattice(), lat0)
    want_bins, want_mags = ref.measure(geom, lat0)
    np.testing.assert_array_equal(bins, want_bins)
    np.testing.assert_array_equal(mags, want_mags)
    thr = _random_thresholds(geom)
    eng.set_thresholds(thr)
    eng.configure(slots, magnet, trips, tm)
    trip_range = (geom.nbins // 2 - 1, geom.nbins // 2 + 1)     # ends the walkers reach in n steps
    state0 = ((np.arange(walkers, dtype=np.uint32) * 5) << 2) | (np.arange(walkers, dtype=np.uint32) % 3)
    eng.reset_passages(*trip_range, state0)
    eng.t = t0                               # a ragged start inside a Philox block
    eng.advance(n, n_skip)
    eng.flush()
    lat, b, m, hist, mhist, *passages = ref.update(
        geom, lat0, want_bins, want_mags, thr, t0, n, n_skip, seed, slots=slots, magnet=magnet, tm=tm,
        **(dict(passages=state0, trip_range=trip_range) if trips else {}))
    if trips:
        got = eng.read_passages()
        np.testing.assert_array_equal(got, passages[0])
        assert np.any(got >> 2 > state0 >> 2)              # some walkers made passages
    np.testing.assert_array_equal(eng.read_lattice(), lat)
    got_b, got_m = eng.read_bins()
    np.testing.assert_array_equal(got_b, b)
    np.testing.assert_array_equal(eng.hist, hist)
    assert eng.hist.sum() == walkers * (n - n_skip)          # no lost counts
    if magnet:
        np.testing.assert_array_equal(got_m, m)
        am = 2.0 * np.arange(geom.nm) / geom.N
        np.testing.assert_allclose(eng.moments[..., 1], mhist.astype(float) @ am**2, rtol=1e-12)
    np.testing.assert_array_equal(eng.measure()[0], b)       # tracked energies = recomputed
    return eng


CASES = [(Geometry(2, 4), 13), (Geometry(2, 6), 29), (Geometry(3, 4), 9), (Geometry(2, 34), 5),
         (Geometry(3, 2), 7)]


@pytest.mark.parametrize("geom,walkers", CASES, ids=[f"{g.dim}d-L{g.L}-W{w}" for g, w in CASES])
@pytest.mark.parametrize("opts", VARIANTS, ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()))
def test_engine_matches_numpy_twin(device, geom, walkers, opts):
    _check_against_twin(device, geom, walkers, opts, magnet=(walkers % 2 == 1))


@pytest.mark.parametrize("geom", [Geometry(2, 6), Geometry(2, 32), Geometry(3, 4)], ids=str)
def test_thermalisation_loop_variants_match_the_twin(device, geom):
    """The step loop's paths (update.cl): a ragged start and end around whole
    blocks; without magnetization or passages (the iterations' thermalisation:
    the bin as a table offset, with a local table) and with them (the
    production's options); popc (2D L = 32) and the shifts."""
    for opts in (VARIANTS[1], VARIANTS[7]):
        if geom.L == 32 and device.facts.vendor == "pocl":
            opts = dict(opts, table="global", hist="global")    # PoCL's safe local memory (engine.py)
        for magnet in (False, True):
            eng = _check_against_twin(device, geom, 12, opts, magnet=magnet, t0=6, n=45, n_skip=23)
            assert eng.popc == (opts.get("popc", True) and geom.dim == 2 and geom.L == 32)


@pytest.mark.parametrize("slots", [1, 3, 4])
def test_transition_counts_match_the_twin(device, slots):
    """tm: counts of (bin before, k proposed); 32 walkers in 4 slots of 8 keep
    one local row per work group of 8 (aligned), 3 slots need two."""
    geom = Geometry(2, 6)
    eng = _check_against_twin(device, geom, 32, dict(wg=8, lattice="local", table="global", hist="local"),
                              magnet=False, slots=slots, tm=True)
    assert eng.hist.shape == (slots, geom.nbins, geom.ncls)


@pytest.mark.slow
def test_oclgrind_runs_every_kernel_and_matches(oclgrind):
    """Every muca kernel and variant at a tiny size on Oclgrind (race and
    uninitialised-value checks), bit for bit against the twin. The engines are
    kept alive: Oclgrind's checker confuses the shadow state of freed buffers
    with later ones (see conftest.py)."""
    keep = []
    for geom, walkers, variants, n in ((Geometry(2, 4), 9, VARIANTS[:2] + VARIANTS[4:5] + VARIANTS[6:7], 9),
                                       (Geometry(3, 2), 5, VARIANTS[:2], 9), (Geometry(2, 34), 3, VARIANTS[::2], 9),
                                       (Geometry(2, 32), 16, VARIANTS[1:2], 40)):      # popc: L = 32 only
        for opts in variants:
            for magnet in (False, True):
                keep.append(_check_against_twin(oclgrind, geom, walkers, opts, magnet=magnet, n=n,
                                                n_skip=2, tm=magnet and geom.dim == 2))


def test_walkers_split_over_engines_add_up(device):
    """Two engines holding walkers 0..11 and 12..29 of 30 (as two MPI ranks
    would) give histograms summing to those of one engine with all 30."""
    geom, seed = Geometry(2, 6), 4
    thr = _random_thresholds(geom, 2)
    parts = []
    for offset, count in ((0, 30), (0, 12), (12, 18)):
        eng = _engine(device, geom, count, seed, offset=offset, total=30, wg=4)
        eng.randomize()
        eng.set_thresholds(thr)
        eng.configure(5, True)
        eng.advance(50, 7)
        eng.flush()
        parts.append((eng.hist, eng.moments, eng.read_lattice()))
    (h, mom, lat), (h1, m1, lat1), (h2, m2, lat2) = parts
    np.testing.assert_array_equal(h, h1 + h2)
    np.testing.assert_allclose(mom, m1 + m2, rtol=1e-14)
    np.testing.assert_array_equal(lat, np.concatenate([lat1, lat2], axis=1))


def test_flushes_at_the_count_limit_lose_nothing(device):
    """32-bit device counts are moved to 64-bit host totals every `limit`
    recorded steps, at the same steps however the launches are cut."""
    geom, seed, walkers = Geometry(2, 4), 3, 6
    thr = _random_thresholds(geom, 3)
    results = []
    for pieces in ((41,), (5, 17, 19), (1,) * 41):
        eng = _engine(device, geom, walkers, seed, wg=2)
        eng.randomize()
        eng.set_thresholds(thr)
        eng.configure(2, True)
        eng.limit = 7                        # flush every 7 recorded steps
        skip = 3
        for n in pieces:
            eng.advance(n, min(n, skip))
            skip = max(0, skip - n)
        eng.flush()
        results.append((eng.hist.copy(), eng.moments.copy()))
        assert eng.hist.sum() == walkers * 38
    for h, m in results[1:]:
        np.testing.assert_array_equal(h, results[0][0])
        np.testing.assert_array_equal(m, results[0][1])     # same flush points: same float sums


def test_thresholds_realise_the_metropolis_probabilities():
    geom = Geometry(2, 4)
    w = np.linspace(0.0, -30.0, geom.nbins)
    thr = protocol.thresholds(w, 2).astype(np.float64)
    p = (thr + 1) / 2**32
    for b in range(1, geom.nbins - 2):
        for k in range(5):
            target = b + k - 2
            want = min(1.0, np.exp(w[target] - w[b]))
            assert abs(p[b, k] - want) <= 2.0**-32
    assert np.all(thr[0, :2] == 0) and np.all(thr[-1, 3:] == 0)     # off the range: never


@pytest.mark.parametrize("vendor", ["nvidia", "amd", "pocl"])
def test_templates_render(vendor):
    facts = fake_facts(vendor)
    cases = [("muca/setup.cl", dict(dim=d, L=L)) for d, L in ((2, 4), (2, 34), (3, 2), (3, 64))]
    cases += [("muca/update.cl", dict(dim=d, L=L, wg=64, lattice=la, table=t, hist=h, record=rec, magnet=m,
                                      wide=(L == 66), hist_rows=1 + m, trips=m, tm=m and la == "local",
                                      sites=si, rounds=7 if m else 10))
              for d, L in ((2, 32), (3, 6), (2, 66))
              for la in ("local", "global") for t in ("local", "global") for h in ("local", "global")
              for rec in (False, True) for m in (False, True)
              for si in ("packed", "direct") if la == "local" or si == "packed"]
    cases += [("muca/common.cl", {})]
    for template, params in cases:
        src = render(template, facts, **params)
        assert src.count("{") == src.count("}") and "${" not in src and "<%" not in src
        for name in re.findall(r"__kernel\s+(?:__attribute__\s*\(\(.*?\)\)\s*)?void\s+(\S+)\s*\(", src, re.S):
            assert re.fullmatch(r"muca_\w+", name)
    base = dict(dim=2, L=8, wg=64, table="local", hist="local", record=True, magnet=False, wide=False,
                hist_rows=2, trips=False, rounds=10, tm=False)
    with pytest.raises(ValueError, match="lattice must be one of"):
        render("muca/update.cl", facts, lattice="texture", sites="packed", **base)
    with pytest.raises(ValueError, match="sites='direct' needs lattice='local'"):
        render("muca/update.cl", facts, lattice="global", sites="direct", **base)
    with pytest.raises(ValueError, match="L must be even"):
        render("muca/setup.cl", facts, dim=2, L=7)


def test_local_memory_choice_is_checked():
    pocl = fake_facts("pocl")                    # reports 512 KiB; 4 KiB are safe (engine.py)
    assert choose_options(pocl, Geometry(2, 32)) == {"wg": 64, "lattice": "global", "table": "global",
                                                     "hist": "global", "sites": "packed", "maxreg": 0}
    assert choose_options(pocl, Geometry(2, 8))["lattice"] == "local"
    with pytest.raises(ValueError, match="PoCL: a safe cap"):
        choose_options(pocl, Geometry(2, 32), table="local")
    facts = fake_facts("nvidia")                 # 48 KiB of local memory per work group
    geom = Geometry(2, 64)
    with pytest.raises(ValueError, match="local memory per work group"):
        choose_options(facts, geom, wg=128, lattice="local")
    opts = choose_options(facts, Geometry(2, 32))
    assert opts == {"wg": 128, "lattice": "local", "table": "local", "hist": "local", "sites": "direct",
                    "maxreg": 80}
    assert choose_options(facts, Geometry(2, 32), sites="packed")["maxreg"] == 0
    assert choose_options(facts, Geometry(2, 32), maxreg=0)["maxreg"] == 0
    for bad, match in ((8, "maxreg must be 0"), (-1, "maxreg must be >= 0"), (256, "maxreg must be <= 255")):
        with pytest.raises(ValueError, match=match):
            choose_options(facts, Geometry(2, 32), maxreg=bad)
    with pytest.raises(ValueError, match="sites='direct' needs lattice='local'"):
        choose_options(facts, geom, lattice="global", sites="direct")
    with pytest.raises(ValueError, match="sites='direct' needs the lattices in local memory"):
        choose_options(facts, geom, sites="direct")
    with pytest.raises(ValueError, match="sites must be one of"):
        choose_options(facts, geom, sites="table")
    assert choose_options(facts, geom)["lattice"] == "global"


def test_register_cap_goes_into_the_ptx():
    """maxreg on NVIDIA: .maxnreg right after the kernel's .reqntid (ptxas
    honours it: 96 -> 80 registers in the H100 build log); elsewhere no-op."""
    ptx = ".entry muca_update(\n\t.param .u32 n\n)\n.reqntid 128, 1, 1\n{\n\tret;\n}\n"
    assert with_maxnreg(ptx, 80) == ptx.replace(".reqntid 128, 1, 1\n", ".reqntid 128, 1, 1\n.maxnreg 80\n")
    with pytest.raises(ValueError, match="no .reqntid"):
        with_maxnreg(".entry k()\n{\n}\n", 80)
    pocl = SimpleNamespace(facts=fake_facts("pocl"))
    prg = object()
    assert capped(pocl, prg, 80) is prg and capped(SimpleNamespace(facts=fake_facts("nvidia")), prg, None) is prg
    # a program whose binary is no PTX: a warning, and the program uncapped
    odd = SimpleNamespace(cl_program=SimpleNamespace(get_info=lambda what: [b".entry k()\n{\n}\n"]))
    nvidia = SimpleNamespace(facts=fake_facts("nvidia"), programs={}, name="fake H100")
    with pytest.warns(RuntimeWarning, match="runs uncapped"):
        assert capped(nvidia, odd, 80) is odd


def test_transition_estimator_is_exact_on_exact_counts():
    """Counts proportional to the exact microcanonical class averages (every
    state of the 4 x 4 torus enumerated, any weight per energy) give Beale's
    ln g to rounding; a bin linked to nothing is NaN, not a number."""
    from clphys.exact import density_of_states
    from clphys.muca.transition import transition_ln_g
    geom = Geometry(2, 4)
    states = np.arange(2**16)
    s = (1 - 2 * ((states[:, None] >> np.arange(16)) & 1)).reshape(-1, 4, 4)
    nb = sum(np.roll(s, sh, axis=ax) for ax in (1, 2) for sh in (1, -1))
    k = (4 + s * nb) // 2                                  # neighbours equal to the spin
    bins = (32 - (s * (np.roll(s, 1, 1) + np.roll(s, 1, 2))).sum(axis=(1, 2))) // 4
    counts = np.zeros((geom.nbins, geom.ncls))
    np.add.at(counts, (np.repeat(bins, 16), k.reshape(-1)), 1.0)
    counts *= np.exp(np.random.default_rng(0).normal(0, 3, geom.nbins))[:, None]   # any weights
    E, ln_g = density_of_states(4)
    got = transition_ln_g(counts, 2, 16)
    np.testing.assert_allclose(got[(E - geom.e_min) // 4], ln_g, rtol=0, atol=1e-9)
    assert np.all(np.isnan(np.delete(got, (E - geom.e_min) // 4)))
    both = transition_ln_g(np.stack([counts, 2 * counts]), 2, 16)       # vectorised over samples
    np.testing.assert_allclose(both[1], got, rtol=0, atol=1e-9)
