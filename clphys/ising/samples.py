"""Measurement series of Ising runs and their analysis, with error bars that
account for autocorrelation.

Each estimate comes from one replica's series: the estimator is linearised
around the series means and the autocorrelation of the linearised series,
summed over 5 tau_int of the slower of E and |M| (the slowest mode: a
variance like C couples weakly to it), sets the error
(clphys.stats.series_estimate, Wolff's method). A series shorter than 50
tau_int of that mode gets a TooShortWarning: its error bar is itself
uncertain by ~30 % and biased low (measured: 0.8-0.95 of the true scatter
at 50 tau_int, 0.95-1.03 at 125, 2D L = 32 at Tc); fewer than 16
measurements give an error of NaN (no error can be estimated).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from .. import _validate
from ..stats import (MIN_SAMPLES, MIN_TAUS, Estimate, SeriesEstimate, TooShortWarning, jackknife,
                     series_estimate)

# every error sums the autocorrelation over WINDOW_TAUS x tau_int of the
# slower of E and |M| (Sokal's c = 5, applied to the slowest mode)
WINDOW_TAUS = 5.0
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
    """tau_int (in measurements) of the slower of E and |M|: the slowest mode
    every estimator's error window must cover (NaN if unknown)."""
    taus = [series_estimate(x).tau_int for x in (e, np.abs(m))]
    return max(taus) if all(math.isfinite(t) for t in taus) else math.nan


def _estimate(rows, func, n_blocks, slow):
    """Estimate of func(row means) of rows (k, n), its error summed over
    WINDOW_TAUS x `slow` lags (or a plain n_blocks-block jackknife when
    asked for); tau_int reports the longer of its own and `slow`."""
    window = math.ceil(WINDOW_TAUS * slow) if math.isfinite(slow) else None
    auto = series_estimate(rows if func is not None else rows[0], func, window=window)
    value, error = auto.value, auto.error
    if n_blocks is not None:
        n_blocks = _validate.integer("n_blocks", n_blocks, 2, rows.shape[1])
        value, error = jackknife(rows, func or (lambda m: m[0]), n_blocks=n_blocks)
    tau = max(auto.tau_int, slow) if math.isfinite(slow) else math.nan
    return SeriesEstimate(value, error, tau, auto.n)


def _warn_short(estimates, what):
    short = [e for e in estimates if e.too_short]
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
    autocorrelation (see the module doc); ``n_blocks=k`` asks for a plain
    k-block jackknife instead (correct only if the blocks are much longer
    than tau_int).
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

    def _slow(self):
        """tau_int of the slowest mode per replica (cached)."""
        cached = self.__dict__.get("_slow_cache")
        if cached is None:
            rows = zip(np.atleast_2d(self.energy), np.atleast_2d(self.magnetization))
            cached = [_slow_tau(e, m) if e.size >= MIN_SAMPLES else math.nan for e, m in rows]
            object.__setattr__(self, "_slow_cache", cached)
        return cached

    def _each(self, make, what):
        slow = self._slow()
        if self.energy.ndim == 1:
            out = [make(self.energy, self.magnetization, float(self.temperature), slow[0])]
        else:
            out = [make(e, m, float(T), t) for e, m, T, t in
                   zip(self.energy, self.magnetization, np.broadcast_to(self.temperature, len(self.energy)),
                       slow)]
        _warn_short(out, what)
        return out[0] if self.energy.ndim == 1 else out

    def mean_energy(self, n_blocks=None):
        """<E>/N."""
        return self._each(lambda e, m, T, t: _estimate(e[None], None, n_blocks, t), "mean_energy")

    def specific_heat(self, n_blocks=None):
        """C/N = N (<e^2> - <e>^2) / T^2 (e = E/N)."""
        N = self.n_spins
        return self._each(lambda e, m, T, t: _estimate(
            np.stack([e, e * e]), lambda x: N * (x[1] - x[0] ** 2) / T**2, n_blocks, t), "specific_heat")

    def mean_magnetization(self, n_blocks=None):
        """<M>/N (signed)."""
        return self._each(lambda e, m, T, t: _estimate(m[None], None, n_blocks, t), "mean_magnetization")

    def abs_magnetization(self, n_blocks=None):
        """<|M|>/N."""
        return self._each(lambda e, m, T, t: _estimate(np.abs(m)[None], None, n_blocks, t),
                          "abs_magnetization")

    def susceptibility(self, n_blocks=None):
        """chi = N (<m^2> - <|m|>^2) / T, the finite-size estimator (m = M/N)."""
        N = self.n_spins
        return self._each(lambda e, m, T, t: _estimate(
            np.stack([np.abs(m), m * m]), lambda x: N * (x[1] - x[0] ** 2) / T, n_blocks, t), "susceptibility")

    def binder(self, n_blocks=None):
        """U4 = 1 - <m^4> / (3 <m^2>^2)."""
        return self._each(lambda e, m, T, t: _estimate(
            np.stack([m * m, m**4]), lambda x: 1.0 - x[1] / (3.0 * x[0] ** 2), n_blocks, t), "binder")

    def drift(self, observable="energy"):
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
