"""Moving host arrays (the time series a caller passes) to the device and results back:
from pageable or pinned host memory, in segments whose host copy overlaps the transfer
of the previous one.

Paths (`Transfer.path`):

* ``"pageable"``: the driver copies straight from the caller's arrays (ordinary NumPy
  memory) through its own staging buffers (on NVIDIA about 9-12 GB/s); no host copy of
  ours.  The default on CPU devices, whose "device" memory is host memory.
* ``"pinned"``: the values are copied (by the copy threads: NumPy releases the GIL) into a
  page-locked ``CL_MEM_ALLOC_HOST_PTR`` buffer, mapped once and kept mapped, and written
  to a device buffer straight from there (DMA, ~52 GB/s on an H100): NVIDIA's
  OpenCL best-practice recipe for full-speed transfers.
* ``"pinned-unmap"``: the same buffer is unmapped after filling and copied buffer to
  buffer on the device side.

``Transfer.overlap``: the pinned buffer is filled and sent in segments of
``SEGMENT_BYTES``, each sent as soon as it is filled, so the host copy of a segment
overlaps the DMA of the one before (the time is then about the larger of the two, not
their sum); without overlap the whole buffer is filled, then sent.

Host staging buffers (pinned and device-side) are kept per device for reuse by
the next call: at most ``CACHE_SLOTS`` of them and ``CACHE_BYTES`` in all, each
sized up to a round capacity, so repeated calls of similar length pay the
allocation (and page locking) once.  If pinned memory cannot be had, the
transfer falls back to the pageable path.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .._validate import choice
from ..errors import DeviceError

PATHS = ("pageable", "pinned", "pinned-unmap")
CACHE_SLOTS = 2                 # free staging slots kept per device
CACHE_BYTES = 1 << 29           # ... of at most this much in all (each: device + pinned)
PINNED_MIN_BYTES = 1 << 20      # below this the default path is pageable (nothing to win)
SEGMENT_BYTES = 1 << 24         # the pinned buffer is filled and sent this much at a time
# The copy threads (_Copier): every copy is cut into one slice per thread (of at least
# MIN_SLICE bytes), so the threads finish the segments of an upload one after the other,
# in order, and each segment's DMA overlaps the copy of the next.  Half the cores, at most
# 8: on the 16-core H100 / H200 hosts 8 persistent threads gave the fastest float32 calls
# (hurst 4.7-4.9 ms against 5.5-6.3 with 16 threads taking 4 MB jobs; 16 ordered threads
# 5.9-6.4: the host thread that enqueues the work and the driver need cores too).
COPY_THREADS = max(1, min(8, (os.cpu_count() or 1) // 2))
MIN_SLICE = 1 << 16
# While the copy threads work, the interpreter's switch interval (s; None: as it is): a
# copy thread waits up to that long for the GIL between two slices while the caller's
# thread runs Python (enqueueing kernels).  Python's default, 5 ms, held the copies up:
# 20 us took the float32 calls on an H200 from 5.4-5.8 ms to 4.1-5.2 (acf) and float64
# from 8.0-8.1 to 6.6-7.6.  Set only while an upload's copies run (the Staged context
# restores the interpreter's own value on exit, also after an error): no process-wide
# setting outlives the call.  CPU devices take the pageable path, which never sets it
# (forced pinned+overlap on PoCL, 2^22 values: no difference within the noise).
SWITCH_INTERVAL = 2e-5
# Streamed uploads (put with on_segment, begin): segments of STREAM_SEGMENT_BYTES, each
# sent as soon as it is in, on a queue of its own (a segment's DMA does not wait for the
# kernels enqueued on the one before).  Every segment costs the caller's thread ~0.2-0.4
# ms of enqueueing: cutting the last one into halves (8, 4, 2, 2 MB) made the float32
# single calls slower on an H200 (4.2-4.5 ms against 4.0-4.2).
STREAM_SEGMENT_BYTES = 1 << 24


def stream_segments(start: int, end: int) -> list[tuple[int, int]]:
    """The byte ranges of a streamed upload: STREAM_SEGMENT_BYTES each."""
    step = STREAM_SEGMENT_BYTES
    return [(a, min(end, a + step)) for a in range(start, end, step)]


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
        raise TypeError(f"transfer must be a string such as 'pinned+overlap', got {spec!r}")
    path, _, extra = spec.partition("+")
    choice("transfer", path, PATHS)
    if extra not in ("", "overlap"):
        raise ValueError(f"transfer: only '+overlap' may follow the path, got {spec!r}")
    return Transfer(path, extra == "overlap")


def default(dev, nbytes: int) -> Transfer:
    """Pinned memory filled and sent in overlapping segments on GPUs for inputs of
    a megabyte or more (benchmarks/bench_timeseries.py measures every path; see
    docs/timeseries.md), the pageable copy from the caller's arrays otherwise: on
    CPU devices the "device" memory is host memory and there is nothing to gain."""
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
        self.mapped: np.ndarray | None = None   # its mapped host array (uint8, cap), or None

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
    def __init__(self) -> None:
        self.free: list[_Slot] = []


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


class _Copier:
    """Persistent copy threads, each with its own first-in first-out inbox.  start() cuts
    a copy into one slice per thread and returns a _Copy to wait on: the slices of the
    copies started one after the other finish in that order (NumPy releases the GIL while
    it copies; there is one hand-over of the GIL per slice, not one per job and future)."""

    def __init__(self, n: int):
        self.inboxes: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(n)]
        self.next = 0                   # the thread that takes the next copy's first slice
        for i, box in enumerate(self.inboxes):
            threading.Thread(target=self._work, args=(box,), name=f"clphys-copy-{i}",
                             daemon=True).start()

    @staticmethod
    def _work(box):
        while True:
            dst, src, done = box.get()
            try:
                np.copyto(dst, src)
                done.put(None)
            except BaseException as exc:    # noqa: BLE001 - handed to the waiter
                done.put(exc)

    def start(self, dst: np.ndarray, src: np.ndarray) -> "_Copy":
        n, threads = src.size, len(self.inboxes)
        k = max(1, min(threads, n // MIN_SLICE))
        done: queue.SimpleQueue = queue.SimpleQueue()
        cuts = [n * i // k for i in range(k + 1)]
        for i in range(k):
            self.inboxes[(self.next + i) % threads].put(
                (dst[cuts[i]:cuts[i + 1]], src[cuts[i]:cuts[i + 1]], done))
        self.next = (self.next + k) % threads
        return _Copy(done, k)


class _Copy:
    def __init__(self, done, slices: int):
        self.done, self.left = done, slices

    def wait(self):
        """Until every slice is copied (again after an interrupted wait: only the rest)."""
        error = None
        while self.left:
            got = self.done.get()
            self.left -= 1
            error = error or got
        if error is not None:
            raise error


class _Copied:
    def wait(self):
        pass


_copiers: dict = {}


def _start_copy(dst: np.ndarray, src: np.ndarray):
    """Start dst[:] = src (uint8 views of equal size) on the copy threads; returns what to
    wait() on.  Copies below two slices, or with one copy thread, are done here."""
    if COPY_THREADS == 1 or src.size < 2 * MIN_SLICE:
        dst[:] = src
        return _Copied()
    with _lock:
        copier = _copiers.get(COPY_THREADS)
        if copier is None:
            copier = _copiers[COPY_THREADS] = _Copier(COPY_THREADS)
        return copier.start(dst, src)


_switch: dict[str, Any] = {"uploads": 0, "saved": None}


def _short_switch(step: int):
    """SWITCH_INTERVAL while any upload's copies run (step +1 at the start of one, -1 at
    its end); the interpreter's own interval back after the last."""
    with _lock:
        if _switch["uploads"] == 0 and step > 0:
            _switch["saved"] = sys.getswitchinterval()
            sys.setswitchinterval(SWITCH_INTERVAL)
        _switch["uploads"] += step
        if _switch["uploads"] == 0:
            sys.setswitchinterval(_switch["saved"])


_copy_queues: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _copy_queue(dev) -> cl.CommandQueue:
    """A second in-order queue on dev for streamed uploads."""
    with _lock:
        q = _copy_queues.get(dev)
        if q is None:
            q = _copy_queues[dev] = cl.CommandQueue(dev.queue.context, dev.queue.device)
        return q


class Staged:
    """Context manager for the uploads of up to `nbytes` into one device buffer::

        with Staged(dev, nbytes, transfer) as st:
            st.put([(byte_offset, array), ...])    # C-contiguous arrays, enqueued on dev.queue
            ... kernels on st.buffer (a cl.Buffer) ...; read the results (blocking)

    `put` may be called again (the next window of a long series) once the kernels that
    read the previous contents were enqueued.  The staging slot goes back to the cache on
    exit, after the queue is finished."""

    def __init__(self, dev, nbytes: int, transfer: Transfer):
        self.dev, self.nbytes, self.transfer = dev, int(nbytes), transfer
        self.slot: _Slot | None = None
        self.path = transfer.path
        self._sent = False
        self._copyq = None
        self._waits: list[Callable[..., object]] = []
        self._begun: dict[str, Any] | None = None
        self._switched = False      # SWITCH_INTERVAL set for this upload

    def __enter__(self):
        self.slot = _take(self.dev, self.nbytes)
        if self.path != "pageable":
            try:
                self.slot.map(self.dev.queue)
            except cl.Error:
                self.path = "pageable"          # no pinned memory to be had
        return self

    @property
    def buffer(self) -> cl.Buffer:
        assert self.slot is not None, "Staged.buffer outside its with block"
        return self.slot.device.data

    def put(self, pieces, on_segment=None):
        """Enqueue the upload of each (byte offset, C-contiguous array) of `pieces` (in
        increasing, non-overlapping order, within nbytes) to the device buffer.
        `on_segment(end)`: called after each segment's copy is enqueued, with the byte
        offset up to which the buffer is then written (the caller enqueues work on it
        while the host copies the next segments); the pageable path is then sent in
        segments too.  After begin(pieces): sends what it started."""
        if self._begun is None:
            self.begin(pieces, streamed=on_segment is not None)
        plan, self._begun = self._begun, None
        if plan is not None:
            self._send(plan, on_segment)

    def begin(self, pieces, streamed: bool = False):
        """Start the host side of put(pieces): the copy threads begin to fill the pinned
        buffer (streamed: in STREAM segments) while the caller prepares the
        kernels; the next put() sends it."""
        pieces = [(int(o), a.reshape(-1).view(np.uint8)) for o, a in pieces if a.size]
        if not pieces:
            self._begun = None
            return
        end = pieces[-1][0] + pieces[-1][1].size
        if pieces[0][0] < 0 or end > self.nbytes:
            raise ValueError("pieces must lie within the staged bytes")
        queue = self.dev.queue
        whole = not self.dev.facts.offset_writes          # one write of the whole range
        if self._sent:
            queue.finish()                      # the host buffer may still be on its way
            if self._copyq is not None:
                self._copyq.finish()
        self._sent = True
        start = pieces[0][0]
        plan = dict(pieces=pieces, start=start, end=end, host=None, waits=None)
        self._begun = plan
        if self.path == "pageable" and not whole:
            # the driver copies from the caller's memory
            plan["segments"] = stream_segments(start, end) if streamed else [(start, end)]
            return
        if self.path == "pageable":
            host = np.empty(self.nbytes, np.uint8)
        else:
            assert self.slot is not None        # set by __enter__: begin() runs within `with`
            host = self.slot.map(queue)         # (mapped again if the previous put unmapped it)
        # Oclgrind 19.10's uninitialised-value checker forgets what earlier writes into
        # a buffer initialised when a later one writes at an offset: one write there
        if whole or not (self.transfer.overlap or streamed):
            segments = [(start, end)]
        elif streamed:
            segments = stream_segments(start, end)
        else:
            segments = [(a, min(end, a + SEGMENT_BYTES))
                        for a in range(start, end, SEGMENT_BYTES)]
        # every segment's copy goes to the threads at once, in order; each segment is
        # sent as soon as its own slices are in
        copies = [[_start_copy(host[lo:hi], arr[lo - off:hi - off]) for off, arr in pieces
                   for lo, hi in [(max(a, off), min(b, off + arr.size))] if lo < hi]
                  for a, b in segments]
        waits: list[Callable[..., object]] = [lambda cs=cs: [c.wait() for c in cs] for cs in copies]
        self._waits = waits
        plan.update(host=host, segments=segments, waits=waits)
        if SWITCH_INTERVAL and COPY_THREADS > 1 and not self._switched:
            self._switched = True
            _short_switch(+1)

    def _send(self, plan, on_segment):
        """The device side of put(): each segment sent as soon as it is in."""
        queue, dst = self.dev.queue, self.buffer
        facts = self.dev.facts
        segments, host, start, end = plan["segments"], plan["host"], plan["start"], plan["end"]
        # several segments, streamed: the DMA on the copy queue and the compute queue waits
        # for each segment (for one segment the cross-queue wait would only cost)
        copyq = self._copyq = _copy_queue(self.dev) if on_segment and len(segments) > 1 \
            and facts.overlap else queue

        def send(src, off, blocking):
            ev = cl.enqueue_copy(copyq, dst, src, dst_offset=off, is_blocking=blocking)
            if copyq is not queue:
                cl.enqueue_barrier(queue, wait_for=[ev])
            if on_segment:
                on_segment(off + src.size)

        try:
            if host is None:                    # pageable: from the caller's arrays
                for a, b in segments:
                    for off, arr in plan["pieces"]:
                        lo, hi = max(a, off), min(b, off + arr.size)
                        if lo < hi:
                            send(arr[lo - off:hi - off], lo, False)
                return
            for (a, b), wait in zip(segments, plan["waits"]):
                wait()
                if self.path != "pinned-unmap":
                    send(host[a:b], a, not facts.queued_launches or self.path == "pageable")
            if self.path == "pinned-unmap":
                self.slot.unmap(queue)
                cl.enqueue_copy(queue, dst, self.slot.pinned, byte_count=end - start,
                                src_offset=start, dst_offset=start)
                if on_segment:
                    on_segment(end)
        except cl.MemoryError:
            raise DeviceError(f"{self.dev.name}: out of device memory for {self.nbytes} "
                              "bytes") from None
        finally:
            self._restore_switch()

    def _restore_switch(self):
        if self._switched:
            self._switched = False
            _short_switch(-1)

    def __exit__(self, *exc):
        self.dev.queue.finish()
        if self._copyq is not None:
            self._copyq.finish()
        for wait in self._waits:            # no copy thread may still write (an exception
            try:                            # or Ctrl-C left put() early)
                wait()
            except Exception:               # noqa: BLE001 - the first one was raised
                pass
        self._restore_switch()
        _give_back(self.dev, self.slot)
        self.slot = None
        return False


def download(dev, src: cl.Buffer, dst: np.ndarray, transfer: Transfer | None = None):
    """dst[:] = the first dst.nbytes bytes of the device buffer `src` (blocking).  Large
    results on GPUs come through a pinned staging buffer in segments, each copied out by
    the copy threads as soon as it is in, while the later ones are on their way (dst is
    typically a new array: the threads also share its first-touch page faults); small
    ones, and CPU devices, read straight into dst."""
    nbytes = dst.nbytes
    transfer = default(dev, nbytes) if transfer is None else transfer
    queue = dev.queue
    if transfer.path == "pageable" or nbytes == 0:
        cl.enqueue_copy(queue, dst, src, is_blocking=True)
        return dst
    slot = _take(dev, nbytes)
    try:
        try:
            host = slot.map(queue)
        except cl.Error:
            cl.enqueue_copy(queue, dst, src, is_blocking=True)
            return dst
        view = dst.reshape(-1).view(np.uint8)
        step = SEGMENT_BYTES if transfer.overlap else nbytes
        events = [(a, min(nbytes, a + step),
                   cl.enqueue_copy(queue, host[a:min(nbytes, a + step)], src, src_offset=a,
                                   is_blocking=False)) for a in range(0, nbytes, step)]
        copies = []
        for a, b, ev in events:
            ev.wait()
            copies.append(_start_copy(view[a:b], host[a:b]))
        for c in copies:
            c.wait()
    finally:
        queue.finish()
        _give_back(dev, slot)
    return dst


def download_all(dev, pairs, transfer: Transfer | None = None) -> list:
    """download() of each (device buffer, host array) of `pairs`; the small ones (the
    pageable path) are read without blocking and waited for once, not one wait each.
    Returns the host arrays."""
    events = []
    for src, dst in pairs:
        path = (default(dev, dst.nbytes) if transfer is None else transfer).path
        if path != "pageable":
            download(dev, src, dst, transfer)
        elif dst.nbytes:
            events.append(cl.enqueue_copy(dev.queue, dst, src, is_blocking=False))
    if events:
        cl.wait_for_events(events)
    return [dst for _, dst in pairs]
