"""From the pair sums to the estimates and their jackknife errors, in NumPy: the same
formulas as cl_kernels/timeseries/finish.cl, used on devices without fp64 (where the
sums come back as compensated float32 pairs and are finished here in float64) and by the
tests to check the kernels.

Blocks: entry e's pair start times are cut into blocks of `bl` values (the last one to
the end); sums[.., k, l] holds block k's sums.  The error of an estimate θ is the
delete-one-block jackknife, err² = (K - 1)/K Σ_k (θ_k - mean θ_k)², K the blocks that
hold values.
"""

from __future__ import annotations

import numpy as np


def block_pairs(n: int, nblk: int, bl: int, lags: np.ndarray) -> np.ndarray:
    """(nblk, len(lags)): the pair start times t < n - l in each block."""
    start = np.arange(nblk)[:, None] * bl
    end = np.where(np.arange(nblk)[:, None] == nblk - 1, n, np.minimum(start + bl, n))
    return np.maximum(0, np.minimum(end, n - lags[None, :]) - start).astype(np.float64)


def _jack(theta: np.ndarray, active: int) -> np.ndarray:
    """Jackknife error over axis 0 of theta[:active]."""
    if active < 2:
        return np.full(theta.shape[1:], np.nan)
    t = theta[:active]
    return np.sqrt((active - 1) / active * np.sum((t - t.mean(axis=0)) ** 2, axis=0))


def _active(n: int, nblk: int, bl: int) -> int:
    return int(min(nblk, -(-n // bl)))


def structure(kind: str, mean, m, q):
    """S from the mean pair term (m: the per-lag maximum for 'powdiff')."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if kind == "absdiff":
            return mean
        if kind == "sqdiff":
            return np.sqrt(mean)
        return np.where(m > 0, m * mean ** (1.0 / q), 0.0)


def local_slope(lags: np.ndarray, S: np.ndarray) -> np.ndarray:
    """H(Δt) = Δ log S / Δ log Δt between consecutive lags along the last axis; NaN at
    the first lag and where S is not positive."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logS = np.where(S > 0, np.log(np.where(S > 0, S, 1.0)), np.nan)
        H = np.full(S.shape, np.nan)
        H[..., 1:] = np.diff(logS, axis=-1) / np.diff(np.log(lags.astype(np.float64)))
    return H


def hurst(blocks: np.ndarray, n: int, exp: int, kind: str, q: float, m: np.ndarray,
          bl: int):
    """(S, S_err, H, H_err) at lags 1 .. nlags of one entry and pair function, from its
    block sums (nblk, nlags); m: the per-lag maxima (powdiff)."""
    nblk, nlags = blocks.shape
    lags = np.arange(1, nlags + 1)
    tot = blocks.sum(axis=0)
    N = (n - lags).astype(np.float64)
    S = structure(kind, tot / N, m, q)
    active = _active(n, nblk, bl)
    nk = N[None, :] - block_pairs(n, nblk, bl, lags)
    with np.errstate(invalid="ignore", divide="ignore"):
        Sk = np.where(nk > 0, structure(kind, (tot[None, :] - blocks) / np.where(nk > 0, nk, 1),
                                        m[None, :], q), S[None, :])
    H = local_slope(lags, S)
    Hk = local_slope(lags, Sk)
    scale = np.ldexp(1.0, -exp)
    H_err = _jack(Hk, active)
    H_err[0] = np.nan
    return S * scale, _jack(Sk, active) * scale, H, H_err


def acf(cross: np.ndarray, head: np.ndarray, tail: np.ndarray, s1: float, s2: float,
        s1k: np.ndarray, s2k: np.ndarray, n: int, bl: int, stationary: bool):
    """(ρ, ρ_err) at lags 0 .. nl - 1 of one entry from its block cross sums (nblk, nl - 1)
    at lags 1 .. nl - 1 (Σ y(t) y(t + l) over the pair start times t of each block), the
    first and last nl values of y (head, tail in series order), Σ y, Σ y² and the same
    per block (s1k, s2k)."""
    nblk, nl = cross.shape[0], cross.shape[1] + 1
    lags = np.arange(nl)
    C = np.concatenate([[s2], cross.sum(axis=0)])
    C0 = s2
    N = (n - lags).astype(np.float64)
    h1 = np.concatenate([[0.0], np.cumsum(head[:nl - 1])])
    h2 = np.concatenate([[0.0], np.cumsum(head[:nl - 1] ** 2)])
    rev = tail[::-1]
    t1 = np.concatenate([[0.0], np.cumsum(rev[:nl - 1])])
    t2 = np.concatenate([[0.0], np.cumsum(rev[:nl - 1] ** 2)])
    A, B = s1 - t1, s1 - h1
    with np.errstate(invalid="ignore", divide="ignore"):
        if stationary:
            d = s1 / n
            rho = (C - d * (A + B) + N * d * d) / (C0 - n * d * d)
        else:
            ma, mb = A / N, B / N
            va = (C0 - t2) / N - ma * ma
            vb = (C0 - h2) / N - mb * mb
            rho = np.where((N > 1) & (va > 0) & (vb > 0), (C / N - ma * mb) / np.sqrt(va * vb),
                           np.nan)
        rho[0] = 1.0
        # jackknife of the ratio of the lag-l and lag-0 sums centred on the mean
        dm = s1 / n
        Cc = C - dm * (A + B) + N * dm * dm
        C0c = C0 - n * dm * dm
        R = (Cc / N) / (C0c / n)
        nk = block_pairs(n, nblk, bl, lags)
        bk = nk[:, :1]
        ck = np.concatenate([s2k[:, None], cross], axis=1) \
            - 2 * dm * s1k[:, None] * np.where(bk > 0, nk / np.where(bk > 0, bk, 1), 0) \
            + nk * dm * dm
        c0k = s2k[:, None] - 2 * dm * s1k[:, None] + bk * dm * dm
        ok = (N[None, :] > nk) & (n > bk)
        v = np.where(ok, ((Cc[None, :] - ck) / (N[None, :] - nk)) / ((C0c - c0k) / (n - bk)),
                     R[None, :])
    err = _jack(v, _active(n, nblk, bl))
    err[0] = 0.0
    return rho, err


def msd(cross: np.ndarray, head: np.ndarray, tail: np.ndarray, n: int, exp: int):
    """S_2 at lags 0 .. nl - 1 (S_2(0) = 0) from the cross sums (nl,) of y and its ends:
    Σ_{t < n - l} (y(t + l) - y(t))² = Σ_{t < n-l} y² + Σ_{t >= l} y² - 2 C(l)."""
    nl = cross.size
    lags = np.arange(nl)
    h2 = np.concatenate([[0.0], np.cumsum(head[:nl - 1] ** 2)])
    t2 = np.concatenate([[0.0], np.cumsum(tail[::-1][:nl - 1] ** 2)])
    with np.errstate(invalid="ignore", divide="ignore"):
        S = np.sqrt(np.maximum(0.0, (2 * cross[0] - h2 - t2 - 2 * cross) / (n - lags)))
    S[0] = 0.0
    return np.ldexp(S, -exp)
