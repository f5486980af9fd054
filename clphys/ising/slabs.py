"""One Ising lattice split over MPI ranks in slabs: rows in 2D, z planes in 3D
(``Ising2D(L, T, comm=MPI.COMM_WORLD, halo=h)``), with the multispin kernels.

Layout. A rank keeps its own slabs, then h halo slabs on each side: the h
slabs after its last one, then the h slabs before its first (periodic over
the ranks). The kernels' periodic neighbour arithmetic over the local slabs
then reads the halos exactly where the lattice continues on the neighbouring
ranks. Every rank holds an even number of slabs, own + 2h, so a local row has
the parity of its global row (the colours need no shift).

Deep halos (h even, the default): after an exchange both colours' halos are
valid, and each half-sweep updates every local slab whose neighbours are
still valid, so the valid region shrinks by one slab on each side per
half-sweep and k = h / 2 sweeps run between exchanges: one exchange (of h
slabs each way and colour) per k sweeps instead of one per half-sweep. The
halo slabs are updated redundantly, the same rows the neighbouring rank
updates as its own, with the Philox counters of their global rows (the sweep
kernel maps local to global rows, gfirst / gsplit / grows): a seed gives bit
for bit the spins of the same lattice on one device, for any number of ranks
and any h. A half-sweep is one launch (its valid rows, rounded out to whole
work items: rows beyond the valid region are wrong either way); the last
half-sweep of a cycle launches the edge slabs (the first and last h own
ones) first. Each colour's edge slabs, once final, are copied on the device
(in the kernels' queue) to a staging buffer, which a second queue reads into
pinned host memory while the interior is updated: the kernels never wait for
that queue's reads. While the host exchanges the halos (one wait for both
colours' reads, one MPI Waitall for both colours and neighbours), the device
already runs the next cycle's first AHEAD sweeps where they need no halo
(half-sweep j: the own slabs j in from their ends); after the halo writes one
launch per half-sweep does the rest of each (the first of them waits for the
writes: the only wait of the kernels' queue on the copy queue). A cycle runs
across sweep() calls (sweep(1) k times exchanges once), since only the own
slabs, valid after every sweep, are ever read back.

h = 1 is the older path, one exchange per half-sweep: one launch for
the rows of one work item at each edge of the own slabs, their staging copies
and reads, the interior is launched, and while it runs the edge slabs go to
the neighbouring ranks (mpi4py Isend/Irecv) and the slabs received are
written into the halos (on the second queue, so the copies overlap the
interior; the next half-sweep's edges wait for them). The backend's
``halo_times`` (``lat.ensemble.backend.halo_times``) says where the host time
went: waiting for the edge slabs, the exchange, and queueing the halo writes,
and how many half-sweeps and exchanges ran;
:meth:`SlabBackend.profiled` collects the (phase, event) of every launch and
copy on profiling queues (benchmarks/bench_scaling.py's profile).

Why slabs and not 2D blocks: a 2D block of a multispin lattice needs halo
columns too, and a column of a multispin word layout is one bit of every
row's word (32 spins per word run along x): it would be gathered bit by bit
from every row. A slab's halo is a contiguous row (or plane) of words, one
copy each way, and its size (Lx / 8 bytes per row and colour: 4 KB at
L = 32768) is what a PCIe or network message does at its latency.
Blocks would cut the halo volume only beyond ~Ly / Lx ranks per row of
blocks, far above the GPUs of one node.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np
import pyopencl as cl

from .. import _validate
from .. import rng as _rng
from ..runtime import mpi
from ..runtime.memory import check_host_memory
from ._backend import BackendDefaults
from ._device import zeroed_buffer
from .multispin import MultispinBackend

__all__ = ["SlabBackend", "slab_shares", "check_halo", "halo_depth"]

# Default halo depth by DeviceFacts.is_gpu: on GPUs an exchange (a host chain
# of ~60-90 us, benchmarks/RESULTS.md "MPI scaling") every h / 2 sweeps, while
# the redundant halo rows cost ~h / own of a sweep; on CPUs (PoCL) launches are
# cheap next to the sweep of the rows, so shallower halos.
DEFAULT_HALO = {True: 16, False: 4}
# Deeper halos on GPUs where they stay within 1/16 of the share (at most ~6 %
# redundant slabs), by dimension: on 4 H200s (docs/mpi.md, "Speed") 2D weak
# 32768^2 per GPU went from 93.3 % (h = 16) to 98.7 % (h = 64) per GPU, 3D
# 512^3 from 49.3 % to 57.8 % (h = 32; a 3D slab is a plane of 2^18 sites,
# whose redundant updates cost more than a 2D row's).
DEEP_HALO = {2: 64, 3: 32}


def slab_shares(n_slabs: int, size: int) -> list:
    """(first slab, slabs) of every rank: an even number (>= 2) each, as equal
    as that allows; ValueError if the lattice does not split so."""
    if n_slabs // 2 < size:
        raise ValueError(f"a lattice of {n_slabs} slabs (rows in 2D, z planes in 3D) cannot be split "
                         f"over {size} MPI ranks: every rank needs an even number (>= 2) of slabs "
                         f"(at most {n_slabs // 2} ranks)")
    return [(2 * a, 2 * n) for a, n in (mpi.split(n_slabs // 2, size, r) for r in range(size))]


def check_halo(halo, n_slabs: int, size: int):
    """halo (slabs per side, or None: the device's default) validated for a
    lattice of n_slabs slabs over size ranks: 1, or even and at most the
    thinnest rank's share (a halo comes from one neighbour's own slabs).
    ValueError also if the lattice does not split (slab_shares)."""
    thinnest = min(n for _, n in slab_shares(n_slabs, size))
    if halo is None:
        return None
    halo = _validate.integer("halo", halo, 1)
    if (halo > 1 and halo % 2) or halo > thinnest:
        raise ValueError(f"halo must be 1 or an even number of slabs up to {thinnest} (the thinnest "
                         f"rank's share of {n_slabs} slabs over {size} ranks), got {halo}")
    return halo


def halo_depth(n_slabs: int, size: int, halo, is_gpu: bool, dim: int) -> int:
    """Halo slabs per side: `halo` if given (check_halo), else DEFAULT_HALO
    for the device kind, on GPUs deeper up to DEEP_HALO[dim] while the halo
    stays within 1/16 of the thinnest share; at most a quarter of that share
    (even; the redundant halo updates then cost at most ~1/4 of a sweep), and 1
    (an exchange per half-sweep) for shares thinner than 8 slabs."""
    halo = check_halo(halo, n_slabs, size)
    if halo is not None:
        return halo
    thinnest = min(n for _, n in slab_shares(n_slabs, size))
    deepest = thinnest // 4 // 2 * 2
    if deepest < 2:
        return 1
    default = DEFAULT_HALO[is_gpu]
    if is_gpu:
        default = max(default, min(DEEP_HALO[dim], thinnest // 16 // 2 * 2))
    return min(default, deepest)


def local_shape(shape, size: int, rank: int, halo: int) -> tuple:
    """Shape of rank's share of a lattice of `shape` with its 2 x halo slabs."""
    return tuple(shape[:-1]) + (slab_shares(shape[-1], size)[rank][1] + 2 * halo,)


class SlabBackend(BackendDefaults):
    """The backend of a lattice split over MPI ranks (see the module doc);
    implements the interface of clphys.ising.backends for one replica, its
    collective parts on every rank: sums() (reduced over the ranks), spins()
    (gathered), set_spins() (of the whole lattice), sweep() (halo exchanges).
    halo: slabs per side (halo_depth)."""

    algorithm = "multispin"
    measures_on_device = True
    # Sweeps of the next cycle run (their rows that need no halo) while the
    # host exchanges the halos: hides up to 4 half-sweeps' interiors of
    # exchange for 2 launches more per sweep ahead (the rest of its half-sweeps,
    # after the halo writes). 3D shares of AHEAD_LARGE_SITES sites or more take
    # AHEAD_LARGE: their exchange (4 planes per sweep) outlasts 2 sweeps, and a
    # sweep (>= ~100 us on an H200) hides the extra launches' host time. 4
    # H200s, h = 32, per GPU: 1024^3 1933 / 2132 flips/ns with 2 / 6 ahead; 512^3
    # 1369 / 1263, where the launches make the host the limit.
    AHEAD = 2
    AHEAD_LARGE, AHEAD_LARGE_SITES = 6, 2**28

    def __init__(self, comm, dev, shape, *, rng, seed, halo, **options):
        self.comm = comm
        size, rank = mpi.comm_size_rank(comm)
        self.dim, self.shape = len(shape), tuple(shape)
        self.n_slabs = shape[-1]
        self.first, self.own = slab_shares(self.n_slabs, size)[rank]
        self.h = halo
        self.k = max(1, halo // 2)                                 # sweeps per exchange (h >= 2)
        self.local_shape = local_shape(shape, size, rank, halo)
        self.inner = MultispinBackend(dev, self.local_shape, 1, rng=rng, seed=seed, own=self.own,
                                      halo=halo, **options)
        self.slab_rows = self.inner.plane_rows if self.dim == 3 else 1     # word rows per slab
        self.dev, self.seed = dev, seed
        self.up, self.down = (rank - 1) % size, (rank + 1) % size
        sr = self.slab_rows
        self.local_rows = self.local_shape[-1] * sr
        # the sweep kernel's global rows: local row 0 is row first * sr; the lower
        # halo (local slabs own + h on) lies before it
        self.counters = (self.first * sr, (self.own + halo) * sr, self.n_slabs * sr)
        self.words = sr * self.inner.WR                            # per slab and colour
        hw = halo * self.words
        # per colour (both colours' slabs are in flight at once with h >= 2): the
        # edge slabs sent (the first h own slabs, then the last h: one read), and
        # the halos received, local slabs own .. own + 2h - 1 (above, then below:
        # one write)
        self._send, self._recv = [], []
        for _ in (0, 1):
            send, recv = self._host_buffers(dev, (2 * hw, 2 * hw))
            self._send.append(send)
            self._recv.append(recv)
        # the edge slabs are first copied on the device, in the kernels' queue, to
        # a buffer of their own that the copy queue reads: the kernels never wait
        # for the copy queue's reads (only for the halo writes, once per exchange)
        self._stage = [zeroed_buffer(dev, 4 * 2 * hw) for _ in (0, 1)]
        # Oclgrind's uninitialised-value checker loses writes at an offset into a
        # buffer: there the halos are patched into a copy of the whole colour array
        self._whole_writes = not dev.facts.offset_writes
        # the slab copies go through a queue of their own, beside the kernels': the
        # edge slabs' reads and the halo writes overlap the interior's update (with
        # the device queue's properties, so a profiling queue profiles both)
        self.copies = cl.CommandQueue(dev.context, dev.cl_device, properties=dev.queue.properties)
        self._written = [None, None]          # the last halo write of each colour
        self._phase = 0                       # sweeps since the last exchange (h >= 2)
        self._ahead = None                    # _most_ahead(), from the first exchange_halos()
        self._trace = None                    # (phase, event) list inside profiled()
        self.halo_times = {"edge wait": 0.0, "exchange": 0.0, "halo writes": 0.0, "half-sweeps": 0,
                           "exchanges": 0}

    @staticmethod
    def _host_buffers(dev, sizes):
        """Host uint32 arrays of these sizes for the edge slabs: pinned (mapped
        ALLOC_HOST_PTR buffers, so the copies are DMA that overlaps kernels) on
        GPUs; plain arrays on CPU devices, whose memory is host memory."""
        if not dev.facts.is_gpu:
            return [np.zeros(n, np.uint32) for n in sizes]
        mf, flags = cl.mem_flags, cl.map_flags.READ | cl.map_flags.WRITE
        pinned = [cl.Buffer(dev.context, mf.READ_WRITE | mf.ALLOC_HOST_PTR, 4 * n) for n in sizes]
        return [cl.enqueue_map_buffer(dev.queue, b, flags, 0, (n,), np.uint32)[0]
                for b, n in zip(pinned, sizes)]

    @classmethod
    def device_bytes(cls, facts, local_shape, halo, **options) -> dict:
        """{buffer: bytes} of a rank's share `local_shape` (its halos included)."""
        need = MultispinBackend.device_bytes(facts, local_shape, 1, **options)
        need.pop("band copies (several sweeps per launch)", None)
        need["natural layout (int8)"] = int(np.prod(local_shape))
        # the edge slabs' staging buffers: 2h of the local slabs, both colours
        need["edge slabs staged for the exchange"] = need["spins (1 bit each)"] * 2 * halo // local_shape[-1]
        return need

    # ------------------------------------------------------------ halos
    def _slab_offset(self, slab) -> int:
        """Byte offset of local slab `slab` in a colour array."""
        return 4 * slab * self.words

    def _launch(self, phase, colour, rows, thresholds, **kw):
        """inner.half_sweep, its event kept in the trace under `phase`."""
        ev = self.inner.half_sweep(colour, rows, self.counters, thresholds, **kw)
        if self._trace is not None:
            self._trace.append((phase, ev))
        return ev

    def _copy(self, phase, queue, dest, src, **kw):
        """cl.enqueue_copy (not blocking), its event kept in the trace under `phase`."""
        if isinstance(dest, np.ndarray) or isinstance(src, np.ndarray):
            kw["is_blocking"] = False
        ev = cl.enqueue_copy(queue, dest, src, **kw)
        if self._trace is not None:
            self._trace.append((phase, ev))
        return ev

    @contextmanager
    def profiled(self):
        """Profiling queues for the kernels and the copies while inside; yields
        a function that starts a trace and returns its list, which fills with
        the (phase, event) of every launch and copy until the block ends. The
        queues and the trace are put back on leaving (benchmarks only)."""
        dev = self.dev
        dev.queue.finish()
        self.copies.finish()
        saved = dev.queue, self.copies
        prof = cl.command_queue_properties.PROFILING_ENABLE
        dev.queue = cl.CommandQueue(dev.context, dev.cl_device, properties=prof)
        self.copies = cl.CommandQueue(dev.context, dev.cl_device, properties=prof)

        def start_trace() -> list:
            self._trace = []
            return self._trace
        try:
            yield start_trace
        finally:
            self._trace = None
            dev.queue, self.copies = saved

    def _exchange(self, colours, wait_for=None):
        """Send the edge slabs of `colours` (already read into the send buffers)
        to both neighbours, receive theirs (one Waitall for all), and write
        them into the halos (colour 0's after the events `wait_for`: kernels
        still reading its halos)."""
        hw = self.h * self.words
        t0 = time.perf_counter()
        reqs = []
        for c in colours:
            send, recv = self._send[c], self._recv[c]
            # the h slabs after the own ones come from the rank below (its first h
            # own slabs), the h before them from the rank above (its last h)
            reqs += [self.comm.Irecv(recv[:hw], source=self.down, tag=2 * c),
                     self.comm.Irecv(recv[hw:], source=self.up, tag=2 * c + 1),
                     self.comm.Isend(send[:hw], dest=self.up, tag=2 * c),
                     self.comm.Isend(send[hw:], dest=self.down, tag=2 * c + 1)]
        reqs[0].Waitall(reqs)
        t1 = time.perf_counter()
        for c in colours:
            buf = self.inner.bufs[c]
            if self._whole_writes:
                q = self.dev.queue
                q.finish()
                whole = np.empty(self.inner.words, np.uint32)
                cl.enqueue_copy(q, whole, buf)
                whole[self.own * self.words:] = self._recv[c]
                self._written[c] = cl.enqueue_copy(q, buf, whole)
            else:
                self._written[c] = self._copy("halo writes", self.copies, buf, self._recv[c],
                                              dst_offset=self._slab_offset(self.own),
                                              wait_for=wait_for if c == 0 else None)
        self.copies.flush()
        self.halo_times["exchange"] += t1 - t0
        self.halo_times["halo writes"] += time.perf_counter() - t1

    def _read_edges(self, colour):
        """Copy the first and last h own slabs of `colour`, as they are after
        the kernels enqueued so far, to its staging buffer (two device copies:
        NVIDIA's driver 580 refused one rectangular copy of both with
        INVALID_VALUE), and read that into the send buffer on the copy queue.
        Returns the read's event."""
        q, buf, stage = self.dev.queue, self.inner.bufs[colour], self._stage[colour]
        hb = 4 * self.h * self.words
        self._copy("edge copies", q, stage, buf, byte_count=hb)
        staged = self._copy("edge copies", q, stage, buf, byte_count=hb,
                            src_offset=self._slab_offset(self.own - self.h), dst_offset=hb)
        q.flush()
        done = self._copy("edge reads", self.copies, self._send[colour], stage, wait_for=[staged])
        self.copies.flush()
        return done

    def _wait_edges(self, done):
        t0 = time.perf_counter()
        done.wait()
        self.halo_times["edge wait"] += time.perf_counter() - t0

    def _halos_written(self):
        """Later kernels (sums, spins, unpacking) wait for the halo writes."""
        pending = [e for e in self._written if e is not None]
        if pending:
            cl.enqueue_barrier(self.dev.queue, wait_for=pending)

    def exchange_halos(self):
        """Both colours' halos from the neighbours (after setting the spins)."""
        for c in (0, 1):
            self._read_edges(c).wait()
        self._exchange((0, 1))
        self._halos_written()
        self.dev.queue.finish()
        self._phase = 0
        if self._ahead is None:
            self._ahead = self._most_ahead()

    # ------------------------------------------------------------ spins
    def start(self, mode):
        """The random (mode 0) or uniform (1: up, 2: down) start of ising/init.cl
        on this rank's slabs with their global Philox groups. The halos are
        exchanged afterwards (exchange_halos), once every rank has started."""
        Lx, Ly = self.local_shape[0], self.local_shape[1]
        Lz = self.local_shape[2] if self.dim == 3 else 1
        prg = self.dev.build("ising/init.cl", dim=self.dim, Lx=Lx, Ly=Ly, Lz=Lz)
        n = int(np.prod(self.local_shape))
        buf = zeroed_buffer(self.dev, n)
        k0, k1 = _rng.seed_key(self.seed)
        g0 = self.first * (Ly if self.dim == 3 else 1) * (Lx // 2) // 4   # global group of local site 0
        prg.ising_init_spins(self.dev.queue, (2 * (-(-(n // 2) // 4)),), None, buf, np.uint32(1),
                             np.uint32(mode), np.uint32(k0), np.uint32(k1), np.uint32(0), np.uint32(g0))
        self.inner.set_spins_device(buf)

    def _local_rows(self):
        """Indices of the whole lattice's slabs held here: own, the h after, the h before."""
        idx = np.arange(self.first, self.first + self.own + self.h)
        return np.append(idx, np.arange(self.first - self.h, self.first)) % self.n_slabs

    def set_spins(self, spins):
        """spins: (1, *lattice) int8 of the whole lattice (the same on every rank)."""
        local = np.take(spins[0], self._local_rows(), axis=0)
        self.inner.set_spins(local[None])
        self._phase = 0                 # the halos too are set: a new cycle

    def spins(self):
        """(1, *lattice) int8 of the whole lattice, on every rank."""
        mine = self.inner.spins()[0][:self.own]
        return np.concatenate(self.comm.allgather(mine), axis=0)[None]

    # ------------------------------------------------------------ dynamics
    def sweep(self, n, thresholds):
        """Enqueue n sweeps of this rank's slabs, exchanging halos with the neighbours."""
        if self.h == 1:
            self._sweep_exchanging_halves(n, thresholds)
        else:
            self._sweep_deep(n, thresholds)
        self._halos_written()

    def _sweep_exchanging_halves(self, n, thresholds):
        """h = 1: an exchange per half-sweep (see the module doc)."""
        inner, q, own_rows = self.inner, self.dev.queue, self.own * self.slab_rows
        edge = max(inner.rows_per_item, self.slab_rows)    # whole work items, at least a slab
        # one launch for both edges (from the last `edge` rows on, wrapping to the
        # first), one for the interior; a thin share is all edge
        edges, interior = (((own_rows - edge, 2 * edge, own_rows), (edge, own_rows - 2 * edge, own_rows))
                           if own_rows > 2 * edge else ((0, own_rows, own_rows), None))
        for _ in range(n):
            for c in (0, 1):
                # the edges read the other colour's halos: after their write
                wait = [self._written[1 - c]] if self._written[1 - c] is not None else None
                self._launch("edges", c, edges, thresholds, wait_for=wait)
                done = self._read_edges(c)
                if interior:
                    self._launch("update", c, interior, thresholds)
                q.flush()                   # the interior runs while the host waits and talks
                self._wait_edges(done)
                self._exchange((c,))
                self.halo_times["half-sweeps"] += 1
                self.halo_times["exchanges"] += 1
            inner.t += 1

    def _valid_rows(self, j):
        """(row_begin, n_rows, row_wrap) of half-sweep j = 1 .. 2k of a cycle:
        the local slabs whose neighbours are still valid, j slabs in from the
        outer ends of the halos, rounded out to whole work items."""
        sr, rpi, n = self.slab_rows, self.inner.rows_per_item, self.local_rows
        # rows counted from the outer end of the lower halo (local slab own + h)
        lo = j * sr // rpi * rpi
        hi = -(-(n - j * sr) // rpi) * rpi
        return ((lo - self.h * sr) % n, hi - lo, n)

    def _interior(self, j):
        """(first, end) local rows of half-sweep j's rows that need no halo: j
        units in from the own slabs' ends, a unit a slab, or in 2D the rows of a
        work item if more (so the interiors of successive half-sweeps stay
        nested a slab apart: each reads only the one before)."""
        unit = max(self.slab_rows, self.inner.rows_per_item)
        return j * unit, self.own * self.slab_rows - j * unit

    def _most_ahead(self):
        """Sweeps of the next cycle whose interiors can run during an exchange:
        up to AHEAD (AHEAD_LARGE for large 3D shares), short of a whole cycle,
        while their interiors are not empty on any rank (the least over the
        ranks: collective)."""
        from mpi4py import MPI
        large = self.dim == 3 and self.own * int(np.prod(self.shape[:-1])) >= self.AHEAD_LARGE_SITES
        ahead = min(self.AHEAD_LARGE if large else self.AHEAD, self.k - 1)
        while ahead and self._interior(2 * ahead)[1] <= self._interior(2 * ahead)[0]:
            ahead -= 1
        return self.comm.allreduce(ahead, op=MPI.MIN)

    def _sweep_deep(self, n, thresholds):
        """h >= 2: k = h / 2 sweeps per exchange (see the module doc)."""
        inner, q, sr, h, own = self.inner, self.dev.queue, self.slab_rows, self.h, self.own
        n_local = self.local_rows
        if own > 2 * h:
            edges, interior = ((own - h) * sr, 2 * h * sr, own * sr), (h * sr, (own - 2 * h) * sr, own * sr)
        else:
            edges, interior = (0, own * sr, own * sr), None
        left = n
        while left:
            left -= 1
            self._phase += 1
            j = 2 * self._phase - 1                 # colour 0's half-sweep in the cycle
            # the first launch after an exchange waits for the halo writes
            wait = [e for e in self._written if e is not None] or None
            self._launch("update", 0, self._valid_rows(j), thresholds, wait_for=wait)
            self._written = [None, None]
            self.halo_times["half-sweeps"] += 2
            if self._phase < self.k:
                self._launch("update", 1, self._valid_rows(j + 1), thresholds)
                inner.t += 1
                continue
            # the cycle's last sweep: colour 0's edge slabs are final, read them
            # while colour 1 updates its edge slabs, then those while the interior runs
            self._read_edges(0)
            done1 = self._launch("edges", 1, edges, thresholds)
            read1 = self._read_edges(1)
            if interior:
                self._launch("update", 1, interior, thresholds)
            inner.t += 1
            # the next cycle's first sweeps where they need no halo (they change
            # the own slabs, after the edge slabs' device copies)
            ahead = min(self._ahead, left)
            for s in range(ahead):
                for c in (0, 1):
                    first, end = self._interior(2 * s + c + 1)
                    self._launch("ahead", c, (first, end - first, n_local), thresholds, t=inner.t + s)
            q.flush()
            # one wait (the copy queue is in order: colour 0's read is done before
            # colour 1's), one exchange of both colours; colour 1's edges read
            # colour 0's halos
            self._wait_edges(read1)
            self._exchange((0, 1), wait_for=[done1])
            self.halo_times["exchanges"] += 1
            # the rest of those sweeps (the ring of local rows outside each
            # interior: the halos, the own slabs' edges, and rows beyond the valid
            # region, whose updates are wrong either way)
            for s in range(ahead):
                for c in (0, 1):
                    first, end = self._interior(2 * s + c + 1)
                    wait = [e for e in self._written if e is not None] if s == c == 0 else None
                    self._launch("rings", c, (end % n_local, n_local - (end - first), n_local), thresholds,
                                 t=inner.t + s, wait_for=wait)
            inner.t += ahead
            left -= ahead
            self._phase = ahead
            self.halo_times["half-sweeps"] += 2 * ahead

    # ------------------------------------------------------------ observables
    def measure_into(self, buffer, index):
        """This rank's (bond, M) sums; reduce_measurements adds the ranks' up."""
        self.inner.measure_into(buffer, index)

    def reduce_measurements(self, out):
        """A copy of an int64 array of measurements summed over the ranks."""
        from mpi4py import MPI
        out = np.array(out, dtype=np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, out, op=MPI.SUM)
        return out

    def sums(self):
        """(bond sum, magnetization) of the whole lattice (collective)."""
        bond, mag = self.inner.sums()
        both = self.reduce_measurements(np.array([bond, mag], dtype=np.int64).reshape(2, 1))
        return both[0].copy(), both[1].copy()

    def get_state(self):
        """The state of this rank's multispin backend (the same on every rank)."""
        return self.inner.get_state()

    def set_state(self, state):
        """Restore a :meth:`get_state` dict."""
        self.inner.set_state(state)


def check_gather(shape):
    """Host memory for the whole lattice (int8) on every rank."""
    check_host_memory(int(np.prod(shape)), "gathering the whole lattice on every rank",
                      "Use Samples and sums instead of spins() for lattices this large.")
