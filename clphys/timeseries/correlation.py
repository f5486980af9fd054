"""Hurst exponent H(Δt) and autocorrelation ρ(Δt) from sums over overlapping pairs.

Both need, for every lag l = 1 .. max_lag, one sum over the T - l pairs
(t, t + l); cl_kernels/timeseries/pairs.cl forms them in one pass over the
series with local-memory tiles (see there).  Pair terms are float32, summed
in float32 over short runs of `run` terms and folded into float64 (devices
with fp64) or compensated float32 (TwoSum pairs) accumulators.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .. import _validate
from ..progress import Progress, check_progress
from ..runtime import check_memory, items_that_fit, resolve_device, run_sliced
from . import _common
from . import _transfer as _xfer

__all__ = ["HurstResult", "AutocorrelationResult", "PairTuning", "hurst", "autocorrelation"]


@dataclass(frozen=True, eq=False)
class HurstResult:
    """S_q(Δt) and the local Hurst exponent H(Δt) at lags = 1 .. max_lag.

    H[0] (Δt = 1) is NaN: the local slope needs the previous lag.  H is also
    NaN where S is 0 at Δt or Δt - 1 (a constant stretch)."""
    lags: np.ndarray
    S: np.ndarray
    H: np.ndarray
    q: float


@dataclass(frozen=True, eq=False)
class AutocorrelationResult:
    """ρ(Δt) at lags = 0 .. max_lag (ρ(0) = 1); `stationary` says which form."""
    lags: np.ndarray
    rho: np.ndarray
    stationary: bool


@dataclass(frozen=True)
class PairTuning:
    """Code shape of pairs.cl: work-group size, lags per work item, t values per
    local-memory tile, t values per float32 run; `groups` work groups share the
    tiles (None: a few per compute unit); the upload is split into `pieces`
    segments (None: by length, see :func:`auto_pieces`), so that launches on the
    first tiles can run while later parts of the series are still on their way."""
    wg: int
    lpi: int
    chunk: int
    run: int = 32
    groups: int | None = None
    pieces: int | None = None


BLOCK = 256                   # values per offset block of the "blocked" layout (Hurst)
PIECE_VALUES = 1 << 21        # about this many values per upload segment of a long series
MAX_PIECES = 8
# The first time-bounded slice covers about this many pair terms (then run_sliced
# doubles or halves it): a few ms on a CPU, well under a ms on a GPU.
FIRST_SLICE_PAIRS = {True: 1 << 30, False: 1 << 25}      # by DeviceFacts.is_gpu


def auto_pieces(n: int) -> int:
    """Upload segments for a series of n values: one below 2^22 values, then one
    per 2^21 values, at most 8 (2^24 values: 8 segments of 8 MB each)."""
    return max(1, min(MAX_PIECES, n // PIECE_VALUES))


def default_tuning(facts, nlags: int) -> PairTuning:
    if facts.is_gpu:
        lpi, lo, hi, chunk = 8, max(32, facts.wg_multiple), 256, 1024
    else:
        lpi, lo, hi, chunk = 8, 8, 64, 512
    lpi = max(1, min(lpi, -(-nlags // lo)))
    wg = min(max(_common.pow2_at_least(-(-nlags // lpi)), lo), hi, facts.max_work_group)
    while chunk > 32 and 4 * (2 * chunk + wg * lpi) > facts.local_mem // 2:
        chunk //= 2
    return PairTuning(wg=wg, lpi=lpi, chunk=chunk, run=min(32, chunk))


STAGING_SLACK = 9 / 8         # staging buffers are rounded up by at most 1/8 (_transfer.capacity)


class PairSums:
    """Σ_t f(x(t), x(t + l)) over t + l < n for l = lag0 .. lag0 + nlags - 1, as
    float64 (the maximum for pair "absmax"), on one device.

    Buffers and programs are made once, after the memory they need was checked
    (runtime.check_memory).  The series goes to the device whole or, when it does
    not fit, in windows of whole tiles (each with the `reach` values after it that
    its pairs need); kernels run in time-bounded slices of tiles (runtime.run_sliced)
    so progress counts completed work and Ctrl-C stops within about a second.  The
    sums do not depend on how the tiles were split (see pairs.cl): windows, slices
    and upload paths all give the same bits.

    `fill` writes (a window of) the series into a host byte array in the layout of
    `value` ("float2", "blocked", "float"; see pairs.cl), `segment_ends` says which
    bytes each upload segment ends at; `run` enqueues the launches of a whole series
    already on the device at once (the benchmark times it apart from the upload) and
    `compute` does everything."""

    def __init__(self, dev, n, nlags, pair, value, lag0=1, accumulate=None, tuning=None,
                 block=BLOCK, rows=None, what="the pair sums"):
        self.dev, self.n, self.nlags, self.lag0, self.value = dev, n, nlags, lag0, value
        self.pair = pair
        self.acc = "max" if pair == "absmax" else _common.accumulator(dev, accumulate)
        t = tuning or default_tuning(dev.facts, nlags)
        if t.wg > dev.facts.max_work_group:
            raise ValueError(f"work-group size {t.wg} exceeds {dev.name}'s {dev.facts.max_work_group}")
        self.tuning = t
        # rows of the finishing kernel: on GPUs 16 x 64 items add the groups' partial sums
        if rows is None:
            rows = _common.pow2_at_most(min(16, dev.facts.max_work_group // 64)) \
                if dev.facts.is_gpu else 1
        self.rows = rows
        params = dict(pair=pair, value=value, acc=self.acc, wg=t.wg, lpi=t.lpi, chunk=t.chunk,
                      run=t.run, rows=self.rows)
        # layout: "blocked" puts a (hi, lo) float pair per block first, the values after it
        self.block = block if value == "blocked" else 0
        if value == "blocked":
            params["block"] = block
        self.elem = 8 if value == "float2" else 4
        self.lag_blocks = -(-nlags // (t.wg * t.lpi))
        self.reach = lag0 + self.lag_blocks * t.wg * t.lpi     # values past a tile's start it reads
        self.nchunks = -(-(n - lag0) // t.chunk)
        per_cu = 16 if dev.facts.is_gpu else 4
        groups = t.groups or max(1, -(-per_cu * dev.facts.compute_units // self.lag_blocks))
        acc_bytes = _common.ACC_DTYPE[self.acc].itemsize
        # the partial-sum rows take a quarter of the device at most, the rest is the series'
        room = max(1, items_that_fit(dev, nlags * acc_bytes) // 4)
        self.groups = max(1, min(groups, self.nchunks, room))
        self.fixed = {"partial sums": self.groups * nlags * acc_bytes, "sums": nlags * acc_bytes,
                      "lag scales": nlags * 4 if pair == "powdiff" else 4}
        self.windows = self._plan_windows(what)
        self.nbytes = self.window_bytes(0, self.nchunks)           # the whole series
        pieces = max(1, min(t.pieces or auto_pieces(n), self.nchunks))
        self.bounds = [k * self.nchunks // pieces for k in range(pieces + 1)]
        self.first_slice = max(1, FIRST_SLICE_PAIRS[dev.facts.is_gpu]
                               // (t.chunk * self.lag_blocks * t.wg * t.lpi))
        self.prg = dev.build("timeseries/pairs.cl", **params)
        dtype = _common.ACC_DTYPE[self.acc]
        self.partial = cla.empty(dev.queue, self.groups * nlags, dtype)
        self.out = cla.empty(dev.queue, nlags, dtype)
        self.inv = cla.empty(dev.queue, nlags if pair == "powdiff" else 1, np.float32)

    # -- layout of the series, whole or a window of tiles [c0, c1)

    def window_span(self, c0: int, c1: int) -> tuple[int, int]:
        """The values [v0, v1) that the tiles [c0, c1) read."""
        return c0 * self.tuning.chunk, min(self.n, c1 * self.tuning.chunk + self.reach)

    def _xoff(self, nvalues: int) -> int:
        """Floats before the values: the block table, 256-byte aligned."""
        return -(-2 * -(-nvalues // self.block) // 64) * 64 if self.block else 0

    def window_bytes(self, c0: int, c1: int) -> int:
        v0, v1 = self.window_span(c0, c1)
        return 4 * self._xoff(v1 - v0) + self.elem * (v1 - v0)

    def _plan_windows(self, what: str) -> list[tuple[int, int]]:
        """Tile ranges whose values fit the device beside the fixed buffers: one
        window when the series fits, else windows starting at multiples of the
        block (so that every window sees the same float32 values as the whole)."""
        dev, chunk = self.dev, self.tuning.chunk
        unit = math.lcm(chunk, self.block) // chunk if self.block else 1   # tiles per step
        per_chunk = math.ceil(STAGING_SLACK * (self.window_bytes(0, unit) - self.window_bytes(0, 0)
                                               + 256) / unit)       # 256: table alignment
        base = math.ceil(STAGING_SLACK * (self.window_bytes(0, 0) + 256))
        cached = _xfer.cached_bytes(dev)
        fixed = sum(self.fixed.values())
        limit = max(0, (dev.facts.max_alloc - base) // per_chunk)
        fit = items_that_fit(dev, per_chunk, fixed + base + cached, limit=limit)
        if fit < self.nchunks and cached:
            _xfer.clear_cache(dev)          # the staging buffers of earlier calls go first
            fit = items_that_fit(dev, per_chunk, fixed + base, limit=limit)
        if fit >= self.nchunks:
            return [(0, self.nchunks)]
        fit = fit // unit * unit
        if fit < unit:
            check_memory(dev, {**self.fixed, "series window": base + unit * per_chunk}, what,
                         "Reduce max_lag.")
            fit = unit                      # fits by check_memory's count after all
        return [(c, min(c + fit, self.nchunks)) for c in range(0, self.nchunks, fit)]

    @property
    def pieces(self) -> int:
        return len(self.bounds) - 1

    def fill(self, host: np.ndarray, values: np.ndarray, window=None, exp: int = 0):
        """Write the float64 series `values` (all n of them; only the window's are
        used) into the byte array `host` in this plan's layout, scaled by 2^exp."""
        c0, c1 = window or (0, self.nchunks)
        v0, v1 = self.window_span(c0, c1)
        xoff = self._xoff(v1 - v0)
        f32 = host[:4 * xoff + self.elem * (v1 - v0)].view(np.float32)
        part = values[v0:v1]
        if self.value == "blocked":
            _common.fill_blocked(f32[:2 * -(-(v1 - v0) // self.block)].reshape(-1, 2),
                                 f32[xoff:], part, self.block, values[0], exp)
        elif self.value == "float2":
            _common.fill_pairs(f32.reshape(-1, 2), part, values[0], exp)
        elif exp:
            np.ldexp(part, exp, out=f32, casting="same_kind")
        else:
            f32[:] = part

    def segment_ends(self, window=None) -> list[int]:
        """For each upload segment of a window (default: the whole series), the end
        of the bytes it holds; a launch over the tiles up to the segment's bound
        needs no later segment."""
        c0, c1 = window or (0, self.nchunks)
        v0, v1 = self.window_span(c0, c1)
        xoff = self._xoff(v1 - v0)
        return [4 * xoff + self.elem * (v - v0)
                for v in (self.window_span(c0, b)[1] for b in self._segment_bounds(c0, c1)[1:])]

    def _segment_bounds(self, c0: int, c1: int) -> list[int]:
        pieces = max(1, min(self.tuning.pieces or auto_pieces(self.n), c1 - c0))
        return [c0 + k * (c1 - c0) // pieces for k in range(pieces + 1)]

    # -- launches

    def launch(self, x, c0: int, a: int, b: int, fresh: bool, q: float = 1.0, window=None,
               wait_for=None, scale: float = 1.0):
        """Enqueue the tiles [a, b) of the window that starts at global tile c0, whose
        values are in `x` (a cl.Buffer in this plan's layout), multiplied by `scale`
        (a power of two) as they are read."""
        t = self.tuning
        w0, w1 = window or (0, self.nchunks)
        v0, v1 = self.window_span(w0, w1)
        self.prg.ts_pair_sums(self.dev.queue, (self.lag_blocks * t.wg, self.groups), (t.wg, 1),
                              x, np.uint32(self._xoff(v1 - v0)), np.uint32(v1 - v0),
                              np.uint32(self.lag0), np.uint32(self.nlags), np.uint32(a),
                              np.uint32(b), np.uint32(c0 % self.groups), np.uint32(fresh),
                              np.float32(q), np.float32(scale), self.inv.data, self.partial.data,
                              wait_for=wait_for or None)

    def run(self, x, q: float = 1.0, waits=None):
        """Enqueue every launch on the whole series in `x` at once, one per upload
        segment; `waits[k]`: the events segment k's launch must wait for."""
        for k, (a, b) in enumerate(zip(self.bounds, self.bounds[1:])):
            self.launch(x, 0, a, b, k == 0, q, wait_for=waits[k] if waits else None)
        self.finish()

    def finish(self):
        fin = 64
        self.prg.ts_pair_finish(self.dev.queue, (-(-self.nlags // fin) * fin, self.rows),
                                (fin, self.rows), self.partial.data, np.uint32(self.groups),
                                np.uint32(self.nlags), self.out.data)

    def result(self) -> np.ndarray:
        return _common.acc_to_float64(self.out.get())

    def set_scales(self, inv: np.ndarray):
        """The per-lag factors s_l of pair "powdiff"."""
        cl.enqueue_copy(self.dev.queue, self.inv.data, np.ascontiguousarray(inv, np.float32))

    def compute(self, values: np.ndarray, q: float = 1.0, transfer=None, *, exp: int = 0,
                progress=None, bar=None, label: str = "") -> np.ndarray:
        """Upload `values` (scaled by 2^exp; through `transfer`, default by device
        and size), run the tiles in time-bounded slices, return the sums.
        `progress` as everywhere, or `bar`: a Progress to count the tiles into."""
        windows = self.windows
        # float32 differences of the unscaled series are exact to scale while they are
        # normal and finite (|p| between 2^-70 and 2^120): then the kernel scales them as
        # it reads them, and the host conversion stays one pass
        exp, scale = (0, math.ldexp(1.0, exp)) if self.value != "float" and \
            -120 <= exp <= 70 else (exp, 1.0)
        nbytes = max(self.window_bytes(*w) for w in windows)
        transfer = _xfer.default(self.dev, nbytes) if transfer is None else transfer
        if len(windows) > 1 and transfer.path == "pinned-unmap":
            transfer = _xfer.Transfer("pinned", transfer.overlap)     # refilled per window
        with _xfer.Staged(self.dev, nbytes, transfer) as st:
            state = {}

            def load(w):
                st.remap()
                self.fill(st.host, values, windows[w], exp)
                state["ends"] = self.segment_ends(windows[w])
                state["waits"] = st.send(state["ends"])

            def launch(w, start, end):
                c0, c1 = windows[w]
                v0, v1 = self.window_span(c0, c1)
                # wait for the upload segment that holds the last value these tiles read
                need = 4 * self._xoff(v1 - v0) + self.elem * (self.window_span(c0, end)[1] - v0)
                k = next(i for i, e in enumerate(state["ends"]) if e >= need)
                self.launch(st.buffer, c0, start - c0, end - c0, start == 0, q, windows[w],
                            state["waits"][k], scale)

            advance = _common.windowed(windows, load, launch)
            run_sliced(self.nchunks, advance, self.dev.queue, progress=progress, bar=bar,
                       label=label, what="tiles of the series", first=self.first_slice)
            self.finish()
            return self.result()


def _max_lag(max_lag) -> int:
    return _validate.integer("max_lag", max_lag, 1, _common.MAX_LENGTH - 2)


def _transfer_arg(value):
    return None if value is None else _xfer.parse(value)


Q_MIN, Q_MAX = 0.01, 1000.0


def hurst(p, max_lag=256, q=1.0, device=None, progress=None, *, _accumulate=None,
          _tuning=None, _layout="blocked", _transfer=None) -> HurstResult:
    """Hurst exponent of the series p(t), t = 0 .. T-1, from its q-th order
    structure function.

        S_q(Δt) = ⟨|p(t + Δt) - p(t)|^q⟩^(1/q),   Δt = 1 .. max_lag,

    the average running over all T - Δt values of t with t + Δt ≤ T - 1, and
    the local exponent between consecutive lags

        H(Δt) = [log S(Δt) - log S(Δt-1)] / [log Δt - log(Δt-1)],   Δt ≥ 2.

    A random walk gives H = 1/2, a persistent (trending) series H > 1/2, an
    anti-persistent one H < 1/2; p(t) = t gives S(Δt) = Δt and H = 1.

    p: 1-D real array-like (any float or int dtype, e.g. a pandas Series), at
    least max_lag + 2 points, all finite.  q in [0.01, 1000] (q = 1 and q = 2
    take fast paths; S_2^2 is the mean squared displacement).  progress: None
    (a bar on a terminal for long runs), True, False or f(done, total).
    Returns :class:`HurstResult` (lags, S, H, q); H[0] is NaN (no slope at Δt = 1).

    Scale: p is scaled by the power of two that brings max |p| into [1/2, 1)
    before it is rounded to float32, and S is scaled back, so every finite
    float64 input works (1e-310 to 1e308) and S(λp) = λ S(p) exactly for λ a
    power of two.  For q other than 1 and 2 a first pass finds M(Δt) = max
    |p(t + Δt) - p(t)| and the sums are of (|Δp| / M)^q ≤ 1, so |Δp|^q never
    overflows or underflows in a way that matters: S = M ⟨(|Δp|/M)^q⟩^(1/q).

    Accuracy: the series goes to the device as float32 values relative to the
    first value of their block of 256 (with a float64-accurate table of the
    block offsets), and differences are formed in float32 relative to a nearby
    element (so a large offset costs nothing), summed in float32 over runs of
    32 and accumulated in float64 (compensated float32 on devices without
    fp64): S agrees with a float64 NumPy computation to ~1e-7 relative, for
    q < 0.5 to ~1e-7/q (the 1/q-th root magnifies the float32 error of the
    terms; 7e-6 at q = 0.01).

    Long series are worked on in time-bounded slices (a progress bar counts
    completed work; Ctrl-C raises :class:`clphys.runtime.Interrupted` within
    about a second) and, beyond the device's memory, in windows; neither
    changes a bit of the result.
    """
    max_lag = _max_lag(max_lag)
    s = _common.series("p", p, max_lag + 2, f"max_lag + 2 with max_lag = {max_lag}")
    q = _validate.real("q", q, Q_MIN, Q_MAX)
    check_progress(progress)
    _validate.choice("_layout", _layout, ("blocked", "float2"))
    transfer = _transfer_arg(_transfer)
    dev = resolve_device(device)
    values, exp = s.for_fill()
    lags = np.arange(1, max_lag + 1)
    pairs = s.size - lags
    what = f"hurst of {s.size} points with max_lag = {max_lag}"
    if q in (1.0, 2.0):
        plan = PairSums(dev, s.size, max_lag, "absdiff" if q == 1.0 else "sqdiff", _layout,
                        accumulate=_accumulate, tuning=_tuning, what=what)
        mean = plan.compute(values, q, transfer, exp=exp, progress=progress, label="hurst")
        S = mean / pairs if q == 1.0 else np.sqrt(mean / pairs)
    else:
        top = PairSums(dev, s.size, max_lag, "absmax", _layout, tuning=_tuning, what=what)
        with Progress(2 * top.nchunks, progress, label="hurst") as bar:
            M = top.compute(values, transfer=transfer, exp=exp, bar=bar)
            del top
            plan = PairSums(dev, s.size, max_lag, "powdiff", _layout, accumulate=_accumulate,
                            tuning=_tuning, what=what)
            with np.errstate(divide="ignore"):
                inv = np.where(M > 0, 1.0 / M, 0.0).astype(np.float32)
            plan.set_scales(inv)
            sums = plan.compute(values, q, transfer, exp=exp, bar=bar)
        with np.errstate(divide="ignore"):
            scale = np.where(inv > 0, 1.0 / inv.astype(np.float64), 0.0)     # 1 / s_l as used
        S = scale * (sums / pairs) ** (1.0 / q)
    S = np.ldexp(S, -s.exp)
    return HurstResult(lags=lags, S=S, H=local_slope(lags, S), q=q)


def local_slope(lags: np.ndarray, S: np.ndarray) -> np.ndarray:
    """H(Δt) = Δ log S / Δ log Δt between consecutive lags; NaN at the first
    lag and where S is not positive."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logS = np.where(S > 0, np.log(np.where(S > 0, S, 1.0)), np.nan)
        H = np.full(S.shape, np.nan)
        H[1:] = np.diff(logS) / np.diff(np.log(lags.astype(np.float64)))
    return H


def autocorrelation(x, max_lag=256, stationary=False, device=None, progress=None, *,
                    _accumulate=None, _tuning=None, _transfer=None) -> AutocorrelationResult:
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

    x: 1-D real array-like, at least max_lag + 2 points, finite, not constant.
    progress: as for :func:`hurst`.  Returns :class:`AutocorrelationResult`
    (lags, rho, stationary).

    Accuracy: x is scaled by a power of two (max |x| in [1/2, 1), so every
    finite float64 input works, subnormal ones included, and ρ(λx) = ρ(x) for λ
    a power of two, bit for bit), centred near its mean in float64 and rounded
    to float32; the cross sums Σ x(t) x(t+Δt) are the device's work (float32
    products, runs of 32 in float32, then float64 or compensated float32); the
    window means and variances come from float64 prefix sums on the host.  ρ
    agrees with a float64 NumPy computation to ~1e-7 absolute.
    """
    max_lag = _max_lag(max_lag)
    s = _common.series("x", x, max_lag + 2, f"max_lag + 2 with max_lag = {max_lag}")
    if not isinstance(stationary, (bool, np.bool_)):
        raise TypeError(f"stationary must be True or False, got {stationary!r}")
    check_progress(progress)
    if s.lo == s.hi:
        raise ValueError("x is constant: its autocorrelation is undefined")
    transfer = _transfer_arg(_transfer)
    dev = resolve_device(device)
    xc = s.scaled()
    # Centre on the mean rounded to a power of two near σ: |mean - c| <= σ/2 keeps the
    # cancellation mild, and series on a binary grid (integers, half ticks) stay on it,
    # so their float32 values and small products are exact (no per-value rounding bias).
    sd = float(xc.std())
    step = math.ldexp(1.0, math.frexp(sd)[1] - 1) if sd > 0 else 1.0
    xc -= round(float(xc.mean()) / step) * step
    plan = PairSums(dev, s.size, max_lag, "product", "float", lag0=1, accumulate=_accumulate,
                    tuning=_tuning, what=f"the autocorrelation of {s.size} points with "
                                         f"max_lag = {max_lag}")
    cross = np.concatenate([[np.dot(xc, xc)],
                            plan.compute(xc, transfer=transfer, progress=progress,
                                         label="autocorrelation")])
    return AutocorrelationResult(lags=np.arange(max_lag + 1),
                                 rho=rho_from_sums(xc, cross, stationary),
                                 stationary=bool(stationary))


def rho_from_sums(xc: np.ndarray, cross: np.ndarray, stationary: bool) -> np.ndarray:
    """ρ(Δt) for Δt = 0 .. len(cross)-1 from the cross sums Σ_t xc(t) xc(t+Δt) of
    the (nearly) centred series xc and float64 prefix sums of xc for the window
    moments.  Both forms depend on xc only through its deviations from means, so
    the offset that centred it drops out: with d the exact mean of xc and A, B
    the sums of xc over x(0 .. N-1) and x(Δt .. T-1),
    Σ (xc(t) - d)(xc(t+Δt) - d) = cross - d (A + B) + N d²."""
    n, k = xc.size, cross.size
    N = n - np.arange(k)
    head1 = np.concatenate([[0.0], np.cumsum(xc[:k - 1])])           # Σ xc[:Δt]
    head2 = np.concatenate([[0.0], np.cumsum(xc[:k - 1] ** 2)])
    tail1 = np.concatenate([[0.0], np.cumsum(xc[::-1][:k - 1])])     # Σ xc[T-Δt:]
    tail2 = np.concatenate([[0.0], np.cumsum(xc[::-1][:k - 1] ** 2)])
    s1, s2 = xc.sum(), cross[0]
    A, B = s1 - tail1, s1 - head1
    with np.errstate(invalid="ignore", divide="ignore"):
        if stationary:
            d = s1 / n
            rho = (cross - d * (A + B) + N * d * d) / (s2 - n * d * d)
        else:
            ma, mb = A / N, B / N               # means of x(t) and x(t + Δt), minus the offset
            va = (s2 - tail2) / N - ma * ma
            vb = (s2 - head2) / N - mb * mb
            rho = np.where((va > 0) & (vb > 0), (cross / N - ma * mb) / np.sqrt(va * vb), np.nan)
    rho[0] = 1.0
    return rho
