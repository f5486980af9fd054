"""Device arrays that live for one call: a memory pool per device (repeated calls
reuse its buffers instead of allocating), small read-only arrays kept on the device
by their content, and zeroed arrays (pooled or not)."""

from __future__ import annotations

import threading
import weakref

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.tools as cl_tools
from numpy.typing import DTypeLike

from ..errors import DeviceError
from .devices import Device


class SmallArray:
    """A small pooled device buffer for kernel arguments (`.data`): no pyopencl Array
    around it, whose construction cost ~20 us of host time per array and call."""

    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data


# The small read-only arrays of a call (lengths, offsets, q, ...) are mostly the same from
# one call to the next: up to SMALL_KEPT of them (of at most SMALL_BYTES each) stay on the
# device, found by their content, so a repeated call sends none of them again.
SMALL_BYTES = 4096
SMALL_KEPT = 256
_small: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def device_array(dev, host: np.ndarray, blocking: bool = True):
    """host on the device (a pyopencl Array); `blocking=False` only enqueues the copy
    (PyOpenCL keeps host alive until it is done), for the small arrays a call sends before
    its kernels: then, where the pool serves it, a SmallArray (only `.data`) that kernels
    must only read (a small one may be shared with other calls: see SMALL_KEPT)."""
    try:
        if blocking:
            return cla.to_device(dev.queue, host)
        host = np.ascontiguousarray(host)
        pool = _pool(dev)
        if pool is None:                        # Oclgrind: fresh buffers, as Arrays
            arr = work_array(dev, host.shape, host.dtype)
            cl.enqueue_copy(dev.queue, arr.data, host, is_blocking=False)
            return arr
        if host.nbytes > SMALL_BYTES:
            arr = SmallArray(pool.allocate(max(host.nbytes, 8)))
            cl.enqueue_copy(dev.queue, arr.data, host, is_blocking=False)
            return arr
        key = (host.dtype.str, host.tobytes())
        with _pool_lock:
            kept = _small.setdefault(dev, {})
            arr = kept.pop(key, None)
            if arr is None:
                arr = SmallArray(pool.allocate(max(host.nbytes, 8)))
                # (a buffer given back to the pool is reused on the same in-order queue:
                # after the kernels that read it)
                cl.enqueue_copy(dev.queue, arr.data, host, is_blocking=False)
                if len(kept) >= SMALL_KEPT:
                    del kept[next(iter(kept))]          # the least recently used
            kept[key] = arr                             # most recently used last
        return arr
    except cl.MemoryError:
        raise DeviceError(f"{dev.name}: out of device memory for {host.nbytes} bytes") from None


# Device work buffers come from a memory pool per device, so that repeated calls reuse
# them instead of allocating (and the driver mapping) tens of MB each time; at most
# POOL_HOLD_BYTES stay held between calls (trim_pool).  Not on Oclgrind: its checker must
# see fresh buffers to report reads of uninitialised memory.
POOL_HOLD_BYTES = 1 << 30
_pools: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_pool_lock = threading.Lock()


def _pool(dev):
    if not dev.facts.reused_buffers:
        return None
    with _pool_lock:
        pool = _pools.get(dev)
        if pool is None:
            pool = _pools[dev] = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(dev.queue))
        return pool


def work_array(dev, shape, dtype) -> cla.Array:
    """An uninitialised device array for the duration of a call (pooled)."""
    try:
        return cla.empty(dev.queue, shape, dtype, allocator=_pool(dev))
    except cl.MemoryError:
        raise DeviceError(f"{dev.name}: out of device memory for an array of shape {shape} "
                          f"({np.dtype(dtype).name})") from None


def pooled_bytes(dev) -> int:
    """Device memory the pool holds for reuse (not in use)."""
    pool = _pools.get(dev)
    return 0 if pool is None else int(pool.managed_bytes - pool.active_bytes)


def trim_pool(dev, keep: int = POOL_HOLD_BYTES):
    """Free what the pool holds if it is more than `keep` bytes (0: everything)."""
    pool = _pools.get(dev)
    if keep == 0:
        with _pool_lock:
            _small.pop(dev, None)
    if pool is not None and pooled_bytes(dev) > keep:
        pool.free_held()


def zeros(device: Device, shape: int | tuple[int, ...], dtype: DTypeLike, pooled: bool = False) -> cla.Array:
    """A zeroed device array; `pooled`: from the device's pool, for the duration of
    a call (:func:`work_array`). Where fills do not count as writes (Oclgrind's
    uninitialised-value checker), the zeros are written from the host."""
    if not device.facts.fill_initialises:
        return cla.to_device(device.queue, np.zeros(shape, dtype))
    if not pooled:
        return cla.zeros(device.queue, shape, dtype)
    arr = work_array(device, shape, dtype)
    cl.enqueue_fill_buffer(device.queue, arr.data, np.zeros(1, np.uint8), 0, arr.nbytes)
    return arr
