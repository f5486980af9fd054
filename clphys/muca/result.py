"""What a multicanonical production run gives: ln g(E) with jackknife errors,
and canonical averages at any temperature by reweighting.

The production histogram H_b(E) of each block b (a group of independent
walkers, all of whom ran the whole production) estimates g(E) W(E) up to a
constant, so ln g(E) = ln H(E) - ln W(E) + c, with c fixed by sum g = 2^N.
Errors are jackknife errors over the blocks (clphys.stats.jackknife_blocks):
the blocks are independent Markov chains, so the errors hold however long the
walkers' autocorrelation times are compared with the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import _validate
from ..stats import jackknife_blocks
from . import protocol


@dataclass(frozen=True)
class Canonical:
    """Canonical averages per spin at temperatures T (k_B = J = 1), each with
    its jackknife error: energy <E>/N, specific_heat (<E^2> - <E>^2)/(T^2 N),
    and, where the production recorded magnetizations, abs_magnetization
    <|M|>/N, m2 <M^2>/N^2, m4 <M^4>/N^4 and binder 1 - <M^4>/(3 <M^2>^2)
    (None otherwise). Arrays over T, floats for a scalar T."""
    T: object
    energy: object
    energy_err: object
    specific_heat: object
    specific_heat_err: object
    abs_magnetization: object = None
    abs_magnetization_err: object = None
    m2: object = None
    m2_err: object = None
    m4: object = None
    m4_err: object = None
    binder: object = None
    binder_err: object = None


@dataclass(frozen=True)
class MucaResult:
    """A production run. Arrays over `energies`, the energies it visited (for
    a converged 2D run: every accessible energy, -2N .. 2N except +-(2N - 4)).

    ln_g, ln_g_err: ln g(E) normalised to sum g = 2^N, and its jackknife error;
    histogram: the production counts (sum = walkers * updates);
    block_histograms: (blocks, energies) counts of each group of walkers;
    moments: (blocks, energies, 3) sums of |m|, m^2, m^4 (m = M/N) over the
    recorded samples, or None; log_weights: ln W(E) of the run; therm, updates:
    unrecorded and recorded flips per walker; therm_passages, passages: passages
    per walker through the energy range (lowest to highest energy or back) at
    the end of the thermalisation and of the production (Multicanonical.produce);
    target_error, max_error: the production's target for the largest error of
    ln g and that largest error (inf where an energy was seen by one group of
    walkers only, whose error is then inf too); `reached` says whether it met
    the target. ln_g is finite wherever an energy was recorded. symmetric: the
    run sampled E <= 0 (Multicanonical(symmetric=True)); every array above
    E = 0 is then the mirror image of the one below, and the passages are
    between the lowest energy and 0.
    """
    dim: int
    L: int
    walkers: int
    blocks: int
    therm: int
    updates: int
    energies: np.ndarray
    ln_g: np.ndarray
    ln_g_err: np.ndarray
    histogram: np.ndarray
    log_weights: np.ndarray
    block_histograms: np.ndarray
    moments: np.ndarray | None
    converged: bool
    iterations: int
    seconds: float
    therm_passages: float = float("nan")
    passages: float = float("nan")
    target_error: float = float("nan")
    max_error: float = float("nan")
    symmetric: bool = False

    @property
    def N(self):
        """Sites."""
        return self.L ** self.dim

    @property
    def reached(self) -> bool:
        """The largest error of ln g is at most the target (all of them known)."""
        return bool(self.max_error <= self.target_error)

    @property
    def round_trips(self) -> float:
        """Round trips per walker through the energy range since the production
        began (two passages each)."""
        return self.passages / 2.0

    @property
    def flips_per_round_trip(self) -> float:
        """Flips per walker per round trip in the production: the multicanonical
        tunnelling time, the scale of the walkers' autocorrelation."""
        return 2.0 * (self.therm + self.updates) / self.passages if self.passages > 0 else float("inf")

    @property
    def flips(self):
        """Attempted flips of the production run (thermalisation included)."""
        return self.walkers * (self.therm + self.updates)

    @property
    def chebyshev(self):
        """d_c of the production histogram over the visited energies."""
        return protocol.chebyshev(self.histogram)

    @property
    def kullback_leibler(self):
        """Kullback-Leibler divergence of the production histogram from flat."""
        return protocol.kullback_leibler(self.histogram)

    def canonical(self, T) -> Canonical:
        """Averages at temperature(s) T by reweighting the production run."""
        T_arr = _validate.finite_array("T", T, dtype=float)
        if T_arr.ndim > 1 or T_arr.size == 0 or np.any(T_arr <= 0):
            raise ValueError(f"T must be a positive temperature or a 1-D array of them, got {T!r}")
        temps = np.atleast_1d(T_arr)
        magnet = self.moments is not None
        data = self.block_histograms[:, None, :].astype(np.float64)
        if self.moments is not None:
            data = np.concatenate([data, np.moveaxis(self.moments, 2, 1)], axis=1)
        E = self.energies.astype(np.float64)
        N = self.N
        w = self.log_weights

        def estimate(mean):
            h = mean[0]
            with np.errstate(divide="ignore", invalid="ignore"):
                lng = np.log(h) - w
                a = lng[None, :] - E[None, :] / temps[:, None]
                a -= np.max(a, axis=1, keepdims=True)
                p = np.exp(a)
                p /= p.sum(axis=1, keepdims=True)
                e = p @ E
                var = np.sum(p * (E[None, :] - e[:, None]) ** 2, axis=1)
                out = [e / N, var / (temps**2 * N)]
                if magnet:
                    m1, m2, m4 = (p @ np.where(h > 0, mean[k] / h, 0.0) for k in (1, 2, 3))
                    out += [m1, m2, m4, 1.0 - m4 / (3.0 * m2**2)]
            return np.array(out)

        value, err = jackknife_blocks(data, estimate)
        scalar = np.ndim(T_arr) == 0

        def out(a):
            return float(a[0]) if scalar else a

        fields = dict(T=float(T_arr) if scalar else temps, energy=out(value[0]), energy_err=out(err[0]),
                      specific_heat=out(value[1]), specific_heat_err=out(err[1]))
        if magnet:
            for k, name in enumerate(("abs_magnetization", "m2", "m4", "binder")):
                fields[name], fields[name + "_err"] = out(value[2 + k]), out(err[2 + k])
        return Canonical(**fields)

    def __str__(self):
        lines = [f"multicanonical {self.dim}D L = {self.L}: {self.walkers} walkers, {self.blocks} blocks, "
                 f"{self.therm} + {self.updates} recorded flips per walker ({self.passages:.2f} passages "
                 f"{passage_span(self.symmetric)}), {len(self.energies)} energies",
                 f"{'E':>8} {'ln g(E)':>14} {'error':>10}"]
        for E, v, e in zip(self.energies, self.ln_g, self.ln_g_err):
            lines.append(f"{int(E):8d} {v:14.6f} {e:10.2e}")
        return "\n".join(lines)


def ln_g_blocks(geom, log_w, block_hist):
    """(ln g, jackknife error) over the bins `block_hist` (blocks, bins)
    covers, with ln W(E) `log_w` of those bins; sum g = 2^N."""
    norm = geom.N * math.log(2.0)

    def ln_g(mean):
        with np.errstate(divide="ignore"):
            v = np.log(mean) - log_w
        finite = np.isfinite(v)
        top = np.max(v[finite]) if finite.any() else 0.0
        return v - top - math.log(np.sum(np.exp(v[finite] - top))) + norm

    return jackknife_blocks(block_hist, ln_g)


def max_ln_g_error(geom, log_w_all, block_hist) -> float:
    """The largest jackknife error of ln g over the recorded energies (inf
    if any is unknown or fewer than two energies were recorded)."""
    seen = np.nonzero(block_hist.sum(axis=0) > 0)[0]
    if seen.size < 2:
        return float("inf")
    _, err = ln_g_blocks(geom, np.asarray(log_w_all, np.float64)[seen], block_hist[:, seen])
    return float(np.max(err))


def passage_span(symmetric: bool) -> str:
    """Where a passage goes, in words (symmetric: E <= 0 sampled)."""
    return "between the ground state and E = 0" if symmetric else "through the energy range"


def make_result(geom, log_w_all, block_hist, block_moments, *, walkers, therm, updates,
                converged, iterations, seconds, therm_passages=float("nan"),
                passages=float("nan"), target_error=float("nan"), symmetric=False) -> MucaResult:
    """MucaResult from the per-block histograms over all bins."""
    total = block_hist.sum(axis=0)
    seen = np.nonzero(total > 0)[0]
    H = block_hist[:, seen]
    w = np.asarray(log_w_all, np.float64)[seen]
    value, err = ln_g_blocks(geom, w, H)
    moments = None if block_moments is None else np.ascontiguousarray(block_moments[:, seen, :])
    return MucaResult(dim=geom.dim, L=geom.L, walkers=walkers, blocks=H.shape[0], therm=therm,
                      updates=updates, energies=geom.energies(seen), ln_g=value, ln_g_err=err,
                      histogram=total[seen].astype(np.int64), log_weights=w,
                      block_histograms=H.astype(np.int64), moments=moments, converged=converged,
                      iterations=iterations, seconds=seconds, therm_passages=float(therm_passages),
                      passages=float(passages), target_error=float(target_error),
                      max_error=float(np.max(err)) if seen.size >= 2 else float("inf"), symmetric=symmetric)
