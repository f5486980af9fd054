"""Pattern conformity Ξ_χ(Δt⁺, Δt⁻) of Preis, Paul and Schneider, EPL 82, 68005 (2008)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _validate
from ..progress import Progress
from ..runtime import resolve_device, zeros
from . import _common

__all__ = ["PatternConformity", "PatternTuning", "pattern_conformity", "pattern_pairs"]

MAX_PAST = MAX_FUTURE = 64        # they size unrolled register arrays in pattern.cl


@dataclass(frozen=True, eq=False)
class PatternConformity:
    """Ξ_χ and its parts; arrays indexed [Δt⁺ - 1, Δt⁻ - 1].

    Xi = xi / norm (NaN where norm is 0, e.g. the whole column Δt⁻ = 1, whose
    windows all have zero range); skipped_current[Δt⁻ - 1] counts current
    times t̂ whose window had zero range, skipped_history[Δt⁻ - 1] the pairs
    (t̂, τ) skipped for a historical window of zero range; pairs[Δt⁻ - 1] the
    (t̂, τ) pairs that contributed (those with t̂ ≤ T - 1, i.e. for Δt⁺ = 1)."""
    Xi: np.ndarray
    xi: np.ndarray
    norm: np.ndarray
    skipped_current: np.ndarray
    skipped_history: np.ndarray
    pairs: np.ndarray
    chi: float
    max_history: int


@dataclass(frozen=True)
class PatternTuning:
    """Code shape of pattern.cl: work-group size, lags τ per local-memory tile,
    the exponential ("exp" or the faster, less accurate "native_exp");
    `launch_pairs`: about how many (t̂, Δt⁻, τ) triples one launch covers."""
    wg: int
    tb: int
    launch_pairs: int | None = None
    exp: str = "exp"


def default_tuning(facts, max_future: int) -> PatternTuning:
    wg = 64 if facts.is_gpu else 16
    while wg > 1 and wg * (2 * max_future * 8 + 8) + 4 * (wg + 512) > facts.local_mem // 2:
        wg //= 2
    return PatternTuning(wg=wg, tb=128 if facts.is_gpu else 64)


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


def pattern_conformity(p, max_past=20, max_future=20, chi=100.0, max_history=16384,
                       device=None, progress=None, *, _accumulate=None,
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
    None (a bar on a terminal for long runs), True, False or f(done, total);
    the t̂ range is split into launches of bounded length.

    Accuracy: windows are read in float32 relative to a nearby element (the
    series is sent as float32 (hi, lo) pairs), Q and e^{-χQ} in float32, the
    signs from exact comparisons of rounded products (exact for integer-valued
    series below 2^24 in range); sums in float32 per tile of τ, then float64
    (compensated float32 without fp64).  Ξ matches a float64 NumPy evaluation
    to ~1e-5.  Returns :class:`PatternConformity`.
    """
    max_past = _validate.integer("max_past", max_past, 1, MAX_PAST)
    max_future = _validate.integer("max_future", max_future, 1, MAX_FUTURE)
    chi = _validate.real("chi", chi, 0.0)
    max_history = _validate.integer("max_history", max_history, 1, _common.MAX_LENGTH)
    need = max_past + max_future + 1
    p = _common.series("p", p, need, f"max_past + max_future + 1 = {need}")
    dev = resolve_device(device)
    acc = _common.accumulator(dev, _accumulate)
    t = _tuning or default_tuning(dev.facts, max_future)
    prg = dev.build("timeseries/pattern.cl", wg=t.wg, tb=t.tb, maxp=max_past, maxf=max_future,
                    acc=acc, exp=t.exp)
    T = p.size
    per_t = max_past * min(max_history, T)
    target = t.launch_pairs or (2**32 if dev.facts.is_gpu else 2**24)
    nt = max(t.wg, target // per_t // t.wg * t.wg)
    nt = min(nt, -(-(T - 1) // t.wg) * t.wg)
    slots = nt // t.wg
    queue = dev.queue
    x = _common.device_array(dev, _common.float_pairs(p))
    partial = zeros(dev, (slots, max_past, 2 * max_future), _common.ACC_DTYPE[acc])
    counts = zeros(dev, (slots, max_past, 3), np.uint64)
    with Progress(T - 1, progress, label="pattern conformity") as bar:
        for t_lo in range(1, T, nt):
            t_hi = min(T, t_lo + nt)
            groups = -(-(t_hi - t_lo) // t.wg)
            prg.ts_pc_sweep(queue, (groups * t.wg, max_past), (t.wg, 1), x.data, np.uint32(T),
                            np.uint32(t_lo), np.uint32(t_hi), np.uint32(max_history),
                            np.float32(chi), partial.data, counts.data)
            queue.finish()
            bar.update(t_hi - t_lo)
    sums = _common.acc_to_float64(partial.get()).sum(axis=0)        # (max_past, 2 max_future)
    xi, norm = sums[:, :max_future].T.copy(), sums[:, max_future:].T.copy()
    cnt = counts.get().sum(axis=0).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        Xi = np.where(norm > 0, xi / np.where(norm > 0, norm, 1.0), np.nan)
    return PatternConformity(Xi=Xi, xi=xi, norm=norm, skipped_current=cnt[:, 0],
                             skipped_history=cnt[:, 1], pairs=cnt[:, 2], chi=chi,
                             max_history=max_history)
