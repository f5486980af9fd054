"""Many series at once, several q at once, the FFT path and the error bars of hurst() and
autocorrelation(): against the float64 NumPy references at odd lengths, the jackknife
errors against the spread over independent series, and the FFT kernels on Oclgrind."""

import numpy as np
import pytest

from clphys.timeseries import _fft, _pair_plan, _pair_sums, autocorrelation, hurst
from clphys.timeseries._pair_plan import PairShape
from clphys.timeseries.reference import autocorrelation_numpy, hurst_numpy
from timeseries_plans import acf_with, hurst_with

ACCUMULATORS = ["double", "compensated"]


def walks(count, n, seed, offset=1e3):
    return offset + np.cumsum(np.random.default_rng(seed).standard_normal((count, n)), axis=1)


def ar1(count, n, phi, seed):
    e = np.random.default_rng(seed).standard_normal((count, n))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0] / np.sqrt(1 - phi * phi)
    for t in range(1, n):
        x[:, t] = phi * x[:, t - 1] + e[:, t]
    return x


def acc_for(dev, acc):
    if acc == "double" and not dev.facts.fp64:
        pytest.skip(f"{dev.name} has no fp64")
    return acc


# ---------------------------------------------------------------- batches and q lists

@pytest.mark.parametrize("acc", ACCUMULATORS)
def test_batches_match_the_reference(device, acc):
    """A 2-D array and a list of unequal (odd) lengths, every row against NumPy; q as a
    list keeps a q axis; float32 input gives float32 results."""
    acc = acc_for(device, acc)
    P = walks(3, 3_001, 1)
    r = hurst_with(P, 25, q=[1, 2, 3.5], device=device, accumulate=acc)
    assert r.S.shape == r.H.shape == r.S_err.shape == r.H_err.shape == (3, 3, 25)
    assert list(r.q) == [1, 2, 3.5] and r.S.dtype == np.float64
    for s in range(3):
        for i, q in enumerate((1, 2, 3.5)):
            S, H = hurst_numpy(P[s], 25, q=q)
            np.testing.assert_allclose(r.S[s, i], S, rtol=1e-6)
            np.testing.assert_allclose(r.H[s, i, 1:], H[1:], atol=1e-5)
    lengths = (2_999, 777, 4_001)
    series = [ar1(1, n, -0.3, n)[0] for n in lengths]
    for stationary in (False, True):
        a = acf_with(series, 40, stationary=stationary, device=device, accumulate=acc)
        assert a.rho.shape == a.rho_err.shape == (3, 41)
        for s, x in enumerate(series):
            np.testing.assert_allclose(a.rho[s], autocorrelation_numpy(x, 40, stationary),
                                       rtol=1e-6, atol=1e-7)
    one = hurst_with(P[0], 25, q=[2, 1], device=device, accumulate=acc)
    assert one.S.shape == (2, 25)
    np.testing.assert_allclose(one.S[1], hurst_numpy(P[0], 25)[0], rtol=1e-6)
    f32 = hurst_with(P.astype(np.float32), 25, device=device, accumulate=acc)
    assert f32.S.dtype == f32.H_err.dtype == np.float32 and f32.S.shape == (3, 25)
    np.testing.assert_allclose(f32.S[2], hurst_numpy(P[2].astype(np.float32), 25)[0],
                               rtol=1e-6)


def test_a_series_in_a_list_is_the_series_alone(device):
    """Each series of a list of unequal lengths gets the tiles and the jackknife blocks it
    gets alone (the shorter ones smaller tiles: here 512, 128 and 32 values on a CPU), so
    S, H, rho and their errors are the series alone's, bit for bit with fp64 (before, the
    whole list took the shortest series' tiles and the longest one's blocks: S differed
    at 1e-8, S_err by up to 16 %)."""
    rng = np.random.default_rng(3)
    series = [np.cumsum(rng.standard_normal(n)) for n in (50_000, 3_001, 9_000, 120_000, 777)]
    same = np.testing.assert_array_equal if device.facts.fp64 else \
        (lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-7))
    for q in (1.0, 2.0, 2.5, [1, 3]):
        batch = hurst(series, 20, q=q, device=device)
        for i, p in enumerate(series):
            alone = hurst(p, 20, q=q, device=device)
            for field in ("S", "S_err", "H", "H_err"):
                same(getattr(batch, field)[i], getattr(alone, field))
    x = [np.diff(p) for p in series]
    batch = autocorrelation(x, 20, device=device)
    for i, xi in enumerate(x):
        alone = autocorrelation(xi, 20, device=device)
        same(batch.rho[i], alone.rho)
        same(batch.rho_err[i], alone.rho_err)


def test_batch_too_large_runs_in_groups(device, monkeypatch):
    """Series that do not fit the device together are done in groups: the same numbers."""
    X = ar1(6, 2_001, 0.4, 3)
    t = PairShape(wg=8, lags_per_item=4, tile=64, run_length=32, groups=2)
    want = acf_with(X, 30, device=device, pair_shape=t).rho
    calls = []
    direct = _pair_sums.PairSums.__init__

    def small(self, dev, b, *args, **kwargs):
        calls.append(len(b))
        if len(b) > 2:
            raise _pair_plan.TooLarge()
        direct(self, dev, b, *args, **kwargs)

    monkeypatch.setattr(_pair_sums.PairSums, "__init__", small)
    got = acf_with(X, 30, device=device, pair_shape=t).rho
    assert calls == [6, 3, 1, 2, 3, 1, 2]           # halved until the groups fit
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------- the FFT path

@pytest.mark.slow
@pytest.mark.parametrize("acc", ACCUMULATORS)
def test_fft_matches_the_reference(device, acc):
    """All lags (max_lag = T - 1) and many lags at odd lengths, both forms, one series and
    a batch; S_2 and H by FFT.  With fp64 the FFT is in double (the error is that of
    float64 arithmetic); without (compensated), in float: ~1e-7 relative to the lag-0
    sum, so the general form's error grows as T / (T - Δt) at the last lags."""
    acc = acc_for(device, acc)
    x = ar1(1, 3_001, 0.6, 5)[0] + 50.0
    tol = 1e-12 if acc == "double" else 3e-7
    for stationary in (False, True):
        r = acf_with(x, 3_000, stationary=stationary, device=device, method="fft",
                            accumulate=acc)
        assert r.method == "fft" and r.rho.shape == (3_001,)
        want = autocorrelation_numpy(x, 3_000, stationary)
        N = x.size - np.arange(3_001)
        scale = np.ones(N.size) if stationary else x.size / N
        excess = np.abs(r.rho[:-1] - want[:-1]) / (tol * scale[:-1])
        assert np.max(excess) <= 4, (np.max(excess), np.argmax(excess))
        assert np.isnan(r.rho[-1]) != stationary         # one pair: defined only stationary
    X = ar1(3, 2_049, -0.2, 6)
    rows = [X[0], X[1, :1_001], X[2]]
    r = acf_with(rows, 700, device=device, method="fft", accumulate=acc)
    for s, row in enumerate(rows):
        np.testing.assert_allclose(r.rho[s], autocorrelation_numpy(row, 700), atol=2 * tol)
    if acc == "double":
        P = walks(2, 4_001, 7)
        h = hurst(P, 4_000, q=2, device=device, method="fft")
        assert h.method == "fft" and h.S.shape == (2, 4_000)
        for s in range(2):
            S, H = hurst_numpy(P[s], 4_000, q=2)
            np.testing.assert_allclose(h.S[s], S, rtol=1e-10)
            np.testing.assert_allclose(h.H[s, 1:], H[1:], atol=1e-8)
    else:
        with pytest.raises(ValueError, match="fp64"):
            hurst_with(x, 100, q=2, device=device, method="fft", accumulate=acc)


def test_auto_chooses_by_cost(device):
    """Few lags: the direct sums (with their jackknife errors); all lags: the FFT."""
    x = ar1(1, 20_001, 0.3, 8)[0]
    assert autocorrelation(x, 20, device=device).method == "direct"
    r = autocorrelation(x, 20_000, device=device)
    assert r.method == "fft"
    direct, fft = _fft.cost([20_001], 20)
    assert direct < _pair_plan.FFT_RATIO[device.facts.is_gpu] * fft
    # at twice the FFT's cost the direct sums are still taken (they carry the errors)
    ratio = _pair_plan.FFT_RATIO[device.facts.is_gpu] * (2 if device.facts.fp64 else 20)
    lag = next(m for m in range(20, 20_000, 10)
               if _fft.cost([20_001], m)[0] > 1.2 * ratio / 2 * _fft.cost([20_001], m)[1])
    assert autocorrelation(x, lag, device=device).method == "direct"
    assert hurst(x, 20_000, q=2, device=device).method == ("fft" if device.facts.fp64
                                                             else "direct")
    with pytest.raises(ValueError, match="S_2 only"):
        hurst(x, 50, q=[1, 2], device=device, method="fft")


# ---------------------------------------------------------------- error bars

def test_jackknife_errors_match_the_spread_over_series(device):
    """For 96 independent AR(1) series (a batch, one pass) the mean jackknife error of ρ
    at each lag agrees with the standard deviation of ρ over the series, and so do H's
    errors for 96 random walks: within 25% (the spread's own uncertainty is 7%, the
    mean error's ~2%; 25% is over 3 sigma)."""
    X = ar1(96, 4_000, 0.5, 9)
    methods = ["direct"] + (["fft"] if device.facts.fp64 else [])
    for method in methods:                 # by FFT: the spread over 16 blocks per series
        for stationary in (False, True):
            r = autocorrelation(X, 8, stationary=stationary, device=device, method=method)
            spread = r.rho[:, 1:].std(axis=0, ddof=1)
            ratio = r.rho_err[:, 1:].mean(axis=0) / spread
            assert np.all(np.abs(ratio - 1) < 0.25), (method, ratio)
            assert np.all(r.rho_err[:, 0] == 0)
    P = walks(96, 4_000, 10)
    for method, q in [("direct", 1), ("direct", 2)] + [("fft", 2)] * (len(methods) - 1):
        h = hurst(P, 8, q=q, device=device, method=method)
        assert h.method == method
        for S_or_H, err in ((h.S, h.S_err), (h.H[:, 1:], h.H_err[:, 1:])):
            ratio = err.mean(axis=0) / S_or_H.std(axis=0, ddof=1)
            assert np.all(np.abs(ratio - 1) < 0.25), (method, q, ratio)
        assert np.all(np.isnan(h.H_err[:, 0]))


def test_long_memory_is_flagged(device):
    """Fractional Brownian motion at H = 0.9 (exact, Davies-Harte): the 16-block jackknife
    errors of S understate the spread over 64 independent series (by ~2.7x; asserted
    > 1.5x: the spread's own uncertainty is ~9 %, 5 sigma), and every series is flagged
    (its H between lags 16 and 64 is ~0.9 +- 0.03 against the threshold 3/4: 5 sigma)
    with a LongMemoryWarning.  At H = 0.5 and 0.6 and for the ACRW (H ~0.5 +- 0.015:
    10 sigma below) none is, and there is no warning."""
    import warnings

    from clphys.exact.fractal import fgn_davies_harte
    from clphys.timeseries import LongMemoryWarning, acrw_numpy
    P = np.cumsum(fgn_davies_harte(2**15, 0.9, size=64, seed=11), axis=1)
    with pytest.warns(LongMemoryWarning, match=r"p\[0\] \(and 63 more series\) is "
                                               r"persistent: S_2 grows as lag\^0\.[89]"):
        r = hurst(P, 64, q=[1, 2], device=device)
    assert r.long_memory.shape == (64, 2) and r.long_memory.all()
    spread = r.S.std(axis=0, ddof=1) / r.S_err.mean(axis=0)          # (2, 64)
    assert np.all(spread[:, [0, 15, 63]] > 1.5), spread[:, [0, 15, 63]]
    with pytest.warns(LongMemoryWarning, match=r"^hurst: p is persistent: S_1 grows"):
        one = hurst(P[0], 64, device=device)
    assert one.long_memory is True
    fine = [np.cumsum(fgn_davies_harte(2**15, H, size=16, seed=12), axis=1) for H in (0.5, 0.6)]
    fine.append(np.stack([acrw_numpy(2**15, 0.044, seed=s) for s in range(4)]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", LongMemoryWarning)
        for X in fine:
            r = hurst(X, 64, q=[1, 2], device=device)
            assert not r.long_memory.any()


def test_errors_switch_and_fft_error_lags(device):
    """errors=False gives None; by FFT the errors reach up to the block length (T/16)
    and are NaN beyond (and on devices without fp64); errors=False lets auto take the
    FFT at half the cost."""
    x = ar1(1, 4_000, 0.5, 13)[0]
    assert autocorrelation(x, 20, device=device, errors=False).rho_err is None
    h = hurst(np.cumsum(x), 20, device=device, errors=False)
    assert h.S_err is None and h.H_err is None
    r = autocorrelation(x, 3_999, device=device, method="fft")
    if device.facts.fp64:
        assert np.all(np.isfinite(r.rho_err[1:249])) and np.all(np.isnan(r.rho_err[250:]))
        assert r.rho_err[0] == 0
        direct = autocorrelation(x, 20, device=device, method="direct").rho_err
        assert np.all(np.abs(r.rho_err[1:21] / direct[1:] - 1) < 0.6)     # two estimators
    else:
        assert np.all(np.isnan(r.rho_err))
    ratio = _pair_plan.FFT_RATIO[device.facts.is_gpu]
    lag = next(m for m in range(20, 4_000, 10)
               if 1.3 * ratio < _fft.cost([4_000], m)[0] / _fft.cost([4_000], m)[1] < 1.9 * ratio)
    if device.facts.fp64:
        assert autocorrelation(x, lag, device=device).method == "direct"
        assert autocorrelation(x, lag, device=device, errors=False).method == "fft"


def test_errors_need_two_blocks(device):
    """A series of one tile has one block: its errors are NaN, not zero."""
    p = np.cumsum(np.random.default_rng(2).standard_normal(40))
    r = hurst_with(p, 5, device=device,
                   pair_shape=PairShape(wg=4, lags_per_item=2, tile=64, run_length=32))
    assert np.all(np.isnan(r.S_err)) and np.all(np.isnan(r.H_err))
    assert np.all(np.isfinite(hurst_with(p, 5, device=device,
                                         pair_shape=PairShape(wg=4, lags_per_item=2, tile=8,
                                                              run_length=8)).S_err))


# ---------------------------------------------------------------- Oclgrind

@pytest.mark.slow
@pytest.mark.oclgrind
def test_fft_kernels_oclgrind(oclgrind, monkeypatch):
    """fft_pass with one and several passes (both output orders: Ns below and above the
    columns per group), fft_real_power, and the FFT finish (ρ both forms, S_2 and H), in
    double and float."""
    x = ar1(1, 37, 0.5, 11)[0]
    N = x.size - np.arange(36)
    for acc, tol in (("double", 1e-12), ("compensated", 3e-7)):
        for stationary in (False, True):
            r = acf_with(x, 36, stationary=stationary, device=oclgrind, method="fft",
                                accumulate=acc)
            err = np.abs(r.rho[:-1] - autocorrelation_numpy(x, 35, stationary))
            assert np.all(err <= 4 * tol * (1 if stationary else x.size / N))
    p = np.cumsum(x)
    h = hurst(p, 20, q=2, device=oclgrind, method="fft")
    np.testing.assert_allclose(h.S, hurst_numpy(p, 20, q=2)[0], rtol=1e-10)
    # several passes at a small size (64 complex values): radix 4 (Ns = 1 < J = 4, then
    # Ns = 4, 16 >= J) and radix 2 (Ns = 1, 2 < J, then >= J)
    assert [R for R, _, _, _ in _fft.FFT(oclgrind, 64, 1, "float", max_bits=2).passes] == [4] * 3
    for bits in (2, 1):
        monkeypatch.setattr(_fft, "_radix_bits", lambda dev, csize, J: bits)
        r = autocorrelation([x, x[:30]], 28, device=oclgrind, method="fft")
        np.testing.assert_allclose(r.rho[0], autocorrelation_numpy(x, 28), atol=1e-12)
        np.testing.assert_allclose(r.rho[1], autocorrelation_numpy(x[:30], 28), atol=1e-12)


@pytest.mark.oclgrind
def test_streamed_batch_kernels_oclgrind(oclgrind):
    """A streamed batch (one segment on Oclgrind): ts_ingest_scale, ts_ingest_centre,
    ts_ingest_block_totals and the pair sums over a group of entries, against NumPy."""
    P = walks(3, 70, 12)
    P[1] *= 1e-5
    t = PairShape(wg=4, lags_per_item=2, tile=8, run_length=8)
    h = hurst_with(P, 6, device=oclgrind, stream=True, pair_shape=t)
    a = acf_with(np.diff(P, axis=1), 6, device=oclgrind, stream=True, pair_shape=t)
    for s in range(3):
        np.testing.assert_allclose(h.S[s], hurst_numpy(P[s], 6)[0], rtol=1e-6)
        np.testing.assert_allclose(a.rho[s], autocorrelation_numpy(np.diff(P[s]), 6),
                                   atol=1e-6)


# ---------------------------------------------------------------- pattern conformity

def test_pattern_conformity_batches_and_errors(device):
    """A 2-D batch and a list of unequal lengths (one run over all series) against the
    float64 reference; the jackknife error of Ξ over 16 blocks of current times agrees
    with the spread of Ξ over 64 independent walks within 35% (the spread's own
    uncertainty is 9%: ~4 sigma)."""
    from clphys.timeseries import pattern_conformity
    from clphys.timeseries.reference import pattern_conformity_numpy
    P = walks(64, 800, 12)
    r = pattern_conformity(P, 4, 3, 100.0, 50, device=device, tick=None, progress=False)
    assert r.Xi.shape == r.Xi_err.shape == (64, 3, 4) and r.pairs.shape == (64, 4)
    assert len(r.tick) == 64 and r.tick[0] is None
    for s in (0, 37):
        ref = pattern_conformity_numpy(P[s], 4, 3, 100.0, 50)
        np.testing.assert_allclose(r.Xi[s][:, 1:], ref.Xi[:, 1:], atol=1e-5)
        np.testing.assert_array_equal(r.pairs[s], ref.pairs)
    ratio = r.Xi_err[:, :, 1:].mean(axis=0) / r.Xi[:, :, 1:].std(axis=0, ddof=1)
    assert np.all(np.abs(ratio - 1) < 0.35), ratio
    rows = [P[0, :500], P[1], P[2, :777]]
    b = pattern_conformity(rows, 4, 3, 100.0, 50, device=device, tick=None, progress=False)
    for s, row in enumerate(rows):
        ref = pattern_conformity_numpy(row, 4, 3, 100.0, 50)
        np.testing.assert_allclose(b.Xi[s][:, 1:], ref.Xi[:, 1:], atol=1e-5)
    one = pattern_conformity(P[5], 4, 3, 100.0, 50, device=device, tick=None, progress=False)
    assert one.Xi.shape == one.Xi_err.shape == (3, 4) and one.tick is None
    assert np.all(np.isfinite(one.Xi_err[:, 1:]))
