"""Input checks and device-side representations shared by the time-series functions."""

from __future__ import annotations

import bisect
import math

import numpy as np

from .. import _validate

MAX_LENGTH = 2**31 - 1          # kernels index the series with 32-bit integers


class Series:
    """A validated input series: `values` (1-D float64, possibly the caller's own
    array, never modified), its extremes `lo`, `hi`, and `exp`: the power of two
    2^exp that brings max |value| into [1/2, 1) (0 for an all-zero series).
    Kernels see values scaled by 2^exp, so float32 neither overflows nor loses
    precision to subnormals at any scale of the input; results are scaled back."""

    __slots__ = ("values", "lo", "hi", "exp")

    def __init__(self, values: np.ndarray, lo: float, hi: float):
        self.values, self.lo, self.hi = values, lo, hi
        big = max(-lo, hi)
        self.exp = -math.frexp(big)[1] if big > 0 else 0

    @property
    def size(self) -> int:
        return self.values.size

    def scaled(self) -> np.ndarray:
        """values * 2^exp as a new float64 array (exact unless a value is below
        2^-1022 of the largest, where it only loses bits that cannot matter)."""
        return np.ldexp(self.values, self.exp)

    def for_fill(self) -> tuple[np.ndarray, int]:
        """(array, exp) for the fill functions, which form differences before they
        scale: values near the float64 limit are scaled first, so that a difference
        of two of them cannot overflow (an extra pass only for such inputs)."""
        if self.exp < -1000:
            return self.scaled(), 0
        return self.values, self.exp


def series(name: str, values, min_len: int, why: str) -> Series:
    """A finite 1-D real series (array-like of real numbers) with at least
    `min_len` points; `why` says where the minimum comes from.  Finiteness comes
    from the extremes (one pass each, no temporary array); only a series that
    has a NaN or inf is searched for its position."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a 1-D array-like of real numbers, got a string")
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError) as exc:        # ragged lists and the like
        raise TypeError(f"{name} must be a 1-D array-like of real numbers: {exc}") from None
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be real numbers, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size < min_len:
        raise ValueError(f"{name} needs at least {min_len} points ({why}), got {arr.size}")
    if arr.size > MAX_LENGTH:
        raise ValueError(f"{name} may have at most {MAX_LENGTH} points, got {arr.size}")
    arr = arr.astype(np.float64, copy=False)
    lo, hi = float(arr.min()), float(arr.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        _validate.finite_array(name, arr)           # raises with the first position
    return Series(arr, lo, hi)


def fill_pairs(out: np.ndarray, p: np.ndarray, origin: float | None = None, exp: int = 0):
    """(hi, lo) float32 pairs of (p - origin) * 2^exp into out, an (n, 2) float32
    array: hi + lo equals the float64 value to about 2^-48 relative, so kernels
    can subtract a nearby element and keep float32 accuracy relative to local
    differences, whatever the offset.  origin defaults to p[0]."""
    d = p - (p[0] if origin is None else origin)
    if exp:
        np.ldexp(d, exp, out=d)
    out[:, 0] = d
    out[:, 1] = d - out[:, 0]


def float_pairs(p: np.ndarray, origin: float | None = None, exp: int = 0) -> np.ndarray:
    """fill_pairs into a new (n, 2) float32 array."""
    out = np.empty((p.size, 2), np.float32)
    fill_pairs(out, p, origin, exp)
    return out


def windowed(windows, load, launch):
    """``advance(start, count)`` for runtime.run_sliced over units that live in
    windows [(a, b), ...] (consecutive, covering the range) of which one is on
    the device at a time: load(w) when the work enters window w, then
    launch(w, start, end) for the part of the slice inside it."""
    starts = [a for a, _ in windows]
    current = [None]

    def advance(start, count):
        stop = start + count
        while start < stop:
            w = bisect.bisect_right(starts, start) - 1
            if current[0] != w:
                load(w)
                current[0] = w
            end = min(stop, windows[w][1])
            launch(w, start, end)
            start = end

    return advance


def accumulator(dev, forced=None) -> str:
    """'double' on devices with fp64, else 'compensated'; `forced` picks one (a plan's
    `accumulate`: tests cover the float32 path on fp64 devices with it)."""
    if forced is None:
        return "double" if dev.facts.fp64 else "compensated"
    _validate.choice("accumulate", forced, ("double", "compensated"))
    if forced == "double" and not dev.facts.fp64:
        raise ValueError(f"accumulate='double' needs fp64, which {dev.name} lacks")
    return forced


ACC_DTYPE = {"double": np.dtype(np.float64),
             "compensated": np.dtype([("hi", np.float32), ("lo", np.float32)]),
             "max": np.dtype(np.float32)}


def acc_to_float64(a: np.ndarray) -> np.ndarray:
    """Accumulator values read back from the device as float64."""
    if a.dtype.names:
        return a["hi"].astype(np.float64) + a["lo"].astype(np.float64)
    return a.astype(np.float64)


def pow2_at_least(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def pow2_at_most(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


# ---------------------------------------------------------------- pandas input

def _pandas_kind(values):
    """"series", "frame" or None, without importing pandas (it stays optional)."""
    cls = type(values)
    if cls.__module__.split(".")[0] != "pandas":
        return None
    return {"Series": "series", "DataFrame": "frame"}.get(cls.__name__)


def _regular_index(index) -> tuple[bool, str]:
    """Whether a pandas index is evenly spaced (timestamps, time deltas or numbers; other
    labels are taken as they come), and what its steps are if not."""
    if type(index).__name__ == "RangeIndex" or len(index) < 3:
        return True, ""
    if getattr(index, "freq", None) is not None:
        return True, ""
    if hasattr(index, "asi8"):                      # DatetimeIndex, TimedeltaIndex
        steps = np.diff(np.asarray(index.asi8, dtype=np.int64))
        if steps.size and np.all(steps == steps[0]) and steps[0] > 0:
            return True, ""
        if getattr(index, "inferred_freq", None) is not None:
            return True, ""
        unit = 1e9 * 86400
        return False, (f"steps from {steps.min() / unit:g} to {steps.max() / unit:g} days"
                       if steps.size else "")
    try:
        vals = np.asarray(index, dtype=np.float64)
    except (TypeError, ValueError):
        return True, ""                             # labels that are not times or numbers
    steps = np.diff(vals)
    if steps.size and steps[0] > 0 and np.allclose(steps, steps[0], rtol=1e-9, atol=0):
        return True, ""
    return False, f"steps from {steps.min():g} to {steps.max():g}"


def _column_values(col, what: str) -> np.ndarray:
    """A pandas column's values as a NumPy array (NaN for missing values)."""
    dtype = col.dtype
    if getattr(dtype, "kind", "O") == "b" or str(dtype) == "boolean":
        raise TypeError(f"{what} must be real numbers, got booleans")
    try:
        if getattr(dtype, "kind", "O") in "iuf" and isinstance(dtype, np.dtype):
            return col.to_numpy()
        return col.to_numpy(dtype=np.float64, na_value=np.nan)   # nullable and object dtypes
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be real numbers, got dtype {dtype}") from None


def labelled(values, name: str = "x", nan: str = "raise", spacing: str = "raise"):
    """(values, labels) for the time-series functions: a pandas Series becomes its values
    (labels: (its name,)), a DataFrame a batch of its columns (labels: the column names;
    columns of equal length as a 2-D array, else a list of series); anything else (NumPy
    arrays, lists) is returned as it is with labels None, for _ingest.batch to check.

    nan: "raise" (ValueError naming the column and the index of the first NaN) or "drop"
    (left out: the values around a gap become neighbours).  spacing: "raise" (ValueError
    for an index of timestamps or numbers that is not evenly spaced: the analyses treat
    consecutive values as equally spaced) or "ignore" (take them as consecutive
    observations, as is usual for trading days).  pandas is imported by the caller's
    objects only."""
    kind = _pandas_kind(values)
    _validate.choice("nan", nan, ("raise", "drop"))
    _validate.choice("spacing", spacing, ("raise", "ignore"))
    if kind is None:
        return values, None
    if spacing == "raise":
        regular, steps = _regular_index(values.index)
        if not regular:
            raise ValueError(f"{name}: the index is not evenly spaced ({steps}); the analysis "
                             "treats consecutive values as equally spaced in time.  Pass "
                             "spacing='ignore' to take them as consecutive observations (as "
                             "usual for trading days), or resample the data first")
    columns = [(values.name, values)] if kind == "series" else list(values.items())
    if not columns:
        raise ValueError(f"{name} has no columns")
    arrays, labels = [], []
    for label, col in columns:
        what = name if kind == "series" else f"{name}[{label!r}]"
        arr = _column_values(col, what)
        if arr.dtype.kind == "f":
            bad = np.isnan(arr)
            if bad.any():
                if nan == "raise":
                    first = col.index[int(np.argmax(bad))]
                    raise ValueError(f"{what} has {int(bad.sum())} NaN value(s), the first at "
                                     f"index {first!r}: fill them, or pass nan='drop' to leave "
                                     "them out (the values around a gap become neighbours)")
                arr = arr[~bad]
        arrays.append(arr)
        labels.append(label)
    if kind == "series":
        return arrays[0], tuple(labels)
    if len({a.size for a in arrays}) == 1:
        return np.stack(arrays), tuple(labels)
    return arrays, tuple(labels)
