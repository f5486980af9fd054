"""``reduce_sum``: the sum of an array on the device, with the shared reduction module."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla

from .._typing import ArrayLike
from .devices import DeviceSpec, fp64_missing, resolve_device
from .facts import DeviceFacts

_CL_TYPES = {np.dtype(t): n for t, n in [
    (np.int8, "char"), (np.uint8, "uchar"), (np.int16, "short"), (np.uint16, "ushort"),
    (np.int32, "int"), (np.uint32, "uint"), (np.int64, "long"), (np.uint64, "ulong"),
    (np.float32, "float"), (np.float64, "double")]}
_ACC_DTYPE = {"long": np.int64, "ulong": np.uint64, "double": np.float64,
              "compensated": np.dtype([("hi", np.float32), ("lo", np.float32)])}


def work_group_size(facts: DeviceFacts, wanted: int = 256) -> int:
    """The largest power of two <= min(wanted, the device's maximum)."""
    limit = max(1, min(wanted, facts.max_work_group))
    return 1 << (limit.bit_length() - 1)


def reduce_sum(array: ArrayLike, device: DeviceSpec = None, accumulate: str | None = None) -> int | float:
    """Sum of a 1-D (or flattened) NumPy or pyopencl array, computed on the device.

    Integers accumulate exactly in 64 bits. Floats accumulate in float64 where
    the device has fp64 and in compensated float32 (TwoSum pairs) where not;
    ``accumulate="double"|"compensated"`` forces one. Returns an int or a float.
    """
    dev = resolve_device(device)
    on_device = isinstance(array, cla.Array)
    dtype = np.dtype(array.dtype) if on_device or hasattr(array, "dtype") else None
    if dtype is None:
        array = np.asarray(array)
        dtype = array.dtype
    if dtype not in _CL_TYPES:
        raise ValueError(f"reduce_sum: dtype must be one of {sorted(str(t) for t in _CL_TYPES)}, got {dtype}")
    if dtype == np.float64 and not dev.facts.fp64:
        raise fp64_missing(dev, "reduce_sum: float64 input", "float32 input")
    if dtype.kind == "f":
        acc = accumulate or ("double" if dev.facts.fp64 else "compensated")
        if acc not in ("double", "compensated"):
            raise ValueError(f"reduce_sum: accumulate must be 'double' or 'compensated', got {acc!r}")
        if acc == "double" and not dev.facts.fp64:
            raise fp64_missing(dev, "reduce_sum: accumulate='double'", "accumulate='compensated'")
    else:
        if accumulate is not None:
            raise ValueError("reduce_sum: accumulate applies to float input only")
        acc = "ulong" if dtype == np.uint64 else "long"
    n = int(np.prod(array.shape))
    if n == 0:
        return 0 if dtype.kind != "f" else 0.0
    wg = work_group_size(dev.facts)
    prg = dev.build("common/reduce.cl", in_t=_CL_TYPES[dtype], acc=acc, wg=wg)
    x = array if on_device else cla.to_device(dev.queue, np.ascontiguousarray(array).ravel())
    groups = min(-(-n // wg), 4 * wg)
    partial = cla.empty(dev.queue, groups, _ACC_DTYPE[acc])
    out = cla.empty(dev.queue, 1, _ACC_DTYPE[acc])
    prg.reduce_sum_partial(dev.queue, (groups * wg,), (wg,), x.data, np.uint64(n), partial.data)
    prg.reduce_sum_finish(dev.queue, (wg,), (wg,), partial.data, np.uint64(groups), out.data)
    r = out.get()[0]
    if acc == "compensated":
        return float(np.float64(r["hi"]) + np.float64(r["lo"]))
    return float(r) if dtype.kind == "f" else int(r)
