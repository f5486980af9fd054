"""Hurst S(Δt), H(Δt) and autocorrelation ρ(Δt) against float64 NumPy references,
exact cases, bad input, template rendering, and every pairs.cl kernel on Oclgrind.
(Batches, several q, error bars and the FFT path: tests/test_timeseries_batch.py.)"""

import math
import sys

import numpy as np
import pytest

import clphys
from clphys.runtime import fake_facts, render, staging
from clphys.timeseries import _pair_sums, acrw_numpy, autocorrelation, correlation, hurst
from clphys.timeseries._pair_plan import PairShape
from clphys.timeseries.reference import autocorrelation_numpy, hurst_numpy
from timeseries_plans import acf_with, hurst_with

ACCUMULATORS = ["double", "compensated"]




def random_walk(n, seed, offset=0.0):
    return offset + np.cumsum(np.random.default_rng(seed).standard_normal(n))


def series(kind, n, seed=1):
    """Price-like series of the three kinds the issue names."""
    if kind == "walk":
        return random_walk(n, seed, offset=1e4)
    if kind == "acrw":
        return acrw_numpy(n, 0.044, seed=seed)
    return 3.0 + np.random.default_rng(seed).standard_normal(n)     # white noise


def acc_for(dev, acc):
    if acc == "double" and not dev.facts.fp64:
        pytest.skip(f"{dev.name} has no fp64")
    return acc


def assert_close(actual, expected, rtol, atol=0.0):
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


# ---------------------------------------------------------------- references

@pytest.mark.parametrize("acc", ACCUMULATORS)
@pytest.mark.parametrize("kind", ["walk", "acrw", "noise"])
def test_reference_1e5(device, kind, acc):
    """The issue's accuracy: 1e-6 relative at T = 10^5 (non-power-of-two T)."""
    acc = acc_for(device, acc)
    p = series(kind, 100_003)
    S, H = hurst_numpy(p, 48)
    r = hurst_with(p, 48, device=device, accumulate=acc)
    assert_close(r.S, S, rtol=1e-6)
    assert_close(r.H[1:], H[1:], rtol=0, atol=1e-5)      # H: differences of logs of S
    assert np.isnan(r.H[0]) and np.array_equal(r.lags, np.arange(1, 49))
    for x in (np.diff(p), p):          # price changes, and the prices themselves
        for stationary in (False, True):
            rho = acf_with(x, 48, stationary=stationary, device=device,
                                  accumulate=acc).rho
            assert_close(rho, autocorrelation_numpy(x, 48, stationary), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("n", [34, 35, 47, 301])
def test_short_series_and_tails(device, n):
    """T just above max_lag + 1, and lengths that leave partial tiles."""
    p = random_walk(n, n)
    x = np.random.default_rng(n).standard_normal(n) + 0.3      # price changes
    tuning = PairShape(wg=4, lags_per_item=3, tile=16, run_length=4)
    for t in (None, tuning):
        r = hurst_with(p, 32, device=device, pair_shape=t)
        assert_close(r.S, hurst_numpy(p, 32)[0], rtol=1e-6)
        for stationary in (False, True):
            rho = acf_with(x, 32, stationary=stationary, device=device, pair_shape=t).rho
            # a few pairs per lag: float32 rounding is not averaged away
            assert_close(rho, autocorrelation_numpy(x, 32, stationary), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("tuning", [PairShape(wg=8, lags_per_item=1, tile=64, run_length=8),
                                    PairShape(wg=4, lags_per_item=5, tile=32, run_length=16,
                                              groups=3),
                                    PairShape(wg=16, lags_per_item=2, tile=128, run_length=32,
                                              groups=1),
                                    # the GPU default's shape: wg not a power of two, odd lpi
                                    PairShape(wg=12, lags_per_item=5, tile=64, run_length=16)])
def test_tunings_agree(device, tuning):
    """Several lag blocks, several tile groups, lag counts not a multiple of wg * lpi."""
    p = series("acrw", 5_001, seed=3)
    r = hurst_with(p, 77, device=device, pair_shape=tuning)
    assert_close(r.S, hurst_numpy(p, 77)[0], rtol=1e-6)
    rho = acf_with(np.diff(p), 77, device=device, pair_shape=tuning).rho
    assert_close(rho, autocorrelation_numpy(np.diff(p), 77), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("layout", ["blocked", "float2"])
def test_tick_prices_with_large_offsets(device, layout):
    """Prices of 1e4 .. 1e6 on a 1e-2 tick grid: the 4-byte "blocked" layout (float32
    relative to per-block offsets) keeps 1e-6 relative like the 8-byte (hi, lo) pairs."""
    rng = np.random.default_rng(8)
    n = 100_003
    for offset in (1e4, 1e5, 1e6):
        for steps in (rng.integers(-3, 4, n), rng.integers(0, 4, n),      # walk, drift
                      np.diff(acrw_numpy(n + 1, 0.044, seed=4))):
            p = np.round(offset * 100 + np.cumsum(steps)) / 100
            r = hurst_with(p, 40, device=device, layout=layout,
                      pair_shape=PairShape(wg=8, lags_per_item=5, tile=256, run_length=32))
            assert_close(r.S, hurst_numpy(p, 40)[0], rtol=1e-6)


TRANSFERS = [p + o for p in staging.PATHS for o in ("", "+overlap")]


def test_transfer_paths_agree_bitwise(device):
    """Every upload path (pageable/pinned, whole or in overlapping segments) gives the
    same bits; a staging slot reused across calls."""
    p = series("walk", 9_001, seed=6)
    t = PairShape(wg=8, lags_per_item=4, tile=64, run_length=16)
    S = hurst_numpy(p, 50)[0]
    rho = autocorrelation_numpy(np.diff(p), 50)
    first = None
    for spec in TRANSFERS:
        for layout in ("blocked", "float2"):
            h = hurst_with(p, 50, device=device, pair_shape=t, layout=layout, transfer=spec).S
            assert_close(h, S, rtol=1e-6)
            if layout == "blocked":
                a = acf_with(np.diff(p), 50, device=device, pair_shape=t, transfer=spec).rho
                assert_close(a, rho, rtol=1e-6, atol=1e-8)
                if first is None:
                    first = (h, a)
                assert np.array_equal(h, first[0]) and np.array_equal(a, first[1]), spec


def test_staging_cache_and_segments(device, monkeypatch):
    """Staging slots are reused by calls of similar size, and a pinned upload filled and
    sent in many segments (and by several copy threads) gives the same bits as one."""
    assert staging.capacity(1000) == 4096 and staging.capacity(2**20 + 1) == 9 * 2**17
    staging.clear_cache(device)
    p = random_walk(3_000, 2)
    for n in (3_000, 2_990, 3_000, 1_000, 200, 2_999):     # similar sizes reuse a slot
        hurst_with(p[:n], 10, device=device, transfer="pinned")
    free = staging._cache(device).free
    assert 1 <= len(free) <= staging.CACHE_SLOTS
    staging.clear_cache(device)
    assert not staging._cache(device).free
    assert staging.default(device, 10).path == "pageable"
    q = random_walk(20_000, 3)
    t = PairShape(wg=8, lags_per_item=4, tile=128, run_length=32, groups=2)
    want = hurst_with(q, 20, device=device, transfer="pageable", pair_shape=t).S
    monkeypatch.setattr(staging, "SEGMENT_BYTES", 4096 + 8)     # 20 segments
    monkeypatch.setattr(staging, "MIN_SLICE", 1000)               # three slices each
    monkeypatch.setattr(staging, "COPY_THREADS", 3)
    # while the copy threads work the switch interval is short, then Python's again
    before, seen = sys.getswitchinterval(), []
    send = staging.Staged._send
    monkeypatch.setattr(staging.Staged, "_send", lambda self, *a: (
        seen.append(sys.getswitchinterval()), send(self, *a))[1])
    assert np.array_equal(hurst_with(q, 20, device=device, transfer="pinned+overlap",
                                pair_shape=t).S, want)
    assert seen == [pytest.approx(staging.SWITCH_INTERVAL)] and sys.getswitchinterval() == before
    # a list of series: pieces at offsets; with the same tuning the same bits as alone
    assert np.array_equal(hurst_with([q[:7_001], q], 20, device=device, pair_shape=t,
                                transfer="pinned+overlap").S[1], want)


@pytest.mark.parametrize("q", [0.5, 2.0, 3.7])
def test_other_q(device, q):
    p = random_walk(20_011, 5)
    for acc in ACCUMULATORS:
        acc = acc if acc == "compensated" or device.facts.fp64 else "compensated"
        r = hurst_with(p, 20, q=q, device=device, accumulate=acc)
        assert_close(r.S, hurst_numpy(p, 20, q=q)[0], rtol=2e-6)
        assert r.q == q


def test_input_types(device):
    """Integers, float32, lists and objects with __array__ (pandas) give the same."""
    p = acrw_numpy(1_000, 0.1, seed=2)
    want = hurst_numpy(p, 10)[0]

    class SeriesLike:                       # what pandas.Series offers NumPy
        def __array__(self, dtype=None, copy=None):
            return p.astype(dtype or np.int64)

    for x in (p, p.astype(np.int32), p.astype(np.float32), p.tolist(), SeriesLike()):
        assert_close(hurst(x, 10, device=device).S, want, rtol=1e-6)
    x = np.diff(p).astype(np.float32)
    assert_close(autocorrelation(x, 10, device=device).rho,
                 autocorrelation_numpy(x, 10), rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------- exact cases

def test_linear_series_has_H_one(device):
    p = np.arange(4_000) * 0.25 + 1e6
    r = hurst(p, 100, device=device)
    assert_close(r.S, 0.25 * r.lags, rtol=1e-7)
    assert_close(r.H[1:], 1.0, rtol=1e-6)


def test_random_walk_H_one_half(device):
    """Gaussian steps: S_1(Δt) = sqrt(2Δt/π) exactly in expectation, so H = 1/2 at
    every lag; the fitted slope over Δt = 1..64 has a statistical error ~0.003."""
    p = random_walk(300_007, 11)
    r = hurst(p, 64, device=device)
    slope = np.polyfit(np.log(r.lags), np.log(r.S), 1)[0]
    assert abs(slope - 0.5) < 0.015
    assert_close(r.S[0], math.sqrt(2 / math.pi), rtol=0.01)
    assert abs(np.nanmean(r.H[1:]) - 0.5) < 0.02


def test_constant_series(device):
    """S = 0 everywhere and H undefined; the autocorrelation refuses."""
    r = hurst(np.full(50, 7.0), 5, device=device)
    assert np.all(r.S == 0) and np.all(np.isnan(r.H))
    with pytest.raises(ValueError, match="constant"):
        autocorrelation(np.full(50, 7.0), 5, device=device)


def test_rho_zero_is_one_and_windows(device):
    """General form: a window of zero variance gives NaN, not a division error."""
    x = np.concatenate([np.zeros(10), [1.0, -1.0]])
    rho = autocorrelation(x, 10, device=device).rho
    assert rho[0] == 1.0
    assert np.isnan(rho[10])          # x(0..1) is constant
    assert_close(rho[:10], autocorrelation_numpy(x, 9), rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------- bad input

BAD_HURST = [
    (dict(p=np.arange(10.0), max_lag=10), ValueError, "at least 11 points"),
    (dict(p=np.zeros((2, 5, 5)), max_lag=2), ValueError, "1-D"),
    (dict(p=np.arange(10.0), max_lag=0), ValueError, "max_lag must be >= 1"),
    (dict(p=np.arange(10.0), max_lag=2.5), TypeError, "max_lag must be an integer"),
    (dict(p=np.arange(10.0), max_lag=2, q=0.0), ValueError, "q must be >= 0.01"),
    (dict(p=np.arange(10.0), max_lag=2, q=-1), ValueError, "q must be >= 0.01"),
    (dict(p=np.arange(10.0), max_lag=2, q=1001), ValueError, "q must be <= 1000"),
    (dict(p=np.arange(10.0), max_lag=2, q=float("nan")), ValueError, "q must be finite"),
    (dict(p="1 2 3 4 5", max_lag=2), TypeError, "string"),
    (dict(p=np.arange(10.0), max_lag=2, transfer="dma"), ValueError, "transfer"),
    (dict(p=np.arange(10.0), max_lag=2, transfer="pinned+fast"), ValueError, "overlap"),
    (dict(p=np.arange(10.0), max_lag=2, layout="int16"), ValueError, "layout"),
    (dict(p=np.arange(10) * 1j, max_lag=2), TypeError, "real numbers"),
    (dict(p=np.arange(10.0), max_lag=2, q=[1, 0.0]), ValueError, "q must be >= 0.01"),
    (dict(p=np.arange(10.0), max_lag=2, q=[]), ValueError, "q must not be empty"),
    (dict(p=np.arange(10.0), max_lag=2, q=[[1, 2]]), ValueError, "flat list"),
    (dict(p=np.arange(10.0), max_lag=2, q=np.ones((1, 2))), ValueError, "flat list"),
    (dict(p=np.arange(10.0), max_lag=2, q=[1, [2]]), TypeError, "q must be a real number"),
    (dict(p=np.arange(10.0), max_lag=2, q="2"), TypeError, "q must be a real number"),
    (dict(p=np.arange(10.0), max_lag=2, method="fast"), ValueError, "method must be one of"),
    (dict(p=np.arange(10.0), max_lag=2, q=[1, 2], method="fft"), ValueError, "S_2 only"),
    (dict(p=[np.arange(10.0), np.arange(2.0)], max_lag=2), ValueError,
     r"p\[1\] needs at least 3 points"),
]


@pytest.mark.parametrize("kwargs, exc, match", BAD_HURST)
def test_hurst_bad_input(kwargs, exc, match):
    # raised before any device work: the device spec is never looked at
    with pytest.raises(exc, match=match):
        correlation.plan_hurst(device="no-such-device", **kwargs)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(x=np.arange(5.0), max_lag=5), ValueError, "at least 6 points"),
    (dict(x=np.ones((3, 4, 1)), max_lag=1), ValueError, "1-D"),
    (dict(x=np.arange(9.0), max_lag=0), ValueError, "max_lag"),
    (dict(x=np.arange(9.0), max_lag=2, stationary="yes"), TypeError, "stationary"),
])
def test_autocorrelation_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        autocorrelation(device="no-such-device", **kwargs)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_bad_values_found_on_the_device(device, dtype):
    """NaN, inf and constant series are found on the device (the host does no pass over
    the values) and reported with the series and the position, before any pair sums."""
    cases = [(hurst, dict(p=np.array([0, 1, np.nan, 3, 4.0], dtype)), r"p has .*nan at index 2"),
             (hurst, dict(p=np.array([0, 1, 2, 3, np.inf], dtype)), r"p has .*inf at index 4"),
             (autocorrelation, dict(x=np.array([1.0, 2, np.nan, 0], dtype)), r"index 2"),
             (autocorrelation, dict(x=np.ones(9, dtype)), r"x is constant"),
             (autocorrelation, dict(x=[np.arange(9.0), np.ones(12)]), r"x\[1\] is constant")]
    long = np.arange(3_000.0, dtype=dtype)
    long[2_345] = -np.inf                     # past the first blocks of the check
    cases += [(hurst, dict(p=[np.arange(10.0), long]), r"p\[1\] has .*-inf at index 2345"),
              (autocorrelation, dict(x=np.stack([long[::-1], long])), r"x\[0\] .* 654")]
    for fn, kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            fn(max_lag=2, device=device, **kwargs)


# ---------------------------------------------------------------- templates and Oclgrind

@pytest.mark.parametrize("vendor", ["nvidia", "amd", "pocl"])
@pytest.mark.parametrize("fp64", [True, False])
def test_templates_render(vendor, fp64):
    facts = fake_facts(vendor, fp64)
    acc = "double" if fp64 else "compensated"
    for pairs in (["absdiff"], ["sqdiff"], ["powdiff"], ["product"],
                  ["absdiff", "sqdiff", "powdiff", "powdiff"]):
        for value in ("float2", "float", "blocked"):
            src = render("timeseries/pairs.cl", facts, pairs=pairs, value=value, acc=acc, wg=128,
                         lpi=8, chunk=1024, run=32, block=256, rows=16)
            assert "ts_pair_sums" in src and "ts_pair_finish" in src
            assert ("double" in src) == fp64
            assert ("tabs[(k) >> 8u]" in src) == (value == "blocked")
            assert src.count("inline float tp_f") == len(pairs)
    with pytest.raises(ValueError, match="block"):
        render("timeseries/pairs.cl", facts, pairs=["absdiff"], value="blocked", acc=acc, wg=8,
               lpi=1, chunk=8, run=8, block=100)
    for exp in ("exp", "native_exp"):
        src = render("timeseries/pattern.cl", facts, wg=64, tb=128, maxp=20, maxf=20, acc=acc,
                     exp=exp)
        assert "ts_pc_sweep" in src and ("double" in src) == fp64 and f"{exp}(-chim" in src
    assert "ts_acrw_fill" in render("timeseries/acrw.cl", facts)
    for value in ("float2", "float", "blocked"):
        src = render("timeseries/pairs.cl", facts, pairs=["absmax"], value=value, acc="max",
                     wg=64, lpi=4, chunk=256, run=32, block=256)
        assert "fmax" in src and "double" not in src
    for bad in (["absmax"], ["absmax", "absdiff"], [], ["cube"]):
        with pytest.raises(ValueError, match="absmax|pairs"):
            render("timeseries/pairs.cl", facts, pairs=bad, value="float", acc=acc, wg=8,
                   lpi=1, chunk=8, run=8)
    if not fp64:
        with pytest.raises(ValueError, match="fp64"):
            render("timeseries/pairs.cl", facts, pairs=["product"], value="float",
                   acc="double", wg=8, lpi=1, chunk=8, run=8)
    for raw in ("double", "float", "long", "int"):
        for layout in ("float", "real", "blocked", "float2"):
            src = render("timeseries/ingest.cl", facts, raw=raw, f64=False, wg=64, span=256,
                         layout=layout, block=256)
            assert "ts_ingest_convert" in src and "double" not in src
            if fp64:
                src = render("timeseries/ingest.cl", facts, raw=raw, f64=True, wg=64,
                             span=256, layout=layout, block=256)
                assert "ldexp(as_double(r), e)" in src or raw != "double"
    if fp64:
        for form in ("general", "stationary", "msd"):
            src = render("timeseries/finish.cl", facts, form=form, cross="rows", ytype="double",
                         wg=64)
            assert "ts_acf_finish" in src and "ts_hurst_finish" in src
    else:
        with pytest.raises(ValueError, match="fp64"):
            render("timeseries/finish.cl", facts)
        with pytest.raises(ValueError, match="fp64"):
            render("timeseries/ingest.cl", facts, raw="double", f64=True, wg=64, span=256,
                   layout="float", block=256)


@pytest.mark.slow
@pytest.mark.oclgrind
def test_pair_kernels_oclgrind(oclgrind, monkeypatch):
    """Masked and unmasked tiles, two lag blocks, two tile groups, both accumulators (and
    so both finishes: the kernels and NumPy), the ingest kernels for every dtype."""
    p = random_walk(61, 4)
    t = PairShape(wg=4, lags_per_item=3, tile=8, run_length=4, groups=2)
    S = hurst_numpy(p, 13)[0]
    for acc in ACCUMULATORS:
        r = hurst_with(p, 13, device=oclgrind, accumulate=acc, pair_shape=t)
        assert_close(r.S, S, rtol=1e-6)
        assert np.all(np.isfinite(r.S_err)) and np.all(np.isfinite(r.H_err[1:]))
        for stationary in (False, True):
            rho = acf_with(p, 13, stationary=stationary, device=oclgrind, accumulate=acc,
                                  pair_shape=t)
            assert_close(rho.rho, autocorrelation_numpy(p, 13, stationary), rtol=1e-6, atol=1e-8)
        # 2^(q log2 x) on (hi, lo) pairs after the per-lag maxima; integer powers alone and
        # beside other pair functions (one accumulator: the same kernels otherwise)
        for qs in ([1.5, 1, 2],) + (([3], [1, 3]) if acc == "double" else ()):
            Sq = hurst_with(p, 5, q=qs, device=oclgrind, pair_shape=t, accumulate=acc).S
            for i, q in enumerate(qs):
                assert_close(Sq[i], hurst_numpy(p, 5, q=q)[0], rtol=1e-6)
    # the other dtypes, uploads and the (hi, lo) layout, and a finishing kernel with rows
    monkeypatch.setattr(_pair_sums, "finish_rows", lambda dev: 4)
    for dtype, layout, spec in ((np.float32, "blocked", "pinned+overlap"),
                                (np.int64, "float2", "pinned-unmap"),
                                (np.int32, "blocked", "pageable")):
        q = np.round(p * 100).astype(dtype)
        assert_close(hurst_with(q, 13, device=oclgrind, pair_shape=t, layout=layout,
                           transfer=spec).S, hurst_numpy(q.astype(np.float64), 13)[0],
                     rtol=1e-6)


def test_default_device_used():
    with clphys.device(clphys.runtime.test_devices()[0]):
        r = hurst(np.arange(10.0), 3)
    assert_close(r.S, [1, 2, 3], rtol=1e-7)


def test_default_pair_tuning_shapes():
    """GPUs: 5 lags per item in work groups of a multiple of the SIMD width covering the
    lags (224 x 5 for 1024 on NVIDIA); CPUs: powers of two; the tiles fit local memory."""
    from clphys.runtime import fake_facts
    from clphys.timeseries._pair_plan import default_pair_shape
    nv, amd, cpu = fake_facts("nvidia"), fake_facts("amd"), fake_facts("pocl")
    assert default_pair_shape(nv, 1024) == PairShape(wg=224, lags_per_item=5, tile=1024,
                                                     run_length=32)
    for facts in (nv, amd, cpu):
        for nlags in (1, 16, 100, 256, 1024, 5000):
            t = default_pair_shape(facts, nlags)
            assert t.wg <= facts.max_work_group and t.wg % facts.wg_multiple == 0
            assert 4 * (2 * t.tile + t.wg * t.lags_per_item) <= facts.local_mem // 2
            if nlags <= (256 if facts.is_gpu else 64) * t.lags_per_item:     # the largest groups
                assert t.wg * t.lags_per_item >= nlags                  # one lag block


def test_public_signatures_have_no_internal_knobs():
    """Internal choices (accumulator, code shape, upload path, streaming) live in the
    plans (plan_hurst, ...), never in the public signatures; no trace globals."""
    import inspect

    import clphys.timeseries as ts
    for name in ts.__all__:
        obj = getattr(ts, name)
        if inspect.isfunction(obj):
            hidden = [p for p in inspect.signature(obj).parameters if p.startswith("_")]
            assert not hidden, (name, hidden)
    for gone in ("TRACE", "TRACE_SYNC"):
        assert not hasattr(correlation, gone)
    for gone in ("STREAM_TAIL_BYTES", "COPY_QUEUE"):
        assert not hasattr(staging, gone)
    before = sys.getswitchinterval()
    res, timeline = correlation.run_plan(correlation.plan_hurst(random_walk(500, 1), 5,
                                                               transfer="pinned+overlap"))
    assert sys.getswitchinterval() == before and res.S.shape == (5,)
    assert [name for name, _ in timeline.marks]
