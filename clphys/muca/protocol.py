"""The weight iteration of Gross, Zierenberg, Weigel and Janke (Comput. Phys.
Commun. 2018) as host-side rules (NumPy only), and the acceptance thresholds.

Per iteration, with w the widest energy range covered so far (in bins of
dE = 4, at least `min_width`) and W the number of walkers:

* n_therm = f_therm * w unrecorded flips per walker, then
* n_updates = floor(u) + 1 recorded flips, u = factor * w^z / W while the
  range is not fully covered, then u <- growth * u each iteration;
* H(E) = the histogram of all walkers; d_k = sum P ln(P / Q) over the visited
  bins (P = H / sum H, Q = 1 / number of visited bins) and d_c = max |H / m - 1|
  (m the mean over visited bins); stop when d_k < kl and H spans the widest
  range so far (weights unchanged; an empty H has d_k = 0);
* else the width grows to the range of bins with H > 1 and ln W(E) -= ln H(E)
  on the visited bins inside it.

This is the published code's rule (cudamuca), the span added. Q is 1 /
(visited bins) rather than 1 / w: in 2D the two forbidden energies +-(2N - 4)
lie inside the range, and with Q = 1 / w a perfectly flat histogram would have
d_k = ln((N + 1) / (N - 1)) ~ 2 / N, above 1e-4 for L >= 16, so the iteration
would never stop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _validate


@dataclass(frozen=True)
class Protocol:
    """The constants of the weight iteration (see docs/muca.md)."""
    f_therm: float = 30.0
    z: float = 2.25
    factor: float = 6.0
    growth: float = 1.1
    min_width: int = 10

    @classmethod
    def checked(cls, f_therm=30.0, z=2.25, factor=6.0, growth=1.1, min_width=10):
        """A Protocol with every constant checked."""
        return cls(_validate.real("f_therm", f_therm, 0.0, strict_min=True),
                   _validate.real("z", z, 0.0, strict_min=True),
                   _validate.real("factor", factor, 0.0, strict_min=True),
                   _validate.real("growth", growth, 1.0),
                   _validate.integer("min_width", min_width, 1))

    def plan(self, width, full_width, walkers, u_prev):
        """(n_therm, n_updates, u) of the next iteration; u_prev is the previous u (0 at first)."""
        if width < full_width:
            u = self.factor * float(width) ** self.z / walkers
        else:
            u = u_prev * self.growth
        return int(self.f_therm * width), int(u) + 1, u


def kullback_leibler(hist):
    """d_k of `hist` against flat over its visited bins (0 for an empty histogram)."""
    h = np.asarray(hist, dtype=np.float64)
    h = h[h > 0]
    if h.size == 0:
        return 0.0
    p = h / h.sum()
    return float(np.sum(p * np.log(p * h.size)))


def chebyshev(hist):
    """d_c = max |H / m - 1| over the visited bins, m their mean count."""
    h = np.asarray(hist, dtype=np.float64)
    h = h[h > 0]
    if h.size == 0:
        return 0.0
    return float(np.max(np.abs(h / h.mean() - 1.0)))


def covered_range(hist):
    """(first, last) bins with more than one count, or None."""
    idx = np.nonzero(np.asarray(hist) > 1)[0]
    return (int(idx[0]), int(idx[-1])) if idx.size else None


def spans(hist, width):
    """`hist` covers at least `width` bins (an empty or one-bin histogram,
    whose d_k is 0, spans none)."""
    rng = covered_range(hist)
    return rng is not None and rng[1] - rng[0] >= width


def update_weights(log_w, hist):
    """ln W(E) - ln H(E) on the visited bins of the covered range (a new array)."""
    out = np.array(log_w, dtype=np.float64)
    rng = covered_range(hist)
    if rng is None:
        return out
    lo, hi = rng
    h = np.asarray(hist[lo:hi + 1], dtype=np.float64)
    seen = h > 0
    out[lo:hi + 1][seen] -= np.log(h[seen])
    return out


WALL = 1e4      # ln W falls by this per bin above a symmetric run's top bin


def walled(log_w, top):
    """ln W with a wall above bin `top` (a copy): ln W(top + k) = ln W(top) -
    WALL k, so that a move above `top` has a threshold of 0 (p < 2^-32, as for
    any p that small) and a walker that made one moves straight back down."""
    out = np.array(log_w, dtype=np.float64)
    out[top + 1:] = out[top] - WALL * np.arange(1, len(out) - top)
    return out


def thresholds(log_w, dim):
    """uint32 table thr[b, k] (shape (nbins, 2 dim + 1)): a flip from bin b with
    k neighbours equal to the spin goes to bin b + k - dim and is accepted iff
    the walker's raw 32-bit word w <= thr, i.e. with probability
    min(1, exp(ln W(b') - ln W(b))) to within 2^-32 (thr = ceil(p 2^32) - 1, as
    the Ising kernels). Moves off the range (impossible) get 0."""
    log_w = np.asarray(log_w, dtype=np.float64)
    nb = len(log_w)
    b = np.arange(nb)[:, None]
    target = b + np.arange(2 * dim + 1)[None, :] - dim
    valid = (target >= 0) & (target < nb)
    diff = np.where(valid, log_w[np.clip(target, 0, nb - 1)] - log_w[b], -np.inf)
    p = np.exp(np.minimum(diff, 0.0))
    thr = np.ceil(p * 2.0**32) - 1.0
    return np.clip(thr, 0, 2**32 - 1).astype(np.uint32)


CODE_SHIFT = 25        # a pair code keeps the top 32 - CODE_SHIFT = 7 bits of its threshold


def pair_codes(thr, dim):
    """The threshold table as the kernels read it: one entry per pair of bins
    (lo, lo + a), a = 1 .. dim, at index lo * dim + a - 1. Of a pair's two
    moves at most one has p < 1 (the "restricted" one; the other's threshold is
    2^32 - 1). codes (uint8): bit 0 = 1 if the move up (lo -> lo + a) is the
    restricted one, bits 1-7 = its threshold T >> 25; exact (uint32): T.

    A move with word w is accepted iff it is not restricted, or w >> 25 < T >> 25,
    or (w >> 25 == T >> 25 and w <= T): the decisions of `thr` bit for bit, with
    the exact table read only in about 1 of 128 restricted moves."""
    thr = np.asarray(thr, dtype=np.uint32)
    nb = thr.shape[0]
    codes = np.zeros((nb, dim), np.uint8)
    exact = np.zeros((nb, dim), np.uint32)
    for a in range(1, dim + 1):
        lo = np.arange(nb - a)
        up = thr[lo, dim + a]                 # lo -> lo + a: k - dim = a
        down = thr[lo + a, dim - a]           # lo + a -> lo
        up_restricted = up != 0xFFFFFFFF
        t = np.where(up_restricted, up, down)
        codes[lo, a - 1] = ((t >> CODE_SHIFT) << 1).astype(np.uint8) | up_restricted.astype(np.uint8)
        exact[lo, a - 1] = t
    return codes.reshape(-1), exact.reshape(-1)


def row_codes(thr, dim, bits=8):
    """The threshold table as one code per (bin, nd), nd = 2 dim - k the
    neighbours that differ from the spin: codes = the top `bits` (8: uint8, 16:
    uint16) of thr and exact (uint32) = thr, both (nbins, 2 dim + 1) with
    columns by nd. A move with word w is accepted iff w >> (32 - bits) < code,
    or (w >> (32 - bits) == code and w <= exact): the decisions of `thr` bit for
    bit, the exact table read in 1 of 2^bits moves."""
    if bits not in (8, 16):
        raise ValueError(f"bits must be 8 or 16, got {bits!r}")
    exact = np.ascontiguousarray(np.asarray(thr, dtype=np.uint32)[:, ::-1])
    codes = (exact >> (32 - bits)).astype(np.uint8 if bits == 8 else np.uint16)
    return codes.reshape(-1), exact.reshape(-1)


def layout_codes(thr, dim, layout):
    """(codes, exact) of `thr` in a kernel's code layout: "pair" (pair_codes),
    "row" or "row16" (row_codes in 8 or 16 bits)."""
    if layout == "pair":
        return pair_codes(thr, dim)
    return row_codes(thr, dim, 16 if layout == "row16" else 8)
