"""The anti-correlated random walk (ACRW) of Preis, Virnau, Paul, Schneider,
New J. Phys. 11, 093024 (2009), generated on the device from Philox."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .. import _validate
from ..progress import Progress, check_progress
from ..rng import philox_numpy, seed_key
from ..runtime import check_memory, items_that_fit, resolve_device, run_sliced, workspace

__all__ = ["acrw", "acrw_numpy", "acrw_thresholds"]

MAX_N = 2**31 - 1
COUNTER_TAG = 0x41435257          # "ACRW": third counter word, keeps the stream apart
BLOCK = 1024                      # steps per work item


def _args(n, phi, seed):
    n = _validate.integer("n", n, 1, MAX_N)
    phi = _validate.real("phi", phi, 0.0, 0.5)
    return n, phi, _validate.seed(seed)


def acrw_thresholds(phi: float) -> tuple[int, int]:
    """Integer thresholds on a uint32 word x: step +1 if x < thr1, -1 if
    thr1 <= x < thr2, 0 otherwise; P(+1) = P(-1) = thr1 / 2^32 = round(φ 2^32) / 2^32."""
    thr1 = int(round(_validate.real("phi", phi, 0.0, 0.5) * 2.0**32))
    return thr1, 2 * thr1


PIECE_BLOCKS = 1 << 14           # blocks per piece at most (64 MiB of int32 values)
# The first time-bounded slice covers about this many blocks (then run_sliced adapts it).
FIRST_SLICE_BLOCKS = {True: 1 << 14, False: 1 << 6}        # by DeviceFacts.is_gpu


def acrw(n: int, phi: float, seed: int = 0, device=None, progress=None) -> np.ndarray:
    """The anti-correlated random walk p(0 .. n-1), generated on the device.

    p(t) = a(t) + b(t): a(t+1) = a(t) + ξ_t with ξ_t = ±1 with probability φ each and 0
    otherwise, b(t) ∈ {0, 1} with probability 1/2 each, all draws independent.

    Parameters
    ----------
    n : int
        Points, 1 .. 2^31 - 1 (the result needs 8 n bytes of host memory).
    phi : float
        φ in [0, 1/2] (rounded to a multiple of 2^-32); 0.044 mimics the Bund future.
    seed : int
        0 .. 2^64 - 1: the Philox key (clphys.rng.seed_key).
    device, progress
        As for :func:`hurst`.

    Returns
    -------
    numpy.ndarray
        int64 prices; the same on every device, and :func:`acrw_numpy`'s bit for bit.

    Raises
    ------
    ValueError, TypeError
        Bad input, before any device work.

    Notes
    -----
    The increments have ρ(1) = -1/(2(1 + 4φ)), ρ(k ≥ 2) = 0 and ⟨(p(t+Δt) - p(t))²⟩ =
    2φΔt + 1/2 (clphys.exact.timeseries).  Step t draws philox4x32-10 at counter
    (t mod 2^32, t div 2^32, 0x41435257, 0); docs/timeseries.md has the device side.

    Examples
    --------
    >>> np.array_equal(acrw(10**5, 0.044, seed=1), acrw_numpy(10**5, 0.044, seed=1))
    True
    """
    n, phi, seed = _args(n, phi, seed)
    check_progress(progress)
    dev = resolve_device(device)
    nblocks = -(-n // BLOCK)
    piece = _piece_blocks(dev, n, nblocks)
    out = np.empty(n, np.int64)             # host memory first: a MemoryError costs nothing
    k0, k1 = seed_key(seed)
    thr1, thr2 = acrw_thresholds(phi)
    prg = dev.build("timeseries/acrw.cl")
    queue = dev.queue
    common = (np.uint64(n), np.uint32(BLOCK), np.uint32(k0), np.uint32(k1), np.uint64(thr1),
              np.uint64(thr2))
    sums = cla.empty(queue, nblocks, np.int32)
    buf = cla.empty(queue, piece * BLOCK, np.int32)
    host = np.empty(piece * BLOCK, np.int32)

    def launch(kernel, j0, count, data, *dest):
        kernel(queue, (-(-count // 64) * 64,), (64,), *common, data, np.uint32(j0),
               np.uint32(count), *dest)

    def block_sums(j0, count):
        launch(prg.ts_acrw_block_sums, j0, count, sums.data)

    def fill(j0, count):
        launch(prg.ts_acrw_fill, j0, count, offsets.data, buf.data)
        a, b = j0 * BLOCK, min(n, (j0 + count) * BLOCK)
        cl.enqueue_copy(queue, host[:b - a], buf.data)      # blocking
        out[a:b] = host[:b - a]

    first = FIRST_SLICE_BLOCKS[dev.facts.is_gpu]
    with Progress(2 * nblocks, progress, label="acrw") as bar:
        run_sliced(nblocks, block_sums, queue, bar=bar, what="blocks (first pass)", first=first)
        starts = np.zeros(nblocks, dtype=np.int64)
        np.cumsum(sums.get()[:-1], out=starts[1:])
        offsets = workspace.device_array(dev, starts.astype(np.int32))
        run_sliced(nblocks, fill, queue, bar=bar, what="blocks (second pass)", first=first,
                   largest=piece)
    return out


def _piece_blocks(dev, n, nblocks):
    """Blocks of the series written per piece: as many as fit next to the
    per-block sums and offsets (ValueError naming them if not even one does)."""
    fixed = {"block sums": 4 * nblocks, "block offsets": 4 * nblocks}
    piece = items_that_fit(dev, 4 * BLOCK, sum(fixed.values()), limit=min(nblocks, PIECE_BLOCKS))
    if piece < 1:
        check_memory(dev, {**fixed, "series piece": 4 * BLOCK}, f"an ACRW series of {n} points", "Reduce n.")
        piece = 1
    return piece


def acrw_numpy(n: int, phi: float, seed: int = 0) -> np.ndarray:
    """NumPy twin of :func:`acrw`: the same int64 values, from clphys.rng.philox_numpy.

    Parameters
    ----------
    n, phi, seed
        As for :func:`acrw`.

    Returns
    -------
    numpy.ndarray
        int64 prices.

    Examples
    --------
    >>> acrw_numpy(5, 0.044, seed=1).dtype
    dtype('int64')
    """
    n, phi, seed = _args(n, phi, seed)
    thr1, thr2 = acrw_thresholds(phi)
    i = np.arange(n, dtype=np.uint64)
    ctr = np.stack([i & np.uint64(0xFFFFFFFF), i >> np.uint64(32),
                    np.full(n, COUNTER_TAG, np.uint64), np.zeros(n, np.uint64)], axis=1)
    w = philox_numpy(ctr, seed_key(seed)).astype(np.int64)
    xi = np.where(w[:, 0] < thr1, 1, np.where(w[:, 0] < thr2, -1, 0))
    a = np.concatenate([[0], np.cumsum(xi[:-1])])
    return a + (w[:, 1] >> 31)
