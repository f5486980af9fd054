"""``algorithm="checkerboard"``: one int8 per spin, red/black half-sweeps; the
two colours are kept in separate byte arrays (a sweep reads one and writes the
other), converted from and to the natural layout on the device.

Each group of 4 consecutive compact sites of one colour is decided by the 4
words of one Philox call (or 4 steps of its own generator state for
rng="lcg" / "xorshift32": one state per (replica, colour, group of 4 sites),
seeded by clphys.rng.chained_seeds). Kernels: cl_kernels/ising/checkerboard.cl.

Option ``chunks``: True runs ising_cb_sweep16 (one work item per 16 sites of a
colour row: vector loads, neighbour counts of 16 bytes at once; Lx a multiple
of 32), False ising_cb_sweep (one work item per group of 4 sites, any even
Lx); None: chunks where Lx allows. Same words, same spins.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from .. import _validate
from .. import rng as _rng
from . import reference
from ._backend import BackendDefaults
from ._device import SumsReducer, check_options, check_sides, device_wg, enqueue_upload, zeroed_buffer

MAX_SITES = 2**31          # per replica: 32-bit site indices in the kernel


class CheckerboardBackend(BackendDefaults):
    """Device state and kernels of the "checkerboard" algorithm (int8 spins by
    colour); see :class:`clphys.ising._backend.IsingBackend`."""
    algorithm = "checkerboard"
    dims = (2, 3)
    rngs = ("philox", "lcg", "xorshift32")
    options = {"wg": None, "chunks": None}
    takes_replica_offset = True
    measures_on_device = True
    r0 = 0      # the global index of replica 0 in the Philox counters (see MultispinBackend.r0)

    @classmethod
    def check_shape(cls, shape):
        """ValueError unless every side is even and >= 2."""
        check_sides(shape, "checkerboard", "every side even and >= 2", lambda L, axis: L >= 2 and L % 2 == 0)
        if int(np.prod(shape)) > MAX_SITES:
            raise ValueError(f"checkerboard: at most {MAX_SITES} sites per lattice, got shape {shape}")

    @classmethod
    def check_options(cls, options):
        """The options merged with the defaults (``wg``, ``chunks``), checked."""
        opts = check_options(cls, options)
        if opts["chunks"] is not None:
            _validate.choice("chunks", opts["chunks"], (True, False))
        return opts

    @classmethod
    def device_bytes(cls, facts, shape, n_replicas, rng="philox", **options) -> dict:
        """{buffer: bytes} this backend allocates (for the memory check)."""
        N = int(np.prod(shape))
        groups = -(-(N // 2) // 4)
        need = {"spins (int8)": n_replicas * N, "natural layout (int8)": n_replicas * N,
                "partial sums": SumsReducer.nbytes(facts, n_replicas, N),
                "thresholds": 4 * n_replicas * 2 * (2 * len(shape) + 1)}
        if rng != "philox":
            need["generator states"] = 4 * n_replicas * 2 * groups
        return need

    def __init__(self, dev, shape, n_replicas, *, rng, seed, **options):
        opts = self.check_options(options)
        wg = device_wg(dev, opts["wg"])
        self.dev, self.shape, self.R = dev, tuple(shape), n_replicas
        self.rng, self.seed, self.wg = rng, seed, wg
        self.dim = len(shape)
        self.N = int(np.prod(shape))
        self.groups = -(-(self.N // 2) // 4)
        Lz = shape[2] if self.dim == 3 else 1
        self.chunks = shape[0] % 32 == 0 if opts["chunks"] is None else opts["chunks"]
        if self.chunks and shape[0] % 32:
            raise ValueError(f"chunks=True needs Lx a multiple of 32, got Lx = {shape[0]}")
        self.items = n_replicas * (self.N // 32 if self.chunks else self.groups)
        self.reducer = SumsReducer(dev, n_replicas, self.N // 2)
        self.prg = dev.build("ising/checkerboard.cl", dim=self.dim, Lx=shape[0], Ly=shape[1], Lz=Lz,
                             rng=rng, wg=wg, rwg=self.reducer.wg)
        mf = cl.mem_flags
        self.spins_buf = zeroed_buffer(dev, n_replicas * self.N)      # colour 0, then colour 1
        self._nat = None                                              # natural layout, for transfers
        self.thr_buf = cl.Buffer(dev.context, mf.READ_ONLY, n_replicas * 2 * (2 * self.dim + 1) * 4)
        self._thr = None
        n_states = n_replicas * 2 * self.groups if rng != "philox" else 1
        self.states_buf = zeroed_buffer(dev, 4 * n_states)
        self.key = _rng.seed_key(seed)
        self.t = 0
        if rng != "philox":
            self._upload(self.states_buf, reference.stateful_states(self.shape, n_replicas, seed))

    def _upload(self, buf, array):
        enqueue_upload(self.dev.queue, buf, array)

    # ------------------------------------------------------------ spins
    def _natural(self):
        if self._nat is None:
            self._nat = zeroed_buffer(self.dev, self.R * self.N)
        return self._nat

    def set_spins(self, spins):
        """Upload int8 +-1 spins (R, *reversed(shape))."""
        self._upload(self._natural(), np.ascontiguousarray(spins, dtype=np.int8))
        self.set_spins_device(self._nat)

    def set_spins_device(self, buffer):
        """Split an int8 device buffer in natural order into the two colours."""
        self.prg.ising_cb_split(self.dev.queue, (self.R * self.N,), None, buffer, self.spins_buf,
                                np.uint32(self.R))

    def spins(self):
        """int8 +-1 spins (R, *reversed(shape))."""
        self.prg.ising_cb_merge(self.dev.queue, (self.R * self.N,), None, self.spins_buf,
                                self._natural(), np.uint32(self.R))
        out = np.empty((self.R,) + tuple(reversed(self.shape)), dtype=np.int8)
        cl.enqueue_copy(self.dev.queue, out, self._nat)
        return out

    # ------------------------------------------------------------ dynamics
    def sweep(self, n, thresholds):
        """Enqueue n full sweeps (colour 0, then colour 1) with per-replica thresholds."""
        thr = np.ascontiguousarray(thresholds, dtype=np.uint32)
        if self._thr is None or not np.array_equal(thr, self._thr):
            self._thr = thr.copy()
            self._upload(self.thr_buf, self._thr)
        items = self.items
        local = (self.wg,) if self.wg else None
        glob = (-(-items // self.wg) * self.wg,) if self.wg else (items,)
        k = self.prg.ising_cb_sweep16 if self.chunks else self.prg.ising_cb_sweep
        for _ in range(n):
            lo, hi = self.t & 0xFFFFFFFF, self.t >> 32
            for c in (0, 1):
                k(self.dev.queue, glob, local, self.spins_buf, self.thr_buf, np.uint32(c),
                  np.uint32(self.R), np.uint32(self.key[0]), np.uint32(self.key[1]),
                  np.uint32(lo), np.uint32(hi), self.states_buf, np.uint32(self.r0))
            self.t += 1

    # ------------------------------------------------------------ observables
    def measure_into(self, buffer, index):
        """See clphys.ising.backends: int64 pair (bond, M) of measurement `index`."""
        red = self.reducer
        self.prg.ising_cb_sums(self.dev.queue, (self.R * red.parts * red.wg,), (red.wg,),
                               self.spins_buf, red.partial, np.uint32(red.parts), np.uint32(self.R))
        red.finish(buffer, index)

    def sums(self):
        """(bond sum, magnetization) int64 (R,), reduced on the device."""
        return self.reducer.sums(self.measure_into)

    # ------------------------------------------------------------ checkpoint
    def get_state(self):
        """The sweep counter and (lcg, xorshift32) the generator states."""
        state = {"sweeps": self.t}
        if self.rng != "philox":
            st = np.empty((self.R, 2, self.groups), dtype=np.uint32)
            cl.enqueue_copy(self.dev.queue, st, self.states_buf)
            state["rng_states"] = st
        return state

    def set_state(self, state):
        """Restore a :meth:`get_state` dict."""
        self.t = _validate.integer("state['sweeps']", state["sweeps"], 0, 2**63 - 2)
        if self.rng != "philox":
            st = np.asarray(state["rng_states"], dtype=np.uint32)
            if st.shape != (self.R, 2, self.groups):
                raise ValueError(f"state['rng_states'] must have shape {(self.R, 2, self.groups)}, "
                                 f"got {st.shape}")
            if self.rng == "xorshift32" and not st.all():
                raise ValueError("state['rng_states'] holds a xorshift32 state of 0, which never leaves 0 "
                                 "(the seeding never makes one)")
            self._upload(self.states_buf, st)

