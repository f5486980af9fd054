"""Hurst exponent H(Δt) and autocorrelation ρ(Δt) from sums over overlapping pairs, for
one series or a batch of them, with jackknife error bars.

The caller's values go to the device once (clphys/timeseries/_ingest.py: checked, scaled
and converted there).  For every lag l = lag0 .. the pair kernel (cl_kernels/timeseries/
pairs.cl) forms Σ_t f(y(t), y(t + l)) in one pass over the series with local-memory
tiles, per block of pair start times (the jackknife blocks); or, for the autocorrelation
and S_2 at many lags, an FFT gives the same sums (_fft.py).  finish.cl (devices with
fp64) or _finish.py (without) turns the sums into the estimates and their errors.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from dataclasses import dataclass

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .. import _validate
from ..progress import Progress, check_progress
from ..runtime import check_memory, fp64_missing, items_that_fit, resolve_device, run_sliced, zeros
from ..runtime.memory import USABLE_FRACTION
from . import _common, _fft, _finish
from . import _ingest
from . import _transfer as _xfer

__all__ = ["HurstResult", "AutocorrelationResult", "PairTuning", "LongMemoryWarning", "hurst",
           "autocorrelation"]


class LongMemoryWarning(RuntimeWarning):
    """hurst(): a series so persistent (H >= 3/4) that its jackknife errors are too small."""


@dataclass(frozen=True, eq=False)
class HurstResult:
    """S_q(Δt) and the local Hurst exponent H(Δt) at lags = 1 .. max_lag, with their
    jackknife errors S_err, H_err.

    Shapes: (max_lag,) for one series and one q; a batch adds a leading series axis
    (n_series, ..., max_lag), a list of q a q axis before the lags: (n_series, n_q,
    max_lag), or (n_q, max_lag) for one series.  `q` is a float, or an array for a list.
    H[..., 0] (Δt = 1) is NaN: the local slope needs the previous lag.  H is also NaN
    where S is 0 at Δt or Δt - 1 (a constant stretch); errors are NaN where fewer than
    two blocks exist.  `method`: "direct" (pair sums) or "fft".  `lags` (1 .. max_lag)
    is made on first use (for all lags of 2^24 values it is 128 MB).  `long_memory`
    (shape S.shape[:-1]): True where the series is so persistent at its largest lags
    (H >= 3/4) that S_err and H_err understate the errors (LongMemoryWarning)."""
    S: np.ndarray
    H: np.ndarray
    q: float
    S_err: np.ndarray = None
    H_err: np.ndarray = None
    method: str = "direct"
    long_memory: np.ndarray | bool = False

    @functools.cached_property
    def lags(self) -> np.ndarray:
        return np.arange(1, self.S.shape[-1] + 1)


@dataclass(frozen=True, eq=False)
class AutocorrelationResult:
    """ρ(Δt) at lags = 0 .. max_lag (ρ(0) = 1) and its error rho_err (0 at Δt = 0);
    rho has shape (max_lag + 1,) for one series, (n_series, max_lag + 1) for a batch.
    `stationary` says which form, `method` "direct" (pair sums) or "fft".  `lags`
    (0 .. max_lag) is made on first use: for all lags of 2^24 values it is 128 MB, whose
    page faults took 30-40 ms, most of such a call's time on an H200."""
    rho: np.ndarray
    stationary: bool
    rho_err: np.ndarray = None
    method: str = "direct"

    @functools.cached_property
    def lags(self) -> np.ndarray:
        return np.arange(self.rho.shape[-1])


@dataclass(frozen=True)
class PairTuning:
    """Code shape of pairs.cl: work-group size, lags per work item, t values per
    local-memory tile, t values per float32 run; `groups` work groups per series share
    the tiles (None: a few per compute unit)."""
    wg: int
    lpi: int
    chunk: int
    run: int = 32
    groups: int | None = None


BLOCK = 256                   # values per offset block of the "blocked" layout (Hurst)
JACK_BLOCKS = 16              # jackknife blocks of pair start times per series
# The first time-bounded slice covers about this many pair terms (then run_sliced
# doubles or halves it): a few ms on a CPU, well under a ms on a GPU.
# On GPUs 2^35 terms (~7 ms on an H100, well under the 0.25 s slice target on a GPU 30x
# slower): a T = 2^24, max_lag = 1024 job is one launch, not five launches each followed
# by a queue finish (the 2^30 start doubled).
FIRST_SLICE_PAIRS = {True: 1 << 35, False: 1 << 25}      # by DeviceFacts.is_gpu

# benchmarks/bench_timeseries.py sets TRACE to a list: (phase, time.perf_counter()) are
# appended at the points where the host waits for the device anyway (no extra syncs)
TRACE = None


TRACE_SYNC = None             # ... and a queue here: finished before a mark (a probe's split)


def _phase(name: str):
    if TRACE is not None:
        if TRACE_SYNC is not None:
            TRACE_SYNC.finish()
        TRACE.append((name, time.perf_counter()))


def _mark(name: str):
    """A point of the host's timeline (traced, not synced: inside a streamed upload)."""
    if TRACE is not None and TRACE_SYNC is None:
        TRACE.append((name, time.perf_counter()))


STAGING_SLACK = 9 / 8         # staging buffers are rounded up by at most 1/8 (_transfer.capacity)


def default_tuning(facts, nlags: int, shortest: int = 1 << 30, kinds=("absdiff",)) -> PairTuning:
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
    size = 8 if _scaled(kinds) else 4
    while chunk > 32 and (size * (2 * chunk + wg * lpi) > facts.local_mem // 2
                          or shortest < JACK_BLOCKS * chunk):
        chunk //= 2
    run = 32
    if not facts.is_gpu and "powdiff" in kinds:
        run = 4
    elif not facts.is_gpu and _scaled(kinds) and len(kinds) > 1:
        run = 8
    return PairTuning(wg=wg, lpi=lpi, chunk=chunk, run=min(run, chunk))


# Streaming (_Direct.stream): the provisional scale and centre come from the first
# HEAD_VALUES values (a fixed count: the result does not depend on the segment size); the
# sums made with them stand if max |x| exceeds the head's by less than 2^MAX_SCALE_GAP
# (and, for the autocorrelation, the centre is within half a standard deviation of the
# mean).  By default only jobs of at most STREAM_MAX_PAIRS pair terms stream (they run
# without time slices: no progress bar, Ctrl-C after the call).
HEAD_VALUES = 1 << 14
MAX_SCALE_GAP = 40
STREAM_MAX_PAIRS = {True: 1 << 37, False: 1 << 30}     # by DeviceFacts.is_gpu
# The provisional centre of a series longer than the head: from CENTRE_SAMPLE values
# spread over the whole series (one in each of CENTRE_SAMPLE equal strata, at a fixed
# pseudo-random place in it: no aliasing with a period of the series).  The head alone
# misled it for any series whose level wanders (a random walk's share, a drift): the
# streamed pass was then discarded (+3 ms on the H100 at T = 2^24).  0: from the head.
CENTRE_SAMPLE = 1 << 12
# A streamed batch's pair-sum launches (one per upload segment's rows) have about this
# many work groups per compute unit (at least tpb per row: see _Direct.stream_batch)
BATCH_GROUPS_PER_CU = {True: 16, False: 4}              # by DeviceFacts.is_gpu


def _sample_positions(n: int) -> np.ndarray:
    """The positions of the centre's sample in a series of n values (fixed for n)."""
    m = min(CENTRE_SAMPLE, n)
    stride = n // m
    i = np.arange(m, dtype=np.int64)
    return i * stride + (i * 2654435761 % (1 << 32)) % stride


def _pair_pass(run, st, centred: bool, pairs, stream, progress):
    """(block sums, exps) when the pair sums ran streamed (stream=None: short jobs,
    True: wherever _Direct.can_stream), else (None, exps) with the series prepared for
    run.sums().  A streamed pass of one series stands or falls in run.verify(), after
    the caller enqueued its finish: see _finished."""
    if stream is not False and run.can_stream_batch(pairs, progress, forced=bool(stream)):
        sums, exps = run.stream_batch(st, centred, pairs)
        _phase("streamed batch enqueued")
        return sums, exps
    if stream is not False and run.can_stream(pairs, progress, forced=bool(stream)):
        sums, exps = run.stream(st, centred, pairs)
        if sums is not None:
            return sums, exps
    return None, run.prepare(st, centred)


def _finished(run, st, centred: bool, sums, exps, finish, again):
    """finish(sums, exps) (the finish kernels and the results' download), enqueued behind
    a streamed pass before its checks are read, so that the host's work on them overlaps
    the device's last pair sums; then run.verify().  If the streamed pass does not stand,
    the series is prepared again from the values already on the device, and again() gives
    the sums to finish."""
    res = finish(sums, exps)
    if run.verify():
        return res
    exps = run.prepare(st, centred, checked=run.checked)
    res = finish(again(), exps)
    run.verify()
    return res


def _stream_arg(value):
    if value is not None and not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"_stream must be None, True or False, got {value!r}")
    return value


def _finish_rows(dev) -> int:
    """Rows of ts_pair_finish's work group: on GPUs 16 x 64 items add the groups' sums."""
    return _common.pow2_at_most(min(16, dev.facts.max_work_group // 64)) \
        if dev.facts.is_gpu else 1


class _Direct:
    """Pair sums over a batch of series on one device: the raw values are uploaded,
    checked and converted once (per window, for one series too long for the device),
    then the pair kernels run over them in time-bounded slices of tiles; the sums of
    every jackknife block come back.  Tiles, slices, windows and upload paths do not
    change a bit of the sums (pairs.cl folds every group's tiles in a fixed order)."""

    def __init__(self, dev, b: _ingest.Batch, nlags: int, lag0: int, value: str,
                 n_pairs: int, accumulate=None, tuning=None, what=""):
        self.dev, self.b, self.nlags, self.lag0, self.value = dev, b, nlags, lag0, value
        facts = dev.facts
        self.acc = _common.accumulator(dev, accumulate)
        self.f64 = self.acc == "double"
        n = b.lengths
        self.E = E = len(b)
        t = tuning or default_tuning(facts, nlags, int(n.min()))
        if t.wg > facts.max_work_group:
            raise ValueError(f"work-group size {t.wg} exceeds {dev.name}'s {facts.max_work_group}")
        self.tuning = t
        self.lag_blocks = -(-nlags // (t.wg * t.lpi))
        self.reach = lag0 + self.lag_blocks * t.wg * t.lpi     # values past a tile's start it reads
        self.nch = -(-(n - lag0) // t.chunk)                  # tiles per entry
        self.tiles = int(self.nch.max())
        # each entry's own jackknife blocks (as alone): K of tpb tiles, bl values each
        self.tpbs = -(-self.nch // JACK_BLOCKS)
        self.Ks = -(-self.nch // self.tpbs)
        self.bls = self.tpbs * t.chunk
        self.tpb, self.K = int(self.tpbs.max()), int(self.Ks.max())    # the largest
        acc_bytes = _common.ACC_DTYPE[self.acc].itemsize
        per_cu = 16 if facts.is_gpu else 4
        G = t.groups or max(1, -(-per_cu * facts.compute_units // (self.lag_blocks * E)))
        # the partial sums (K blocks of Gs = min(G, tpb) columns) take a quarter of the
        # device at most
        room = max(1, items_that_fit(dev, n_pairs * E * self.K * nlags * acc_bytes) // 4)
        self.G = max(1, G if room >= self.tpb else min(G, room))
        self.room = room
        self.Gs = min(self.G, self.tpb)
        self.elem = 8 if value == "float2" else 4
        self.align = BLOCK
        self.yoff = np.concatenate([[0], np.cumsum(-(-n // self.align) * self.align)[:-1]])
        self.ylen = n.copy()
        self.fixed = {
            "partial sums": n_pairs * E * self.K * self.Gs * nlags * acc_bytes,
            "block sums": n_pairs * E * self.K * nlags * acc_bytes,
            "results": 4 * n_pairs * E * nlags * 8,
            "per-tile sums": E * self.tiles * acc_bytes + E * 8 * 64,
            "checks and moments": 24 * (E * self.tiles + 1) + 64 * E}
        self.what = what
        self.windows = self._plan_windows()
        # The unit of the time-bounded slices: one tile of a piece of the entries and lag
        # blocks, at most FIRST_SLICE_PAIRS pair terms (one tile of 512 series at 1024 lags
        # was 2.7e8 terms: 48 s for a general q on two CPU cores before it was fast)
        cap, per_tile = FIRST_SLICE_PAIRS[facts.is_gpu], t.chunk * t.wg * t.lpi
        self.piece_lags = max(1, min(self.lag_blocks, cap // per_tile))
        self.piece_entries = max(1, min(E, cap // (per_tile * self.piece_lags)))
        self.lag_pieces = -(-self.lag_blocks // self.piece_lags)
        self.pieces = -(-E // self.piece_entries) * self.lag_pieces
        self.units = self.tiles * self.pieces
        self.first_slice = max(1, cap // (per_tile * self.piece_lags * self.piece_entries))
        self.rows = _finish_rows(dev)
        self.totals = None                    # the per-tile sums as read back
        self._tile_totals = None              # (totals, tile_totals() of them)
        self.moment_rows = None               # finish.cl's `mom` on the device (fp64)
        self._checks = []                     # a streamed batch's (host, device) checks
        self._reads = []                      # ... their reads, enqueued
        self._pending = None                  # a streamed series' checks, read at verify()
        self.checked = None                   # ... its check's blocks, if it did not stand

    # -- memory

    def _value_buffers(self, nvalues: int) -> dict:
        """The device buffers for nvalues of the batch: the staged raw values, the
        converted layout and its block table."""
        return {"series (as given)": math.ceil(STAGING_SLACK * nvalues * self.b.dtype.itemsize),
                "series (converted)": self.elem * (nvalues + self.align * self.E)
                + 8 * (-(-nvalues // BLOCK) + 1)}

    def _plan_windows(self) -> list[tuple[int, int]]:
        """Tile ranges of the one series whose values fit the device beside the fixed
        buffers: one window when they fit, else windows starting at multiples of the
        block (so that every window sees the same converted values as the whole)."""
        dev, chunk = self.dev, self.tuning.chunk
        fixed = sum(self.fixed.values())
        usable = dev.facts.global_mem * USABLE_FRACTION

        def fits(nvalues, room):
            bufs = self._value_buffers(nvalues)
            return sum(bufs.values()) + fixed <= room and \
                max(bufs.values()) <= dev.facts.max_alloc

        total = int(self.b.lengths.sum())
        if not fits(total, usable - _held(dev)):
            _release(dev)                   # what earlier calls left for reuse goes first
        if fits(total, usable):
            return [(0, self.tiles)]
        if self.E > 1:
            raise _TooLarge()
        unit = math.lcm(chunk, BLOCK) // chunk               # tiles per window step
        fit = unit
        if not fits(self.span(0, unit)[1], usable):
            check_memory(dev, {**self.fixed, **self._value_buffers(self.span(0, unit)[1])},
                         self.what, "Reduce max_lag.")
        while fit < self.tiles and fits(self.span(0, 2 * fit)[1], usable):
            fit *= 2
        step = fit // 2                     # then the largest multiple of unit that fits
        while step >= unit:
            if fits(self.span(0, fit + step // unit * unit)[1], usable):
                fit += step // unit * unit
            step //= 2
        return [(c, min(c + fit, self.tiles)) for c in range(0, self.tiles, fit)]

    def raw_bytes(self) -> int:
        """The bytes staged at once: the whole batch, or the largest window."""
        if len(self.windows) == 1:
            return int(self.b.lengths.sum()) * self.b.dtype.itemsize
        return max(self.span(*w)[1] - self.span(*w)[0] for w in self.windows) \
            * self.b.dtype.itemsize

    def span(self, c0: int, c1: int) -> tuple[int, int]:
        """The values [v0, v1) of the one series that the tiles [c0, c1) read."""
        chunk = self.tuning.chunk
        return c0 * chunk, min(int(self.b.lengths[0]), c1 * chunk + self.reach)

    # -- the run

    def _input(self):
        layout = {"blocked": "blocked", "float2": "float2", "float": "float"}[self.value]
        return _ingest.Input(self.dev, self.b, self.tuning.chunk, layout, self.f64, BLOCK)

    def prepare(self, st, centred: bool, checked=None):
        """Upload, check (ValueError at the first non-finite value), and for one window
        convert the whole batch; `centred`: the autocorrelation's centre (its mean on a
        binary grid) instead of the first value as the origin.  `checked`: the check's
        blocks of the values already uploaded (by stream()): no second upload."""
        dev, b, chunk = self.dev, self.b, self.tuning.chunk
        whole = len(self.windows) == 1
        if checked is not None:
            inp = self.inp
            blocks = checked
        elif whole:
            self.inp = inp = self._input()
            inp.load(st)
            blocks = inp.check()
        else:
            self.inp = inp = self._input()
            parts = []
            for c0, c1 in self.windows:
                w = self.span(c0, c1)
                inp.load(st, w)
                parts.append(inp.check(own=(w[0], min(w[1], c1 * chunk))))
            blocks = np.concatenate(parts)
        exps = inp.scales(blocks)
        _phase("upload and check")
        shift = np.ldexp(b.first_values(), exps)
        if centred:
            if whole:
                sums = inp.moments(shift)
            else:
                parts = []
                for c0, c1 in self.windows:
                    w = self.span(c0, c1)
                    inp.load(st, w)
                    parts.append(inp.moments(shift, own=(w[0], min(w[1], c1 * chunk))))
                sums = np.concatenate(parts)
            flat = np.add.reduceat(sums[:, 1], inp.boff[:-1].astype(np.int64)) == 0
            if flat.any():
                raise ValueError(f"{b.label(int(np.argmax(flat)))} is constant: its "
                                 "autocorrelation is undefined")
            self.centre = inp.centres(sums, shift)
            _phase("mean and spread")
        else:
            self.centre = shift
        self.totals = None                  # the per-tile sums as read back
        self._tile_totals = self.moment_rows = None
        if checked is None:
            self._allocate(centred)
        if whole:
            inp.convert(self.y.data, self.yoff, self.ylen, self.centre, tab=self.tab.data,
                        sums=self.tile_sums.data if centred else None)
        return exps

    def _allocate(self, centred: bool):
        """The converted series, its block table, the per-tile sums (`centred`) and the
        small per-series arrays of the pair kernels."""
        dev, inp = self.dev, self.inp
        whole = len(self.windows) == 1
        nvalues = int(self.ylen.sum() + self.align * self.E) if whole else \
            max(self.span(*w)[1] - self.span(*w)[0] for w in self.windows)
        try:
            self.y = _common.work_array(dev, nvalues * self.elem // 4, np.float32)
            self.tab = _common.work_array(dev, 2 * (-(-nvalues // BLOCK)) + 2, np.float32)
            tiles = int(inp.boff[-1]) if whole else self.tiles
            self.tile_sums = _common.work_array(dev, 2 * tiles, inp.acc) if centred else None
        except cl.MemoryError:
            raise _common.DeviceError(f"{dev.name}: out of device memory") from None
        self._voff = inp._array(self.yoff.astype(np.uint64))
        self._nts = inp._array(self.b.lengths.astype(np.uint32))
        self._ns = self._nts
        self._nchs = inp._array(self.nch.astype(np.uint32))
        self._tpbs = inp._array(self.tpbs.astype(np.uint32))

    # -- streaming: the pair sums run on each upload segment as it arrives

    def can_stream(self, pairs, progress, forced: bool) -> bool:
        """One series in one window, pair functions without a first pass (not a general q)
        and not Oclgrind (one upload there); unless `forced`, also a short job (no
        progress bar or time slices wanted) and, on CPUs (where nothing overlaps), a
        series within the head, whose provisional values are then the true ones (a
        discarded pass would cost as much as the real one).  A short series gains too:
        no separate pass for the mean, one wait for the device instead of three."""
        t = self.tuning
        facts = self.dev.facts
        pair_terms = self.tiles * t.chunk * self.lag_blocks * t.wg * t.lpi
        return (self.E == 1 and len(self.windows) == 1 and not _scaled(pairs)
                and facts.overlap
                and (forced or (progress in (None, False)
                                and pair_terms <= STREAM_MAX_PAIRS[facts.is_gpu]
                                and (facts.is_gpu or self.b.lengths[0] <= HEAD_VALUES))))

    def stream(self, st, centred: bool, pairs) -> tuple:
        """Upload the series in segments and, as each arrives, check and convert it with a
        provisional scale 2^e0 (from its first HEAD_VALUES values, on the host) and centre
        c0 (from CENTRE_SAMPLE values spread over it, or the head if it is no longer) and
        run the pair sums of every tile whose values are all in.  Returns (block sums,
        provisional exps), enqueued; verify() then tells whether the provisional values
        were close enough (see _stream_ok), or raises ValueError at the first non-finite
        value, as prepare() does.  (None, None) when the head is not finite: no stream."""
        b, t, dev = self.b, self.tuning, self.dev
        n, chunk = int(b.lengths[0]), t.chunk
        self.inp = inp = self._input()
        inp.begin(st)                           # the host copies start now
        head = np.asarray(b.arrays[0][:HEAD_VALUES], np.float64)
        big = float(np.max(np.abs(head)))
        if not math.isfinite(big):
            return None, None               # the check (unstreamed) names the bad value
        e0 = -math.frexp(big)[1] if big > 0 else 0
        shift = math.ldexp(float(head[0]), e0)
        if centred:
            a = b.arrays[0]
            pick = head if n <= HEAD_VALUES or not CENTRE_SAMPLE else \
                np.asarray(a[_sample_positions(n)], np.float64)
            with np.errstate(all="ignore"):
                d = np.ldexp(pick, e0) - shift
                # (einsum, not d @ d: BLAS wakes its threads, ~1-7 ms on a busy host)
                s1, s2 = float(d.sum()), float(np.einsum("i,i", d, d))
            if not (math.isfinite(s1) and math.isfinite(s2)):
                # a NaN or inf in the sample (the check names it), or values ~2^500 times
                # the head's: the streamed pass would be discarded
                return None, None
            centre = _ingest.centres(np.array([s1]), np.array([s2]), np.array([pick.size]),
                                     [shift])
        else:
            centre = np.array([shift])
        _mark("stream: provisional scale and centre")
        inp.exps = provisional = np.array([e0], np.int32)
        inp._exps = provisional_d = inp._array(inp.exps)
        self.centre = centre
        self._allocate(centred)
        job = self._pair_job(pairs)
        _mark("stream: buffers and pair job")
        nblocks, span, item = int(inp.boff[-1]), inp.span, b.dtype.itemsize
        checks = _common.work_array(dev, (nblocks, 2), np.int32)
        blocks = np.empty((nblocks, 2), np.int32)
        totals = np.empty(self.tile_sums.shape, self.tile_sums.dtype) if centred else None
        state = {"blocks": 0, "tiles": 0}

        def on_segment(end):
            _mark(f"stream: sent up to {end / 2**20:.0f} MB")
            v = end // item                     # values of the series now on the device
            ready = nblocks if v >= n else v // span
            lo = state["blocks"]
            if ready > lo:
                inp.check_blocks(lo, ready, checks)
                inp.convert(self.y.data, self.yoff, self.ylen, centre, tab=self.tab.data,
                            sums=self.tile_sums.data if centred else None, blocks=(lo, ready))
                state["blocks"] = ready
            # tile c reads the converted values [c chunk, c chunk + chunk + reach)
            done = n if ready == nblocks else ready * span
            tiles = self.tiles if done == n else \
                min(self.tiles, max(0, (done - chunk - self.reach) // chunk + 1))
            if tiles > state["tiles"]:
                self._launch(job, 0, state["tiles"], tiles)
                state["tiles"] = tiles

        inp.load(st, on_segment=on_segment)
        _phase("upload, check and pair sums enqueued")
        sums = self._finish_pairs(job)
        # what verify() needs, read once by read_checks() or verify(): with fp64 the checks
        # folded on the device (ts_ingest_scale: the first non-finite value and the
        # exponent) and the series' Σ y, Σ y² (the moment rows), a few bytes; else the
        # checks' blocks and the per-tile sums
        if self.f64:
            fold = [_common.work_array(dev, 1, dtype) for dtype in (np.int32, np.int32,
                                                                    np.float64)]
            inp.prg.ts_ingest_scale(dev.queue, (inp.wg,), (inp.wg,), inp.x, inp._off.data,
                                    inp._boff.data, np.uint32(0), np.uint32(1), checks.data,
                                    *(a.data for a in fold))
            self._checks = [(np.empty(1, np.int32), a) for a in fold[:2]] + \
                ([(np.empty(2, np.float64), self.device_moments())] if centred else [])
        else:
            self._checks = [(blocks, checks)] + ([(totals, self.tile_sums)] if centred else [])
        self._pending = dict(blocks=blocks, checks=checks, e0=e0, centred=centred,
                             provisional=(provisional, provisional_d))
        return sums, provisional

    # -- streaming a batch: each upload segment's complete rows are checked, scaled,
    # centred, converted and summed on the device as they arrive, no wait for the host

    def can_stream_batch(self, pairs, progress, forced: bool) -> bool:
        """Several series in one window, accumulated in double (the scale and centre are
        found on the device: ts_ingest_scale / _centre need fp64), pair functions without
        a first pass, room for G >= tpb groups per series (see stream_batch); unless
        `forced`, also a short job (no progress bar or time slices wanted) and not
        Oclgrind (one upload there: nothing to overlap)."""
        t = self.tuning
        facts = self.dev.facts
        pair_terms = self.E * self.tiles * t.chunk * self.lag_blocks * t.wg * t.lpi
        return (self.E > 1 and len(self.windows) == 1 and not _scaled(pairs)
                and self.f64 and self.room >= self.tpb and self._stream_fits()
                and (forced or (progress in (None, False) and facts.overlap
                                and pair_terms <= STREAM_MAX_PAIRS[facts.is_gpu])))

    def _stream_fits(self) -> bool:
        """Whether the device holds the batch with tpb partial-sum columns per block (the
        plan counted min(G, tpb)); what earlier calls left for reuse goes if needed."""
        fixed = dict(self.fixed)
        fixed["partial sums"] = fixed["partial sums"] // self.Gs * self.tpb
        values = self._value_buffers(int(self.b.lengths.sum()))
        need = sum(fixed.values()) + sum(values.values())
        usable = self.dev.facts.global_mem * USABLE_FRACTION
        if need > usable or fixed["partial sums"] > self.dev.facts.max_alloc:
            return False
        if need + _held(self.dev) > usable:
            _release(self.dev)
        return True

    def stream_batch(self, st, centred: bool, pairs) -> tuple:
        """Upload the batch in segments (_transfer.stream_segments) and, for the rows that
        each one completes, enqueue their check, scale (ts_ingest_scale: the exponent and
        the scaled first value, on the device), for the autocorrelation the mean and
        centre (ts_ingest_moments, ts_ingest_centre), the conversion and the pair sums of
        all their tiles, behind that segment's copy, so the next copy overlaps them.
        Then the block sums and (centred) finish.cl's moment rows, all on the device, and
        one non-blocking read of the per-series checks: verify() raises at a non-finite
        value or a constant series once the results are in.  Returns (block sums, the
        exponents on the device).

        The launches over a segment's rows use G >= tpb groups per series, enough to fill
        the device: with G >= tpb every tile has a partial-sum slot of its own
        (pairs.cl), so the sums are the same bits for any segment size and any such G."""
        b, dev, queue = self.b, self.dev, self.dev.queue
        facts = dev.facts
        self.inp = inp = self._input()
        inp.begin(st)                           # the host copies start now
        E, nb, item = self.E, int(inp.boff[-1]), b.dtype.itemsize
        rows_per_segment = max(1, _xfer.STREAM_SEGMENT_BYTES // (item * int(b.lengths.mean())))
        per_cu = BATCH_GROUPS_PER_CU[facts.is_gpu]
        want = -(-per_cu * facts.compute_units // (self.lag_blocks * min(E, rows_per_segment)))
        self.G = max(self.tpb, min(want, self.tiles))
        self.Gs = self.tpb
        arr = lambda n, dtype: _common.work_array(dev, n, dtype)  # noqa: E731
        checks, bad, exps, first = (arr((nb, 2), np.int32), arr(E, np.int32),
                                    arr(E, np.int32), arr(E, np.float64))
        inp._exps = exps
        if centred:
            mom, centre, stats = (arr(2 * nb, np.float64), arr(E, np.float64),
                                  arr((E, 2), np.float64))
        else:
            centre, stats = first, None
        self.centre = centre
        self._allocate(centred)
        job = self._pair_job(pairs)
        prg = inp.prg
        ends = np.cumsum(b.lengths)
        state = {"rows": 0}

        def on_segment(end):
            r0, r1 = state["rows"], int(np.searchsorted(ends, end // item, side="right"))
            if r1 <= r0:
                return
            lo, hi = int(inp.boff[r0]), int(inp.boff[r1])
            inp.check_blocks(lo, hi, checks)
            prg.ts_ingest_scale(queue, ((r1 - r0) * inp.wg,), (inp.wg,), inp.x, inp._off.data,
                                inp._boff.data,
                                np.uint32(r0), np.uint32(r1), checks.data, bad.data, exps.data,
                                first.data)
            if centred:
                prg.ts_ingest_moments(queue, ((hi - lo) * inp.wg,), (inp.wg,), inp.x,
                                      inp._off.data, inp._len.data, inp._boff.data,
                                      np.uint32(E), np.uint32(lo), np.uint32(0), exps.data,
                                      first.data, mom.data)
                prg.ts_ingest_centre(queue, (r1 - r0,), None, mom.data, inp._len.data,
                                     inp._boff.data, np.uint32(r0), np.uint32(r1), first.data,
                                     centre.data, stats.data)
            inp.convert(self.y.data, self.yoff, self.ylen, centre.data, tab=self.tab.data,
                        sums=self.tile_sums.data if centred else None, blocks=(lo, hi))
            self._launch(job, 0, 0, self.tiles, rows=(r0, r1))
            state["rows"] = r1

        inp.load(st, on_segment=on_segment)
        sums = self._finish_pairs(job)
        if centred:
            self.device_moments()
        self._checks = [(np.empty(E, np.int32), bad)] + \
            ([(np.empty((E, 2), np.float64), stats)] if centred else [])
        return sums, exps

    def read_checks(self):
        """Enqueue the read of a streamed pass's checks (after the finish kernels: on
        NVIDIA a read into pageable memory holds the queue, so enqueued earlier it would
        keep the last pair sums or the finish kernels waiting)."""
        if self._checks and not self._reads:
            self._reads = [cl.enqueue_copy(self.dev.queue, h, d.data, is_blocking=False)
                           for h, d in self._checks]

    def blocks_of(self, size) -> np.ndarray:
        """(K, size) per entry, uint32 (E, 2): its jackknife blocks and their size (tiles
        or values) as the kernels read them (uint2)."""
        return np.ascontiguousarray(np.stack([self.Ks, size], axis=1), dtype=np.uint32)

    def device_moments(self) -> cla.Array:
        """finish.cl's `mom` rows (per series Σ y, Σ y², then the same per jackknife
        block) from the conversion's per-tile sums, on the device (fp64): the same
        numbers for a series alone or in a batch, streamed or not."""
        if self.moment_rows is None:
            inp, E = self.inp, self.E
            boff = inp._boff if len(self.windows) == 1 else \
                inp._array(np.array([0, self.tiles], np.uint32))
            rows = self.moment_rows = _common.work_array(self.dev, E * (2 + 2 * self.K),
                                                         np.float64)
            inp.prg.ts_ingest_block_totals(self.dev.queue, (self.K * inp.wg, E), (inp.wg, 1),
                                           self.tile_sums.data, boff.data, np.uint32(self.K),
                                           inp._array(self.blocks_of(self.tpbs)).data,
                                           rows.data)
            inp.prg.ts_ingest_row_totals(self.dev.queue, (E,), None, rows.data, np.uint32(E),
                                         np.uint32(self.K))
        return self.moment_rows

    def verify(self) -> bool:
        """After the finish kernels of stream() or stream_batch(): wait for the checks
        (read back without blocking) and raise ValueError at the first non-finite value,
        or for the autocorrelation at a constant series, as prepare() does before any pair
        sum.  False when a streamed series' provisional scale or centre did not stand: its
        check's blocks are then in self.checked, for prepare(st, centred, checked=...)."""
        if not self._checks:
            return True
        self.read_checks()
        cl.wait_for_events(self._reads)
        pending, self._pending = self._pending, None
        checks, self._checks, self._reads = self._checks, [], []
        if pending is not None:
            inp, blocks = self.inp, pending["blocks"]
            if self.f64:
                (at, _), (e, _), *moments = checks
                if at[0] != _ingest.NONE:
                    inp.raise_bad(0, int(at[0]))
                s12 = moments[0][0] if moments else None
            else:
                e = inp.scales(blocks, upload=False)
                s12 = None
                if pending["centred"]:
                    self.totals = checks[1][0]
                    s1, s2, _, _ = self.tile_totals()
                    s12 = (s1[0], s2[0])
            inp.exps, inp._exps = pending["provisional"]
            if not self._stream_ok(int(e[0]), pending["e0"], s12):
                _phase("streamed pass discarded")
                if self.f64:                    # the blocks, for prepare(checked=...)
                    cl.enqueue_copy(self.dev.queue, blocks, pending["checks"].data)
                self.checked = blocks
                return False
            _phase("streamed pair sums")
            return True
        (at, _), *stats = checks
        bad = at != _ingest.NONE
        if bad.any():
            s = int(np.argmax(bad))
            self.inp.raise_bad(s, int(at[s]))
        if stats:
            flat = stats[0][0][:, 1] == 0
            if flat.any():
                raise ValueError(f"{self.b.label(int(np.argmax(flat)))} is constant: its "
                                 "autocorrelation is undefined")
        return True

    def _stream_ok(self, e: int, e0: int, s12=None) -> bool:
        """Whether the pair sums made with the provisional scale 2^e0 and centre stand:
        max |x| 2^e0 below 2^MAX_SCALE_GAP (so no float32 term overflows: powers of two
        scale every term exactly otherwise), and for the autocorrelation (s12: the
        converted series' Σ y, Σ y²) the mean of the converted values within half their
        standard deviation of 0 (the bound the unstreamed centre meets: its float32
        rounding then costs no more)."""
        if e0 - e > MAX_SCALE_GAP:
            return False
        if s12 is None:
            return True
        n = int(self.b.lengths[0])
        mean = s12[0] / n
        var = s12[1] / n - mean * mean
        return bool(var > 0 and 4 * mean * mean <= var)

    def _pair_job(self, pairs, qs=(1.0,), inv=None) -> dict:
        """The program, zeroed partial sums and small arrays of one pass of pair sums."""
        dev, t = self.dev, self.tuning
        absmax = pairs == ["absmax"]
        acc = "max" if absmax else self.acc
        # absmax: one block of all an entry's tiles; else each entry's jackknife blocks
        K, tpb, tpbs = (1, self.tiles, self._nchs) if absmax else (self.K, self.tpb, self._tpbs)
        prg = dev.build("timeseries/pairs.cl", pairs=list(pairs), value=self.value, acc=acc,
                        wg=t.wg, lpi=t.lpi, chunk=t.chunk, run=t.run, rows=self.rows, block=BLOCK)
        dtype = _common.ACC_DTYPE[acc]
        npairs = len(pairs)
        Gs = min(self.G, tpb)                 # slot columns per block (pairs.cl's gs)
        partial = _zeros(dev, npairs * self.E * K * Gs * self.nlags, dtype)
        qarr = self.inp._array(np.asarray(qs, dtype=np.float32))
        invarr = self.inp._array(np.asarray(inv, dtype=np.float32)) if inv is not None \
            else qarr
        return dict(prg=prg, K=K, tpbs=tpbs, Gs=Gs, dtype=dtype, npairs=npairs,
                    partial=partial, q=qarr, inv=invarr)

    def _launch(self, job, xbase: int, start: int, end: int, rows=None, lags=None):
        """The pair sums of the tiles [start, end) of the series `rows` (lo, hi) and the lag
        blocks `lags` (lo, hi), or all."""
        t = self.tuning
        lo, hi = rows or (0, self.E)
        b0, b1 = lags or (0, self.lag_blocks)
        job["prg"].ts_pair_sums(
            self.dev.queue, ((b1 - b0) * t.wg, (hi - lo) * self.G), (t.wg, 1),
            self.y.data, self.tab.data, self._voff.data, self._nts.data, self._ns.data, self._nchs.data,
            np.uint32(self.E), np.uint32(lo), np.uint32(self.G), np.int64(xbase),
            np.uint32(self.lag0), np.uint32(self.nlags),
            np.uint32(start), np.uint32(end), np.uint32(job["K"]), job["tpbs"].data,
            np.uint32(job["Gs"]), np.uint32(b0), job["q"].data, job["inv"].data,
            job["partial"].data)

    def _launch_units(self, job, xbase: int, u0: int, u1: int):
        """The slice units [u0, u1) (unit u: tile u // pieces of piece u % pieces): whole
        tiles by one launch per piece over all of them, a part of a tile piece by piece."""
        P = self.pieces
        while u0 < u1:
            c, p = divmod(u0, P)
            if p == 0 and u1 - u0 >= P:
                c1 = u1 // P
                pieces, u0 = range(P), c1 * P
            else:
                c1 = c + 1
                pieces, u0 = range(p, min(u1 - c * P, P)), min(u1, c1 * P)
            for piece in pieces:
                eg, lg = divmod(piece, self.lag_pieces)
                e0, b0 = eg * self.piece_entries, lg * self.piece_lags
                self._launch(job, xbase, c, c1, rows=(e0, min(self.E, e0 + self.piece_entries)),
                             lags=(b0, min(self.lag_blocks, b0 + self.piece_lags)))

    def _finish_pairs(self, job) -> cla.Array:
        """The block sums: the partial sums added over their slot columns."""
        out = _common.work_array(self.dev, job["npairs"] * self.E * job["K"] * self.nlags,
                                 job["dtype"])
        fin = 64
        job["prg"].ts_pair_finish(
            self.dev.queue, (-(-self.nlags // fin) * fin, self.rows,
                             job["npairs"] * self.E * job["K"]),
            (fin, self.rows, 1), job["partial"].data, np.uint32(job["Gs"]),
            np.uint32(self.nlags), out.data)
        return out

    def sums(self, st, pairs, qs=(1.0,), inv=None, progress=None, bar=None,
             label="") -> cla.Array:
        """The block sums [p][e][k][l] (acc type, or "max" for ["absmax"]) of the pair
        functions `pairs` for the lags lag0 .. lag0 + nlags - 1, in time-bounded slices of
        self.units units (`bar`: a Progress they count into)."""
        job = self._pair_job(pairs, qs, inv)
        P = self.pieces
        windows = [(c0 * P, c1 * P) for c0, c1 in self.windows]
        state = {"xbase": 0}

        def load(w):
            if len(windows) == 1:
                return
            v0, v1 = self.span(*self.windows[w])
            self.inp.load(st, (v0, v1))
            self.inp.convert(self.y.data, [0], [int(self.b.lengths[0])], self.centre,
                             tab=self.tab.data, sums=self.tile_sums.data
                             if self.tile_sums is not None else None, window=(v0, v1))
            state["xbase"] = v0

        def launch(w, start, end):
            self._launch_units(job, state["xbase"], start, end)

        advance = _common.windowed(windows, load, launch)
        run_sliced(self.units, advance, self.dev.queue, progress=progress, bar=bar, label=label,
                   what="tiles of the series" if P == 1 else "parts of tiles",
                   first=self.first_slice)
        return self._finish_pairs(job)

    def tile_totals(self):
        """(Σ y, Σ y²) per series and (Σ y, Σ y²) per series and jackknife block, from the
        conversion's per-tile sums: (s1, s2, s1k, s2k), computed once per set of sums."""
        if self.totals is None:
            self.totals = self.tile_sums.get()
        if self._tile_totals is None or self._tile_totals[0] is not self.totals:
            self._tile_totals = (self.totals, self._block_totals(self.totals))
        return self._tile_totals[1]

    def _block_totals(self, totals):
        t = _common.acc_to_float64(totals).reshape(-1, 2)
        boff = self.inp.boff.astype(np.int64) if len(self.windows) == 1 \
            else np.array([0, self.tiles])
        K, tpb, Ks = self.K, self.tpbs[:, None], self.Ks[:, None]
        t = t[:boff[-1]]
        per = np.diff(boff)[:, None]                        # tiles per series
        k = np.arange(K)[None, :]
        # block k < Ks[e] of series e: its tiles [a, b) (the last block takes any rest); the
        # cells are contiguous and in order, so one reduceat adds them all (a loop of E x K
        # NumPy sums cost ~30 ms for 512 series, a bincount ~0.9 ms for one series of 2^24
        # on the H100 host, twice per call)
        a = np.where(k < Ks, boff[:-1, None] + np.minimum(k * tpb, per), boff[1:, None])
        b = np.where(k >= Ks - 1, boff[1:, None], boff[:-1, None] + np.minimum((k + 1) * tpb, per))
        full = b > a
        sk = np.zeros((len(per), K, 2))
        sk[full] = np.add.reduceat(t, a[full], axis=0)
        s = np.add.reduceat(t, boff[:-1], axis=0)
        return s[:, 0], s[:, 1], sk[..., 0], sk[..., 1]


class _TooLarge(Exception):
    """A batch of several series that does not fit the device at once."""


def _held(dev) -> int:
    """Device memory held for reuse by earlier calls: staging slots and pooled arrays."""
    return _xfer.cached_bytes(dev) + _common.pooled_bytes(dev)


def _release(dev):
    _xfer.clear_cache(dev)
    _common.trim_pool(dev, 0)


def _zeros(dev, n, dtype) -> cla.Array:
    """A zeroed (pooled) device array; on Oclgrind written from the host (runtime.zeros)."""
    if not dev.facts.fill_initialises:
        return zeros(dev, n, dtype)
    arr = _common.work_array(dev, n, dtype)
    cl.enqueue_fill_buffer(dev.queue, arr.data, np.zeros(1, np.uint8), 0, arr.nbytes)
    return arr


def _max_lag(max_lag) -> int:
    return _validate.integer("max_lag", max_lag, 1, _common.MAX_LENGTH - 1)


def _transfer_arg(value):
    return None if value is None else _xfer.parse(value)


def _method(method):
    return _validate.choice("method", method, ("auto", "direct", "fft"))


def _errors(errors):
    if not isinstance(errors, (bool, np.bool_)):
        raise TypeError(f"errors must be True or False, got {errors!r}")
    return bool(errors)


Q_MIN, Q_MAX = 0.01, 1000.0


def _qs(q):
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


def _by_tiles(dev, b, nlags, tuning, make, kinds=("absdiff",)):
    """_sub_batches(dev, b, make), but for the series of a list whose default tiles
    differ (shorter series get smaller tiles, to keep 16 error blocks), once per tile
    size: every series then has the tiles and the jackknife blocks it has alone.  The
    parts' arrays come back in the caller's order (one part per tile size)."""
    if tuning is not None or len(b) == 1 or np.all(b.lengths == b.lengths[0]):
        return _sub_batches(dev, b, make)
    chunks = np.array([default_tuning(dev.facts, nlags, int(n), kinds).chunk
                       for n in b.lengths])
    groups = [np.flatnonzero(chunks == c) for c in dict.fromkeys(chunks.tolist())]
    if len(groups) == 1:
        return _sub_batches(dev, b, make)
    done = []
    for g in groups:
        parts = _sub_batches(dev, b.subset(g.tolist()), make)
        done.append([_join([part[i] for part in parts]) for i in range(len(parts[0]))])
    order = np.argsort(np.concatenate(groups), kind="stable")
    return [tuple(None if arrays[0] is None else np.concatenate(arrays)[order]
                  for arrays in zip(*done))]


def _staged(dev, nbytes, transfer):
    transfer = _xfer.default(dev, nbytes) if transfer is None else transfer
    return _xfer.Staged(dev, nbytes, transfer)


def _sub_batches(dev, b, make):
    """Run `make(sub_batch)` on groups of the series that fit the device (all at once if
    they do), concatenating the results along the series axis."""
    try:
        return [make(b)]
    except _TooLarge:
        pass
    half = len(b) // 2
    return _sub_batches(dev, b.subset(range(half)), make) + \
        _sub_batches(dev, b.subset(range(half, len(b))), make)


def hurst(p, max_lag=256, q=1.0, device=None, progress=None, *, method="auto", errors=True,
          _accumulate=None, _tuning=None, _layout=None, _transfer=None,
          _stream=None) -> HurstResult:
    """Hurst exponent of the series p(t), t = 0 .. T-1, from its q-th order
    structure function.

        S_q(Δt) = ⟨|p(t + Δt) - p(t)|^q⟩^(1/q),   Δt = 1 .. max_lag,

    the average running over all T - Δt values of t with t + Δt ≤ T - 1, and
    the local exponent between consecutive lags

        H(Δt) = [log S(Δt) - log S(Δt-1)] / [log Δt - log(Δt-1)],   Δt ≥ 2.

    A random walk gives H = 1/2, a persistent (trending) series H > 1/2, an
    anti-persistent one H < 1/2; p(t) = t gives S(Δt) = Δt and H = 1.

    p: one series (1-D real array-like: any float or int dtype, a pandas Series), a
    batch (2-D array, one series per row) or a list of 1-D series of any lengths, each
    with at least max_lag + 1 points, all finite; a batch runs in one pass of launches.
    q in [0.01, 1000], or a list of them (computed in the same pass; q = 1 and q = 2
    take fast paths; S_2^2 is the mean squared displacement).  progress: None (a bar
    on a terminal for long runs), True, False or f(done, total).  method: "auto"
    (default: the cheaper of the two for q = 2, see :func:`autocorrelation`), "direct"
    (pair sums) or "fft" (S_2 from the autocorrelation sums; q = 2 only, needs fp64).
    Returns :class:`HurstResult` (lags, S, H, q, S_err, H_err, method); H[..., 0] is NaN.

    Errors (errors=False: S_err and H_err are None): the delete-one-block jackknife over
    16 blocks of pair start times t (so that the errors survive the correlations within
    each block): err² = (K-1)/K Σ_k (θ_k - mean θ_k)² with θ_k the estimate from every
    pair but those starting in block k.  Short series get fewer, shorter blocks (tiles
    of at least 32 values); with fewer than two blocks the errors are NaN.  By FFT: the
    spread of the estimates of 16 blocks of the series transformed alongside (the device
    work about doubles), for Δt below the block length (NaN beyond, and without fp64).

    Scale: p is scaled by the power of two that brings max |p| into [1/2, 1) (found
    on the device) before it is rounded to float32, and S is scaled back, so every
    finite float64 input works (1e-310 to 1e308) and S(λp) = λ S(p) exactly for λ a
    power of two.  For q other than 1 and 2 a first pass finds M(Δt) = max
    |p(t + Δt) - p(t)| and the sums are of (|Δp| / M)^q ≤ 1, so |Δp|^q never
    overflows or underflows in a way that matters: S = M ⟨(|Δp|/M)^q⟩^(1/q).

    Accuracy: for q = 1, 2 the series is converted on the device to float32 values
    relative to the first value of their block of 256 (with a float64-accurate table of
    the block offsets) and differences are formed in float32 relative to a nearby
    element (so a large offset costs nothing); for other q from (hi, lo) float32 pairs,
    to float32 rounding of the difference itself (equal prices: exactly 0), with
    integer powers by multiplications and others as 2^(q log2 x) (no library call);
    terms are summed in float32 over short runs and accumulated in float64
    (compensated float32 on devices without fp64): S agrees with a float64 NumPy
    computation to ~1e-7 relative, for q < 0.5 to ~5e-8/q (the 1/q-th root magnifies
    the float32 error of the terms).

    Long memory: where a series is persistent with H >= 3/4 at its largest lags (then
    the pair terms stay correlated across the error blocks and S_err, H_err come out
    too small), `long_memory` is True and a LongMemoryWarning says so
    (docs/timeseries.md, "Error bars").

    Host and device: the host checks shapes and dtypes (O(number of series)) and copies
    the values once into the transfer buffer; finiteness (ValueError naming the first
    NaN or inf), the scale and the conversion are device work, and so are the sums,
    S, H and their errors (devices with fp64; without, the host finishes from the
    O(max_lag) sums).  Long series are worked on in time-bounded slices (a progress bar
    counts completed work; Ctrl-C raises :class:`clphys.runtime.Interrupted` within about
    a second) and, beyond the device's memory, in windows (one series) or groups of
    series (a batch); none of these changes a bit of the result.  A batch (q in {1, 2},
    fp64) is streamed: the rows of each upload segment are checked, scaled and summed
    on the device while the next segment is copied (docs/timeseries.md, "Many series").
    """
    max_lag = _max_lag(max_lag)
    qs, q_list = _qs(q)
    b = _ingest.batch("p", p, max_lag + 1, f"max_lag + 1 with max_lag = {max_lag}")
    check_progress(progress)
    if _layout is not None:
        _validate.choice("_layout", _layout, ("blocked", "float2"))
    method = _method(method)
    errors = _errors(errors)
    if method == "fft" and set(qs) != {2.0}:
        raise ValueError(f"method='fft' gives S_2 only (q = 2), got q = {q!r}")
    transfer = _transfer_arg(_transfer)
    _stream = _stream_arg(_stream)
    dev = resolve_device(device)
    fft = set(qs) == {2.0} and _use_fft(dev, b.lengths, max_lag, method, _accumulate,
                                        needs_fp64=True, errors=errors)
    if fft:
        parts = _sub_batches(dev, b, lambda sub: _hurst_fft(
            dev, sub, max_lag, len(qs), _accumulate, transfer, progress, errors))
    else:
        parts = _by_tiles(dev, b, max_lag, _tuning, lambda sub: _hurst_direct(
            dev, sub, max_lag, qs, _accumulate, _tuning, _layout, transfer, progress,
            _stream), kinds=[_kind(q) for q in qs])
    _common.trim_pool(dev)
    S, S_err, H, H_err = (_join([part[i] for part in parts]) for i in range(4))
    persistent = _long_memory(S, S_err, b.lengths, qs) if errors else \
        np.zeros(S.shape[:2], bool)
    if persistent.any():
        _warn_long_memory(b, S, qs, persistent)
    # (n_series, n_q, max_lag) -> the caller's shape
    if not q_list:
        S, S_err, H, H_err, persistent = (None if a is None else a[:, 0]
                                          for a in (S, S_err, H, H_err, persistent))
    if b.single:
        S, S_err, H, H_err, persistent = (None if a is None else a[0]
                                          for a in (S, S_err, H, H_err, persistent))
    if not errors:
        S_err = H_err = None
    return HurstResult(S=S, H=H, q=np.array(qs) if q_list else qs[0], S_err=S_err,
                       H_err=H_err, method="fft" if fft else "direct",
                       long_memory=persistent if np.ndim(persistent) else bool(persistent))


# The jackknife over blocks of T/16 pair start times needs the correlations of the pair
# terms |Δp|^q to be summable.  For a Gaussian series persistent with exponent H they
# decay as k^(4H - 4): summable only for H < 3/4; fractional Brownian motion at H = 0.75,
# 0.8, 0.85, 0.9 had S_err too small by 1.2, 1.45, 1.9, 2.8x (96 series of 2^14 each).
# H is measured between the lags b/4 and b, b = min(max_lag, T/2) (b >= 2; +-0.03 from one
# series of 2^14 at H = 0.9), from the q nearest 2 (q < 1/2 weights the zero differences
# of prices on a grid, whose share falls with the lag: a steep S_q, not long memory).
LONG_MEMORY_H = 0.75


def _persistence(S, lengths, qs):
    """(H, lo, hi, j): per series the slope of log S_qj between the lags lo and hi (NaN
    where it cannot be judged), qj the q nearest 2 of at least 1/2 (j None: none)."""
    usable = [i for i, q in enumerate(qs) if q >= 0.5]
    E, nl = S.shape[0], S.shape[-1]
    hi = np.minimum(nl, np.asarray(lengths) // 2)
    lo = np.maximum(1, hi // 4)
    if not usable:
        return np.full(E, np.nan), lo, hi, None
    j = min(usable, key=lambda i: abs(math.log(qs[i] / 2.0)))
    rows = np.arange(E)
    Sa = S[rows, j, np.maximum(lo, 1) - 1].astype(np.float64)
    Sb = S[rows, j, np.maximum(hi, 1) - 1].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        H = np.where((hi >= 2) & (lo < hi), np.log(Sb / Sa) / np.log(hi / lo), np.nan)
    return H, lo, hi, j


def _long_memory(S, S_err, lengths, qs) -> np.ndarray:
    """(n_series, n_q) bool: series whose S grows as Δt^H with H >= LONG_MEMORY_H at their
    largest lags (those with at least T/2 pairs), where errors were found at all."""
    H = _persistence(S, lengths, qs)[0]
    with np.errstate(invalid="ignore"):
        measured = np.isfinite(S_err).any(axis=(1, 2)) & (S_err > 0).any(axis=(1, 2))
        flag = (H >= LONG_MEMORY_H) & measured
    return np.repeat(flag[:, None], S.shape[1], axis=1)


def _warn_long_memory(b, S, qs, persistent):
    H, lo, hi, j = _persistence(S, b.lengths, qs)
    e = int(np.argmax(persistent.any(axis=1)))
    more = int(persistent.any(axis=1).sum()) - 1
    warnings.warn(f"hurst: {b.label(e)}{f' (and {more} more series)' if more > 0 else ''} "
                  f"is persistent: S_{qs[j]:g} grows as lag^{H[e]:.2f} between lags {lo[e]} and "
                  f"{hi[e]} (>= lag^0.75).  If that is long memory (not a trend), its pair "
                  f"terms stay correlated across the 16 error blocks and S_err and H_err "
                  f"understate the errors (by 1.2x at H = 0.75, 2.8x at H = 0.9 for fractional "
                  f"Brownian motion); HurstResult.long_memory marks it.  For error bars take "
                  f"the spread over independent series", LongMemoryWarning, stacklevel=3)


def _hurst_fft(dev, b, max_lag, nq, accumulate, transfer, progress, errors):
    """(S, S_err, H, H_err), each (n_series, nq, max_lag) (errors None without errors),
    of S_2 by FFT."""
    S, H, S_err, H_err = _fft_run(dev, b, max_lag, "msd", accumulate, transfer, progress,
                                  "hurst", errors)
    # views for one q (a copy of each array, 128 MB for all lags of 2^24 values, cost
    # more in page faults than the FFT)
    return tuple(None if a is None else a[:, None, 1:] if nq == 1 else
                 np.repeat(a[:, None, 1:], nq, axis=1) for a in (S, S_err, H, H_err))


def _join(parts):
    """The parts' arrays along the series axis (None stays None; one part is returned
    as it is: a copy into a fresh array costs its page faults, ~7 ms for 16 MB)."""
    if parts[0] is None or len(parts) == 1:
        return parts[0]
    return np.concatenate(parts)


_KIND = {1.0: "absdiff", 2.0: "sqdiff"}
MAX_INT_POWER = 16            # integer q up to this: x^q by multiplications (pairs.cl "ipow")


def _kind(q: float) -> str:
    """The pair function of pairs.cl for S_q."""
    if q in _KIND:
        return _KIND[q]
    return f"ipow{int(q)}" if q == int(q) and 3 <= q <= MAX_INT_POWER else "powdiff"


def _scaled(kinds) -> bool:
    """Whether the kinds need the per-lag maxima first (a general q: |Δp|/M <= 1)."""
    return any(k not in ("absdiff", "sqdiff", "product") for k in kinds)


def _cost(kind: str) -> int:
    """A pair term's cost relative to a maximum's, for the progress bar (so that its
    estimate of the time left holds across the passes; measured with PoCL)."""
    return 5 if kind == "powdiff" else 2 if kind.startswith("ipow") else 1


def _hurst_direct(dev, b, max_lag, qs, accumulate, tuning, layout, transfer, progress,
                  stream=None):
    """(S, S_err, H, H_err), each (n_series, n_q, max_lag), by pair sums."""
    kinds = [_kind(q) for q in qs]
    scaled = _scaled(kinds)
    # a general q: (hi, lo) pairs, whose differences pairs.cl forms to float32 rounding of
    # themselves (equal values: exactly 0).  The tile-relative values' differences were
    # off by ~1e-7 of the local excursion, which the q-th power of a small q magnifies
    # (prices on a grid of ticks at q = 0.1: a few %, at q = 0.5 4.5e-6; a random walk
    # at q = 0.01: 3e-3)
    layout = layout or ("float2" if scaled else "blocked")
    what = f"hurst of {int(b.lengths.max())} points with max_lag = {max_lag}"
    tuning = tuning or default_tuning(dev.facts, max_lag, int(b.lengths.min()), kinds)
    run = _Direct(dev, b, max_lag, 1, layout, len(kinds), accumulate, tuning, what)
    E, nl = run.E, max_lag
    weight = sum(_cost(k) for k in kinds)
    # CPUs: 2^(q log2 x) in a pass of its own (inlined beside other pair functions, the
    # unrolled pair loop did not vectorise: 2x slower on PoCL); GPUs: one pass
    passes = [[i] for i in range(len(kinds))] if "powdiff" in kinds and len(kinds) > 1 \
        and not dev.facts.is_gpu else [list(range(len(kinds)))]
    with _staged(dev, run.raw_bytes(), transfer) as st, \
            Progress(run.units * (weight + scaled), progress, label="hurst") as bar:
        sums, exps = _pair_pass(run, st, False, kinds, stream, progress)
        inv = np.ones((E, nl), np.float32)
        if scaled:
            top = run.sums(st, ["absmax"], bar=bar)
            M = top.get().reshape(E, nl).astype(np.float64)
            with np.errstate(divide="ignore"):
                inv = np.where(M > 0, 1.0 / M, 0.0).astype(np.float32)

        def pair_sums():
            out = [run.sums(st, [kinds[i] for i in p], qs=[qs[i] for i in p], inv=inv,
                            bar=bar.part(sum(_cost(kinds[i]) for i in p)))
                   for p in passes]
            _phase("conversion and pair sums")
            return out[0] if len(out) == 1 else _concatenate(dev, out)

        def finish(sums, exps):
            if not run.f64:                         # on the host, from the block sums
                return exps, _common.acc_to_float64(sums.get()).reshape(len(kinds), E, run.K,
                                                                        nl)
            odtype = _out_dtype(b)
            prg = dev.build("timeseries/finish.cl", kinds=kinds, otype=_CL_OUT[odtype])
            out = _common.work_array(dev, 4 * len(kinds) * E * nl, odtype)
            fin = 64
            prg.ts_hurst_finish(dev.queue, (-(-nl // fin) * fin, E, len(kinds)), (fin, 1, 1),
                                sums.data, np.uint32(E), np.uint32(run.K), np.uint32(nl),
                                run.inp._array(run.blocks_of(run.bls)).data, run._ns.data,
                                run.inp._exps.data,
                                run.inp._array(np.asarray(qs, np.float32)).data,
                                run.inp._array(inv).data, out.data)
            _phase("finish kernels")
            run.read_checks()
            return _xfer.download(dev, out.data, np.empty((4, len(kinds), E, nl), odtype))

        res = _finished(run, st, False, sums if sums is not None else pair_sums(), exps,
                        finish, pair_sums)
        if run.f64:
            return tuple(res.transpose(0, 2, 1, 3))
        exps, blocks = res
    with np.errstate(divide="ignore"):
        m = np.where(inv > 0, 1.0 / inv.astype(np.float64), 0.0)
    res = np.empty((4, E, len(kinds), nl))
    for e in range(E):
        for i, kind in enumerate(kinds):
            res[:, e, i] = _finish.hurst(blocks[i, e, :run.Ks[e]], int(b.lengths[e]),
                                         int(exps[e]), kind, qs[i], m[e], int(run.bls[e]))
    return tuple(res.astype(_out_dtype(b), copy=False))


def autocorrelation(x, max_lag=256, stationary=False, device=None, progress=None, *,
                    method="auto", errors=True, _accumulate=None, _tuning=None,
                    _transfer=None, _stream=None) -> AutocorrelationResult:
    """Autocorrelation ρ(Δt), Δt = 0 .. max_lag, of the series x(t), t = 0 .. T-1
    (normally price changes, not prices).

    General form (default): the Pearson correlation of the N = T - Δt
    overlapping pairs (x(t), x(t + Δt)),

        ρ(Δt) = (⟨x(t) x(t+Δt)⟩ - ⟨x(t)⟩⟨x(t+Δt)⟩) / (σ_t σ_{t+Δt}),

    where ⟨x(t)⟩, σ_t are the mean and standard deviation of x(0 .. N-1) and
    ⟨x(t+Δt)⟩, σ_{t+Δt} those of x(Δt .. T-1) (population, 1/N).
    ``stationary=True``: the usual sample autocorrelation with the mean x̄ of the
    whole series,

        ρ(Δt) = Σ_{t=0}^{N-1} (x(t) - x̄)(x(t+Δt) - x̄) / Σ_{t=0}^{T-1} (x(t) - x̄)²,

    as statsmodels' ``acf(x, adjusted=False)``.  Both forms are invariant under
    x → a + b x (b > 0) and satisfy |ρ| ≤ 1.  ρ(0) = 1.  A lag where a window
    has zero variance gives NaN (general form).

    x: one series (1-D real array-like), a batch (2-D, one series per row) or a list
    of 1-D series of any lengths, each with at least max_lag + 1 points, finite, not
    constant; a batch runs in one pass of launches.  progress: as for :func:`hurst`.
    method: "auto" (default: the FFT when it costs less than the direct sums, with its
    error blocks: for max_lag beyond about 40 log2(2T) on a GPU, 18 log2(2T) on a CPU;
    half that with errors=False), "direct" (pair sums) or "fft" (all lags at once).
    Returns :class:`AutocorrelationResult` (lags, rho, stationary, rho_err, method).

    Errors (errors=False: rho_err is None): by the direct sums the delete-one-block
    jackknife (see :func:`hurst`) of the ratio of the lag-Δt and lag-0 sums centred on
    the mean; by FFT the spread of 16 blocks' estimates (see :func:`hurst`).

    Accuracy: x is scaled by a power of two (max |x| in [1/2, 1), so every
    finite float64 input works, subnormal ones included, and ρ(λx) = ρ(x) for λ
    a power of two, bit for bit), centred near its mean in float64 and rounded
    to float32 on the device; the sums Σ y(t)y(t+Δt) of these values are the
    device's work (float32 products, runs of 32 in float32, then float64 or
    compensated float32), as are the window means and variances (float64 prefix sums
    of the same values).  ρ agrees with a float64 NumPy computation to ~1e-7 absolute.
    Host and device: as for :func:`hurst`; the centre needs one more pass on the device.
    """
    max_lag = _max_lag(max_lag)
    b = _ingest.batch("x", x, max_lag + 1, f"max_lag + 1 with max_lag = {max_lag}")
    if not isinstance(stationary, (bool, np.bool_)):
        raise TypeError(f"stationary must be True or False, got {stationary!r}")
    check_progress(progress)
    method = _method(method)
    errors = _errors(errors)
    transfer = _transfer_arg(_transfer)
    _stream = _stream_arg(_stream)
    dev = resolve_device(device)
    fft = _use_fft(dev, b.lengths, max_lag, method, _accumulate, errors=errors)
    form = "stationary" if stationary else "general"
    if fft:
        run = lambda sub: _fft_run(dev, sub, max_lag, form, _accumulate, transfer,  # noqa: E731
                                   progress, "autocorrelation", errors)
    else:
        run = lambda sub: _acf_direct(dev, sub, max_lag, bool(stationary),  # noqa: E731
                                      _accumulate, _tuning, transfer, progress, _stream)
    parts = _sub_batches(dev, b, run) if fft else _by_tiles(dev, b, max_lag, _tuning, run)
    _common.trim_pool(dev)
    rho, err = (_join([part[i] for part in parts]) for i in range(2))
    if b.single:
        rho, err = rho[0], (None if err is None else err[0])
    if not errors:
        err = None
    return AutocorrelationResult(rho=rho, stationary=bool(stationary),
                                 rho_err=err, method="fft" if fft else "direct")


def _acf_direct(dev, b, max_lag, stationary, accumulate, tuning, transfer, progress,
                stream=None):
    """(ρ, ρ_err), each (n_series, max_lag + 1), by pair sums."""
    nl = max_lag + 1
    what = f"the autocorrelation of {int(b.lengths.max())} points with max_lag = {max_lag}"
    run = _Direct(dev, b, max_lag, 1, "float", 1, accumulate, tuning, what)
    E = run.E
    with _staged(dev, run.raw_bytes(), transfer) as st:
        sums, exps = _pair_pass(run, st, True, ["product"], stream, progress)

        def pair_sums():
            out = run.sums(st, ["product"], progress=progress, label="autocorrelation")
            _phase("conversion and pair sums")
            return out

        def finish(sums, exps):
            if len(run.windows) == 1:
                ybuf, hoff = run.y, run.yoff.astype(np.uint64)
                toff = (run.yoff + b.lengths - 1).astype(np.uint64)
            else:
                ybuf, hoff, toff = _ends(dev, run, nl)
            if not run.f64:
                s1, s2, s1k, s2k = run.tile_totals()
                cross = _common.acc_to_float64(sums.get()).reshape(E, run.K, max_lag)
                rho = np.empty((E, nl))
                err = np.empty((E, nl))
                heads, tails = np.split(_read_rows(dev, ybuf.data, np.float32, np.concatenate(
                    [hoff.astype(np.int64), toff.astype(np.int64) - nl + 1]), nl), 2)
                for e in range(E):
                    K = run.Ks[e]
                    rho[e], err[e] = _finish.acf(cross[e, :K], heads[e], tails[e], s1[e], s2[e],
                                                 s1k[e, :K], s2k[e, :K], int(b.lengths[e]),
                                                 int(run.bls[e]), stationary)
                return rho.astype(_out_dtype(b), copy=False), err.astype(_out_dtype(b),
                                                                         copy=False)
            return _acf_finish_device(dev, run.inp, ybuf, "float", hoff, toff, b.lengths, nl,
                                      sums, 0, run.K, run.blocks_of(run.bls),
                                      run.device_moments(), exps,
                                      "stationary" if stationary else "general",
                                      _out_dtype(b), before_download=run.read_checks)

        return _finished(run, st, True, sums if sums is not None else pair_sums(), exps,
                         finish, pair_sums)


def _concatenate(dev, arrays) -> cla.Array:
    """The device arrays one after the other in a new one, through the host (the block
    sums of separate passes, on CPUs only: memory copies either way; Oclgrind's checker
    does not follow a device-to-device copy)."""
    return _common.device_array(dev, np.concatenate([a.get() for a in arrays]))


def _read_rows(dev, buf, dtype, starts, count: int) -> np.ndarray:
    """buf[s:s + count] (elements of dtype) for each s of `starts`, gathered on the device
    and read back at once (not one blocking read per row): (len(starts), count) float64."""
    idx = (np.asarray(starts, np.int64)[:, None] + np.arange(count)).ravel()
    whole = cla.Array(dev.queue, int(idx.max()) + 1, dtype, data=buf)
    rows = cla.take(whole, cla.to_device(dev.queue, idx))
    return rows.get().reshape(len(starts), count).astype(np.float64)


def _ends(dev, run, nl):
    """For a series worked on in windows: its first and last nl values converted like the
    whole (the same bits), side by side in a small buffer: (buffer, hoff, toff)."""
    a = run.b.arrays[0]
    n = a.size
    ends = _ingest.Batch(run.b.name, [a[:nl], a[n - nl:]], single=False)
    inp = _ingest.Input(dev, ends, run.tuning.chunk, "float", run.f64)
    inp.exps = np.repeat(run.inp.exps, 2)
    inp._exps = inp._array(inp.exps)
    y = _common.work_array(dev, 2 * nl, np.float32)
    with _xfer.Staged(dev, inp.raw_bytes(), _xfer.Transfer()) as st:
        inp.load(st)
        inp.convert(y.data, [0, nl], [nl, nl], np.repeat(run.centre, 2))
        dev.queue.finish()
    return y, np.array([0], np.uint64), np.array([2 * nl - 1], np.uint64)


def _acf_finish_device(dev, inp, ybuf, ytype, hoff, toff, lengths, nl, cross, cstride, nblk,
                       kbl, moments, exps, form, odtype, keep=False, before_download=None):
    """ρ and its jackknife error (or S_2 and H for form "msd") on the device (fp64): the
    prefix sums of the series' ends, then the formulas (finish.cl; the cross sums in nblk
    blocks per series, kbl: each series' (blocks, values per block)); downloaded as odtype
    (before_download() is called first: it may enqueue more reads)."""
    queue = dev.queue
    E = len(lengths)
    wg = min(256, _common.pow2_at_most(dev.facts.max_work_group))
    blocks = cstride == 0
    prg = dev.build("timeseries/finish.cl", form=form, cross="blocks" if blocks else "rows",
                    ytype=ytype, wg=wg, otype=_CL_OUT[np.dtype(odtype)])
    nch = -(-nl // wg)
    arr = inp._array
    hoff_d, toff_d = arr(np.asarray(hoff, np.uint64)), arr(np.asarray(toff, np.uint64))
    ns = arr(np.asarray(lengths, np.uint32))
    tot = _common.work_array(dev, E * nch * 4, np.float64)
    yb = ybuf.data if isinstance(ybuf, cla.Array) else ybuf
    prg.ts_prefix_partial(queue, (nch * wg, E), (wg, 1), yb, hoff_d.data, toff_d.data, ns.data,
                          np.uint32(nl), tot.data)
    prg.ts_prefix_scan(queue, (E * wg,), (wg,), tot.data, np.uint32(nch))
    out = _common.work_array(dev, E * nl, odtype)
    err = _common.work_array(dev, E * nl, odtype)
    prg.ts_acf_finish(queue, (nch * wg, E), (wg, 1), yb, hoff_d.data, toff_d.data, ns.data,
                      np.uint32(nl), tot.data, cross.data if isinstance(cross, cla.Array)
                      else cross, np.uint64(cstride), np.uint32(max(nblk, 1)),
                      arr(np.asarray(kbl, np.uint32)).data,
                      _device_or(arr, moments, lambda m: _moment_rows(m, E)),
                      _device_or(arr, exps, lambda x: np.asarray(x, np.int32)), out.data,
                      err.data)
    _phase("finish kernels")
    if keep:                    # the device arrays, for more kernels
        return out, err, prg
    if before_download is not None:
        before_download()
    if blocks or form == "msd":
        return tuple(_xfer.download_all(dev, [(a.data, np.empty((E, nl), odtype))
                                              for a in (out, err)]))
    return _xfer.download(dev, out.data, np.empty((E, nl), odtype)), \
        np.full((E, nl), np.nan, odtype)


def _device_or(arr, value, host):
    """A kernel argument: a device array's buffer as it is, else arr(host(value))."""
    return value.data if isinstance(value, cla.Array) else arr(host(value)).data


def _moment_rows(moments, E: int) -> np.ndarray:
    """(s1, s2, s1k, s2k) as finish.cl's one array: per series s1, s2, its block sums of
    y, then of y² (one upload instead of four)."""
    return np.concatenate([np.asarray(m, np.float64).reshape(E, -1) for m in moments], axis=1)


_CL_OUT = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


def _out_dtype(b) -> np.dtype:
    """Results in float32 for float32 input (half the bytes to bring back; the estimates
    are good to ~1e-7 anyway), float64 otherwise."""
    return np.dtype(np.float32) if b.dtype == np.float32 else np.dtype(np.float64)


# Direct pair terms that take as long as one "L log2 L" of the FFT path, by device kind
# (GPU: an estimate from the H100 figures, 1e13 lag-pairs/s against ~4 passes of 2^24
# complex doubles each way; CPU: measured with PoCL).  "auto" takes the FFT when the
# direct sums cost more (twice as much with errors: the FFT's error blocks double its
# work); on devices without fp64 (a float FFT, no errors) only at 20x.
FFT_RATIO = {True: 20.0, False: 9.0}
FFT_SPAN = 4096               # values per block of the ingest kernels on the FFT path


def _use_fft(dev, lengths, max_lag, method, accumulate, needs_fp64=False,
             errors=True) -> bool:
    if method != "auto":
        return method == "fft"
    f64 = _common.accumulator(dev, accumulate) == "double"
    if needs_fp64 and not f64:
        return False
    direct, fft = _fft.cost(lengths, max_lag)
    return direct > FFT_RATIO[dev.facts.is_gpu] * fft * ((2 if errors else 1) if f64 else 20)


FFT_BLOCKS = 16              # blocks per series for the FFT path's error bars


class _FFTRows:
    """Rows of zero-padded converted series (Input `inp`, one row of L reals each) on the
    device, and the launches of their autocorrelation transforms (`steps`); `res` holds
    the circular autocorrelation sums once they ran."""

    def __init__(self, dev, inp, nrows: int, L: int, real: str, centre):
        rdtype = np.float64 if real == "double" else np.float32
        self.dev, self.L, self.nrows, self.rdtype = dev, L, nrows, rdtype
        self.fft = fft = _fft.FFT(dev, L // 2, nrows, real)
        self.A = _common.work_array(dev, nrows * L, rdtype)
        B = _common.work_array(dev, nrows * L, rdtype)
        C = _common.work_array(dev, nrows * L, rdtype)
        self.nb = -(-L // FFT_SPAN)
        self.sums = _common.work_array(dev, 2 * nrows * self.nb, inp.acc)
        self.yoff = np.arange(nrows, dtype=np.uint64) * L
        inp.convert(self.A.data, self.yoff, np.full(nrows, L), centre, sums=self.sums.data)
        forward, out = fft.launches(self.A.data, B.data, C.data, -1)
        inverse, self.res = fft.launches(out, B.data, C.data, +1)
        self.steps = forward + [lambda: fft.power(out)] + inverse
        self._keep = (B, C)

    def moments(self):
        """(Σ y, Σ y²) per row."""
        t = _common.acc_to_float64(self.sums.get()).reshape(self.nrows, self.nb, 2).sum(axis=1)
        return t[:, 0], t[:, 1]

    def finish(self, inp, lengths, nl, exps, form, odtype):
        """_acf_finish_device on these rows, the results kept on the device."""
        s1, s2 = self.moments()
        toff = self.yoff + np.asarray(lengths, np.uint64) - 1
        return _acf_finish_device(self.dev, inp, self.A, "double", self.yoff, toff, lengths, nl,
                                  self.res, self.L, 1, np.tile([1, self.L], (len(lengths), 1)),
                                  (s1, s2, s1, s2), exps, form, odtype, keep=True)


def _fft_run(dev, b, max_lag, form, accumulate, transfer, progress, label, errors=True):
    """ρ (form "general"/"stationary") or S_2 ("msd") at lags 0 .. max_lag of every
    series of the batch from the FFT of its zero-padded rows.  Returns (ρ, ρ_err) or, for
    "msd", (S_2, H, S_err, H_err), each (n_series, max_lag + 1).  The errors come from 16
    blocks of each series transformed alongside (with fp64; else NaN): see _block_errors."""
    nl = max_lag + 1
    E = len(b)
    f64 = _common.accumulator(dev, accumulate) == "double"
    if form == "msd" and not f64:
        raise fp64_missing(dev, "hurst: method='fft' (S_2 from the autocorrelation sums)",
                           "method='direct'")
    real = "double" if f64 else "float"
    rsize = 8 if f64 else 4
    L = _fft.fft_length(int(b.lengths.max()), max_lag)
    K = FFT_BLOCKS
    bs = b.lengths // K                                  # values per block
    with_err = errors and f64 and int(bs.min()) >= 2
    nlb = min(nl, int(bs.min()))                        # the blocks' lags: l < nlb
    Lb = _fft.fft_length(int(bs.max()), nlb - 1) if with_err else 0
    what = f"{label} of {int(b.lengths.max())} points by FFT ({L} values per row)"
    buffers = {"series (as given)": math.ceil(STAGING_SLACK * int(b.lengths.sum())
                                              * b.dtype.itemsize),
               "FFT rows": E * L * rsize, "FFT work": E * L * rsize, "FFT work 2": E * L * rsize,
               "block rows": 3 * E * K * Lb * rsize,
               "results": 6 * E * nl * 8 + 4 * 8 * E * (K + 1) * (-(-nl // 64) + 1),
               "block sums": 2 * 8 * E * (K + 1) * (-(-L // FFT_SPAN))}
    if sum(buffers.values()) + _held(dev) > dev.facts.global_mem * USABLE_FRACTION:
        _release(dev)
    try:
        check_memory(dev, buffers, what, "Use method='direct', errors=False, or fewer series "
                                         "at once.")
    except ValueError:
        if E > 1:
            raise _TooLarge() from None
        raise
    inp = _ingest.Input(dev, b, FFT_SPAN, "real", f64)
    queue = dev.queue
    odtype = _out_dtype(b)
    with _staged(dev, int(b.lengths.sum()) * b.dtype.itemsize, transfer) as st:
        inp.load(st)
        exps = inp.scales(inp.check())
        _phase("upload and check")
        shift = np.ldexp(b.first_values(), exps)
        sums = inp.moments(shift)
        _phase("mean and spread")
        if form != "msd":
            flat = np.add.reduceat(sums[:, 1], inp.boff[:-1].astype(np.int64)) == 0
            if flat.any():
                raise ValueError(f"{b.label(int(np.argmax(flat)))} is constant: its "
                                 "autocorrelation is undefined")
        centre = inp.centres(sums, shift)
        rows = _FFTRows(dev, inp, E, L, real, centre)
        steps = rows.steps
        if with_err:
            binp = _block_input(dev, inp, b, bs, K, exps)
            brows = _FFTRows(dev, binp, E * K, Lb, real, np.repeat(centre, K))
            steps = steps + brows.steps

        def advance(start, count):
            for k in range(start, start + count):
                steps[k]()

        run_sliced(len(steps), advance, queue, progress=progress, label=label,
                   what="FFT passes")
        _phase("conversion and FFT")
        if f64:
            out, second, prg = rows.finish(inp, b.lengths, nl, exps, form, odtype)
            # only what is returned comes back (ρ's second array is the direct path's
            # error slot: NaN here, never downloaded)
            arrays = [out, second] if form == "msd" else [out]
            if with_err:
                bout, bsecond, _ = brows.finish(binp, np.repeat(bs, K), nlb,
                                                np.repeat(exps, K), form, np.float64)
                spread = [bout] + ([bsecond] if form == "msd" else [])
                arrays = arrays + [
                    _block_errors(dev, prg, th, K, nlb, bs, b.lengths, nl, odtype)
                    for th in spread]
            res = _xfer.download_all(dev, [(a.data, np.empty((E, nl), odtype)) for a in arrays])
            # no errors: NaN (errors=False: None, no array of the results' size)
            nan = np.full((E, nl), np.nan, odtype) if errors else None
            if form == "msd":
                return tuple(res + [nan, nan][:4 - len(res)])
            return res[0], (res[1] if with_err else nan)
        s1, s2 = rows.moments()
        vals = np.empty((E, nl))
        starts = np.arange(E, dtype=np.int64) * L
        heads, tails = np.split(_read_rows(dev, rows.A.data, rows.rdtype, np.concatenate(
            [starts, starts + b.lengths - nl]), nl), 2)
        cs = _read_rows(dev, rows.res, rows.rdtype, starts, nl)
        for e in range(E):
            n = int(b.lengths[e])
            head, tail, c = heads[e], tails[e], cs[e]
            vals[e], _ = _finish.acf(c[None, 1:], head, tail, s1[e], s2[e], s1[e:e + 1],
                                     s2[e:e + 1], n, n, form == "stationary")
    return vals.astype(odtype, copy=False), np.full((E, nl), np.nan, odtype) if errors else None


def _block_input(dev, inp, b, bs, K, exps):
    """An Input over K blocks of bs[e] values of each series, reading the values already
    uploaded for `inp` (the same scale; the caller gives the same centre)."""
    views = [b.arrays[e][k * int(bs[e]):(k + 1) * int(bs[e])] for e in range(len(b))
             for k in range(K)]
    binp = _ingest.Input(dev, _ingest.Batch(b.name, views, single=False), FFT_SPAN, "real",
                         inp.f64)
    binp.x, binp.window = inp.x, None
    binp._off = binp._array(np.array([int(inp.raw_off[e]) + k * int(bs[e])
                                      for e in range(len(b)) for k in range(K)], np.int64))
    binp.exps = np.repeat(exps, K).astype(np.int32)
    binp._exps = binp._array(binp.exps)
    return binp


def _block_errors(dev, prg, th, K, nlb, bs, lengths, nl, odtype):
    """The FFT path's errors from the blocks' estimates th (rows (e, k) of nlb lags):
    err(l) = sqrt(var_k θ_k(l) (b - l)/(T - l)) for l < b, NaN beyond (finish.cl)."""
    E = len(lengths)
    err = _common.work_array(dev, E * nl, odtype)
    prg.ts_block_spread(dev.queue, (-(-nl // 64) * 64, E), (64, 1), th.data, np.uint32(K),
                        np.uint32(nlb), _common.device_array(dev, bs.astype(np.uint32), False).data,
                        _common.device_array(dev, np.asarray(lengths, np.uint32), False).data,
                        np.uint32(nl), err.data)
    return err
