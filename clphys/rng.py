"""Random numbers: device generators and their bit-exact NumPy twins.

Generators (``generator=``):

``"philox"`` (default)
    Philox4x32-10 (Random123). Counter based: every word is a pure function of
    (key, counter). ``seed`` gives the key (low, high 32 bits). The word
    stream of :func:`uniform` is stream 0: word k is component k % 4 of
    ``philox((k // 4, 0, 0, 0), key)``; stream j uses counters (i, j, 0, 0).
``"lcg"``
    The LCG array of the GPU Ising papers: x <- (1664525 x + 1013904223) mod 2^32,
    one state per stream; initial states chained x_{0,j+1} = 16807 x_{0,j}
    mod 2^32 from x_{0,0} = 1. Seed s starts the chain s * streams links later,
    so seed 0 is the papers' seeding. Word k is the (k // streams + 1)-th
    output of stream k % streams.
``"xorshift32"``
    Marsaglia's xorshift32 (13, 17, 5), streams seeded like ``lcg`` (all
    initial states are odd, so never 0). Same word layout as ``lcg``.
``"halfbit-lcg"``
    x <- (0xDEECE66D x + 0xB) mod 2^32; one 32-bit state serves 64 words per
    round through 4 sub-streams started from state ^ (0, 0x2545F491,
    0x9E3779B9, 0x6A09E667), 16 steps each; the state written back is
    sub-stream 0's last value. States seeded like ``lcg``. Words of round r of
    stream j are at ((r * streams + j) * 64 + 16 * s + i).

Floats are made the same way on every device: uniform = (w >> 8) * 2^-24 in
[0, 1) (exact, never 1); normals by Box-Muller from word pairs (2i, 2i+1) with
u1 = ((w >> 8) + 1) * 2^-24 in (0, 1] (never log 0) and angle 2 pi u01.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from . import _validate as check
from ._typing import ArrayLike
from .runtime import DeviceSpec, check_host_memory, check_memory, items_that_fit, resolve_device

GENERATORS = ("philox", "lcg", "halfbit-lcg", "xorshift32")
DEFAULT_STREAMS = 4096
HALFBIT_XOR = np.array([0x00000000, 0x2545F491, 0x9E3779B9, 0x6A09E667], dtype=np.uint32)

_M32 = np.uint64(0xFFFFFFFF)
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)


# ---------------------------------------------------------------- host side

def seed_key(seed: int) -> tuple[int, int]:
    """The Philox key (k0, k1) of a 64-bit seed."""
    seed = check.seed(seed)
    return seed & 0xFFFFFFFF, seed >> 32


def chained_seeds(n: int, seed: int = 0) -> np.ndarray:
    """x_{0,j} = 16807^(j + seed*n) mod 2^32, j < n: the papers' LCG seeding."""
    n = check.integer("streams", n, 1)
    seed = check.seed(seed)
    first = pow(16807, seed * n, 2**32)
    mult = np.full(n, 16807, dtype=np.uint64)
    mult[0] = first
    # Products wrap mod 2^64; their low 32 bits are the products mod 2^32.
    return (np.cumprod(mult, dtype=np.uint64) & _M32).astype(np.uint32)


def philox_numpy(counters: ArrayLike, keys: ArrayLike) -> np.ndarray:
    """Philox4x32-10 in NumPy: counters (n, 4), keys (n, 2) or (2,) -> (n, 4) uint32."""
    c = np.asarray(counters, dtype=np.uint64).reshape(-1, 4)
    k = np.broadcast_to(np.asarray(keys, dtype=np.uint64).reshape(-1, 2), (len(c), 2))
    c0, c1, c2, c3 = (c[:, i].copy() for i in range(4))
    k0, k1 = k[:, 0].copy(), k[:, 1].copy()
    m0, m1 = np.uint64(PHILOX_M[0]), np.uint64(PHILOX_M[1])
    for r in range(10):
        if r:
            k0 = (k0 + np.uint64(PHILOX_W[0])) & _M32
            k1 = (k1 + np.uint64(PHILOX_W[1])) & _M32
        p0, p1 = m0 * c0, m1 * c2
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & _M32, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & _M32
    return np.stack([c0, c1, c2, c3], axis=1).astype(np.uint32)


def lcg_steps(states: np.ndarray, steps: int, a: int = 1664525, c: int = 1013904223) -> np.ndarray:
    """(steps, n) successive words of x <- a x + c mod 2^32 from each of `states` (n,);
    the defaults are LCG32's, the NumPy twin of rng/lcg.cl."""
    out = np.empty((steps, len(states)), dtype=np.uint32)
    x = states.astype(np.uint64)
    for t in range(steps):
        x = (np.uint64(a) * x + np.uint64(c)) & _M32
        out[t] = x
    return out


def xorshift_steps(states: np.ndarray, steps: int) -> np.ndarray:
    """(steps, n) successive words of xorshift32 (13, 17, 5) from each of `states`
    (n,): the NumPy twin of rng/xorshift.cl."""
    out = np.empty((steps, len(states)), dtype=np.uint32)
    x = states.astype(np.uint32)
    for t in range(steps):
        x = x ^ (x << np.uint32(13))
        x = x ^ (x >> np.uint32(17))
        x = x ^ (x << np.uint32(5))
        out[t] = x
    return out


def halfbit_rounds(states: np.ndarray, rounds: int) -> np.ndarray:
    """(rounds, n, 64) words of the half-bit LCG from each of `states` (n,); see the
    module doc."""
    out = np.empty((rounds, len(states), 64), dtype=np.uint32)
    x = states.astype(np.uint32)
    for r in range(rounds):
        for s in range(4):
            ys = lcg_steps(x ^ HALFBIT_XOR[s], 16, 0xDEECE66D, 0xB)   # (16, n)
            out[r, :, 16 * s:16 * s + 16] = ys.T
            if s == 0:
                last0 = ys[-1]
        x = last0
    return out


def words_numpy(n: int, seed: int = 0, generator: str = "philox",
                streams: int = DEFAULT_STREAMS) -> np.ndarray:
    """The first n 32-bit words of `generator` (NumPy twin of :func:`words`)."""
    n, generator = _check_common(n, generator)
    streams = check.integer("streams", streams, 1, 2**24)
    if generator == "philox":
        blocks = -(-n // 4)
        ctr = np.zeros((blocks, 4), dtype=np.uint64)
        ctr[:, 0] = np.arange(blocks)
        return philox_numpy(ctr, seed_key(seed)).ravel()[:n]
    states = chained_seeds(streams, seed)
    if generator == "halfbit-lcg":
        rounds = -(-n // (64 * streams))
        return halfbit_rounds(states, rounds).ravel()[:n]
    steps = -(-n // streams)
    table = lcg_steps(states, steps) if generator == "lcg" else xorshift_steps(states, steps)
    return table.ravel()[:n]


def uniform_from_words(w: np.ndarray) -> np.ndarray:
    return ((np.asarray(w, dtype=np.uint32) >> np.uint32(8)).astype(np.float32)
            * np.float32(2.0**-24))


def normal_from_words(w: np.ndarray, n: int) -> np.ndarray:
    """Box-Muller of word pairs (2i, 2i+1), float32 (device results agree to a few ulp)."""
    w = np.asarray(w, dtype=np.uint32)
    u1 = ((w[0::2] >> np.uint32(8)).astype(np.float64) + 1.0) * 2.0**-24
    u2 = (w[1::2] >> np.uint32(8)).astype(np.float64) * 2.0**-24
    r = np.sqrt(-2.0 * np.log(u1))
    z = np.empty(2 * len(u1), dtype=np.float64)
    z[0::2], z[1::2] = r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)
    return z[:n].astype(np.float32)


def uniform_numpy(n: int, seed: int = 0, generator: str = "philox", streams: int = DEFAULT_STREAMS
                  ) -> np.ndarray:
    return uniform_from_words(words_numpy(n, seed, generator, streams))


def normal_numpy(n: int, seed: int = 0, generator: str = "philox", streams: int = DEFAULT_STREAMS
                 ) -> np.ndarray:
    n = check.integer("n", n, 0)
    return normal_from_words(words_numpy(n + (n & 1), seed, generator, streams), n)


def checksum_numpy(streams: int, steps: int, seed: int = 0, generator: str = "philox") -> np.ndarray:
    """Twin of :func:`checksum`: XOR of each stream's first words."""
    generator = check.choice("generator", generator, GENERATORS)
    streams = check.integer("streams", streams, 1)
    steps = check.integer("steps", steps, 0)
    if generator == "philox":
        i, j = np.meshgrid(np.arange(steps), np.arange(streams), indexing="ij")
        ctr = np.stack([i.ravel(), j.ravel(), 0 * i.ravel(), 0 * i.ravel()], axis=1)
        w = philox_numpy(ctr, seed_key(seed)).reshape(steps, streams, 4)
        return np.bitwise_xor.reduce(w, axis=(0, 2)) if steps else np.zeros(streams, np.uint32)
    states = chained_seeds(streams, seed)
    if generator == "halfbit-lcg":
        w = halfbit_rounds(states, steps)
        return np.bitwise_xor.reduce(w, axis=(0, 2)) if steps else np.zeros(streams, np.uint32)
    table = lcg_steps(states, steps) if generator == "lcg" else xorshift_steps(states, steps)
    return np.bitwise_xor.reduce(table, axis=0) if steps else np.zeros(streams, np.uint32)


# ---------------------------------------------------------------- device side

def _check_common(n, generator):
    n = check.integer("n", n, 0, 2**34)
    generator = check.choice("generator", generator, GENERATORS)
    return n, generator


def philox(counters: ArrayLike, keys: ArrayLike, device: DeviceSpec = None) -> np.ndarray:
    """Philox4x32-10 on the device: counters (n, 4) and keys (n, 2) or (2,),
    unsigned 32-bit integers, -> (n, 4) uint32."""
    c = np.asarray(counters)
    k = np.asarray(keys)
    for name, a in (("counters", c), ("keys", k)):
        if a.dtype.kind not in "ui" or (a.size and (a.min() < 0 or a.max() > 0xFFFFFFFF)):
            raise ValueError(f"{name} must hold unsigned 32-bit integers, got dtype {a.dtype}")
    if c.ndim != 2 or c.shape[1] != 4:
        raise ValueError(f"counters must have shape (n, 4), got {c.shape}")
    if k.shape != (2,) and (k.ndim != 2 or k.shape != (len(c), 2)):
        raise ValueError(f"keys must have shape (2,) or ({len(c)}, 2), got {k.shape}")
    n = len(c)
    if n == 0:
        return np.zeros((0, 4), dtype=np.uint32)
    dev = resolve_device(device)
    per_block = 16 + 8 + 16                       # counters, keys, result
    piece = min(n, items_that_fit(dev, per_block, limit=2**31))
    if piece == 0:
        check_memory(dev, {"one Philox block": per_block}, "rng.philox")
    c = np.ascontiguousarray(c, dtype=np.uint32)
    k = np.ascontiguousarray(np.broadcast_to(k.reshape(-1, 2), (n, 2)), dtype=np.uint32)
    prg = dev.build("rng/generate.cl", generator="philox")
    cd, kd = cla.empty(dev.queue, (piece, 4), np.uint32), cla.empty(dev.queue, (piece, 2), np.uint32)
    out_d = cla.empty(dev.queue, (piece, 4), np.uint32)
    out = np.empty((n, 4), dtype=np.uint32)
    for start in range(0, n, piece):              # pieces where n blocks do not fit the device
        m = min(piece, n - start)
        cl.enqueue_copy(dev.queue, cd.data, c[start:start + m])
        cl.enqueue_copy(dev.queue, kd.data, k[start:start + m])
        prg.rng_philox_blocks(dev.queue, (m,), None, cd.data, kd.data, out_d.data, np.uint32(m))
        cl.enqueue_copy(dev.queue, out[start:start + m], out_d.data)
    return out


def _in_pieces(dev, n, seed, generator, streams, bytes_per_word, what, piece_done):
    """Generate words [0, n) on `dev` in pieces that fit its memory (each a whole
    number of steps of every stream, so the words are those of one launch);
    ``piece_done(prg, start, words, m)`` takes each piece (device array, m words)."""
    unit = {"philox": 4, "halfbit-lcg": 64 * streams}.get(generator, streams)
    unit += unit & 1                              # Box-Muller takes words in pairs
    fixed = 4 * streams if generator != "philox" else 0
    piece = items_that_fit(dev, bytes_per_word, fixed) // unit * unit
    if piece == 0:
        check_memory(dev, {"words of one step": unit * bytes_per_word, "stream states": fixed}, what,
                     "Use fewer streams.")
    piece = min(piece, -(-n // unit) * unit)
    prg = dev.build("rng/generate.cl", generator=generator)
    states = None if generator == "philox" else cla.to_device(dev.queue, chained_seeds(streams, seed))
    k0, k1 = seed_key(seed)
    words_d = cla.empty(dev.queue, piece, np.uint32)
    for start in range(0, n, piece):
        m = min(piece, n - start)
        if generator == "philox":
            prg.rng_words(dev.queue, (-(-m // 4),), None, words_d.data, np.uint64(m), np.uint32(k0),
                          np.uint32(k1), np.uint64(start // 4))
        else:
            prg.rng_words(dev.queue, (streams,), None, words_d.data, np.uint64(m), states.data)
        piece_done(prg, start, words_d, m)


def _check_generate(n, seed, generator, streams, bytes_per_value, what):
    n, generator = _check_common(n, generator)
    seed = check.seed(seed)
    streams = check.integer("streams", streams, 1, 2**24)
    check_host_memory(n * bytes_per_value, f"{what}({n})")
    return n, seed, generator, streams


def words(n: int, seed: int = 0, generator: str = "philox", streams: int = DEFAULT_STREAMS,
          device: DeviceSpec = None) -> np.ndarray:
    """The first n 32-bit words of `generator` computed on the device (uint32).
    Runs longer than the device's memory are made in pieces (same words)."""
    n, seed, generator, streams = _check_generate(n, seed, generator, streams, 4, "rng.words")
    out = np.empty(n, dtype=np.uint32)
    if n == 0:
        return out
    dev = resolve_device(device)

    def copy(prg, start, w, m):
        cl.enqueue_copy(dev.queue, out[start:start + m], w.data)

    _in_pieces(dev, n, seed, generator, streams, 4, "rng.words", copy)
    return out


def uniform(n: int, seed: int = 0, generator: str = "philox", streams: int = DEFAULT_STREAMS,
            device: DeviceSpec = None) -> np.ndarray:
    """n float32 uniforms in [0, 1) (never 1), identical on every device."""
    n, seed, generator, streams = _check_generate(n, seed, generator, streams, 4, "rng.uniform")
    out = np.empty(n, dtype=np.float32)
    if n == 0:
        return out
    dev = resolve_device(device)

    def convert(prg, start, w, m):
        out[start:start + m] = uniform_from_words(w.get()[:m])

    _in_pieces(dev, n, seed, generator, streams, 4, "rng.uniform", convert)
    return out


def normal(n: int, seed: int = 0, generator: str = "philox", streams: int = DEFAULT_STREAMS,
           device: DeviceSpec = None) -> np.ndarray:
    """n float32 standard normals by Box-Muller on the device (never log 0)."""
    n, seed, generator, streams = _check_generate(n, seed, generator, streams, 4, "rng.normal")
    out = np.empty(n, dtype=np.float32)
    if n == 0:
        return out
    dev = resolve_device(device)
    z = {}

    def box_muller(prg, start, w, m):
        if "d" not in z:
            z["d"] = cla.empty(dev.queue, w.size, np.float32)
        m_out = min(m, n - start)
        prg.rng_box_muller(dev.queue, (-(-m // 2),), None, w.data, z["d"].data, np.uint64(m_out))
        cl.enqueue_copy(dev.queue, out[start:start + m_out], z["d"].data)

    _in_pieces(dev, n + (n & 1), seed, generator, streams, 8, "rng.normal", box_muller)
    return out


def checksum(streams: int, steps: int, seed: int = 0, generator: str = "philox",
             device: DeviceSpec = None) -> np.ndarray:
    """XOR of each stream's first `steps` draws (Philox: blocks of 4 words;
    halfbit-lcg: rounds of 64 words), without storing them: the throughput
    benchmark's kernel. Returns (streams,) uint32."""
    generator = check.choice("generator", generator, GENERATORS)
    streams = check.integer("streams", streams, 1, 2**30)
    steps = check.integer("steps", steps, 0, 2**32 - 1)
    seed = check.seed(seed)
    dev = resolve_device(device)
    check_memory(dev, {"checksums": 4 * streams, "stream states": 4 * streams}, "rng.checksum",
                 "Use fewer streams.")
    prg = dev.build("rng/generate.cl", generator=generator)
    out = cla.empty(dev.queue, streams, np.uint32)
    if generator == "philox":
        k0, k1 = seed_key(seed)
        prg.rng_checksum(dev.queue, (streams,), None, out.data, np.uint32(steps), np.uint32(k0), np.uint32(k1))
    else:
        states = cla.to_device(dev.queue, chained_seeds(streams, seed))
        prg.rng_checksum(dev.queue, (streams,), None, out.data, np.uint32(steps), states.data)
    return out.get()


def words_per_step(generator: str) -> int:
    """Words one checksum step draws: 4 for Philox, 64 for halfbit-lcg, else 1."""
    return {"philox": 4, "halfbit-lcg": 64}.get(check.choice("generator", generator, GENERATORS), 1)
