"""Small runs of every public entry point, for the portability tests.

Each case runs one public function (or class) at a size two CPU cores do in
about a second and returns its results as named NumPy arrays:

* ``BITS`` cases are the integer Monte Carlo codes and the random numbers:
  their results are a pure function of the seed, so every OpenCL
  implementation must give the same bits. Their hashes are checked in
  (``portability_hashes.json``); ``record_portability_hashes.py`` prints them.
* ``CLOSE`` cases are floating-point codes: a device's results must agree
  with those of an fp64 device (PoCL) within the case's stated tolerance.

``ENTRY_POINTS`` maps every public callable that takes ``device=`` to the
cases that run it (a test checks that the map is complete).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

import clphys
from clphys import ising, muca, rng, sde
from clphys import timeseries as ts
from clphys.ising.multispin_plan import tuned

HASH_FILE = Path(__file__).with_name("portability_hashes.json")


def digest(arrays: dict) -> str:
    """A hash of named arrays: names, dtypes, shapes and bytes."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def load_hashes() -> dict:
    return json.loads(HASH_FILE.read_text())


# ---------------------------------------------------------------- integer codes

def _words(dev):
    return {g: rng.words(4096, seed=7, generator=g, device=dev)
            for g in ("philox", "lcg", "halfbit-lcg", "xorshift32")}


def _philox(dev):
    counters = np.arange(64 * 4, dtype=np.uint32).reshape(64, 4) * np.uint32(2654435761)
    return {"words": rng.philox(counters, np.array([0xDEADBEEF, 12345], np.uint32), device=dev)}


def _checksum(dev):
    return {g: rng.checksum(64, 100, seed=3, generator=g, device=dev) for g in ("philox", "lcg")}


def _uniform(dev):
    return {"u": rng.uniform(4096, seed=9, device=dev)}


def _lattice(lat, sweeps=10, measure=20):
    s = lat.sample(measure, n_therm=sweeps)
    return {"spins": lat.spins(), "energy": s.energy, "magnetization": s.magnetization}


def _ising(algorithm, rng_name, **options):
    def run(dev):
        return _lattice(tuned(ising.Ising2D, 64, 2.3, algorithm=algorithm, rng=rng_name, seed=11,
                              device=dev, **options))
    return run


def _ising_3d(algorithm):
    def run(dev):
        return _lattice(ising.Ising3D(16, 4.5, algorithm=algorithm, seed=12, device=dev), 4, 8)
    return run


def _ensemble(dev):
    ens = ising.Ensemble2D((64, 32), [2.0, 2.4, 3.0], J=-1.0, h=0.1, algorithm="multispin",
                           seed=13, start="up", device=dev)
    return _lattice(ens)


def _decision_counts(dev):
    from clphys.ising.multispin import decision_counts
    thr = ising.metropolis_thresholds(2, 2.3)[None]
    out = decision_counts(thr, 1 << 12, spins_per_word=4, seed=15, device=dev)
    return {"class": out["class"], "level": out["level"]}


def _reduce_ints(dev):
    from clphys.runtime import reduce_sum
    x = np.random.default_rng(3).integers(-2**31, 2**31, 100_003).astype(np.int32)
    return {"int": np.int64(reduce_sum(x, device=dev)), "uint": np.uint64(reduce_sum(x.view(np.uint32), device=dev))}


def _reduce_floats(dev):
    from clphys.runtime import reduce_sum
    x = np.random.default_rng(4).standard_normal(100_003).astype(np.float32)
    return {"float": np.float64(reduce_sum(x, device=dev))}


def _muca(**options):
    def run(dev):
        sim = muca.Multicanonical(4, walkers=128, seed=3, device=dev, **options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)     # short on purpose
            sim.iterate(max_iterations=3)
            res = sim.produce(blocks=4, updates=4096, therm=512, magnetization=True)
        return {"histogram": res.histogram, "blocks": res.block_histograms,
                "moments": res.moments, "log_weights": res.log_weights}
    return run


def _muca_run(dev):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = muca.run(4, walkers=64, seed=4, device=dev, max_iterations=2, blocks=2, updates=1024)
    return {"histogram": res.histogram, "blocks": res.block_histograms}


def _acrw(dev):
    return {"p": ts.acrw(8192, phi=0.044, seed=1, device=dev)}


def _pattern_ticks(dev):
    return ts.pattern_conformity(ts.acrw(3000, phi=0.044, seed=2), max_past=6, max_future=6,
                                 max_history=64, device=dev)


def _pattern_counts(dev):
    pc = _pattern_ticks(dev)
    return {"skipped_current": pc.skipped_current, "skipped_history": pc.skipped_history,
            "pairs": pc.pairs}


def _pattern_sums(dev):
    pc = _pattern_ticks(dev)                # xi and norm: sums of float weights
    return {"xi": pc.xi, "norm": pc.norm, "Xi": pc.Xi}


# ---------------------------------------------------------------- floating point

_PRICES = np.cumsum(np.random.default_rng(5).standard_normal(20_000)) + 0.01 * np.arange(20_000)


def _normal(dev):
    return {"z": rng.normal(4096, seed=9, device=dev)}


def _hurst(dev):
    h = ts.hurst(_PRICES, max_lag=64, q=[1, 2], device=dev)
    return {"S": h.S, "S_err": h.S_err, "H": h.H}


def _dfa(dev):
    # (scales above 256 take the kernels for long segments)
    r = ts.dfa(np.diff(_PRICES), scales=[10, 40, 160, 640], device=dev)
    return {"F": r.F, "H": np.float64(r.H)}


def _mfdfa(dev):
    m = ts.mfdfa(np.diff(_PRICES), q=[-2.0, 0.0, 2.0], scales=[16, 64, 320], order=2,
                 overlap=True, device=dev)
    return {"Fq": m.Fq, "h": m.h}


def _hurst_batch(dev):
    h = ts.hurst(_PRICES.reshape(4, -1).astype(np.float32), max_lag=32, device=dev)
    return {"S": h.S, "H": h.H}


def _hurst_fft(dev):
    h = ts.hurst(_PRICES, max_lag=64, q=2, method="fft", device=dev)
    return {"S": h.S}


def _acf(dev):
    x = np.diff(_PRICES)
    r = ts.autocorrelation(x, max_lag=20, device=dev)
    s = ts.autocorrelation(x, max_lag=20, stationary=True, device=dev)
    return {"rho": r.rho, "rho_err": r.rho_err, "rho_stationary": s.rho}


def _acf_batch(dev):
    r = ts.autocorrelation(np.diff(_PRICES)[:19996].reshape(4, -1), max_lag=16, device=dev)
    return {"rho": r.rho, "rho_err": r.rho_err}


def _acf_fft(dev):
    r = ts.autocorrelation(np.diff(_PRICES), max_lag=len(_PRICES) - 2, method="fft", device=dev)
    return {"rho": r.rho[:200]}


def _pattern_real(dev):
    pc = ts.pattern_conformity(_PRICES[:2000], max_past=6, max_future=6, max_history=64,
                               tick=None, device=dev)
    return {"Xi": pc.Xi}


def _free_particle(dev):
    ens = sde.Ensemble(sde.models.FREE_PARTICLE, 256, {"gamma": [0.5, 2.0], "kT": 1.0}, dt=0.01,
                       seed=3, device=dev, initial={"x": 0.0, "v": ("uniform", -1, 1)})
    res = ens.run(steps=200, sample_every=50, observables=["x", "v", "v*v"],
                  histograms={"v": (16, -4.0, 4.0)})
    return {"mean_x": res.mean["x"], "mean_v": res.mean["v"], "var_v": res.var["v"],
            "mean_vv": res.mean["v*v"], "hist_v": res.hist["v"]}


def _josephson(dev):
    res = sde.josephson(a=[4.0, 4.4], n_paths=256, periods=40, transient=10, device=dev)
    return {"v": res.v, "v_err": res.v_err}


def _kuramoto(kernel, scheme="srk2"):
    def run(dev):
        k = sde.kuramoto(256, 4.0, kT=1.0, t_end=0.5, kernel=kernel, scheme=scheme, seed=2, device=dev)
        return {"r": k.r, "psi": k.psi}
    return run


def _kuramoto_class(dev):
    k = sde.Kuramoto(256, 2.0, kT=0.5, omega=np.linspace(-1, 1, 256), seed=4, device=dev)
    res = k.run(0.3, sample_every=10)
    return {"r": res.r}


def _kuramoto_sweep(dev):
    s = sde.kuramoto_sweep(128, [1.0, 4.0], kT=1.0, t_end=0.3, seed=5, device=dev)
    return {"r": s.r}


def _binder(dev):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                    # too short to trust, on purpose
        b = ising.binder_scan([8, 16], [2.2, 2.4], n_therm=20, n_measure=64, replicas=2, seed=6,
                              device=dev)
    return {"binder": b.binder, "energy": b.energy, "chi": b.susceptibility}


@dataclass(frozen=True)
class Case:
    run: Callable
    same_as: str = ""          # BITS: must give the bits of that case (its hash is the one checked in)
    rtol: float = 0.0          # CLOSE: |a - b| <= atol + rtol |b| against the fp64 device
    atol: float = 0.0
    sigmas: float = 0.0        # CLOSE: or |a - b| <= sigmas * sqrt(err_a^2 + err_b^2) ("<name>_err")
    fp64: bool = False         # needs fp64: elsewhere a ValueError naming fp64


BITS = {
    "rng.words": Case(_words),
    "rng.philox": Case(_philox),
    "rng.checksum": Case(_checksum),
    "rng.uniform": Case(_uniform),
    "ising.checkerboard.philox": Case(_ising("checkerboard", "philox")),
    # one Philox word per spin: the spins of the checkerboard algorithm
    "ising.multispin.one-word-per-spin": Case(_ising("multispin", "philox", spins_per_word=1),
                                              same_as="ising.checkerboard.philox"),
    "ising.checkerboard.lcg": Case(_ising("checkerboard", "lcg")),
    "ising.checkerboard.xorshift32": Case(_ising("checkerboard", "xorshift32")),
    "ising.blocks.philox": Case(_ising("blocks", "philox")),
    "ising.blocks.halfbit-lcg": Case(_ising("blocks", "halfbit-lcg")),
    "ising.multispin.philox": Case(_ising("multispin", "philox")),
    # one launch per half-sweep, or several sweeps per launch: the same spins
    "ising.multispin.single-sweeps": Case(_ising("multispin", "philox", sweeps_per_launch=1),
                                          same_as="ising.multispin.philox"),
    "ising.multispin.multisweep": Case(_ising("multispin", "philox", sweeps_per_launch=4),
                                       same_as="ising.multispin.philox"),
    "ising.multispin.decisions": Case(_decision_counts),
    "ising.3d.checkerboard": Case(_ising_3d("checkerboard")),
    "ising.3d.multispin": Case(_ising_3d("multispin")),
    "ising.ensemble": Case(_ensemble),
    # one work item per lattice word: PoCL takes minutes to compile the shared-word variants
    "muca.global": Case(_muca(per_item=32, wg=8, lattice="global", table="global", hist="global")),
    "muca.local": Case(_muca(per_item=32, wg=4, lattice="local", table="local", hist="local"),
                       same_as="muca.global"),
    "muca.run": Case(_muca_run),
    "timeseries.acrw": Case(_acrw),
    "timeseries.pattern_conformity.counts": Case(_pattern_counts),
    "runtime.reduce_sum.integers": Case(_reduce_ints),
}

CLOSE = {
    "rng.normal": Case(_normal, atol=2e-6),
    "timeseries.hurst": Case(_hurst, rtol=2e-6, atol=1e-9),
    "timeseries.dfa": Case(_dfa, rtol=1e-5, atol=1e-9),
    "timeseries.mfdfa": Case(_mfdfa, rtol=1e-5, atol=1e-9),
    "timeseries.hurst.batch": Case(_hurst_batch, rtol=2e-6, atol=1e-9),
    "timeseries.hurst.fft": Case(_hurst_fft, rtol=2e-6, fp64=True),
    "timeseries.autocorrelation": Case(_acf, rtol=2e-5, atol=2e-6),
    "timeseries.autocorrelation.batch": Case(_acf_batch, rtol=2e-5, atol=2e-6),
    "timeseries.autocorrelation.fft": Case(_acf_fft, rtol=1e-4, atol=2e-5),
    "timeseries.pattern_conformity": Case(_pattern_real, rtol=1e-6, atol=1e-6),
    "timeseries.pattern_conformity.ticks.sums": Case(_pattern_sums, rtol=1e-6, atol=1e-6),
    "sde.ensemble": Case(_free_particle, rtol=1e-4, atol=1e-4),
    "sde.josephson": Case(_josephson, sigmas=5.0),
    "sde.kuramoto.mean-field": Case(_kuramoto("mean-field"), rtol=1e-4, atol=1e-4),
    "sde.kuramoto.all-pairs": Case(_kuramoto("all-pairs"), rtol=1e-4, atol=1e-4),
    "sde.kuramoto.euler": Case(_kuramoto("mean-field", "euler"), rtol=1e-4, atol=1e-4),
    "sde.Kuramoto": Case(_kuramoto_class, rtol=1e-4, atol=1e-4),
    "sde.kuramoto_sweep": Case(_kuramoto_sweep, rtol=1e-4, atol=1e-4),
    "ising.binder_scan": Case(_binder, rtol=1e-12),
    "runtime.reduce_sum.floats": Case(_reduce_floats, rtol=1e-6),
}

CASES = {**BITS, **CLOSE}

# public callables that take device= -> the cases that run them
ENTRY_POINTS = {
    "clphys.rng.words": ["rng.words"], "clphys.rng.philox": ["rng.philox"],
    "clphys.rng.checksum": ["rng.checksum"], "clphys.rng.uniform": ["rng.uniform"],
    "clphys.rng.normal": ["rng.normal"],
    "clphys.ising.Ising2D": ["ising.checkerboard.philox", "ising.blocks.philox", "ising.multispin.philox"],
    "clphys.ising.Ising3D": ["ising.3d.checkerboard", "ising.3d.multispin"],
    "clphys.ising.Ensemble": ["ising.ensemble"], "clphys.ising.Ensemble2D": ["ising.ensemble"],
    "clphys.ising.Ensemble3D": ["ising.3d.multispin"],
    "clphys.ising.binder_scan": ["ising.binder_scan"],
    "clphys.timeseries.hurst": ["timeseries.hurst", "timeseries.hurst.fft"],
    "clphys.timeseries.dfa": ["timeseries.dfa"], "clphys.timeseries.mfdfa": ["timeseries.mfdfa"],
    "clphys.timeseries.autocorrelation": ["timeseries.autocorrelation", "timeseries.autocorrelation.fft"],
    "clphys.timeseries.pattern_conformity": ["timeseries.pattern_conformity",
                                            "timeseries.pattern_conformity.counts",
                                            "timeseries.pattern_conformity.ticks.sums"],
    "clphys.timeseries.acrw": ["timeseries.acrw"],
    "clphys.sde.Ensemble": ["sde.ensemble"], "clphys.sde.josephson": ["sde.josephson"],
    "clphys.sde.kuramoto": ["sde.kuramoto.mean-field", "sde.kuramoto.all-pairs"],
    "clphys.sde.Kuramoto": ["sde.Kuramoto"], "clphys.sde.kuramoto_sweep": ["sde.kuramoto_sweep"],
    "clphys.muca.Multicanonical": ["muca.global", "muca.local"], "clphys.muca.run": ["muca.run"],
    "clphys.runtime.reduce_sum": ["runtime.reduce_sum.integers", "runtime.reduce_sum.floats"],
    # what every case goes through; what an option that needs fp64 raises without it
    "clphys.runtime.build": list(BITS), "clphys.runtime.zeros": list(BITS),
    "clphys.runtime.fp64_missing": ["timeseries.hurst.fft"],
}


def results(name: str, dev) -> dict:
    """The case's results on `dev` as float64/integer NumPy arrays."""
    out = CASES[name].run(dev)
    return {k: np.asarray(v) for k, v in out.items()}


def hashes(dev, names=None) -> dict:
    """{case: hash} of the BITS cases on `dev`."""
    return {n: digest(results(n, dev)) for n in (names or BITS)}


def expected_hash(name: str, table: dict) -> str:
    """The checked-in hash that case `name` must give."""
    return table[BITS[name].same_as or name]


__all__ = ["BITS", "CLOSE", "CASES", "ENTRY_POINTS", "HASH_FILE", "Case", "digest", "hashes",
           "load_hashes", "results", "clphys"]
