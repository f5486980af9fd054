"""Detrended fluctuation analysis (DFA) and multifractal DFA (MF-DFA) of one series or a
batch of them on the device, with jackknife error bars; see docs/timeseries.md, "DFA and
MF-DFA".

Plan (here: the checks, the scales, the moments q), run (_dfa_device: the profile and the
segments' fits on the device, reduced to sums per scale, q and jackknife group), finish
(_dfa_finish: F_q(s), the fits and the spectrum, in NumPy).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from .. import _validate
from ..progress import check_progress
from ..runtime import Device, resolve_device, workspace
from . import _common, _dfa_finish, _ingest
from ._dfa_device import DFAPlan

__all__ = ["dfa", "mfdfa", "DFAResult", "MFDFAResult", "default_scales", "ZeroVarianceWarning",
           "DEFAULT_Q"]

DEFAULT_Q = tuple(float(q) for q in np.linspace(-5.0, 5.0, 21))
MIN_SCALE = 10            # the default scales run from here to N / 4, one per octave
MAX_Q = 50.0
SEGMENTS = ("forward", "both")


class ZeroVarianceWarning(RuntimeWarning):
    """Segments whose detrended profile is flat were left out of the moments q <= 0."""


@dataclass(frozen=True, eq=False)
class DFAResult:
    """What :func:`dfa` returns; a batch adds a leading series axis.

    Attributes
    ----------
    scales : numpy.ndarray
        The segment lengths s.
    F, F_err : numpy.ndarray
        F(s) and its jackknife error ((n_scales,), or (n_series, n_scales)).
    H, H_err : float or numpy.ndarray
        The least-squares slope of ln F against ln s over `fit_range` (inclusive), and
        its jackknife error.
    fit_range, order, segments, integrate
        The options used (`segments`: "forward", "both" or "sliding").
    zero_segments, segment_counts : numpy.ndarray
        Per scale: segments with a flat detrended profile, and all segments.
    labels : tuple or None
        The pandas column names (a Series: its name), else None.
    """
    scales: np.ndarray
    F: np.ndarray
    F_err: np.ndarray
    H: np.ndarray | float
    H_err: np.ndarray | float
    fit_range: tuple
    order: int
    segments: str
    integrate: bool
    zero_segments: np.ndarray
    segment_counts: np.ndarray
    labels: tuple | None = None


@dataclass(frozen=True, eq=False)
class MFDFAResult:
    """What :func:`mfdfa` returns; a batch adds a leading series axis.

    Attributes
    ----------
    scales, q : numpy.ndarray
        The segment lengths and the moments.
    Fq, Fq_err : numpy.ndarray
        F_q(s), (n_q, n_scales), and its jackknife error.
    h, tau, alpha, f_alpha : numpy.ndarray
        The generalised Hurst exponents h(q), the mass exponents τ(q) = q h(q) - 1, the
        singularity strengths α = dτ/dq and the spectrum f(α) = q α - τ; each with its
        jackknife error (`h_err`, `tau_err`, `alpha_err`, `f_alpha_err`).
    fit_range, order, segments, integrate, zero_segments, segment_counts, labels
        As in :class:`DFAResult`.
    """
    scales: np.ndarray
    q: np.ndarray
    Fq: np.ndarray
    Fq_err: np.ndarray
    h: np.ndarray
    h_err: np.ndarray
    tau: np.ndarray
    tau_err: np.ndarray
    alpha: np.ndarray
    alpha_err: np.ndarray
    f_alpha: np.ndarray
    f_alpha_err: np.ndarray
    fit_range: tuple
    order: int
    segments: str
    integrate: bool
    zero_segments: np.ndarray
    segment_counts: np.ndarray
    labels: tuple | None = None


def default_scales(n: int) -> np.ndarray:
    """One scale per octave from 10 to n / 4: round(10 2^k) <= n / 4 (n >= 80)."""
    top = n // 4
    if top < 2 * MIN_SCALE:
        raise ValueError(f"the default scales (10 .. N/4, one per octave) need series of at "
                         f"least {8 * MIN_SCALE} points, got {n}; pass scales=")
    k = np.arange(int(math.floor(math.log2(top / MIN_SCALE))) + 1)
    return np.unique(np.round(MIN_SCALE * 2.0 ** k).astype(np.int64))


def _scales(scales, shortest: int, order: int) -> np.ndarray:
    if scales is None:
        return default_scales(shortest)
    try:
        arr = np.asarray(scales)
    except (TypeError, ValueError):
        raise TypeError(f"scales must be a 1-D array of integers, got {scales!r}") from None
    if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and np.all(arr == np.round(arr))):
        raise TypeError(f"scales must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError(f"scales must be a 1-D array of at least two scales (for the fit), "
                         f"got shape {arr.shape}")
    if np.any(np.diff(arr) <= 0):
        raise ValueError(f"scales must be strictly increasing, got {arr.tolist()}")
    if arr[0] < order + 2:
        raise ValueError(f"scales must be >= order + 2 = {order + 2} (a polynomial of order "
                         f"{order} fits fewer points exactly), got {int(arr[0])}")
    if arr[-1] > shortest:
        raise ValueError(f"scales must be at most the length of the shortest series, "
                         f"{shortest}, got {int(arr[-1])}")
    return arr


def _qs(q) -> np.ndarray:
    try:
        arr = np.atleast_1d(np.asarray(q, dtype=np.float64))
    except (TypeError, ValueError):
        raise TypeError(f"q must be a real number or a 1-D array of them, got {q!r}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"q must be a number or a non-empty 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(np.abs(arr) > MAX_Q):
        raise ValueError(f"q must be finite and within [-{MAX_Q:g}, {MAX_Q:g}], got {arr.tolist()}")
    if np.any(np.diff(arr) <= 0):
        raise ValueError(f"q must be strictly increasing (alpha = dtau/dq is taken along it), "
                         f"got {arr.tolist()}")
    return arr


def _mode(segments, overlap: bool) -> str:
    if overlap:
        if segments is not None:
            raise ValueError(f"segments={segments!r} applies to non-overlapping segments; "
                             "overlap=True uses every start (leave segments out)")
        return "sliding"
    return _validate.choice("segments", "forward" if segments is None else segments, SEGMENTS)


def _fit_mask(scales: np.ndarray, fit_range) -> np.ndarray:
    if fit_range is None:
        return np.ones(scales.size, bool)
    try:
        lo, hi = (float(v) for v in fit_range)
    except (TypeError, ValueError):
        raise TypeError(f"fit_range must be a pair (smallest, largest scale), got "
                        f"{fit_range!r}") from None
    mask = (scales >= lo) & (scales <= hi)
    if mask.sum() < 2:
        raise ValueError(f"fit_range {fit_range!r} holds {int(mask.sum())} of the scales "
                         f"{scales.tolist()}; the fit needs at least two")
    return mask


@dataclass(frozen=True, eq=False)
class FluctuationPlan:
    """What is decided before the device for one dfa() or mfdfa() call: the checked
    inputs, the device and the accumulator ("double" or "compensated"; tests force the
    float32 path on fp64 devices with plan_dfa(..., accumulate="compensated"));
    run_plan() runs it."""
    entry: str
    device: Device
    batch: _ingest.Batch
    labels: tuple | None
    qs: np.ndarray
    scales: np.ndarray
    fit: np.ndarray
    order: int
    mode: str
    integrate: bool
    progress: object
    accumulate: str


def _plan(entry, x, qs, scales, order, overlap, integrate, segments, fit_range, device,
          progress, nan, spacing, accumulate) -> FluctuationPlan:
    """The checks and choices shared by dfa() and mfdfa()."""
    order = _validate.integer("order", order, 0, 4)
    overlap, integrate = _validate.boolean("overlap", overlap), _validate.boolean("integrate", integrate)
    mode = _mode(segments, overlap)
    check_progress(progress)
    values, labels = _common.labelled(x, "x", nan, spacing)
    b = _ingest.batch("x", values, order + 2, f"order + 2 with order = {order}")
    scales = _scales(scales, int(b.lengths.min()), order)
    fit = _fit_mask(scales, fit_range)
    dev = resolve_device(device)
    acc = _common.accumulator(dev, accumulate)
    return FluctuationPlan(entry, dev, b, labels, qs, scales, fit, order, mode, integrate,
                           progress, acc)


def _execute(plan: FluctuationPlan) -> dict:
    """The device run and the finish shared by dfa() and mfdfa()."""
    b, qs, scales, fit, dev = plan.batch, plan.qs, plan.scales, plan.fit, plan.device
    Fq, groups, zeros, counts = _by_parts(dev, b, scales, plan.order, plan.mode, qs,
                                          plan.integrate, plan.accumulate, plan.progress,
                                          plan.entry)
    workspace.trim_pool(dev)
    if np.any(qs <= 0) and zeros.sum():
        warnings.warn(f"{int(zeros.sum())} of {int(counts.sum())} segments have zero variance "
                      "(a flat stretch of the profile) and are left out of the moments q <= 0 "
                      "(zero_segments counts them per scale)", ZeroVarianceWarning, stacklevel=4)
    bad = ~(np.isfinite(Fq) & (Fq > 0))[..., fit]
    if bad.any():
        e, iq, j = np.argwhere(bad)[0]
        warnings.warn(f"F_q(s) is {Fq[e, iq][fit][j]} for {b.label(int(e))}, q = {qs[iq]:g}, "
                      f"s = {int(scales[fit][j])} (no segment counts there): the exponents of "
                      "that q are NaN; choose fit_range without that scale", RuntimeWarning,
                      stacklevel=4)
    F_err = _dfa_finish.fluctuation_errors(Fq, groups)
    exps = _dfa_finish.exponents(scales, qs, Fq, groups, fit)
    used = scales[fit]
    return dict(b=b, scales=scales, Fq=Fq, Fq_err=F_err, exps=exps, labels=plan.labels,
                fit_range=(int(used[0]), int(used[-1])), order=plan.order,
                segments=plan.mode, integrate=plan.integrate, zeros=zeros, counts=counts)


def _by_parts(dev, b, scales, order, mode, qs, integrate, accumulate, progress, what):
    """The device run over the batch, in groups of series that fit the device."""
    plan = DFAPlan(dev, b, scales, order, mode, qs, integrate, accumulate, what)
    if len(b) == 1 or plan.fits():
        plan.check_memory()
        out = _dfa_finish.fluctuations(qs, *plan.run_all(progress, label=what))
        return out
    half = len(b) // 2
    parts = [_by_parts(dev, b.subset(r), scales, order, mode, qs, integrate, accumulate,
                       progress, what) for r in (range(half), range(half, len(b)))]
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(4))


def dfa(x, scales=None, order: int = 1, overlap: bool = False, integrate: bool = True, *,
        segments: str | None = None, fit_range=None, device=None, progress=None,
        nan: str = "raise", spacing: str = "raise") -> DFAResult:
    """Detrended fluctuation analysis: the fluctuation function F(s) and its exponent H.

    Fractional Gaussian noise of exponent H gives F ~ s^H (docs/timeseries.md, "DFA and MF-DFA").

    Parameters
    ----------
    x : array-like, list of array-likes, pandas Series or DataFrame
        One series, a batch (2-D, one per row; a DataFrame: its columns) or a list.
    scales, order : array of int, int
        Segment lengths s, increasing, >= order + 2 (default: octaves from 10 to N/4);
        the degree 0 .. 4 of the polynomial fitted in each segment.
    overlap : bool
        Every start (sliding windows) instead of segments.
    integrate : bool
        True: x are increments (e.g. returns); False: x is the profile (e.g. log prices).
    segments, fit_range, device, progress, nan, spacing
        "forward" (default) or "both" (from both ends, Kantelhardt's); the scales fitted
        for H (inclusive; default all); the rest as for :func:`hurst`.

    Returns
    -------
    DFAResult
        scales, F, F_err, H, H_err (jackknife: 16 groups of segments), fit_range, counts.

    Raises
    ------
    ValueError, TypeError
        Bad input, before any device work (a NaN or inf after the upload, with its index).

    Examples
    --------
    >>> r = dfa(np.random.default_rng(1).standard_normal(2**14))   # doctest: +SKIP
    >>> r.H, r.H_err                                               # about 0.5 +- 0.02
    """
    return run_plan(plan_dfa(x, scales, order, overlap, integrate, segments=segments,
                             fit_range=fit_range, device=device, progress=progress, nan=nan,
                             spacing=spacing))


def plan_dfa(x, scales=None, order=1, overlap=False, integrate=True, *, segments=None,
             fit_range=None, device=None, progress=None, nan="raise", spacing="raise",
             accumulate=None) -> FluctuationPlan:
    """The plan of dfa(x, ...) (`accumulate`: forced, None: by the device)."""
    return _plan("dfa", x, np.array([2.0]), scales, order, overlap, integrate, segments,
                 fit_range, device, progress, nan, spacing, accumulate)


def plan_mfdfa(x, q=DEFAULT_Q, scales=None, order=2, *, overlap=False, integrate=True,
               segments=None, fit_range=None, device=None, progress=None, nan="raise",
               spacing="raise", accumulate=None) -> FluctuationPlan:
    """The plan of mfdfa(x, ...) (`accumulate`: forced, None: by the device)."""
    return _plan("mfdfa", x, _qs(q), scales, order, overlap, integrate, segments, fit_range,
                 device, progress, nan, spacing, accumulate)


def run_plan(plan: FluctuationPlan):
    """The DFAResult or MFDFAResult of the call that `plan` describes."""
    out = _execute(plan)
    if plan.entry == "mfdfa":
        return _mfdfa_result(plan.qs, out)
    single = out["b"].single
    pick = (lambda a: a[0]) if single else (lambda a: a)
    h, h_err = out["exps"]["h"]
    return DFAResult(scales=out["scales"], F=pick(out["Fq"][:, 0]), F_err=pick(out["Fq_err"][:, 0]),
                     H=float(h[0, 0]) if single else h[:, 0],
                     H_err=float(h_err[0, 0]) if single else h_err[:, 0],
                     fit_range=out["fit_range"], order=out["order"], segments=out["segments"],
                     integrate=out["integrate"], zero_segments=pick(out["zeros"]),
                     segment_counts=pick(out["counts"]), labels=out["labels"])


def mfdfa(x, q=DEFAULT_Q, scales=None, order: int = 2, *, overlap: bool = False,
          integrate: bool = True, segments: str | None = None, fit_range=None, device=None,
          progress=None, nan: str = "raise", spacing: str = "raise") -> MFDFAResult:
    """Multifractal DFA (Kantelhardt et al., Physica A 316, 87 (2002)).

    F_q(s) = <F^2(v)^(q/2)>^(1/q) over the segments v (q = 0: exp(<ln F^2(v)> / 2)); h(q)
    is the slope of ln F_q against ln s, alpha = dtau/dq along q.  Flat segments are left
    out of the moments q <= 0, with a ZeroVarianceWarning.

    Parameters
    ----------
    x, scales, overlap, integrate, segments, fit_range, device, progress, nan, spacing
        As for :func:`dfa`.
    q : float or array of float
        The moments, strictly increasing, |q| <= 50; default -5 .. 5 in steps of 1/2.
    order : int
        Detrending order 0 .. 4 (default 2).

    Returns
    -------
    MFDFAResult
        Fq (n_q x n_scales), h, tau, alpha, f_alpha, each with its jackknife error;
        zero_segments: the flat segments per scale.

    Raises
    ------
    ValueError, TypeError
        Bad input, before any device work.

    Examples
    --------
    >>> m = mfdfa(np.random.default_rng(1).standard_normal(2**14))   # doctest: +SKIP
    >>> m.h                                                          # about 0.5 for every q
    """
    return run_plan(plan_mfdfa(x, q, scales, order, overlap=overlap, integrate=integrate,
                               segments=segments, fit_range=fit_range, device=device,
                               progress=progress, nan=nan, spacing=spacing))


def _mfdfa_result(qs, out) -> MFDFAResult:
    pick = (lambda a: a[0]) if out["b"].single else (lambda a: a)
    ex = out["exps"]
    return MFDFAResult(scales=out["scales"], q=qs, Fq=pick(out["Fq"]), Fq_err=pick(out["Fq_err"]),
                       h=pick(ex["h"][0]), h_err=pick(ex["h"][1]), tau=pick(ex["tau"][0]),
                       tau_err=pick(ex["tau"][1]), alpha=pick(ex["alpha"][0]),
                       alpha_err=pick(ex["alpha"][1]), f_alpha=pick(ex["f"][0]),
                       f_alpha_err=pick(ex["f"][1]), fit_range=out["fit_range"],
                       order=out["order"], segments=out["segments"], integrate=out["integrate"],
                       zero_segments=pick(out["zeros"]), segment_counts=pick(out["counts"]),
                       labels=out["labels"])
