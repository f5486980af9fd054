"""hurst() and autocorrelation() with the pair sums streamed over the upload segments
(the streamed pass of the pair sums): the NumPy references at odd lengths, the same bits for any
segment size, the unstreamed S bit for bit, and the fallback to the recentred pass when
the provisional scale or centre from the head of the series is too far off."""

import numpy as np
import pytest

from clphys.runtime import staging, workspace
from clphys.timeseries import _ingest, _pair_plan, _pair_stream, _pair_sums
from clphys.timeseries.reference import autocorrelation_numpy, hurst_numpy
from timeseries_plans import acf_with, hurst_with, traced

HEAD = 2048                     # provisional values from this many first values
T = 12_001                      # odd, several segments of the sizes below
MAX_LAG = 37
# segment bytes: many segments; a few; one segment
SEGMENTS = [4096 + 8, 3 * 8192, 1 << 20]


SAMPLE = 512                    # the provisional centre from this many spread values


@pytest.fixture
def small_head(monkeypatch):
    monkeypatch.setattr(_pair_stream, "HEAD_VALUES", HEAD)
    monkeypatch.setattr(_pair_stream, "CENTRE_SAMPLE", SAMPLE)


def streamed(monkeypatch, segment, fn):
    """fn() with the given segment size; asserts that it streamed and stood."""
    monkeypatch.setattr(staging, "STREAM_SEGMENT_BYTES", segment)
    res, phases = traced(fn)
    assert "streamed pair sums" in phases, phases
    return res


def walk(n, seed):
    return 1e3 + np.cumsum(np.random.default_rng(seed).standard_normal(n))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("spec, threads, min_slice", [
    ("pageable", 3, None), ("pinned+overlap", 3, None), ("pinned+overlap", 3, 1000),
    ("pinned+overlap", 1, None)])
def test_streamed_matches_numpy_and_any_segment_size(device, small_head, monkeypatch,
                                                      dtype, spec, threads, min_slice):
    """Several segments (and tiles waiting for the values `max_lag` ahead): the NumPy
    references, and the same bits for every segment size; the pinned buffer filled by 3
    copy threads in slices of at least the default size (small segments: by the caller)
    or of 1000 bytes, or by the caller alone."""
    monkeypatch.setattr(staging, "COPY_THREADS", threads)
    if min_slice:
        monkeypatch.setattr(staging, "MIN_SLICE", min_slice)
    p = walk(T, 1).astype(dtype)
    x = np.diff(p)
    first = None
    for segment in SEGMENTS:
        h = [streamed(monkeypatch, segment, lambda: hurst_with(p, MAX_LAG, q=q, device=device,
                                                          stream=True, transfer=spec))
             for q in (1, 2)]
        a = [streamed(monkeypatch, segment, lambda: acf_with(
            x, MAX_LAG, stationary=s, device=device, stream=True, transfer=spec))
            for s in (False, True)]
        got = [r.S for r in h] + [r.H for r in h] + [r.S_err for r in h] + \
            [r.rho for r in a] + [r.rho_err for r in a]
        if first is None:
            first = got
            p64, x64 = p.astype(np.float64), x.astype(np.float64)
            for q, r in zip((1, 2), h):
                S, H = hurst_numpy(p64, MAX_LAG, q=q)
                np.testing.assert_allclose(r.S, S, rtol=1e-6)
                np.testing.assert_allclose(r.H[1:], H[1:], atol=1e-4)
            for s, r in zip((False, True), a):
                np.testing.assert_allclose(r.rho, autocorrelation_numpy(x64, MAX_LAG, s),
                                           atol=1e-6)
        else:
            for g, f in zip(got, first):
                assert np.array_equal(g, f, equal_nan=True)


def test_streamed_hurst_is_the_unstreamed_bit_for_bit(device, small_head, monkeypatch):
    """S and its errors are the unstreamed path's bits also when max |p| lies far beyond
    the head (a provisional scale 2^20 too large: power-of-two scaling is exact)."""
    p = walk(T, 2)
    p[5000:] += 1e6 * np.std(np.diff(p))
    for series in (p, walk(T, 3)):
        want = hurst_with(series, MAX_LAG, device=device, stream=False)
        got = streamed(monkeypatch, 3 * 8192, lambda: hurst_with(series, MAX_LAG, device=device,
                                                            stream=True))
        assert np.array_equal(got.S, want.S) and np.array_equal(got.S_err, want.S_err)
        np.testing.assert_allclose(got.H, want.H, rtol=0, atol=1e-12)


def jump(n):
    x = np.random.default_rng(4).standard_normal(n)
    x[3 * HEAD:] += 1e6
    return x


def trend(n):
    return np.random.default_rng(5).standard_normal(n) + np.arange(n) * 1e-2


def spikes_at_sample(n):
    """Spikes of 1e3 sigma exactly where the centre's sample looks: its mean ~1e3, the
    series' ~1e3 SAMPLE / n (the sample misleads the centre by ~5 sigma)."""
    x = np.random.default_rng(4).standard_normal(n)
    x[_pair_stream.sample_positions(n)] += 1e3
    return x


def wandering(n):
    """White noise plus a random walk's share (the level wanders by ~2.5 sigma of the
    noise, the mean far from the head's): benchmarks' e2e data at a small size."""
    rng = np.random.default_rng(11)
    return np.cumsum(rng.standard_normal(n)) * 0.05 + rng.standard_normal(n)


def tiny_head(n):
    x = np.random.default_rng(6).standard_normal(n)
    x[:HEAD] *= 1e-300
    return x


@pytest.mark.parametrize("make, fn, outcome", [
    (spikes_at_sample, "acf", "discarded"),     # the centre from the sample: ~5 sigma off
    (jump, "acf", "stands"),        # the sample sees the level shift after the head
    (trend, "acf", "stands"),       # ... and the drift
    (wandering, "acf", "stands"),   # ... and the wandering level
    (tiny_head, "acf", "unstreamed"),   # the sample 2^990 times the head: not streamed
    (tiny_head, "hurst", "discarded"),  # the scale from the head: 2^990 too large
    (jump, "hurst", "stands"),      # a scale 2^20 off stands (exact)
    (trend, "hurst", "stands"),
])
@pytest.mark.parametrize("acc", ["double", "compensated"])
def test_fallback_when_the_head_misleads(device, small_head, monkeypatch, make, fn, outcome,
                                         acc):
    """Adversarial series: the streamed pass is discarded where the provisional values
    are too far off (or, values ~2^500 times the head's in the sample, not made), and the
    result is then exactly the unstreamed one; where they stand, the unstreamed ρ to 1e-7
    (the same bits where the centres agree) and S bit for bit.  In float64 the checks are
    folded on the device, in compensated float32 on the host: both decide alike."""
    if acc == "double" and not device.facts.fp64:
        pytest.skip(f"{device.name} has no fp64")
    monkeypatch.setattr(staging, "STREAM_SEGMENT_BYTES", 3 * 8192)
    x = make(T)
    call = (lambda s: acf_with(x, MAX_LAG, device=device, stream=s,
                                      accumulate=acc)) if fn == "acf" \
        else (lambda s: hurst_with(x, MAX_LAG, device=device, stream=s, accumulate=acc))
    got, phases = traced(lambda: call(True))
    want = call(False)
    assert ("streamed pass discarded" in phases) == (outcome == "discarded"), phases
    assert ("streamed pair sums" in phases) == (outcome == "stands"), phases
    for g, w in ((got.rho, want.rho), (got.rho_err, want.rho_err)) if fn == "acf" else \
            ((got.S, want.S), (got.S_err, want.S_err)):
        if outcome != "stands" or fn == "hurst":
            assert np.array_equal(g, w, equal_nan=True)
        else:
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-7)
    if fn == "acf":
        np.testing.assert_allclose(got.rho, autocorrelation_numpy(x, MAX_LAG), atol=1e-6)


@pytest.mark.parametrize("scale", [1e-300, 1e300])
def test_streamed_at_extreme_scales(device, small_head, monkeypatch, scale):
    """The whole series at 1e-300 or 1e300: the head's scale stands (no fallback), and
    the results are those of the unit-scale series (ρ to 1e-7, S scaled)."""
    x = np.random.default_rng(7).standard_normal(T)
    for fn in (lambda v: acf_with(v, MAX_LAG, device=device, stream=True).rho,
               lambda v: hurst_with(v, MAX_LAG, device=device, stream=True).S / np.abs(v).max()):
        ref = streamed(monkeypatch, 3 * 8192, lambda: fn(x))
        got = streamed(monkeypatch, 3 * 8192, lambda: fn(x * scale))
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("acc", ["double", "compensated"])
def test_streamed_bad_values_are_named(device, small_head, monkeypatch, acc):
    """A NaN after the head (found by the segments' checks: folded on the device in
    float64, on the host in compensated float32) or in it (no streaming), and a constant
    series: the unstreamed path's errors."""
    if acc == "double" and not device.facts.fp64:
        pytest.skip(f"{device.name} has no fp64")
    monkeypatch.setattr(staging, "STREAM_SEGMENT_BYTES", 3 * 8192)
    for at in (9000, 10):
        x = np.random.default_rng(8).standard_normal(T)
        x[at] = np.nan
        with pytest.raises(ValueError, match=f"non-finite.*at index {at}"):
            acf_with(x, MAX_LAG, device=device, stream=True, accumulate=acc)
        with pytest.raises(ValueError, match=f"non-finite.*at index {at}"):
            hurst_with(x, MAX_LAG, device=device, stream=True, accumulate=acc)
    with pytest.raises(ValueError, match="constant"):
        acf_with(np.full(T, 3.0), MAX_LAG, device=device, stream=True,
                        accumulate=acc)


def test_powdiff_and_compensated_batches_do_not_stream(device, monkeypatch):
    """q outside {1, 2} (a first pass for the per-lag maxima), one series or several, and
    a batch accumulated in compensated float (its scale and centre need the host) run
    unstreamed even when asked: the same results as without."""
    monkeypatch.setattr(staging, "STREAM_SEGMENT_BYTES", 4096)
    P = np.stack([walk(3001, 9), walk(3001, 10)])
    for kw in (dict(p=P, q=3.0), dict(p=P[0], q=3.0), dict(p=P, q=1, accumulate="compensated")):
        got, phases = traced(lambda: hurst_with(device=device, stream=True, max_lag=20, **kw))
        assert not any("stream" in ph for ph in phases), phases
        assert np.array_equal(got.S, hurst_with(device=device, stream=False, max_lag=20, **kw).S)
    with pytest.raises(TypeError, match="stream"):
        hurst_with(P[0], 20, device=device, stream="yes")


def test_block_totals_are_the_sums_of_each_series_and_block():
    """The per-block moments from the per-tile sums (one reduceat over the contiguous
    cells): each series' and each of its own jackknife blocks' sums (K blocks of tpb of
    its pair tiles, the last one to its end, which may hold one conversion tile more;
    the blocks past its K: 0), within a few ulps of NumPy's sums of the same tiles."""
    from types import SimpleNamespace
    rng = np.random.default_rng(5)
    for per, extra in (([1], [0]), ([7], [1]), ([193], [0]), ([16, 3, 40, 1, 17], [0, 1, 1, 0, 1]),
                       ([64, 64], [0, 0]), ([33, 2, 32], [1, 0, 0])):
        per, nch = np.array(per), np.array(per) - np.array(extra)      # conversion, pair tiles
        nch = np.maximum(nch, 1)
        tpbs = -(-nch // _pair_plan.JACK_BLOCKS)
        Ks = -(-nch // tpbs)
        boff = np.concatenate([[0], np.cumsum(per)]).astype(np.uint32)
        totals = rng.standard_normal(2 * int(boff[-1]) + 6) * 1e3     # (slack after the end)
        run = SimpleNamespace(inp=SimpleNamespace(boff=boff), windows=[(0, int(per.max()))],
                              K=int(Ks.max()), tpbs=tpbs, Ks=Ks, tiles=int(per.max()))
        s1, s2, s1k, s2k = _pair_sums.PairSums._block_totals(run, totals)
        t = totals.reshape(-1, 2)
        for e in range(len(per)):
            mine = t[boff[e]:boff[e + 1]]
            np.testing.assert_allclose([s1[e], s2[e]], mine.sum(axis=0), rtol=1e-13)
            tpb, K = int(tpbs[e]), int(Ks[e])
            for k in range(run.K):
                cell = mine[k * tpb:(k + 1) * tpb] if k < K - 1 else mine[k * tpb:] if k < K \
                    else mine[:0]
                np.testing.assert_allclose([s1k[e, k], s2k[e, k]], cell.sum(axis=0),
                                           rtol=1e-13, atol=1e-9)
                assert cell.size or (s1k[e, k] == 0 and s2k[e, k] == 0)


def test_download_all_reads_every_array(device):
    """Small results read without blocking and waited for once, large ones (pinned path)
    as download() reads them: every byte as on the device."""
    small = [np.arange(n, dtype=np.float32) * 0.5 for n in (1, 1025, 3)]
    large = np.arange(300_000, dtype=np.float64)
    bufs = [workspace.device_array(device, a) for a in small + [large]]
    empty = np.empty(0, np.float32)
    got = staging.download_all(device, [(b.data, np.empty_like(a))
                                          for b, a in zip(bufs, small)]
                                 + [(bufs[0].data, empty)])
    for g, a in zip(got, small):
        assert np.array_equal(g, a)
    (big,) = staging.download_all(device, [(bufs[-1].data, np.empty_like(large))],
                                    staging.Transfer("pinned", True))
    assert np.array_equal(big, large)


def test_centre_from_the_head_is_discarded_for_a_wandering_level(device, small_head,
                                                                  monkeypatch):
    """CENTRE_SAMPLE = 0 (the probes' "as before" variant): the centre from the head,
    which a wandering level leaves behind: the streamed pass is discarded, the result the
    unstreamed bits."""
    monkeypatch.setattr(staging, "STREAM_SEGMENT_BYTES", 3 * 8192)
    monkeypatch.setattr(_pair_stream, "CENTRE_SAMPLE", 0)
    x = wandering(T)
    got, phases = traced(lambda: acf_with(x, MAX_LAG, device=device, stream=True))
    assert "streamed pass discarded" in phases, phases
    want = acf_with(x, MAX_LAG, device=device, stream=False)
    assert np.array_equal(got.rho, want.rho) and np.array_equal(got.rho_err, want.rho_err)


# ---------------------------------------------------------------- batches, streamed

def batch_inputs(dtype):
    """A 2-D batch of walks with very different levels and scales, and a list of unequal
    (odd) lengths, some shorter than a tile row of the longest."""
    P = walks = np.stack([walk(2_001, s) * 10.0 ** (3 * s - 6) for s in range(5)])
    series = [walk(n, n) for n in (2_999, 777, 4_001, 1_201)]
    return [P.astype(dtype), [x.astype(dtype) for x in series]], walks


def batch_results(device, inputs, **kw):
    out = []
    for p in inputs:
        h = hurst_with(p, MAX_LAG, q=[1, 2], device=device, **kw)
        x = np.diff(p, axis=1) if isinstance(p, np.ndarray) else [np.diff(v) for v in p]
        a = [acf_with(x, MAX_LAG, stationary=s, device=device, **kw)
             for s in (False, True)]
        out.append([h.S, h.S_err, h.H, h.H_err] + [r.rho for r in a] + [r.rho_err for r in a])
    return out


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("spec", ["pageable", "pinned+overlap"])
def test_streamed_batches_do_not_depend_on_the_segments(device, monkeypatch, dtype, spec):
    """A batch (2-D, and a list of unequal lengths) streamed in segments of a few rows, of
    part of a row (a row completed over several segments) and in one segment: the same
    bits; the NumPy references; the unstreamed path's S bit for bit, ρ to 1e-12."""
    if not device.facts.fp64:
        pytest.skip(f"{device.name} has no fp64: batches do not stream")
    inputs, _ = batch_inputs(dtype)
    item = np.dtype(dtype).itemsize
    first = None
    for segment in (1 << 30, 3 * 2_001 * item, 1000 * item + 8, 5 * 4_001 * item,
                    700 * item):
        monkeypatch.setattr(staging, "STREAM_SEGMENT_BYTES", segment)
        got, phases = traced(lambda: batch_results(device, inputs, stream=True,
                                                   transfer=spec))
        assert phases.count("streamed batch enqueued") == 2 * 3, phases
        if first is None:
            first = got
            continue
        for g, f in zip(sum(got, []), sum(first, [])):
            assert np.array_equal(g, f, equal_nan=True)
    want = batch_results(device, inputs, stream=False)
    for (g, w) in zip(first, want):
        for i in range(4):                                  # hurst: the same bits
            assert np.array_equal(g[i], w[i], equal_nan=True)
        for i in range(4, 8):                               # rho and its errors
            np.testing.assert_allclose(g[i], w[i], rtol=0, atol=1e-12 if dtype == np.float64
                                       else 1e-6)
    for p, r in zip(inputs, first):
        for s in (0, len(p) - 1):
            v = np.asarray(p[s], np.float64)
            np.testing.assert_allclose(r[0][s, 0], hurst_numpy(v, MAX_LAG)[0], rtol=1e-6)
            np.testing.assert_allclose(r[4][s], autocorrelation_numpy(np.diff(v), MAX_LAG),
                                       atol=1e-6)


def test_streamed_batches_name_bad_values(device, monkeypatch):
    """A NaN in a later row (found by its segment's check on the device), an inf in the
    first value of a row, and a constant row: the unstreamed path's errors."""
    if not device.facts.fp64:
        pytest.skip(f"{device.name} has no fp64: batches do not stream")
    monkeypatch.setattr(staging, "STREAM_SEGMENT_BYTES", 3 * 8 * 1001)
    P = np.stack([walk(1001, s) for s in range(6)])
    for row, at, value in ((4, 777, np.nan), (2, 0, np.inf)):
        Q = P.copy()
        Q[row, at] = value
        for fn in (hurst_with, acf_with):
            for stream in (True, False):
                with pytest.raises(ValueError, match=rf"p?x?\[{row}\] has a non-finite.*"
                                                     rf"at index {at}"):
                    fn(Q, MAX_LAG, device=device, stream=stream)
    Q = P.copy()
    Q[3] = 2.5
    for stream in (True, False):
        with pytest.raises(ValueError, match=r"x\[3\] is constant"):
            acf_with(Q, MAX_LAG, device=device, stream=stream)
    assert np.all(np.isfinite(hurst_with(Q, MAX_LAG, device=device, stream=True).S[3]))


def test_streamed_batch_needs_room_for_its_partial_sums(device, monkeypatch):
    """A batch whose streamed partial sums (tpb columns per block, against the plan's
    min(G, tpb)) would not fit the device's usable memory runs unstreamed: the same S."""
    if not device.facts.fp64:
        pytest.skip(f"{device.name} has no fp64: batches do not stream")
    P = np.stack([walk(4_001, s) for s in range(3)])
    t = _pair_plan.PairShape(wg=8, lags_per_item=4, tile=32, run_length=32, groups=1)
    b = _ingest.batch("p", P, MAX_LAG + 1, "")
    run = _pair_sums.PairSums(device, b, MAX_LAG, 1, "blocked", 1, tuning=t)
    assert run.Gs == 1 and run.tpb > 1
    values = sum(run._value_buffers(int(b.lengths.sum())).values())
    plan = sum(run.fixed.values()) + values
    stream = plan + run.fixed["partial sums"] * (run.tpb - 1)
    for module in (_pair_sums, _pair_stream):
        monkeypatch.setattr(module, "USABLE_FRACTION",
                            (plan + stream) / 2 / device.facts.global_mem)
    _pair_plan.release_cached(device)
    got, phases = traced(lambda: hurst_with(P, MAX_LAG, device=device, pair_shape=t, stream=True))
    assert not any("stream" in ph for ph in phases), phases
    monkeypatch.undo()
    want, phases = traced(lambda: hurst_with(P, MAX_LAG, device=device, pair_shape=t, stream=True))
    assert "streamed batch enqueued" in phases
    np.testing.assert_allclose(got.S, want.S, rtol=1e-12)


def test_device_moment_rows_are_the_block_sums(device, monkeypatch):
    """finish.cl's moment rows made on the device (ts_ingest_block_totals, then
    ts_ingest_row_totals) against the host's sums of the same per-tile sums: one series
    (streamed and not, many tiles per block) and a streamed batch of unequal lengths."""
    if not device.facts.fp64:
        pytest.skip(f"{device.name} has no fp64: the rows are made on the host")
    captured = []
    made = _pair_sums.PairSums.device_moments

    def spy(self):
        rows = made(self)
        self.totals = None                     # the host's sums of the same tile sums
        captured.append((rows.get().reshape(self.E, -1), self.tile_totals()))
        return rows

    monkeypatch.setattr(_pair_sums.PairSums, "device_moments", spy)
    t = _pair_plan.PairShape(wg=8, lags_per_item=4, tile=32, run_length=32)
    for x, stream in ((walk(40_001, 1) - 1e3, False), (walk(40_001, 1) - 1e3, True),
                      ([walk(3001, 2), walk(777, 3), walk(5001, 4)], True)):
        acf_with(x, MAX_LAG, device=device, pair_shape=t, stream=stream)
    # the streamed series' and the batch's rows: made (for the checks), reused (the finish)
    assert [r.shape[0] for r, _ in captured] == [1, 1, 1, 3, 3]
    for rows, (s1, s2, s1k, s2k) in captured:
        K = s1k.shape[1]
        scale = np.sqrt(s2.max() * 40_001)
        for got, want in ((rows[:, 0], s1), (rows[:, 1], s2), (rows[:, 2:2 + K], s1k),
                          (rows[:, 2 + K:], s2k)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * scale)
