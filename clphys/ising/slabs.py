"""One Ising lattice split over MPI ranks in slabs: rows in 2D, z planes in 3D
(``Ising2D(L, T, comm=MPI.COMM_WORLD)``), with the multispin kernels.

Layout. A rank keeps its own slabs, then two halo slabs: the slab after its
last one, then the slab before its first (periodic over the ranks). The
kernels' periodic neighbour arithmetic over the local slabs then reads the
halos exactly where the lattice continues on the neighbouring ranks. Every
rank holds an even number of slabs, so a local row has the parity of its
global row (the colours need no shift), and the Philox counters of a row are
those of its global row: a seed gives bit for bit the spins of the same
lattice on one device, for any number of ranks.

A half-sweep of colour c: one launch updates the rows of one work item at
each edge of the own slabs, a second queue reads the two edge slabs into
pinned host buffers, the interior is launched, and while it runs the edge
slabs go to the neighbouring ranks (mpi4py Isend/Irecv) and the slabs
received are written into the halos (on the second queue, so the copies
overlap the interior; the next half-sweep's edges wait for them).
``lat.halo_times`` says where the host time went: waiting for the edge slabs
(the edge launch, and whatever of the previous half-sweep was still running,
plus the device-to-host copies), the exchange, and queueing the halo writes.

Why slabs and not 2D blocks: a 2D block of a multispin lattice needs halo
columns too, and a column of a multispin word layout is one bit of every
row's word (32 spins per word run along x): it would be gathered bit by bit
from every row. A slab's halo is a contiguous row (or plane) of words, one
copy each way, and its size (Lx / 8 bytes per row and colour: 4 KB at
L = 32768) is what a PCIe or network message does at its latency, so the
exchange (6-17 us measured on the 2-GPU machine) hides behind a
half-sweep's interior (~0.25-0.5 ms at 32768^2 per GPU). Blocks would cut
the halo volume only beyond ~Ly / Lx ranks per row of blocks, far above the
GPUs of one node.
"""

from __future__ import annotations

import time

import numpy as np
import pyopencl as cl

from .. import rng as _rng
from ..runtime import mpi
from ..runtime.memory import check_host_memory
from ._device import zeroed_buffer
from .multispin import MultispinBackend

__all__ = ["SlabBackend", "slab_shares"]


def slab_shares(n_slabs: int, size: int) -> list:
    """(first slab, slabs) of every rank: an even number (>= 2) each, as equal
    as that allows; ValueError if the lattice does not split so."""
    if n_slabs // 2 < size:
        raise ValueError(f"a lattice of {n_slabs} slabs (rows in 2D, z planes in 3D) cannot be split "
                         f"over {size} MPI ranks: every rank needs an even number (>= 2) of slabs "
                         f"(at most {n_slabs // 2} ranks)")
    return [(2 * a, 2 * n) for a, n in (mpi.split(n_slabs // 2, size, r) for r in range(size))]


class SlabBackend:
    """The backend of a lattice split over MPI ranks (see the module doc);
    implements the interface of clphys.ising.backends for one replica, its
    collective parts on every rank: sums() (reduced over the ranks), spins()
    (gathered), set_spins() (of the whole lattice), sweep() (halo exchanges)."""

    algorithm = "multispin"

    def __init__(self, comm, dev, shape, *, rng, seed, **options):
        self.comm = comm
        size, rank = mpi.comm_size_rank(comm)
        self.dim, self.shape = len(shape), tuple(shape)
        self.n_slabs = shape[-1]
        self.first, self.own = slab_shares(self.n_slabs, size)[rank]
        self.slab_rows = shape[1] if self.dim == 3 else 1          # rows per slab
        self.local_shape = self.shape[:-1] + (self.own + 2,)
        self.inner = MultispinBackend(dev, self.local_shape, 1, rng=rng, seed=seed, own=self.own, **options)
        self.dev, self.seed = dev, seed
        self.up, self.down = (rank - 1) % size, (rank + 1) % size
        # rows updated first at each edge: whole work items, at least a slab
        self.edge = max(self.inner.rows_per_item, self.slab_rows)
        self.words = self.slab_rows * self.inner.WR                # per slab and colour
        send_first, send_last, recv = self._host_buffers(dev, (self.words, self.words, 2 * self.words))
        # the halos are local slabs own (below) and own + 1 (above): one write
        self._host = [send_first, send_last, recv[:self.words], recv[self.words:]]
        self._recv = recv
        # Oclgrind's uninitialised-value checker loses writes at an offset into a
        # buffer: there the halos are patched into a copy of the whole colour array
        self._whole_writes = dev.facts.vendor == "oclgrind"
        # the slab copies go through a queue of their own, beside the kernels': the
        # edge slabs' reads and the halo writes overlap the interior's update
        self.copies = cl.CommandQueue(dev.context, dev.cl_device)
        self._written = [None, None]          # the last halo write of each colour
        self.halo_times = {"edge wait": 0.0, "exchange": 0.0, "halo writes": 0.0, "half-sweeps": 0}

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
    def device_bytes(cls, facts, local_shape, **options) -> dict:
        need = MultispinBackend.device_bytes(facts, local_shape, 1, **options)
        need.pop("band copies (several sweeps per launch)", None)
        need["natural layout (int8)"] = int(np.prod(local_shape))
        return need

    # ------------------------------------------------------------ halos
    def _slab_offset(self, slab) -> int:
        """Byte offset of local slab `slab` in a colour array."""
        return 4 * slab * self.words

    def _exchange(self, colour):
        """Send the edge slabs of `colour` (already read into the send buffers)
        and write the received ones into the halos."""
        send_first, send_last, recv_below, recv_above = self._host
        t0 = time.perf_counter()
        reqs = [self.comm.Irecv(recv_below, source=self.down, tag=2 * colour),
                self.comm.Irecv(recv_above, source=self.up, tag=2 * colour + 1),
                self.comm.Isend(send_first, dest=self.up, tag=2 * colour),
                self.comm.Isend(send_last, dest=self.down, tag=2 * colour + 1)]
        reqs[0].Waitall(reqs)
        t1 = time.perf_counter()
        buf = self.inner.bufs[colour]
        if self._whole_writes:
            q = self.dev.queue
            q.finish()
            whole = np.empty(self.inner.words, np.uint32)
            cl.enqueue_copy(q, whole, buf)
            whole[self.own * self.words:] = self._recv
            self._written[colour] = cl.enqueue_copy(q, buf, whole)
        else:
            self._written[colour] = cl.enqueue_copy(self.copies, buf, self._recv,
                                                    dst_offset=self._slab_offset(self.own),
                                                    is_blocking=False)
            self.copies.flush()
        self.halo_times["exchange"] += t1 - t0
        self.halo_times["halo writes"] += time.perf_counter() - t1

    def _read_edges(self, colour, after):
        """Read the edge slabs of `colour` once the kernel event `after` is done."""
        qc, buf = self.copies, self.inner.bufs[colour]
        cl.enqueue_copy(qc, self._host[0], buf, src_offset=self._slab_offset(0), is_blocking=False,
                        wait_for=[after])
        done = cl.enqueue_copy(qc, self._host[1], buf, src_offset=self._slab_offset(self.own - 1),
                               is_blocking=False)
        qc.flush()
        return done

    def _halos_written(self):
        """Later kernels (sums, spins, unpacking) wait for the halo writes."""
        pending = [e for e in self._written if e is not None]
        if pending:
            cl.enqueue_barrier(self.dev.queue, wait_for=pending)

    def exchange_halos(self):
        """Both colours' halos from the neighbours (after setting the spins)."""
        for c in (0, 1):
            self._read_edges(c, cl.enqueue_marker(self.dev.queue)).wait()
            self._exchange(c)
        self._halos_written()
        self.dev.queue.finish()

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
        g0 = self.first * self.slab_rows * (Lx // 2) // 4           # global group of local site 0
        prg.ising_init_spins(self.dev.queue, (2 * (-(-(n // 2) // 4)),), None, buf, np.uint32(1),
                             np.uint32(mode), np.uint32(k0), np.uint32(k1), np.uint32(0), np.uint32(g0))
        self.inner.set_spins_device(buf)

    def _local_rows(self):
        """Indices of the whole lattice's slabs held here: own, then the halos."""
        idx = np.arange(self.first, self.first + self.own + 1) % self.n_slabs
        return np.append(idx, (self.first - 1) % self.n_slabs)

    def set_spins(self, spins):
        """spins: (1, *lattice) int8 of the whole lattice (the same on every rank)."""
        local = np.take(spins[0], self._local_rows(), axis=0)
        self.inner.set_spins(local[None])

    def spins(self):
        """(1, *lattice) int8 of the whole lattice, on every rank."""
        mine = self.inner.spins()[0][:self.own]
        return np.concatenate(self.comm.allgather(mine), axis=0)[None]

    # ------------------------------------------------------------ dynamics
    def sweep(self, n, thresholds):
        inner, q, own_rows = self.inner, self.dev.queue, self.own * self.slab_rows
        edge = self.edge
        first_row = self.first * self.slab_rows
        # one launch for both edges (from the last `edge` rows on, wrapping to the
        # first), one for the interior; a thin share is all edge
        edges, interior = (((own_rows - edge, 2 * edge), (edge, own_rows - 2 * edge))
                           if own_rows > 2 * edge else ((0, own_rows), None))
        for _ in range(n):
            for c in (0, 1):
                # the edges read the other colour's halos: after their write
                wait = [self._written[1 - c]] if self._written[1 - c] is not None else None
                done_edges = inner.half_sweep(c, *edges, first_row, thresholds, wait_for=wait)
                done = self._read_edges(c, done_edges)
                if interior:
                    inner.half_sweep(c, *interior, first_row, thresholds)
                q.flush()                   # the interior runs while the host waits and talks
                t0 = time.perf_counter()
                done.wait()
                self.halo_times["edge wait"] += time.perf_counter() - t0
                self._exchange(c)
                self.halo_times["half-sweeps"] += 1
            inner.t += 1
        self._halos_written()

    # ------------------------------------------------------------ observables
    def measure_into(self, buffer, index):
        """This rank's (bond, M) sums; reduce_measurements adds the ranks' up."""
        self.inner.measure_into(buffer, index)

    def reduce_measurements(self, out):
        """Sum an int64 array of measurements over the ranks, in place."""
        from mpi4py import MPI
        self.comm.Allreduce(MPI.IN_PLACE, out, op=MPI.SUM)

    def sums(self):
        bond, mag = self.inner.sums()
        both = np.array([bond, mag], dtype=np.int64).reshape(2, 1)
        self.reduce_measurements(both)
        return both[0].copy(), both[1].copy()

    def get_state(self):
        return self.inner.get_state()

    def set_state(self, state):
        self.inner.set_state(state)


def check_gather(shape):
    """Host memory for the whole lattice (int8) on every rank."""
    check_host_memory(int(np.prod(shape)), "gathering the whole lattice on every rank",
                      "Use Samples and sums instead of spins() for lattices this large.")
