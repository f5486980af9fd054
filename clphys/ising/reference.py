"""NumPy twins of the Ising kernels: the same sites, words and decisions, bit
for bit (conventions in :mod:`clphys.ising.backends`). Slow; for tests and the
benchmark's correctness check on small lattices.

    spins = random_spins((8, 8), 2, seed=1)                 # (2, 8, 8) int8
    thr = np.stack([metropolis_thresholds(2, T) for T in (2.0, 2.5)])
    spins = checkerboard_sweeps(spins, thr, n=3, seed=1)    # sweeps 0, 1, 2
    spins = multispin_sweeps(spins, thr, n=3, seed=1, sweep=3)   # joint decisions
"""

from __future__ import annotations

import numpy as np

from .. import rng as _rng
from . import thresholds as _thr
from .backends import multispin_fold

INIT_SWEEP = 2**63 - 1        # reserved sweep number of the random start


def _natural_shape(spins):
    """(R, Lz, Ly, Lx) view shape of an (R, Ly, Lx) or (R, Lz, Ly, Lx) array."""
    if spins.ndim == 3:
        return (spins.shape[0], 1) + spins.shape[1:]
    return spins.shape


def compact_sites(shape, colour):
    """Flat natural-layout index (z, y, x) of each compact site n of `colour`
    in a lattice of shape (Lx, Ly[, Lz])."""
    Lx, Ly = shape[0], shape[1]
    Lz = shape[2] if len(shape) == 3 else 1
    n = np.arange(Lx * Ly * Lz // 2, dtype=np.int64)
    S = Lx // 2
    row = n // S
    y, z = row % Ly, row // Ly
    x = 2 * (n % S) + ((colour + y + z) & 1)
    return row * Lx + x


def _neighbours(shape, sites):
    """Flat indices of the 2*dim neighbours of the flat `sites`."""
    Lx, Ly = shape[0], shape[1]
    Lz = shape[2] if len(shape) == 3 else 1
    x, y, z = sites % Lx, (sites // Lx) % Ly, sites // (Lx * Ly)
    flat = lambda x, y, z: (z * Ly + y) * Lx + x
    out = [flat((x + 1) % Lx, y, z), flat((x - 1) % Lx, y, z),
           flat(x, (y + 1) % Ly, z), flat(x, (y - 1) % Ly, z)]
    if len(shape) == 3:
        out += [flat(x, y, (z + 1) % Lz), flat(x, y, (z - 1) % Lz)]
    return out


def philox_words(shape, n_replicas, colour, sweep, seed):
    """(R, N/2) uint32: the word of every compact site of `colour` in `sweep`."""
    half = int(np.prod(shape)) // 2
    groups = -(-half // 4)
    g, r = np.meshgrid(np.arange(groups), np.arange(n_replicas))
    ctr = np.stack([g.ravel(), r.ravel(), np.full(g.size, sweep & 0xFFFFFFFF),
                    np.full(g.size, 2 * (sweep >> 32) + colour)], axis=1)
    w = _rng.philox_numpy(ctr, _rng.seed_key(seed))
    return w.reshape(n_replicas, groups * 4)[:, :half]


def random_spins(shape, n_replicas, seed):
    """Twin of the random start (init.cl): (R, *reversed(shape)) int8."""
    N = int(np.prod(shape))
    out = np.empty((n_replicas, N), dtype=np.int8)
    for c in (0, 1):
        w = philox_words(shape, n_replicas, c, INIT_SWEEP, seed)
        out[:, compact_sites(shape, c)] = np.where(w >> np.uint32(31), -1, 1)
    return out.reshape((n_replicas,) + tuple(reversed(shape)))


def stateful_states(shape, n_replicas, seed):
    """Initial (R, 2, G) states of the lcg / xorshift32 checkerboard: the
    papers' chained seeding (clphys.rng.chained_seeds), one per work item."""
    groups = -(-(int(np.prod(shape)) // 2) // 4)
    return _rng.chained_seeds(n_replicas * 2 * groups, seed).reshape(n_replicas, 2, groups)


def _stateful_words(states, rng):
    """4 words per state (R, G) -> ((R, 4G) words, new states)."""
    flat = states.ravel()
    steps = _rng.lcg_steps(flat, 4) if rng == "lcg" else _rng.xorshift_steps(flat, 4)   # (4, R*G)
    words = steps.T.reshape(states.shape[0], -1)
    return words, steps[-1].reshape(states.shape)


def checkerboard_sweeps(spins, thresholds, n=1, *, seed=0, sweep=0, rng="philox", states=None):
    """`n` checkerboard sweeps starting at sweep number `sweep`.

    spins: (R, Ly, Lx) or (R, Lz, Ly, Lx) int8; thresholds (R, 2, 2*dim+1).
    rng="philox" uses `seed`; "lcg"/"xorshift32" use and update `states`
    (R, 2, G) (see :func:`stateful_states`). Returns the new spins, or
    (spins, states) for the stateful generators.
    """
    spins = np.array(spins, dtype=np.int8, copy=True)
    R = spins.shape[0]
    shape = tuple(reversed(spins.shape[1:]))
    thresholds = np.asarray(thresholds, dtype=np.uint32)
    flat = spins.reshape(R, -1)
    if rng != "philox":
        states = np.array(states, dtype=np.uint32, copy=True)
    rr = np.arange(R)[:, None]
    for t in range(sweep, sweep + n):
        for c in (0, 1):
            sites = compact_sites(shape, c)
            half = sites.size
            if rng == "philox":
                w = philox_words(shape, R, c, t, seed)
            else:
                w, states[:, c] = _stateful_words(states[:, c], rng)
                w = w[:, :half]
            me = flat[:, sites]
            k = sum((flat[:, nb] == me).astype(np.int64) for nb in _neighbours(shape, sites))
            thr = thresholds[rr, (me < 0).astype(np.int64), k]
            flat[:, sites] = np.where(w <= thr, -me, me)
    return spins if rng == "philox" else (spins, states)


def multispin_sweeps(spins, thresholds, n=1, *, seed=0, sweep=0, spins_per_word="auto"):
    """Twin of the multispin algorithm: `n` sweeps from sweep number `sweep`.

    spins_per_word=1 is the checkerboard twin (one word per site update).
    Otherwise (joint decisions, see cl_kernels/ising/multispin.cl): compact site
    i of row `row` of a colour is bit b = i % 32 of word w = i // 32 (rows of
    Lx < 64 have Lx/2 bits; in 3D where Lx/2 divides 32, k' = multispin_fold
    rows y, y + Ly/k', ... of a z plane share word row z Ly/k' + y mod Ly/k',
    row y + j Ly/k' in bits j Lx/2 ..); the k spins of group g = b // k share the word of
    Philox call h = g // 4 (component g % 4) with counter
    ((row * WR + w) * CALLS_PER_WORD + h, r, t mod 2^32, 2 (t div 2^32) + colour), and
    spin b % k of the group is accepted iff its region, decoded through the
    replica's table, is >= the level of its class.
    """
    if spins_per_word == 1:
        return checkerboard_sweeps(spins, thresholds, n, seed=seed, sweep=sweep)
    spins = np.array(spins, dtype=np.int8, copy=True)
    R = spins.shape[0]
    shape = tuple(reversed(spins.shape[1:]))
    dim = len(shape)
    S = shape[0] // 2
    fold = multispin_fold(shape)
    row_bits, WR = min(S, 32) * fold, max(1, S // 32)
    plan = _thr.decision_plan(np.asarray(thresholds, dtype=np.uint32), spins_per_word, row_bits)
    level = plan.levels(2 * (2 * dim + 1))
    lay = plan.layout
    flat = spins.reshape(R, -1)
    i = np.arange(int(np.prod(shape)) // 2) % S
    row = np.arange(int(np.prod(shape)) // 2) // S
    if lay is not None:
        b = i % 32
        if fold > 1:
            Ly, FOLDED_LY = shape[1], shape[1] // fold
            y, z = row % Ly, row // Ly
            b = (y // FOLDED_LY) * S + i
            row = z * FOLDED_LY + y % FOLDED_LY
        group = b // lay.k
        cpw = -(-(row_bits // lay.k) // 4)
        call = (row * WR + i // 32) * cpw + group // 4
        key = _rng.seed_key(seed)
    for t in range(sweep, sweep + n):
        for c in (0, 1):
            sites = compact_sites(shape, c)
            me = flat[:, sites]
            k = sum((flat[:, nb] == me).astype(np.int64) for nb in _neighbours(shape, sites))
            need = level[(me < 0) * (2 * dim + 1) + k]                  # (R, half)
            accept = need == 0
            if lay is not None:
                for r in range(R):
                    calls = np.arange(call.max() + 1)
                    ctr = np.stack([calls, np.full_like(calls, r), np.full_like(calls, t & 0xFFFFFFFF),
                                    np.full_like(calls, 2 * (t >> 32) + c)], axis=1)
                    words = _rng.philox_numpy(ctr, key)[call, group % 4]
                    regions = _thr.decode_words(words, plan.data[r], lay)
                    accept[r] |= regions[np.arange(len(b)), b % lay.k] >= need[r]
            flat[:, sites] = np.where(accept, -me, me)
    return spins


def sums(spins):
    """(bond sum, magnetization) per replica, int64, of (R, ...) int8 spins."""
    s = np.asarray(spins, dtype=np.int64)
    axes = range(1, s.ndim)
    bond = sum((s * np.roll(s, 1, axis=a)).sum(axis=tuple(axes)) for a in axes)
    return bond, s.sum(axis=tuple(axes))


def trapped(spins, thresholds):
    """(R,) bool: replicas whose checkerboard update is deterministic from
    now on. Such a replica flips every spin of a colour with probability 1
    (dE <= 0 for all of them) in each half-sweep, so it cycles with period 2
    sweeps forever (the 4x4 trap: e.g. 36 states at E = 0 for J > 0, h = 0).

    spins (R, Ly, Lx) or (R, Lz, Ly, Lx) int8; thresholds (R, 2, 2*dim+1)
    uint32 (a flip is certain where the threshold is 2^32 - 1)."""
    s = np.array(spins, dtype=np.int8, copy=True)
    R = s.shape[0]
    shape = tuple(reversed(s.shape[1:]))
    thr = np.asarray(thresholds, dtype=np.uint32)
    flat = s.reshape(R, -1)
    rr = np.arange(R)[:, None]
    ok = np.ones(R, dtype=bool)
    for _ in range(2):                     # two sweeps bring the cycle back to its start
        for c in (0, 1):
            sites = compact_sites(shape, c)
            me = flat[:, sites]
            k = sum((flat[:, nb] == me).astype(np.int64) for nb in _neighbours(shape, sites))
            ok &= np.all(thr[rr, (me < 0).astype(np.int64), k] == 0xFFFFFFFF, axis=1)
            flat[:, sites] = -me
    return ok
