"""ln g(E) from transition counts (the broad-histogram / transition-matrix
relation), which needs the walkers in equilibrium only at each energy, not
across the energy range.

Counting pairs of states that differ by one spin: g(b) <n_k>_b = g(b') <n_k'>_b'
for b' = b + k - dim and k' = 2 dim - k, where <n_k>_b is the fraction of sites
whose flip has class k (k neighbours equal to the spin), averaged over the
states of energy bin b. With C[b, k] the recorded proposals of class k from
bin b and H[b] = sum_k C[b, k], <n_k>_b ~ C[b, k] / H[b], so each pair of bins
gives

    ln g(b') - ln g(b) = ln(C[b, k] / H[b]) - ln(C[b', k'] / H[b']).

All pairs (steps of 1 .. dim bins) are combined by weighted least squares
(weights 1 / (1 / C[b, k] + 1 / C[b', k']), the Poisson variance of the two
logarithms), solved as a banded system, then normalised to sum g = 2^N.
Vectorised over leading axes (e.g. jackknife samples).
"""

from __future__ import annotations

import math

import numpy as np


def transition_ln_g(counts, dim: int, N: int):
    """ln g over the bins of `counts` (..., nbins, 2 dim + 1); NaN where a bin
    was never visited or is not linked to the others by counted transitions."""
    C = np.asarray(counts, dtype=np.float64)
    lead, (nb, nc) = C.shape[:-2], C.shape[-2:]
    if nc != 2 * dim + 1:
        raise ValueError(f"counts must have 2 dim + 1 = {2 * dim + 1} classes, got {nc}")
    C = C.reshape((-1, nb, nc))
    S = C.shape[0]
    H = C.sum(axis=-1)
    band = np.zeros((S, nb, dim + 1))        # normal matrix: band[:, i, j] = M[i, i + j]
    rhs = np.zeros((S, nb))
    with np.errstate(divide="ignore", invalid="ignore"):
        lnf = np.log(C) - np.log(H)[..., None]
    for step in range(1, dim + 1):
        up, down = C[:, :nb - step, dim + step], C[:, step:, dim - step]
        ok = (up > 0) & (down > 0)
        w = np.where(ok, 1.0 / (1.0 / np.where(ok, up, 1) + 1.0 / np.where(ok, down, 1)), 0.0)
        y = np.where(ok, lnf[:, :nb - step, dim + step] - lnf[:, step:, dim - step], 0.0)
        band[:, :nb - step, 0] += w
        band[:, step:, 0] += w
        band[:, :nb - step, step] -= w
        rhs[:, :nb - step] -= w * y
        rhs[:, step:] += w * y
    linked = band[..., 0] > 0
    # gauge: ln g of the first linked bin is pinned (adds 1 there); unlinked bins decouple
    first = np.argmax(linked, axis=1)
    band[np.arange(S), first, 0] += 1.0
    band[..., 0] = np.where(linked, band[..., 0], 1.0)
    x = _solve_banded_spd(band, rhs)
    x = np.where(linked, x, np.nan)
    top = np.nanmax(x, axis=1, keepdims=True)
    x = x - top - np.log(np.nansum(np.exp(x - top), axis=1, keepdims=True)) + N * math.log(2.0)
    return x.reshape(lead + (nb,))


def _solve_banded_spd(band, rhs):
    """Solve M x = rhs for symmetric positive definite banded M (band[:, i, j] =
    M[i, i + j]), vectorised over the first axis: LDL^T, one pass each way."""
    S, n, w = band.shape
    p = w - 1
    L = np.zeros((S, n, w))                  # L[:, i, j] = L[i + j, i] (unit diagonal)
    D = np.zeros((S, n))
    for i in range(n):
        d = band[:, i, 0].copy()
        for j in range(1, min(p, i) + 1):
            d -= L[:, i - j, j] ** 2 * D[:, i - j]
        D[:, i] = d
        for j in range(1, min(p, n - 1 - i) + 1):        # column i below the diagonal
            v = band[:, i, j].copy()
            for m in range(1, min(p - j, i) + 1):         # sum over k = i - m < i
                v -= L[:, i - m, m] * L[:, i - m, m + j] * D[:, i - m]
            L[:, i, j] = v / d
    z = rhs.copy()
    for i in range(n):
        for j in range(1, min(p, i) + 1):
            z[:, i] -= L[:, i - j, j] * z[:, i - j]
    z /= D
    for i in range(n - 1, -1, -1):
        for j in range(1, min(p, n - 1 - i) + 1):
            z[:, i] -= L[:, i, j] * z[:, i + j]
    return z
