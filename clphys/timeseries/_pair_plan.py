"""The choices made before the device for the pair sums of hurst() and
autocorrelation(): the code shape of pairs.cl, the pair function of each q, the
checks of the arguments, and whether the FFT path costs less."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .. import _validate
from ..runtime import staging, workspace
from . import _common, _fft

BLOCK = 256                   # values per offset block of the "blocked" layout (Hurst)
JACK_BLOCKS = 16              # jackknife blocks of pair start times per series
STAGING_SLACK = 9 / 8         # staging buffers are rounded up by at most 1/8 (runtime.staging.capacity)
Q_MIN, Q_MAX = 0.01, 1000.0



@dataclass(frozen=True)
class PairShape:
    """Code shape of pairs.cl: `wg` work items per group, each summing `lags_per_item`
    lags; `tile` values of t per local-memory tile; `run_length` pair terms summed in
    float32 before the accumulator; `groups` work groups per series share the tiles
    (None: a few per compute unit).  The template keeps its short names (lpi, chunk,
    run)."""
    wg: int
    lags_per_item: int
    tile: int
    run_length: int = 32
    groups: int | None = None


class Timeline:
    """Named points of one call's host timeline, (name, time.perf_counter()), taken where
    the host waits for the device anyway (no extra synchronisation): what the benchmark
    reports as a call's phases."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, float]] = []

    def mark(self, name: str):
        self.marks.append((name, time.perf_counter()))


def default_pair_shape(facts, nlags: int, shortest: int = 1 << 30, kinds=("absdiff",)) -> PairShape:
    """Tiles of 1024 values on GPUs, 512 on CPUs, halved (down to 32) while the shortest
    series has fewer than JACK_BLOCKS tiles, so that it still gets its error bars, or
    while they do not fit local memory (a general q keeps (hi, lo) pairs there: 8 bytes
    a value).  The pair loop is unrolled over a run, so on CPUs a general q's costlier
    terms get shorter runs: 4 for 2^(q log2 x), 8 for integer powers beside other pair
    functions (32 x 8 inlined powers made PoCL's code scalar: 8x slower; measured on
    two cores of an AMD EPYC).

    GPUs: 5 lags per item in work groups of a multiple of the SIMD width (224 x 5 for
    1024 lags).  An odd lpi keeps the items' strided local-memory reads (tb[tt + me + j],
    stride lpi) off each other's banks: on the H100 224 x 5 ran the pair kernels in
    3.21 / 2.85 ms (hurst / acf, T = 2^24, 1024 lags) against 3.59 / 3.78 ms for 128 x 8."""
    if facts.is_gpu:
        lpi, lo, hi, chunk = 5, max(32, facts.wg_multiple), 256, 1024
    else:
        lpi, lo, hi, chunk = 8, 8, 64, 512
    lpi = max(1, min(lpi, -(-nlags // lo)))
    items = -(-nlags // lpi)
    items = -(-items // lo) * lo if facts.is_gpu else _common.pow2_at_least(items)
    wg = min(max(items, lo), hi, facts.max_work_group)
    size = 8 if needs_maxima(kinds) else 4
    while chunk > 32 and (size * (2 * chunk + wg * lpi) > facts.local_mem // 2
                          or shortest < JACK_BLOCKS * chunk):
        chunk //= 2
    run = 32
    if not facts.is_gpu and "powdiff" in kinds:
        run = 4
    elif not facts.is_gpu and needs_maxima(kinds) and len(kinds) > 1:
        run = 8
    return PairShape(wg=wg, lags_per_item=lpi, tile=chunk, run_length=min(run, chunk))


def check_stream(value):
    if value is not None and not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"stream must be None, True or False, got {value!r}")
    return value


def check_max_lag(max_lag) -> int:
    return _validate.integer("max_lag", max_lag, 1, _common.MAX_LENGTH - 1)


def check_transfer(value):
    return None if value is None else staging.parse(value)


def check_method(method):
    return _validate.choice("method", method, ("auto", "direct", "fft"))


def check_errors(errors):
    return _validate.boolean("errors", errors)


def check_qs(q):
    """(tuple of q, whether a list was given)."""
    if isinstance(q, (list, tuple, np.ndarray)):
        try:
            arr = np.asarray(q, dtype=object) if not isinstance(q, np.ndarray) else q
        except ValueError:              # ragged nesting
            arr = None
        if arr is None or arr.ndim != 1:
            raise ValueError(f"q must be a number or a flat list of numbers, got {q!r}")
        if arr.size == 0:
            raise ValueError("q must not be empty")
        return tuple(_validate.real("q", v, Q_MIN, Q_MAX) for v in arr), True
    return (_validate.real("q", q, Q_MIN, Q_MAX),), False


_KIND = {1.0: "absdiff", 2.0: "sqdiff"}


MAX_INT_POWER = 16            # integer q up to this: x^q by multiplications (pairs.cl "ipow")


def pair_kind(q: float) -> str:
    """The pair function of pairs.cl for S_q."""
    if q in _KIND:
        return _KIND[q]
    return f"ipow{int(q)}" if q == int(q) and 3 <= q <= MAX_INT_POWER else "powdiff"


def needs_maxima(kinds) -> bool:
    """Whether the kinds need the per-lag maxima first (a general q: |Δp|/M <= 1)."""
    return any(k not in ("absdiff", "sqdiff", "product") for k in kinds)


def pair_cost(kind: str) -> int:
    """A pair term's cost relative to a maximum's, for the progress bar (so that its
    estimate of the time left holds across the passes; measured with PoCL)."""
    return 5 if kind == "powdiff" else 2 if kind.startswith("ipow") else 1


CL_OUT = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


def out_dtype(b) -> np.dtype:
    """Results in float32 for float32 input (half the bytes to bring back; the estimates
    are good to ~1e-7 anyway), float64 otherwise."""
    return np.dtype(np.float32) if b.dtype == np.float32 else np.dtype(np.float64)


# Direct pair terms that take as long as one "L log2 L" of the FFT path, by device kind
# (GPU: an estimate from the H100 figures, 1e13 lag-pairs/s against ~4 passes of 2^24
# complex doubles each way; CPU: measured with PoCL).  "auto" takes the FFT when the
# direct sums cost more (twice as much with errors: the FFT's error blocks double its
# work); on devices without fp64 (a float FFT, no errors) only at 20x.
FFT_RATIO = {True: 20.0, False: 9.0}


def use_fft(dev, lengths, max_lag, method, accumulate, needs_fp64=False,
             errors=True) -> bool:
    if method != "auto":
        return method == "fft"
    f64 = accumulate == "double"
    if needs_fp64 and not f64:
        return False
    direct, fft = _fft.cost(lengths, max_lag)
    return direct > FFT_RATIO[dev.facts.is_gpu] * fft * ((2 if errors else 1) if f64 else 20)



class TooLarge(Exception):
    """A batch of several series that does not fit the device at once."""


def held_bytes(dev) -> int:
    """Device memory held for reuse by earlier calls: staging slots and pooled arrays."""
    return staging.cached_bytes(dev) + workspace.pooled_bytes(dev)


def release_cached(dev):
    staging.clear_cache(dev)
    workspace.trim_pool(dev, 0)
