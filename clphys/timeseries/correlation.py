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
import pyopencl.array as cla

from .. import _validate
from ..runtime import resolve_device
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
    tiles (None: a few per compute unit); the tiles are processed in `pieces`
    launches (None: by length, see :func:`auto_pieces`), which can overlap the
    upload of later parts of the series."""
    wg: int
    lpi: int
    chunk: int
    run: int = 32
    groups: int | None = None
    pieces: int | None = None


BLOCK = 256                   # values per offset block of the "blocked" layout (Hurst)
PIECE_VALUES = 1 << 21        # about this many values per piece of a long series
MAX_PIECES = 8


def auto_pieces(n: int) -> int:
    """Launches for a series of n values: one below 2^22 values, then one per
    2^21 values, at most 8 (2^24 values: 8 pieces of 8 MB each).  A function of
    n only, so every transfer path gives bit-identical results."""
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


class PairSums:
    """Σ_t f(x(t), x(t + l)) over t + l < n for l = lag0 .. lag0 + nlags - 1, as
    float64, on one device.  Buffers and programs are made once; `fill` writes the
    series into a host byte array in the layout of `value` ("float2", "blocked",
    "float"; see pairs.cl), `segment_ends` says which bytes each launch needs,
    and `run` only enqueues kernels (the benchmark times it apart from the upload)."""

    def __init__(self, dev, n, nlags, pair, value, lag0=1, accumulate=None, tuning=None,
                 block=BLOCK, rows=None):
        self.dev, self.n, self.nlags, self.lag0, self.value = dev, n, nlags, lag0, value
        self.acc = _common.accumulator(dev, accumulate)
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
            self.nblocks = -(-n // block)
            self.xoff = -(-2 * self.nblocks // 64) * 64          # floats; 256-byte aligned
            self.elem = 4
        else:
            self.nblocks, self.xoff, self.elem = 0, 0, 8 if value == "float2" else 4
        self.nbytes = 4 * self.xoff + self.elem * n
        self.prg = dev.build("timeseries/pairs.cl", **params)
        self.lag_blocks = -(-nlags // (t.wg * t.lpi))
        self.nchunks = -(-(n - lag0) // t.chunk)
        pieces = max(1, min(t.pieces or auto_pieces(n), self.nchunks))
        self.bounds = [k * self.nchunks // pieces for k in range(pieces + 1)]
        per_piece = max(b - a for a, b in zip(self.bounds, self.bounds[1:]))
        per_cu = 16 if dev.facts.is_gpu else 4
        groups = t.groups or max(1, -(-per_cu * dev.facts.compute_units // self.lag_blocks))
        self.groups = max(1, min(groups, per_piece))
        self.global_size = (self.lag_blocks * t.wg, self.groups)
        dtype = _common.ACC_DTYPE[self.acc]
        self.partial = cla.empty(dev.queue, self.groups * nlags, dtype)
        self.out = cla.empty(dev.queue, nlags, dtype)

    @property
    def pieces(self) -> int:
        return len(self.bounds) - 1

    def fill(self, host: np.ndarray, values: np.ndarray):
        """Write the float64 series `values` (n of them) into the byte array `host`
        (self.nbytes long) in this plan's layout."""
        f32 = host[:self.nbytes].view(np.float32)
        if self.value == "blocked":
            _common.fill_blocked(f32[:2 * self.nblocks].reshape(-1, 2), f32[self.xoff:],
                                 values, self.block)
        elif self.value == "float2":
            _common.fill_pairs(f32.reshape(-1, 2), values)
        else:
            f32[:] = values

    def segment_ends(self) -> list[int]:
        """For each launch, the end of the bytes it reads (from byte 0)."""
        t = self.tuning
        reach = self.lag0 + self.lag_blocks * t.wg * t.lpi       # past the last lag block
        return [4 * self.xoff + self.elem * min(self.n, c * t.chunk + reach)
                for c in self.bounds[1:]]

    def run(self, x, q: float = 1.0, waits=None):
        """Enqueue the launches on the series in `x` (a cl.Buffer in this plan's
        layout); `waits[k]`: events launch k must wait for."""
        queue, t = self.dev.queue, self.tuning
        for k, (a, b) in enumerate(zip(self.bounds, self.bounds[1:])):
            self.prg.ts_pair_sums(queue, self.global_size, (t.wg, 1), x, np.uint32(self.xoff),
                                  np.uint32(self.n), np.uint32(self.lag0),
                                  np.uint32(self.nlags), np.uint32(a), np.uint32(b),
                                  np.uint32(k == 0), np.float32(q), self.partial.data,
                                  wait_for=(waits[k] or None) if waits else None)
        self.finish()

    def finish(self):
        fin = 64
        self.prg.ts_pair_finish(self.dev.queue, (-(-self.nlags // fin) * fin, self.rows),
                                (fin, self.rows), self.partial.data, np.uint32(self.groups),
                                np.uint32(self.nlags), self.out.data)

    def result(self) -> np.ndarray:
        return _common.acc_to_float64(self.out.get())

    def compute(self, values: np.ndarray, q: float = 1.0, transfer=None) -> np.ndarray:
        """Upload `values` (through `transfer`, default by device and size), run,
        and return the sums."""
        transfer = _xfer.default(self.dev, self.nbytes) if transfer is None else transfer
        with _xfer.Staged(self.dev, self.nbytes, transfer) as st:
            self.fill(st.host, values)
            self.run(st.buffer, q, st.send(self.segment_ends()))
            return self.result()


def _max_lag(max_lag) -> int:
    return _validate.integer("max_lag", max_lag, 1, _common.MAX_LENGTH - 2)


def _transfer_arg(value):
    return None if value is None else _xfer.parse(value)


def hurst(p, max_lag=256, q=1.0, device=None, *, _accumulate=None, _tuning=None,
          _layout="blocked", _transfer=None) -> HurstResult:
    """Hurst exponent of the series p(t), t = 0 .. T-1, from its q-th order
    structure function.

        S_q(Δt) = ⟨|p(t + Δt) - p(t)|^q⟩^(1/q),   Δt = 1 .. max_lag,

    the average running over all T - Δt values of t with t + Δt ≤ T - 1, and
    the local exponent between consecutive lags

        H(Δt) = [log S(Δt) - log S(Δt-1)] / [log Δt - log(Δt-1)],   Δt ≥ 2.

    A random walk gives H = 1/2, a persistent (trending) series H > 1/2, an
    anti-persistent one H < 1/2; p(t) = t gives S(Δt) = Δt and H = 1.

    p: 1-D real array-like (any float or int dtype, e.g. a pandas Series), at
    least max_lag + 2 points, all finite.  q > 0 (q = 1 and q = 2 take fast
    paths; S_2^2 is the mean squared displacement).  Returns
    :class:`HurstResult` (lags, S, H, q); H[0] is NaN (no slope at Δt = 1).

    Accuracy: the series goes to the device as float32 values relative to the
    first value of their block of 256 (with a float64-accurate table of the
    block offsets), and differences are formed in float32 relative to a nearby
    element (so a large offset costs nothing), summed in float32 over runs of
    32 and accumulated in float64 (compensated float32 on devices without
    fp64): S agrees with a float64 NumPy computation to ~1e-7.
    """
    max_lag = _max_lag(max_lag)
    p = _common.series("p", p, max_lag + 2, f"max_lag + 2 with max_lag = {max_lag}")
    q = _validate.real("q", q, 0.0, strict_min=True)
    _validate.choice("_layout", _layout, ("blocked", "float2"))
    transfer = _transfer_arg(_transfer)
    dev = resolve_device(device)
    pair = "absdiff" if q == 1.0 else "sqdiff" if q == 2.0 else "powdiff"
    plan = PairSums(dev, p.size, max_lag, pair, _layout, lag0=1, accumulate=_accumulate,
                    tuning=_tuning)
    sums = plan.compute(p, q, transfer)
    lags = np.arange(1, max_lag + 1)
    mean = sums / (p.size - lags)
    S = mean ** (1.0 / q)
    return HurstResult(lags=lags, S=S, H=local_slope(lags, S), q=q)


def local_slope(lags: np.ndarray, S: np.ndarray) -> np.ndarray:
    """H(Δt) = Δ log S / Δ log Δt between consecutive lags; NaN at the first
    lag and where S is not positive."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logS = np.where(S > 0, np.log(np.where(S > 0, S, 1.0)), np.nan)
        H = np.full(S.shape, np.nan)
        H[1:] = np.diff(logS) / np.diff(np.log(lags.astype(np.float64)))
    return H


def autocorrelation(x, max_lag=256, stationary=False, device=None, *, _accumulate=None,
                    _tuning=None, _transfer=None) -> AutocorrelationResult:
    """Autocorrelation ρ(Δt), Δt = 0 .. max_lag, of the series x(t), t = 0 .. T-1
    (normally price changes, not prices).

    General form (default): over the N = T - Δt overlapping pairs (x(t), x(t + Δt)),

        ρ(Δt) = (⟨x(t) x(t+Δt)⟩ - ⟨x(t)⟩⟨x(t+Δt)⟩) / (σ_t σ_{t+Δt}),

    where ⟨x(t)⟩, σ_t are the mean and standard deviation of x(0 .. N-1) and
    ⟨x(t+Δt)⟩, σ_{t+Δt} those of x(Δt .. T-1) (population, 1/N).
    ``stationary=True``: (⟨x(t) x(t+Δt)⟩ - ⟨x⟩²) / (⟨x²⟩ - ⟨x⟩²) with the
    moments of the whole series and the pair average over the same N pairs.
    ρ(0) = 1.  A lag where a window has zero variance gives NaN.

    x: 1-D real array-like, at least max_lag + 2 points, finite, not constant.
    Returns :class:`AutocorrelationResult` (lags, rho, stationary).

    Accuracy: x is centred near its mean in float64 and rounded to float32; the
    cross sums Σ x(t) x(t+Δt) are the device's work (float32 products, runs of
    32 in float32, then float64 or compensated float32); the window means and
    variances come from float64 prefix sums on the host.
    """
    max_lag = _max_lag(max_lag)
    x = _common.series("x", x, max_lag + 2, f"max_lag + 2 with max_lag = {max_lag}")
    if not isinstance(stationary, (bool, np.bool_)):
        raise TypeError(f"stationary must be True or False, got {stationary!r}")
    if np.all(x == x[0]):
        raise ValueError("x is constant: its autocorrelation is undefined")
    transfer = _transfer_arg(_transfer)
    dev = resolve_device(device)
    # Centre on the mean rounded to a power of two near σ: |mean - c| <= σ/2 keeps the
    # cancellation mild, and series on a binary grid (integers, half ticks) stay on it,
    # so their float32 values and small products are exact (no per-value rounding bias).
    step = 2.0 ** math.floor(math.log2(x.std()))
    c = round(x.mean() / step) * step
    xc = x - c
    plan = PairSums(dev, x.size, max_lag, "product", "float", lag0=1, accumulate=_accumulate,
                    tuning=_tuning)
    cross = np.concatenate([[np.dot(xc, xc)], plan.compute(xc, transfer=transfer)])
    return AutocorrelationResult(lags=np.arange(max_lag + 1),
                                 rho=rho_from_sums(xc, c, cross, stationary),
                                 stationary=bool(stationary))


def rho_from_sums(xc: np.ndarray, c: float, cross: np.ndarray, stationary: bool) -> np.ndarray:
    """ρ(Δt) for Δt = 0 .. len(cross)-1 of x = c + xc from the cross sums
    Σ_t xc(t) xc(t+Δt) and float64 prefix sums of xc for the window moments.
    Only the stationary form depends on the offset c, through
    ⟨x x_Δt⟩ - ⟨x⟩² = ⟨xc xc_Δt⟩ + c (⟨xc(t)⟩ + ⟨xc(t+Δt)⟩ - 2⟨xc⟩) - ⟨xc⟩²."""
    n, k = xc.size, cross.size
    N = n - np.arange(k)
    head1 = np.concatenate([[0.0], np.cumsum(xc[:k - 1])])           # Σ xc[:Δt]
    head2 = np.concatenate([[0.0], np.cumsum(xc[:k - 1] ** 2)])
    tail1 = np.concatenate([[0.0], np.cumsum(xc[::-1][:k - 1])])     # Σ xc[T-Δt:]
    tail2 = np.concatenate([[0.0], np.cumsum(xc[::-1][:k - 1] ** 2)])
    s1, s2 = xc.sum(), np.dot(xc, xc)
    ma, mb = (s1 - tail1) / N, (s1 - head1) / N     # means of x(t) and x(t + Δt), minus c
    with np.errstate(invalid="ignore", divide="ignore"):
        if stationary:
            m = s1 / n
            rho = (cross / N + c * (ma + mb - 2 * m) - m * m) / (s2 / n - m * m)
        else:
            va = (s2 - tail2) / N - ma * ma
            vb = (s2 - head2) / N - mb * mb
            rho = np.where((va > 0) & (vb > 0), (cross / N - ma * mb) / np.sqrt(va * vb), np.nan)
    rho[0] = 1.0
    return rho
