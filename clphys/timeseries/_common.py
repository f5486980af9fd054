"""Input checks and device-side representations shared by the time-series functions."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .. import _validate
from ..errors import DeviceError

MAX_LENGTH = 2**31 - 1          # kernels index the series with 32-bit integers


def series(name: str, values, min_len: int, why: str) -> np.ndarray:
    """A finite 1-D float64 copy of `values` (array-like of real numbers) with at
    least `min_len` points; `why` says where the minimum comes from."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a 1-D array-like of real numbers, got a string")
    arr = _validate.finite_array(name, values, ndim=1)
    if arr.size < min_len:
        raise ValueError(f"{name} needs at least {min_len} points ({why}), got {arr.size}")
    if arr.size > MAX_LENGTH:
        raise ValueError(f"{name} may have at most {MAX_LENGTH} points, got {arr.size}")
    return arr.astype(np.float64, copy=False)


def float_pairs(p: np.ndarray) -> np.ndarray:
    """(n, 2) float32 (hi, lo) with hi + lo = p - p[0] to about 2^-48 relative:
    kernels subtract a nearby element in this form and keep float32 accuracy
    relative to local differences, whatever the series' offset."""
    d = p - p[0]
    hi = d.astype(np.float32)
    lo = (d - hi.astype(np.float64)).astype(np.float32)
    return np.ascontiguousarray(np.stack([hi, lo], axis=1))


def fill_pairs(out: np.ndarray, p: np.ndarray):
    """float_pairs(p) written into out, an (n, 2) float32 array."""
    d = p - p[0]
    out[:, 0] = d
    out[:, 1] = d - out[:, 0]


def fill_blocked(table: np.ndarray, out: np.ndarray, p: np.ndarray, block: int):
    """The "blocked" layout of pairs.cl: out[t] = float32(p[t] - p[b * block]) with
    b = t // block, and table[b] = (hi, lo) float32 pair of p[b * block] - p[0].
    The float64 differences are exact for nearby values, so out keeps float32
    accuracy relative to the excursion within a block whatever the offset."""
    n = p.size
    base = p[::block]
    fill_pairs(table, base)
    full = n // block * block
    np.subtract(p[:full].reshape(-1, block), base[:full // block, None],
                out=out[:full].reshape(-1, block), casting="same_kind")
    if full < n:
        np.subtract(p[full:], base[-1], out=out[full:], casting="same_kind")


def accumulator(dev, forced=None) -> str:
    """'double' on devices with fp64, else 'compensated'; `forced` picks one
    (tests use it to cover the float32 path on fp64 devices)."""
    if forced is None:
        return "double" if dev.facts.fp64 else "compensated"
    _validate.choice("_accumulate", forced, ("double", "compensated"))
    if forced == "double" and not dev.facts.fp64:
        raise ValueError(f"_accumulate='double' needs fp64, which {dev.name} lacks")
    return forced


ACC_DTYPE = {"double": np.dtype(np.float64),
             "compensated": np.dtype([("hi", np.float32), ("lo", np.float32)])}


def acc_to_float64(a: np.ndarray) -> np.ndarray:
    """Accumulator values read back from the device as float64."""
    if a.dtype.names:
        return a["hi"].astype(np.float64) + a["lo"].astype(np.float64)
    return a.astype(np.float64)


def device_array(dev, host: np.ndarray) -> cla.Array:
    try:
        return cla.to_device(dev.queue, host)
    except cl.MemoryError:
        raise DeviceError(f"{dev.name}: out of device memory for {host.nbytes} bytes") from None


def pow2_at_least(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def pow2_at_most(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)
