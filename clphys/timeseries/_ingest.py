"""The input of hurst() and autocorrelation(): validated on the host in O(number of
series), then uploaded once as the caller's values and checked, scaled and converted on
the device (cl_kernels/timeseries/ingest.cl).

On the host: the shape, dtype and length checks; float64, float32, int64 and int32 arrays
in C order are sent as they are (other dtypes, and arrays that are not contiguous, are
first converted to one of those: one pass); a list of series is copied piece by piece
into the transfer buffer.  On the device: finiteness (the host reads back one number per
block and names the first bad value), the power of two 2^e that brings each series' max
|value| into [1/2, 1), the mean and spread (for the centre of the autocorrelation), and
the conversion to the layout the pair kernels or the FFT read.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..runtime import staging, workspace
from . import _common

DEVICE_DTYPES = {np.dtype(np.float64): "double", np.dtype(np.float32): "float",
                 np.dtype(np.int64): "long", np.dtype(np.int32): "int"}
NONE = 0x7FFFFFFF                # ingest.cl: no bad value in a block
ZERO_KEY = -4000                 # ingest.cl: the exponent key of zero


class Batch:
    """Series checked on the host: `arrays` (1-D, C-contiguous, all of `dtype`, views of
    the caller's memory where it allowed), `single` (the caller gave one 1-D series) and,
    for a C-contiguous 2-D array, `whole` (uploaded in one piece); `index`: each series'
    place in the caller's batch (messages name it)."""

    __slots__ = ("name", "arrays", "dtype", "single", "whole", "lengths", "index")

    def __init__(self, name, arrays, single, whole=None, index=None):
        self.name, self.arrays, self.single, self.whole = name, arrays, single, whole
        self.dtype = arrays[0].dtype
        self.lengths = np.array([a.size for a in arrays], dtype=np.int64)
        self.index = list(range(len(arrays))) if index is None else list(index)

    def __len__(self):
        return len(self.arrays)

    def subset(self, index) -> "Batch":
        """The series `index` (positions in this batch) as a batch of their own."""
        return Batch(self.name, [self.arrays[s] for s in index], single=False,
                     index=[self.index[s] for s in index])

    def label(self, s: int) -> str:
        return self.name if self.single else f"{self.name}[{self.index[s]}]"

    def first_values(self) -> np.ndarray:
        return np.array([float(a[0]) for a in self.arrays])


def _device_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype the device reads: float64/float32/int64/int32 as they are, smaller
    integers and float16 widened exactly, uint32 to int64, uint64 to float64."""
    if dtype in DEVICE_DTYPES:
        return dtype
    if dtype.kind == "f":
        return np.dtype(np.float32) if dtype.itemsize < 4 else np.dtype(np.float64)
    if dtype.kind in "iu" and dtype.itemsize < 4:
        return np.dtype(np.int32)
    if dtype.kind == "u" and dtype.itemsize == 4:
        return np.dtype(np.int64)
    return np.dtype(np.float64)


def _as_array(name, values):
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be an array-like of real numbers, got a string")
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError) as exc:
        raise TypeError(f"{name} must be an array-like of real numbers: {exc}") from None
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be real numbers, got dtype {arr.dtype}")
    return arr


def _is_list_of_series(values) -> bool:
    """A list or tuple whose first element is itself a sequence or array (not a number)."""
    if not isinstance(values, (list, tuple)) or not values:
        return False
    first = values[0]
    return isinstance(first, (list, tuple, np.ndarray)) and np.ndim(first) >= 1


def batch(name: str, values, min_len: int, why: str) -> Batch:
    """One series (1-D array-like), a batch (2-D array, one series per row) or a list of
    1-D series of any lengths, each with at least `min_len` points (`why` says where the
    minimum comes from) and at most 2^31 - 1.  Costs O(number of series) on the host for
    float64/float32/int64/int32 arrays in C order."""
    if _is_list_of_series(values):
        arrays = []
        for s, v in enumerate(values):
            a = _as_array(f"{name}[{s}]", v)
            if a.ndim != 1:
                raise ValueError(f"{name}[{s}] must be 1-D, got shape {a.shape}")
            arrays.append(a)
        dtype = _device_dtype(np.result_type(*[a.dtype for a in arrays]))
        arrays = [np.ascontiguousarray(a, dtype=dtype) for a in arrays]
        b = Batch(name, arrays, single=False)
    else:
        arr = _as_array(name, values)
        if arr.ndim not in (1, 2) or (arr.ndim == 2 and arr.shape[0] == 0):
            raise ValueError(f"{name} must be 1-D (a series), 2-D (n_series, T) or a list of "
                             f"1-D series, got shape {arr.shape}")
        arr = np.ascontiguousarray(arr, dtype=_device_dtype(arr.dtype))
        if arr.ndim == 1:
            b = Batch(name, [arr], single=True, whole=arr)
        else:
            b = Batch(name, list(arr), single=False, whole=arr)
    short, long_ = b.lengths < min_len, b.lengths > _common.MAX_LENGTH
    if short.any():
        s = int(np.argmax(short))
        raise ValueError(f"{b.label(s)} needs at least {min_len} points ({why}), "
                         f"got {b.lengths[s]}")
    if long_.any():
        s = int(np.argmax(long_))
        raise ValueError(f"{b.label(s)} may have at most {_common.MAX_LENGTH} points, "
                         f"got {b.lengths[s]}")
    return b


def centres(s1, s2, n, shift) -> np.ndarray:
    """Per series: shift + its mean rounded to a power of two near its spread, from the
    sums s1, s2 of n values d = v - shift (so that data on a binary grid stays on it)."""
    with np.errstate(all="ignore"):
        mean = np.asarray(s1, np.float64) / n
        sd = np.sqrt(np.maximum(s2 / n - mean * mean, 0.0))
        step = np.where(sd > 0, np.ldexp(1.0, np.frexp(sd)[1] - 1), 1.0)
        # (np.rint: half to even, as Python's round; vectorised: a loop cost ~3 us a series)
        return np.where(np.isfinite(mean), shift + np.rint(mean / step) * step,
                        np.asarray(shift, np.float64))


class Input:
    """The raw values of a Batch on one device and the ingest.cl kernels over them.

    `span` values per block (the unit of the per-block results and of the windows);
    `layout` and `block` as in ingest.cl; `f64`: double arithmetic (else float pairs).
    A series too long for the device is worked on in windows [v0, v1) (one series only):
    `load(st, (v0, v1))` uploads one, the other calls name the window they work on."""

    def __init__(self, dev, b: Batch, span: int, layout: str, f64: bool, block: int = 256):
        self.dev, self.b, self.span, self.layout, self.f64 = dev, b, span, layout, f64
        self.raw = DEVICE_DTYPES[b.dtype]
        self.itemsize = b.dtype.itemsize
        self.wg = min(_common.pow2_at_most(span), 256, _common.pow2_at_most(
            dev.facts.max_work_group))
        while span % self.wg:
            self.wg //= 2
        self.prg = dev.build("timeseries/ingest.cl", raw=self.raw, f64=f64, wg=self.wg,
                             span=span, layout=layout, block=block)
        n = b.lengths
        self.nblocks = -(-n // span)
        self.boff = np.concatenate([[0], np.cumsum(self.nblocks)]).astype(np.uint32)
        self.raw_off = np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64)
        self.acc = _common.ACC_DTYPE["double" if f64 else "compensated"]
        self.shift_dtype = np.dtype(np.float64) if f64 else np.dtype((np.float32, 2))
        self.len_dev = self.small_array(n.astype(np.uint32))
        self.boff_dev = self.small_array(self.boff)
        self.exps: np.ndarray | None = None
        self.window = None

    # -- small per-series arrays

    def small_array(self, host: np.ndarray) -> cla.Array:
        return workspace.device_array(self.dev, np.ascontiguousarray(host), blocking=False)

    def scaled(self, values: np.ndarray) -> np.ndarray:
        """Per-series float64 values (already scaled) as the kernels' shift_t."""
        values = np.asarray(values, dtype=np.float64)
        if self.f64:
            return values
        hi = values.astype(np.float32)
        return np.stack([hi, (values - hi).astype(np.float32)], axis=-1)

    # -- upload

    def raw_bytes(self, window=None) -> int:
        if window is None:
            return int(self.b.lengths.sum()) * self.itemsize
        return (window[1] - window[0]) * self.itemsize

    def load(self, st: staging.Staged, window=None, on_segment=None):
        """Enqueue the upload of the series (or the window (v0, v1) of the only one);
        on_segment: see staging.Staged.put (the kernels may run on what has arrived)."""
        self.window = window
        self.x = st.buffer
        self.off_dev = self.small_array(self.raw_off if window is None
                                else np.array([-window[0]], dtype=np.int64))
        st.put(self._pieces(window), on_segment)

    def begin(self, st: staging.Staged):
        """Start the host copies of a streamed load(st, on_segment=...) of the whole batch
        early, while the caller prepares the kernels (Staged.begin)."""
        st.begin(self._pieces(None), streamed=True)

    def _pieces(self, window):
        b = self.b
        if window is not None:
            return [(0, b.arrays[0][window[0]:window[1]])]
        if b.whole is not None:
            return [(0, b.whole)]
        return [(int(o) * self.itemsize, a) for o, a in zip(self.raw_off, b.arrays)]

    def _blocks(self, v0=None, v1=None):
        """The blocks [lo, hi) of the values [v0, v1) of the window's series, or all."""
        if self.window is None and v0 is None:
            return 0, int(self.boff[-1])
        return v0 // self.span, -(-v1 // self.span)

    # -- kernels

    def check(self, own=None) -> np.ndarray:
        """Run the finiteness and exponent check on the loaded values ([v0, v1) of a
        window: `own`, the values this window is the first to hold); returns the
        per-block results (int32 (bad index, key) pairs) read back (blocking)."""
        lo, hi = self._blocks(*(own or (None, None)))
        res = workspace.work_array(self.dev, (hi - lo, 2), np.int32)
        self.check_blocks(lo, hi, res, lo)
        return res.get()

    def check_blocks(self, lo: int, hi: int, out: cla.Array, out_lo: int = 0):
        """Enqueue the check of the blocks [lo, hi), block b's result to out[b - out_lo]
        (int32 pairs on the device: a streamed upload checks each segment as it arrives
        and reads them all once; a read of pageable memory per segment would wait for the
        queue on NVIDIA, holding up the host)."""
        self.prg.ts_ingest_check(self.dev.queue, ((hi - lo) * self.wg,), (self.wg,), self.x,
                                 self.off_dev.data, self.len_dev.data, self.boff_dev.data,
                                 np.uint32(len(self.b)), np.uint32(lo), np.uint32(out_lo),
                                 out.data)

    def scales(self, blocks: np.ndarray, upload: bool = True):
        """From the check's blocks (of every series, in order): raise ValueError at the
        first non-finite value, else set and return the exponents e (per series), and
        (`upload`) send them to the device for the kernels."""
        bad = blocks[:, 0] != NONE
        if bad.any():
            k = int(np.argmax(bad))
            s = int(np.searchsorted(self.boff, k, side="right")) - 1
            self.raise_bad(s, (k - int(self.boff[s])) * self.span + int(blocks[k, 0]))
        keys = np.maximum.reduceat(blocks[:, 1], self.boff[:-1].astype(np.int64))
        self.exps = np.where(keys == ZERO_KEY, 0, -keys).astype(np.int32)
        if upload:
            self.exps_dev = self.small_array(self.exps)
        return self.exps

    def raise_bad(self, s: int, t: int):
        """ValueError naming the non-finite value at index t of series s."""
        raise ValueError(f"{self.b.label(s)} has a non-finite value (NaN or inf): "
                         f"{self.b.arrays[s][t]} at index {t}")

    def moments(self, shift, own=None) -> np.ndarray:
        """Per-block (Σ d, Σ d²), d = v 2^e - shift (per series), read back as float64."""
        lo, hi = self._blocks(*(own or (None, None)))
        out = workspace.work_array(self.dev, 2 * (hi - lo), self.acc)
        sh = self.small_array(self.scaled(shift))
        self.prg.ts_ingest_moments(self.dev.queue, ((hi - lo) * self.wg,), (self.wg,), self.x,
                                   self.off_dev.data, self.len_dev.data, self.boff_dev.data,
                                   np.uint32(len(self.b)), np.uint32(lo), np.uint32(lo),
                                   self.exps_dev.data, sh.data, out.data)
        return _common.acc_to_float64(out.get()).reshape(-1, 2)

    def centres(self, sums: np.ndarray, shift: np.ndarray) -> np.ndarray:
        """The centre of each series: its mean rounded to a power of two near its spread
        (so that data on a binary grid stays on it), from the moments' blocks."""
        starts = self.boff[:-1].astype(np.int64)
        s1 = np.add.reduceat(sums[:, 0], starts)
        s2 = np.add.reduceat(sums[:, 1], starts)
        return centres(s1, s2, self.b.lengths, shift)

    def convert(self, y: cl.Buffer, yoff: np.ndarray, ylen: np.ndarray, centre, tab=None,
                sums=None, window=None, blocks=None):
        """Enqueue the conversion into `y` (rows at yoff, ylen positions each); for a
        window (v0, v1) of the only series, its positions [v0, v1) go to y[0 ..].
        `sums` (one accumulator per output block, or None): Σ y per block.  `blocks`
        (lo, hi): only these output blocks (of the whole batch, no window)."""
        yoff = np.asarray(yoff, dtype=np.uint64)
        ylen = np.asarray(ylen, dtype=np.uint32)
        nb = -(-ylen.astype(np.int64) // self.span)
        boff = np.concatenate([[0], np.cumsum(nb)]).astype(np.uint32)
        if window is None:
            lo, hi = blocks or (0, int(boff[-1]))
            ybase, t_end = 0, None
        else:
            lo, hi = window[0] // self.span, -(-window[1] // self.span)
            ybase, t_end = window[0], window[1]
        ends = (ylen if t_end is None else np.minimum(ylen, t_end)).astype(np.uint32)
        dummy = self._dummy()
        if sums is None and self.layout in ("float", "real"):
            # these layouts write every block's (Σ y, Σ y²) at sums[2 b], sums[2 b + 1]:
            # room for them (the small dummy was written past its end; the Intel CPU
            # runtime, whose buffers live in the host heap, then crashed)
            sums = workspace.work_array(self.dev, 2 * int(boff[-1]), self.acc).data
        # the small arrays once per call, not per segment of a streamed upload; a centre
        # already on the device (a buffer: a streamed batch's) as it is
        on_device = isinstance(centre, cl.MemoryObjectHolder)
        centre = centre if on_device else self.scaled(centre)
        key = (boff.tobytes(), centre if on_device else centre.tobytes(), yoff.tobytes(),
               ends.tobytes())
        if getattr(self, "_convert_key", None) != key:
            self._convert_key = key
            self._convert_args = [a if isinstance(a, cl.MemoryObjectHolder)
                                  else self.small_array(a).data for a in (boff, centre, yoff, ends)]
        d_boff, d_centre, d_yoff, d_ends = self._convert_args
        self.prg.ts_ingest_convert(
            self.dev.queue, ((hi - lo) * self.wg,), (self.wg,), self.x, self.off_dev.data,
            self.len_dev.data, d_boff, np.uint32(len(self.b)), np.uint32(lo),
            self.exps_dev.data, d_centre, y, d_yoff, d_ends, np.int64(ybase),
            tab if tab is not None else dummy, sums if sums is not None else dummy)
        return boff

    def _dummy(self) -> cl.Buffer:
        if getattr(self, "_dummy_buf", None) is None:
            self._dummy_buf = workspace.device_array(self.dev, np.zeros(4))
        return self._dummy_buf.data
