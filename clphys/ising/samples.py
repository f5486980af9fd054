"""Measurement series of Ising runs and their analysis, with error bars that
account for autocorrelation.

Each estimate comes from one replica's series: the estimator is linearised
around the series means and the integrated autocorrelation time tau_int of
the linearised series sets the error (clphys.stats.series_estimate, Wolff's
method). A series shorter than 50 tau_int gets a TooShortWarning: its error
bar is itself uncertain by ~30 % and biased low; fewer than 16 measurements
give an error of NaN (no error can be estimated).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from .. import _validate
from ..stats import (MIN_SAMPLES, MIN_TAUS, Estimate, SeriesEstimate, TooShortWarning, jackknife,
                     series_estimate)

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


def _estimate(rows, func, n_blocks):
    """Estimate of func(row means) of rows (k, n): tau-aware by default,
    a block jackknife with n_blocks blocks when asked for."""
    if n_blocks is None:
        return series_estimate(rows if func is not None else rows[0], func)
    n_blocks = _validate.integer("n_blocks", n_blocks, 2, rows.shape[1])
    est = jackknife(rows, func or (lambda m: m[0]), n_blocks=n_blocks)
    auto = series_estimate(rows if func is not None else rows[0], func)
    return SeriesEstimate(est.value, est.error, auto.tau_int, auto.n)


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

    def _each(self, make, what):
        if self.energy.ndim == 1:
            out = [make(self.energy, self.magnetization, float(self.temperature))]
        else:
            out = [make(e, m, float(T)) for e, m, T in
                   zip(self.energy, self.magnetization, np.broadcast_to(self.temperature, len(self.energy)))]
        _warn_short(out, what)
        return out[0] if self.energy.ndim == 1 else out

    def mean_energy(self, n_blocks=None):
        """<E>/N."""
        return self._each(lambda e, m, T: _estimate(e[None], None, n_blocks), "mean_energy")

    def specific_heat(self, n_blocks=None):
        """C/N = N (<e^2> - <e>^2) / T^2 (e = E/N)."""
        N = self.n_spins
        return self._each(lambda e, m, T: _estimate(
            np.stack([e, e * e]), lambda x: N * (x[1] - x[0] ** 2) / T**2, n_blocks), "specific_heat")

    def mean_magnetization(self, n_blocks=None):
        """<M>/N (signed)."""
        return self._each(lambda e, m, T: _estimate(m[None], None, n_blocks), "mean_magnetization")

    def abs_magnetization(self, n_blocks=None):
        """<|M|>/N."""
        return self._each(lambda e, m, T: _estimate(np.abs(m)[None], None, n_blocks), "abs_magnetization")

    def susceptibility(self, n_blocks=None):
        """chi = N (<m^2> - <|m|>^2) / T, the finite-size estimator (m = M/N)."""
        N = self.n_spins
        return self._each(lambda e, m, T: _estimate(
            np.stack([np.abs(m), m * m]), lambda x: N * (x[1] - x[0] ** 2) / T, n_blocks), "susceptibility")

    def binder(self, n_blocks=None):
        """U4 = 1 - <m^4> / (3 <m^2>^2)."""
        return self._each(lambda e, m, T: _estimate(
            np.stack([m * m, m**4]), lambda x: 1.0 - x[1] / (3.0 * x[0] ** 2), n_blocks), "binder")

    def drift(self, observable="energy"):
        """Mean of the second half of the series minus the first half's, with
        its tau-aware error (per replica for an ensemble). Warns
        (NotEquilibratedWarning) where it exceeds DRIFT_SIGMAS errors: the
        run did not reach equilibrium before it was measured."""
        _validate.choice("observable", observable, ("energy", "abs_magnetization"))
        x = self.energy if observable == "energy" else np.abs(self.magnetization)
        rows = np.atleast_2d(x)
        out = []
        for row in rows:
            h = row.size // 2
            if h < MIN_SAMPLES:
                out.append(Estimate(math.nan, math.nan))
                continue
            a, b = series_estimate(row[:h]), series_estimate(row[row.size - h:])
            out.append(Estimate(b.value - a.value, math.hypot(a.error, b.error)))
        bad = [d for d in out if d.error >= 0 and abs(d.value) > DRIFT_SIGMAS * d.error]
        if bad:
            d = bad[0]
            z = abs(d.value) / d.error if d.error > 0 else math.inf
            where = f" [{len(bad)} of {len(out)} replicas]" if len(out) > 1 else ""
            warnings.warn(f"not in equilibrium: {observable} drifts by {d} ({z:.3g} sigma) between the "
                          f"halves of the measured series{where}; thermalise longer", NotEquilibratedWarning,
                          stacklevel=2)
        return out[0] if x.ndim == 1 else out


__all__ = ["Samples", "Estimate", "SeriesEstimate", "TooShortWarning", "NotEquilibratedWarning",
           "TrappedWarning"]
