"""The streamed pass of the pair sums: the kernels run on each upload segment as it
arrives, with a provisional scale and centre checked once the results are in."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..runtime import Device, staging, workspace
from ..runtime.memory import USABLE_FRACTION
from . import _ingest
from ._pair_plan import PairShape, Timeline, held_bytes, needs_maxima, release_cached

# Streaming (PairSums.stream): the provisional scale and centre come from the first
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
# many work groups per compute unit (at least tpb per row: see PairSums.stream_batch)
BATCH_GROUPS_PER_CU = {True: 16, False: 4}              # by DeviceFacts.is_gpu


def sample_positions(n: int) -> np.ndarray:
    """The positions of the centre's sample in a series of n values (fixed for n)."""
    m = min(CENTRE_SAMPLE, n)
    stride = n // m
    i = np.arange(m, dtype=np.int64)
    return i * stride + (i * 2654435761 % (1 << 32)) % stride


def pair_pass(run, st, centred: bool, pairs, stream, progress):
    """(block sums, exps) when the pair sums ran streamed (stream=None: short jobs,
    True: wherever PairSums.can_stream), else (None, exps) with the series prepared for
    run.sums().  A streamed pass of one series stands or falls in run.verify(), after
    the caller enqueued its finish: see finish_streamed."""
    if stream is not False and run.can_stream_batch(pairs, progress, forced=bool(stream)):
        sums, exps = run.stream_batch(st, centred, pairs)
        run.timeline.mark("streamed batch enqueued")
        return sums, exps
    if stream is not False and run.can_stream(pairs, progress, forced=bool(stream)):
        sums, exps = run.stream(st, centred, pairs)
        if sums is not None:
            return sums, exps
    return None, run.prepare(st, centred)


def finish_streamed(run, st, centred: bool, sums, exps, finish, again):
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


class StreamedPass:
    """The streaming methods of PairSums (see its docstring)."""

    # what PairSums sets and the streaming methods use (see PairSums.__init__)
    dev: Device
    b: _ingest.Batch
    shape: PairShape
    timeline: Timeline
    E: int
    tiles: int
    lag_blocks: int
    reach: int
    windows: list[tuple[int, int]]
    f64: bool
    room: int
    tpb: int
    G: int
    Gs: int
    fixed: dict[str, int]
    inp: _ingest.Input
    centre: Any                 # host array (prepare, stream) or device array (stream_batch)
    y: cla.Array
    tab: cla.Array
    tile_sums: Any              # the conversion's per-tile sums (cla.Array) if centred, else None
    yoff: np.ndarray
    ylen: np.ndarray
    totals: np.ndarray | None
    checked: np.ndarray | None
    _checks: list[tuple[np.ndarray, cla.Array]]
    _reads: list[cl.Event]
    _pending: dict[str, Any] | None

    if TYPE_CHECKING:           # PairSums' methods that the streaming methods call
        def _input(self) -> _ingest.Input: ...
        def _allocate(self, centred: bool) -> None: ...
        def _pair_job(self, pairs, qs=(1.0,), inv=None) -> dict: ...
        def _launch(self, job, xbase: int, start: int, end: int, rows=None, lags=None) -> None: ...
        def _finish_pairs(self, job) -> cla.Array: ...
        def _value_buffers(self, nvalues: int) -> dict: ...
        def device_moments(self) -> cla.Array: ...
        def tile_totals(self) -> tuple: ...

    def can_stream(self, pairs, progress, forced: bool) -> bool:
        """One series in one window, pair functions without a first pass (not a general q)
        and not Oclgrind (one upload there); unless `forced`, also a short job (no
        progress bar or time slices wanted) and, on CPUs (where nothing overlaps), a
        series within the head, whose provisional values are then the true ones (a
        discarded pass would cost as much as the real one).  A short series gains too:
        no separate pass for the mean, one wait for the device instead of three."""
        t = self.shape
        facts = self.dev.facts
        pair_terms = self.tiles * t.tile * self.lag_blocks * t.wg * t.lags_per_item
        return (self.E == 1 and len(self.windows) == 1 and not needs_maxima(pairs)
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
        b, t, dev = self.b, self.shape, self.dev
        n, chunk = int(b.lengths[0]), t.tile
        self.inp = inp = self._input()
        inp.begin(st)                           # the host copies start now
        provisional = self._provisional(centred)
        if provisional is None:
            return None, None
        e0, centre = provisional
        self.timeline.mark("stream: provisional scale and centre")
        inp.exps = provisional = np.array([e0], np.int32)
        inp.exps_dev = provisional_d = inp.small_array(inp.exps)
        self.centre = centre
        self._allocate(centred)
        job = self._pair_job(pairs)
        self.timeline.mark("stream: buffers and pair job")
        nblocks, span, item = int(inp.boff[-1]), inp.span, b.dtype.itemsize
        checks = workspace.work_array(dev, (nblocks, 2), np.int32)
        blocks = np.empty((nblocks, 2), np.int32)
        state = {"blocks": 0, "tiles": 0}

        def on_segment(end):
            self.timeline.mark(f"stream: sent up to {end / 2**20:.0f} MB")
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
        self.timeline.mark("upload, check and pair sums enqueued")
        sums = self._finish_pairs(job)
        # what verify() needs, read once by read_checks() or verify(): with fp64 the checks
        # folded on the device (ts_ingest_scale: the first non-finite value and the
        # exponent) and the series' Σ y, Σ y² (the moment rows), a few bytes; else the
        # checks' blocks and the per-tile sums
        if self.f64:
            fold = [workspace.work_array(dev, 1, dtype) for dtype in (np.int32, np.int32,
                                                                    np.float64)]
            inp.prg.ts_ingest_scale(dev.queue, (inp.wg,), (inp.wg,), inp.x, inp.off_dev.data,
                                    inp.boff_dev.data, np.uint32(0), np.uint32(1), checks.data,
                                    *(a.data for a in fold))
            self._checks = [(np.empty(1, np.int32), a) for a in fold[:2]] + \
                ([(np.empty(2, np.float64), self.device_moments())] if centred else [])
        else:
            self._checks = [(blocks, checks)] + \
                ([(np.empty(self.tile_sums.shape, self.tile_sums.dtype), self.tile_sums)]
                 if centred else [])
        self._pending = dict(blocks=blocks, checks=checks, e0=e0, centred=centred,
                             provisional=(provisional, provisional_d))
        return sums, provisional

    def _provisional(self, centred: bool):
        """(e0, centre) of the one series from its head (and for the autocorrelation a
        sample spread over it), or None where they are not finite: no stream (the
        unstreamed check names a bad value; values ~2^500 times the head's would have the
        streamed pass discarded anyway)."""
        a = self.b.arrays[0]
        n = a.size
        head = np.asarray(a[:HEAD_VALUES], np.float64)
        big = float(np.max(np.abs(head)))
        if not math.isfinite(big):
            return None
        e0 = -math.frexp(big)[1] if big > 0 else 0
        shift = math.ldexp(float(head[0]), e0)
        if not centred:
            return e0, np.array([shift])
        pick = head if n <= HEAD_VALUES or not CENTRE_SAMPLE else \
            np.asarray(a[sample_positions(n)], np.float64)
        with np.errstate(all="ignore"):
            d = np.ldexp(pick, e0) - shift
            # (einsum, not d @ d: BLAS wakes its threads, ~1-7 ms on a busy host)
            s1, s2 = float(d.sum()), float(np.einsum("i,i", d, d))
        if not (math.isfinite(s1) and math.isfinite(s2)):
            return None
        return e0, _ingest.centres(np.array([s1]), np.array([s2]), np.array([pick.size]),
                                   [shift])

    def can_stream_batch(self, pairs, progress, forced: bool) -> bool:
        """Several series in one window, accumulated in double (the scale and centre are
        found on the device: ts_ingest_scale / _centre need fp64), pair functions without
        a first pass, room for G >= tpb groups per series (see stream_batch); unless
        `forced`, also a short job (no progress bar or time slices wanted) and not
        Oclgrind (one upload there: nothing to overlap)."""
        t = self.shape
        facts = self.dev.facts
        pair_terms = self.E * self.tiles * t.tile * self.lag_blocks * t.wg * t.lags_per_item
        return (self.E > 1 and len(self.windows) == 1 and not needs_maxima(pairs)
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
        if need + held_bytes(self.dev) > usable:
            release_cached(self.dev)
        return True

    def stream_batch(self, st, centred: bool, pairs) -> tuple:
        """Upload the batch in segments (staging.stream_segments) and, for the rows that
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
        rows_per_segment = max(1, staging.STREAM_SEGMENT_BYTES // (item * int(b.lengths.mean())))
        per_cu = BATCH_GROUPS_PER_CU[facts.is_gpu]
        want = -(-per_cu * facts.compute_units // (self.lag_blocks * min(E, rows_per_segment)))
        self.G = max(self.tpb, min(want, self.tiles))
        self.Gs = self.tpb
        arr = lambda n, dtype: workspace.work_array(dev, n, dtype)  # noqa: E731
        checks, bad, exps, first = (arr((nb, 2), np.int32), arr(E, np.int32),
                                    arr(E, np.int32), arr(E, np.float64))
        inp.exps_dev = exps
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
            prg.ts_ingest_scale(queue, ((r1 - r0) * inp.wg,), (inp.wg,), inp.x, inp.off_dev.data,
                                inp.boff_dev.data,
                                np.uint32(r0), np.uint32(r1), checks.data, bad.data, exps.data,
                                first.data)
            if centred:
                prg.ts_ingest_moments(queue, ((hi - lo) * inp.wg,), (inp.wg,), inp.x,
                                      inp.off_dev.data, inp.len_dev.data, inp.boff_dev.data,
                                      np.uint32(E), np.uint32(lo), np.uint32(0), exps.data,
                                      first.data, mom.data)
                prg.ts_ingest_centre(queue, (r1 - r0,), None, mom.data, inp.len_dev.data,
                                     inp.boff_dev.data, np.uint32(r0), np.uint32(r1), first.data,
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
            s12: np.ndarray | tuple[Any, Any] | None      # the converted series' (Σ y, Σ y²)
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
            inp.exps, inp.exps_dev = pending["provisional"]
            if not self._stream_ok(int(e[0]), pending["e0"], s12):
                self.timeline.mark("streamed pass discarded")
                if self.f64:                    # the blocks, for prepare(checked=...)
                    cl.enqueue_copy(self.dev.queue, blocks, pending["checks"].data)
                self.checked = blocks
                return False
            self.timeline.mark("streamed pair sums")
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
