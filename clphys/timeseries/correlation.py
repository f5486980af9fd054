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
import warnings
from dataclasses import dataclass

import numpy as np

from .. import _validate
from ..progress import check_progress
from ..runtime import Device, resolve_device, staging, workspace
from . import _common, _ingest
from ._fft_path import fft_run, hurst_fft
from ._pair_finish import acf_direct, hurst_direct
from ._pair_plan import (
    PairShape,
    Timeline,
    check_errors,
    check_max_lag,
    check_method,
    check_qs,
    check_stream,
    check_transfer,
    pair_kind,
    use_fft,
)
from ._pair_sums import by_tile_size, join_parts, sub_batches

__all__ = ["HurstResult", "AutocorrelationResult", "LongMemoryWarning", "hurst",
           "autocorrelation"]


class LongMemoryWarning(RuntimeWarning):
    """hurst(): a series so persistent (H >= 3/4) that its jackknife errors are too small."""


@dataclass(frozen=True, eq=False)
class HurstResult:
    """What :func:`hurst` returns.

    Attributes
    ----------
    S, S_err : numpy.ndarray
        S_q(Δt) at lags 1 .. max_lag and its jackknife error: shape (max_lag,) for one
        series and one q; a list of q adds a q axis, a batch a leading series axis
        ((n_series, n_q, max_lag)).  Errors are NaN with fewer than two blocks.
    H, H_err : numpy.ndarray
        The local exponent and its error, same shape; H[..., 0] (Δt = 1) is NaN, as is H
        where S is 0 at Δt or Δt - 1.
    q : float or numpy.ndarray
        The order(s).
    method : str
        "direct" (pair sums) or "fft".
    long_memory : bool or numpy.ndarray
        True where H >= 3/4 at the largest lags: S_err and H_err understate the errors
        (LongMemoryWarning; docs/timeseries.md, "Error bars").
    labels : tuple or None
        The pandas column names (a Series: its name), else None.
    lags : numpy.ndarray
        1 .. max_lag, made on first use.
    """
    S: np.ndarray
    H: np.ndarray
    q: float | np.ndarray
    S_err: np.ndarray | None = None
    H_err: np.ndarray | None = None
    method: str = "direct"
    long_memory: np.ndarray | bool = False
    labels: tuple | None = None

    @functools.cached_property
    def lags(self) -> np.ndarray:
        return np.arange(1, self.S.shape[-1] + 1)


@dataclass(frozen=True, eq=False)
class AutocorrelationResult:
    """What :func:`autocorrelation` returns.

    Attributes
    ----------
    rho, rho_err : numpy.ndarray
        ρ(Δt) at lags 0 .. max_lag (ρ(0) = 1, its error 0) and its error: shape
        (max_lag + 1,) for one series, (n_series, max_lag + 1) for a batch.
    stationary : bool
        Which form.
    method : str
        "direct" (pair sums) or "fft".
    labels : tuple or None
        The pandas column names (a Series: its name), else None.
    lags : numpy.ndarray
        0 .. max_lag, made on first use.
    """
    rho: np.ndarray
    stationary: bool
    rho_err: np.ndarray | None = None
    method: str = "direct"
    labels: tuple | None = None

    @functools.cached_property
    def lags(self) -> np.ndarray:
        return np.arange(self.rho.shape[-1])


@dataclass(frozen=True, eq=False)
class CorrelationPlan:
    """What is decided before the device for one hurst() or autocorrelation() call: the
    checked inputs, the device, the path (`fft`) and the internal choices that tests and
    the benchmark may force (plan_hurst(..., accumulate="compensated")); run_plan() runs
    it.  accumulate: "double" or "compensated" (float32 pairs); pair_shape: pairs.cl's
    code shape (None: default_pair_shape() for each group of equal tiles); layout: hurst's
    converted values, "blocked" or "float2" (None: by q); transfer: the upload path
    (None: by device and size); stream: whether the pair sums run on each upload segment
    as it arrives (None: for short jobs, True: wherever possible, False: never)."""
    entry: str
    device: Device
    batch: _ingest.Batch
    max_lag: int
    progress: object
    errors: bool
    fft: bool
    accumulate: str
    qs: tuple = (1.0,)
    q_list: bool = False
    stationary: bool = False
    pair_shape: PairShape | None = None
    layout: str | None = None
    transfer: staging.Transfer | None = None
    stream: bool | None = None
    labels: tuple | None = None




def hurst(p, max_lag: int = 256, q=1.0, device=None, progress=None, *, method: str = "auto",
          errors: bool = True, nan: str = "raise", spacing: str = "raise") -> HurstResult:
    """Hurst exponent of p(t) from its q-th order structure function.

    S_q(Δt) = ⟨|p(t + Δt) - p(t)|^q⟩^(1/q) over the T - Δt pairs, Δt = 1 .. max_lag, and
    H(Δt) = Δ log S / Δ log Δt (a random walk: H = 1/2; p(t) = t: 1; docs/timeseries.md).

    Parameters
    ----------
    p : array-like, list of array-likes, pandas Series or DataFrame
        One series (1-D), a batch (2-D, one per row; a DataFrame: its columns) or a list
        of series of any lengths; finite, each with at least max_lag + 1 points.
    max_lag, q : int, float or list of float
        The largest lag Δt; the order(s) q in [0.01, 1000], all in one pass.
    device, progress, method, errors, nan, spacing
        The device (None: the default); progress None, True, False or f(done, total);
        method "direct" (pair sums), "fft" (S_2, fp64) or "auto" (the cheaper); errors:
        jackknife errors over 16 blocks (False: None); pandas input: nan "raise" or
        "drop" NaN, spacing "raise" or "ignore" an uneven index.

    Returns
    -------
    HurstResult
        S, H (H[..., 0] is NaN), their errors, long_memory and labels.

    Raises
    ------
    ValueError, TypeError
        Bad input, before any device work (a NaN or inf: after the upload, by index).

    Examples
    --------
    >>> hurst(np.cumsum(np.random.default_rng(1).standard_normal(10**4)), 64).H[1:].mean()
    0.5...
    """
    return run_plan(plan_hurst(p, max_lag, q, device, progress, method=method,
                               errors=errors, nan=nan, spacing=spacing))[0]


def plan_hurst(p, max_lag=256, q=1.0, device=None, progress=None, *, method="auto",
               errors=True, nan="raise", spacing="raise", accumulate=None, pair_shape=None,
               layout=None, transfer=None, stream=None) -> CorrelationPlan:
    """The plan of hurst(p, ...): its arguments checked, the device chosen, the path
    decided.  The keyword arguments after `errors` force an internal choice (None: the
    default); tests and benchmarks/bench_timeseries.py use them, see CorrelationPlan."""
    max_lag = check_max_lag(max_lag)
    qs, q_list = check_qs(q)
    values, labels = _common.labelled(p, "p", nan, spacing)
    b = _ingest.batch("p", values, max_lag + 1, f"max_lag + 1 with max_lag = {max_lag}")
    check_progress(progress)
    if layout is not None:
        _validate.choice("layout", layout, ("blocked", "float2"))
    method = check_method(method)
    errors = check_errors(errors)
    if method == "fft" and set(qs) != {2.0}:
        raise ValueError(f"method='fft' gives S_2 only (q = 2), got q = {q!r}")
    transfer = check_transfer(transfer)
    stream = check_stream(stream)
    dev = resolve_device(device)
    acc = _common.accumulator(dev, accumulate)
    fft = set(qs) == {2.0} and use_fft(dev, b.lengths, max_lag, method, acc,
                                        needs_fp64=True, errors=errors)
    return CorrelationPlan("hurst", dev, b, max_lag, progress, errors, fft, acc, qs=qs,
                           q_list=q_list, pair_shape=pair_shape, layout=layout,
                           transfer=transfer, stream=stream, labels=labels)


def run_plan(plan: CorrelationPlan):
    """(result, Timeline) of the call that `plan` describes."""
    timeline = Timeline()
    if plan.entry == "hurst":
        return _run_hurst(plan, timeline), timeline
    return _run_autocorrelation(plan, timeline), timeline


def _run_hurst(plan, timeline) -> HurstResult:
    dev, b, max_lag, qs, progress = plan.device, plan.batch, plan.max_lag, plan.qs, plan.progress
    errors, fft, acc = plan.errors, plan.fft, plan.accumulate
    if fft:
        parts = sub_batches(dev, b, lambda sub: hurst_fft(
            dev, sub, max_lag, len(qs), acc, plan.transfer, progress, errors, timeline))
    else:
        parts = by_tile_size(dev, b, max_lag, plan.pair_shape, lambda sub: hurst_direct(
            dev, sub, max_lag, qs, acc, plan.pair_shape, plan.layout, plan.transfer, progress,
            plan.stream, timeline), kinds=[pair_kind(q) for q in qs])
    workspace.trim_pool(dev)
    S, S_err, H, H_err = (join_parts([part[i] for part in parts]) for i in range(4))
    persistent = _long_memory(S, S_err, b.lengths, qs) if errors else \
        np.zeros(S.shape[:2], bool)
    if persistent.any():
        _warn_long_memory(b, S, qs, persistent)
    # (n_series, n_q, max_lag) -> the caller's shape
    if not plan.q_list:
        S, S_err, H, H_err = (None if a is None else a[:, 0] for a in (S, S_err, H, H_err))
        persistent = persistent[:, 0]
    if b.single:
        S, S_err, H, H_err = (None if a is None else a[0] for a in (S, S_err, H, H_err))
        persistent = persistent[0]
    if not errors:
        S_err = H_err = None
    return HurstResult(S=S, H=H, q=np.array(qs) if plan.q_list else qs[0], S_err=S_err,
                       H_err=H_err, method="fft" if fft else "direct",
                       long_memory=persistent if np.ndim(persistent) else bool(persistent),
                       labels=plan.labels)


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
                  f"the spread over independent series", LongMemoryWarning, stacklevel=5)


def autocorrelation(x, max_lag: int = 256, stationary: bool = False, device=None,
                    progress=None, *, method: str = "auto", errors: bool = True,
                    nan: str = "raise", spacing: str = "raise") -> AutocorrelationResult:
    """Autocorrelation ρ(Δt), Δt = 0 .. max_lag, of x(t) (normally price changes).

    General form (default): the Pearson correlation of the T - Δt pairs (x(t), x(t + Δt)),
    each window with its own mean and deviation; stationary=True: the sample
    autocorrelation with the mean of the whole series (statsmodels' ``acf``).  Both are
    invariant under x → a + b x (b > 0).

    Parameters
    ----------
    x : array-like, list of array-likes, pandas Series or DataFrame
        As `p` of :func:`hurst`; finite and not constant.
    max_lag : int
        The largest lag.
    stationary : bool
        The form (above).
    device, progress, method, errors, nan, spacing
        As for :func:`hurst` ("fft": every lag at once).

    Returns
    -------
    AutocorrelationResult
        rho and rho_err ((..., max_lag + 1); ρ(0) = 1), stationary, method, labels.

    Raises
    ------
    ValueError, TypeError
        Bad input, before any device work (NaN, inf or a constant series: after upload).

    Examples
    --------
    >>> autocorrelation(np.random.default_rng(1).standard_normal(10**4), 20).rho[1]
    0.0...
    """
    return run_plan(plan_autocorrelation(x, max_lag, stationary, device, progress,
                                         method=method, errors=errors, nan=nan,
                                         spacing=spacing))[0]


def plan_autocorrelation(x, max_lag=256, stationary=False, device=None, progress=None, *,
                         method="auto", errors=True, nan="raise", spacing="raise",
                         accumulate=None, pair_shape=None, transfer=None,
                         stream=None) -> CorrelationPlan:
    """The plan of autocorrelation(x, ...), as plan_hurst()."""
    max_lag = check_max_lag(max_lag)
    values, labels = _common.labelled(x, "x", nan, spacing)
    b = _ingest.batch("x", values, max_lag + 1, f"max_lag + 1 with max_lag = {max_lag}")
    _validate.boolean("stationary", stationary)
    check_progress(progress)
    method = check_method(method)
    errors = check_errors(errors)
    transfer = check_transfer(transfer)
    stream = check_stream(stream)
    dev = resolve_device(device)
    acc = _common.accumulator(dev, accumulate)
    fft = use_fft(dev, b.lengths, max_lag, method, acc, errors=errors)
    return CorrelationPlan("autocorrelation", dev, b, max_lag, progress, errors, fft, acc,
                           stationary=bool(stationary), pair_shape=pair_shape,
                           transfer=transfer, stream=stream, labels=labels)


def _run_autocorrelation(plan, timeline) -> AutocorrelationResult:
    dev, b, max_lag, progress, acc = plan.device, plan.batch, plan.max_lag, plan.progress, \
        plan.accumulate
    if plan.fft:
        form = "stationary" if plan.stationary else "general"
        run = lambda sub: fft_run(dev, sub, max_lag, form, acc, plan.transfer,  # noqa: E731
                                   progress, "autocorrelation", plan.errors, timeline)
        parts = sub_batches(dev, b, run)
    else:
        run = lambda sub: acf_direct(dev, sub, max_lag, plan.stationary,  # noqa: E731
                                      acc, plan.pair_shape, plan.transfer, progress,
                                      plan.stream, timeline)
        parts = by_tile_size(dev, b, max_lag, plan.pair_shape, run)
    workspace.trim_pool(dev)
    rho, err = (join_parts([part[i] for part in parts]) for i in range(2))
    if b.single:
        rho, err = rho[0], (None if err is None else err[0])
    if not plan.errors:
        err = None
    return AutocorrelationResult(rho=rho, stationary=plan.stationary,
                                 rho_err=err, method="fft" if plan.fft else "direct",
                                 labels=plan.labels)
