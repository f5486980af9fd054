"""Pattern conformity Ξ_χ(Δt⁺, Δt⁻) of Preis, Paul and Schneider, EPL 82, 68005 (2008)."""

from __future__ import annotations

import bisect
import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .. import _validate
from ..progress import check_progress
from ..runtime import Device, check_memory, items_that_fit, resolve_device, run_sliced, zeros
from . import _common
from ._pattern_ticks import _local_is_exact, _sat_scale, _ticks, common_tick

__all__ = ["PatternConformity", "PatternShape", "pattern_conformity", "pattern_pairs",
           "common_tick"]

MAX_PAST = MAX_FUTURE = 64        # they size unrolled register arrays in pattern.cl


@dataclass(frozen=True, eq=False)
class PatternConformity:
    """What :func:`pattern_conformity` returns; arrays indexed [Δt⁺ - 1, Δt⁻ - 1], a batch
    adding a leading series axis.

    Attributes
    ----------
    Xi, Xi_err : numpy.ndarray
        Ξ = xi / norm (NaN where norm is 0, e.g. the column Δt⁻ = 1) and its jackknife
        error over blocks of current times (NaN with fewer than two blocks).
    xi, norm : numpy.ndarray
        The weighted sums of sgn ω and of |sgn ω|.
    skipped_current, skipped_history, pairs : numpy.ndarray
        Per Δt⁻: current times t̂ skipped (window of zero range), pairs (t̂, τ) skipped
        for a historical window of zero range, pairs that contributed (Δt⁺ = 1).
    chi, max_history
        The parameters.
    tick : float, None or list
        The tick worked in (None: real-valued); a list for a batch.
    labels : tuple or None
        The pandas column names (a Series: its name), else None.
    """
    Xi: np.ndarray
    xi: np.ndarray
    norm: np.ndarray
    skipped_current: np.ndarray
    skipped_history: np.ndarray
    pairs: np.ndarray
    chi: float
    max_history: int
    tick: float | list | None = None
    Xi_err: np.ndarray | None = None
    labels: tuple | None = None


@dataclass(frozen=True)
class PatternShape:
    """Code shape of pattern.cl: work-group size, lags τ per local-memory tile,
    the exponential ("exp" or the faster, less accurate "native_exp");
    `launch_pairs`: about how many (t̂, Δt⁻, τ) triples one launch covers;
    `per_past`: one program per Δt⁻ (compiled in: no run-time guards on the window
    steps; max_past programs to build, one launch each) instead of one for all Δt⁻;
    `qform`, `sign`: pattern.cl's variants ("mad": Q by fma(), "cmp": b compared with K;
    the sign decisions stay exact); `pre`: each historical window normalised once per
    tile in local memory (pattern.cl), not by every item that reads it; `slide` = U > 0
    (a divisor of tb, excludes pre): each item slides the values around p(t̂ - τ) along τ
    in registers, U steps unrolled (with qform "plain" the same bits as pre); `q_switch`: Q's
    window steps by a switch on Δt⁻ instead of a test per step; `branchless_sum` (slide): each
    Δt⁺ sum by mad(1 or 0, w, sum) (1) or fma (2), the same bits; `reads_first` (slide): the
    local reads of the U steps first; `saturated_sum` (slide with cmp, local or scaled): each
    Δt⁺ sum as fma(clamp((b - K)·2^k, 0, 1), w, sum), 2^k from a host bound on |b|, |K|:
    cmp's decisions and bits with 2 instructions per sum (1: clamp, 2: NVIDIA's
    fma.rn.sat by inline PTX)."""
    wg: int
    tb: int
    launch_pairs: int | None = None
    exp: str = "exp"
    per_past: bool = False
    qform: str = "mad"
    sign: str = "cmp"
    pre: bool = False
    slide: int = 0
    q_switch: bool = False
    branchless_sum: int = 0
    reads_first: bool = True
    saturated_sum: int = 0




def local_bytes(t: PatternShape, max_past: int, max_future: int) -> int:
    """Local memory of a ts_pc_sweep work group (8-byte accumulators)."""
    tile = 4 * (t.wg + t.tb + max_past + max_future)
    pre = 4 * (2 + max_past) * (t.wg + t.tb - 1) if t.pre else 0
    if t.slide:                                     # min, range, 1/range; signs; tile[-1]
        pre = 4 * 3 * (t.wg + t.tb - 1) + 4 * max_future * t.wg + 4
    return tile + 8 * 2 * max_future * t.wg + 4 * 3 * t.wg + pre


SLIDE_MAX_VALUES = 40          # max_past + max_future for the GPUs' sliding default
# per-Δt⁻ programs for jobs of at least this many triples (~1 s on an H100): below, their
# first-call builds (10-15 s for 20, then from PyOpenCL's disk cache) outweigh the ~10 %
PER_PAST_TRIPLES = 2**37


def default_pattern_shape(facts, max_future: int, triples: int | None = None,
                   max_past: int = MAX_PAST) -> PatternShape:
    """GPUs: one program per Δt⁻ (no run-time guards; each launch covers every jackknife
    block: block rows; tiles of 256 τ) whose items slide their windows along τ in
    registers (`slide`, 4 steps unrolled; 2 and tiles of 128 τ for one program), the Δt⁺
    sums by saturated fma weights (`saturated_sum`: cmp's bits), sign "local" (ticks with small
    products: cmp's bits; real values, all distinct: as accurate as cmp;
    pattern_conformity falls back to cmp otherwise), launches of ~2^34 triples;
    CPUs: each historical window normalised once per tile (`pre`); each where it fits the
    local memory, else the plain kernel.  Sliding keeps max_past + max_future values per
    item in registers: up to SLIDE_MAX_VALUES (the measured 20 + 20), beyond pre.  H100,
    T = 10^6, 20 x 20, χ = 100, τ̂ = 16384, real-valued walk, end to end after the builds
    (docs/timeseries.md has the table): one program 2.59 s, per Δt⁻ 2.33 s (the same
    bits), per Δt⁻ with local signs 1.95 s, with tiles of 256 τ 1.92 s, and 4 steps
    unrolled 1.875 s (this default);
    the 20 programs take 10-15 s to build on the first call (cached on disk after).
    PoCL (T = 3000, 20 x 20, τ̂ = 512): pre ~1.8-2.0 s, slide 2.7-3.9 s.  `triples` (the
    job's size; None: large): per-Δt⁻ programs from PER_PAST_TRIPLES on, one program below."""
    wg = 64 if facts.is_gpu else 16
    while wg > 1 and wg * (2 * max_future * 8 + 8) + 4 * (wg + 512) > facts.local_mem // 2:
        wg //= 2
    t = PatternShape(wg=wg, tb=128 if facts.is_gpu else 64)
    if facts.is_gpu and max_past + max_future <= SLIDE_MAX_VALUES:
        big = triples is None or triples >= PER_PAST_TRIPLES
        one = dataclasses.replace(t, slide=2, branchless_sum=True, launch_pairs=2**34, per_past=big,
                                  saturated_sum=1, sign="local")
        fast = ([dataclasses.replace(one, tb=256, slide=4)] if big else []) + [one]
    else:
        fast = []
    for cand in fast + [dataclasses.replace(t, pre=True)]:
        if local_bytes(cand, max_past, max_future) <= facts.local_mem:
            return cand
    return t


def pattern_pairs(T: int, max_past: int, max_history: int) -> int:
    """Number of (t̂, τ, Δt⁻) triples: Σ_{Δt⁻} Σ_{t̂ = Δt⁻}^{T-1} min(τ̂, t̂ - Δt⁻)
    (counting every window, whatever its range)."""
    total = 0
    for m in range(1, max_past + 1):
        k = T - 1 - m                      # t̂ - m runs over 0 .. k
        if k <= 0:
            continue
        full = max(0, k - max_history)     # values of t̂ - m above τ̂ contribute τ̂ each
        low = k - full                     # 0 .. low contribute their own value
        total += low * (low + 1) // 2 + full * max_history
    return total


# ---------------------------------------------------------------- the call

# The first time-bounded slice covers about this many (t̂, τ, Δt⁻) triples.
FIRST_SLICE_TRIPLES = {True: 1 << 30, False: 1 << 22}      # by DeviceFacts.is_gpu


def pattern_conformity(p, max_past: int = 20, max_future: int = 20, chi: float = 100.0,
                       max_history: int = 16384, device=None, progress=None, tick="auto", *,
                       nan: str = "raise", spacing: str = "raise") -> PatternConformity:
    """Pattern conformity Ξ_χ(Δt⁺, Δt⁻) of p(t) (Preis, Paul, Schneider, EPL 82, 68005).

    For every current time t̂ and pattern length Δt⁻, the current window is compared with
    each historical one τ = 1 .. max_history back (both normalised by their own range,
    weight e^{-χQ}); ξ sums sgn(ω) of their continuations Δt⁺ ahead, Ξ = ξ / Σ |sgn ω|
    (definitions: docs/timeseries.md).  No memory gives Ξ ≈ 0, p(t) = t gives Ξ = 1.

    Parameters
    ----------
    p : array-like, list of array-likes, pandas Series or DataFrame
        One finite series of at least max_past + max_future + 1 points, or a batch.
    max_past, max_future : int
        Largest Δt⁻ and Δt⁺, 1 .. 64.
    chi : float
        χ >= 0; max_history : int, τ̂ >= 1.
    device, progress, nan, spacing
        As for :func:`hurst`.
    tick : "auto", float or None
        Work in integer ticks (exact ties): "auto" finds the common tick, a number uses
        it (ValueError naming a price off its grid), None treats p as real-valued.

    Returns
    -------
    PatternConformity
        Xi, xi, norm, Xi_err and the counts, indexed [Δt⁺ - 1, Δt⁻ - 1]; Ξ[:, 0] is NaN.

    Raises
    ------
    ValueError, TypeError
        Bad input, before any device work.

    Examples
    --------
    >>> r = pattern_conformity(acrw_numpy(5_000, 0.044), 5, 5, 100.0, 1000)  # doctest: +SKIP
    """
    return run_plan(plan_pattern_conformity(p, max_past, max_future, chi, max_history, device,
                                            progress, tick, nan=nan, spacing=spacing))


@dataclass(frozen=True, eq=False)
class PatternPlan:
    """What is decided before the device for one pattern_conformity() call: the checked
    inputs, each series as sent (`prepared`: values, origin, exponent, tick), the device,
    the accumulator ("double" or "compensated") and pattern.cl's code shape; run_plan()
    runs it.  Tests and benchmarks/bench_timeseries.py build one with a forced
    `accumulate` or `shape` through plan_pattern_conformity()."""
    device: Device
    series: list
    prepared: list
    single: bool
    max_past: int
    max_future: int
    chi: float
    max_history: int
    progress: object
    accumulate: str
    shape: PatternShape
    labels: tuple | None = None


def plan_pattern_conformity(p, max_past=20, max_future=20, chi=100.0, max_history=16384,
                            device=None, progress=None, tick="auto", *, nan="raise",
                            spacing="raise", accumulate=None, shape=None) -> PatternPlan:
    """The plan of pattern_conformity(p, ...): arguments checked, the series in ticks, the
    device chosen, the code shape fitted to it (`shape`: forced; None: default_pattern_shape)."""
    max_past = _validate.integer("max_past", max_past, 1, MAX_PAST)
    max_future = _validate.integer("max_future", max_future, 1, MAX_FUTURE)
    chi = _validate.real("chi", chi, 0.0)
    max_history = _validate.integer("max_history", max_history, 1, _common.MAX_LENGTH)
    check_progress(progress)
    need = max_past + max_future + 1
    why = f"max_past + max_future + 1 = {need}"
    values, labels = _common.labelled(p, "p", nan, spacing)
    rows, single = _series_list(values)
    series = [_common.series("p" if single else f"p[{i}]", r, need, why)
              for i, r in enumerate(rows)]
    prepared = [_ticks(x, tick) for x in series]
    dev = resolve_device(device)
    acc = _common.accumulator(dev, accumulate)
    t = shape or default_pattern_shape(dev.facts, max_future,
                                sum(pattern_pairs(x.size, max_past, max_history) for x in series),
                                max_past)
    if shape is None and t.sign == "local" and not all(
            _local_is_exact(v, tk, t, max_past, max_future) for v, _, _, tk in prepared):
        t = dataclasses.replace(t, sign="cmp")      # repeated real values, large ticks
    if t.saturated_sum == 2 and dev.facts.vendor != "nvidia":
        raise ValueError(f"shape: saturated_sum=2 (inline PTX) needs an NVIDIA device, not "
                         f"{dev.name} (saturated_sum=1 is portable)")
    if local_bytes(t, max_past, max_future) > dev.facts.local_mem:
        raise ValueError(f"shape: {t} needs {local_bytes(t, max_past, max_future)} bytes of "
                         f"local memory for max_past = {max_past}, max_future = {max_future}; "
                         f"{dev.name} has {dev.facts.local_mem} (smaller wg or tb, or pre=False)")
    return PatternPlan(dev, series, prepared, single, max_past, max_future, chi, max_history,
                       progress, acc, t, labels)


def run_plan(plan: PatternPlan) -> PatternConformity:
    """The pattern conformity that `plan` describes."""
    run = _PatternRun(plan)
    if run.block_rows:
        run.sweep_block_rows()
    else:
        run.sweep_units()
    return run.finish()


class _PatternRun:
    """The device side of one pattern_conformity() call: the memory layout (slots, block
    rows, windows of the series), the programs, the buffers and the time-bounded sweeps
    over the current times; finish() reads the block sums back and forms Ξ."""

    def __init__(self, plan: PatternPlan):
        self.plan = plan
        dev, t = plan.device, plan.shape
        self.queue = dev.queue
        self.T = np.array([x.size for x in plan.series])
        self.E = len(plan.series)
        self.units = -(-(self.T - 1) // t.wg)           # groups of wg current times t̂
        self.nblk = np.minimum(PC_BLOCKS, self.units)   # jackknife blocks per series
        self.ncells, self.ncounts = plan.max_past * 2 * plan.max_future, plan.max_past * 3
        # a window of u units reads the values [t_lo - reach_back, t_hi + max_future)
        self.reach_back = plan.max_history + plan.max_past + t.tb + 1
        self.columns = -(-self.units // self.nblk)      # the longest block per series
        self.per_t = plan.max_past * min(plan.max_history, int(self.T.max()))
        self._layout()
        self.sweeps = self._programs()
        self.prg = self.sweeps[0][0]                    # ts_pc_fold: the same in every program
        self._buffers()

    def _layout(self):
        """Block rows (per_past: one slot region per jackknife block, and each launch of
        one Δt⁻ covers columns of every block: enough groups to fill a GPU, the same slots
        as one program's, the same sums) need every series whole on the device; else unit
        by unit as for one program."""
        plan, t, dev = self.plan, self.plan.shape, self.plan.device
        slot_bytes = self.ncells * _common.ACC_DTYPE[plan.accumulate].itemsize + self.ncounts * 8
        target = t.launch_pairs or (2**32 if dev.facts.is_gpu else 2**24)
        what = (f"pattern conformity of {int(self.T.max())} points with max_history = "
                f"{plan.max_history}")
        for block_rows in ((True, False) if t.per_past else (False,)):
            region = PC_BLOCKS if block_rows else 1
            # a quarter of the device at most for the slots and block rows, the rest the series
            room = max(1, items_that_fit(dev, region * slot_bytes,
                                         self.E * PC_BLOCKS * slot_bytes,
                                         largest_per_item=region * slot_bytes) // 4)
            slots = max(1, min(target // self.per_t // t.wg,
                               int(self.columns.max() if block_rows else self.units.max()),
                               room))
            fixed = {"partial sums": region * slots * slot_bytes,
                     "block sums": self.E * PC_BLOCKS * slot_bytes}
            windows = [_pc_windows(dev, int(self.T[e]), t.wg, int(self.units[e]),
                                   self.reach_back + t.wg + plan.max_future, fixed, what)
                       for e in range(self.E)]
            if all(len(w) == 1 for w in windows):
                break
        self.block_rows, self.region, self.slots, self.windows = \
            block_rows, region, slots, windows

    def _programs(self) -> list:
        """(program, grid rows): each Δt⁻ compiled in, or all Δt⁻ as grid rows of one
        launch."""
        plan, t = self.plan, self.plan.shape
        shape: dict[str, Any] = dict(
            wg=t.wg, tb=t.tb, maxp=plan.max_past, maxf=plan.max_future, acc=plan.accumulate,
            exp=t.exp, qform=t.qform, sign=t.sign, pre=int(t.pre), slide=t.slide,
            q_switch=int(t.q_switch), branchless_sum=int(t.branchless_sum),
            reads_first=int(t.reads_first), saturated_sum=int(t.saturated_sum))
        self.sat = _sat_scale(plan.prepared, t, plan.max_past, plan.max_future) \
            if t.saturated_sum else 1.0
        if t.per_past:
            return [(prg_m, 1) for prg_m in _build_all(
                plan.device, [dict(shape, fixed_past=m, block_rows=int(self.block_rows))
                              for m in range(1, plan.max_past + 1)])]
        return [(plan.device.build("timeseries/pattern.cl", **shape), plan.max_past)]

    def _buffers(self):
        plan, dev = self.plan, self.plan.device
        acc_dtype = _common.ACC_DTYPE[plan.accumulate]
        self.spans = [[_pc_span(a, b, int(self.T[e]), plan.shape.wg, self.reach_back,
                                plan.max_future) for a, b in self.windows[e]]
                      for e in range(self.E)]
        self.x = cla.empty(self.queue, 2 * max(v1 - v0 for sp in self.spans for v0, v1 in sp),
                           np.float32)
        self.pool = zeros(dev, (self.region * self.slots, self.ncells), acc_dtype)
        self.cpool = zeros(dev, (self.region * self.slots, self.ncounts), np.uint64)
        self.rows_d = zeros(dev, (self.E, PC_BLOCKS, self.ncells), acc_dtype)
        self.crows = zeros(dev, (self.E, PC_BLOCKS, self.ncounts), np.uint64)
        self.loaded = None

    def load(self, e, w):
        """Window w of series e into the device buffer (if it is not there already)."""
        if self.loaded != (e, w):
            v0, v1 = self.spans[e][w]
            values, origin, exp, _ = self.plan.prepared[e]
            cl.enqueue_copy(self.queue, self.x.data,
                            _common.float_pairs(values[v0:v1], origin, exp))
            self.loaded = (e, w)

    def sweep(self, prg_m, grid, e, t_lo, t_hi, slot0, args=(0, 1)):
        plan = self.plan
        v0, v1 = self.spans[e][self.loaded[1]]
        prg_m.ts_pc_sweep(self.queue, grid, (plan.shape.wg, 1), self.x.data, np.uint64(0),
                          np.uint32(v0), np.uint32(v1), np.uint32(self.T[e]), np.uint32(t_lo),
                          np.uint32(t_hi), np.uint32(slot0), np.uint32(self.slots),
                          np.uint32(plan.max_history), np.float32(plan.chi),
                          np.float32(self.sat), np.uint32(args[0]), np.uint32(args[1]),
                          self.pool.data, self.cpool.data)

    def fold(self, grid, row0):
        """The slots' sums added into the block rows from row0 on."""
        self.prg.ts_pc_fold(self.queue, grid, None, self.pool.data, self.cpool.data,
                            np.uint32(self.slots), np.uint32(self.ncells),
                            np.uint32(self.ncounts), self.rows_d.data, self.crows.data,
                            np.uint32(row0))

    def sweep_block_rows(self):
        """Per series, per Δt⁻, the columns of its blocks (a slot region each); slot s of a
        block gets columns s, s + slots, ... in order: the same sums however the run is
        sliced.  The blocks are folded at the series' end."""
        plan, wg, columns = self.plan, self.plan.shape.wg, self.columns
        firsts = np.concatenate([[0], np.cumsum(plan.max_past * columns)])

        def advance(start, count):
            stop = start + count
            while start < stop:
                e = int(np.searchsorted(firsts, start, side="right")) - 1
                m0, c0 = divmod(start - int(firsts[e]), int(columns[e]))
                c1 = min(int(columns[e]), c0 + stop - start, (c0 // self.slots + 1) * self.slots)
                self.load(e, 0)
                self.sweep(self.sweeps[m0][0], ((c1 - c0) * wg, int(self.nblk[e])), e, c0, 0,
                           c0 % self.slots, (int(self.units[e]), int(self.nblk[e])))
                if m0 == plan.max_past - 1 and c1 == columns[e]:
                    self.fold((max(self.ncells, self.ncounts), int(self.nblk[e])),
                              e * PC_BLOCKS)
                start += c1 - c0

        first = max(1, FIRST_SLICE_TRIPLES[plan.device.facts.is_gpu] * plan.max_past
                    // (self.per_t * PC_BLOCKS * wg))
        run_sliced(int(firsts[-1]), advance, self.queue, progress=plan.progress,
                   label="pattern conformity", what="columns of current-time groups per Δt⁻",
                   first=first)

    def sweep_units(self):
        """Every series' units in order, cut at its jackknife blocks and windows."""
        plan, wg = self.plan, self.plan.shape.wg
        segments = _pc_segments(self.units, self.nblk, self.windows)
        starts = [seg[0] for seg in segments]

        def advance(start, count):
            stop = start + count
            while start < stop:
                i = bisect.bisect_right(starts, start) - 1
                g0, g1, e, k, w, u0, b0, ends_block = segments[i]      # global units [g0, g1)
                self.load(e, w)
                end = min(stop, g1)
                a, b = u0 + start - g0, u0 + end - g0           # the series' own units
                t_lo, t_hi = 1 + a * wg, min(int(self.T[e]), 1 + b * wg)
                for prg_m, grid_rows in self.sweeps:
                    self.sweep(prg_m, ((b - a) * wg, grid_rows), e, t_lo, t_hi,
                               (a - b0) % self.slots)
                if end == g1 and ends_block:
                    self.fold((max(self.ncells, self.ncounts),), e * PC_BLOCKS + k)
                start = end

        first = max(1, FIRST_SLICE_TRIPLES[plan.device.facts.is_gpu] // (self.per_t * wg))
        run_sliced(int(self.units.sum()), advance, self.queue, progress=plan.progress,
                   label="pattern conformity", what="groups of current times", first=first,
                   largest=self.slots)

    def finish(self) -> PatternConformity:
        """Ξ, its parts and errors from the block sums, read back."""
        plan, E = self.plan, self.E
        blocks = _common.acc_to_float64(self.rows_d.get()).reshape(
            E, PC_BLOCKS, plan.max_past, 2 * plan.max_future)
        counts = self.crows.get().reshape(E, PC_BLOCKS, plan.max_past, 3).sum(axis=1) \
            .astype(np.int64)
        out = [_pc_result(blocks[e, :int(self.nblk[e])], counts[e], plan.max_future)
               for e in range(E)]
        ticks = [pp[3] for pp in plan.prepared]
        if plan.single:
            Xi, xi, norm, err = out[0]
            counts, ticks = counts[0], ticks[0]
        else:
            Xi, xi, norm, err = (np.stack([o[i] for o in out]) for i in range(4))
        return PatternConformity(Xi=Xi, xi=xi, norm=norm, skipped_current=counts[..., 0],
                                 skipped_history=counts[..., 1], pairs=counts[..., 2],
                                 chi=plan.chi, max_history=plan.max_history, tick=ticks,
                                 Xi_err=err, labels=plan.labels)


PC_BLOCKS = 16                # jackknife blocks of current times per series


def _series_list(p):
    """(list of 1-D series, whether the caller gave one): a 2-D array is a batch of
    rows, a list whose items are sequences a batch of series of any lengths."""
    if isinstance(p, (list, tuple)) and p and isinstance(p[0], (list, tuple, np.ndarray)) \
            and np.ndim(p[0]) >= 1:
        return list(p), False
    if isinstance(p, np.ndarray) and p.ndim == 2:
        if p.shape[0] == 0:
            raise ValueError("p has no series (shape (0, T))")
        return list(p), False
    return [p], True


def _pc_segments(units, nblk, windows):
    """(g0, g1, series, block, window, first unit, block's first unit, ends block) for the
    runs of global units that lie in one jackknife block and one memory window."""
    out, g = [], 0
    for e, (u, K) in enumerate(zip(units, nblk)):
        u, K = int(u), int(K)
        bounds = sorted({k * u // K for k in range(K + 1)} | {a for a, _ in windows[e]} | {u})
        for a, b in zip(bounds, bounds[1:]):
            if b <= a:
                continue
            k = next(k for k in range(K) if k * u // K <= a < (k + 1) * u // K)
            w = next(i for i, (wa, wb) in enumerate(windows[e]) if wa <= a < wb)
            out.append((g + a, g + b, e, k, w, a, k * u // K, b == (k + 1) * u // K))
        g += u
    return out


def _pc_result(blocks, counts, max_future):
    """(Xi, xi, norm, Xi_err) of one series from its block sums (K, max_past, 2 max_future)."""
    tot = blocks.sum(axis=0)
    xi, norm = tot[:, :max_future].T.copy(), tot[:, max_future:].T.copy()
    with np.errstate(invalid="ignore", divide="ignore"):
        Xi = np.where(norm > 0, xi / np.where(norm > 0, norm, 1.0), np.nan)
        K = blocks.shape[0]
        if K < 2:
            return Xi, xi, norm, np.full(Xi.shape, np.nan)
        dx = xi[None] - blocks[:, :, :max_future].transpose(0, 2, 1)
        dn = norm[None] - blocks[:, :, max_future:].transpose(0, 2, 1)
        Xk = np.where(dn > 0, dx / np.where(dn > 0, dn, 1.0), np.nan)
        err = np.sqrt((K - 1) / K * np.sum((Xk - Xk.mean(axis=0)) ** 2, axis=0))
    return Xi, xi, norm, err


def _build_all(dev, params):
    """pattern.cl built for each parameter set, several at once (the driver's compiler
    runs without the GIL; Oclgrind one at a time)."""
    build = lambda kw: dev.build("timeseries/pattern.cl", **kw)      # noqa: E731
    if not dev.facts.overlap or len(params) == 1:
        return [build(kw) for kw in params]
    with ThreadPoolExecutor(max_workers=min(8, len(params))) as pool:
        return list(pool.map(build, params))


def _pc_span(a: int, b: int, T: int, wg: int, reach_back: int, max_future: int):
    """The values [v0, v1) that the current times of units [a, b) read."""
    return max(0, 1 + a * wg - reach_back), min(T, 1 + b * wg + max_future)


def _pc_windows(dev, T, wg, units, extra, fixed, what):
    """Unit ranges whose values fit the device beside the fixed buffers."""
    per_unit = 8 * wg
    base = 8 * (extra + 1)
    limit = max(0, (dev.facts.max_alloc - base) // per_unit)
    fit = items_that_fit(dev, per_unit, sum(fixed.values()) + base, limit=limit)
    if fit >= units:
        return [(0, units)]
    if fit < 1:
        check_memory(dev, {**fixed, "series window": base + per_unit}, what,
                     "Reduce max_history (or max_past, max_future).")
        fit = 1
    return [(u, min(u + fit, units)) for u in range(0, units, fit)]
