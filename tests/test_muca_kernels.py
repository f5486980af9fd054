"""Multicanonical kernels bit for bit: device walkers and histograms against the
NumPy twin (clphys.muca.reference) for every kernel variant (one work item per
lattice word on the test devices; several items per word, combined through
local memory, on Oclgrind), walkers split over engines (as over MPI ranks)
against one engine; the threshold codes against the thresholds; the
templates render for fake devices (NVIDIA's warp-vote variants render only)."""

import re

import numpy as np
import pytest

from clphys.muca import protocol
from clphys.muca import reference as ref
from clphys.muca.engine import (
    WINDOW_BINS,
    Engine,
    _local_bytes,
    choose_options,
    default_walkers,
    hist_flush_steps,
    window_plan,
)
from clphys.muca.geometry import Geometry
from clphys.runtime import fake_facts, render

# options Engine takes that choose_options does not (the plan, built by the tests)
ENGINE_ONLY = ("ahead", "layout", "layout_recorded", "hist_bits", "hist_flush", "table_recorded", "runs", "window",
               "window_flush", "nd_first", "desc_ahead", "wg_recorded")
# the next block's loads ordered after this block's nd (nd_first) and from descriptors loaded a block
# earlier (desc_ahead), in the thermalisation's and the recorded launches
EARLY = dict(ahead=True, nd_first="all", desc_ahead="all")
# one work item per word (the CPU kernel): every place of lattice, codes and histogram
VARIANTS = [dict(per_item=32, wg=8, lattice="global", table="global", hist="global"),
            dict(per_item=32, wg=4, lattice="local", table="local", hist="local"),
            dict(per_item=32, wg=2, lattice="global", table="local", hist="local", layout="pair"),
            dict(per_item=32, wg=2, lattice="local", table="global", hist="global", layout="pair", ahead=True),
            dict(per_item=32, wg=8, lattice="global", table="local", hist="local", ahead=True),
            # 16-bit local counts, flushed every few steps (not only at the end of a launch)
            dict(per_item=32, wg=2, lattice="global", table="local", hist="local", hist_bits=16, hist_flush=7),
            dict(per_item=32, wg=2, lattice="local", table="local", hist="local", layout="pair", hist_bits=16,
                 hist_flush=9, table_recorded="global", ahead=True),
            # runs: a walker's steps in one bin counted at once (global, 32-bit and 16-bit local)
            dict(per_item=32, wg=8, lattice="global", table="global", hist="global", runs=True),
            dict(per_item=32, wg=4, lattice="local", table="local", hist="local", runs=True),
            dict(per_item=32, wg=2, lattice="global", table="local", hist="local", hist_bits=16, hist_flush=7,
                 runs=True),
            # windows: each walker's counts in a few bins of local memory around its bin, moved every
            # few steps; steps outside count in the global histogram
            dict(per_item=32, wg=8, lattice="global", table="global", hist="global", window=8, window_flush=4),
            dict(per_item=32, wg=4, lattice="local", table="local", hist="global", window=12, window_flush=8,
                 ahead=True),
            dict(per_item=32, wg=8, lattice="global", table="global", hist="global", **EARLY),
            dict(per_item=32, wg=2, lattice="global", table="local", hist="local", hist_bits=16, hist_flush=7,
                 **dict(EARLY, nd_first="none")),
            dict(per_item=32, wg=4, lattice="global", table="local", hist="global", window=12, window_flush=8,
                 **dict(EARLY, desc_ahead="recorded")),
            # 16-bit row codes (local, global), in every launch or in the unrecorded ones only
            dict(per_item=32, wg=4, lattice="global", table="local", hist="local", layout="row16"),
            dict(per_item=32, wg=8, lattice="local", table="global", hist="global", layout="row16", ahead=True),
            dict(per_item=32, wg=2, lattice="global", table="local", hist="local", hist_bits=16, hist_flush=7,
                 layout="row16", layout_recorded="row", table_recorded="global", **EARLY),
            # the recorded launches in larger work groups than the others (16-bit local counts)
            dict(per_item=32, wg=2, wg_recorded=8, lattice="global", table="global", hist="local", hist_bits=16,
                 hist_flush=7, ahead=True),
            # 16-bit codes in the recorded launches only, beside 16-bit local counts; in every launch
            # with the global histogram counted by runs
            dict(per_item=32, wg=4, lattice="global", table="global", hist="local", hist_bits=16, hist_flush=7,
                 layout="row", layout_recorded="row16", **EARLY),
            dict(per_item=32, wg=8, lattice="global", table="global", hist="global", layout="row16", runs=True)]
# several work items per word, their flips combined through local memory (Oclgrind:
# PoCL's compiler takes minutes for these loops with barriers)
SHARED = [dict(per_item=1, wg=32, lattice="global", layout="pair", ahead=True),
          dict(per_item=1, wg=64, lattice="local", hist="global"),
          dict(per_item=4, wg=16, lattice="global", table="global", layout="row"),
          dict(per_item=2, wg=32, lattice="local", layout="pair", ahead=True),
          dict(per_item=2, wg=32, lattice="global", hist="global", ahead=True, runs=True),
          dict(per_item=2, wg=32, lattice="global", hist="local", hist_bits=16, hist_flush=9, ahead=True, runs=True),
          dict(per_item=2, wg=32, lattice="global", hist="global", ahead=True, window=8, window_flush=4),
          # the nd packed (P = 32 / per_item >= 4 items per word) and as planes (P = 2)
          dict(per_item=2, wg=32, lattice="global", hist="local", hist_bits=16, hist_flush=9, **EARLY),
          dict(per_item=8, wg=8, lattice="global", table="global", layout="row", **EARLY),
          dict(per_item=16, wg=4, lattice="global", hist="global", **EARLY),
          dict(per_item=2, wg=32, lattice="global", table="local", layout="row16", layout_recorded="row", **EARLY),
          dict(per_item=4, wg=16, lattice="global", table="global", layout="row16"),
          dict(per_item=2, wg=16, wg_recorded=32, lattice="global", table="global", hist="local", hist_bits=16,
               hist_flush=9, ahead=True),
          dict(per_item=2, wg=32, lattice="global", table="global", hist="global", layout="row16", runs=True,
               **EARLY)]


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


def _check_against_twin(dev, geom, walkers, opts, *, magnet, t0=5, n=37, n_skip=10, slots=None, seed=11,
                        thr=None, every=1):
    slots = slots or (3 if magnet else 1)       # one slot: the iterations' one-row local histogram
    eng = _engine(dev, geom, walkers, seed, **opts)
    bins, mags = eng.randomize()
    lat0 = ref.initial_lattice(geom, walkers, seed)
    np.testing.assert_array_equal(eng.read_lattice(), lat0)
    want_bins, want_mags = ref.measure(geom, lat0, walkers)
    np.testing.assert_array_equal(bins, want_bins)
    np.testing.assert_array_equal(mags, want_mags)
    thr = _random_thresholds(geom) if thr is None else thr
    eng.set_thresholds(thr)
    eng.configure(slots, magnet, magnet, every=every)
    trip_range = (geom.nbins // 2 - 1, geom.nbins // 2 + 1)     # ends the walkers reach in n steps
    state0 = ((np.arange(walkers, dtype=np.uint32) * 5) << 2) | (np.arange(walkers, dtype=np.uint32) % 3)
    eng.reset_passages(*trip_range, state0)
    eng.t = t0                               # a ragged start inside a Philox block
    eng.advance(n, n_skip)
    eng.flush()
    lat, b, m, hist, mhist, *passages = ref.update(
        geom, lat0, want_bins, want_mags, thr, t0, n, n_skip, seed, slots=slots, magnet=magnet, every=every,
        **(dict(passages=state0, trip_range=trip_range) if magnet else {}))
    if magnet:
        got = eng.read_passages()
        np.testing.assert_array_equal(got, passages[0])
        assert np.any(got >> 2 > state0 >> 2)              # some walkers made passages
    np.testing.assert_array_equal(eng.read_lattice(), lat)
    got_b, got_m = eng.read_bins()
    np.testing.assert_array_equal(got_b, b)
    np.testing.assert_array_equal(eng.hist, hist)
    counted = sum(t % every == 0 for t in range(t0 + n_skip, t0 + n))
    assert eng.hist.sum() == walkers * counted               # no lost counts
    if magnet:
        np.testing.assert_array_equal(got_m, m)
        am = 2.0 * np.arange(geom.nm) / geom.N
        np.testing.assert_allclose(eng.moments[..., 1], mhist.astype(float) @ am**2, rtol=1e-12)
    np.testing.assert_array_equal(eng.measure()[0], b)       # tracked energies = recomputed
    return eng


# (2D L = 6, 128 walkers: whole work groups of walkers for wg 2 and 4, the kernel without the checks)
CASES = [(Geometry(2, 4), 13), (Geometry(2, 6), 70), (Geometry(3, 4), 40), (Geometry(2, 34), 5),
         (Geometry(3, 2), 7), (Geometry(2, 6), 128)]


@pytest.mark.parametrize("geom,walkers", CASES, ids=[f"{g.dim}d-L{g.L}-W{w}" for g, w in CASES])
@pytest.mark.parametrize("opts", VARIANTS, ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()))
def test_engine_matches_numpy_twin(device, geom, walkers, opts):
    _check_against_twin(device, geom, walkers, opts, magnet=(walkers % 2 == 1))


# every place of the histogram (local 32-bit, 16-bit flushed, global with runs, windows) and the
# ordered loads, counting 1 in 2 or 4 steps
THINNED = [VARIANTS[i] for i in (1, 5, 7, 9, 10, 14, 18)]


@pytest.mark.parametrize("every", [2, 4])
@pytest.mark.parametrize("opts", THINNED, ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()))
def test_counting_every_few_steps_matches_the_twin(device, opts, every):
    """Recorded launches that count a walker's bin at the steps t that are
    multiples of `every` (ragged starts and ends of a launch, whole blocks)
    give the twin's lattices, bins, passages and histograms."""
    for geom, walkers in ((Geometry(2, 6), 70), (Geometry(3, 4), 13)):
        _check_against_twin(device, geom, walkers, opts, magnet=(walkers % 2 == 1), t0=7, n=45, every=every)


@pytest.mark.parametrize("every", [1, 4])
def test_window_counts_at_the_flush_limit(device, every):
    """A window's 8-bit counts hold the counted ones of window_flush + 6 steps
    of one walker in one bin (window_flush = 247 `every` steps): walkers held
    in their bins (moves into every bin but each third one all but forbidden)
    count up to 247 + 6 counted steps per bin and window, and the histogram
    still equals the twin's."""
    geom, walkers = Geometry(2, 6), 70
    ln_w = np.where(np.arange(geom.nbins) % 3 == 0, 0.0, -1000.0)
    opts = dict(per_item=32, wg=8, lattice="global", table="global", hist="global", window=8, window_flush=247)
    eng = _check_against_twin(device, geom, walkers, opts, magnet=False, n=900 * every, n_skip=100 * every,
                              thr=protocol.thresholds(ln_w, geom.dim), every=every)
    assert eng.hist_mode == "window8"
    bins, _ = eng.read_bins()
    assert np.all(bins % 3 == 0)                              # every walker held
    assert np.all(eng.hist[0, np.unique(bins)] >= 800)        # 800 counted steps each, 3 flushes at most


@pytest.mark.slow
def test_oclgrind_runs_every_kernel_and_matches(oclgrind):
    """Every muca kernel and variant at a tiny size on Oclgrind (race and
    uninitialised-value checks), bit for bit against the twin. The engines are
    kept alive: Oclgrind's checker confuses the shadow state of freed buffers
    with later ones (see conftest.py)."""
    keep = []
    for geom, walkers in ((Geometry(2, 4), 45), (Geometry(3, 2), 7), (Geometry(2, 4), 64)):
        for opts in SHARED + VARIANTS[:2]:
            for magnet in ((False, True) if walkers != 64 else (True,)):    # 64: every group whole
                keep.append(_check_against_twin(oclgrind, geom, walkers, opts, magnet=magnet, n=23,
                                                n_skip=6))


@pytest.mark.oclgrind
def test_oclgrind_runs_16_bit_local_counts(oclgrind):
    """The 16-bit local histogram flushed during the launch (before every
    block here), one row and two rows per work group, with one and several
    items per word (their flips combined through local memory), on Oclgrind
    with its race and uninitialised-value checks, bit for bit against the twin."""
    keep = []
    geom = Geometry(2, 4)
    flushed = dict(hist="local", hist_bits=16, hist_flush=7)
    # (every: 1 step in 4 counted, the flushes 4 times further apart)
    for walkers, slots, opts, every in (
            (45, 1, dict(per_item=1, wg=32, lattice="global", layout="row", **flushed), 1),
            (45, 1, dict(per_item=2, wg=16, lattice="local", table="global", **flushed), 1),
            (45, 1, dict(per_item=2, wg=16, lattice="global", table="global", **flushed, **EARLY), 4),
            (70, 1, VARIANTS[6], 1), (200, 3, VARIANTS[5], 1), (200, 3, VARIANTS[9], 1)):   # 9: with runs
        keep.append(_check_against_twin(oclgrind, geom, walkers, opts, magnet=False, slots=slots,
                                        n=23 if every == 1 else 61, n_skip=6, every=every))
        assert keep[-1].hist_mode == "local16"


def test_walkers_split_over_engines_add_up(device):
    """Two engines holding walkers 0..31 and 32..69 of 70 (as two MPI ranks
    would: whole lattice words) give histograms summing to those of one engine
    with all 70, and the same spins."""
    geom, seed = Geometry(2, 6), 4
    thr = _random_thresholds(geom, 2)
    parts = []
    for offset, count in ((0, 70), (0, 32), (32, 38)):
        eng = _engine(device, geom, count, seed, offset=offset, total=70, per_item=32, wg=2)
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
    with pytest.raises(ValueError, match="multiple of 32"):
        _engine(device, geom, 10, seed, offset=12, total=22)


def test_flushes_at_the_count_limit_lose_nothing(device):
    """32-bit device counts are moved to 64-bit host totals every `limit`
    recorded steps, at the same steps however the launches are cut."""
    geom, seed, walkers = Geometry(2, 4), 3, 6
    thr = _random_thresholds(geom, 3)
    results = []
    for pieces in ((41,), (5, 17, 19), (1,) * 41):
        eng = _engine(device, geom, walkers, seed, per_item=32, wg=2)
        eng.randomize()
        eng.set_thresholds(thr)
        eng.configure(2, True)
        assert eng.limit == (2**32 - 1) // 3     # a slot's count grows by its 3 walkers per step
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


@pytest.mark.parametrize("dim", [2, 3])
def test_threshold_codes_decide_as_the_thresholds(dim):
    """The code tables (one byte per pair of bins, one or two bytes per (bin, nd)) with their
    exact fallback accept exactly the words thr[b, k] accepts: words at and
    next to every threshold, and random ones."""
    geom = Geometry(dim, 4)
    rng = np.random.default_rng(5)
    thr = protocol.thresholds(rng.normal(0.0, 2.0, geom.nbins), dim)
    pcodes, pexact = protocol.pair_codes(thr, dim)
    rcodes, rexact = protocol.row_codes(thr, dim)
    r16codes, r16exact = protocol.row_codes(thr, dim, bits=16)
    assert r16codes.dtype == np.uint16 and np.array_equal(r16exact, rexact)
    b, k = np.meshgrid(np.arange(geom.nbins), np.arange(2 * dim + 1), indexing="ij")
    d = k - dim
    ok = (b + d >= 0) & (b + d < geom.nbins)              # moves inside the range
    b, k, d = b[ok], k[ok], d[ok]
    t = thr[b, k].astype(np.int64)
    for words in [np.clip(t + s, 0, 2**32 - 1) for s in (-1, 0, 1)] + [rng.integers(0, 2**32, b.size)]:
        w = words.astype(np.uint32)
        want = w <= thr[b, k]
        lo = b + np.minimum(d, 0)
        pidx = lo * dim + np.maximum(np.abs(d), 1) - 1
        code = pcodes[pidx].astype(np.uint32)
        restricted = (d != 0) & ((code & 1) == (d > 0))
        top = (w >> 25)
        pair = ~restricted | (top < code >> 1) | ((top == code >> 1) & (w <= pexact[pidx]))
        np.testing.assert_array_equal(pair, want)
        ridx = b * (2 * dim + 1) + (2 * dim - k)
        rtop = rcodes[ridx].astype(np.uint32) << 24
        row = (w < rtop) | (((w ^ rtop) < (1 << 24)) & (w <= rexact[ridx]))
        np.testing.assert_array_equal(row, want)
        top16 = r16codes[ridx].astype(np.uint32)
        row16 = ((w >> 16) < top16) | (((w >> 16) == top16) & (w <= r16exact[ridx]))
        np.testing.assert_array_equal(row16, want)
    with pytest.raises(ValueError, match="bits must be 8 or 16"):
        protocol.row_codes(thr, dim, bits=12)


@pytest.mark.parametrize("vendor", ["nvidia", "amd", "pocl"])
def test_templates_render(vendor):
    facts = fake_facts(vendor)
    combine = {"nvidia": "ballot", "amd": "local", "pocl": "none"}[vendor]
    cases = [("muca/setup.cl", dict(dim=d, L=L)) for d, L in ((2, 4), (2, 34), (3, 2), (3, 64))]
    for K in ((32,) if vendor == "pocl" else (1, 2, 32)):
        for d, L in ((2, 32), (3, 6), (2, 66)):
            for lattice in ("local", "global"):
                for table, hist, layout, bits in (("local", "local", "row", 32), ("global", "global", "pair", 32),
                                                  ("global", "local", "pair", 16), ("local", "global", "row16", 32)):
                    for rec in (False, True):
                        cases.append(("muca/update.cl", dict(
                            dim=d, L=L, wg=64, K=K, combine=combine if K < 32 else "none", table=table,
                            hist=hist, record=rec, magnet=rec, hist_rows=1 + rec, trips=rec, ahead=rec,
                            nd_first=rec and d == 2, desc_ahead=rec,
                            layout=layout, lattice=lattice, hist_bits=bits,
                            hist_flush=0xFFFF // (64 * K) if bits == 16 else 0)))
    cases += [("muca/common.cl", {})]
    for template, params in cases:
        src = render(template, facts, **params)
        assert src.count("{") == src.count("}") and "${" not in src and "<%" not in src
        assert ("vote.sync.ballot" in src) == (params.get("combine") == "ballot")
        # two walkers per item with the warp vote: a word's flips by one byte permute
        assert ("mu_prmt(votes_" in src) == (params.get("combine") == "ballot" and params.get("K") == 2)
        # and a walker's new bin by an explicit select
        assert ("= mu_selp(bin[v] + d, bin[v]" in src) == (params.get("combine") == "ballot")
        # 16-bit codes leave a flip that keeps the energy to the exact path; 8-bit ones accept it at once
        if params.get("layout") in ("row", "row16"):
            assert ("wq < top || d == 0" in src) == (params["layout"] == "row")
        assert "double" not in re.sub(r"//[^\n]*", "", src)
        for name in re.findall(r"__kernel\s+(?:__attribute__\s*\(\(.*?\)\)\s*)?void\s+(\S+)\s*\(", src, re.S):
            assert re.fullmatch(r"muca_\w+", name)
    base = dict(dim=2, L=8, wg=64, table="local", hist="local", record=True, magnet=False, hist_rows=2,
                trips=False, ahead=False)
    with pytest.raises(ValueError, match="combine must be one of"):
        render("muca/update.cl", facts, K=1, combine="atomic", **base)
    with pytest.raises(ValueError, match="combine='none' goes with K = 32"):
        render("muca/update.cl", facts, K=1, combine="none", **base)
    with pytest.raises(ValueError, match="lattice must be 'global' or 'local'"):
        render("muca/update.cl", facts, K=32, combine="none", lattice="texture", **base)
    with pytest.raises(ValueError, match="hist_flush must be 7 .. every 65535"):
        render("muca/update.cl", facts, K=32, combine="none", hist_bits=16, hist_flush=6, **base)
    # counting 1 step in `every`: the flush intervals of the 16-bit rows and of the windows
    # grow with it (a count grows by at most a group's walkers, or 1 per window, per counted step)
    cap = 0xFFFF // (64 * 32)
    render("muca/update.cl", facts, K=32, combine="none", hist_bits=16, hist_flush=4 * cap, every=4, **base)
    with pytest.raises(ValueError, match="hist_flush must be 7 .. every 65535"):
        render("muca/update.cl", facts, K=32, combine="none", hist_bits=16, hist_flush=4 * cap + 1, every=4,
               **base)
    windowed = dict(base, hist="global", hist_rows=1, window=8)
    render("muca/update.cl", facts, K=32, combine="none", window_flush=4 * 255 - 8, every=4, **windowed)
    for flush, every in ((248, 1), (4 * 255 - 7, 4)):
        with pytest.raises(ValueError, match="window_flush 4 .. 255 every - 8"):
            render("muca/update.cl", facts, K=32, combine="none", window_flush=flush, every=every, **windowed)
    with pytest.raises(ValueError, match="every must be 1, 2 or 4"):
        render("muca/update.cl", facts, K=32, combine="none", every=3, **base)
    # whole blocks count their first step only, the ragged start and end the steps t % 4 == 0
    every_step, every_4 = (render("muca/update.cl", facts, K=32, combine="none", every=e, **base) for e in (1, 4))
    assert every_4.count("atomic_inc(&hist_l") < every_step.count("atomic_inc(&hist_l")
    assert "(c & 3u) == 0u" in every_4 and "(c & 3u) == 0u" not in every_step
    with pytest.raises(ValueError, match="hist_bits must be 32 or 16"):
        render("muca/update.cl", facts, K=32, combine="none", hist_bits=8, **base)
    with pytest.raises(ValueError, match="nd_first and desc_ahead go with ahead"):
        render("muca/update.cl", facts, K=32, combine="none", desc_ahead=True, **base)
    with pytest.raises(ValueError, match="L must be even"):
        render("muca/setup.cl", facts, dim=2, L=7)
    if vendor != "nvidia":
        with pytest.raises(ValueError, match="ballot' needs an NVIDIA device"):
            render("muca/update.cl", facts, K=1, combine="ballot", **base)


def test_kernel_plan_defaults_and_refusals():
    nvidia, pocl, amd = fake_facts("nvidia"), fake_facts("pocl"), fake_facts("amd")
    # NVIDIA: the lattices in local memory up to 2D L = 32 (one walker per item),
    # beyond in global memory with two walkers per item, the next block's words loaded ahead,
    # 16-bit codes in the unrecorded launches (8-bit ones in the recorded, beside the counts)
    small, large = choose_options(nvidia, Geometry(2, 32)), choose_options(nvidia, Geometry(2, 64))
    assert small == {"wg": 128, "lattice": "local", "table": "local", "hist": "local", "per_item": 1,
                     "combine": "ballot", "layout": "row", "ahead": False, "hist_bits": 32,
                     "table_recorded": "local", "desc_ahead": "none", "nd_first": "none"}
    assert large == {"wg": 128, "lattice": "global", "table": "local", "hist": "local", "per_item": 2,
                     "combine": "ballot", "layout": "row16", "layout_recorded": "row", "ahead": True,
                     "hist_bits": 32,
                     "table_recorded": "local", "desc_ahead": "all", "nd_first": "all"}
    # the loads ordered in the launches where the registers they take leave the warps resident:
    # 2D every launch up to 512 walkers per SM (1024 up to L = 64 and with the recorded
    # launches in work groups of 512), the unrecorded ones up to 1024; 3D up to 512 (nd_first
    # only in the recorded ones)
    def early(geom, per_sm):
        plan = choose_options(nvidia, geom, walkers=per_sm * nvidia.compute_units)
        return plan["desc_ahead"], plan["nd_first"]
    assert early(Geometry(2, 128), 512) == ("all", "all")
    assert early(Geometry(2, 64), 768) == early(Geometry(2, 64), 1024) == ("all", "all")
    assert early(Geometry(2, 128), 768) == ("unrecorded", "unrecorded")
    assert early(Geometry(2, 128), 1024) == ("all", "all")     # the default; recorded in groups of 512
    assert early(Geometry(2, 256), 1024) == ("unrecorded", "unrecorded")
    assert early(Geometry(2, 128), 2048) == early(Geometry(2, 64), 2048) == ("none", "none")
    assert early(Geometry(3, 16), 512) == ("all", "recorded")
    assert early(Geometry(3, 16), 1024) == ("none", "none")
    # codes in global memory: 16-bit ones in the recorded launches at 2D L = 128 (1024 per SM),
    # in the unrecorded ones at 2D L = 256, in both in 3D; 8-bit ones elsewhere
    def layouts(geom, **choices):
        plan = choose_options(nvidia, geom, **{"walkers": default_walkers(nvidia, geom), **choices})
        return plan["layout"], plan.get("layout_recorded", plan["layout"])
    assert layouts(Geometry(2, 128)) == ("row", "row16")
    assert layouts(Geometry(2, 128), walkers=512 * nvidia.compute_units) == ("row", "row")
    assert layouts(Geometry(2, 256)) == ("row16", "row")
    assert layouts(Geometry(3, 24)) == layouts(Geometry(3, 32)) == ("row16", "row16")
    assert layouts(Geometry(3, 16)) == ("row", "row")              # the unrecorded codes in local memory
    amd_256 = choose_options(amd, Geometry(2, 256))             # measured on NVIDIA only
    assert amd_256["table"] == "global" and amd_256["layout"] == "row" and "layout_recorded" not in amd_256
    # four walkers per item from 2048 per SM at 2D L <= 128 (132 SMs); the caller's choice stays
    crowded = 2048 * nvidia.compute_units
    assert choose_options(nvidia, Geometry(2, 64), walkers=crowded - 32)["per_item"] == 2
    assert choose_options(nvidia, Geometry(2, 64), walkers=crowded)["per_item"] == 4
    assert choose_options(nvidia, Geometry(2, 64), walkers=crowded, per_item=2)["per_item"] == 2
    crowded_128 = choose_options(nvidia, Geometry(2, 128), walkers=crowded)
    assert (crowded_128["per_item"], crowded_128["wg"], crowded_128["hist_bits"]) == (4, 256, 16)
    assert choose_options(nvidia, Geometry(2, 256), walkers=crowded)["per_item"] == 2
    assert choose_options(nvidia, Geometry(3, 16), walkers=crowded)["per_item"] == 2
    assert choose_options(nvidia, Geometry(2, 32), walkers=crowded)["per_item"] == 1   # local lattice
    assert choose_options(amd, Geometry(2, 64), walkers=crowded)["per_item"] == 1
    # few walkers (<= 128 per SM) at 2D L = 128: one per item
    few = 128 * nvidia.compute_units
    plan = choose_options(nvidia, Geometry(2, 128), walkers=few)
    assert (plan["per_item"], plan["wg"], plan["lattice"], plan["hist"]) == (1, 128, "global", "local")
    # smaller work groups where they leave fewer walkers on the busiest compute unit (unless
    # the caller chose them)
    def groups(facts, geom, walkers, **choices):
        plan = choose_options(facts, geom, walkers=walkers, **choices)
        return plan["wg"], plan["per_item"], -(-walkers // (plan["wg"] * plan["per_item"]))
    units = nvidia.compute_units
    assert groups(nvidia, Geometry(2, 128), 512 * units) == (256, 2, units)
    assert groups(nvidia, Geometry(2, 128), 256 * units) == (128, 2, units)
    assert groups(nvidia, Geometry(2, 128), 256 * units, wg=256) == (256, 2, units // 2)
    assert groups(nvidia, Geometry(2, 128), 384 * units) == (256, 2, 3 * units // 4)  # 512 at most either way
    assert groups(nvidia, Geometry(2, 128), 768 * units) == (128, 2, 3 * units)       # 768, not 1024
    assert groups(nvidia, Geometry(2, 128), 64 * units) == (64, 1, units)
    assert groups(nvidia, Geometry(2, 64), 128 * units) == (64, 2, units)
    assert groups(nvidia, Geometry(2, 64), 8 * units)[:2] == (32, 2)                  # whole warps
    assert groups(amd, Geometry(2, 64), 32 * amd.compute_units) == (32, 1, amd.compute_units)
    assert groups(pocl, Geometry(2, 8), 64)[0] == 8                                   # CPUs: as chosen
    assert choose_options(nvidia, Geometry(2, 64), walkers=few)["per_item"] == 2
    assert choose_options(nvidia, Geometry(2, 256), walkers=few)["per_item"] == 2
    assert choose_options(nvidia, Geometry(2, 128), walkers=few + 32)["per_item"] == 2
    assert choose_options(nvidia, Geometry(2, 128), walkers=few, wg=128)["wg"] == 128
    assert choose_options(nvidia, Geometry(2, 128), walkers=few, per_item=2)["per_item"] == 2
    assert choose_options(nvidia, Geometry(3, 16), walkers=few)["per_item"] == 2
    # 80 KiB of row codes: in global memory (faster on NVIDIA than 32 KiB of pair codes in local)
    plan = choose_options(nvidia, Geometry(2, 128))
    assert (plan["table"], plan["layout"], plan["hist"], plan["hist_bits"], plan["wg"]) == ("global", "row", "local", 16, 256)
    assert choose_options(nvidia, Geometry(2, 128), wg=128)["wg"] == 128
    # ... and the recorded launches in work groups of 512 at 1024 walkers per SM (L1 room for the
    # codes beside the counts), unless the caller chose wg
    def recorded_wg(geom, per_sm, **choices):
        plan = choose_options(nvidia, geom, walkers=per_sm * nvidia.compute_units, **choices)
        return plan["wg"], plan.get("wg_recorded", plan["wg"])
    assert recorded_wg(Geometry(2, 128), 1024) == (256, 512)
    assert recorded_wg(Geometry(2, 128), 512) == recorded_wg(Geometry(2, 128), 1024, wg=256) == (256, 256)
    assert recorded_wg(Geometry(2, 128), 2048) == (256, 256)                   # four walkers per item
    assert recorded_wg(Geometry(2, 64), 1024) == (128, 128)                    # codes in local memory
    assert recorded_wg(Geometry(2, 256), 1024)[1] == recorded_wg(Geometry(2, 256), 1024)[0]   # windows
    # the caller's table stays where it was put: no room for a local histogram beside it
    assert choose_options(nvidia, Geometry(2, 128), table="local")["hist"] == "global"
    with pytest.raises(ValueError, match="need 96 KiB of local memory"):
        choose_options(nvidia, Geometry(2, 128), table="local", hist="local")
    assert choose_options(nvidia, Geometry(2, 256))["table"] == "global"
    assert choose_options(pocl, Geometry(2, 8))["per_item"] == 32            # CPUs: one item per word
    assert choose_options(pocl, Geometry(2, 8))["combine"] == "none"
    assert choose_options(amd, Geometry(2, 64))["combine"] == "local"        # other GPUs: local memory
    with pytest.raises(ValueError, match="PoCL: a safe cap"):
        choose_options(pocl, Geometry(2, 32), lattice="local")
    with pytest.raises(ValueError, match="per_item = 2 is not supported on PoCL"):
        choose_options(pocl, Geometry(2, 8), per_item=2)                    # a launch never finishes
    with pytest.raises(ValueError, match="per_item must be one of"):
        choose_options(nvidia, Geometry(2, 8), per_item=3)
    with pytest.raises(ValueError, match="wg must be a multiple of 32"):
        choose_options(nvidia, Geometry(2, 8), per_item=1, wg=48)
    with pytest.raises(ValueError, match="table must be one of"):
        choose_options(nvidia, Geometry(2, 8), table="texture")


@pytest.mark.parametrize("persona", ["amd-gpu", "apple-gpu", "nvidia"])
def test_16_bit_histogram_plans_fit_the_gpus(persona):
    """Where 32-bit local counts do not fit (AMD: 64 KiB of local memory, Apple:
    32 KiB, NVIDIA: 48 KiB per work group), the plan counts in 16 bits, with the
    codes of the recorded launches in global memory if need be; the recorded
    kernel renders with its flushes and fits the device's local memory."""
    from conftest import PERSONAS
    facts = PERSONAS[persona] if persona in PERSONAS else fake_facts(persona)
    want = {"amd-gpu": {(2, 64): "local", (2, 128): "global", (3, 16): "local"},
            "apple-gpu": {(2, 64): "local", (3, 12): "global", (3, 16): "local"},
            "nvidia": {(2, 128): "global", (3, 12): "global", (3, 16): "global", (3, 24): "global"}}[persona]
    for (dim, L), table_recorded in want.items():
        geom = Geometry(dim, L)
        o = choose_options(facts, geom)
        assert (o["hist"], o["hist_bits"], o["table_recorded"]) == ("local", 16, table_recorded), (dim, L, o)
        assert _local_bytes(geom, o["wg"], o["table"], "local", o["combine"], layout=o["layout"],
                            lattice=o["lattice"], per_item=o["per_item"]) > facts.local_mem   # 32 bits: no room
        assert _local_bytes(geom, o["wg"], o["table_recorded"], "local", o["combine"], layout=o["layout"],
                            lattice=o["lattice"], per_item=o["per_item"], hist_bits=16) <= facts.local_mem
        flush = hist_flush_steps(o["wg"], o["per_item"])
        src = render("muca/update.cl", facts, **geom.template(), wg=o["wg"], K=o["per_item"], combine=o["combine"],
                     table=o["table_recorded"], hist="local", record=True, magnet=False, hist_rows=1, trips=False,
                     ahead=o["ahead"], layout=o["layout"], lattice=o["lattice"],
                     hist_bits=16, hist_flush=flush)
        assert f"if (since > {flush - 7}u)" in src and "((MU_NBINS + 1u) / 2u)" in src
    assert choose_options(facts, Geometry(2, 256))["hist"] == "global"      # 128 KiB even in 16 bits


def test_windows_where_the_histogram_is_global():
    """Each walker's local window is planned on GPUs where the histogram must be
    global in 2D (L = 256) and the window fits beside the plan's local memory;
    nowhere else (3D L = 32 counts runs), and the template refuses windows it
    cannot count."""
    nvidia, pocl = fake_facts("nvidia"), fake_facts("pocl")
    for geom in (Geometry(2, 256), Geometry(3, 32)):
        o = choose_options(nvidia, geom)
        assert o["hist"] == "global"
        # 2D only: in 3D (L = 32) each walker's runs in one bin are added to global memory
        want = WINDOW_BINS if geom.dim == 2 else 0
        assert window_plan(nvidia, geom, o, o["wg"], o["per_item"], "global") == want
        assert window_plan(nvidia, geom, dict(o, window=0), o["wg"], o["per_item"], "global") == 0
        assert window_plan(nvidia, geom, dict(o, window=8), o["wg"], o["per_item"], "global") == 8
        c = choose_options(pocl, geom)
        assert window_plan(pocl, geom, c, c["wg"], c["per_item"], c["hist"]) == 0     # CPUs: runs
    o = choose_options(nvidia, Geometry(2, 64))
    assert window_plan(nvidia, Geometry(2, 64), o, o["wg"], o["per_item"], o["hist"]) == 0   # local counts
    # 2D L = 128 forced global with its 32 KiB of pair codes in local memory: no room for 24 KiB of windows
    o = choose_options(nvidia, Geometry(2, 128), hist="global", table="local")
    assert o["layout"] == "pair" and window_plan(nvidia, Geometry(2, 128), o, o["wg"], o["per_item"], "global") == 0
    base = dict(dim=2, L=8, wg=8, K=32, combine="none", table="global", hist="global", record=True,
                magnet=False, hist_rows=1, trips=False, ahead=False)
    for bad in (dict(window=7, window_flush=8), dict(window=6, window_flush=8), dict(window=8, window_flush=3),
                dict(window=8, window_flush=248), dict(window=8, window_flush=8, runs=True)):
        with pytest.raises(ValueError, match="window must be a multiple of 4"):
            render("muca/update.cl", pocl, **base, **bad)
    assert "win_l" in render("muca/update.cl", pocl, **base, window=8, window_flush=247)


def test_default_walkers_per_device_and_size():
    # GPUs: 512 per compute unit (132 SMs of an H100/H200: 67584), the fastest measured
    # at 2D L = 32 and in 3D; for the whole range of 2D on one rank 768 from L = 64 (every
    # seed converged in about the same time, where 512 left two of eight ~1.7x slower)
    # and 1024 from L = 128 (512 left two seeds of three oscillating), but 512 per SM on
    # each of several ranks (two H200s then hold one H200's count and converged faster)
    # and for E <= 0; CPUs 64 at every size
    gpu, cpu = fake_facts("nvidia"), fake_facts("pocl")
    assert default_walkers(gpu) == default_walkers(gpu, Geometry(2, 62)) == 132 * 512 == 67584
    assert default_walkers(gpu, Geometry(2, 64)) == default_walkers(gpu, Geometry(2, 126)) == 132 * 768 == 101376
    assert default_walkers(gpu, Geometry(2, 128)) == default_walkers(gpu, Geometry(2, 256)) == 135168
    assert default_walkers(gpu, Geometry(2, 64), symmetric=True) == default_walkers(gpu, Geometry(3, 64)) == 67584
    assert default_walkers(gpu, Geometry(3, 32)) == 67584
    assert default_walkers(cpu) == default_walkers(cpu, Geometry(2, 128)) == 2 * 64
    assert default_walkers(gpu, Geometry(2, 128), ranks=2) == default_walkers(gpu, Geometry(2, 64), ranks=2) == 135168
    assert default_walkers(gpu, Geometry(3, 16), ranks=4) == 4 * 67584
    assert default_walkers(cpu, Geometry(2, 128), ranks=3) == 3 * 2 * 64
    assert default_walkers(gpu, Geometry(2, 128), symmetric=True) == 67584    # half the bins
    with pytest.raises(ValueError, match="ranks must be >= 1"):
        default_walkers(gpu, ranks=0)


@pytest.mark.parametrize("every", [1, 4])
@pytest.mark.parametrize("slots,walkers,wg", [(1, 256, 8), (3, 200, 2)], ids=["one-row", "two-rows"])
def test_16_bit_local_counts_flush_before_they_wrap(device, slots, walkers, wg, every):
    """16-bit local counts (the plan's histogram where 32-bit counts do not fit)
    over more than 65535 counts per bin in one launch: flushed inside the launch
    at the interval the plan derives from the work group's walkers (`every`
    times longer when 1 step in `every` is counted), they give the twin's
    counts; one work group per slot row, or straddling two rows."""
    geom, seed, n = Geometry(2, 4), 6, 1300 * every
    eng = _engine(device, geom, walkers, seed, per_item=32, wg=wg, lattice="global", table="local",
                  hist="local", hist_bits=16)
    bins, mags = eng.randomize()
    thr = protocol.thresholds(np.zeros(geom.nbins), geom.dim)     # canonical at T = infinity
    eng.set_thresholds(thr)
    eng.configure(slots, False, every=every)
    assert eng.hist_mode == "local16"
    eng.advance(n, 0)                        # one launch
    eng.flush()
    lat0 = ref.initial_lattice(geom, walkers, seed)
    _, b, _, hist, _ = ref.update(geom, lat0, bins, mags, thr, 0, n, 0, seed, slots=slots, every=every)
    assert hist.max() > 0xFFFF or slots > 1              # the counts of one launch pass 16 bits
    np.testing.assert_array_equal(eng.hist, hist)
    np.testing.assert_array_equal(eng.read_bins()[0], b)


@pytest.mark.parametrize("dim, L", [(2, 8), (3, 4)])
def test_bench_spread_start_covers_the_range(device, dim, L):
    """bench_muca's "spread" kernel rates start the walkers over the whole energy
    range: the device measures the energies the host meant (the walker-sliced
    layout), roughly evenly over [-dim N, dim N], lanes past W stay empty."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_muca import spread_lattice
    geom, walkers = Geometry(dim, L), 2048 + 5
    lattice = spread_lattice(geom, walkers)
    assert lattice.shape == (geom.N, 65) and not np.any(lattice[:, -1] >> 5)
    want, _ = ref.measure(geom, lattice, walkers)
    eng = Engine(device, geom, walkers, 1, options=choose_options(device.facts, geom, walkers=walkers))
    eng.write_lattice(lattice)
    bins, _ = eng.measure()
    np.testing.assert_array_equal(bins, want)
    x = geom.energies(want) / (dim * geom.N)          # in [-1, 1]
    assert x.min() < -0.85 and x.max() > 0.85
    # expected a quarter of the walkers per quarter of the range; 8 sigma of 2048 draws is 0.08
    quarters = np.histogram(x, bins=[-1, -0.5, 0, 0.5, 1])[0] / walkers
    assert np.all(np.abs(quarters - 0.25) < 0.08), quarters
