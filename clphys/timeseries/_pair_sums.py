"""Pair sums over a batch of series on one device (cl_kernels/timeseries/pairs.cl):
the upload, the conversion, the memory windows and the time-bounded slices of
launches; see docs/timeseries.md, "Host and device"."""

from __future__ import annotations

import math

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..errors import DeviceError
from ..runtime import check_memory, items_that_fit, run_sliced, staging, workspace, zeros
from ..runtime.memory import USABLE_FRACTION
from . import _common, _ingest
from ._pair_plan import (
    BLOCK,
    JACK_BLOCKS,
    STAGING_SLACK,
    Timeline,
    TooLarge,
    default_pair_shape,
    held_bytes,
    release_cached,
)
from ._pair_stream import StreamedPass

# The first time-bounded slice covers about this many pair terms (then run_sliced
# doubles or halves it): a few ms on a CPU, well under a ms on a GPU.
# On GPUs 2^35 terms (~7 ms on an H100, well under the 0.25 s slice target on a GPU 30x
# slower): a T = 2^24, max_lag = 1024 job is one launch, not five launches each followed
# by a queue finish (the 2^30 start doubled).
FIRST_SLICE_PAIRS = {True: 1 << 35, False: 1 << 25}      # by DeviceFacts.is_gpu




def finish_rows(dev) -> int:
    """Rows of ts_pair_finish's work group: on GPUs 16 x 64 items add the groups' sums."""
    return _common.pow2_at_most(min(16, dev.facts.max_work_group // 64)) \
        if dev.facts.is_gpu else 1


class PairSums(StreamedPass):
    """Pair sums over a batch of series on one device: the raw values are uploaded,
    checked and converted once (per window, for one series too long for the device),
    then the pair kernels run over them in time-bounded slices of tiles; the sums of
    every jackknife block come back.  Tiles, slices, windows and upload paths do not
    change a bit of the sums (pairs.cl folds every group's tiles in a fixed order)."""

    def __init__(self, dev, b: _ingest.Batch, nlags: int, lag0: int, value: str,
                 n_pairs: int, accumulate=None, tuning=None, what="", timeline=None):
        self.dev, self.b, self.nlags, self.lag0, self.value = dev, b, nlags, lag0, value
        self.timeline = timeline or Timeline()
        facts = dev.facts
        self.acc = _common.accumulator(dev, accumulate)
        self.f64 = self.acc == "double"
        n = b.lengths
        self.E = E = len(b)
        t = tuning or default_pair_shape(facts, nlags, int(n.min()))
        if t.wg > facts.max_work_group:
            raise ValueError(f"work-group size {t.wg} exceeds {dev.name}'s {facts.max_work_group}")
        self.shape = t
        self.lag_blocks = -(-nlags // (t.wg * t.lags_per_item))
        # the values past a tile's start that it reads
        self.reach = lag0 + self.lag_blocks * t.wg * t.lags_per_item
        self.nch = -(-(n - lag0) // t.tile)                  # tiles per entry
        self.tiles = int(self.nch.max())
        # each entry's own jackknife blocks (as alone): K of tpb tiles, bl values each
        self.tpbs = -(-self.nch // JACK_BLOCKS)
        self.Ks = -(-self.nch // self.tpbs)
        self.bls = self.tpbs * t.tile
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
        cap, per_tile = FIRST_SLICE_PAIRS[facts.is_gpu], t.tile * t.wg * t.lags_per_item
        self.piece_lags = max(1, min(self.lag_blocks, cap // per_tile))
        self.piece_entries = max(1, min(E, cap // (per_tile * self.piece_lags)))
        self.lag_pieces = -(-self.lag_blocks // self.piece_lags)
        self.pieces = -(-E // self.piece_entries) * self.lag_pieces
        self.units = self.tiles * self.pieces
        self.first_slice = max(1, cap // (per_tile * self.piece_lags * self.piece_entries))
        self.rows = finish_rows(dev)
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
        dev, chunk = self.dev, self.shape.tile
        fixed = sum(self.fixed.values())
        usable = dev.facts.global_mem * USABLE_FRACTION

        def fits(nvalues, room):
            bufs = self._value_buffers(nvalues)
            return sum(bufs.values()) + fixed <= room and \
                max(bufs.values()) <= dev.facts.max_alloc

        total = int(self.b.lengths.sum())
        if not fits(total, usable - held_bytes(dev)):
            release_cached(dev)                   # what earlier calls left for reuse goes first
        if fits(total, usable):
            return [(0, self.tiles)]
        if self.E > 1:
            raise TooLarge()
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
        chunk = self.shape.tile
        return c0 * chunk, min(int(self.b.lengths[0]), c1 * chunk + self.reach)

    # -- the run

    def _input(self):
        layout = {"blocked": "blocked", "float2": "float2", "float": "float"}[self.value]
        return _ingest.Input(self.dev, self.b, self.shape.tile, layout, self.f64, BLOCK)

    def prepare(self, st, centred: bool, checked=None):
        """Upload, check (ValueError at the first non-finite value), and for one window
        convert the whole batch; `centred`: the autocorrelation's centre (its mean on a
        binary grid) instead of the first value as the origin.  `checked`: the check's
        blocks of the values already uploaded (by stream()): no second upload."""
        b, chunk = self.b, self.shape.tile
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
        self.timeline.mark("upload and check")
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
            self.timeline.mark("mean and spread")
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
            self.y = workspace.work_array(dev, nvalues * self.elem // 4, np.float32)
            self.tab = workspace.work_array(dev, 2 * (-(-nvalues // BLOCK)) + 2, np.float32)
            tiles = int(inp.boff[-1]) if whole else self.tiles
            self.tile_sums = workspace.work_array(dev, 2 * tiles, inp.acc) if centred else None
        except cl.MemoryError:
            raise DeviceError(f"{dev.name}: out of device memory") from None
        self._voff = inp.small_array(self.yoff.astype(np.uint64))
        self._nts = inp.small_array(self.b.lengths.astype(np.uint32))
        self.ns_dev = self._nts
        self._nchs = inp.small_array(self.nch.astype(np.uint32))
        self._tpbs = inp.small_array(self.tpbs.astype(np.uint32))

    # -- streaming: the pair sums run on each upload segment as it arrives

    # -- streaming a batch: each upload segment's complete rows are checked, scaled,
    # centred, converted and summed on the device as they arrive, no wait for the host

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
            boff = inp.boff_dev if len(self.windows) == 1 else \
                inp.small_array(np.array([0, self.tiles], np.uint32))
            rows = self.moment_rows = workspace.work_array(self.dev, E * (2 + 2 * self.K),
                                                         np.float64)
            inp.prg.ts_ingest_block_totals(self.dev.queue, (self.K * inp.wg, E), (inp.wg, 1),
                                           self.tile_sums.data, boff.data, np.uint32(self.K),
                                           inp.small_array(self.blocks_of(self.tpbs)).data,
                                           rows.data)
            inp.prg.ts_ingest_row_totals(self.dev.queue, (E,), None, rows.data, np.uint32(E),
                                         np.uint32(self.K))
        return self.moment_rows

    def _pair_job(self, pairs, qs=(1.0,), inv=None) -> dict:
        """The program, zeroed partial sums and small arrays of one pass of pair sums."""
        dev, t = self.dev, self.shape
        absmax = pairs == ["absmax"]
        acc = "max" if absmax else self.acc
        # absmax: one block of all an entry's tiles; else each entry's jackknife blocks
        K, tpb, tpbs = (1, self.tiles, self._nchs) if absmax else (self.K, self.tpb, self._tpbs)
        prg = dev.build("timeseries/pairs.cl", pairs=list(pairs), value=self.value, acc=acc,
                        wg=t.wg, lpi=t.lags_per_item, chunk=t.tile, run=t.run_length,
                        rows=self.rows, block=BLOCK)
        dtype = _common.ACC_DTYPE[acc]
        npairs = len(pairs)
        Gs = min(self.G, tpb)                 # slot columns per block (pairs.cl's gs)
        partial = zeros(dev, npairs * self.E * K * Gs * self.nlags, dtype, pooled=True)
        qarr = self.inp.small_array(np.asarray(qs, dtype=np.float32))
        invarr = self.inp.small_array(np.asarray(inv, dtype=np.float32)) if inv is not None \
            else qarr
        return dict(prg=prg, K=K, tpbs=tpbs, Gs=Gs, dtype=dtype, npairs=npairs,
                    partial=partial, q=qarr, inv=invarr)

    def _launch(self, job, xbase: int, start: int, end: int, rows=None, lags=None):
        """The pair sums of the tiles [start, end) of the series `rows` (lo, hi) and the lag
        blocks `lags` (lo, hi), or all."""
        t = self.shape
        lo, hi = rows or (0, self.E)
        b0, b1 = lags or (0, self.lag_blocks)
        job["prg"].ts_pair_sums(
            self.dev.queue, ((b1 - b0) * t.wg, (hi - lo) * self.G), (t.wg, 1),
            self.y.data, self.tab.data, self._voff.data, self._nts.data, self.ns_dev.data,
            self._nchs.data,
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
        out = workspace.work_array(self.dev, job["npairs"] * self.E * job["K"] * self.nlags,
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


def by_tile_size(dev, b, nlags, tuning, make, kinds=("absdiff",)):
    """sub_batches(dev, b, make), but for the series of a list whose default tiles
    differ (shorter series get smaller tiles, to keep 16 error blocks), once per tile
    size: every series then has the tiles and the jackknife blocks it has alone.  The
    parts' arrays come back in the caller's order (one part per tile size)."""
    if tuning is not None or len(b) == 1 or np.all(b.lengths == b.lengths[0]):
        return sub_batches(dev, b, make)
    chunks = np.array([default_pair_shape(dev.facts, nlags, int(n), kinds).tile
                       for n in b.lengths])
    groups = [np.flatnonzero(chunks == c) for c in dict.fromkeys(chunks.tolist())]
    if len(groups) == 1:
        return sub_batches(dev, b, make)
    done = []
    for g in groups:
        parts = sub_batches(dev, b.subset(g.tolist()), make)
        done.append([join_parts([part[i] for part in parts]) for i in range(len(parts[0]))])
    order = np.argsort(np.concatenate(groups), kind="stable")
    return [tuple(None if arrays[0] is None else np.concatenate(arrays)[order]
                  for arrays in zip(*done))]


def staged(dev, nbytes, transfer):
    transfer = staging.default(dev, nbytes) if transfer is None else transfer
    return staging.Staged(dev, nbytes, transfer)


def sub_batches(dev, b, make):
    """Run `make(sub_batch)` on groups of the series that fit the device (all at once if
    they do), concatenating the results along the series axis."""
    try:
        return [make(b)]
    except TooLarge:
        pass
    half = len(b) // 2
    return sub_batches(dev, b.subset(range(half)), make) + \
        sub_batches(dev, b.subset(range(half, len(b))), make)


def join_parts(parts):
    """The parts' arrays along the series axis (None stays None; one part is returned
    as it is: a copy into a fresh array costs its page faults, ~7 ms for 16 MB)."""
    if parts[0] is None or len(parts) == 1:
        return parts[0]
    return np.concatenate(parts)


def concatenate_on_host(dev, arrays) -> cla.Array:
    """The device arrays one after the other in a new one, through the host (the block
    sums of separate passes, on CPUs only: memory copies either way; Oclgrind's checker
    does not follow a device-to-device copy)."""
    return workspace.device_array(dev, np.concatenate([a.get() for a in arrays]))
