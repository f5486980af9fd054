"""Measurement series of Ising runs and their analysis (binned jackknife errors)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _validate
from ..stats import Estimate, jackknife

N_BLOCKS = 32


def _blocks(n, n_blocks):
    if n_blocks is None:
        return min(N_BLOCKS, n)
    return _validate.integer("n_blocks", n_blocks, 2, n)


def _estimate(rows, func, n_blocks):
    """Jackknife Estimate of func(block means of rows) (rows: (k, n))."""
    return jackknife(rows, func, n_blocks=_blocks(rows.shape[1], n_blocks))


@dataclass(frozen=True, eq=False)
class Samples:
    """Per-measurement energy and magnetization per spin of one lattice
    (arrays (n,)) or of an ensemble (arrays (R, n), one row per replica).

    Analysis methods return an :class:`~clphys.stats.Estimate` (block
    jackknife, `n_blocks` blocks, default 32) for one lattice and a list of
    them, one per replica, for an ensemble.
    """
    temperature: object      # float, or (R,) array
    n_spins: int
    energy: np.ndarray       # E/N per measurement
    magnetization: np.ndarray  # M/N per measurement (signed)

    def _each(self, make):
        if self.energy.ndim == 1:
            return make(self.energy, self.magnetization, float(self.temperature))
        return [make(e, m, float(T)) for e, m, T in
                zip(self.energy, self.magnetization, np.broadcast_to(self.temperature, len(self.energy)))]

    def mean_energy(self, n_blocks=None):
        """<E>/N."""
        return self._each(lambda e, m, T: _estimate(e[None], lambda x: x[0], n_blocks))

    def specific_heat(self, n_blocks=None):
        """C/N = N (<e^2> - <e>^2) / T^2 (e = E/N)."""
        N = self.n_spins
        return self._each(lambda e, m, T: _estimate(
            np.stack([e, e * e]), lambda x: N * (x[1] - x[0] ** 2) / T**2, n_blocks))

    def mean_magnetization(self, n_blocks=None):
        """<M>/N (signed)."""
        return self._each(lambda e, m, T: _estimate(m[None], lambda x: x[0], n_blocks))

    def abs_magnetization(self, n_blocks=None):
        """<|M|>/N."""
        return self._each(lambda e, m, T: _estimate(np.abs(m)[None], lambda x: x[0], n_blocks))

    def susceptibility(self, n_blocks=None):
        """chi = N (<m^2> - <|m|>^2) / T, the finite-size estimator (m = M/N)."""
        N = self.n_spins
        return self._each(lambda e, m, T: _estimate(
            np.stack([np.abs(m), m * m]), lambda x: N * (x[1] - x[0] ** 2) / T, n_blocks))

    def binder(self, n_blocks=None):
        """U4 = 1 - <m^4> / (3 <m^2>^2)."""
        return self._each(lambda e, m, T: _estimate(
            np.stack([m * m, m**4]), lambda x: 1.0 - x[1] / (3.0 * x[0] ** 2), n_blocks))


__all__ = ["Samples", "Estimate"]
