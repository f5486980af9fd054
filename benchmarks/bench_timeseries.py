"""Benchmark of clphys.timeseries: Hurst and autocorrelation throughput in
lag-pairs per second (T x max_lag / kernel time), pattern-conformity time for
the issue's workload, against NumPy on the CPU.

    CLPHYS_DEVICE=nvidia python benchmarks/bench_timeseries.py [--json out.jsonl]
    CLPHYS_DEVICE=portable python benchmarks/bench_timeseries.py --quick

It first checks every kernel variant it will time against the float64 NumPy
reference (so a GPU run also validates the kernels on that compiler), then
times each tuning variant (work-group size, lags per item, tile length; for
pattern conformity the work-group size, τ tile and exp) and marks the best.
Kernel time is measured with the series already on the device (warm-up call
first, median of --repeats, queue.finish() before reading the clock); the
upload of the series is timed separately.  GPU: T = 2^20 and 2^24 with
max_lag 256 and 1024, pattern conformity on T = 10^6, max_past = max_future =
20, chi = 100, max_history = 16384 (the variants are tried on T = 2^16 + 1 and
the best runs the full workload).  --quick (or a CPU device): smaller sizes
and a scaled-down pattern-conformity run extrapolated to the full workload.
Prints a table last and one JSON line per figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import clphys  # noqa: E402
from clphys.timeseries import _common, acrw, acrw_numpy, autocorrelation, hurst  # noqa: E402
from clphys.timeseries import pattern_conformity  # noqa: E402
from clphys.timeseries.correlation import PairSums, PairTuning, default_tuning  # noqa: E402
from clphys.timeseries.pattern import PatternTuning, pattern_pairs  # noqa: E402
from clphys.timeseries.pattern import default_tuning as pc_default_tuning  # noqa: E402
from clphys.timeseries.reference import (autocorrelation_numpy, hurst_numpy,  # noqa: E402
                                         pattern_conformity_numpy)

PC_FULL = dict(T=10**6, max_past=20, max_future=20, chi=100.0, max_history=16384)

records: list[dict] = []
rows: list[tuple[str, str, str]] = []


def emit(dev, workload, metric, value, table=None):
    rec = {"device": dev.name, "workload": workload, "metric": metric, "value": value}
    records.append(rec)
    print(json.dumps(rec), flush=True)
    if table is not None:
        rows.append((workload, metric, table))


def timed(fn, repeats, queue=None):
    """Median wall time of fn() after one warm-up call."""
    fn()
    if queue is not None:
        queue.finish()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if queue is not None:
            queue.finish()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def pair_variants(facts, max_lag, quick):
    """Tunings worth trying for max_lag lags: wg * lpi close to max_lag."""
    out = [default_tuning(facts, max_lag)]
    if facts.is_gpu:
        for lpi in (2, 4, 8, 16):
            wg = max_lag // lpi
            if 32 <= wg <= min(1024, facts.max_work_group):
                for chunk in (1024, 2048):
                    out.append(PairTuning(wg=wg, lpi=lpi, chunk=chunk, run=32))
        out.append(PairTuning(wg=max(32, max_lag // 8), lpi=8, chunk=1024, run=64))
        out.append(PairTuning(wg=max(32, max_lag // 8), lpi=8, chunk=1024, run=32,
                              groups=4 * facts.compute_units))
        if max_lag // 5 >= 32:                 # odd lpi: conflict-free local-memory reads
            out.append(PairTuning(wg=-(-max_lag // 5 // 32) * 32, lpi=5, chunk=1024, run=32))
    else:
        out += [PairTuning(wg=16, lpi=8, chunk=512), PairTuning(wg=64, lpi=4, chunk=512)]
        if not quick:
            out.append(PairTuning(wg=32, lpi=8, chunk=1024, run=64))
    seen, unique = set(), []
    for t in out:
        if t not in seen and t.wg <= facts.max_work_group:
            seen.add(t)
            unique.append(t)
    return unique


def pc_variants(facts, quick):
    out = [pc_default_tuning(facts, PC_FULL["max_future"])]
    if facts.is_gpu:
        out += [PatternTuning(wg=32, tb=128), PatternTuning(wg=128, tb=128),
                PatternTuning(wg=64, tb=64), PatternTuning(wg=64, tb=256),
                PatternTuning(wg=64, tb=128, exp="native_exp"),
                PatternTuning(wg=128, tb=128, exp="native_exp")]
    elif not quick:
        out += [PatternTuning(wg=32, tb=64), PatternTuning(wg=16, tb=128, exp="native_exp")]
    seen, unique = set(), []
    for t in out:
        if t not in seen:
            seen.add(t)
            unique.append(t)
    return unique


# ---------------------------------------------------------------- correctness

def check(dev, quick):
    """Every variant against the NumPy reference; returns True when all pass."""
    ok = True
    rng = np.random.default_rng(1)
    walk = 1e4 + np.cumsum(rng.standard_normal(100_003))
    accs = ["compensated"] + (["double"] if dev.facts.fp64 else [])

    def report(name, err, tol):
        nonlocal ok
        good = bool(err <= tol)
        ok &= good
        emit(dev, f"check {name}", "max error", float(err),
             f"{err:.2e} (tol {tol:.0e}) {'ok' if good else 'FAIL'}")

    S = hurst_numpy(walk, 64)[0]
    rho = autocorrelation_numpy(np.diff(walk), 64)
    for acc in accs:
        err = np.max(np.abs(hurst(walk, 64, device=dev, _accumulate=acc).S / S - 1))
        report(f"hurst T=1e5 {acc}", err, 1e-6)
        r = autocorrelation(np.diff(walk), 64, device=dev, _accumulate=acc).rho
        report(f"acf T=1e5 {acc}", np.max(np.abs(r - rho) / (np.abs(rho) + 1e-2)), 1e-6)
    small = walk[:20_011]
    for max_lag in ((64, 256) if quick else (256, 1024)):
        S = hurst_numpy(small, max_lag)[0]
        rho = autocorrelation_numpy(np.diff(small), max_lag)
        worst_h = worst_a = 0.0
        for t in pair_variants(dev.facts, max_lag, quick):
            worst_h = max(worst_h, np.max(np.abs(hurst(small, max_lag, device=dev,
                                                       _tuning=t).S / S - 1)))
            r = autocorrelation(np.diff(small), max_lag, device=dev, _tuning=t).rho
            worst_a = max(worst_a, np.max(np.abs(r - rho)))
        report(f"hurst variants max_lag={max_lag}", worst_h, 1e-6)
        report(f"acf variants max_lag={max_lag}", worst_a, 1e-6)
    p = acrw_numpy(1_500, 0.044, seed=3)
    ref = pattern_conformity_numpy(p, 6, 5, 100.0, 400)
    for t in pc_variants(dev.facts, quick):
        for acc in accs:
            r = pattern_conformity(p, 6, 5, 100.0, 400, device=dev, _tuning=t, _accumulate=acc,
                                   progress=False)
            err = np.nanmax(np.abs(r.Xi - ref.Xi))
            report(f"pc wg={t.wg} tb={t.tb} {t.exp} {acc}", err, 1e-4)
    q = walk[:1_200]
    ref = pattern_conformity_numpy(q, 20, 20, 100.0, 300)
    r = pattern_conformity(q, 20, 20, 100.0, 300, device=dev, progress=False)
    report("pc walk 20x20", np.nanmax(np.abs(r.Xi - ref.Xi)), 1e-4)
    n = 50_000
    same = np.array_equal(acrw(n, 0.044, seed=9, device=dev), acrw_numpy(n, 0.044, seed=9))
    report("acrw bit-exact", 0.0 if same else 1.0, 0.0)
    return ok


# ---------------------------------------------------------------- throughput

def bench_pairs(dev, T, max_lag, repeats, quick):
    queue = dev.queue
    p = np.cumsum(np.random.default_rng(T).standard_normal(T))
    host = {"hurst": _common.float_pairs(p), "acf": np.diff(p, prepend=0.0).astype(np.float32)}
    pairs = T * max_lag
    for name, pair, value in (("hurst", "absdiff", "float2"), ("acf", "product", "float")):
        wl = f"{name} T=2^{T.bit_length() - 1} max_lag={max_lag}"
        up = timed(lambda: _common.device_array(dev, host[name]), repeats, queue)
        emit(dev, wl, "upload s", up, f"upload {up * 1e3:.2f} ms "
             f"({host[name].nbytes / up / 1e9:.1f} GB/s)")
        x = _common.device_array(dev, host[name])
        best = None
        for t in pair_variants(dev.facts, max_lag, quick):
            plan = PairSums(dev, T, max_lag, pair, value, tuning=t)
            k = timed(lambda: plan.run(x), repeats, queue)
            rate = pairs / k
            label = f"wg={t.wg} lpi={t.lpi} chunk={t.chunk} run={t.run} groups={plan.groups}"
            emit(dev, f"{wl} {label}", "lag-pairs/s", rate)
            if best is None or rate > best[0]:
                best = (rate, label, k)
        emit(dev, wl, "best lag-pairs/s", best[0],
             f"{best[0]:.3e} lag-pairs/s ({best[2] * 1e3:.2f} ms kernel, "
             f"+{up * 1e3:.2f} ms upload) [{best[1]}]")


def bench_numpy(dev, T, max_lag):
    """NumPy on the CPU, per lag (timed on a few lags and scaled to max_lag)."""
    p = np.cumsum(np.random.default_rng(T).standard_normal(T))
    x = np.diff(p)
    lags = np.unique(np.linspace(1, max_lag, 4).astype(int))
    wl = f"T=2^{T.bit_length() - 1} max_lag={max_lag}"
    for name, fn in (("hurst", lambda: hurst_numpy(p, max_lag, lags=lags)),
                     ("acf", lambda: autocorrelation_numpy(x, max_lag, lags=lags))):
        t = timed(fn, 1) / len(lags) * max_lag
        emit(dev, f"numpy {name} {wl}", "lag-pairs/s", T * max_lag / t,
             f"{T * max_lag / t:.3e} lag-pairs/s (NumPy, {len(lags)} lags scaled)")
    t = timed(lambda: np.fft.irfft(np.abs(np.fft.rfft(x - x.mean(), 2 * x.size)) ** 2), 1)
    emit(dev, f"numpy-fft acf {wl}", "s", t,
         f"{t * 1e3:.1f} ms for all lags (FFT, stationary form only)")
    try:
        from statsmodels.tsa.stattools import acf
    except ImportError:
        return
    t = timed(lambda: acf(x, nlags=max_lag, fft=True), 1)
    emit(dev, f"statsmodels acf {wl}", "s", t, f"{t * 1e3:.1f} ms (statsmodels, fft=True)")


def bench_pc(dev, repeats, quick):
    gpu = dev.facts.is_gpu and not quick
    full = PC_FULL
    T_try, mh_try = (2**16 + 1, full["max_history"]) if gpu else ((1_500, 512) if quick
                                                                   else (3_000, 1_024))
    p = 1e4 + np.cumsum(np.random.default_rng(5).standard_normal(full["T"]))
    args = dict(max_past=full["max_past"], max_future=full["max_future"], chi=full["chi"],
                progress=False)
    triples_try = pattern_pairs(T_try, full["max_past"], mh_try)
    triples_full = pattern_pairs(full["T"], full["max_past"], full["max_history"])
    best = None
    for t in pc_variants(dev.facts, quick):
        pattern_conformity(p[:300], max_history=mh_try, device=dev, _tuning=t, **args)  # build
        k = timed(lambda: pattern_conformity(p[:T_try], max_history=mh_try, device=dev,
                                             _tuning=t, **args), 1 if gpu else max(1, repeats // 3))
        rate = triples_try / k
        label = f"wg={t.wg} tb={t.tb} {t.exp}"
        emit(dev, f"pc T={T_try} max_history={mh_try} {label}", "triples/s", rate)
        if best is None or rate > best[0]:
            best = (rate, t, label, k)
    rate, t, label, k = best
    wl = "pc T=1e6 20x20 chi=100 max_history=16384"
    estimate = triples_full / rate
    emit(dev, wl, "extrapolated s", estimate,
         f"{estimate:.1f} s extrapolated from T={T_try}, max_history={mh_try} "
         f"({rate:.3e} (t̂,τ,Δt⁻)/s) [{label}]")
    if gpu and estimate < 240:
        t0 = time.perf_counter()
        pattern_conformity(p, max_history=full["max_history"], device=dev, _tuning=t, **args)
        wall = time.perf_counter() - t0
        emit(dev, wl, "s", wall, f"{wall:.2f} s measured (incl. upload) [{label}]; "
             "paper: 5.8 h on a GTX 280")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (PoCL, CI)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", metavar="FILE", help="also write the JSON lines to FILE")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--skip-pc", action="store_true")
    args = ap.parse_args(argv)
    dev = clphys.device()
    f = dev.facts
    print(f"# device: {dev.name} ({f.platform}, driver {f.driver}), fp64={f.fp64}, "
          f"{f.compute_units} compute units", flush=True)
    quick = args.quick or not f.is_gpu
    if not args.skip_check and not check(dev, quick):
        print("# CORRECTNESS CHECK FAILED", flush=True)
    sizes = ([2**16, 2**18], [64, 256]) if args.quick else \
            (([2**20, 2**24], [256, 1024]) if f.is_gpu else ([2**18, 2**20], [64, 256]))
    for T in sizes[0]:
        for max_lag in sizes[1]:
            bench_pairs(dev, T, max_lag, args.repeats, quick)
    bench_numpy(dev, sizes[0][-1], sizes[1][-1])
    if not args.skip_pc:
        bench_pc(dev, args.repeats, quick)
    width = max(len(r[0]) for r in rows)
    print(f"\n{'workload':<{width}}  {'metric':<18} result")
    for wl, metric, text in rows:
        print(f"{wl:<{width}}  {metric:<18} {text}")
    if args.json:
        with open(args.json, "w") as fh:
            for rec in records:
                fh.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
