"""The lattice of one walker and its energy bins (shared by host, kernels and
the NumPy twin).

An L^dim periodic Ising lattice, J = 1, E = -sum over bonds s_i s_j in
[-dim N, dim N] in steps of 4: bin b holds E = 4 b - dim N (b = 0 .. dim N / 2).
Spins are bits, 1 = up: spin (x, row) with row = z L + y is bit x % 32 of
word row * wpr + x // 32 (wpr = ceil(L / 32) words per row of L spins). On
the device, word w of walker j lies at lattice[w * walkers + j] (all walkers'
word 0, then all word 1, ...), so a warp of walkers reading the same site
reads consecutive words.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _validate

MAX_L = {2: 1024, 3: 256}       # 10-bit x coordinates and 16-bit row indices in a site descriptor


@dataclass(frozen=True)
class Geometry:
    dim: int
    L: int

    @classmethod
    def checked(cls, L, dim):
        dim = _validate.integer("dim", dim)
        _validate.choice("dim", dim, (2, 3))
        L = _validate.integer("L", L, 2, MAX_L[dim])
        if L % 2:
            raise ValueError(f"L must be even (periodic lattice with both Neel states), got {L}")
        return cls(dim, L)

    @property
    def N(self):
        return self.L ** self.dim

    @property
    def rows(self):
        return self.L ** (self.dim - 1)

    @property
    def wpr(self):
        return (self.L + 31) // 32

    @property
    def words(self):
        return self.rows * self.wpr

    @property
    def nbins(self):
        return self.dim * self.N // 2 + 1

    @property
    def ncls(self):
        return 2 * self.dim + 1

    @property
    def nm(self):
        """Bins of |M| / 2 = 0 .. N / 2."""
        return self.N // 2 + 1

    @property
    def e_min(self):
        return -self.dim * self.N

    @property
    def full_width(self):
        """Width (in bins of dE = 4) of the whole energy range."""
        return self.nbins - 1

    def energies(self, bins=None):
        b = np.arange(self.nbins) if bins is None else np.asarray(bins)
        return (4 * b + self.e_min).astype(np.int64)

    def template(self):
        return {"dim": self.dim, "L": self.L}

    def __str__(self):
        return f"{self.dim}D L = {self.L}"
