"""Error analysis of correlated Monte Carlo time series (NumPy only).

    from clphys.stats import mean_error
    m, err = mean_error(samples)          # binning error of the mean
    print(mean_error(samples))            # e.g. 1.2345(67)

Conventions: series are 1-D in time order (or 2-D (n_series, n_samples) for
`jackknife`); where a series does not divide evenly into blocks, the
remainder is dropped at the START (the oldest, least equilibrated samples).

References: H. Flyvbjerg and H. G. Petersen, J. Chem. Phys. 91, 461 (1989)
(binning); B. Efron, The Jackknife, the Bootstrap and Other Resampling Plans
(1982); A. D. Sokal, Monte Carlo Methods in Statistical Mechanics (Cargese
lectures, 1996) and N. Madras, A. D. Sokal, J. Stat. Phys. 50, 109 (1988)
(automatic windowing, error of tau_int).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import _validate
from ._typing import ArrayLike

# smallest number of blocks whose error bar is trusted: the relative error of
# an error estimated from n blocks is ~1/sqrt(2(n-1)), 13% at 32
MIN_BLOCKS = 32


@dataclass(frozen=True)
class Estimate:
    """A value with its one-sigma error.  `v, e = est` unpacks it; str()
    gives the compact form 1.2345(67) (error to two significant digits)."""
    value: float
    error: float

    def __iter__(self):
        yield self.value
        yield self.error

    def __str__(self):
        v, e = self.value, self.error
        if not (math.isfinite(v) and math.isfinite(e)) or e <= 0:
            return f"{v:.6g} ± {e:.2g}"
        dec = max(0, 1 - math.floor(math.log10(e)))
        digits = round(e * 10 ** dec)
        if digits >= 100 and dec > 0:       # e.g. 0.0996 -> (10) not (100)
            dec -= 1
            digits = round(e * 10 ** dec)
        return f"{v:.{dec}f}({digits})"


def _series(name, x, min_len=2):
    x = _validate.finite_array(name, x, ndim=1, dtype=float)
    if x.size < min_len:
        raise ValueError(f"{name} must have at least {min_len} samples, got {x.size}")
    return x


def binning(x: ArrayLike, n_bins: int) -> np.ndarray:
    """Means of n_bins equal consecutive bins of the 1-D series x.  The
    len(x) % n_bins leftover samples are dropped at the start.  Raises if
    len(x) < n_bins."""
    n_bins = _validate.integer("n_bins", n_bins, minimum=1)
    x = _series("x", x, min_len=1)
    if x.size < n_bins:
        raise ValueError(f"x has {x.size} samples, fewer than n_bins = {n_bins}")
    size = x.size // n_bins
    return x[x.size - size * n_bins:].reshape(n_bins, size).mean(axis=1)


def binning_levels(x: ArrayLike, min_blocks: int = MIN_BLOCKS) -> np.ndarray:
    """Naive standard errors of the mean at successive pair-averaging levels
    0, 1, 2, ... (block sizes 1, 2, 4, ...), as long as at least min_blocks
    blocks remain; an odd leftover sample is dropped at the start.  For
    correlated data the values rise and level off at the true error once the
    block size exceeds a few tau_int."""
    x = _series("x", x)
    min_blocks = _validate.integer("min_blocks", min_blocks, minimum=2)
    errs = []
    b = x
    while True:
        errs.append(math.sqrt(b.var(ddof=1) / b.size))
        if b.size // 2 < min_blocks:
            break
        b = b[b.size % 2:]
        b = 0.5 * (b[0::2] + b[1::2])
    return np.array(errs)


def binned_error(x: ArrayLike, max_levels: int | None = None) -> float:
    """Binning-analysis (Flyvbjerg-Petersen) error of the mean of a
    correlated 1-D series: the naive standard error of block means at the
    deepest pair-averaging level that still has >= MIN_BLOCKS = 32 blocks
    (block size 2^level), or at level max_levels if that is smaller.  This
    is reliable when len(x) >~ 32 * 2 * (a few tau_int); inspect
    `binning_levels` to see the plateau.  Series shorter than 64 samples get
    the naive (level-0) error."""
    x = _series("x", x)
    if max_levels is not None:
        max_levels = _validate.integer("max_levels", max_levels, minimum=0)
    levels = binning_levels(x)
    last = len(levels) - 1 if max_levels is None else min(max_levels, len(levels) - 1)
    return float(levels[last])


def jackknife(x: ArrayLike, func: Callable = np.mean, n_blocks: int = 32,
              bias_correct: bool = False) -> Estimate:
    """Block jackknife estimate of func(<x>) and its error.

    x: 1-D series, or 2-D array (n_series, n_samples) of simultaneous
    series.  The samples are cut into n_blocks consecutive blocks (leftover
    dropped at the start).  func receives the mean of the series with one
    block deleted: a float for 1-D x, a length-n_series array for 2-D x
    (e.g. func=lambda m: m[1] - m[0]**2 for a variance from rows (x, x^2));
    it must return a scalar.  The error is
    sqrt((n-1)/n sum_i (f_i - f_mean)^2) over the n block-deleted values f_i.
    The value is func(full mean) (not bias corrected) unless bias_correct,
    then n func(mean) - (n-1) f_mean, which removes the O(1/N) bias.
    """
    data = _validate.finite_array("x", x, dtype=float)
    if data.ndim not in (1, 2):
        raise ValueError(f"x must be 1-D or 2-D (n_series, n_samples), got shape {data.shape}")
    if not callable(func):
        raise ValueError(f"func must be callable, got {func!r}")
    n_blocks = _validate.integer("n_blocks", n_blocks, minimum=2)
    rows = np.atleast_2d(data)
    n = rows.shape[1]
    if n < n_blocks:
        raise ValueError(f"x has {n} samples per series, fewer than n_blocks = {n_blocks}")
    size = n // n_blocks
    blocks = rows[:, n - size * n_blocks:].reshape(rows.shape[0], n_blocks, size).mean(axis=2)
    total = blocks.sum(axis=1)
    deleted = (total[:, None] - blocks) / (n_blocks - 1)      # (n_series, n_blocks)
    shape = (lambda m: float(m[0])) if data.ndim == 1 else (lambda m: m)

    def call(m):
        val = np.asarray(func(shape(m)), dtype=float)
        if val.ndim != 0:
            raise ValueError(f"func must return a scalar, got shape {val.shape}")
        return float(val)

    full = call(total / n_blocks)
    f_i = np.array([call(deleted[:, i]) for i in range(n_blocks)])
    err = math.sqrt((n_blocks - 1) / n_blocks * np.sum((f_i - f_i.mean()) ** 2))
    value = n_blocks * full - (n_blocks - 1) * f_i.mean() if bias_correct else full
    return Estimate(value, err)


def jackknife_blocks(blocks: ArrayLike, func: Callable, vectorized: bool = False
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Jackknife over independent blocks of any shape, for array-valued estimators.

    blocks: array (n_blocks, ...) of per-block data (e.g. one histogram per
    group of independent walkers); func maps the mean over a set of blocks
    (shape blocks.shape[1:]) to an array of estimates. Returns (value, error)
    arrays: func of the mean over all blocks, and
    sqrt((n-1)/n sum_i (f_i - mean f)^2) over the leave-one-out values f_i.
    Entries where some f_i is not finite get error inf. vectorized: func
    takes a stack of means (n + 1, ...) at once (the full mean first) and
    returns the stacked estimates.
    """
    data = np.asarray(blocks)
    if data.dtype.kind not in "biuf":
        raise TypeError(f"blocks must be real numbers, got dtype {data.dtype}")
    if data.ndim < 1 or data.shape[0] < 2:
        raise ValueError(f"blocks must have at least 2 blocks along axis 0, got shape {data.shape}")
    if not callable(func):
        raise ValueError(f"func must be callable, got {func!r}")
    data = data.astype(np.float64)
    n = data.shape[0]
    total = data.sum(axis=0)
    if vectorized:
        out = np.asarray(func(np.concatenate([(total / n)[None], (total - data) / (n - 1)])), dtype=float)
        value, f = out[0], out[1:]
    else:
        value = np.asarray(func(total / n), dtype=float)
        f = np.stack([np.asarray(func((total - data[i]) / (n - 1)), dtype=float) for i in range(n)])
    with np.errstate(invalid="ignore"):
        err = np.sqrt((n - 1) / n * np.sum((f - f.mean(axis=0)) ** 2, axis=0))
    err = np.where(np.all(np.isfinite(f), axis=0), err, np.inf)
    return value, err


def autocorrelation(x: ArrayLike) -> np.ndarray:
    """Normalised autocorrelation rho(t), t = 0..len(x)-1, of a 1-D series,
    via FFT (zero padded, so not circular):
    rho(t) = C(t)/C(0), C(t) = 1/(N-t) sum_i (x_i - m)(x_{i+t} - m)."""
    x = _series("x", x)
    n = x.size
    d = x - x.mean()
    if not np.any(d):
        raise ValueError("x is constant: its autocorrelation is undefined")
    nfft = 1 << (2 * n - 1).bit_length()
    F = np.fft.rfft(d, nfft)
    c = np.fft.irfft(F * np.conj(F), nfft)[:n] / np.arange(n, 0, -1)
    return c / c[0]


def _window(rho, n, c):
    """(tau_int, W, found): Sokal's automatic window on the normalised
    autocorrelation rho, the smallest W < n/2 with W >= c tau_int(W); when
    there is none, W = n/2 - 1 and found is False."""
    tau = 0.5 + np.cumsum(rho[1:max(2, n // 2)])          # tau[W-1] = tau_int(W)
    W = np.arange(1, tau.size + 1)
    with np.errstate(over="ignore"):
        ok = np.nonzero(W >= c * tau)[0]
    i = ok[0] if ok.size else tau.size - 1
    return float(tau[i]), int(W[i]), bool(ok.size)


def integrated_autocorrelation_time(x: ArrayLike, c: float = 5.0) -> Estimate:
    """tau_int = 1/2 + sum_{t=1}^{W} rho(t) with Sokal's automatic window:
    the smallest W with W >= c tau_int(W) (c = 5 to 10; 5 is fine for
    near-exponential decay).  Error from Madras & Sokal,
    sqrt(2(2W+1)/N) tau_int.  With this convention the variance of the mean
    is 2 tau_int Var(x)/N (tau_int = 1/2 for independent samples).  If no
    such W < N/2 exists (series too short), warns and uses W = N/2 - 1."""
    x = _series("x", x, min_len=4)
    c = _validate.real("c", c, minimum=0.0, strict_min=True)
    n = x.size
    t, w, found = _window(autocorrelation(x), n, c)
    if not found:
        warnings.warn(f"integrated_autocorrelation_time: no window W < N/2 with W >= {c} tau; "
                      f"series too short (N = {n}), result unreliable", RuntimeWarning, stacklevel=2)
    return Estimate(t, math.sqrt(2.0 * (2 * w + 1) / n) * abs(t))


def mean_error(x: ArrayLike, method: str = "binning") -> Estimate:
    """Mean of a (correlated) 1-D series with its error: method="binning"
    uses `binned_error`, method="tau" uses sqrt(2 tau_int Var(x)/N).  A
    constant series has error 0."""
    method = _validate.choice("method", method, ("binning", "tau"))
    x = _series("x", x)
    if method == "binning" or not np.any(x - x.mean()):
        return Estimate(float(x.mean()), binned_error(x))
    tau = integrated_autocorrelation_time(x).value
    return Estimate(float(x.mean()), math.sqrt(2.0 * tau * x.var(ddof=1) / x.size))


# A series shorter than MIN_TAUS integrated autocorrelation times gives error
# bars that cannot be trusted: tau_int itself is then uncertain by ~40 % and
# biased low. Below MIN_SAMPLES no error is estimated at all.
MIN_TAUS = 50
MIN_SAMPLES = 16


class TooShortWarning(RuntimeWarning):
    """A series too short, in units of its integrated autocorrelation time,
    for its error bar to be trusted."""


@dataclass(frozen=True)
class SeriesEstimate(Estimate):
    """An :class:`Estimate` from one correlated series, with what its error
    rests on: `tau_int` of the (linearised) series in samples (NaN when it
    could not be estimated) and the number of samples `n`. `outlier`: the
    estimate disagrees with independent estimates of the same quantity
    (other runs of the same chain) by more than their errors allow, so its
    series missed a slow mode. `too_short`: the series is shorter than
    MIN_TAUS tau_int (or tau_int is unknown), or is an outlier, so the error
    bar is not to be trusted."""
    tau_int: float = math.nan
    n: int = 0
    outlier: bool = False

    @property
    def too_short(self) -> bool:
        return bool(self.outlier) or not self.n >= MIN_TAUS * self.tau_int


def _gradient(func, means, scale):
    """Central-difference gradient of func at means (step: 1e-6 of each row's scale)."""
    grad = np.empty(means.size)
    for a in range(means.size):
        h = 1e-6 * scale[a]
        up, down = means.copy(), means.copy()
        up[a] += h
        down[a] -= h
        grad[a] = (float(func(up)) - float(func(down))) / (2 * h)
    return grad


def series_estimate(x: ArrayLike, func: Callable | None = None, c: float = 5.0,
                    window: int | None = None) -> SeriesEstimate:
    """func(<x>) and its error from ONE correlated series, with the
    autocorrelation of the data taken into account (U. Wolff, Comput. Phys.
    Commun. 156, 143 (2004), "Monte Carlo errors with less errors").

    x: 1-D series, or 2-D (k, n) rows of simultaneous series; func gets the
    k row means (a float for 1-D x) and returns a scalar; default: the mean.
    The series is linearised, F_t = sum_a df/dx_a (x_a,t - <x_a>), its
    tau_int found with Sokal's window (c tau_int) and corrected for the bias
    of the subtracted mean (Wolff's (1 + (2W+1)/N)); the error is
    sqrt(2 tau_int Var(F) / N), with tau_int >= 1/2 (anti-correlation is
    not credited). The result says whether the series is long
    enough (`too_short`, MIN_TAUS = 50 tau_int); fewer than MIN_SAMPLES
    samples give an error of NaN. A constant series has error 0.

    window: sum the autocorrelation up to this lag instead of Sokal's
    window. Use it when a slower mode of the same Markov chain is known
    (e.g. c times the tau_int of the slowest observable): a quantity like
    a variance can couple weakly to a slow mode, and its own automatic
    window then misses the tail (measured: C/N of the 2D Ising model near
    Tc, errors 0.72 of the true scatter with its own window, 0.9-1.0 with
    the magnetization's).
    """
    data = _validate.finite_array("x", x, dtype=float)
    if data.ndim not in (1, 2):
        raise ValueError(f"x must be 1-D or 2-D (k, n_samples), got shape {data.shape}")
    if func is None and data.ndim == 2 and data.shape[0] != 1:
        raise ValueError("func is needed for 2-D x")
    return shared_estimates(data[None] if func is not None or data.ndim == 1 else data, func, c, window)[0]


def shared_estimates(x: ArrayLike, func: Callable | None = None, c: float = 5.0,
                     window: int | None = None) -> list[SeriesEstimate]:
    """func(<x_r>) of each of R independent series of ONE Markov chain
    (replicas of one system at one temperature, equally long), each with the
    error and tau_int they share, estimated from all of them.

    x: (R, n), or (R, k, n) rows of simultaneous series per replica (func
    then gets the k row means of one replica). As :func:`series_estimate`,
    but the linearised series of every replica (linearised at the means over
    all replicas) contribute their autocovariance, averaged, to one tau_int
    and one error: the error of one replica's estimate is a property of the
    chain and the run length, not of the replica. A replica that stayed in
    one region of its state space (e.g. one phase) for the whole run shows a
    fast, small autocorrelation of its own, and its own error would be far
    too small; the shared one is not (and is known ~sqrt(R) times better).
    Returns one :class:`SeriesEstimate` per replica (value of its own
    series; error, tau_int and n shared); fewer than MIN_SAMPLES samples
    give errors of NaN; constant series an error of 0.
    """
    data = _validate.finite_array("x", x, dtype=float)
    if data.ndim not in (2, 3) or data.shape[0] < 1:
        raise ValueError(f"x must be (R, n) or (R, k, n) series, got shape {data.shape}")
    if func is not None and not callable(func):
        raise ValueError(f"func must be callable, got {func!r}")
    c = _validate.real("c", c, minimum=0.0, strict_min=True)
    if window is not None:
        window = _validate.integer("window", window, 1)
    rows = data if data.ndim == 3 else data[:, None, :]
    R, k, n = rows.shape
    if n == 0:
        raise ValueError("x must have at least 1 sample per series")
    if func is None:
        if k != 1:
            raise ValueError("func is needed for (R, k, n) series")
        call = lambda m: float(m[0])
    else:
        shape = (lambda m: float(m[0])) if data.ndim == 2 else (lambda m: m)

        def call(m):
            val = np.asarray(func(shape(m)), dtype=float)
            if val.ndim != 0:
                raise ValueError(f"func must return a scalar, got shape {val.shape}")
            return float(val)
    means = rows.mean(axis=2)                                  # (R, k)
    values = [call(m) for m in means]
    if n < MIN_SAMPLES:
        return [SeriesEstimate(v, math.nan, math.nan, n) for v in values]
    dev = rows - means[:, :, None]
    centre = means.mean(axis=0)
    scale = np.maximum(np.abs(dev).max(axis=(0, 2)), np.abs(centre))
    scale[scale == 0] = 1.0
    grad = _gradient(call, centre, scale) if func is not None else np.ones(1)
    F = np.einsum("a,ran->rn", grad, dev)
    nfft = 1 << (2 * n - 1).bit_length()
    spec = np.fft.rfft(F, nfft, axis=1)
    gamma = (np.fft.irfft(spec * np.conj(spec), nfft, axis=1)[:, :n] / np.arange(n, 0, -1)).mean(axis=0)
    var0 = float(gamma[0])
    if not var0 > 0:
        return [SeriesEstimate(v, 0.0, 0.5, n) for v in values]
    rho = gamma / var0
    if window is None:
        tau, W, found = _window(rho, n, c)
    else:
        W = min(window, max(1, n // 2 - 1))
        tau, found = 0.5 + float(np.sum(rho[1:W + 1])), window < n // 2
    tau = max(tau, 0.5)
    C = 2.0 * tau * var0 * (1.0 + (2 * W + 1) / n)          # Wolff's bias correction
    tau = C / (2.0 * (var0 + 2.0 * tau * var0 / n))
    error = math.sqrt(C / n)
    return [SeriesEstimate(v, error, tau if found else math.nan, n) for v in values]


def mean_estimates(rows: ArrayLike, c: float = 5.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """series_estimate of the mean of each row of a 2-D array (k, n), for
    many series at once (one batched FFT): (means, errors, tau_ints) arrays;
    tau_int is NaN where no window was found, errors are NaN for fewer than
    MIN_SAMPLES samples and 0 for constant rows."""
    x = _validate.finite_array("rows", rows, ndim=2, dtype=float)
    c = _validate.real("c", c, minimum=0.0, strict_min=True)
    k, n = x.shape
    means = x.mean(axis=1)
    if n < MIN_SAMPLES:
        return means, np.full(k, math.nan), np.full(k, math.nan)
    d = x - means[:, None]
    var0 = np.mean(d * d, axis=1)
    nfft = 1 << (2 * n - 1).bit_length()
    F = np.fft.rfft(d, nfft, axis=1)
    acf = np.fft.irfft(F * np.conj(F), nfft, axis=1)[:, :n] / np.arange(n, 0, -1)
    const = acf[:, 0] <= 0
    rho = acf / np.where(const, 1.0, acf[:, 0])[:, None]
    tau = 0.5 + np.cumsum(rho[:, 1:max(2, n // 2)], axis=1)
    W = np.arange(1, tau.shape[1] + 1)
    with np.errstate(over="ignore"):
        ok = W[None, :] >= c * tau
    found = ok.any(axis=1)
    i = np.where(found, ok.argmax(axis=1), tau.shape[1] - 1)
    t = np.maximum(tau[np.arange(k), i], 0.5)
    Wi = W[i]
    C = 2.0 * t * var0 * (1.0 + (2 * Wi + 1) / n)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = C / (2.0 * (var0 + 2.0 * t * var0 / n))
    errors = np.where(const, 0.0, np.sqrt(C / n))
    taus = np.where(const, 0.5, np.where(found, t, math.nan))
    return means, errors, taus
