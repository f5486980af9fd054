"""Binder-cumulant scans: U4, susceptibility and specific heat over sizes and
temperatures, and the crossing temperatures of the U4 curves.

    scan = binder_scan([8, 16, 32], np.linspace(2.2, 2.34, 15), dim=2, seed=1)
    print(scan)                       # table and crossings
    scan.crossing                     # Estimate of Tc from the largest pair

Every size runs as one ensemble (one replica per temperature, one launch per
half-sweep). Errors: block jackknife with `n_blocks` blocks of each series;
the crossing error deletes block i of every series at once (the series are
independent, so this is the usual jackknife over the joint data).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import _validate
from ..exact import TC_2D, TC_3D
from ..progress import Progress
from ..stats import Estimate
from . import backends
from .lattice import Ensemble2D, Ensemble3D, _temperatures

_GOLDEN = 0x9E3779B97F4A7C15


@dataclass(frozen=True)
class Crossing:
    """Crossing temperature of the U4 curves of sizes (L1, L2) (NaN if the
    difference does not change sign in the scanned range)."""
    sizes: tuple
    temperature: Estimate


@dataclass(frozen=True, eq=False)
class BinderScan:
    """Result of :func:`binder_scan`. Arrays are (len(sizes), len(temperatures));
    each quantity has a matching ``*_err`` array (one sigma, jackknife).

    binder: U4 = 1 - <m^4>/(3 <m^2>^2); susceptibility: N (<m^2> - <|m|>^2)/T;
    specific_heat: N (<e^2> - <e>^2)/T^2; energy: <e>; abs_magnetization: <|m|>
    (e = E/N, m = M/N).
    """
    dim: int
    sizes: tuple
    temperatures: np.ndarray
    n_therm: int
    n_measure: int
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
    crossings: tuple
    crossing: Estimate

    def table(self) -> str:
        head = (f"Binder scan, {self.dim}D, sizes {', '.join(map(str, self.sizes))}: "
                f"{self.replicas} x {self.n_measure} measurements after {self.n_therm} sweeps")
        lines = [head, f"{'L':>5} {'T':>9} {'U4':>14} {'chi':>16} {'C':>14} {'|m|':>14}"]
        for i, L in enumerate(self.sizes):
            for j, T in enumerate(self.temperatures):
                cells = [str(Estimate(v[i, j], e[i, j])) for v, e in (
                    (self.binder, self.binder_err), (self.susceptibility, self.susceptibility_err),
                    (self.specific_heat, self.specific_heat_err),
                    (self.abs_magnetization, self.abs_magnetization_err))]
                lines.append(f"{L:>5} {T:>9.5f} {cells[0]:>14} {cells[1]:>16} {cells[2]:>14} {cells[3]:>14}")
        for c in self.crossings:
            t = c.temperature
            txt = str(t) if math.isfinite(t.value) else "no crossing in the scanned range"
            lines.append(f"U4 crossing L={c.sizes[0]}/{c.sizes[1]}: T = {txt}")
        exact = TC_2D if self.dim == 2 else TC_3D
        lines.append(f"estimate (largest pair): T = {self.crossing}   "
                     f"(Tc = {exact:.6f} for the infinite {self.dim}D lattice)")
        return "\n".join(lines)

    __str__ = table


def _block_means(x, n_blocks):
    size = x.shape[-1] // n_blocks
    return x[..., x.shape[-1] - size * n_blocks:].reshape(x.shape[:-1] + (n_blocks, size)).mean(axis=-1)


def _jackknife(full, deleted):
    """(value, error) from f(full means) and f of the n block-deleted means
    (deleted along the last axis)."""
    n = deleted.shape[-1]
    err = np.sqrt((n - 1) / n * ((deleted - deleted.mean(axis=-1, keepdims=True)) ** 2).sum(axis=-1))
    return full, err


def _root(T, du, window=None):
    """Temperature where du (along T) changes sign: a quadratic fit over the 4
    points around the sign change (linear with fewer points, or when the
    quadratic has no root within a window's width), the root nearest to the
    middle of the bracketing interval; returns (root, window used)."""
    if window is None:
        s = np.sign(du)
        change = np.nonzero(s[:-1] * s[1:] < 0)[0]
        if change.size == 0:
            return math.nan, None
        j = int(change[np.argmin(np.abs(du[change]) + np.abs(du[change + 1]))])
        lo = min(max(0, j - 1), max(0, len(T) - 4))
        window = (slice(lo, min(len(T), lo + 4)), 0.5 * (T[j] + T[j + 1]))
    sl, mid = window
    Tw = T[sl]
    for deg in ((2, 1) if len(Tw) >= 4 else (1,)):
        roots = np.roots(np.polyfit(Tw, du[sl], deg))
        roots = roots[np.isreal(roots)].real
        # a quadratic without a root near the window falls back to the line
        roots = roots[np.abs(roots - mid) <= Tw[-1] - Tw[0]]
        if roots.size:
            return float(roots[np.argmin(np.abs(roots - mid))]), window
    return math.nan, window


def _sizes(sizes):
    if isinstance(sizes, (int, np.integer)) or len(sizes) < 2:
        raise ValueError(f"sizes must be a sequence of at least 2 lattice sizes, got {sizes!r}")
    out = sorted({_validate.integer("sizes[i]", L, 2) for L in sizes})
    if len(out) < 2:
        raise ValueError(f"sizes must hold at least 2 different sizes, got {sizes!r}")
    return tuple(out)


def binder_scan(sizes, temperatures, dim=2, *, n_therm=1000, n_measure=4000, every=1,
                replicas=1, algorithm=None, rng=None, seed=0, n_blocks=32, device=None,
                progress=None, **options) -> BinderScan:
    """U4, susceptibility and specific heat for each size and temperature, with
    jackknife errors, and the crossing temperatures of consecutive sizes' U4.

    Each size runs as one ensemble of len(temperatures) * replicas lattices
    (`replicas` independent copies per temperature, pooled: more statistics
    per launch for small lattices). Each copy's series is cut into
    ceil(n_blocks / replicas) blocks; the jackknife runs over all blocks.
    Size i runs with seed (seed + (i + 1) * 0x9E3779B97F4A7C15) mod 2^64 so the
    sizes' random streams are independent. Start: all spins up (the ordered
    phase equilibrates fastest; n_therm sweeps are discarded).
    """
    dim = _validate.choice("dim", dim, (2, 3))
    sizes = _sizes(sizes)
    temps = np.sort(_temperatures(temperatures))
    if temps.size < 2:
        raise ValueError("temperatures must hold at least 2 values")
    n_blocks = _validate.integer("n_blocks", n_blocks, 2)
    replicas = _validate.integer("replicas", replicas, 1)
    per_series = -(-n_blocks // replicas)
    n_blocks = per_series * replicas
    n_measure = _validate.integer("n_measure", n_measure, per_series)
    n_therm = _validate.integer("n_therm", n_therm, 0)
    every = _validate.integer("every", every, 1)
    seed = _validate.seed(seed)
    backend = backends.load(backends.DEFAULT_ALGORITHM if algorithm is None else algorithm)
    backends.check_rng(backend, rng)
    for L in sizes:
        backend.check_shape((L,) * dim)
    Ensemble = Ensemble2D if dim == 2 else Ensemble3D

    nq = 5                                              # e, e^2, |m|, m^2, m^4
    full = np.empty((len(sizes), temps.size, nq))
    deleted = np.empty((len(sizes), temps.size, nq, n_blocks))
    N = np.array([L**dim for L in sizes], dtype=float)
    work = N * temps.size * replicas * (n_therm + n_measure * every)
    with Progress(int(work.sum()), progress, label="binder") as bar:
        for i, L in enumerate(sizes):
            ens = Ensemble(L, np.repeat(temps, replicas), algorithm=algorithm, rng=rng, start="up", device=device,
                           seed=(seed + (i + 1) * _GOLDEN) % 2**64, **options)
            done = [0]

            def step(d, total, i=i, done=done):
                inc = int(work[i] * d / total) - done[0]
                done[0] += inc
                bar.update(inc)

            s = ens.sample(n_measure, every=every, n_therm=n_therm, progress=step)
            e, m = s.energy, s.magnetization
            q = np.stack([e, e * e, np.abs(m), m * m, m**4], axis=1)     # (T * rep, 5, n)
            B = _block_means(q, per_series).reshape(temps.size, replicas, nq, per_series)
            B = B.transpose(0, 2, 1, 3).reshape(temps.size, nq, n_blocks)  # (T, 5, nb)
            full[i] = B.mean(axis=-1)
            deleted[i] = (B.sum(axis=-1, keepdims=True) - B) / (n_blocks - 1)

    def observables(x):       # x (..., T, 5, [nb]) -> dict of (..., T, [nb])
        e, e2, ma, m2, m4 = (x[..., :, k, :] if x.ndim == deleted.ndim else x[..., :, k] for k in range(nq))
        Nb = N.reshape((-1, 1, 1) if x.ndim == deleted.ndim else (-1, 1))
        Tb = temps.reshape((-1, 1) if x.ndim == deleted.ndim else (-1,))
        return {"binder": 1.0 - m4 / (3.0 * m2**2), "susceptibility": Nb * (m2 - ma**2) / Tb,
                "specific_heat": Nb * (e2 - e**2) / Tb**2, "energy": e, "abs_magnetization": ma}

    f_full, f_del = observables(full), observables(deleted)
    fields = {}
    for name in f_full:
        fields[name], fields[name + "_err"] = _jackknife(f_full[name], f_del[name])

    crossings = []
    for a in range(len(sizes) - 1):
        du = f_full["binder"][a + 1] - f_full["binder"][a]
        root, window = _root(temps, du)
        if window is None:
            crossings.append(Crossing((sizes[a], sizes[a + 1]), Estimate(math.nan, math.nan)))
            continue
        du_del = f_del["binder"][a + 1] - f_del["binder"][a]                # (T, nb)
        roots = np.array([_root(temps, du_del[:, b], window)[0] for b in range(n_blocks)])
        _, err = _jackknife(root, roots)
        crossings.append(Crossing((sizes[a], sizes[a + 1]), Estimate(float(root), float(err))))
    return BinderScan(dim=dim, sizes=sizes, temperatures=temps, n_therm=n_therm, n_measure=n_measure,
                      replicas=replicas, crossings=tuple(crossings), crossing=crossings[-1].temperature, **fields)
