"""Moving a series to the device: from pageable or pinned host memory, whole or in
segments that kernels can start on while the rest is still on its way.

Paths (`Transfer.path`):

* ``"pageable"``: the host array is ordinary NumPy memory; the driver copies it
  through its own staging buffers (on NVIDIA about 9-12 GB/s).
* ``"pinned"``: the array lives in page-locked memory: a ``CL_MEM_ALLOC_HOST_PTR``
  buffer mapped once with ``enqueue_map_buffer`` and kept mapped; the caller
  fills the mapped array with NumPy and it is written to a device buffer
  straight from there (DMA, no extra host copy).  NVIDIA's OpenCL best-practice
  recipe for full-speed transfers.
* ``"pinned-unmap"``: the same buffer is unmapped after filling and copied
  buffer to buffer on the device side.

``Transfer.overlap``: the copy is split into the segments the caller asks for
and enqueued on a second queue; each segment's event lets the kernel that
needs it start while later segments are still being copied.  Without overlap
the copy is one command on the device's queue, ahead of the kernels.

Host staging buffers (pinned and device-side) are kept per device for reuse by
the next call: at most ``CACHE_SLOTS`` of them and ``CACHE_BYTES`` in all, each
sized up to a round capacity, so repeated calls of similar length pay the
allocation (and page locking) once.  If pinned memory cannot be had, the
transfer falls back to the pageable path.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .._validate import choice
from ..errors import DeviceError

PATHS = ("pageable", "pinned", "pinned-unmap")
CACHE_SLOTS = 2                 # free staging slots kept per device
CACHE_BYTES = 1 << 29           # ... of at most this much in all (each: device + pinned)
PINNED_MIN_BYTES = 1 << 20      # below this the default path is pageable (nothing to win)


@dataclass(frozen=True)
class Transfer:
    path: str = "pageable"
    overlap: bool = False

    @property
    def name(self) -> str:
        return self.path + ("+overlap" if self.overlap else "")


def parse(spec) -> Transfer:
    """'pageable', 'pinned', 'pinned-unmap', each optionally with '+overlap'."""
    if isinstance(spec, Transfer):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"_transfer must be a string such as 'pinned+overlap', got {spec!r}")
    path, _, extra = spec.partition("+")
    choice("_transfer", path, PATHS)
    if extra not in ("", "overlap"):
        raise ValueError(f"_transfer: only '+overlap' may follow the path, got {spec!r}")
    return Transfer(path, extra == "overlap")


def default(dev, nbytes: int) -> Transfer:
    """Pinned memory with overlapped segments on GPUs for inputs of a megabyte or
    more (benchmarks/bench_timeseries.py measures every path; see
    docs/timeseries.md), the plain pageable copy otherwise: on CPU devices the
    "device" memory is host memory and there is nothing to gain."""
    if dev.facts.is_gpu and nbytes >= PINNED_MIN_BYTES:
        return Transfer("pinned", True)
    return Transfer("pageable", False)


def capacity(nbytes: int) -> int:
    """nbytes rounded up to four significant bits (at most 1/8 over), at least 4 KiB."""
    nbytes = max(int(nbytes), 4096)
    step = 1 << max(0, nbytes.bit_length() - 4)
    return -(-nbytes // step) * step


class _Slot:
    """One device buffer and, made on first use, one pinned host buffer, both of
    `cap` bytes."""

    def __init__(self, dev, cap: int):
        self.cap = cap
        # a pyopencl Array, so that the test suite's Oclgrind bookkeeping sees it
        self.device = cla.empty(dev.queue, cap, np.uint8)
        self.pinned = None          # cl.Buffer with ALLOC_HOST_PTR
        self.mapped = None          # its mapped host array (uint8, cap), or None

    def map(self, queue) -> np.ndarray:
        if self.pinned is None:
            mf = cl.mem_flags
            self.pinned = cl.Buffer(queue.context, mf.READ_ONLY | mf.ALLOC_HOST_PTR, self.cap)
        if self.mapped is None:
            self.mapped, _ = cl.enqueue_map_buffer(queue, self.pinned, cl.map_flags.WRITE, 0,
                                                   (self.cap,), np.uint8, is_blocking=True)
        return self.mapped

    def unmap(self, queue):
        """Enqueue the unmap; returns its event."""
        m, self.mapped = self.mapped, None
        return m.base.release(queue)

    def release(self):
        if self.mapped is not None:
            self.mapped.base.release()
            self.mapped = None


class _DeviceCache:
    def __init__(self):
        self.free: list[_Slot] = []
        self.copy_queue = None


_caches: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _cache(dev) -> _DeviceCache:
    c = _caches.get(dev)
    if c is None:
        c = _caches[dev] = _DeviceCache()
    return c


def _take(dev, nbytes: int) -> _Slot:
    cap = max(int(nbytes), min(capacity(nbytes), dev.facts.max_alloc))
    with _lock:
        c = _cache(dev)
        fits = [s for s in c.free if cap <= s.cap <= 2 * cap]
        if fits:
            slot = min(fits, key=lambda s: s.cap)
            c.free.remove(slot)
            return slot
    try:
        return _Slot(dev, cap)
    except cl.MemoryError:
        raise DeviceError(f"{dev.name}: out of device memory for {nbytes} bytes") from None


def _give_back(dev, slot: _Slot):
    with _lock:
        c = _cache(dev)
        c.free.insert(0, slot)                  # most recently used first
        while len(c.free) > CACHE_SLOTS or sum(s.cap for s in c.free) > CACHE_BYTES:
            c.free.pop().release()


def cached_bytes(dev) -> int:
    """Device memory held by the free staging slots of `dev`."""
    with _lock:
        c = _caches.get(dev)
        return sum(s.cap for s in c.free) if c is not None else 0


def clear_cache(dev=None):
    """Drop the cached staging buffers (of one device, or all)."""
    with _lock:
        for d in ([dev] if dev is not None else list(_caches)):
            c = _caches.get(d)
            if c is not None:
                for s in c.free:
                    s.release()
                c.free.clear()


def copy_queue(dev) -> cl.CommandQueue:
    """A second in-order queue on the device's context, for copies that overlap
    kernels running on dev.queue."""
    with _lock:
        c = _cache(dev)
        if c.copy_queue is None:
            c.copy_queue = cl.CommandQueue(dev.context, dev.cl_device)
        return c.copy_queue


class Staged:
    """Context manager for one upload of `nbytes`::

        with Staged(dev, nbytes, transfer) as st:
            fill(st.host)                   # uint8 array of nbytes; view it as needed
            waits = st.send(segment_ends)   # per segment: the events a kernel must wait for
            ... kernels on st.buffer (a cl.Buffer) ...; read the results (blocking)

    The staging slot goes back to the cache on exit, so the caller must have
    waited for everything that uses it (a blocking read of the results does)."""

    def __init__(self, dev, nbytes: int, transfer: Transfer):
        self.dev, self.nbytes, self.transfer = dev, int(nbytes), transfer
        self.slot = None
        self.host = None
        self.path = transfer.path

    def __enter__(self):
        self.slot = _take(self.dev, self.nbytes)
        if self.path != "pageable":
            try:
                self.host = self.slot.map(self.dev.queue)[:self.nbytes]
            except cl.Error:
                self.path = "pageable"          # no pinned memory to be had
        if self.path == "pageable":
            self.host = np.empty(self.nbytes, np.uint8)
        return self

    def remap(self):
        """Map the pinned buffer again after a "pinned-unmap" send (its contents
        are kept), so that the same data can be sent again (the benchmark)."""
        if self.path == "pinned-unmap" and self.slot.mapped is None:
            self.host = self.slot.map(self.dev.queue)[:self.nbytes]

    @property
    def buffer(self) -> cl.Buffer:
        return self.slot.device.data

    def send(self, ends) -> list[list]:
        """Enqueue the copy of bytes [0, ends[-1]) (ends increasing, at most
        nbytes) and return, for each segment [ends[k-1], ends[k]), the events a
        kernel reading it must wait for (empty lists when the copy runs on
        dev.queue)."""
        ends = [int(e) for e in ends]
        if any(b < a for a, b in zip(ends, ends[1:])) or not 0 < ends[-1] <= self.nbytes:
            raise ValueError("segment ends must increase up to at most nbytes")
        overlap = self.transfer.overlap
        queue = copy_queue(self.dev) if overlap else self.dev.queue
        dst = self.buffer
        try:
            pending = []
            if self.path == "pinned-unmap":
                pending = [self.slot.unmap(queue)]
                self.host = None                # no longer ours to write
            segments = list(zip([0] + ends[:-1], ends)) if overlap else [(0, ends[-1])]
            if self.dev.facts.vendor == "oclgrind":
                # Oclgrind 19.10's uninitialised-value checker forgets what earlier
                # writes into a buffer initialised when a later one writes at an offset
                # (false reports); the kernels still get one event per segment.
                segments = [(0, ends[-1])] * len(segments)
            events = []
            for k, (a, b) in enumerate(segments):
                if b == a or (k and segments[k - 1] == (a, b)):
                    events.append(events[-1] if events else None)
                    continue
                if self.path == "pinned-unmap":
                    ev = cl.enqueue_copy(queue, dst, self.slot.pinned, byte_count=b - a,
                                         src_offset=a, dst_offset=a, wait_for=pending or None)
                else:
                    ev = cl.enqueue_copy(queue, dst, self.host[a:b], dst_offset=a,
                                         is_blocking=False)
                events.append(ev)
            if self.dev.facts.vendor == "oclgrind":
                queue.finish()
        except cl.MemoryError:
            raise DeviceError(f"{self.dev.name}: out of device memory for {self.nbytes} "
                              "bytes") from None
        if not overlap:
            return [[] for _ in ends]
        return [[ev] if ev is not None else [] for ev in events]

    def __exit__(self, *exc):
        if exc[0] is not None:
            self.dev.queue.finish()
        if self.transfer.overlap:
            copy_queue(self.dev).finish()
        _give_back(self.dev, self.slot)
        self.slot = self.host = None
        return False
