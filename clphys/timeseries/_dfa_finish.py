"""From F_q(s) and its delete-one-group jackknife values to the exponents and their errors,
in NumPy (float64): the least-squares slopes h(q) of ln F_q against ln s over the fit range,
tau(q) = q h(q) - 1, the singularity spectrum alpha = dtau/dq, f = q alpha - tau, each with
the jackknife error of the whole chain (every group's values go through the same fits and
derivatives, so the errors carry the correlations between scales and between q)."""

from __future__ import annotations

import numpy as np

# Jackknife groups: the segments of each direction (or the windows) of every scale are cut,
# in order, into this many groups of consecutive ones (so group k covers about the k-th
# sixteenth of the series at every scale); group k's values are the estimate without them.
JACK_GROUPS = 16


def slopes(log_s: np.ndarray, log_F: np.ndarray) -> np.ndarray:
    """Least-squares slopes of log_F (..., n) against log_s (n,) along the last axis."""
    x = log_s - log_s.mean()
    return np.sum(x * (log_F - log_F.mean(axis=-1, keepdims=True)), axis=-1) / np.sum(x * x)


def jackknife_error(groups: np.ndarray, used: np.ndarray, axis: int) -> np.ndarray:
    """sqrt((G-1)/G Σ_k (θ_k - mean θ_k)²) over the groups k (along `axis` of groups)
    where `used` (broadcastable) holds, G of them; NaN with fewer than two."""
    used = np.broadcast_to(used, groups.shape)
    n = used.sum(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(used, groups, 0.0).sum(axis=axis, keepdims=True) / n
        d = np.where(used, groups - mean, 0.0)
        top = np.max(np.abs(d), axis=axis, keepdims=True)    # scaled: no overflow
        unit = np.where(top > 0, top, 1.0)
        err = unit * np.sqrt((n - 1) / n * np.sum((d / unit) ** 2, axis=axis, keepdims=True))
    return np.squeeze(np.where(n >= 2, err, np.nan), axis=axis)


def fill_groups(full: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Group values (..., K, n_q, n_scales) with NaN (a group without segments at that
    scale) replaced by the full estimate (..., n_q, n_scales): deleting an empty group
    changes nothing."""
    return np.where(np.isnan(groups), full[..., None, :, :], groups)


def exponents(scales, q, Fq, Fq_groups, fit):
    """h, tau, alpha, f and their jackknife errors (a dict of (value, error) arrays over q)
    from Fq (..., n_q, n_scales) and its group values (..., K, n_q, n_scales); `fit`: the
    boolean mask of the scales fitted.  The groups used are those with segments at the
    smallest fitted scale.  alpha and f need >= 2 values of q (np.gradient along q), else
    NaN.  Leading axes (series) are kept."""
    q = np.asarray(q, dtype=np.float64)
    log_s = np.log(np.asarray(scales, dtype=np.float64)[fit])
    groups = fill_groups(Fq, Fq_groups)
    first = np.flatnonzero(fit)[0]
    used = ~np.all(np.isnan(Fq_groups[..., first]), axis=-1)[..., None]   # (..., K, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = slopes(log_s, np.log(Fq[..., fit]))                          # (..., n_q)
        hk = slopes(log_s, np.log(groups[..., fit]))                     # (..., K, n_q)
    tau, tauk = q * h - 1.0, q * hk - 1.0
    err = lambda vk: jackknife_error(vk, used, -2)                     # noqa: E731
    out = {"h": (h, err(hk)), "tau": (tau, err(tauk))}
    if q.size >= 2:
        alpha, alphak = np.gradient(tau, q, axis=-1), np.gradient(tauk, q, axis=-1)
        f, fk = q * alpha - tau, q * alphak - tauk
        out["alpha"] = (alpha, err(alphak))
        out["f"] = (f, err(fk))
    else:
        nan = np.full(h.shape, np.nan)
        out["alpha"] = out["f"] = (nan, nan)
    return out


def fluctuation_errors(Fq, Fq_groups):
    """Jackknife errors of F_q(s) (..., n_q, n_scales) per scale, over the groups that hold
    segments there."""
    used = ~np.all(np.isnan(Fq_groups), axis=-2, keepdims=True)         # (..., K, 1, n_sc)
    return jackknife_error(Fq_groups, used, -3)


def fluctuations(qs, stats, qsum, mq, exps):
    """F_q(s) and its group values from the device's sums (_dfa_device.DFAPlan.run_all):
    stats (E, nsc, K, 5) = (segments, zero-variance ones, sum ln F², max, min), qsum
    (E, nsc, K, nq) the sums of expm1(q/2 (ln F² - M_q)), mq (E, nsc, nq), exps (E,) the
    scale 2^e the series were multiplied by.  Returns (Fq (E, nq, nsc), groups (E, K, nq,
    nsc), zeros (E, nsc), counts (E, nsc)); a group without segments at a scale gives NaN,
    and so does a moment over no segment."""
    q = np.asarray(qs, dtype=np.float64)
    E, nsc, K, _ = stats.shape
    all_k, zero_k, ell_k = stats[..., 0:1], stats[..., 1:2], stats[..., 2:3]   # (E, nsc, K, 1)
    nz_k = all_k - zero_k
    log_scale = -np.log(2.0) * np.asarray(exps, dtype=np.float64)[:, None, None, None]
    Fq = np.empty((E, nsc, 1, q.size))
    groups = np.empty((E, nsc, K, q.size))
    with np.errstate(divide="ignore", invalid="ignore"):
        for sign, cols in ((1, np.flatnonzero(q > 0)), (-1, np.flatnonzero(q < 0))):
            if not cols.size:
                continue
            n_k = all_k if sign > 0 else nz_k
            S_k = qsum[..., cols]
            n, S = n_k.sum(axis=2, keepdims=True), S_k.sum(axis=2, keepdims=True)
            M, inv = 0.5 * mq[:, :, None, cols] + log_scale, 1.0 / q[cols]
            Fq[..., cols] = np.where(n > 0, np.exp(M + np.log1p(S / n) * inv), np.nan)
            m = n - n_k
            groups[..., cols] = np.where((m > 0) & (all_k > 0),
                                         np.exp(M + np.log1p((S - S_k) / m) * inv), np.nan)
        zero_q = np.flatnonzero(q == 0)
        if zero_q.size:
            n, L = nz_k.sum(axis=2, keepdims=True), ell_k.sum(axis=2, keepdims=True)
            Fq[..., zero_q] = np.where(n > 0, np.exp(0.5 * L / n + log_scale), np.nan)
            m = n - nz_k
            groups[..., zero_q] = np.where((m > 0) & (all_k > 0),
                                           np.exp(0.5 * (L - ell_k) / m + log_scale), np.nan)
    zeros = zero_k[..., 0].sum(axis=2).astype(np.int64)
    counts = all_k[..., 0].sum(axis=2).astype(np.int64)
    return (np.ascontiguousarray(Fq[:, :, 0].transpose(0, 2, 1)),
            np.ascontiguousarray(groups.transpose(0, 2, 3, 1)), zeros, counts)
