"""Pattern conformity Ξ_χ(Δt⁺, Δt⁻) of Preis, Paul and Schneider, EPL 82, 68005 (2008)."""

from __future__ import annotations

import bisect
import dataclasses
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .. import _validate
from ..progress import check_progress
from ..runtime import check_memory, items_that_fit, resolve_device, run_sliced, zeros
from . import _common

__all__ = ["PatternConformity", "PatternTuning", "pattern_conformity", "pattern_pairs",
           "common_tick"]

MAX_PAST = MAX_FUTURE = 64        # they size unrolled register arrays in pattern.cl


@dataclass(frozen=True, eq=False)
class PatternConformity:
    """Ξ_χ and its parts; arrays indexed [Δt⁺ - 1, Δt⁻ - 1].

    Xi = xi / norm (NaN where norm is 0, e.g. the whole column Δt⁻ = 1, whose
    windows all have zero range); skipped_current[Δt⁻ - 1] counts current
    times t̂ whose window had zero range, skipped_history[Δt⁻ - 1] the pairs
    (t̂, τ) skipped for a historical window of zero range; pairs[Δt⁻ - 1] the
    (t̂, τ) pairs that contributed (those with t̂ ≤ T - 1, i.e. for Δt⁺ = 1);
    tick: the price tick the series was worked on in (None: real-valued); Xi_err: the
    jackknife error of Xi over blocks of current times (NaN with fewer than two blocks).
    For a batch every array has a leading series axis and `tick` is a list."""
    Xi: np.ndarray
    xi: np.ndarray
    norm: np.ndarray
    skipped_current: np.ndarray
    skipped_history: np.ndarray
    pairs: np.ndarray
    chi: float
    max_history: int
    tick: float | None = None
    Xi_err: np.ndarray = None


@dataclass(frozen=True)
class PatternTuning:
    """Code shape of pattern.cl: work-group size, lags τ per local-memory tile,
    the exponential ("exp" or the faster, less accurate "native_exp");
    `launch_pairs`: about how many (t̂, Δt⁻, τ) triples one launch covers;
    `per_past`: one program per Δt⁻ (compiled in: no run-time guards on the window
    steps; max_past programs to build, one launch each) instead of one for all Δt⁻;
    `qform`, `sign`: pattern.cl's variants ("mad": Q by fma(), "cmp": b compared with K;
    the sign decisions stay exact); `pre`: each historical window normalised once per
    tile in local memory (pattern.cl), not by every item that reads it; `slide` = U > 0
    (a divisor of tb, excludes pre): each item slides the values around p(t̂ - τ) along τ
    in registers, U steps unrolled (with qform "plain" the same bits as pre); `qsw`: Q's
    window steps by a switch on Δt⁻ instead of a test per step; `cellmad` (slide): each
    Δt⁺ sum by mad(1 or 0, w, sum) (1) or fma (2), the same bits; `hoist` (slide): the
    local reads of the U steps first; `cellsat` (slide with cmp, local or scaled): each
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
    qsw: bool = False
    cellmad: int = 0
    hoist: bool = True
    cellsat: int = 0




def local_bytes(t: PatternTuning, max_past: int, max_future: int) -> int:
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


def default_tuning(facts, max_future: int, triples: int | None = None,
                   max_past: int = MAX_PAST) -> PatternTuning:
    """GPUs: one program per Δt⁻ (no run-time guards; each launch covers every jackknife
    block: block rows; tiles of 256 τ) whose items slide their windows along τ in
    registers (`slide`, 4 steps unrolled; 2 and tiles of 128 τ for one program), the Δt⁺
    sums by saturated fma weights (`cellsat`: cmp's bits), sign "local" (ticks with small
    products: cmp's bits; real values, all distinct: as accurate as cmp;
    pattern_conformity falls back to cmp otherwise), launches of ~2^34 triples;
    CPUs: each historical window normalised once per tile (`pre`); each where it fits the
    local memory, else the plain kernel.  Sliding keeps max_past + max_future values per
    item in registers: up to SLIDE_MAX_VALUES (the measured 20 + 20), beyond pre.  H100,
    T = 10^6, 20 x 20, χ = 100, τ̂ = 16384, real-valued walk, end to end after the builds
    (benchmarks/probe_pc3.py; docs/timeseries.md has the table): one program (the default
    before) 2.59 s, per Δt⁻ 2.33 s (the same bits), per Δt⁻ with local signs 1.95 s (as
    called), with tiles of 256 τ 1.92 s (as called), and 4 steps unrolled 1.875 s (this
    default, passed explicitly: its host checks add ~3 ms);
    the 20 programs take 10-15 s to build on the first call (cached on disk after).
    PoCL (T = 3000, 20 x 20, τ̂ = 512): pre ~1.8-2.0 s, slide 2.7-3.9 s.  `triples` (the
    job's size; None: large): per-Δt⁻ programs from PER_PAST_TRIPLES on, one program below."""
    wg = 64 if facts.is_gpu else 16
    while wg > 1 and wg * (2 * max_future * 8 + 8) + 4 * (wg + 512) > facts.local_mem // 2:
        wg //= 2
    t = PatternTuning(wg=wg, tb=128 if facts.is_gpu else 64)
    if facts.is_gpu and max_past + max_future <= SLIDE_MAX_VALUES:
        big = triples is None or triples >= PER_PAST_TRIPLES
        one = dataclasses.replace(t, slide=2, cellmad=True, launch_pairs=2**34, per_past=big,
                                  cellsat=1, sign="local")
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


# ---------------------------------------------------------------- ticks

TICK_TOL = 2.0**-10           # a value may miss its tick multiple by this much (in ticks)
TICK_NOISE = 2.0**16          # a tick is at least this many ulps of the largest |p|
MAX_TICKS = 2.0**48           # (hi, lo) float32 pairs hold integers below this exactly


def _on_grid(d: np.ndarray, tick: float) -> bool:
    r = d / tick
    k = np.rint(r)
    return bool(np.all(np.abs(r - k) <= TICK_TOL)) and bool(np.all(np.abs(k) < MAX_TICKS))


def _gcd(a: float, b: float, floor: float):
    """The tolerant greatest common divisor of a, b > 0 (Euclid on the distance to
    the nearest multiple), or None once a remainder drops below `floor`."""
    while True:
        a, b = min(a, b), max(a, b)
        r = math.fmod(b, a)
        r = min(r, a - r)
        if r <= TICK_TOL * a:
            return a
        if r < floor:
            return None
        a, b = r, a


def common_tick(p: np.ndarray, absmax: float):
    """The largest tick τ with p(t) - p(0) an integer multiple of τ for every t
    (to 2^-10 of a tick, far above float64 rounding), or None: the tolerant gcd
    of the price steps, snapped to the nearest power of two or shortest decimal
    that every value fits (0.01, 0.25, 2^-17, ...)."""
    floor = TICK_NOISE * math.ulp(absmax)
    steps = np.abs(np.diff(p))
    steps = steps[steps > 0]
    if steps.size == 0 or steps.min() < floor:
        return None
    g = float(steps.min())
    for _ in range(64):
        r = steps / g
        bad = np.abs(r - np.rint(r)) > TICK_TOL
        if not bad.any():
            break
        g = _gcd(g, float(steps[np.argmax(bad)]), floor)
        if g is None:
            return None
    else:
        return None
    d = p - p[0]
    span = max(1.0, float(np.max(np.abs(d))) / g)            # the largest multiple of g
    candidates = [math.ldexp(1.0, round(math.log2(g)))]
    candidates += [float(f"{g:.{digits}g}") for digits in range(1, 18)]
    for c in dict.fromkeys(candidates + [g]):                 # in order, without repeats
        if abs(c - g) <= TICK_TOL * g / span and _on_grid(d, c):
            return c
    return None


def _ticks(s: _common.Series, tick):
    """(values, origin, exp, tick used): the series in integer ticks when a tick
    applies, else the series itself with its power-of-two scale."""
    p = s.values
    if isinstance(tick, str):
        _validate.choice("tick", tick, ("auto",))
        tick = common_tick(p, max(-s.lo, s.hi))
    elif tick is not None:
        tick = _validate.real("tick", tick, 0.0, strict_min=True)
        absmax = max(-s.lo, s.hi)
        if tick < TICK_NOISE * math.ulp(absmax):
            raise ValueError(f"tick = {tick:g} is too small for p: values up to {absmax:g} are "
                             f"only exact to {math.ulp(absmax):.2g} in float64")
        d = p - p[0]
        r = d / tick
        off = np.abs(r - np.rint(r)) > TICK_TOL
        if off.any():
            i = int(np.argmax(off))
            raise ValueError(f"p is not on the grid of tick = {tick:g}: p[{i}] - p[0] = "
                             f"{d[i]:.17g} is {r[i]:.6f} ticks (pass tick=None for real-valued "
                             f"prices)")
        if np.max(np.abs(r)) >= MAX_TICKS:
            raise ValueError(f"tick = {tick:g} is too small for p: p - p[0] spans more than "
                             f"2^48 ticks")
    if tick is None:
        values, exp = s.for_fill()
        return values, values[0], exp, None
    return np.rint((p - p[0]) / tick), 0.0, 0, tick


def _span_range(v: np.ndarray, n: int) -> float:
    """An upper bound on the range of any n consecutive values of v (blocks of n values;
    n consecutive values lie in two neighbouring blocks): O(T)."""
    whole = v.size // n * n
    blocks = v[:whole].reshape(-1, n)
    hi, lo = blocks.max(axis=1), blocks.min(axis=1)
    if whole < v.size:                              # the short last block
        hi, lo = np.append(hi, v[whole:].max()), np.append(lo, v[whole:].min())
    if hi.size == 1:
        return float(hi[0] - lo[0])
    return float(np.max(np.maximum(hi[1:], hi[:-1]) - np.minimum(lo[1:], lo[:-1])))


LOCAL_EXACT = 2.0**24          # integers below this are exact in float32


def _local_is_exact(values, tick, t: PatternTuning, max_past: int, max_future: int) -> bool:
    """Whether sign "local" decides the ties as cmp does.  Ticks: every sign as cmp (the
    same bits) while the products stay exact in float32: h·rc, lh·rc and (c1 - lc)·rh with
    h, lh values of one tile (at most D ticks from its origin) and rc, rh, c1 - lc window
    ranges (at most R ticks): D·R + R² < 2^24.  Real values: ties beyond the first tile
    (which runs cmp) need equal values at different places (windows sharing their extreme
    values and a continuation equal to p(t̂-1)): local when every value is distinct (one
    sort), its decisions then differ from cmp's only within its rounding band."""
    if t.tb < max(max_past, max_future):  # the first tile holds every overlap (pattern.cl)
        return False
    if tick is None:
        return bool(np.all(np.diff(np.sort(values)) != 0))
    D = _span_range(values, t.wg + t.tb + max_past + max_future)
    R = _span_range(values, max_past)
    return D * R + R * R < LOCAL_EXACT


def _sat_scale(prepared, t: PatternTuning, max_past: int, max_future: int) -> float:
    """cellsat's 2^k: |b|, |K| (products of tile-frame values, at most D from the tile's
    origin, with window ranges, at most R; device units) stay below 2^126 / 2^k, so K·2^k is
    exact and finite, and every nonzero |b - K| of floats that far below 2^126 / 2^k times
    2^k is >= 1: ticks (integers) always; real values unless two products differ by less than
    2^-126 of the largest (windows flat to ~2^-50 of the series' scale)."""
    bound = 0.0
    for values, _, exp, _ in prepared:
        D = math.ldexp(_span_range(values, t.wg + t.tb + max_past + max_future), exp)
        R = math.ldexp(_span_range(values, max_past), exp)
        bound = max(bound, 2.0 * (D + R) * R)
    k = 126 - (math.frexp(bound)[1] if bound > 0 else 0)
    if k < 0:
        raise ValueError("_tuning: cellsat needs products below 2^126 (use cellsat=0)")
    return math.ldexp(1.0, min(k, 126))


# ---------------------------------------------------------------- the call

# The first time-bounded slice covers about this many (t̂, τ, Δt⁻) triples.
FIRST_SLICE_TRIPLES = {True: 1 << 30, False: 1 << 22}      # by DeviceFacts.is_gpu


def pattern_conformity(p, max_past=20, max_future=20, chi=100.0, max_history=16384,
                       device=None, progress=None, tick="auto", *, _accumulate=None,
                       _tuning=None) -> PatternConformity:
    """Pattern conformity Ξ_χ(Δt⁺, Δt⁻) of the series p(t), t = 0 .. T-1.

    Conventions (Preis, Paul, Schneider, EPL 82, 68005 (2008); 0-based times,
    so that the issue's bounds t̂ = Δt⁻ .. T - Δt⁺ are all valid windows):

    * current time t̂, pattern length Δt⁻ = 1 .. max_past: the current window
      is p(t̂-Δt⁻ .. t̂-1), normalised by its own range,
      p̃(t) = (p(t) - p_low) / (p_high - p_low);
    * for each lag τ = 1 .. min(τ̂, t̂ - Δt⁻), τ̂ = max_history, the historical
      window p(t̂-τ-Δt⁻ .. t̂-τ-1) is normalised by its own range p̂;
    * Q(τ) = (1/Δt⁻) Σ_{θ=1..Δt⁻} (p̃(t̂-θ) - p̂(t̂-τ-θ))²;
    * for Δt⁺ = 1 .. max_future,
      ω = (p̃(t̂-1+Δt⁺) - p̃(t̂-1)) · (p̂(t̂-τ-1+Δt⁺) - p̃(t̂-1)),
      both continuations in their own window's normalisation;
    * ξ(Δt⁺, Δt⁻) = Σ_t̂ Σ_τ sgn(ω) e^{-χQ} over t̂ = Δt⁻ .. T - Δt⁺;
      Ξ = ξ / Σ_t̂ Σ_τ |sgn(ω)| e^{-χQ};
    * a current window with zero range skips that t̂ (all its τ), a historical
      window with zero range skips that (t̂, τ); both are counted.  Windows of
      one point (Δt⁻ = 1) always have zero range, so Ξ[:, 0] is NaN.

    A series without memory gives Ξ ≈ 0; p(t) = t gives Ξ = 1 for Δt⁻ ≥ 2.

    p: 1-D real array-like, finite, at least max_past + max_future + 1 points.
    max_past, max_future: 1 .. 64; chi ≥ 0; max_history ≥ 1.  progress:
    None (a bar on a terminal for long runs), True, False or f(done, total).

    tick: Ξ is invariant under p → a + b p (b > 0), and ties (ω = 0, windows
    sharing their extremes) must be decided exactly, so prices are worked on
    in integer ticks: "auto" (default) finds the largest tick τ that every
    p(t) - p(0) is a multiple of (0.01 for prices quoted in cents, 1 for
    integers, 2^-k for float32 data), None treats p as real-valued (then p is
    scaled by a power of two and ties are decided in float32, like a float64
    evaluation decides them by rounding), a number uses that tick (ValueError
    naming the first price off its grid).  The result's `tick` says which was
    used (None: none).

    Accuracy: windows are read in float32 relative to a nearby element (the
    series is sent as float32 (hi, lo) pairs), Q and e^{-χQ} in float32, the
    signs from exact comparisons of rounded products: exact for prices in
    ticks whose windows span less than 2^12 ticks (beyond, two products that
    differ by less than their rounding can tie); GPUs compare products of
    values nearer the tile's origin (sign "local": the same signs for ticks
    with small products, as accurate for real values with distinct values;
    docs/timeseries.md); sums in float32 per tile of
    τ, then float64 (compensated float32 without fp64).  Ξ matches a float64
    NumPy evaluation to ~1e-5.  The t̂ range runs in time-bounded slices
    (Ctrl-C: :class:`clphys.runtime.Interrupted` within about a second), and a
    series too long for the device in windows; neither changes a bit of the
    result.  Returns :class:`PatternConformity`.
    """
    max_past = _validate.integer("max_past", max_past, 1, MAX_PAST)
    max_future = _validate.integer("max_future", max_future, 1, MAX_FUTURE)
    chi = _validate.real("chi", chi, 0.0)
    max_history = _validate.integer("max_history", max_history, 1, _common.MAX_LENGTH)
    check_progress(progress)
    need = max_past + max_future + 1
    why = f"max_past + max_future + 1 = {need}"
    rows, single = _series_list(p)
    series = [_common.series("p" if single else f"p[{i}]", r, need, why)
              for i, r in enumerate(rows)]
    prepared = [_ticks(x, tick) for x in series]
    dev = resolve_device(device)
    acc = _common.accumulator(dev, _accumulate)
    t = _tuning or default_tuning(dev.facts, max_future,
                                  sum(pattern_pairs(x.size, max_past, max_history) for x in series),
                                  max_past)
    if _tuning is None and t.sign == "local" and not all(
            _local_is_exact(v, tk, t, max_past, max_future) for v, _, _, tk in prepared):
        t = dataclasses.replace(t, sign="cmp")      # repeated real values, large ticks
    if t.cellsat == 2 and dev.facts.vendor != "nvidia":
        raise ValueError(f"_tuning: cellsat=2 (inline PTX) needs an NVIDIA device, not "
                         f"{dev.name} (cellsat=1 is portable)")
    if local_bytes(t, max_past, max_future) > dev.facts.local_mem:
        raise ValueError(f"_tuning: {t} needs {local_bytes(t, max_past, max_future)} bytes of "
                         f"local memory for max_past = {max_past}, max_future = {max_future}; "
                         f"{dev.name} has {dev.facts.local_mem} (smaller wg or tb, or pre=False)")
    acc_dtype = _common.ACC_DTYPE[acc]
    E = len(series)
    T = np.array([x.size for x in series])
    units = -(-(T - 1) // t.wg)                     # groups of wg current times t̂ per series
    nblk = np.minimum(PC_BLOCKS, units)             # jackknife blocks per series
    per_t = max_past * min(max_history, int(T.max()))
    target = t.launch_pairs or (2**32 if dev.facts.is_gpu else 2**24)
    ncells, ncounts = max_past * 2 * max_future, max_past * 3
    slot_bytes = ncells * acc_dtype.itemsize + ncounts * 8
    # a window of u units reads the values [t_lo - reach_back, t_hi + max_future)
    reach_back = max_history + max_past + t.tb + 1
    what = f"pattern conformity of {int(T.max())} points with max_history = {max_history}"
    columns = -(-units // nblk)                     # the longest block per series
    # block rows (per_past): one slot region per jackknife block, and each launch of one
    # Δt⁻ covers columns of every block: enough groups to fill a GPU (the same slots as
    # one program's: the same sums); needs every series whole on the device, else unit by
    # unit as for one program
    for block_rows in ((True, False) if t.per_past else (False,)):
        region = PC_BLOCKS if block_rows else 1
        # a quarter of the device at most for the slots and block rows, the rest the series
        room = max(1, items_that_fit(dev, region * slot_bytes, E * PC_BLOCKS * slot_bytes,
                                     largest_per_item=region * slot_bytes) // 4)
        slots = max(1, min(target // per_t // t.wg,
                           int(columns.max() if block_rows else units.max()), room))
        fixed = {"partial sums": region * slots * slot_bytes,
                 "block sums": E * PC_BLOCKS * slot_bytes}
        windows = [_pc_windows(dev, int(T[e]), t.wg, int(units[e]),
                               reach_back + t.wg + max_future, fixed, what) for e in range(E)]
        if all(len(w) == 1 for w in windows):
            break
    shape = dict(wg=t.wg, tb=t.tb, maxp=max_past, maxf=max_future, acc=acc, exp=t.exp,
                 qform=t.qform, sign=t.sign, pre=int(t.pre), slide=t.slide, qsw=int(t.qsw),
                 cellmad=int(t.cellmad), hoist=int(t.hoist), cellsat=int(t.cellsat))
    sat = _sat_scale(prepared, t, max_past, max_future) if t.cellsat else 1.0
    # (program, grid rows): each Δt⁻ compiled in, or all Δt⁻ as grid rows of one launch
    if t.per_past:
        sweeps = [(prg_m, 1) for prg_m in _build_all(
            dev, [dict(shape, mfix=m, brow=int(block_rows)) for m in range(1, max_past + 1)])]
    else:
        sweeps = [(dev.build("timeseries/pattern.cl", **shape), max_past)]
    prg = sweeps[0][0]                              # ts_pc_fold: the same in every program
    queue = dev.queue
    spans = [[_pc_span(a, b, int(T[e]), t.wg, reach_back, max_future) for a, b in windows[e]]
             for e in range(E)]
    x = cla.empty(queue, 2 * max(v1 - v0 for sp in spans for v0, v1 in sp), np.float32)
    pool = zeros(dev, (region * slots, ncells), acc_dtype)
    cpool = zeros(dev, (region * slots, ncounts), np.uint64)
    rows_d = zeros(dev, (E, PC_BLOCKS, ncells), acc_dtype)
    crows = zeros(dev, (E, PC_BLOCKS, ncounts), np.uint64)
    state = {"loaded": None}

    def load(e, w):
        if state["loaded"] != (e, w):
            v0, v1 = spans[e][w]
            values, origin, exp, _ = prepared[e]
            cl.enqueue_copy(queue, x.data, _common.float_pairs(values[v0:v1], origin, exp))
            state["loaded"] = (e, w)

    def sweep(prg_m, grid, e, t_lo, t_hi, slot0, args=(0, 1)):
        v0, v1 = spans[e][state["loaded"][1]]
        prg_m.ts_pc_sweep(queue, grid, (t.wg, 1), x.data, np.uint64(0), np.uint32(v0),
                          np.uint32(v1), np.uint32(T[e]), np.uint32(t_lo), np.uint32(t_hi),
                          np.uint32(slot0), np.uint32(slots), np.uint32(max_history),
                          np.float32(chi), np.float32(sat), np.uint32(args[0]),
                          np.uint32(args[1]), pool.data, cpool.data)

    if block_rows:
        # the run: per series, per Δt⁻, the columns of its blocks (a slot region each);
        # slot s of a block gets columns s, s + slots, ... in order: the same sums however
        # the run is sliced.  The blocks are folded at the series' end.
        firsts = np.concatenate([[0], np.cumsum(max_past * columns)])

        def advance(start, count):
            stop = start + count
            while start < stop:
                e = int(np.searchsorted(firsts, start, side="right")) - 1
                m0, c0 = divmod(start - int(firsts[e]), int(columns[e]))
                c1 = min(int(columns[e]), c0 + stop - start, (c0 // slots + 1) * slots)
                load(e, 0)
                sweep(sweeps[m0][0], ((c1 - c0) * t.wg, int(nblk[e])), e, c0, 0,
                      c0 % slots, (int(units[e]), int(nblk[e])))
                if m0 == max_past - 1 and c1 == columns[e]:
                    prg.ts_pc_fold(queue, (max(ncells, ncounts), int(nblk[e])), None,
                                   pool.data, cpool.data, np.uint32(slots), np.uint32(ncells),
                                   np.uint32(ncounts), rows_d.data, crows.data,
                                   np.uint32(e * PC_BLOCKS))
                start += c1 - c0

        total = int(firsts[-1])
        first = max(1, FIRST_SLICE_TRIPLES[dev.facts.is_gpu] * max_past
                    // (per_t * PC_BLOCKS * t.wg))
        run_sliced(total, advance, queue, progress=progress, label="pattern conformity",
                   what="columns of current-time groups per Δt⁻", first=first)
    else:
        # the run: every series' units in order, cut at its jackknife blocks and windows
        segments = _pc_segments(units, nblk, windows)
        starts = [seg[0] for seg in segments]

        def advance(start, count):
            stop = start + count
            while start < stop:
                i = bisect.bisect_right(starts, start) - 1
                g0, g1, e, k, w, u0, b0, ends_block = segments[i]      # global units [g0, g1)
                load(e, w)
                end = min(stop, g1)
                a, b = u0 + start - g0, u0 + end - g0           # the series' own units
                t_lo, t_hi = 1 + a * t.wg, min(int(T[e]), 1 + b * t.wg)
                for prg_m, grid_rows in sweeps:
                    sweep(prg_m, ((b - a) * t.wg, grid_rows), e, t_lo, t_hi,
                          (a - b0) % slots)
                if end == g1 and ends_block:
                    prg.ts_pc_fold(queue, (max(ncells, ncounts),), None, pool.data, cpool.data,
                                   np.uint32(slots), np.uint32(ncells), np.uint32(ncounts),
                                   rows_d.data, crows.data, np.uint32(e * PC_BLOCKS + k))
                start = end

        total = int(units.sum())
        first = max(1, FIRST_SLICE_TRIPLES[dev.facts.is_gpu] // (per_t * t.wg))
        run_sliced(total, advance, queue, progress=progress, label="pattern conformity",
                   what="groups of current times", first=first, largest=slots)
    blocks = _common.acc_to_float64(rows_d.get()).reshape(E, PC_BLOCKS, max_past, 2 * max_future)
    counts = crows.get().reshape(E, PC_BLOCKS, max_past, 3).sum(axis=1).astype(np.int64)
    out = [_pc_result(blocks[e, :int(nblk[e])], counts[e], max_future) for e in range(E)]
    if single:
        Xi, xi, norm, err = out[0]
        return PatternConformity(Xi=Xi, xi=xi, norm=norm, skipped_current=counts[0, :, 0],
                                 skipped_history=counts[0, :, 1], pairs=counts[0, :, 2],
                                 chi=chi, max_history=max_history, tick=prepared[0][3],
                                 Xi_err=err)
    Xi, xi, norm, err = (np.stack([o[i] for o in out]) for i in range(4))
    return PatternConformity(Xi=Xi, xi=xi, norm=norm, skipped_current=counts[:, :, 0],
                             skipped_history=counts[:, :, 1], pairs=counts[:, :, 2], chi=chi,
                             max_history=max_history, tick=[pp[3] for pp in prepared],
                             Xi_err=err)


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
