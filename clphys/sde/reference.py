"""NumPy twins of the SDE kernels' random numbers and schemes: the
Gaussians the device draws (bit-exact words, float32 Box-Muller to a few
ulp), and vectorized Euler-Maruyama / SRK2 steps.  Used by the tests and the
benchmark (as the CPU baseline and to validate device results)."""

from __future__ import annotations

import numpy as np

from .. import _validate as check
from ..rng import chained_seeds, philox_numpy, seed_key

__all__ = ["philox_normals", "xorshift_normals", "kuramoto_normals", "integrate"]


def _box_muller(a, b):
    """The device's Box-Muller of word arrays a, b (normal.cl), in float64."""
    u1 = ((a >> np.uint32(8)).astype(np.float64) + 1.0) * 2.0**-24
    u2 = (b >> np.uint32(8)).astype(np.float64) * 2.0**-24
    r = np.sqrt(-2.0 * np.log(u1))
    return r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)


def philox_normals(seed, paths, j_start, count) -> np.ndarray:
    """Gaussians j_start .. j_start + count - 1 of each path in `paths` under
    rng="philox" (Ensemble's module doc): shape (len(paths), count)."""
    seed = check.seed(seed)
    paths = np.asarray(paths, dtype=np.uint64).ravel()
    j = np.arange(j_start, j_start + count, dtype=np.uint64)
    blocks = np.unique(j >> np.uint64(2))
    P, B = np.meshgrid(paths, blocks, indexing="ij")
    ctr = np.stack([P.ravel() & np.uint64(0xFFFFFFFF), B.ravel() & np.uint64(0xFFFFFFFF),
                    B.ravel() >> np.uint64(32), np.zeros(P.size, np.uint64)], axis=1)
    w = philox_numpy(ctr, seed_key(seed)).reshape(len(paths), len(blocks), 4)
    z0, z1 = _box_muller(w[..., 0], w[..., 1])
    z2, z3 = _box_muller(w[..., 2], w[..., 3])
    z = np.stack([z0, z1, z2, z3], axis=-1).reshape(len(paths), 4 * len(blocks))
    first = int(blocks[0]) * 4 if len(blocks) else 0
    return z[:, j.astype(np.int64) - first]


def xorshift_normals(seed, n_total, count) -> np.ndarray:
    """The first `count` Gaussians of each of the n_total paths under
    rng="xorshift32": Box-Muller pairs of successive words. (n_total, count)."""
    x = chained_seeds(n_total, seed).astype(np.uint32)
    out = np.empty((n_total, count + (count & 1)))
    for m in range(0, count, 2):
        w = []
        for _ in range(2):
            x = x ^ (x << np.uint32(13))
            x = x ^ (x >> np.uint32(17))
            x = x ^ (x << np.uint32(5))
            w.append(x.copy())
        out[:, m], out[:, m + 1] = _box_muller(w[0], w[1])
    return out[:, :count]


def kuramoto_normals(seed, n, step) -> np.ndarray:
    """The Gaussians of oscillators 0..n-1 at time step `step` in the Kuramoto
    kernels: oscillator i takes component i % 4 of the Box-Muller pairs of
    philox((i // 4, step, step >> 32, 2), key(seed))."""
    q = np.arange(-(-n // 4), dtype=np.uint64)
    step = np.uint64(step)
    ctr = np.stack([q, np.full_like(q, step & np.uint64(0xFFFFFFFF)),
                    np.full_like(q, step >> np.uint64(32)), np.full_like(q, 2)], axis=1)
    w = philox_numpy(ctr, seed_key(seed))
    z0, z1 = _box_muller(w[:, 0], w[:, 1])
    z2, z3 = _box_muller(w[:, 2], w[:, 3])
    return np.stack([z0, z1, z2, z3], axis=1).ravel()[:n]


def integrate(drift, x, b, dt, steps, normals, scheme="srk2", t0=0.0, period=None, dtype=np.float64):
    """Advance x (n_vars, n) by `steps` steps of dX = drift(X, t) dt + b dW.

    drift(x, t) -> array like x; b (n_vars, n_sources) constant; normals(step)
    -> (n_sources, n) standard Gaussians of that step; time is kept modulo
    `period` if given.  Returns the final x (float `dtype` arithmetic)."""
    x = np.array(x, dtype=dtype)
    b = np.asarray(b, dtype=dtype)
    dt = dtype(dt)
    sq = np.sqrt(dt)
    t = dtype(t0)
    for n in range(steps):
        w = (b @ np.asarray(normals(n), dtype=dtype)) * sq
        a = drift(x, t)
        t1 = t + dt
        if period is not None and t1 >= period:
            t1 -= dtype(period)
        if scheme == "euler":
            x = x + a * dt + w
        else:
            y = x + a * dt + w
            x = x + dtype(0.5) * dt * (a + drift(y, t1)) + w
        t = t1
    return x
