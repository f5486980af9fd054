"""The "blocks" algorithm: double red-black Metropolis for the 2D Ising model.

The lattice (periodic, Lx x Ly, many replicas side by side) is cut into W x H
tiles coloured red/black like a checkerboard.  One kernel launch updates every
tile of one colour: a work group loads its tile and a one-site halo into local
memory, runs ``inner_sweeps`` red/black Metropolis sweeps over the tile's sites
(the halo belongs to tiles of the other colour, which this launch does not
touch, so it is fixed), and writes the tile back.  A full sweep is the red-tile
launch followed by the black-tile launch.  Each tile update is a Metropolis
chain for the tile conditioned on its fixed surroundings, so it preserves the
Boltzmann distribution for any number of inner sweeps (measured in
docs/ising_blocks.md).

Spins are stored one bit each (1 = up) in tile-major order, each tile split
into its two colour planes (see cl_kernels/ising/blocks.cl).  Work item ``lid``
of a tile owns 32 sites of each colour, i.e. 64 sites per inner sweep.

Random numbers (``rng=``):

``"philox"`` (default)
    The word of a site is component l % 4 of
    ``philox((y*Lx/8 + l//4, n mod 2^32, n >> 32, replica), seed_key(seed))``,
    n = 2 t + colour, t the global inner-sweep number (sweep number *
    inner_sweeps + inner index), l the site's label in its row: with
    i = x // 2 = tx W/2 + i', l = tx W/2 + (i' % NWR) BW + i' // NWR (its bit
    position in the bit-interleaved tile row, see blocks.cl), a permutation of
    the row.  A pure function of (seed, site, sweep, colour, replica).
``"halfbit-lcg"``
    The paper's generator: one 32-bit LCG state per work item (half a bit per
    site), R*Lx*Ly/64 states seeded by :func:`clphys.rng.chained_seeds`.  Inner
    sweep = one round of 64 words (:func:`clphys.rng.halfbit_rounds`):
    sub-streams 0, 1 feed the item's 32 colour-0 sites (site m = 16 s + i),
    sub-streams 2, 3 its colour-1 sites.  State index
    ``((replica*nty + ty)*ntx + tx)*(W*H/64) + lid``.

A flip of spin s with k aligned neighbours is accepted iff the word is
<= ``thresholds[replica, a, k]`` (a = 0 for s = +1, 1 for s = -1), see
:func:`clphys.ising.thresholds.metropolis_thresholds`.

``spins_per_word`` (philox only): 1 draws the word above for every site;
"auto" (the default, clphys.ising.thresholds.DEFAULT_SPINS_PER_WORD) or 2, 4, 8
lets one Philox word decide k sites through the replica's alias table, with
the single-site acceptance probabilities of the one-word mode exactly
(docs/ising.md, "Several spins per random word"): the k sites with labels
l .. l + k - 1 (l a multiple of k) use component (l/k) % 4 of
``philox((y*Lx/(8k) + l/(4k), n mod 2^32, n >> 32, replica), seed_key(seed))``.

:func:`reference_sweeps` is the bit-exact NumPy twin of :meth:`BlocksBackend.sweep`.
"""

from __future__ import annotations

import math

import numpy as np
import pyopencl as cl

from .. import _validate as check
from ..rng import chained_seeds, halfbit_rounds, philox_numpy, seed_key
from ..runtime import resolve_device
from . import thresholds as _thr
from ._backend import BackendDefaults

__all__ = ["BlocksBackend", "TILE_SIDES", "UNROLLS", "default_tile", "reference_sweeps"]

TILE_SIDES = (16, 32, 64, 128, 256)
UNROLLS = (0, 1, 2, 4, 8, 16)        # 0: site loop written out; n: C loop, `#pragma unroll n`
_MIN_SIDE = 2 * TILE_SIDES[0]
_PREFERRED = (256, 128, 64, 32, 16)  # default tile sides, largest first
_SUMS_WG = 64                       # work-group size of ising_blocks_sums_finish
_M32 = 0xFFFFFFFF


def _geometry(W, H):
    """Per-tile constants shared with the kernel: see blocks.cl."""
    BW = min(32, W // 2)
    return dict(BW=BW, NWR=max(1, W // 64), P=32 // BW, IPG=W * H // 64, TW=W * H // 32)


def _check_shape(shape):
    try:
        Lx, Ly = shape
    except (TypeError, ValueError):
        raise TypeError(f"shape must be a pair (Lx, Ly), got {shape!r}") from None
    Lx, Ly = check.integer("Lx", Lx), check.integer("Ly", Ly)
    for name, v in (("Lx", Lx), ("Ly", Ly)):
        if v < _MIN_SIDE or v % _MIN_SIDE:
            raise ValueError(f"algorithm 'blocks' needs lattice sides that are multiples of "
                             f"{_MIN_SIDE} (an even number of tiles of at least "
                             f"{TILE_SIDES[0]} sites per side: 32, 64, 96, 128, ...), got {name}={v}")
    if Lx * Ly > 2**34:
        raise ValueError(f"algorithm 'blocks' allows at most 2^34 sites per lattice, got {Lx}x{Ly}")
    return Lx, Ly


def default_tile(shape, max_work_group=1024, largest=128):
    """The tile (W, H) used when none is given: per side the largest power of
    two <= `largest` (128 on GPUs, 64 on CPUs, where it measured faster) that
    leaves an even number of tiles, then halved (the larger side first) until
    the W*H/64 work items fit a work group."""
    Lx, Ly = _check_shape(shape)
    sides = [s for s in _PREFERRED if s <= largest] or [TILE_SIDES[0]]
    W = next(s for s in sides if Lx % (2 * s) == 0)
    H = next(s for s in sides if Ly % (2 * s) == 0)
    while W * H // 64 > max_work_group and max(W, H) > TILE_SIDES[0]:
        if W >= H:
            W //= 2
        else:
            H //= 2
    return W, H


def _check_tile(shape, tile, facts):
    Lx, Ly = shape
    max_work_group = facts.max_work_group
    if tile is None:
        return default_tile(shape, max_work_group, 128 if facts.is_gpu else 64)
    if isinstance(tile, (int, np.integer)) and not isinstance(tile, bool):
        tile = (tile, tile)
    try:
        W, H = tile
    except (TypeError, ValueError):
        raise TypeError(f"tile must be None, an int or a pair (W, H), got {tile!r}") from None
    W, H = check.integer("tile width", W), check.integer("tile height", H)
    for name, t, L in (("width", W, Lx), ("height", H, Ly)):
        if t not in TILE_SIDES:
            raise ValueError(f"tile {name} must be one of {TILE_SIDES}, got {t}")
        if L % (2 * t):
            ok = [s for s in TILE_SIDES if L % (2 * s) == 0]
            raise ValueError(f"tile {name} {t} does not give an even number of tiles on a side "
                             f"of {L}; allowed: {ok}")
    if W * H // 64 > max_work_group:
        raise ValueError(f"a {W}x{H} tile needs {W * H // 64} work items per group; "
                         f"the device allows {max_work_group}")
    return W, H


def _device_bytes(cls, facts, shape, n_replicas, rng="philox", tile=None, **options) -> dict:
    """{buffer: bytes} a BlocksBackend allocates (for the memory check)."""
    Lx, Ly = _check_shape(shape)
    W, H = _check_tile((Lx, Ly), tile, facts)
    need = {"spins (1 bit each)": n_replicas * Lx * Ly // 8,
            "partial sums": n_replicas * (Lx // W) * (Ly // H) * 16 + n_replicas * 16,
            "thresholds": n_replicas * 10 * 4, "joint decision tables": 8 * _thr.MAX_CELLS * n_replicas}
    if rng == "halfbit-lcg":
        need["generator states"] = n_replicas * Lx * Ly // 64 * 4
    return need


def _plane_sites(W, H):
    """x and y (2, H, W/2) of the site at bit position pos = j BW + b of row r
    of plane p in a tile: index i = b NWR + j (rows are bit-interleaved)."""
    g = _geometry(W, H)
    p, r, pos = np.ogrid[:2, :H, :W // 2]
    i = (pos % g["BW"]) * g["NWR"] + pos // g["BW"]
    return 2 * i + ((p + r) & 1), np.broadcast_to(r, (2, H, W // 2))


def pack(spins, tile):
    """int8 (R, Ly, Lx) -> the kernel's uint32 words (tile-major colour planes)."""
    W, H = tile
    R, Ly, Lx = spins.shape
    bits = (spins > 0).astype(np.uint8).reshape(R, Ly // H, H, Lx // W, W).transpose(0, 1, 3, 2, 4)
    xs, ys = _plane_sites(W, H)
    planes = bits[..., ys, xs]                      # (R, nty, ntx, 2, H, W/2)
    return np.packbits(planes.ravel(), bitorder="little").view("<u4").astype(np.uint32)


def unpack(words, shape, n_replicas, tile):
    """Inverse of :func:`pack`."""
    W, H = tile
    Lx, Ly = shape
    R = n_replicas
    bits = np.unpackbits(np.ascontiguousarray(words, dtype="<u4").view(np.uint8), bitorder="little")
    planes = bits.reshape(R, Ly // H, Lx // W, 2, H, W // 2)
    xs, ys = _plane_sites(W, H)
    tiles = np.empty((R, Ly // H, Lx // W, H, W), dtype=np.uint8)
    tiles[..., ys, xs] = planes
    return (2 * tiles.transpose(0, 1, 3, 2, 4).reshape(R, Ly, Lx).astype(np.int8) - 1).astype(np.int8)


def _check_thresholds(thresholds, R):
    t = np.asarray(thresholds)
    if t.shape != (R, 2, 5):
        raise ValueError(f"thresholds must have shape ({R}, 2, 5) (replica, spin, aligned "
                         f"neighbours), got {t.shape}")
    if t.dtype.kind not in "ui" or (t.size and (t.min() < 0 or t.max() > _M32)):
        raise ValueError(f"thresholds must be unsigned 32-bit integers, got dtype {t.dtype}")
    return np.ascontiguousarray(t, dtype=np.uint32)


def _check_spins(spins, R, Lx, Ly):
    s = np.asarray(spins)
    if s.shape != (R, Ly, Lx):
        raise ValueError(f"spins must have shape (n_replicas, Ly, Lx) = ({R}, {Ly}, {Lx}), got {s.shape}")
    if s.dtype.kind not in "iu" or not np.all((s == 1) | (s == -1)):
        raise ValueError("spins must be integers +1 or -1")
    return s


class BlocksBackend(BackendDefaults):
    """Device state and kernels of the "blocks" algorithm for n_replicas
    Lx x Ly lattices (see the module doc).  ``tile``: None (see
    :func:`default_tile`), a side, or (W, H) with sides in TILE_SIDES that leave
    an even number of tiles per side.  ``unroll`` (a tuning knob, same
    results): 0 writes the per-site code out, n > 0 keeps it in a loop with
    ``#pragma unroll n``; None: 0 on GPUs, 1 on CPUs.  Spins start all up."""

    algorithm = "blocks"
    dims = (2,)
    rngs = ("philox", "halfbit-lcg")
    options = {"inner_sweeps": 1, "spins_per_word": None, "tile": None, "unroll": None}
    device_bytes = classmethod(_device_bytes)

    @classmethod
    def check_shape(cls, shape):
        """(Lx, Ly) as ints, or ValueError naming the allowed sides (multiples of 32)."""
        return _check_shape(shape)

    def __init__(self, dev, shape, n_replicas, *, rng, seed, inner_sweeps=1, tile=None, unroll=None,
                 spins_per_word=None):
        self.shape = Lx, Ly = self.check_shape(shape)
        self.n_replicas = R = check.integer("n_replicas", n_replicas, 1, 2**20)
        self.rng = check.choice("rng", rng, self.rngs)
        self.seed = check.seed(seed)
        self.inner_sweeps = check.integer("inner_sweeps", inner_sweeps, 1, 2**16)
        if unroll is not None:
            check.choice("unroll", unroll, UNROLLS)
        if spins_per_word is None:
            spins_per_word = _thr.DEFAULT_SPINS_PER_WORD if self.rng == "philox" else 1
        self.spins_per_word = check.choice("spins_per_word", spins_per_word, (1, "auto") + _thr.JOINT_SPINS)
        if self.rng != "philox" and self.spins_per_word != 1:
            raise ValueError(f"spins_per_word={spins_per_word} needs rng='philox' (halfbit-lcg draws a word per site)")
        self.dev = dev = resolve_device(dev)
        # Written-out site code for GPUs; PoCL measured 30% faster with a plain loop.
        self.unroll = (0 if dev.facts.is_gpu else 1) if unroll is None else unroll
        self.tile = W, H = _check_tile(self.shape, tile, dev.facts)
        nbytes = R * Lx * Ly // 8
        if nbytes > dev.facts.max_alloc:
            raise ValueError(f"{R} replicas of {Lx}x{Ly} need {nbytes} bytes of spins; "
                             f"{dev.name} allows {dev.facts.max_alloc} per buffer")
        sweep_name = "ising_blocks_sweep_lcg" if self.rng == "halfbit-lcg" else "ising_blocks_sweep_philox"
        self._prg = dev.build("ising/blocks.cl", W=W, H=H, rng=self.rng, unroll=self.unroll)
        # Registers can cap a kernel's work group below the device maximum (Mesa
        # rusticl 22.3 on llvmpipe: 32 for the sweep): the default tile then shrinks to fit.
        cap = min(getattr(self._prg, name).work_group_limit(dev) for name in (sweep_name, "ising_blocks_sums_partial"))
        if tile is None and cap < W * H // 64:
            self.tile = W, H = default_tile(self.shape, cap, 128 if dev.facts.is_gpu else 64)
            self._prg = dev.build("ising/blocks.cl", W=W, H=H, rng=self.rng, unroll=self.unroll)
            cap = min(getattr(self._prg, name).work_group_limit(dev) for name in (sweep_name, "ising_blocks_sums_partial"))
        if cap < W * H // 64:
            raise ValueError(f"a {W}x{H} tile needs {W * H // 64} work items per group; "
                             f"the kernels allow {cap} on {dev.name}: choose a smaller tile")
        g = _geometry(W, H)
        self._ipg = g["IPG"]
        self._ntx, self._nty = Lx // W, Ly // H
        self._tiles = self._ntx * self._nty
        self._sweeps = 0
        self._thr_host = None

        ctx, mf = dev.context, cl.mem_flags
        self._spins = cl.Buffer(ctx, mf.READ_WRITE, nbytes)
        self._thr = cl.Buffer(ctx, mf.READ_ONLY, R * 10 * 4)
        self._joint_prg, self._plan = {}, None
        # joint decisions: k must divide a plane word's bits and Lx / 8 (calls per row)
        self._row_bits = math.gcd(g["BW"], Lx // 8)
        self._partial = cl.Buffer(ctx, mf.READ_WRITE, R * self._tiles * 16)
        # Written by every sums_into before it is read; zeroed here only because
        # Oclgrind's uninitialised-value checker loses track of kernel stores
        # into a buffer that reuses freed memory.
        cl.enqueue_copy(dev.queue, self._partial, np.zeros(R * self._tiles * 2, np.int64))
        self._out = cl.Buffer(ctx, mf.READ_WRITE, R * 16)
        self._states = None
        if self.rng == "halfbit-lcg":
            self._states = cl.Buffer(ctx, mf.READ_WRITE, R * Lx * Ly // 64 * 4)
            cl.enqueue_copy(dev.queue, self._states, chained_seeds(R * Lx * Ly // 64, self.seed))
        cl.enqueue_copy(dev.queue, self._spins, np.full(nbytes // 4, _M32, dtype=np.uint32))  # all up

    # ------------------------------------------------------------ spins
    def set_spins(self, spins):
        """Upload int8 +-1 spins of shape (n_replicas, Ly, Lx)."""
        Lx, Ly = self.shape
        s = _check_spins(spins, self.n_replicas, Lx, Ly)
        cl.enqueue_copy(self.dev.queue, self._spins, pack(s, self.tile))

    def spins(self):
        """int8 +-1 array (n_replicas, Ly, Lx)."""
        Lx, Ly = self.shape
        words = np.empty(self.n_replicas * Lx * Ly // 32, dtype=np.uint32)
        cl.enqueue_copy(self.dev.queue, words, self._spins)
        return unpack(words, self.shape, self.n_replicas, self.tile)

    # ------------------------------------------------------------ dynamics
    def sweep(self, n, thresholds):
        """Enqueue n full sweeps (2n launches) with per-replica thresholds
        uint32 (n_replicas, 2, 5); no host synchronisation."""
        n = check.integer("n", n, 0)
        thr = _check_thresholds(thresholds, self.n_replicas)
        if n == 0:
            return
        q = self.dev.queue
        if self._thr_host is None or not np.array_equal(thr, self._thr_host):
            self._set_thresholds(thr)
        gsize = (self._ntx // 2 * self._ipg, self._nty, self.n_replicas)
        lsize = (self._ipg, 1, 1)
        ntx, nty, k = np.uint32(self._ntx), np.uint32(self._nty), np.uint32(self.inner_sweeps)
        if self.rng == "halfbit-lcg":
            kern = self._prg.ising_blocks_sweep_lcg
            for _ in range(n):
                for colour in (0, 1):
                    kern(q, gsize, lsize, self._spins, self._states, self._thr, ntx, nty,
                         np.uint32(colour), k)
        else:
            kern = self._sweep_prg.ising_blocks_sweep_philox
            k0, k1 = (np.uint32(v) for v in seed_key(self.seed))
            for s in range(self._sweeps, self._sweeps + n):
                t0 = np.uint64(s * self.inner_sweeps)
                for colour in (0, 1):
                    kern(q, gsize, lsize, self._spins, self._thr, ntx, nty, np.uint32(colour),
                         k, t0, k0, k1)
        self._sweeps += n

    def _set_thresholds(self, thr):
        """Upload the kernel's table for `thr` (R, 2, 5): the thresholds, or in
        joint mode the replicas' alias tables, with the program specialised to
        the class structure (ValueError, before any upload, for a
        spins_per_word the thresholds do not allow)."""
        q = self.dev.queue
        self._sweep_prg = self._prg
        data = thr
        if self.spins_per_word != 1:
            plan = _thr.decision_plan(thr, self.spins_per_word, self._row_bits)
            if plan.layout is not None:
                lay = plan.layout
                self._sweep_prg = self._joint_program(plan.always, plan.slots,
                                                      (lay.k, lay.field, lay.shift, lay.cells))
                data = plan.data
        if data.nbytes > self._thr.size:
            self._thr = cl.Buffer(self.dev.context, cl.mem_flags.READ_ONLY, data.nbytes)
        cl.enqueue_copy(q, self._thr, np.ascontiguousarray(data), is_blocking=True)
        self._thr_host = thr

    def _joint_program(self, always, slots, joint):
        key = (always, slots, joint)
        if key not in self._joint_prg:
            W, H = self.tile
            prg = self.dev.build("ising/blocks.cl", W=W, H=H, rng=self.rng, unroll=self.unroll,
                                 joint=joint, always=always, slots=slots)
            cap = prg.ising_blocks_sweep_philox.work_group_limit(self.dev)
            if cap < self._ipg:
                raise ValueError(f"a {W}x{H} tile needs {self._ipg} work items per group; the joint "
                                 f"sweep kernel allows {cap} on {self.dev.name}: choose a smaller tile")
            self._joint_prg[key] = prg
        return self._joint_prg[key]

    @property
    def sweeps_done(self):
        """Inner sweeps made since the start."""
        return self._sweeps

    # ------------------------------------------------------------ observables
    def sums_into(self, out, first=0):
        """Enqueue the reduction of every replica into the device int64 buffer
        `out`: out[2 (first + r)] = bond sum, out[2 (first + r) + 1] =
        magnetisation of replica r.  No host synchronisation."""
        q, R = self.dev.queue, self.n_replicas
        self._prg.ising_blocks_sums_partial(q, (self._ntx * self._ipg, self._nty, R), (self._ipg, 1, 1),
                                            self._spins, np.uint32(self._ntx),
                                            np.uint32(self._nty), self._partial)
        self._prg.ising_blocks_sums_finish(q, (R * _SUMS_WG,), (_SUMS_WG,), self._partial,
                                           np.uint32(self._tiles), out, np.uint32(first))

    def sums(self):
        """(bond_sum, magnetization), int64 arrays (n_replicas,): the sum over
        all 2N bonds of s_i s_j and the sum of s_i, reduced on the device."""
        self.sums_into(self._out)
        out = np.empty((self.n_replicas, 2), dtype=np.int64)
        cl.enqueue_copy(self.dev.queue, out, self._out)
        return out[:, 0].copy(), out[:, 1].copy()

    # ------------------------------------------------------------ checkpoints
    def _config(self):
        return {"algorithm": self.algorithm, "shape": self.shape, "n_replicas": self.n_replicas,
                "rng": self.rng, "seed": self.seed, "inner_sweeps": self.inner_sweeps,
                "tile": self.tile, "spins_per_word": self.spins_per_word}

    def get_state(self) -> dict:
        """Everything but the spins that a bit-exact resume needs: the
        configuration, the sweep counter and (halfbit-lcg) the LCG states."""
        state = dict(self._config(), sweeps=self._sweeps, rng_states=None)
        if self._states is not None:
            st = np.empty(self.n_replicas * self.shape[0] * self.shape[1] // 64, dtype=np.uint32)
            cl.enqueue_copy(self.dev.queue, st, self._states)
            state["rng_states"] = st
        return state

    def set_state(self, state: dict):
        """Restore a :meth:`get_state` dict taken from a backend with the same
        configuration."""
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from get_state(), got {type(state).__name__}")
        # the update mode follows the state (states from before the joint mode
        # have none: they drew one word per site)
        spw = state.get("spins_per_word", 1)
        spw = check.choice("state['spins_per_word']", spw if isinstance(spw, str) else int(spw),
                           (1, "auto") + _thr.JOINT_SPINS)
        if spw != 1 and self.rng != "philox":
            raise ValueError(f"state['spins_per_word'] = {spw!r} needs rng='philox'")
        config = {k: v for k, v in self._config().items() if k != "spins_per_word"}
        missing = sorted((set(config) | {"sweeps", "rng_states"}) - set(state))
        if missing:
            raise ValueError(f"state lacks {missing}")
        for key, mine in config.items():
            theirs = tuple(state[key]) if isinstance(mine, tuple) else state[key]
            if theirs != mine:
                raise ValueError(f"state has {key}={state[key]!r}, this backend {mine!r}")
        sweeps = check.integer("state['sweeps']", state["sweeps"], 0)
        if self._states is not None:
            st = np.asarray(state["rng_states"])
            n = self.n_replicas * self.shape[0] * self.shape[1] // 64
            if st.shape != (n,) or st.dtype != np.uint32:
                raise ValueError(f"state['rng_states'] must be uint32 of shape ({n},)")
            cl.enqueue_copy(self.dev.queue, self._states, np.ascontiguousarray(st))
        self._sweeps = sweeps
        if spw != self.spins_per_word:
            self.spins_per_word, self._thr_host = spw, None


# ---------------------------------------------------------------- NumPy twin
def _pass_sites(W, H, c):
    """Tile-local (y, x) of the 32 colour-c sites of each work item, in the
    order of its random words: arrays (W*H/64, 32)."""
    g = _geometry(W, H)
    lid = np.arange(g["IPG"])[:, None]
    u, b = np.divmod(np.arange(32)[None, :], g["BW"])
    q = lid + u * g["IPG"]
    r, j = q // g["NWR"], q % g["NWR"]
    return r, 2 * (b * g["NWR"] + j) + ((c + r) & 1)


def _philox_label(i, W):
    """Philox site label of lattice compressed index i = x // 2 in a row: the
    bit position tx W/2 + j BW + b of the site in the tile rows."""
    g = _geometry(W, W)
    tx, i = np.divmod(i, W // 2)
    return tx * (W // 2) + (i % g["NWR"]) * g["BW"] + i // g["NWR"]


def reference_sweeps(spins, thresholds, n, *, tile, rng, seed=0, inner_sweeps=1,
                     sweeps_done=0, rng_states=None, spins_per_word=None):
    """NumPy twin of ``n`` calls of :meth:`BlocksBackend.sweep` (slow; tiny
    lattices).  spins int8 (R, Ly, Lx), thresholds (R, 2, 5); halfbit-lcg takes
    the LCG states (default: the backend's initial ones); spins_per_word as
    the backend's (philox; default DEFAULT_SPINS_PER_WORD).  Returns (spins,
    rng_states or None)."""
    s = np.array(spins, dtype=np.int8)
    R, Ly, Lx = s.shape
    W, H = tile
    thr = np.asarray(thresholds, dtype=np.uint64)
    ntx, nty, ipg = Lx // W, Ly // H, W * H // 64
    key = seed_key(seed)
    if rng == "halfbit-lcg":
        states = (chained_seeds(R * Lx * Ly // 64, seed) if rng_states is None
                  else np.array(rng_states, dtype=np.uint32))
    else:
        states = None
    maps = [_pass_sites(W, H, c) for c in (0, 1)]
    if spins_per_word is None:
        spins_per_word = _thr.DEFAULT_SPINS_PER_WORD if rng == "philox" else 1
    plan = None
    if rng == "philox" and spins_per_word != 1:
        row_bits = math.gcd(_geometry(W, H)["BW"], Lx // 8)
        plan = _thr.decision_plan(np.asarray(thresholds, dtype=np.uint32), spins_per_word, row_bits)
        if plan.layout is None:
            plan = None
        else:
            level = plan.levels(10)
    rep, ty, tx = (a.ravel() for a in np.meshgrid(np.arange(R), np.arange(nty), np.arange(ntx),
                                                  indexing="ij"))
    for sweep in range(sweeps_done, sweeps_done + n):
        for colour in (0, 1):
            sel = (tx + ty) % 2 == colour
            rt, yt, xt = rep[sel][:, None, None], ty[sel][:, None, None], tx[sel][:, None, None]
            sidx = ((rt[:, :, 0] * nty + yt[:, :, 0]) * ntx + xt[:, :, 0]) * ipg + np.arange(ipg)
            for t in range(inner_sweeps):
                if states is not None:
                    words = halfbit_rounds(states[sidx].ravel(), 1)[0].reshape(*sidx.shape, 64)
                    states[sidx] = words[..., 15]
                for c in (0, 1):
                    ly, lx = maps[c]
                    Y, X = yt * H + ly, xt * W + lx
                    Rr = np.broadcast_to(rt, Y.shape)
                    s0 = s[Rr, Y, X]
                    k_al = ((s[Rr, (Y - 1) % Ly, X] == s0).astype(int) + (s[Rr, (Y + 1) % Ly, X] == s0)
                            + (s[Rr, Y, (X - 1) % Lx] == s0) + (s[Rr, Y, (X + 1) % Lx] == s0))
                    limit = thr[Rr, (s0 < 0).astype(int), k_al]
                    if states is not None:
                        w = words[..., 32 * c:32 * c + 32]
                    elif plan is not None:
                        npass = 2 * (sweep * inner_sweeps + t) + c
                        lam = _philox_label(X // 2, W)
                        k = plan.layout.k
                        grp = lam // k
                        ctr = np.stack(np.broadcast_arrays(Y * (Lx // (8 * k)) + grp // 4, npass & _M32,
                                                           npass >> 32, Rr), axis=-1)
                        w = philox_numpy(ctr.reshape(-1, 4), key).reshape(*Y.shape, 4)
                        w = np.take_along_axis(w, (grp % 4)[..., None], axis=-1)[..., 0]
                        region = np.empty(w.shape, dtype=np.int64)
                        for r in range(R):
                            sel = Rr == r
                            region[sel] = _thr.decode_words(w[sel], plan.data[r], plan.layout)[
                                np.arange(int(sel.sum())), (lam[sel] % k)]
                        need = level[(s0 < 0).astype(int) * 5 + k_al]
                        s[Rr, Y, X] = np.where(region >= need, -s0, s0)
                        continue
                    else:
                        npass = 2 * (sweep * inner_sweeps + t) + c
                        lam = _philox_label(X // 2, W)
                        ctr = np.stack(np.broadcast_arrays(Y * (Lx // 8) + lam // 4, npass & _M32,
                                                           npass >> 32, Rr), axis=-1)
                        w = philox_numpy(ctr.reshape(-1, 4), key).reshape(*Y.shape, 4)
                        w = np.take_along_axis(w, (lam % 4)[..., None], axis=-1)[..., 0]
                    s[Rr, Y, X] = np.where(w.astype(np.uint64) <= limit, -s0, s0)
    return s, states
