"""NumPy twin of the multicanonical kernels (cl_kernels/muca/), bit for bit:
initial spins, energies, the shared site sequence and the update with its
histograms. Vectorised over walkers, one step at a time: for tests at tiny
sizes and as the CPU baseline of benchmarks/bench_muca.py.

Lattices are (words, walkers) uint32 arrays, the device layout (geometry.py).
"""

from __future__ import annotations

import numpy as np

from ..rng import philox_numpy, seed_key
from .geometry import Geometry

TAG_ACCEPT, TAG_SITE, TAG_INIT = 0x6D750001, 0x6D750002, 0x6D750003
_M32 = 0xFFFFFFFF


def _philox(blocks_lo, blocks_hi, walkers, tag, seed):
    """(n, 4) Philox words of counters (lo, hi, walker, tag), arrays broadcast."""
    lo, hi, g = np.broadcast_arrays(np.asarray(blocks_lo, np.uint64), np.asarray(blocks_hi, np.uint64),
                                    np.asarray(walkers, np.uint64))
    ctr = np.stack([lo.ravel(), hi.ravel(), g.ravel(), np.full(lo.size, tag, np.uint64)], axis=1)
    return philox_numpy(ctr, seed_key(seed))


def initial_lattice(geom: Geometry, walkers: int, seed: int, offset: int = 0) -> np.ndarray:
    g = offset + np.arange(walkers, dtype=np.uint64)
    w = np.arange(geom.words)
    words = _philox(w[:, None] >> 2, 0, g[None, :], TAG_INIT, seed).reshape(geom.words, walkers, 4)
    lat = np.take_along_axis(words, (w & 3)[:, None, None].repeat(walkers, 1), axis=2)[:, :, 0]
    rem = geom.L % 32
    if rem:
        last = (w % geom.wpr) == geom.wpr - 1
        lat[last] &= np.uint32((1 << rem) - 1)
    return lat.astype(np.uint32)


def spins(geom: Geometry, lattice: np.ndarray) -> np.ndarray:
    """(walkers, rows, L) int8 spins +-1 from a bit-packed lattice."""
    lat = np.asarray(lattice, np.uint32).reshape(geom.rows, geom.wpr, -1)
    x = np.arange(geom.L)
    bits = (lat[:, x // 32, :] >> (x % 32).astype(np.uint32)[None, :, None]) & 1
    return (2 * bits.astype(np.int8) - 1).transpose(2, 0, 1)


def measure(geom: Geometry, lattice: np.ndarray):
    """(bins, mags) int32 of every walker: bin = (E - E_min) / 4, M = sum s."""
    s = spins(geom, lattice).astype(np.int64).reshape((-1,) + (geom.L,) * geom.dim)
    bond = sum((s * np.roll(s, -1, axis=a)).sum(axis=tuple(range(1, geom.dim + 1)))
               for a in range(1, geom.dim + 1))
    bins = (geom.dim * geom.N - bond) // 4
    return bins.astype(np.int32), s.sum(axis=tuple(range(1, geom.dim + 1))).astype(np.int32)


def site_descriptors(geom: Geometry, t0: int, n: int, seed: int) -> np.ndarray:
    """(n, 4) uint32 descriptors of steps t0 .. t0 + n - 1 (see setup.cl)."""
    t = t0 + np.arange(n, dtype=np.uint64)
    blocks = t >> np.uint64(2)
    w = _philox(blocks & np.uint64(_M32), blocks >> np.uint64(32), 0, TAG_SITE, seed)
    word = w[np.arange(n), (t & np.uint64(3)).astype(np.int64)].astype(np.uint64)
    s = ((word * np.uint64(geom.N)) >> np.uint64(32)).astype(np.int64)
    L = geom.L
    x, row = s % L, s // L
    y, z = row % L, row // L
    xm, xp, ym, yp, zm, zp = (x - 1) % L, (x + 1) % L, (y - 1) % L, (y + 1) % L, (z - 1) % L, (z + 1) % L
    d = np.zeros((n, 4), dtype=np.uint64)
    d[:, 0] = x | (xm << 10) | (xp << 20)
    d[:, 1] = row
    d[:, 2] = (z * L + ym) | ((z * L + yp) << 16)
    if geom.dim == 3:
        d[:, 3] = (zm * L + y) | ((zp * L + y) << 16)
    return d.astype(np.uint32)


def update(geom: Geometry, lattice, bins, mags, thr, t0, n, n_skip, seed, *, offset=0,
           slots=1, total=None, magnet=False, passages=None, trip_range=None, tm=False):
    """Do steps t0 .. t0 + n - 1 on (copies of) the walkers; returns
    (lattice, bins, mags, hist[slots, nbins], mhist[slots, nbins, nm] or None)
    with int64 counts, and the passage words when `passages` (per walker:
    passages << 2 | last end, Engine.read_passages) is given with trip_range
    (lo, hi). Walker g (global index) counts into slot g * slots // total
    (total: all walkers, default these). With `tm`, hist[slots, nbins, 2 dim + 1]
    counts (bin before the step, k of the proposed flip) instead."""
    lat = np.array(lattice, dtype=np.uint32)
    b = np.array(bins, dtype=np.int64)
    m = np.array(mags, dtype=np.int64)
    W = lat.shape[1]
    g = offset + np.arange(W, dtype=np.uint64)
    total = W if total is None else total
    slot = g.astype(np.int64) * slots // total
    hist = np.zeros((slots, geom.nbins) + ((geom.ncls,) if tm else ()), dtype=np.int64)
    mhist = np.zeros((slots, geom.nbins, geom.nm), dtype=np.int64) if magnet else None
    thr = np.asarray(thr, dtype=np.uint32).reshape(geom.nbins, geom.ncls)
    sites = site_descriptors(geom, t0, n, seed).astype(np.int64)
    wpr = geom.wpr
    words = None
    track = passages is not None
    if track:
        tr = np.array(passages, dtype=np.int64)
        lo, hi = trip_range
    for i in range(n):
        t = t0 + i
        if words is None or t % 4 == 0:
            words = _philox(t >> 2 & _M32, t >> 34, g, TAG_ACCEPT, seed)
        w = words[:, t % 4]
        d = sites[i]
        x, xm, xp = d[0] & 1023, (d[0] >> 10) & 1023, d[0] >> 20
        rows = [d[2] & 0xFFFF, d[2] >> 16] + ([d[3] & 0xFFFF, d[3] >> 16] if geom.dim == 3 else [])

        def bit(row, xx):
            return (lat[row * wpr + xx // 32] >> np.uint32(xx % 32)) & np.uint32(1)

        s = bit(d[1], x)
        nb = bit(d[1], xm).astype(np.int64) + bit(d[1], xp)
        for r in rows:
            nb = nb + bit(r, x)
        k = np.where(s == 1, nb, 2 * geom.dim - nb)
        acc = w <= thr[b, k]
        entry = (slot, b, k) if tm else None
        lat[d[1] * wpr + x // 32] ^= acc.astype(np.uint32) << np.uint32(x % 32)
        b = b + np.where(acc, k - geom.dim, 0)
        if magnet:
            m = m + np.where(acc, np.where(s == 1, -2, 2), 0)
        if track:
            end = np.where(b <= lo, 1, np.where(b >= hi, 2, 0))
            new = (end != 0) & (end != (tr & 3))
            tr = np.where(new, (((tr >> 2) + ((tr & 3) != 0)) << 2) | end, tr)
        if i >= n_skip:
            np.add.at(hist, entry or (slot, b), 1)
            if magnet:
                np.add.at(mhist, (slot, b, np.abs(m) // 2), 1)
    out = (lat, b.astype(np.int32), m.astype(np.int32), hist, mhist)
    return out + (tr.astype(np.uint32),) if track else out
