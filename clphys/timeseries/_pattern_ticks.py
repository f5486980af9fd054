"""Prices in integer ticks for pattern_conformity(): the common tick of a series, its
values on that grid, and the bounds under which pattern.cl's fast sign decisions are
those of the exact comparison."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .. import _validate
from . import _common

if TYPE_CHECKING:
    from .pattern import PatternShape

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


def _local_is_exact(values, tick, t: PatternShape, max_past: int, max_future: int) -> bool:
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


def _sat_scale(prepared, t: PatternShape, max_past: int, max_future: int) -> float:
    """saturated_sum's 2^k: |b|, |K| (products of tile-frame values, at most D from the tile's
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
        raise ValueError("shape: saturated_sum needs products below 2^126 (use saturated_sum=0)")
    return math.ldexp(1.0, min(k, 126))
