"""Binder-cumulant scans: U4, susceptibility and specific heat over sizes and
temperatures, and the crossing temperatures of the U4 curves.

    scan = binder_scan([16, 32, 64], np.linspace(2.2, 2.34, 15), dim=2, seed=1)
    print(scan)                       # table, crossings, warnings
    scan.crossing                     # Estimate of Tc from the largest pair

Every size runs as one ensemble of len(temperatures) * replicas lattices
(in pieces when that does not fit the device or DEFAULT_HOST_BYTES of host
memory), from an ordered start. Errors: a jackknife over blocks that are
independent replicas, each cut into as many time blocks as are at least
BLOCK_TAUS integrated autocorrelation times long (1 when the series is
shorter); the crossing error deletes block i of every series at once (the
series are independent, so this is the usual jackknife over the joint data).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .. import _validate
from ..exact import TC_2D, TC_3D
from ..progress import Progress, check_progress
from ..runtime import Interrupted, mpi, resolve_device
from ..runtime.memory import items_that_fit
from ..stats import MIN_TAUS, Estimate, TooShortWarning, mean_estimates
from . import backends
from .lattice import Ensemble2D, Ensemble3D
from .plan import MEASURE_BYTES, check_temperatures, device_need
from .samples import NotEquilibratedWarning

# The defaults of binder_scan and of `clphys binder` (one set, used by both).
# Sized so that the scan of docs/ising.md, sizes 16/32/64 at 15 temperatures in
# [2.2, 2.34], measures >= 50 tau_int at L = 64 near Tc (tau_int(|m|) up to
# ~220 sweeps there) and runs in under two minutes on two CPU cores
# (docs/ising.md). n_therm None: as many sweeps as are measured (THERM_MEASURED).
DEFAULTS: dict[str, Any] = {"n_measure": 6000, "every": 2, "replicas": 16, "n_therm": None}
# The ordered start must relax at every temperature of the scan, near Tc the
# slowest: with a quarter of the measured sweeps (sample()'s rule) L = 64 at
# T = 2.34 was still relaxing (every replica drifting one way) in 1 of 6
# default scans.
THERM_MEASURED = 1.0
BLOCK_TAUS = 10          # time blocks at least this many tau_int long
FINE_BLOCKS = 32         # per-series block means kept (the time blocks merge these)
# drift between the series halves called non-equilibrium: Bonferroni over the
# scan's 2 x sizes x temperatures tests (3.9 sigma for 90 tests at 1 %), with
# room for the uncertainty of the errors themselves (~20 %, and 10-30 % low at
# L = 64 near Tc)
DRIFT_SIGMAS = 5.0
CROSS_SIGMAS = 3.0       # a U4 difference this many errors from 0 has a certain sign
DEFAULT_HOST_BYTES = 1 << 30    # host memory for the series of one piece
_HOST_BYTES_PER_MEASUREMENT = 100
_GOLDEN = 0x9E3779B97F4A7C15
_PIECE = 0xD1B54A32D192ED03


@dataclass(frozen=True)
class Crossing:
    """Crossing of the U4 curves of sizes (L1, L2).

    status: "ok" (temperature holds the estimate and its jackknife error),
    "none" (the difference has one sign, beyond its errors, over the whole
    range), "several" (it changes sign significantly more than once),
    "noisy" (it changes sign only within its errors, or the estimate is
    unstable under the jackknife); temperature is NaN unless "ok". note says
    why in words."""
    sizes: tuple
    temperature: Estimate
    status: str = "ok"
    note: str = ""

    def describe(self) -> str:
        """One line: the crossing temperature with its error, or why there is none."""
        if self.status == "ok":
            return f"T = {self.temperature}" + (f" ({self.note})" if self.note else "")
        return self.note


@dataclass(frozen=True, eq=False)
class BinderScan:
    """Result of :func:`binder_scan`. Arrays are (len(sizes), len(temperatures));
    each quantity has a matching ``*_err`` array (one sigma, jackknife).

    binder: U4 = 1 - <m^4>/(3 <m^2>^2); susceptibility: N (<m^2> - <|m|>^2)/T;
    specific_heat: N (<e^2> - <e>^2)/T^2; energy: <e>; abs_magnetization: <|m|>
    (e = E/N, m = M/N). tau_int: integrated autocorrelation time of |m| or e,
    whichever is longer, in sweeps (mean over replicas); n_blocks: jackknife
    blocks (replicas x time blocks); pieces: ensembles run per size;
    warnings: why some numbers should not be trusted (also issued as Python
    warnings).
    """
    dim: int
    sizes: tuple
    temperatures: np.ndarray
    n_therm: int
    n_measure: int
    every: int
    replicas: int
    binder: np.ndarray
    binder_err: np.ndarray
    susceptibility: np.ndarray
    susceptibility_err: np.ndarray
    specific_heat: np.ndarray
    specific_heat_err: np.ndarray
    energy: np.ndarray
    energy_err: np.ndarray
    abs_magnetization: np.ndarray
    abs_magnetization_err: np.ndarray
    tau_int: np.ndarray
    n_blocks: int
    pieces: tuple
    crossings: tuple
    crossing: Estimate
    warnings: tuple = ()

    def table(self) -> str:
        """The scan as a text table: U4 per size and temperature, then the crossings."""
        head = (f"Binder scan, {self.dim}D, sizes {', '.join(map(str, self.sizes))}: "
                f"{self.replicas} replicas x {self.n_measure} measurements every {self.every} sweeps, "
                f"after {self.n_therm} thermalisation sweeps from an ordered start; errors: jackknife "
                f"over {self.n_blocks} blocks")
        if max(self.pieces) > 1:
            head += (f"; run in {'/'.join(map(str, self.pieces))} ensembles per size (what fits the "
                     f"device and host memory at once)")
        lines = [head, f"{'L':>5} {'T':>9} {'U4':>14} {'chi':>16} {'C':>14} {'|m|':>14} {'tau':>7}"]
        for i, L in enumerate(self.sizes):
            for j, T in enumerate(self.temperatures):
                cells = [str(Estimate(v[i, j], e[i, j])) for v, e in (
                    (self.binder, self.binder_err), (self.susceptibility, self.susceptibility_err),
                    (self.specific_heat, self.specific_heat_err),
                    (self.abs_magnetization, self.abs_magnetization_err))]
                lines.append(f"{L:>5} {T:>9.5f} {cells[0]:>14} {cells[1]:>16} {cells[2]:>14} "
                             f"{cells[3]:>14} {self.tau_int[i, j]:>7.3g}")
        for c in self.crossings:
            lines.append(f"U4 crossing L={c.sizes[0]}/{c.sizes[1]}: {c.describe()}")
        exact = TC_2D if self.dim == 2 else TC_3D
        best = (f"T = {self.crossing}" if self.crossings[-1].status == "ok"
                else "none (see the largest pair above)")
        lines.append(f"estimate (largest pair): {best}   (Tc = {exact:.6f} for the infinite "
                     f"{self.dim}D lattice)")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    __str__ = table


def _jackknife_err(deleted):
    """Jackknife error from the n block-deleted values along the last axis."""
    n = deleted.shape[-1]
    if n < 2:
        return np.full(deleted.shape[:-1], np.nan)
    return np.sqrt((n - 1) / n * ((deleted - deleted.mean(axis=-1, keepdims=True)) ** 2).sum(axis=-1))


def _fit_root(T, du, w, deg, lo, hi):
    """Root in [lo, hi] of the weighted polynomial fit of degree deg (the one
    nearest to the middle), or NaN."""
    coef = np.polyfit(T, du, deg, w=w)
    roots = np.roots(coef)
    roots = roots[np.isreal(roots)].real
    roots = roots[(roots >= lo) & (roots <= hi)]
    if roots.size == 0:
        return math.nan
    return float(roots[np.argmin(np.abs(roots - 0.5 * (lo + hi)))])


def crossing_of(T: np.ndarray, du: np.ndarray, du_deleted: np.ndarray, sizes: tuple = (0, 0)) -> Crossing:
    """The crossing of two U4 curves from their difference du (along the
    temperatures T) and its block-deleted jackknife values du_deleted
    (len(T), n_blocks).

    Each point's sign is certain when |du| > CROSS_SIGMAS errors. One change
    between certain signs brackets the crossing: du is fitted (weighted by
    1/err^2; a line, a quadratic over 6 or more points) over the bracket,
    widened to at least 4 points, and the root's error is the jackknife of
    the same fit. Certain signs that change more than once: "several"; no
    certain change: "none" if every point is certain, else "noisy".
    """
    T = _validate.finite_array("T", T, ndim=1, dtype=float)
    du = _validate.finite_array("du", du, ndim=1, dtype=float)
    du_deleted = _validate.finite_array("du_deleted", du_deleted, ndim=2, dtype=float)
    if T.size < 2 or du.shape != T.shape or du_deleted.shape[0] != T.size or du_deleted.shape[1] < 1:
        raise ValueError(f"crossing_of needs >= 2 temperatures T, du of the same length and du_deleted "
                         f"(len(T), n_blocks); got shapes {T.shape}, {du.shape}, {du_deleted.shape}")
    if np.any(np.diff(T) <= 0):
        raise ValueError("T must be increasing")
    err = _jackknife_err(du_deleted)
    pair = f"U4({sizes[1]}) - U4({sizes[0]})"
    if not np.all(np.isfinite(err)) or np.any(err <= 0):
        return Crossing(sizes, Estimate(math.nan, math.nan), "noisy",
                        f"no crossing estimate: {pair} has no error estimate (too few blocks)")
    z = du / err
    certain = np.nonzero(np.abs(z) > CROSS_SIGMAS)[0]
    signs = np.sign(z[certain])
    changes = np.nonzero(signs[1:] != signs[:-1])[0]
    raw_changes = int(np.count_nonzero(np.sign(du[1:]) != np.sign(du[:-1])))
    if changes.size > 1:
        where = ", ".join(f"{0.5 * (T[certain[c]] + T[certain[c + 1]]):.4g}" for c in changes)
        return Crossing(sizes, Estimate(math.nan, math.nan), "several",
                        f"several crossings: {pair} changes sign beyond {CROSS_SIGMAS:g} errors "
                        f"{changes.size} times (near T = {where}); too noisy or not monotonic: "
                        f"measure longer or narrow the range")
    if changes.size == 0:
        if certain.size == T.size:
            side = "above" if signs[0] > 0 else "below"
            return Crossing(sizes, Estimate(math.nan, math.nan), "none",
                            f"no crossing in the scanned range: {pair} is {side} 0 by more than "
                            f"{CROSS_SIGMAS:g} errors at every temperature")
        if raw_changes:
            txt = (f"too noisy: {pair} changes sign {raw_changes} times, but only within "
                   f"{CROSS_SIGMAS:g} errors; measure longer")
        else:
            txt = (f"no crossing found: {pair} keeps one sign but is within {CROSS_SIGMAS:g} errors "
                   f"of 0 at {T.size - certain.size} temperatures; measure longer or widen the range")
        return Crossing(sizes, Estimate(math.nan, math.nan), "noisy", txt)
    a, b = int(certain[changes[0]]), int(certain[changes[0] + 1])
    while b - a + 1 < 4 and (a > 0 or b < T.size - 1):       # at least 4 points
        if a > 0 and (b == T.size - 1 or (b - a) % 2 == 0):
            a -= 1
        else:
            b += 1
    sl = slice(a, b + 1)
    deg = 2 if b - a + 1 >= 4 else 1
    h = 0.5 * (T[1] - T[0]) if T.size > 1 else 0.0
    lo, hi = T[a] - h, T[b] + h
    root = _fit_root(T[sl], du[sl], 1.0 / err[sl], deg, lo, hi)
    roots = np.array([_fit_root(T[sl], du_deleted[sl, k], 1.0 / err[sl], deg, lo, hi)
                      for k in range(du_deleted.shape[1])])
    if not math.isfinite(root) or not np.all(np.isfinite(roots)):
        return Crossing(sizes, Estimate(math.nan, math.nan), "noisy",
                        f"too noisy: the fit of {pair} over T = {T[a]:.4g}..{T[b]:.4g} has no stable root; "
                        f"measure longer")
    n = roots.size
    error = math.sqrt((n - 1) / n * float(np.sum((roots - roots.mean()) ** 2)))
    inside = int(np.count_nonzero(np.sign(du[sl][1:]) != np.sign(du[sl][:-1])))
    note = (f"{pair} changes sign {inside} times within its errors in T = {T[a]:.4g}..{T[b]:.4g}; "
            f"one crossing fitted" if inside > 1 else "")
    return Crossing(sizes, Estimate(root, error), "ok", note)


def _sizes(sizes):
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__len__"):
        raise TypeError(f"sizes must be a sequence of lattice sizes, got {sizes!r}")
    if len(sizes) < 2:
        raise ValueError(f"sizes must be a sequence of at least 2 lattice sizes, got {sizes!r}")
    out = sorted({_validate.integer("sizes[i]", L, 2) for L in sizes})
    if len(out) < 2:
        raise ValueError(f"sizes must hold at least 2 different sizes, got {sizes!r}")
    return tuple(out)


def _pieces(backend, facts, shape, total, rng, options, n_measure, host_bytes):
    """Replicas per ensemble: all, or as many as fit the device and host memory."""
    one, two = (device_need(backend, facts, shape, r, rng, options) for r in (1, 2))
    meas = MEASURE_BYTES * (n_measure + 1)        # the measurement buffer, per replica (at most)
    per = sum(two.values()) - sum(one.values()) + meas
    largest = max(max(two[k] - one[k] for k in one), meas)
    fixed = sum(one.values()) - per + meas
    dev_fit = items_that_fit(facts, max(1, per), max(0, fixed), largest_per_item=max(1, largest))
    host_fit = max(1, host_bytes // (_HOST_BYTES_PER_MEASUREMENT * n_measure))
    return max(1, min(total, dev_fit, host_fit))


def binder_scan(sizes: Sequence[int], temperatures: ArrayLike, dim: int = 2, *,
                n_therm: int | None = DEFAULTS["n_therm"], n_measure: int = DEFAULTS["n_measure"],
                every: int = DEFAULTS["every"], replicas: int = DEFAULTS["replicas"], algorithm: str | None = None,
                rng: str | None = None, seed: int = 0, device: Any = None, progress: bool | Callable | None = None,
                comm: Any = None, gather: str = "root", **options: Any) -> BinderScan | None:
    """U4, susceptibility and specific heat for each size and temperature, with
    jackknife errors, and the crossing temperatures of consecutive sizes' U4.

    Each size runs `replicas` independent lattices per temperature, from an
    ordered start, n_therm sweeps discarded (default: as many as are
    measured, n_measure * every), then n_measure measurements
    `every` sweeps apart. Errors come from the jackknife over blocks: each
    replica's series cut into as many blocks as are >= BLOCK_TAUS tau_int
    long (see the module doc). Warns (and lists in ``.warnings``) where the
    series are shorter than 50 tau_int, drift between their halves (not in
    equilibrium), or give fewer than 16 blocks. The defaults are DEFAULTS
    (shared with `clphys binder`).

    Size i runs with seed (seed + (i + 1) * 0x9E3779B97F4A7C15) mod 2^64.
    When the replicas of a size do not fit the device (or DEFAULT_HOST_BYTES
    of host memory for the series) at once, they run as several ensembles,
    piece p > 0 with seed + p * 0xD1B54A32D192ED03 added: the numbers then
    differ from a one-piece run (statistically equivalent). Ctrl-C raises
    :class:`clphys.runtime.Interrupted` (within about a second).

    comm (an mpi4py communicator): a collective call; the replicas of every
    size (temperatures x replicas) are split over the ranks, each keeping
    its piece's seed and Philox replica index, so the scan is bit for bit
    that of one device of the same kind. The BinderScan is returned on rank
    0 (every rank with ``gather="all"``), None elsewhere; rank 0 shows the
    progress of its share. Needs multispin or checkerboard with Philox.
    """
    if comm is None:
        return _scan(sizes, temperatures, dim, n_therm, n_measure, every, replicas, algorithm, rng, seed,
                     device, progress, None, options)
    size, rank = mpi.comm_size_rank(comm)
    mpi.all_ok(comm, _validate.choice, "gather", gather, ("root", "all"))
    mpi.agree(comm, "binder_scan arguments", sizes=repr(sizes), temperatures=repr(np.asarray(temperatures).tolist()),
              dim=repr(dim), n_therm=repr(n_therm), n_measure=repr(n_measure), every=repr(every),
              replicas=repr(replicas), algorithm=repr(algorithm), rng=repr(rng), seed=repr(seed),
              options=repr(sorted(options.items())))
    parts = _scan(sizes, temperatures, dim, n_therm, n_measure, every, replicas, algorithm, rng, seed,
                  device, progress if rank == 0 else False, comm, options)
    got = comm.gather(parts, root=0)
    scan = None
    if got is not None:
        args, arrays = got[0]
        for _args, (fine, tau, drift, drift_var, mine) in got[1:]:
            for a, b in zip(arrays[:4], (fine, tau, drift, drift_var)):
                a[mine] = b[mine]
        scan = _analyse(*args[:8], *arrays[:4], *args[8:])     # args[8:]: (pieces,)
    return comm.bcast(scan, root=0) if gather == "all" else scan


def _scan(sizes, temperatures, dim, n_therm, n_measure, every, replicas, algorithm, rng, seed, device,
          progress, comm, options):
    """binder_scan's work: on one device the BinderScan; with comm this rank's
    share, ((analysis arguments), (fine, tau, drift, drift_var, mask of the
    replicas it ran))."""
    check = (lambda f, *a: f(*a)) if comm is None else (lambda f, *a: mpi.all_ok(comm, f, *a))
    checked = check(_checked_scan, sizes, temperatures, dim, n_therm, n_measure, every, replicas,
                    algorithm, rng, seed, device, progress, comm, options)
    if comm is not None:
        # one plan of pieces (seeds) everywhere, or the ranks' replicas would not be one device's
        mpi.agree(comm, "binder_scan pieces (devices of one kind?)", plan=checked[-1])
    return check(_run_scan, *checked)


def _checked_scan(sizes, temperatures, dim, n_therm, n_measure, every, replicas, algorithm, rng, seed,
                  device, progress, comm, options):
    """The checks of binder_scan and a plan of its pieces, then _run_scan."""
    dim = _validate.choice("dim", dim, (2, 3))
    sizes = _sizes(sizes)
    temps = np.sort(check_temperatures(temperatures))
    if temps.size < 2:
        raise ValueError("temperatures must hold at least 2 values")
    twice = temps[1:][temps[1:] == temps[:-1]]
    if twice.size:      # (the crossings are fitted along T: each temperature once)
        raise ValueError(f"temperatures must be distinct, got {twice[0]:g} more than once (for more "
                         f"statistics at a temperature raise replicas=)")
    replicas = _validate.integer("replicas", replicas, 1)
    n_measure = _validate.integer("n_measure", n_measure, FINE_BLOCKS)
    every = _validate.integer("every", every, 1)
    n_therm = (int(THERM_MEASURED * n_measure * every) if n_therm is None
               else _validate.integer("n_therm", n_therm, 0))
    seed = _validate.seed(seed)
    check_progress(progress)
    if algorithm is not None and not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a string, got {algorithm!r}")
    backend = backends.load(backends.DEFAULT_ALGORITHM if algorithm is None else algorithm)
    if dim not in backend.dims:
        raise ValueError(f"algorithm {backend.algorithm!r} supports dim {backend.dims}, not {dim}")
    rng_name = backends.check_rng(backend, rng)
    for L in sizes:
        backend.check_shape((L,) * dim)
    backend.check_options(options)
    if comm is not None and not (backend.takes_replica_offset and rng_name == "philox"):
        raise ValueError(f"binder_scan over MPI ranks needs an algorithm that numbers replicas globally "
                         f"(multispin or checkerboard) with rng='philox'; got {backend.algorithm!r}, "
                         f"{rng_name!r}")
    dev = resolve_device(device)
    plan = [_pieces(backend, dev.facts, (L,) * dim, temps.size * replicas, rng_name, options, n_measure,
                    DEFAULT_HOST_BYTES) for L in sizes]
    return dim, sizes, temps, n_therm, n_measure, every, replicas, algorithm, rng, seed, dev, \
        progress, comm, options, plan


def _run_scan(dim, sizes, temps, n_therm, n_measure, every, replicas, algorithm, rng, seed, dev,
              progress, comm, options, plan):
    Ensemble = Ensemble2D if dim == 2 else Ensemble3D

    nT, R, nq, M = temps.size, replicas, 5, FINE_BLOCKS
    fine = np.empty((len(sizes), nT * R, nq, M))     # per-replica block means: e, e^2, |m|, m^2, m^4
    tau = np.empty((len(sizes), nT * R, 2))          # tau_int of e and |m|, in measurements
    drift = np.empty((len(sizes), nT * R, 2))        # second half - first half of e, |m|
    drift_var = np.empty((len(sizes), nT * R, 2))
    N = np.array([L**dim for L in sizes], dtype=float)
    sweeps = n_therm + n_measure * every
    # this rank's replicas of every size (all of them on one device); a piece's
    # replicas keep their seed and Philox replica index wherever they run
    first, count = (0, nT * R) if comm is None else mpi.split(nT * R, *mpi.comm_size_rank(comm))
    mine = np.zeros((len(sizes), nT * R), dtype=bool)
    mine[:, first:first + count] = True
    total = int(sum(N[i] * count * sweeps for i in range(len(sizes))))
    rep_temps = np.repeat(temps, R)
    with Progress(total, progress, label="binder") as bar:
        for i, L in enumerate(sizes):
            K = plan[i]
            for p, start in enumerate(range(0, nT * R, K)):
                r0, r1 = max(start, first), min(nT * R, start + K, first + count)
                if r0 >= r1:
                    continue
                piece_seed = (seed + (i + 1) * _GOLDEN + p * _PIECE) % 2**64
                ens = Ensemble(L, rep_temps[r0:r1], algorithm=algorithm, rng=rng, start="up", device=dev,
                               seed=piece_seed, replica_offset=r0 - start, **options)
                run = ens.plan_run(n_measure, every, n_therm)
                try:
                    run.run(bar=bar.part(int(N[i]) * (r1 - r0)))    # sweeps as spin updates
                except Interrupted:
                    done = ", ".join(map(str, sizes[:i]))
                    exc = Interrupted(bar.done, total, "spin updates of the scan")
                    exc.kept = (f"sizes {done} were complete; " if i else "") + "nothing written"
                    raise exc from None
                s = run.samples()
                _reduce(s, fine[i, r0:r1], tau[i, r0:r1], drift[i, r0:r1], drift_var[i, r0:r1])
                del s, run, ens

    pieces = tuple(-(-nT * R // k) for k in plan)
    if comm is not None:
        return (dim, sizes, temps, n_therm, n_measure, every, R, N, pieces), (fine, tau, drift,
                                                                              drift_var, mine)
    return _analyse(dim, sizes, temps, n_therm, n_measure, every, R, N, fine, tau, drift, drift_var,
                    pieces)


def _reduce(s, fine, tau, drift, drift_var):
    """Per replica of a piece: FINE_BLOCKS block means of the 5 moments, tau_int
    and the drift between the series halves (with its tau-aware variance)."""
    e, m = s.energy, s.magnetization
    n = e.shape[1]
    am = np.abs(m)
    q = np.stack([e, e * e, am, m * m, m**4], axis=1)            # (K, 5, n)
    size = n // FINE_BLOCKS
    fine[:] = q[..., n - size * FINE_BLOCKS:].reshape(q.shape[:2] + (FINE_BLOCKS, size)).mean(axis=-1)
    h = n // 2
    for j, x in enumerate((e, am)):
        _, _, t = mean_estimates(x)
        tau[:, j] = np.where(np.isfinite(t), t, np.inf)
        late, late_err, _ = mean_estimates(x[:, n - h:])
        drift[:, j] = late - x[:, :h].mean(axis=1)
        # its variance if the series were stationary: twice the late half's
        # (a relaxing start would inflate the early half's own)
        drift_var[:, j] = np.where(np.isnan(late_err), np.inf, 2 * late_err**2)
    return fine


def _analyse(dim, sizes, temps, n_therm, n_measure, every, R, N, fine, tau, drift, drift_var, pieces):
    nS, nT, nq, M = len(sizes), temps.size, fine.shape[2], fine.shape[3]
    fine = fine.reshape(nS, nT, R, nq, M)
    tau_LT = tau.max(axis=-1).reshape(nS, nT, R)
    with np.errstate(invalid="ignore"):
        tau_mean = np.where(np.all(np.isfinite(tau_LT), axis=-1), tau_LT.mean(axis=-1), np.inf)
    finite = tau_mean[np.isfinite(tau_mean)]
    tau_max = float(finite.max()) if finite.size else math.inf
    per = 1
    while per * 2 <= M and n_measure / (per * 2) >= BLOCK_TAUS * tau_max:
        per *= 2
    blocks = fine.reshape(nS, nT, R, nq, per, M // per).mean(axis=-1)       # (S, T, R, 5, per)
    blocks = blocks.transpose(0, 1, 3, 2, 4).reshape(nS, nT, nq, R * per)
    nb = R * per
    full = blocks.mean(axis=-1)
    deleted = (blocks.sum(axis=-1, keepdims=True) - blocks) / max(1, nb - 1) if nb > 1 else blocks

    def observables(x, deleted_axis):
        k = (lambda j: x[:, :, j, :]) if deleted_axis else (lambda j: x[:, :, j])
        e, e2, ma, m2, m4 = (k(j) for j in range(nq))
        Nb = N.reshape((-1, 1, 1) if deleted_axis else (-1, 1))
        Tb = temps.reshape((-1, 1) if deleted_axis else (-1,))
        with np.errstate(invalid="ignore", divide="ignore"):
            return {"binder": 1.0 - m4 / (3.0 * m2**2), "susceptibility": Nb * (m2 - ma**2) / Tb,
                    "specific_heat": Nb * (e2 - e**2) / Tb**2, "energy": e, "abs_magnetization": ma}

    f_full, f_del = observables(full, False), observables(deleted, True)
    fields = {}
    for name in f_full:
        fields[name], fields[name + "_err"] = f_full[name], _jackknife_err(f_del[name])

    crossings = []
    for a in range(nS - 1):
        du = f_full["binder"][a + 1] - f_full["binder"][a]
        du_del = f_del["binder"][a + 1] - f_del["binder"][a]
        crossings.append(crossing_of(temps, du, du_del, (sizes[a], sizes[a + 1])))
    cross = crossings[-1].temperature

    notes = _warnings(sizes, temps, n_measure, every, tau_mean, drift.reshape(nS, nT, R, 2),
                      drift_var.reshape(nS, nT, R, 2), nb)
    return BinderScan(dim=dim, sizes=sizes, temperatures=temps, n_therm=n_therm, n_measure=n_measure,
                      every=every, replicas=R, tau_int=tau_mean * every, n_blocks=nb, pieces=pieces,
                      crossings=tuple(crossings), crossing=cross, warnings=tuple(notes), **fields)


def _warnings(sizes, temps, n_measure, every, tau_mean, drift, drift_var, nb):
    """Messages (also issued as Python warnings) about untrustworthy numbers."""
    notes = []

    def where(mask):
        pts = [f"L={sizes[i]} T={temps[j]:.5g}" for i, j in zip(*np.nonzero(mask))]
        return ", ".join(pts[:4]) + (f" and {len(pts) - 4} more" if len(pts) > 4 else "")

    short = ~(n_measure >= MIN_TAUS * tau_mean)
    if short.any():
        worst = np.unravel_index(np.argmax(np.where(np.isfinite(tau_mean), tau_mean, np.inf)), tau_mean.shape)
        t = tau_mean[worst]
        if math.isfinite(t):
            why = (f"{n_measure} measurements are fewer than {MIN_TAUS} tau_int (tau_int up to "
                   f"{t * every:.3g} sweeps); measure at least {math.ceil(MIN_TAUS * t * every)} sweeps "
                   f"(n_measure * every)")
        else:
            why = (f"tau_int could not be estimated from {n_measure} measurements (the series is "
                   f"shorter than ~10 tau_int); measure much longer")
        msg = f"series too short for trustworthy errors at {where(short)}: {why}"
        notes.append(msg)
        warnings.warn(msg, TooShortWarning, stacklevel=3)
    # the variance of the summed drift: from each replica's tau_int, or from the
    # scatter of the replicas' drifts if larger (a rare slow excursion of one
    # replica, e.g. a stripe state below Tc, is equilibrium, not a drift)
    R = drift.shape[2]
    var = drift_var.sum(axis=2)
    if R > 1:
        var = np.maximum(var, R * drift.var(axis=2, ddof=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        z = drift.sum(axis=2) / np.sqrt(var)         # (S, T, 2)
    bad = np.any(np.abs(z) > DRIFT_SIGMAS, axis=-1)
    if bad.any():
        msg = (f"not in equilibrium at {where(bad)}: <e> or <|m|> drifts between the halves of the "
               f"measured series by more than {DRIFT_SIGMAS:g} errors; thermalise longer (n_therm)")
        notes.append(msg)
        warnings.warn(msg, NotEquilibratedWarning, stacklevel=3)
    if nb < 16:
        msg = (f"only {nb} jackknife blocks (replicas x time blocks): the error bars are themselves "
               f"uncertain by about {100 / math.sqrt(2 * max(1, nb - 1)):.0f} %" if nb > 1 else
               "only 1 jackknife block: no errors (use more replicas or longer series)")
        notes.append(msg)
        warnings.warn(msg, TooShortWarning, stacklevel=3)
    return notes
