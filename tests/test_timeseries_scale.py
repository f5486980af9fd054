"""The time-series estimators at any scale of the data and any q, invariance of the
autocorrelation under shifts, pattern conformity in integer ticks, and long inputs:
time-bounded slices and device-sized windows/pieces that give the same bits."""

import collections
import dataclasses
import importlib
import math
import os
import signal

import numpy as np
import pytest

from clphys.runtime import Interrupted
from clphys.timeseries import (
    _fft_path,
    _ingest,
    _pair_sums,
    acrw,
    acrw_numpy,
    autocorrelation,
    hurst,
    pattern,
    pattern_conformity,
)
from clphys.timeseries._pair_plan import PairShape
from clphys.timeseries._pair_sums import PairSums
from clphys.timeseries.pattern import PatternShape, common_tick
from clphys.timeseries.reference import autocorrelation_numpy, hurst_numpy, pattern_conformity_numpy
from timeseries_plans import acf_with, hurst_with, pc_with

acrw_module = importlib.import_module("clphys.timeseries.acrw")   # the package exports acrw()
render_module = importlib.import_module("clphys.runtime.render")  # ... and render()

# float64 data from subnormal to near the overflow threshold
SCALES = [1e-310, 1e-300, 1e-40, 1e-22, 1e19, 1e36, 1e300]
POWERS_OF_TWO = [-1000, -100, 60, 1000]


def walk(n, seed, step=1.0):
    return np.cumsum(step * np.random.default_rng(seed).standard_normal(n))


def ar1(n, phi, seed):
    e = np.random.default_rng(seed).standard_normal(n)
    x = np.empty(n)
    x[0] = e[0] / np.sqrt(1 - phi * phi)
    for t in range(1, n):
        x[t] = phi * x[t - 1] + e[t]
    return x


# ---------------------------------------------------------------- Hurst

@pytest.mark.parametrize("q", [0.01, 0.1, 0.5, 3.7, 20, 100, 1000])
def test_hurst_any_q(device, q):
    """Steps of about 10: |Δp|^20 overflowed float32 before (S = inf); every allowed q
    now matches the float64 reference, to 1e-6 relative (1e-6 / q below q = 1: the
    1/q-th root magnifies the float32 error of the terms)."""
    p = walk(20_011, 1, step=10.0)
    r = hurst(p, 30, q=q, device=device)
    assert np.all(np.isfinite(r.S)) and np.all(np.isfinite(r.H[1:]))
    np.testing.assert_allclose(r.S, hurst_numpy(p, 30, q=q)[0], rtol=1e-6 * max(1, 1 / q))


QS = [0.01, 0.1, 0.5, 1.5, 3, 4, 7, 17.5, 100, 1000]


@pytest.mark.parametrize("acc", ["double", "compensated"])
def test_general_q_accuracy(device, acc):
    """Every q (a list: integer powers and 2^(q log2 x) in one call) against the float64
    reference on a random walk, the walk offset by 1e6, prices on a grid of cents (equal
    prices must give differences of exactly 0) and an ACRW in cents: within 3e-7 + 1e-7/q
    relative (measured on PoCL: at most 1.4e-7 for q >= 0.5, 5e-8/q below; before, 4.5e-6
    at q = 0.5 and 2 % at q = 0.1 on cents, 3e-3 at q = 0.01 on the walk)."""
    if acc == "double" and not device.facts.fp64:
        pytest.skip(f"{device.name} has no fp64")
    rng = np.random.default_rng(7)
    n = 20_001
    data = {"walk": walk(n, 7), "walk + 1e6": 1e6 + walk(n, 8),
            "cents": np.round(100 * 10_000 + np.cumsum(rng.integers(-3, 4, n))) / 100,
            "acrw cents": (acrw_numpy(n, 0.044, seed=3) + 10**6) / 100}
    lags = np.arange(2, 31)
    for name, p in data.items():
        r = hurst_with(p, 30, q=QS, device=device, accumulate=acc)
        for i, q in enumerate(QS):
            S, H = hurst_numpy(p, 30, q=q)
            tol = 3e-7 + 1e-7 / q
            np.testing.assert_allclose(r.S[i], S, rtol=tol, err_msg=f"{name}, q = {q}")
            # H: a difference of log S over log(l / (l - 1))
            assert np.all(np.abs(r.H[i, 1:] - H[1:]) <= 2 * tol / np.log(lags / (lags - 1))), \
                (name, q)


def test_slice_units_bound_the_work_and_keep_the_bits(device, monkeypatch):
    """A slice unit is one tile of a piece of the series and lag blocks, at most
    FIRST_SLICE_PAIRS pair terms (one tile of 512 series at 1024 lags was a single unit
    of 2.7e8 terms: 48 s for a general q on two CPU cores), so Ctrl-C and the progress bar
    act within a slice on every device; units of a tile of one series and one lag block
    give the same bits as whole tiles."""
    P = [walk(3_001, s) for s in range(5)]
    t = PairShape(wg=8, lags_per_item=2, tile=64, run_length=16)
    plan = PairSums(device, _ingest.batch("p", P, 2, ""), 50, 1, "float2", 1, tuning=t)
    assert (plan.lag_blocks, plan.pieces, plan.units) == (4, 1, plan.tiles)
    want = [hurst_with(P, 50, q=q, device=device, pair_shape=t) for q in (1.0, 2.5)]
    monkeypatch.setattr(_pair_sums, "FIRST_SLICE_PAIRS", {True: 2000, False: 2000})
    plan = PairSums(device, _ingest.batch("p", P, 2, ""), 50, 1, "float2", 1, tuning=t)
    assert (plan.piece_lags, plan.piece_entries, plan.pieces) == (1, 1, 20)
    seen = []
    got = [hurst_with(P, 50, q=q, device=device, pair_shape=t, progress=lambda d, n: seen.append(n))
           for q in (1.0, 2.5)]
    assert seen[0] == 20 * plan.tiles                     # q = 1: one pass of units
    assert seen[-1] == 20 * plan.tiles * (1 + 5)       # q = 2.5: maxima, then powers (5x)
    for a, b in zip(want, got):
        for x, y in ((a.S, b.S), (a.S_err, b.S_err), (a.H_err, b.H_err)):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("q", [1, 2, 20])
def test_hurst_any_scale(device, q):
    p = walk(10_007, 2)
    S = hurst_numpy(p, 20, q=q)[0]
    for scale in SCALES:
        np.testing.assert_allclose(hurst(p * scale, 20, q=q, device=device).S / scale, S,
                                   rtol=1e-6, err_msg=f"scale {scale}")
    base = hurst(p, 20, q=q, device=device).S
    for k in POWERS_OF_TWO:            # S(2^k p) = 2^k S(p), bit for bit
        assert np.array_equal(hurst(np.ldexp(p, k), 20, q=q, device=device).S,
                              np.ldexp(base, k)), k


def test_hurst_near_the_largest_float(device):
    """Values near the largest float64, of both signs: their differences overflow
    float64 if formed before scaling."""
    p = np.array([-1e308, 1e307, -5e307, 0.0, 6e307] * 4)
    np.testing.assert_allclose(hurst(p, 3, device=device).S / 1e300,
                               hurst_numpy(p / 1e300, 3)[0], rtol=1e-6)


# ---------------------------------------------------------------- autocorrelation

@pytest.mark.parametrize("stationary", [False, True])
def test_autocorrelation_any_scale(device, stationary):
    """1e19 gave NaN, 1e-22 a wrong ρ(1) and 1e-310 a math domain error before."""
    x = ar1(20_000, -0.4, 3)
    ref = autocorrelation_numpy(x, 6, stationary)
    for scale in SCALES:
        rho = autocorrelation(x * scale, 6, stationary=stationary, device=device).rho
        np.testing.assert_allclose(rho, ref, rtol=0, atol=1e-7, err_msg=f"scale {scale}")
    base = autocorrelation(x, 6, stationary=stationary, device=device).rho
    for k in POWERS_OF_TWO:
        assert np.array_equal(autocorrelation(np.ldexp(x, k), 6, stationary=stationary,
                                              device=device).rho, base), k


def test_autocorrelation_subnormal_input(device):
    x = np.array([3, -1, 4, -1, -5, 9, -2, 6, -5, 3, 5, -8], dtype=np.float64)
    for stationary in (False, True):
        np.testing.assert_allclose(
            autocorrelation(x * 5e-324, 3, stationary=stationary, device=device).rho,
            autocorrelation_numpy(x, 3, stationary), atol=1e-7)


def test_stationary_autocorrelation_is_shift_invariant(device):
    """The issue's AR(1) examples: 2000 points shifted by 1000 gave ρ(100) = 12.5, and a
    shift of 10 biased a 10^5-point series by 1e-3 at lags 10-50.  Centred on the mean,
    ρ(x + a) = ρ(x) (to float rounding) and |ρ| <= 1 at every lag, as statsmodels' acf."""
    x = ar1(2_000, 0.9, 4)
    base = autocorrelation(x, 1_998, stationary=True, device=device).rho
    np.testing.assert_allclose(base, autocorrelation_numpy(x, 1_998, True), atol=1e-7)
    assert np.all(np.abs(base) <= 1.0)
    for shift in (10.0, 1e3, 1e6):
        rho = autocorrelation(x + shift, 1_998, stationary=True, device=device).rho
        np.testing.assert_allclose(rho, base, atol=2e-7 if shift < 1e6 else 1e-6)
        assert np.all(np.abs(rho) <= 1.0)
    y = ar1(100_000, 0.5, 5)
    for stationary in (False, True):
        a = autocorrelation(y, 50, stationary=stationary, device=device).rho
        b = autocorrelation(y + 10.0, 50, stationary=stationary, device=device).rho
        assert np.max(np.abs(a - b)) < 1e-7
    # the general form is a Pearson correlation per lag: |ρ| <= 1 up to the float32
    # rounding of the products, which the last lags (a few pairs) magnify: the stated
    # error is about 1e-7 <|x(t) x(t+Δt)|> / (σ_t σ_{t+Δt}) (x centred), within 4x here
    general = autocorrelation(x + 1e3, 1_999, device=device).rho
    ref = autocorrelation_numpy(x, 1_999)
    np.testing.assert_allclose(general[:1_900], ref[:1_900], atol=1e-6)
    xc = x - x.mean()
    stated = np.array([1e-7 * np.mean(np.abs(xc[:xc.size - k] * xc[k:]))
                       / (xc[:xc.size - k].std() * xc[k:].std()) for k in range(1_999)])
    assert np.all(np.abs(general[:1_999] - ref[:1_999]) <= 4 * stated)
    assert np.max(np.abs(general[:1_900])) <= 1.0
    assert np.isnan(general[1_999]) and np.isnan(ref[1_999])      # one pair: no variance


# ---------------------------------------------------------------- pattern conformity

def check_pc(a, b):
    """Two pattern-conformity results with the same bits."""
    for name in ("Xi", "xi", "norm", "skipped_current", "skipped_history", "pairs"):
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name


@pytest.mark.slow
def test_decimal_ticks_equal_integer_ticks(device):
    """Prices 100000 + 0.01 k (futures in cents): ties were decided by rounding noise
    (Ξ off by up to 1.4e-2); in integer ticks they are exact, the result is the same as
    for k itself, bit for bit, and agrees with the float64 reference on k."""
    k = acrw_numpy(2_500, 0.044, seed=6)
    ints = pattern_conformity(k, 6, 5, 100.0, 200, device=device)
    assert ints.tick == 1.0
    ref = pattern_conformity_numpy(k, 6, 5, 100.0, 200)
    ok = ~np.isnan(ref.Xi)
    np.testing.assert_allclose(ints.Xi[ok], ref.Xi[ok], atol=1e-5)
    walked = 100_000 + np.cumsum(0.01 * np.diff(k, prepend=0))      # sums of decimal steps
    for prices in (100_000 + 0.01 * k, np.round(100_000 + 0.01 * k, 2), walked):
        cents = pattern_conformity(prices, 6, 5, 100.0, 200, device=device)
        assert cents.tick == 0.01
        check_pc(cents, ints)
        explicit = pattern_conformity(prices, 6, 5, 100.0, 200, device=device, tick=0.01)
        check_pc(explicit, ints)


def test_pattern_conformity_any_scale(device):
    """Integer data at any scale: the tick is the scale and the bits are the same.
    Real-valued data (tick=None) scaled by powers of two: the same bits; by 1e19 or
    1e-22 (not exact in binary): within the stated accuracy of the reference."""
    k = acrw_numpy(800, 0.044, seed=7)
    base = pattern_conformity(k, 4, 3, 100.0, 100, device=device)
    for scale in SCALES:
        r = pattern_conformity(k * scale, 4, 3, 100.0, 100, device=device)
        assert r.tick == scale
        check_pc(r, base)
    p = walk(800, 8)
    ref = pattern_conformity_numpy(p, 4, 3, 100.0, 100)
    ok = ~np.isnan(ref.Xi)
    real = pattern_conformity(p, 4, 3, 100.0, 100, device=device, tick=None)
    assert real.tick is None
    np.testing.assert_allclose(real.Xi[ok], ref.Xi[ok], atol=1e-5)
    for j in POWERS_OF_TWO:
        check_pc(pattern_conformity(np.ldexp(p, j), 4, 3, 100.0, 100, device=device,
                                    tick=None), real)
    for scale in (1e-22, 1e19):
        r = pattern_conformity(p * scale, 4, 3, 100.0, 100, device=device, tick=None)
        np.testing.assert_allclose(r.Xi[ok], ref.Xi[ok], atol=1e-5)


def test_common_tick():
    rng = np.random.default_rng(9)
    steps = rng.integers(-3, 4, 5_000)
    k = np.cumsum(steps)
    assert common_tick(100_000 + 0.01 * k, 2e5) == 0.01
    assert common_tick(2.0 + 0.25 * k, 1e4) == 0.25
    assert common_tick(100.0 + k / 32, 1e3) == 1 / 32
    assert common_tick(6.0 * k + 1, 1e5) == 6.0                 # every step a multiple of 6
    f32 = (64 + np.cumsum(rng.standard_normal(5_000)) * 0.01).astype(np.float32)
    tick = common_tick(f32.astype(np.float64), 128.0)
    assert tick is not None and np.log2(tick) == int(np.log2(tick))    # a float32 ulp
    assert common_tick(walk(5_000, 1), 1e3) is None             # real-valued
    assert common_tick(np.full(50, 3.0), 3.0) is None           # constant: nothing to find
    noisy = 100.0 + 0.01 * k + 1e-7 * rng.standard_normal(k.size)
    assert common_tick(noisy, 200.0) is None


@pytest.mark.parametrize("tick, match", [
    (0.03, r"not on the grid of tick = 0.03: p\[1\] - p\[0\] = 0.0100"),
    (1e-12, r"tick = 1e-12 is too small for p"),
    (-0.01, r"tick must be > 0"),
    (0.0, r"tick must be > 0"),
    ("cents", r"tick must be one of 'auto'"),
])
def test_bad_tick(tick, match):
    p = 100.0 + 0.01 * np.array([0, 1, 3, 2, 5, 4, 6, 8, 7, 9, 11, 10])
    with pytest.raises(ValueError, match=match):
        pattern_conformity(p, 3, 2, 1.0, 5, device="no-such-device", tick=tick)


# ---------------------------------------------------------------- slices, windows, pieces

def small_device(monkeypatch, device, global_mem, max_alloc):
    monkeypatch.setattr(device, "facts", dataclasses.replace(
        device.facts, global_mem=global_mem, max_alloc=max_alloc))


def test_windows_and_slices_give_the_same_bits(device, monkeypatch):
    """A device too small for the series: it is worked on in windows (the partial sums
    continue across them), in slices of a tile or two; the sums are the same bits as
    one launch on the whole series."""
    p = acrw_numpy(40_001, 0.044, seed=1) + walk(40_001, 2)
    x = np.diff(p)
    t = PairShape(wg=8, lags_per_item=4, tile=64, run_length=16)
    want = [hurst_with(p, 100, device=device, pair_shape=t).S,
            hurst_with(p, 100, q=3.0, device=device, pair_shape=t).S,
            acf_with(x, 100, device=device, pair_shape=t).rho,
            acf_with(x, 100, stationary=True, device=device, pair_shape=t).rho]
    small_device(monkeypatch, device, 600_000, 200_000)
    monkeypatch.setattr(_pair_sums, "FIRST_SLICE_PAIRS", {True: 1, False: 1})
    plan = PairSums(device, _ingest.batch("p", p, 2, ""), 100, 1, "blocked", 1, tuning=t)
    assert len(plan.windows) >= 2 and plan.windows[1][0] * 64 % 256 == 0
    got = [hurst_with(p, 100, device=device, pair_shape=t).S,
           hurst_with(p, 100, q=3.0, device=device, pair_shape=t).S,
           acf_with(x, 100, device=device, pair_shape=t).rho,
           acf_with(x, 100, stationary=True, device=device, pair_shape=t).rho]
    for a, b in zip(want, got):
        assert np.array_equal(a, b)


def test_more_groups_than_tiles_per_block_same_bits(device, monkeypatch):
    """G above the tiles per jackknife block (GPUs' default: 16 groups per compute unit;
    here 16 groups, 10 tiles per block, so every tile has its own slot column): slices
    of a few tiles give the same bits as one launch, and the values and errors hold."""
    p = acrw_numpy(10_001, 0.044, seed=2) + walk(10_001, 5)
    x = np.diff(p)
    t = PairShape(wg=8, lags_per_item=4, tile=64, run_length=16, groups=16)
    assert PairSums(device, _ingest.batch("p", p, 2, ""), 30, 1, "blocked", 1,
                   tuning=t).tpb < 16

    def results():
        h = hurst_with(p, 30, device=device, pair_shape=t)
        a = acf_with(x, 30, device=device, pair_shape=t)
        return [h.S, h.S_err, h.H_err, a.rho, a.rho_err]
    monkeypatch.setattr(_pair_sums, "FIRST_SLICE_PAIRS", {True: 1 << 40, False: 1 << 40})
    one = results()
    np.testing.assert_allclose(one[0], hurst_numpy(p, 30)[0], rtol=1e-6)
    np.testing.assert_allclose(one[3], autocorrelation_numpy(x, 30), atol=1e-7)
    assert np.all(np.isfinite(one[1])) and np.all(one[1] > 0)
    monkeypatch.setattr(_pair_sums, "FIRST_SLICE_PAIRS", {True: 1, False: 1})
    for a, b in zip(one, results()):
        np.testing.assert_array_equal(a, b)


def test_pattern_conformity_windows_same_bits(device, monkeypatch):
    p = acrw_numpy(3_000, 0.044, seed=2)
    t = PatternShape(wg=8, tb=16, launch_pairs=20_000)
    want = pc_with(p, 6, 5, 100.0, 300, device=device, shape=t)
    small_device(monkeypatch, device, 100_000, 20_000)
    seen = []
    windows = pattern._pc_windows
    monkeypatch.setattr(pattern, "_pc_windows", lambda *a: seen.append(windows(*a)) or seen[-1])
    check_pc(pc_with(p, 6, 5, 100.0, 300, device=device, shape=t), want)
    assert len(seen[0]) >= 2


def test_acrw_in_pieces(device, monkeypatch):
    n = 20 * acrw_module.BLOCK + 77
    monkeypatch.setattr(acrw_module, "PIECE_BLOCKS", 3)
    monkeypatch.setattr(acrw_module, "FIRST_SLICE_BLOCKS", {True: 1, False: 1})
    calls = []
    got = acrw(n, 0.044, seed=5, device=device, progress=lambda d, t: calls.append(d))
    np.testing.assert_array_equal(got, acrw_numpy(n, 0.044, seed=5))
    assert calls[-1] == 2 * 21 and len(calls) > 8         # two passes over 21 blocks
    small_device(monkeypatch, device, 64 * 1024, 4 * acrw_module.BLOCK * 2)   # 2 blocks a piece
    np.testing.assert_array_equal(acrw(n, 0.2, seed=6, device=device), acrw_numpy(n, 0.2, seed=6))


def test_too_large_for_the_device_is_refused(device, monkeypatch):
    """What cannot be split (the lags' partial sums, a window of the history) is
    refused with the memory it needs, before any device work."""
    small_device(monkeypatch, device, 100_000, 20_000)
    with pytest.raises(ValueError, match=r"hurst of 50001 points with max_lag = 20000 needs "
                                         r".*Reduce max_lag"):
        hurst(np.arange(50_001.0), 20_000, device=device)
    with pytest.raises(ValueError, match=r"pattern conformity of 3000 points .* needs .*"
                                         r"Reduce max_history"):
        pattern_conformity(np.arange(3_000.0), 20, 20, 1.0, 2_900, device=device)
    small_device(monkeypatch, device, 10_000, 2_000)
    with pytest.raises(ValueError, match=r"an ACRW series of 10000000 points needs .*Reduce n"):
        acrw(10_000_000, 0.1, device=device)


def doubling_slices(monkeypatch):
    """run_sliced whose slices only double (first, 2 first, 4 first, ...): the number of
    launches no longer depends on how fast the device is (Oclgrind runs a launch ~10x
    slower once earlier tests have built up its state, and timed slices then shrink to
    one tile each: hundreds of launches)."""
    from clphys.runtime import longrun

    def run_sliced(*args, **kwargs):
        return longrun.run_sliced(*args, **dict(kwargs, target_seconds=math.inf))
    for module in (_pair_sums, _fft_path, pattern, acrw_module):
        monkeypatch.setattr(module, "run_sliced", run_sliced)


@pytest.mark.slow
@pytest.mark.oclgrind
def test_sliced_windowed_kernels_oclgrind(oclgrind, monkeypatch):
    """Slices that continue the partial sums of earlier launches, windows at an offset,
    the max pass and the per-lag scales (q = 1 and 3 in one pass), the autocorrelation's
    ends of a windowed series, pattern windows and blocks, acrw pieces, under Oclgrind's
    checks; few launches (each is slow on Oclgrind), counted."""
    p = acrw_numpy(2_000, 0.044, seed=3) + walk(2_000, 4)
    t = PairShape(wg=4, lags_per_item=2, tile=16, run_length=4, groups=3)
    S1, S3 = hurst_numpy(p, 9)[0], hurst_numpy(p, 9, q=3.0)[0]
    small_device(monkeypatch, oclgrind, 50_000, 10_000)         # two windows of the series
    doubling_slices(monkeypatch)
    # 2 lag blocks of 8 lags x 16 values per tile: the first slice is 16 of the 125 tiles
    monkeypatch.setattr(_pair_sums, "FIRST_SLICE_PAIRS", {True: 4096, False: 4096})
    launches = collections.Counter()
    kernel_call = render_module.Kernel.__call__

    def counted(self, *args, **kwargs):
        launches[self.name] += 1
        return kernel_call(self, *args, **kwargs)
    monkeypatch.setattr(render_module.Kernel, "__call__", counted)
    assert len(PairSums(oclgrind, _ingest.batch("p", p, 2, ""), 9, 1, "blocked", 2,
                       tuning=t).windows) >= 2
    S = hurst_with(p, 9, q=[1.0, 3.0], device=oclgrind, pair_shape=t).S
    np.testing.assert_allclose(S[0], S1, rtol=1e-6)
    np.testing.assert_allclose(S[1], S3, rtol=1e-6)
    np.testing.assert_allclose(acf_with(np.diff(p), 9, device=oclgrind, pair_shape=t).rho,
                               autocorrelation_numpy(np.diff(p), 9), atol=1e-7)
    # slices and windows: more than one launch per pass, far fewer than one per tile
    assert 3 * 3 <= launches["ts_pair_sums"] <= 3 * 8
    k = acrw_numpy(120, 0.044, seed=4)
    ref = pattern_conformity_numpy(k, 3, 2, 50.0, 10)
    monkeypatch.setattr(pattern, "PC_BLOCKS", 2)
    # two windows of the series (the planner is tested on small devices above)
    monkeypatch.setattr(pattern, "_pc_windows", lambda dev, T, wg, units, *rest:
                        [(0, units // 2), (units // 2, units)])
    r = pc_with(k, 3, 2, 50.0, 10, device=oclgrind,
                           shape=PatternShape(wg=4, tb=4, launch_pairs=960))
    np.testing.assert_allclose(r.Xi[:, 1:], ref.Xi[:, 1:], atol=1e-5)
    assert launches["ts_pc_fold"] == 2 and 3 <= launches["ts_pc_sweep"] <= 8
    monkeypatch.setattr(acrw_module, "PIECE_BLOCKS", 1)
    n = 2 * acrw_module.BLOCK + 5
    np.testing.assert_array_equal(acrw(n, 0.3, seed=8, device=oclgrind), acrw_numpy(n, 0.3, seed=8))


def test_progress_counts_slices_and_ctrl_c_stops_between_them(device, monkeypatch):
    """The progress callback sees completed slices, in order, up to the total; Ctrl-C
    (a SIGINT while a slice runs) stops the call at the end of that slice with
    clphys.runtime.Interrupted saying how much was done."""
    monkeypatch.setattr(_pair_sums, "FIRST_SLICE_PAIRS", {True: 1, False: 1})
    monkeypatch.setattr(acrw_module, "FIRST_SLICE_BLOCKS", {True: 1, False: 1})
    monkeypatch.setattr(pattern, "FIRST_SLICE_TRIPLES", {True: 1, False: 1})
    t = PairShape(wg=8, lags_per_item=4, tile=32, run_length=8)
    p = walk(20_000, 3)
    calls = []
    hurst_with(p, 40, device=device, pair_shape=t, progress=lambda d, n: calls.append((d, n)))
    # 625 tiles of 32 values, each in two parts (a slice unit is at most FIRST_SLICE_PAIRS
    # pair terms, or one lag block of one series: here 32 of the 40 lags, then the rest)
    assert len(calls) >= 5 and calls[-1] == (1250, 1250)
    assert [d for d, _ in calls] == sorted({d for d, _ in calls})

    def ctrl_c_after(k):
        def callback(done, total):
            if done >= k:
                os.kill(os.getpid(), signal.SIGINT)
        return callback

    runs = [lambda cb: hurst_with(p, 40, q=2.5, device=device, pair_shape=t, progress=cb),
            lambda cb: acf_with(np.diff(p), 40, device=device, pair_shape=t, progress=cb),
            lambda cb: pc_with(p[:3_000], 4, 3, 10.0, 100, device=device, progress=cb,
                                          shape=PatternShape(wg=8, tb=16, launch_pairs=2**16)),
            lambda cb: acrw(50 * acrw_module.BLOCK, 0.1, device=device, progress=cb)]
    for run in runs:
        with pytest.raises(Interrupted) as exc:
            run(ctrl_c_after(3))
        assert 3 <= exc.value.done < exc.value.total
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
