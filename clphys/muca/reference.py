"""NumPy twin of the multicanonical kernels (cl_kernels/muca/), bit for bit:
initial spins, energies, the shared site sequence and the update with its
histograms. Vectorised over walkers, one step at a time: for tests at tiny
sizes and as the CPU baseline of benchmarks/bench_muca.py.

Lattices are (sites, groups) uint32 arrays in the device layout
(geometry.py: bit i of word [s, G] is the spin of walker 32 G + i at site s).
"""

from __future__ import annotations

import numpy as np

from ..rng import philox_numpy, seed_key
from .geometry import LANES, Geometry, groups

TAG_ACCEPT, TAG_SITE, TAG_INIT = 0x6D750001, 0x6D750002, 0x6D750003
_M32 = 0xFFFFFFFF


def _philox(x, y, z, tag, seed):
    """(n, 4) Philox words of counters (x, y, z, tag), arrays broadcast."""
    x, y, z = np.broadcast_arrays(np.asarray(x, np.uint64), np.asarray(y, np.uint64), np.asarray(z, np.uint64))
    ctr = np.stack([x.ravel(), y.ravel(), z.ravel(), np.full(x.size, tag, np.uint64)], axis=1)
    return philox_numpy(ctr, seed_key(seed))


def group_mask(walkers: int, group: int) -> int:
    """Bits of the word of `group` that hold walkers (of `walkers` in all)."""
    real = min(LANES, walkers - LANES * group)
    return _M32 if real >= LANES else (1 << real) - 1


def initial_lattice(geom: Geometry, walkers: int, seed: int, offset: int = 0, total: int | None = None):
    """Random spins of walkers offset .. offset + walkers - 1 (offset a
    multiple of 32): word (s, G) = word s % 4 of Philox((s / 4, global group,
    0, INIT)), the bits of walkers beyond `total` (default offset + walkers) 0."""
    total = offset + walkers if total is None else total
    g0 = offset // LANES
    G = groups(walkers)
    s = np.arange(geom.N, dtype=np.uint64)
    gg = g0 + np.arange(G, dtype=np.uint64)
    words = _philox(s[:, None] >> np.uint64(2), gg[None, :], 0, TAG_INIT, seed).reshape(geom.N, G, 4)
    lat = np.take_along_axis(words, (s & np.uint64(3)).astype(np.int64)[:, None, None].repeat(G, 1),
                             axis=2)[:, :, 0]
    masks = np.array([group_mask(total, int(g)) for g in gg], dtype=np.uint64)
    return (lat & masks[None, :]).astype(np.uint32)


def spins(geom: Geometry, lattice, walkers: int) -> np.ndarray:
    """(walkers, N) int8 spins +-1."""
    lat = np.ascontiguousarray(lattice, np.uint32)
    bits = np.unpackbits(lat.view(np.uint8), axis=1, bitorder="little")[:, :walkers]
    return (2 * bits.T.astype(np.int8) - 1)


def measure(geom: Geometry, lattice, walkers: int):
    """(bins, mags) int32 of every walker: bin = (E - E_min) / 4, M = sum s."""
    s = spins(geom, lattice, walkers).astype(np.int64)
    nb = geom.neighbours(np.arange(geom.N))
    bond = sum((s * s[:, nb[:, 2 * a + 1]]).sum(axis=1) for a in range(geom.dim))
    bins = (geom.dim * geom.N - bond) // 4
    return bins.astype(np.int32), s.sum(axis=1).astype(np.int32)


def sites(geom: Geometry, t0: int, n: int, seed: int) -> np.ndarray:
    """Sites of steps t0 .. t0 + n - 1: floor(word N / 2^32), word t % 4 of
    Philox((t / 4 lo, t / 4 hi, 0, SITE)) (shared by all walkers)."""
    t = t0 + np.arange(n, dtype=np.uint64)
    blocks = t >> np.uint64(2)
    w = _philox(blocks & np.uint64(_M32), blocks >> np.uint64(32), 0, TAG_SITE, seed)
    word = w[np.arange(n), (t & np.uint64(3)).astype(np.int64)].astype(np.uint64)
    return ((word * np.uint64(geom.N)) >> np.uint64(32)).astype(np.int64)


def update(geom: Geometry, lattice, bins, mags, thr, t0, n, n_skip, seed, *, offset=0,
           slots=1, total=None, magnet=False, passages=None, trip_range=None, every=1):
    """Do steps t0 .. t0 + n - 1 on (copies of) the walkers (len(bins) of them,
    global indices from `offset`); returns (lattice, bins, mags,
    hist[slots, nbins], mhist[slots, nbins, nm] or None) with int64 counts, and
    the passage words when `passages` (per walker: passages << 2 | last end,
    Engine.read_passages) is given with trip_range (lo, hi). Walker g counts
    into slot g * slots // total (total: all walkers, default these) at the
    recorded steps t that are multiples of `every`. A flip
    from bin b with k neighbours equal to the spin goes to b + k - dim and is
    accepted iff the walker's word <= thr[b, k] (protocol.thresholds)."""
    lat = np.array(lattice, dtype=np.uint32)
    b = np.array(bins, dtype=np.int64)
    m = np.array(mags, dtype=np.int64)
    W = len(b)
    g = offset + np.arange(W, dtype=np.uint64)
    total = W if total is None else total
    slot = g.astype(np.int64) * slots // total
    grp, lane = np.arange(W) // LANES, (np.arange(W) % LANES).astype(np.uint32)
    hist = np.zeros((slots, geom.nbins), dtype=np.int64)
    mhist = np.zeros((slots, geom.nbins, geom.nm), dtype=np.int64) if magnet else None
    thr = np.asarray(thr, dtype=np.uint32).reshape(geom.nbins, geom.ncls)
    site = sites(geom, t0, n, seed)
    nbr = geom.neighbours(site)
    words = None
    track = passages is not None
    if track:
        tr = np.array(passages, dtype=np.int64)
        lo, hi = trip_range
    one = np.uint32(1)
    for i in range(n):
        t = t0 + i
        if words is None or t % 4 == 0:
            words = _philox(t >> 2 & _M32, t >> 34, g, TAG_ACCEPT, seed)
        w = words[:, t % 4]
        s = (lat[site[i], grp] >> lane) & one
        k = sum(((lat[nb, grp] >> lane) & one) == s for nb in nbr[i]).astype(np.int64)
        acc = w <= thr[b, k]
        flips = np.zeros(lat.shape[1], np.uint32)
        np.bitwise_or.at(flips, grp, acc.astype(np.uint32) << lane)
        lat[site[i]] ^= flips
        b = b + np.where(acc, k - geom.dim, 0)
        if magnet:
            m = m + np.where(acc, np.where(s == 1, -2, 2), 0)
        if track:
            end = np.where(b <= lo, 1, np.where(b >= hi, 2, 0))
            new = (end != 0) & (end != (tr & 3))
            tr = np.where(new, (((tr >> 2) + ((tr & 3) != 0)) << 2) | end, tr)
        if i >= n_skip and t % every == 0:
            np.add.at(hist, (slot, b), 1)
            if mhist is not None:       # (magnet)
                np.add.at(mhist, (slot, b, np.abs(m) // 2), 1)
    out = (lat, b.astype(np.int32), m.astype(np.int32), hist, mhist)
    return out + (tr.astype(np.uint32),) if track else out
