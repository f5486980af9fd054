"""Measurement series of Ising runs and their analysis, with error bars that
account for autocorrelation.

Each estimate comes from one replica's series: the estimator is linearised
around the series means and the autocorrelation of the linearised series,
summed over 5 tau_int of the slower of E and |M| (the slowest mode: a
variance like C couples weakly to it), sets the error
(clphys.stats.series_estimate, Wolff's method). Replicas of an ensemble at
one temperature are runs of one Markov chain of one length: their tau_int
and the error of each one's estimate are the chain's, so they are estimated
from all of them together (clphys.stats.shared_estimates); each replica
keeps its own value. A replica that stayed in one phase for the whole run
cannot then report its own far too small tau_int and error (2D L = 32 at
Tc, 256 replicas of 1200 measurements: its own error put one replica 8.5
sigma from the exact C, the shared one 2.9). A series shorter than 50
tau_int of that mode gets a TooShortWarning: its error bar is itself
uncertain and biased low (measured: 0.8-0.95 of the true scatter at 50
tau_int, 0.95-1.03 at 125, 2D L = 32 at Tc); fewer than 16 measurements
give an error of NaN (no error can be estimated). An estimator that is not
defined for a series (the Binder cumulant where every magnetization is 0)
gives a value and error of NaN, too_short, and a RuntimeWarning.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass

import numpy as np

from .. import _validate
from ..stats import (
    MIN_SAMPLES,
    MIN_TAUS,
    Estimate,
    SeriesEstimate,
    TooShortWarning,
    jackknife,
    series_estimate,
    shared_estimates,
)

# every error sums the autocorrelation over WINDOW_TAUS x tau_int of the
# slower of E and |M| (Sokal's c = 5, applied to the slowest mode)
WINDOW_TAUS = 5.0
# |difference| between a replica's estimate and the mean of the others at its
# temperature, in units of its error (and the mean's), above which the replica
# is an outlier: its series missed a slow mode its run was too short to average
# (2D L = 16 at Tc, 256 replicas of ~55 tau_int: the largest of honest
# replicas 3-3.5 for E and C, ~4.5 for U4, whose distribution is skewed)
OUTLIER_SIGMAS = 3.5
# |drift| between the halves of a series, in units of its error, above which
# the series is called out of equilibrium (0.3 % false alarms for honest errors)
DRIFT_SIGMAS = 3.0


class NotEquilibratedWarning(RuntimeWarning):
    """A series drifts: the mean of its second half differs from the first
    half's by more than DRIFT_SIGMAS errors (thermalisation too short)."""


class TrappedWarning(RuntimeWarning):
    """A replica sits in a deterministic cycle of the update (e.g. the
    period-2 cycles of the checkerboard Metropolis update on a 4x4 lattice):
    its measurements are not samples of the Boltzmann distribution."""


def _slow_tau(e, m):
    """tau_int (in measurements) of the slower of E and |M| of one replica,
    or shared by the replicas (rows) of one temperature: the slowest mode
    every estimator's error window must cover (NaN if unknown)."""
    if e.ndim == 1:
        taus = [series_estimate(x).tau_int for x in (e, np.abs(m))]
    else:
        taus = [shared_estimates(x)[0].tau_int for x in (e, np.abs(m))]
    return max(taus) if all(math.isfinite(t) for t in taus) else math.nan


def _estimate(rows, func, n_blocks, slow):
    """Estimates of func(row means) of one replica's rows (k, n), or of each
    replica's of a temperature (rows (R, k, n), sharing one error): the
    error summed over WINDOW_TAUS x `slow` lags (or a plain n_blocks-block
    jackknife of each replica when asked for); tau_int reports the longer of
    the estimator's own and `slow`. A list, one per replica."""
    window = math.ceil(WINDOW_TAUS * slow) if math.isfinite(slow) else None
    stack = rows if rows.ndim == 3 else rows[None]
    k, n = stack.shape[1:]
    guarded = _defined(func)
    if not math.isfinite((guarded or (lambda x: x[0]))(stack.mean(axis=2).mean(axis=0))):
        return [SeriesEstimate(math.nan, math.nan, math.nan, n) for _ in stack]
    if stack.shape[0] == 1:
        one = series_estimate(stack[0] if func is not None else stack[0, 0], guarded, window=window)
        shared = [one]
    else:
        shared = shared_estimates(stack if func is not None else stack[:, 0], guarded, window=window)
    out = []
    for x, auto in zip(stack, shared):
        value, error = auto.value, auto.error
        if not math.isfinite(value):                       # undefined for this replica's series
            out.append(SeriesEstimate(math.nan, math.nan, math.nan, n))
            continue
        if n_blocks is not None:
            blocks = _validate.integer("n_blocks", n_blocks, 2, n)
            value, error = jackknife(x, func or (lambda m: m[0]), n_blocks=blocks)
        tau = max(auto.tau_int, slow) if math.isfinite(slow) else math.nan
        out.append(SeriesEstimate(value, error, tau, n))
    return out


def _defined(func):
    """func, returning NaN (without a NumPy warning) where it divides by 0."""
    if func is None:
        return None

    def call(x):
        with np.errstate(divide="ignore", invalid="ignore"):
            value = float(func(x))
        return value if math.isfinite(value) else math.nan
    return call


def _warn_undefined(estimates, what):
    bad = [i for i, e in enumerate(estimates) if math.isnan(e.value)]
    if bad:
        where = (f" for {len(bad)} of {len(estimates)} replicas (replica "
                 f"{', '.join(map(str, bad[:8]))}{', ...' if len(bad) > 8 else ''})" if len(estimates) > 1 else "")
        warnings.warn(f"{what} is not defined{where}: its formula divides by 0 for the measured series "
                      f"(e.g. the Binder cumulant where every magnetization is 0); value and error are NaN",
                      RuntimeWarning, stacklevel=4)


def _mark_outliers(estimates):
    """The estimates of one temperature's replicas, those that differ from
    the mean of the others by more than OUTLIER_SIGMAS errors marked."""
    v = np.array([e.value for e in estimates])
    err = np.array([e.error for e in estimates])
    ok = np.isfinite(v) & np.isfinite(err)
    k = int(ok.sum())
    if k < 2:
        return estimates
    others = (v[ok].sum() - v) / (k - 1)
    others_err = np.sqrt(np.maximum(0.0, (err[ok] ** 2).sum() - err**2)) / (k - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.abs(v - others) / np.sqrt(err**2 + others_err**2)
    return [dataclasses.replace(e, outlier=True) if ok[i] and z[i] > OUTLIER_SIGMAS else e
            for i, e in enumerate(estimates)]


def _warn_short(estimates, what):
    outliers = [i for i, e in enumerate(estimates) if e.outlier]
    if outliers:
        shown = ", ".join(map(str, outliers[:8])) + (", ..." if len(outliers) > 8 else "")
        warnings.warn(f"{what}: {len(outliers)} of {len(estimates)} replicas (replica {shown}) differ from "
                      f"the others at their temperature by more than {OUTLIER_SIGMAS:g} errors: their "
                      f"series missed a slow mode (e.g. stayed in one phase) and their errors are not to "
                      f"be trusted (too_short): measure longer", TooShortWarning, stacklevel=4)
    short = [e for e in estimates if e.too_short and not e.outlier]
    if not short:
        return
    n = short[0].n
    if n < MIN_SAMPLES:
        msg = (f"{what}: {n} measurements are too few to estimate tau_int (need at least "
               f"{MIN_SAMPLES}){'; the error is NaN' if math.isnan(short[0].error) else ''}")
    else:
        taus = [e.tau_int for e in short if math.isfinite(e.tau_int)]
        tau_txt = (f"tau_int = {max(taus):.3g} measurements, so only {n / max(taus):.3g} tau_int"
                   if taus else "tau_int could not be estimated (no window below n/2)")
        msg = (f"{what}: the series of {n} measurements is too short for its error to be trusted "
               f"({tau_txt}; needs >= {MIN_TAUS} tau_int): measure longer")
    if len(estimates) > 1:
        msg += f" [{len(short)} of {len(estimates)} replicas]"
    warnings.warn(msg, TooShortWarning, stacklevel=4)


@dataclass(frozen=True, eq=False)
class Samples:
    """Per-measurement energy and magnetization per spin of one lattice
    (arrays (n,)) or of an ensemble (arrays (R, n), one row per replica).

    n_therm: sweeps the lattice had made at this temperature before the first
    measurement (thermalisation), None when unknown; every: sweeps between
    measurements; trapped: True (per replica for an ensemble) where the
    replica was found in a deterministic cycle of the update (see
    TrappedWarning).

    Analysis methods return a :class:`~clphys.stats.SeriesEstimate` (value,
    error, tau_int of the series in measurements, n) for one lattice and a
    list of them, one per replica, for an ensemble. Errors account for the
    autocorrelation (see the module doc); the replicas at one temperature
    (rows of one value of `temperature`: independent runs of one lattice,
    as an ensemble makes them) share their error and tau_int, estimated from
    all of them. ``n_blocks=k`` asks for a plain k-block jackknife of each
    series instead (correct only if the blocks are much longer than tau_int).
    """
    temperature: object      # float, or (R,) array
    n_spins: int
    energy: np.ndarray       # E/N per measurement
    magnetization: np.ndarray  # M/N per measurement (signed)
    n_therm: int | None = None
    every: int = 1
    trapped: object = False  # bool, or (R,) bool array

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)
        e = _validate.finite_array("energy", self.energy, dtype=None)
        m = _validate.finite_array("magnetization", self.magnetization, dtype=None)
        if e.ndim not in (1, 2) or e.shape != m.shape:
            raise ValueError(f"energy and magnetization must be arrays of one shape, (n,) or (R, n); got "
                             f"{e.shape} and {m.shape}")
        set_("energy", e.astype(float, copy=False))
        set_("magnetization", m.astype(float, copy=False))
        T = _validate.finite_array("temperature", self.temperature, dtype=None).astype(float)
        if T.ndim > 1 or (T.ndim == 1 and (e.ndim != 2 or T.size != e.shape[0])) or np.any(T <= 0):
            raise ValueError(f"temperature must be > 0: a number, or one per replica (R,) for (R, n) "
                             f"series; got {self.temperature!r}")
        set_("temperature", float(T) if T.ndim == 0 else T)
        set_("n_spins", _validate.integer("n_spins", self.n_spins, 1))
        set_("every", _validate.integer("every", self.every, 1))
        if self.n_therm is not None:
            set_("n_therm", _validate.integer("n_therm", self.n_therm, 0))
        trapped = np.asarray(self.trapped)
        if trapped.dtype != bool or trapped.shape not in ((), e.shape[:1] if e.ndim == 2 else ()):
            raise ValueError(f"trapped must be a bool (one per replica for (R, n) series), got {self.trapped!r}")
        set_("trapped", bool(trapped) if e.ndim == 1 else trapped)

    def _groups(self):
        """Index arrays of the replicas analysed together: those at one
        temperature (trapped replicas, which are no samples, each alone)."""
        if self.energy.ndim == 1:
            return [np.zeros(1, dtype=int)]
        T = self.temperature
        trapped = np.broadcast_to(np.asarray(self.trapped, dtype=bool), T.shape)
        groups = [np.nonzero(~trapped & (T == t))[0] for t in np.unique(T[~trapped])]
        return groups + [np.array([r]) for r in np.nonzero(trapped)[0]]

    def _slow(self, idx):
        """tau_int of the slowest mode of the replicas `idx` (cached)."""
        cache = self.__dict__.setdefault("_slow_cache", {})
        key = tuple(idx)
        if key not in cache:
            e, m = np.atleast_2d(self.energy)[idx], np.atleast_2d(self.magnetization)[idx]
            cache[key] = (math.nan if e.shape[1] < MIN_SAMPLES else
                          _slow_tau(e[0], m[0]) if len(idx) == 1 else _slow_tau(e, m))
        return cache[key]

    def _each(self, rows, func, n_blocks, what):
        """The estimate of func (of T; None: the mean of the one row) of the
        rows(e, m) of every replica, replicas at one temperature together."""
        E, M = np.atleast_2d(self.energy), np.atleast_2d(self.magnetization)
        T = np.broadcast_to(self.temperature, len(E))
        out = [None] * len(E)
        for idx in self._groups():
            stack = np.stack([rows(E[r], M[r]) for r in idx])
            f = func(float(T[idx[0]])) if func is not None else None
            for r, est in zip(idx, _mark_outliers(_estimate(stack, f, n_blocks, self._slow(idx)))):
                out[r] = est
        _warn_undefined(out, what)
        _warn_short([e for e in out if not math.isnan(e.value)], what)
        return out[0] if self.energy.ndim == 1 else out

    def mean_energy(self, n_blocks: int | None = None) -> Estimate | list[Estimate]:
        """<E>/N."""
        return self._each(lambda e, m: e[None], None, n_blocks, "mean_energy")

    def specific_heat(self, n_blocks: int | None = None) -> Estimate | list[Estimate]:
        """C/N = N (<e^2> - <e>^2) / T^2 (e = E/N)."""
        N = self.n_spins
        return self._each(lambda e, m: np.stack([e, e * e]),
                          lambda T: lambda x: N * (x[1] - x[0] ** 2) / T**2, n_blocks, "specific_heat")

    def mean_magnetization(self, n_blocks: int | None = None) -> Estimate | list[Estimate]:
        """<M>/N (signed)."""
        return self._each(lambda e, m: m[None], None, n_blocks, "mean_magnetization")

    def abs_magnetization(self, n_blocks: int | None = None) -> Estimate | list[Estimate]:
        """<|M|>/N."""
        return self._each(lambda e, m: np.abs(m)[None], None, n_blocks, "abs_magnetization")

    def susceptibility(self, n_blocks: int | None = None) -> Estimate | list[Estimate]:
        """chi = N (<m^2> - <|m|>^2) / T, the finite-size estimator (m = M/N)."""
        N = self.n_spins
        return self._each(lambda e, m: np.stack([np.abs(m), m * m]),
                          lambda T: lambda x: N * (x[1] - x[0] ** 2) / T, n_blocks, "susceptibility")

    def binder(self, n_blocks: int | None = None) -> Estimate | list[Estimate]:
        """U4 = 1 - <m^4> / (3 <m^2>^2); NaN (with a RuntimeWarning) for a
        series whose every magnetization is 0."""
        return self._each(lambda e, m: np.stack([m * m, m**4]),
                          lambda T: lambda x: 1.0 - x[1] / (3.0 * x[0] ** 2), n_blocks, "binder")

    def drift(self, observable: str = "energy") -> Estimate | list[Estimate]:
        """Mean of the second half of the series minus the first half's, with
        the error it would have if the series were stationary (twice the
        tau-aware variance of the second half's mean: a transient in the first
        half would inflate that half's own error). Per replica for an
        ensemble. Warns (NotEquilibratedWarning) where it exceeds DRIFT_SIGMAS
        errors: the run did not reach equilibrium before it was measured."""
        _validate.choice("observable", observable, ("energy", "abs_magnetization"))
        x = self.energy if observable == "energy" else np.abs(self.magnetization)
        rows = np.atleast_2d(x)
        out = []
        if rows.shape[1] // 2 < MIN_SAMPLES:
            warnings.warn(f"drift: {rows.shape[1]} measurements are too few to compare the halves of the "
                          f"series (need at least {2 * MIN_SAMPLES}); the drift is NaN", TooShortWarning,
                          stacklevel=2)
        for row in rows:
            h = row.size // 2
            if h < MIN_SAMPLES:
                out.append(Estimate(math.nan, math.nan))
                continue
            late = series_estimate(row[row.size - h:])
            out.append(Estimate(late.value - row[:h].mean(), math.sqrt(2.0) * late.error))
        bad = [d for d in out if d.error >= 0 and abs(d.value) > DRIFT_SIGMAS * d.error]
        if bad:
            d = bad[0]
            z = abs(d.value) / d.error if d.error > 0 else math.inf
            where = f" [{len(bad)} of {len(out)} replicas]" if len(out) > 1 else ""
            warnings.warn(f"not in equilibrium: {observable} drifts by {d} ({z:.3g} sigma) between the "
                          f"halves of the measured series{where} (a relaxation, or a slow mode the series "
                          f"is too short to average); thermalise and measure longer", NotEquilibratedWarning,
                          stacklevel=2)
        return out[0] if x.ndim == 1 else out


__all__ = ["Samples", "Estimate", "SeriesEstimate", "TooShortWarning", "NotEquilibratedWarning",
           "TrappedWarning"]
