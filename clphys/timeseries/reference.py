"""Slow float64 NumPy references that follow the definitions in the docstrings of
:func:`clphys.timeseries.hurst`, :func:`~clphys.timeseries.autocorrelation` and
:func:`~clphys.timeseries.pattern_conformity` term by term.  The tests compare
the device results with them; the benchmark uses the first two as its CPU
baseline.  Indices are 0-based: p(t), t = 0 .. T-1.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

PatternSums = namedtuple("PatternSums", "Xi xi norm skipped_current skipped_history pairs")

__all__ = ["hurst_numpy", "autocorrelation_numpy", "pattern_conformity_numpy", "dfa_profile_numpy",
           "dfa_segment_starts", "dfa_fluctuations_numpy", "dfa_jackknife_groups", "mfdfa_numpy",
           "pattern_conformity_loops"]


def _structure(d, q):
    """⟨|d|^q⟩^(1/q) as M ⟨(|d|/M)^q⟩^(1/q), M = max |d|: no overflow at any q."""
    d = np.abs(d)
    M = d.max()
    return 0.0 if M == 0 else M * np.mean((d / M) ** q) ** (1.0 / q)


def hurst_numpy(p, max_lag, q=1.0, lags=None):
    """(S, H) at Δt = 1 .. max_lag (or only S at the given `lags`)."""
    p = np.asarray(p, dtype=np.float64)
    use = np.arange(1, max_lag + 1) if lags is None else np.asarray(lags)
    S = np.array([_structure(p[k:] - p[:-k], q) for k in use])
    if lags is not None:
        return S
    H = np.full(max_lag, np.nan)
    H[1:] = np.diff(np.log(S)) / np.diff(np.log(use.astype(np.float64)))
    return S, H


def autocorrelation_numpy(x, max_lag, stationary=False, lags=None):
    """ρ(Δt) at Δt = 0 .. max_lag (or at the given `lags`)."""
    x = np.asarray(x, dtype=np.float64)
    use = np.arange(max_lag + 1) if lags is None else np.asarray(lags)
    xm = x - x.mean()
    out = []
    for k in use:
        a, b = x[:x.size - k], x[k:]
        if stationary:          # statsmodels' acf(x, adjusted=False)
            out.append(np.dot(xm[:x.size - k], xm[k:]) / np.dot(xm, xm))
        else:
            with np.errstate(invalid="ignore", divide="ignore"):    # NaN for a constant window
                out.append((np.mean(a * b) - a.mean() * b.mean()) / (a.std() * b.std()))
    return np.array(out)


def pattern_conformity_loops(p, max_past, max_future, chi, max_history):
    """:class:`PatternSums` (fields as in PatternConformity) by explicit loops
    over t̂, τ, θ (tiny series only)."""
    p = np.asarray(p, dtype=np.float64)
    T = p.size
    num = np.zeros((max_future, max_past))
    den = np.zeros((max_future, max_past))
    skip_cur = np.zeros(max_past, dtype=np.int64)
    skip_hist = np.zeros(max_past, dtype=np.int64)
    pairs = np.zeros(max_past, dtype=np.int64)
    for m in range(1, max_past + 1):
        for th in range(m, T):
            cur = p[th - m:th]
            lo, hi = cur.min(), cur.max()
            if hi == lo:
                skip_cur[m - 1] += 1
                continue
            cn = lambda t, lo=lo, hi=hi: (p[t] - lo) / (hi - lo)          # noqa: E731
            for tau in range(1, min(max_history, th - m) + 1):
                hist = p[th - tau - m:th - tau]
                hlo, hhi = hist.min(), hist.max()
                if hhi == hlo:
                    skip_hist[m - 1] += 1
                    continue
                pairs[m - 1] += 1
                hn = lambda t, hlo=hlo, hhi=hhi: (p[t] - hlo) / (hhi - hlo)   # noqa: E731
                Q = sum((cn(th - theta) - hn(th - tau - theta)) ** 2
                        for theta in range(1, m + 1)) / m
                w = np.exp(-chi * Q)
                for f in range(1, max_future + 1):
                    if th > T - f:
                        continue
                    omega = (cn(th - 1 + f) - cn(th - 1)) * (hn(th - tau - 1 + f) - cn(th - 1))
                    num[f - 1, m - 1] += np.sign(omega) * w
                    den[f - 1, m - 1] += abs(np.sign(omega)) * w
    with np.errstate(invalid="ignore", divide="ignore"):
        Xi = num / den
    return PatternSums(Xi, num, den, skip_cur, skip_hist, pairs)


def pattern_conformity_numpy(p, max_past, max_future, chi, max_history):
    """Same as :func:`pattern_conformity_loops`, vectorised over τ and θ for
    each (t̂, Δt⁻): usable up to T of a few thousand."""
    p = np.asarray(p, dtype=np.float64)
    T = p.size
    num = np.zeros((max_future, max_past))
    den = np.zeros((max_future, max_past))
    skip_cur = np.zeros(max_past, dtype=np.int64)
    skip_hist = np.zeros(max_past, dtype=np.int64)
    pairs = np.zeros(max_past, dtype=np.int64)
    f = np.arange(1, max_future + 1)
    for m in range(1, max_past + 1):
        theta = np.arange(1, m + 1)
        for th in range(m, T):
            cur = p[th - theta]                      # p(t̂ - θ), θ = 1 .. m
            lo, hi = cur.min(), cur.max()
            if hi == lo:
                skip_cur[m - 1] += 1
                continue
            ntau = min(max_history, th - m)
            if ntau < 1:
                continue
            tau = np.arange(1, ntau + 1)
            hist = p[th - tau[:, None] - theta[None, :]]          # (τ, θ)
            hlo, hhi = hist.min(axis=1), hist.max(axis=1)
            ok = hhi > hlo
            skip_hist[m - 1] += np.count_nonzero(~ok)
            tau, hist, hlo, hhi = tau[ok], hist[ok], hlo[ok], hhi[ok]
            pairs[m - 1] += tau.size
            cn = (cur - lo) / (hi - lo)
            hn = (hist - hlo[:, None]) / (hhi - hlo)[:, None]
            Q = np.sum((cn[None, :] - hn) ** 2, axis=1) / m
            w = np.exp(-chi * Q)
            fv = f[f <= T - th]
            c_last = (p[th - 1] - lo) / (hi - lo)
            a = (p[th - 1 + fv] - lo) / (hi - lo) - c_last                     # (f,)
            hf = p[th - tau[:, None] - 1 + fv[None, :]]                          # (τ, f)
            b = (hf - hlo[:, None]) / (hhi - hlo)[:, None] - c_last
            s = np.sign(a[None, :] * b)
            num[fv - 1, m - 1] += s.T @ w
            den[fv - 1, m - 1] += np.abs(s).T @ w
    with np.errstate(invalid="ignore", divide="ignore"):
        Xi = num / den
    return PatternSums(Xi, num, den, skip_cur, skip_hist, pairs)


# ---------------------------------------------------------------- DFA and MF-DFA

DFASums = namedtuple("DFASums", "F2 zero starts")
MFDFAReference = namedtuple("MFDFAReference", "Fq Fq_jack zeros counts")

# A segment [a, a + s) counts as having zero variance when F²(v) <= f ⟨(Y - Y(a))²⟩ +
# 2^-80 ⟨Y²⟩ (means over the segment): below what the device's one-pass fit resolves in its
# accumulator (f = 2^-40 in double, 2^-30 in compensated float pairs: the key) and what its
# float-pair profile resolves.
DFA_ZERO_FLOORS = {"double": 2.0 ** -40, "compensated": 2.0 ** -30}


def dfa_profile_numpy(x, integrate=True) -> np.ndarray:
    """The profile Y(t): Σ_{u ≤ t} (x(u) - ⟨x⟩) (integrate), else x(t) - x(0)."""
    x = np.asarray(x, dtype=np.float64)
    return np.cumsum(x - x.mean()) if integrate else x - x[0]


def dfa_segment_starts(n, s, segments="forward", overlap=False) -> np.ndarray:
    """Start times of the segments of length s of a profile of n values: every t
    (overlap), else the forward ones 0, s, .. (n // s of them) followed, for "both", by
    the backward ones n % s, n % s + s, .. (Kantelhardt's convention: the same number
    again, aligned with the end)."""
    if overlap:
        return np.arange(n - s + 1)
    ns = n // s
    forward = np.arange(ns) * s
    return forward if segments == "forward" else np.concatenate([forward, n % s + forward])


def dfa_fluctuations_numpy(x, s, order=1, segments="forward", overlap=False, integrate=True,
                           accumulate="double"):
    """:class:`DFASums`: F²(v), the mean squared residual of the least-squares polynomial
    of the given order fitted to the profile on each segment v (in the order of
    :func:`dfa_segment_starts`), whether it counts as zero variance (the floor of the
    device's `accumulate`, see DFA_ZERO_FLOORS), and the starts."""
    Y = dfa_profile_numpy(x, integrate)
    starts = dfa_segment_starts(Y.size, s, segments, overlap)
    segs = Y[starts[:, None] + np.arange(s)[None, :]]
    u = np.arange(s) - (s - 1) / 2.0                    # centred abscissa
    basis, _ = np.linalg.qr(np.vander(u / max(1.0, (s - 1) / 2.0), order + 1, increasing=True))
    resid = segs - (segs @ basis) @ basis.T
    F2 = np.mean(resid * resid, axis=1)
    ref = segs[:, :1]
    floor = DFA_ZERO_FLOORS[accumulate] * np.mean((segs - ref) ** 2, axis=1) + \
        2.0 ** -80 * np.mean(segs * segs, axis=1)
    return DFASums(F2, F2 <= floor, starts)


def dfa_jackknife_groups(count, blocks=16) -> np.ndarray:
    """The jackknife group k of each of `count` segments (or windows) of one direction,
    in start order: group k holds v in [floor(k count / K), floor((k + 1) count / K))
    (K = blocks), so some groups are empty when count < K."""
    bounds = (np.arange(blocks + 1) * count) // blocks
    return np.searchsorted(bounds, np.arange(count), side="right") - 1


def _q_moment(F2, zero, q):
    """F_q over the segments (zero-variance ones excluded for q <= 0); NaN if none."""
    use = ~zero if q <= 0 else np.ones(F2.size, bool)
    if not use.any():
        return np.nan
    with np.errstate(divide="ignore"):
        ell = np.log(np.where(zero, 0.0, F2)[use])
    if q == 0:
        return float(np.exp(0.5 * ell.mean()))
    if q > 0 and not np.isfinite(ell).any():
        return 0.0
    M = ell.max() if q > 0 else ell.min()
    return float(np.exp(0.5 * M) * np.mean(np.exp(0.5 * q * (ell - M))) ** (1.0 / q))


def mfdfa_numpy(x, scales, q, order=2, segments="forward", overlap=False, integrate=True,
                blocks=16, accumulate="double") -> MFDFAReference:
    """F_q(s) of MF-DFA by the definitions, in float64: F_q = ⟨F²(v)^(q/2)⟩^(1/q) over the
    segments, q = 0 by the logarithmic average exp(⟨ln F²(v)⟩ / 2), zero-variance segments
    excluded for q <= 0.  Returns :class:`MFDFAReference`: Fq (n_q, n_scales), the
    delete-one-group jackknife values Fq_jack (blocks, n_q, n_scales; NaN where a group is
    empty at a scale), the zero-variance segments and the segments per scale."""
    q = np.atleast_1d(np.asarray(q, dtype=np.float64))
    scales = np.atleast_1d(scales)
    Fq = np.full((q.size, scales.size), np.nan)
    jack = np.full((blocks, q.size, scales.size), np.nan)
    zeros = np.zeros(scales.size, np.int64)
    counts = np.zeros(scales.size, np.int64)
    for j, s in enumerate(scales):
        r = dfa_fluctuations_numpy(x, int(s), order, segments, overlap, integrate, accumulate)
        groups = dfa_jackknife_groups(r.starts.size if overlap else r.starts.size // (
            1 if segments == "forward" else 2), blocks)
        if not overlap and segments == "both":
            groups = np.concatenate([groups, groups])
        zeros[j], counts[j] = int(r.zero.sum()), r.F2.size
        for i, qq in enumerate(q):
            Fq[i, j] = _q_moment(r.F2, r.zero, qq)
            for k in range(blocks):
                keep = groups != k
                if keep.all():
                    continue
                jack[k, i, j] = _q_moment(r.F2[keep], r.zero[keep], qq)
    return MFDFAReference(Fq, jack, zeros, counts)
