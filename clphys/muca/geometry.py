"""The lattice of the walkers and its energy bins (shared by host, kernels and
the NumPy twin).

An L^dim periodic Ising lattice, J = 1, E = -sum over bonds s_i s_j in
[-dim N, dim N] in steps of 4: bin b holds E = 4 b - dim N (b = 0 .. dim N / 2).
Site s = row * L + x with row = z L + y.

Walker-sliced layout: one 32-bit word holds the spin at one site of 32
walkers (bit i of group G's word = walker 32 G + i, 1 = up), and the word of
site s and group G lies at lattice[s * groups + G]. Every walker flips the
same site at a step (the shared site sequence), so a step reads and writes
the same few words for all walkers, whatever L: the memory traffic per flip
does not grow with the lattice. A last group that is not full keeps its
unused bits at 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _validate

MAX_L = {2: 1024, 3: 256}
LANES = 32                      # walkers per lattice word


def groups(walkers: int) -> int:
    """Lattice words per site for `walkers` walkers."""
    return -(-int(walkers) // LANES)


@dataclass(frozen=True)
class Geometry:
    """An L^dim periodic lattice and its energy bins (dE = 4)."""
    dim: int
    L: int

    @classmethod
    def checked(cls, L, dim):
        """The geometry of (L, dim), checked: ValueError naming what is allowed."""
        dim = _validate.integer("dim", dim)
        _validate.choice("dim", dim, (2, 3))
        L = _validate.integer("L", L, 2, MAX_L[dim])
        if L % 2:
            raise ValueError(f"L must be even (periodic lattice with both Neel states), got {L}")
        return cls(dim, L)

    @property
    def N(self):
        """Sites."""
        return self.L ** self.dim

    @property
    def nbins(self):
        """Energy bins, E = e_min + 4 b."""
        return self.dim * self.N // 2 + 1

    @property
    def ncls(self):
        """Neighbour classes of a site (2 dim + 1)."""
        return 2 * self.dim + 1

    @property
    def nm(self):
        """Bins of |M| / 2 = 0 .. N / 2."""
        return self.N // 2 + 1

    @property
    def e_min(self):
        """The lowest energy, -dim N."""
        return -self.dim * self.N

    @property
    def full_width(self):
        """Width (in bins of dE = 4) of the whole energy range."""
        return self.nbins - 1

    def neighbours(self, sites):
        """(..., 2 dim) neighbour sites of `sites`: x-1, x+1, y-1, y+1 (, z-1, z+1)."""
        s = np.asarray(sites, np.int64)
        L = self.L
        x, row = s % L, s // L
        y, z = row % L, row // L
        out = [row * L + (x - 1) % L, row * L + (x + 1) % L,
               (z * L + (y - 1) % L) * L + x, (z * L + (y + 1) % L) * L + x]
        if self.dim == 3:
            out += [(((z - 1) % L) * L + y) * L + x, (((z + 1) % L) * L + y) * L + x]
        return np.stack(out, axis=-1)

    def energies(self, bins=None):
        """Energies of `bins` (every bin by default), int64."""
        b = np.arange(self.nbins) if bins is None else np.asarray(bins)
        return (4 * b + self.e_min).astype(np.int64)

    def template(self):
        """The template parameters of this geometry."""
        return {"dim": self.dim, "L": self.L}

    def __str__(self):
        return f"{self.dim}D L = {self.L}"
