"""Benchmark of clphys.timeseries, end to end: the public calls hurst(),
autocorrelation() and pattern_conformity() from a NumPy array in host memory to the
NumPy result, next to the device work inside them, and torch's / CuPy's FFT
autocorrelation on the same data in the same run (when they are installed).

    CLPHYS_DEVICE=nvidia python benchmarks/bench_timeseries.py [--json out.jsonl]
    CLPHYS_DEVICE=portable python benchmarks/bench_timeseries.py --quick

It first checks the paths it times against the float64 NumPy references (so a GPU run
also validates the kernels on that compiler).  Then, for float32 and float64 input:

* hurst() and autocorrelation() at T = 2^24, max_lag = 1024 (--quick: 2^18, 256):
  median of --repeats (>= 5) calls after a warm-up, with the phases of the median call
  (upload and check, mean and spread, conversion and pair sums, finish and download;
  recorded where the host waits for the device anyway) and the kernel time of the
  pair sums alone (series already on the device), for each tuning variant on GPUs;
* all lags (max_lag = T - 1) by FFT, with and without the error blocks, against
  torch.fft and cupy.fft (stationary ACF: upload, rfft, |X|^2, irfft, normalise,
  download; compared with errors=False), and S_2 by FFT (hurst q = 2);
* 512 series of 2^16 points (--quick: 64 of 2^12) in one call: lag-pairs/s against the
  single long series;
* pattern conformity, T = 10^6, max_past = max_future = 20, chi = 100, max_history =
  16384 (on a GPU measured; --quick or a CPU: a smaller run extrapolated);
* the upload paths (pageable, pinned, pinned + overlapped segments) of one call;
* DFA-1 and MF-DFA-2 (21 q, 40 log-spaced scales 10 .. N/4) of one series of 2^24 values
  and of 512 x 2^16 (--quick: 2^18 and 64 x 2^12), float64 and float32, end to end, with
  the phases of the median call, against fathon (OpenMP over the scales, all cores) and
  the MFDFA package (NumPy, one process per core over the scales or the series) in the
  same run, each on a part of the workload where the whole would take minutes
  (extrapolated linearly in the values, and said so); `--only dfa` runs this part alone.

Prints a table, one JSON line per figure, and last one table of issue 14's targets:
target, measured value, met / NOT MET (n/a: not measured at the target's size, as with
--quick).  About 2-3 minutes on an H100 (the first run builds ~40 programs more).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import clphys  # noqa: E402
from _report import Report  # noqa: E402  (this folder is on sys.path when run as a script)
from clphys.timeseries import _fft, _ingest, acrw_numpy, correlation  # noqa: E402
from clphys.timeseries import autocorrelation, hurst, pattern_conformity  # noqa: E402
from clphys.timeseries.correlation import PairTuning, _Direct, _staged  # noqa: E402
from clphys.timeseries.correlation import default_tuning  # noqa: E402
from clphys.timeseries.pattern import pattern_pairs  # noqa: E402
from clphys.timeseries.pattern import default_tuning as pc_default_tuning  # noqa: E402
from clphys.timeseries.pattern import local_bytes as pc_local_bytes  # noqa: E402
from clphys.timeseries.reference import (autocorrelation_numpy, hurst_numpy,  # noqa: E402
                                         mfdfa_numpy, pattern_conformity_numpy)
from clphys.timeseries import dfa, mfdfa  # noqa: E402
from clphys.timeseries._dfa_device import DFAPlan  # noqa: E402
from clphys.timeseries._dfa_finish import fluctuations  # noqa: E402
from clphys.exact import fgn_davies_harte  # noqa: E402

PC_FULL = dict(T=10**6, max_past=20, max_future=20, chi=100.0, max_history=16384)

rows: list[tuple[str, str, str]] = []
targets: list[tuple[str, str, str, bool | None]] = []   # target, goal, measured, met
failed: list[str] = []
reports: dict[int, Report] = {}          # one per device: main() makes it with --json


def emit(dev, workload, metric, value, table=None, **extra):
    """One figure as a JSON line (`extra`: more fields, e.g. peer=...); `table`: its
    text in the table printed last."""
    report = reports.get(id(dev)) or reports.setdefault(id(dev), Report.for_device(dev))
    report.add(workload, metric, value, **extra)
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


def call(fn, repeats):
    """(median seconds, phases of the median call) of a public call, after a warm-up."""
    fn()
    runs = []
    for _ in range(repeats):
        correlation.TRACE = []
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        marks = [(name, t - t0) for name, t in correlation.TRACE]
        runs.append((t1 - t0, marks + [("download and return", t1 - t0)]))
    correlation.TRACE = None
    runs.sort(key=lambda r: r[0])
    total, marks = runs[len(runs) // 2]
    phases, last = [], 0.0
    for name, at in marks:
        phases.append(f"{name} {1e3 * (at - last):.2f}")
        last = at
    return total, "; ".join(phases)


def target(name, goal, measured, ok):
    """One row of the final table; ok None: not applicable (a size other than the
    target's)."""
    targets.append((name, goal, measured, None if ok is None else bool(ok)))


# ---------------------------------------------------------------- correctness

def reporter(dev):
    """report(name, err, tol): one check's row; a failure is listed in `failed`."""
    def report(name, err, tol):
        good = bool(err <= tol)
        if not good:
            failed.append(name)
        emit(dev, f"check {name}", "max error", float(err),
             f"{err:.2e} (tol {tol:.0e}) {'ok' if good else 'FAIL'}")
        return good
    return report


def check(dev, quick):
    """The timed paths against the NumPy references; returns True when all pass."""
    ok = True
    rng = np.random.default_rng(1)
    walk = 1e4 + np.cumsum(rng.standard_normal(100_003))
    accs = ["compensated"] + (["double"] if dev.facts.fp64 else [])
    checked = reporter(dev)

    def report(name, err, tol):
        nonlocal ok
        ok &= checked(name, err, tol)

    S = hurst_numpy(walk, 64)[0]
    x = np.diff(walk)
    rho = autocorrelation_numpy(x, 64)
    for acc in accs:
        for dtype in (np.float64, np.float32):
            w = walk.astype(dtype)
            Sw = S if dtype == np.float64 else hurst_numpy(w, 64)[0]
            err = np.max(np.abs(hurst(w, 64, device=dev, _accumulate=acc).S / Sw - 1))
            report(f"hurst T=1e5 {acc} {dtype.__name__}", err, 1e-6)
        r = autocorrelation(x, 64, device=dev, _accumulate=acc).rho
        report(f"acf T=1e5 {acc}", np.max(np.abs(r - rho)), 1e-6)
        xs = x[:20_011]
        for stationary in (False, True):
            r = autocorrelation(xs, xs.size - 1, stationary=stationary, device=dev,
                                method="fft", _accumulate=acc).rho
            want = autocorrelation_numpy(xs, xs.size - 1, stationary)
            N = xs.size - np.arange(xs.size)
            tol = 1e-12 if acc == "double" else 3e-7
            scale = 1.0 if stationary else xs.size / N
            report(f"acf all lags fft {acc} {'stationary' if stationary else 'general'} "
                   f"(error / tolerance)", np.nanmax(np.abs(r - want) / (tol * scale)), 4.0)
    if dev.facts.fp64:
        h = hurst(walk[:20_011], 20_010, q=2, device=dev, method="fft").S
        report("hurst S_2 all lags fft", np.max(np.abs(h / hurst_numpy(walk[:20_011], 20_010,
                                                                         q=2)[0] - 1)), 1e-9)
    batch = np.stack([walk[i * 5_000:(i + 1) * 5_000] for i in range(8)])
    hb = hurst(batch, 50, q=[1, 3], device=dev).S
    err = max(np.max(np.abs(hb[i, j] / hurst_numpy(batch[i], 50, q=q)[0] - 1))
              for i in range(8) for j, q in enumerate((1, 3)))
    report("hurst batch 8 x 5000, q = 1, 3", err, 1e-6)
    for spec in ("pageable", "pinned", "pinned+overlap", "pinned-unmap"):
        same = np.array_equal(hurst(walk, 64, device=dev, _transfer=spec).S,
                              hurst(walk, 64, device=dev, _transfer="pageable").S)
        report(f"upload {spec} same bits", 0.0 if same else 1.0, 0.0)
    return check_pc(dev, quick, report) and ok


def check_pc(dev, quick, report):
    """Pattern conformity's timed tunings against the NumPy reference."""
    ok = True
    p = acrw_numpy(1_500, 0.044, seed=3)
    ref = pattern_conformity_numpy(p, 6, 5, 100.0, 400)
    for label, t in pc_variants(dev.facts, quick):
        try:
            r = pattern_conformity(p, 6, 5, 100.0, 400, device=dev, _tuning=t, progress=False)
        except Exception as exc:            # noqa: BLE001 - an option that does not build
            if t is None:
                raise
            report(f"pc {label} ({exc.__class__.__name__}: {str(exc)[:200]})", 1.0, 0.0)
            continue
        err = np.nanmax(np.abs(r.Xi - ref.Xi))
        ok &= bool(err <= 1e-4)
        report(f"pc {label}", err, 1e-4)
    return ok


# ---------------------------------------------------------------- tunings

def pair_variants(facts, max_lag):
    """The default and, on GPUs, the previous default (8 lags per item; on the H100 run2
    4 and 16 lags per item or 2048-value tiles were no better) and the default's shape
    with fewer groups."""
    out = [default_tuning(facts, max_lag)]
    if facts.is_gpu:
        wg = max_lag // 8
        if 32 <= wg <= min(1024, facts.max_work_group):
            out.append(PairTuning(wg=wg, lpi=8, chunk=1024, run=32))
        # the default's shape with a quarter and half of its groups (16 per compute unit)
        d = out[0]
        for G in (4 * facts.compute_units, 8 * facts.compute_units):
            out.append(dataclasses.replace(d, groups=G))
    seen, unique = set(), []
    for t in out:
        if t not in seen and t.wg <= facts.max_work_group:
            seen.add(t)
            unique.append(t)
    return unique


def pc_full_default(facts):
    """The default tuning at the full workload's size, and what it runs on the benchmark's
    real-valued walk (distinct values: the local signs stay)."""
    full = PC_FULL
    d = pc_default_tuning(facts, full["max_future"], pattern_pairs(
        full["T"], full["max_past"], full["max_history"]), full["max_past"])
    return d, d


def pc_variants(facts, quick):
    """(label, tuning): the default (tuning None: GPUs per-Δt⁻ programs, windows slid along
    τ in registers, saturated-fma sums, the local signs for this real-valued walk; CPUs
    normalised once per tile) and, on GPUs, its twins with the cmp signs and with the other
    unrolling (2 or 4 steps).  The full run takes the default and the fastest."""
    d, real = pc_full_default(facts)
    mp, mf = PC_FULL["max_past"], PC_FULL["max_future"]
    out = [("default " + pc_label(real), None)]
    if facts.is_gpu and not quick and d.slide:
        for t in (dataclasses.replace(d, sign="cmp"),
                  dataclasses.replace(d, slide=2 if d.slide == 4 else 4)):
            out.append((pc_label(t), t))
    return [(n, t) for n, t in out if t is None or pc_local_bytes(t, mp, mf) <= facts.local_mem]


def pc_label(t):
    return (f"wg={t.wg} tb={t.tb} {t.exp} {t.qform} {t.sign}"
            f"{' per Δt⁻' if t.per_past else ' one program'}{' pre' if t.pre else ''}"
            f"{f' slide{t.slide}' if t.slide else ''}{' qsw' if t.qsw else ''}"
            f"{' cellmad' if t.cellmad else ''}{f' cellsat{t.cellsat}' if t.cellsat else ''}")


def kernel_time(dev, series, kind, max_lag, tuning, repeats):
    """Seconds of the pair sums alone (the series already converted on the device)."""
    pairs, value, lag0, centred = {"hurst": (["absdiff"], "blocked", 1, False),
                                   "acf": (["product"], "float", 1, True)}[kind]
    b = _ingest.batch("x", series, max_lag + 1, "")
    run = _Direct(dev, b, max_lag, lag0, value, 1, tuning=tuning)
    with _staged(dev, run.raw_bytes(), None) as st:
        run.prepare(st, centred=centred)
        return timed(lambda: run.sums(st, pairs), repeats, dev.queue), run


# ---------------------------------------------------------------- the calls

def bench_calls(dev, T, max_lag, repeats):
    """hurst() and autocorrelation(), float32 and float64, end to end with phases, and
    their pair kernels alone (every tuning variant on GPUs)."""
    rng = np.random.default_rng(T)
    p64 = 1e4 + np.cumsum(rng.standard_normal(T))
    x64 = np.diff(p64, prepend=p64[0])
    pairs = T * max_lag
    tag = f"T=2^{T.bit_length() - 1} max_lag={max_lag}"
    results = {}
    for name, fn, data in (("hurst", hurst, p64), ("acf", autocorrelation, x64)):
        for dtype in (np.float32, np.float64):
            arr = data.astype(dtype)
            wl = f"{name} {tag} {dtype.__name__}"
            total, phases = call(lambda: fn(arr, max_lag, device=dev, progress=False), repeats)
            results[(name, dtype)] = total
            emit(dev, wl, "call s", total,
                 f"{total * 1e3:.2f} ms end to end ({pairs / total:.2e} lag-pairs/s); "
                 f"phases ms: {phases}")
        best = None
        variants = pair_variants(dev.facts, max_lag) if dev.facts.is_gpu else \
            [default_tuning(dev.facts, max_lag)]
        for t in variants:
            k, run = kernel_time(dev, data, name, max_lag, t, repeats)
            label = f"wg={t.wg} lpi={t.lpi} chunk={t.chunk} groups={run.G}"
            emit(dev, f"{name} {tag} kernel {label}", "s", k)
            if best is None or k < best[0]:
                best = (k, label, t == variants[0])
        k, label, is_default = best
        emit(dev, f"{name} {tag}", "kernel s", k,
             f"{k * 1e3:.3f} ms pair kernels alone ({pairs / k:.2e} lag-pairs/s) [{label}"
             f"{' = default' if is_default else '; NOT the default'}]")
    return results


def bench_fixed_cost(dev, repeats):
    """The per-call cost whatever the size: T = 4096, max_lag = 16 (H100, before the
    render cache: 2.7 ms hurst, 3.3 ms acf)."""
    p = 1e4 + np.cumsum(np.random.default_rng(4).standard_normal(4096))
    for name, fn, data in (("hurst", hurst, p), ("acf", autocorrelation, np.diff(p))):
        t = timed(lambda: fn(data, 16, device=dev, progress=False), max(repeats, 20))
        emit(dev, f"{name} T=4096 max_lag=16 float64 (fixed cost)", "call s", t,
             f"{t * 1e3:.2f} ms end to end")


def bench_transfers(dev, T, max_lag, repeats):
    p = (1e4 + np.cumsum(np.random.default_rng(3).standard_normal(T)))
    for spec in ("pageable", "pinned", "pinned+overlap"):
        t = timed(lambda: hurst(p, max_lag, device=dev, _transfer=spec, progress=False), repeats)
        emit(dev, f"hurst T=2^{T.bit_length() - 1} float64 upload {spec}", "call s", t,
             f"{t * 1e3:.2f} ms end to end")


def torch_acf(x):
    import torch
    d = torch.from_numpy(x).cuda()
    d = d - d.mean()
    n = d.numel()
    f = torch.fft.rfft(d, n=2 * n)
    c = torch.fft.irfft(f.real ** 2 + f.imag ** 2, n=2 * n)[:n]
    return (c / c[0]).cpu().numpy()


def cupy_acf(x):
    import cupy
    d = cupy.asarray(x)
    d = d - d.mean()
    n = d.size
    f = cupy.fft.rfft(d, n=2 * n)
    c = cupy.fft.irfft(f.real ** 2 + f.imag ** 2, n=2 * n)[:n]
    return cupy.asnumpy(c / c[0])


def _available(name):
    try:
        if name == "torch":
            import torch
            return bool(torch.cuda.is_available())
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:          # not installed, or no CUDA device
        return False


def bench_all_lags(dev, T, repeats, full):
    """All lags by FFT: ours (stationary and general ACF, S_2) against torch and CuPy."""
    x64 = np.random.default_rng(T + 1).standard_normal(T) + 0.1
    tag = f"all lags T=2^{T.bit_length() - 1}"
    ours = {}
    for dtype in (np.float32, np.float64):
        x = x64.astype(dtype)
        for stationary, errors in ((True, False), (False, False), (True, True)):
            wl = (f"acf {tag} {dtype.__name__} {'stationary' if stationary else 'general'}"
                  f"{' with errors' if errors else ''}")
            total, phases = call(lambda: autocorrelation(x, T - 1, stationary=stationary,
                                                         device=dev, progress=False,
                                                         errors=errors), repeats)
            ours[(dtype, stationary, errors)] = total
            if (stationary, errors) == (True, False):    # emitted below, with its peers
                compared = (wl, total, f"{total * 1e3:.2f} ms end to end; phases ms: {phases}")
                continue
            emit(dev, wl, "call s", total, f"{total * 1e3:.2f} ms end to end; phases ms: {phases}")
        peers = {}
        for lib, fn in (("torch", torch_acf), ("cupy", cupy_acf)):
            if not _available(lib):
                emit(dev, f"{lib} acf {tag} {dtype.__name__}", "skipped", None,
                     f"{lib} with a CUDA device is not available here")
                if lib == "torch":
                    target(f"all lags {dtype.__name__} (errors=False) vs torch.fft",
                           "<= 1.2x", "torch not available", None)
                continue
            t = timed(lambda: fn(x), repeats)
            peers[f"{lib}.fft"] = t
            mine = autocorrelation(x, T - 1, stationary=True, device=dev, errors=False).rho
            diff = float(np.max(np.abs(fn(x)[:T] - mine)))
            ours_t = ours[(dtype, True, False)]
            ratio = ours_t / t
            emit(dev, f"{lib} acf {tag} {dtype.__name__}", "call s", t,
                 f"{t * 1e3:.2f} ms ({lib}.fft, host array in, result out); clphys "
                 f"(errors=False) / {lib} = {ratio:.2f}; max |Δρ| {diff:.1e}")
            if lib == "torch":
                target(f"all lags {dtype.__name__} (errors=False) vs torch.fft", "<= 1.2x",
                       f"{ratio:.2f}x ({ours_t * 1e3:.1f} / {t * 1e3:.1f} ms)",
                       ratio <= 1.2 if full else None)
        wl, total, text = compared
        peer = None
        if peers:       # the first peer by name and value, any other as a field of it
            (name, value), *others = peers.items()
            peer = {"name": name, "value": value, **dict(others)}
        emit(dev, wl, "call s", total, text, peer=peer)
    if dev.facts.fp64:
        p = np.cumsum(x64)
        total, phases = call(lambda: hurst(p, T - 1, q=2, device=dev, progress=False,
                                           errors=False), repeats)
        emit(dev, f"hurst S_2 {tag} float64", "call s", total,
             f"{total * 1e3:.2f} ms end to end; phases ms: {phases}")
        # the FFT alone (double, the rows already on the device)
        fft = _fft.FFT(dev, _fft.fft_length(T, T - 1) // 2, 1, "double")
        import pyopencl.array as cla
        A = cla.zeros(dev.queue, 2 * fft.n, np.float64)
        B, C = cla.empty_like(A), cla.empty_like(A)

        def transforms():
            fwd, out = fft.launches(A.data, B.data, C.data, -1)
            inv, _ = fft.launches(out, B.data, C.data, +1)
            for step in fwd + [lambda: fft.power(out)] + inv:
                step()

        k = timed(transforms, repeats, dev.queue)
        emit(dev, f"fft {tag} double", "kernel s", k,
             f"{k * 1e3:.3f} ms forward + power + inverse, {len(fft.passes)} passes each "
             f"(radices {[R for R, _, _, _ in fft.passes]})")


def bench_batch(dev, n_series, T, max_lag, single, repeats, full):
    """n_series series of T points in one call, lag-pairs/s against one long series."""
    X = 1e4 + np.cumsum(np.random.default_rng(7).standard_normal((n_series, T)), axis=1)
    pairs = n_series * T * max_lag
    for name, fn, data in (("hurst", hurst, X), ("acf", autocorrelation, np.diff(X, axis=1))):
        for dtype in (np.float32, np.float64):
            arr = np.ascontiguousarray(data.astype(dtype))
            total, phases = call(lambda: fn(arr, max_lag, device=dev, progress=False), repeats)
            rate = arr.size * max_lag / total
            one = single.get((name, dtype))
            rel = "" if one is None else f"; {rate / one:.0%} of the single series' rate"
            wl = f"{name} batch {n_series}x2^{T.bit_length() - 1} max_lag={max_lag} {dtype.__name__}"
            emit(dev, wl, "call s", total,
                 f"{total * 1e3:.2f} ms ({rate:.2e} lag-pairs/s{rel}); phases ms: {phases}")
            if one is not None:
                emit(dev, wl, "share of one series' lag-pairs/s", rate / one)
                target(f"{'autocorrelation' if name == 'acf' else name}() batch "
                       f"{n_series}x2^{T.bit_length() - 1} {dtype.__name__} vs one series",
                       ">= 50% lag-pairs/s", f"{rate / one:.0%}",
                       rate >= 0.5 * one if full else None)
    del pairs


def bench_pc(dev, repeats, quick):
    gpu = dev.facts.is_gpu and not quick
    full = PC_FULL
    # T = 2^18 + 1: 4096 groups per launch of one Δt⁻ (T = 65537 under-fills an H100)
    T_try, mh_try = (min(2**18 + 1, full["T"]), full["max_history"]) if gpu else (1_500, 512)
    p = 1e4 + np.cumsum(np.random.default_rng(5).standard_normal(full["T"]))
    args = dict(max_past=full["max_past"], max_future=full["max_future"], chi=full["chi"],
                progress=False)
    triples_try = pattern_pairs(T_try, full["max_past"], mh_try)
    triples_full = pattern_pairs(full["T"], full["max_past"], full["max_history"])
    ranked = []
    variants = [v for v in pc_variants(dev.facts, quick)
                if v[1] is None or not any(v[0] in name for name in failed)]
    real_default = pc_full_default(dev.facts)[1]     # None at T_try would be smaller's
    for label, t in variants:
        k = timed(lambda: pattern_conformity(p[:T_try], max_history=mh_try, device=dev,
                                             _tuning=t or real_default, **args), 1 if gpu else 2)
        rate = triples_try / k
        emit(dev, f"pc T={T_try} max_history={mh_try} {label}", "triples/s", rate)
        ranked.append((rate, label, t))
    ranked.sort(key=lambda r: -r[0])
    wl = "pc T=1e6 20x20 chi=100 max_history=16384"
    rate, label, t = ranked[0]
    estimate = triples_full / rate
    emit(dev, wl, "extrapolated s", estimate,
         f"{estimate:.2f} s extrapolated from T={T_try}, max_history={mh_try} "
         f"({rate:.3e} (t̂,τ,Δt⁻)/s) [{label}]")
    if not gpu:
        target("pattern conformity T=1e6 20x20 chi=100 max_history=16384", "<= 2 s",
               f"{estimate:.1f} s extrapolated", None)
        return
    default = variants[0]
    for label, t in [default] + [(lb, t) for _, lb, t in ranked[:1] if lb != default[0]]:
        walls = []
        for _ in range(3):
            t0 = time.perf_counter()
            pattern_conformity(p, max_history=full["max_history"], device=dev, _tuning=t,
                               **args)
            walls.append(time.perf_counter() - t0)
        wall = statistics.median(walls)
        emit(dev, wl if t is None else f"{wl} {label}", "call s", wall,
             f"{wall:.2f} s measured end to end, median of "
             f"{' / '.join(f'{w:.3f}' for w in walls)} s [{label}]")
        if t is None:
            target("pattern conformity T=1e6 20x20 chi=100 max_history=16384", "<= 2 s",
                   f"{wall:.2f} s (the default)", wall <= 2.0)


# ---------------------------------------------------------------- DFA and MF-DFA

DFA_Q = np.linspace(-5.0, 5.0, 21)


def dfa_scales(n, count=40):
    """count log-spaced scales from 10 to n / 4 (the benchmark's; the default is one per
    octave)."""
    return np.unique(np.round(np.geomspace(10, n // 4, count)).astype(np.int64))


class DFAReport:
    """The DFA part's figures, through emit() like the rest of this script."""

    def __init__(self, dev):
        self.dev = dev

    def __call__(self, workload, metric, value, table=None):
        emit(self.dev, workload, metric, value, table)


def check_dfa(dev, out):
    """dfa()/mfdfa() against the NumPy reference (every segmentation, both accumulators)
    and against fathon and MFDFA when installed, before any timing."""
    ok = True
    x = 1.0 + fgn_davies_harte(12_000, 0.7, seed=1)
    sc = dfa_scales(x.size, 10)
    q = np.array([-4.0, -1.0, 0.0, 2.0, 4.0])
    accs = ["compensated"] + (["double"] if dev.facts.fp64 else [])
    for acc in accs:
        tol = 1e-9 if acc == "double" else 5e-6
        for segments, overlap in (("forward", False), ("both", False), (None, True)):
            m = mfdfa(x, q=q, scales=sc, order=2, overlap=overlap, segments=segments,
                      device=dev, _accumulate=acc)
            ref = mfdfa_numpy(x, sc, q, 2, segments or "forward", overlap, accumulate=acc)
            err = float(np.max(np.abs(m.Fq / ref.Fq - 1)))
            good = err <= tol
            ok &= good
            if not good:
                failed.append(f"dfa {acc} {segments or 'sliding'}")
            out(f"check dfa {acc} {segments or 'sliding'}", "max rel error", err,
                f"{err:.2e} (tol {tol:.0e}) {'ok' if good else 'FAIL'}")
    peers = _dfa_peers()
    if "fathon" in peers:
        fathon, fu = peers["fathon"]
        F = fathon.DFA(fu.toAggregated(x)).computeFlucVec(sc, polOrd=1)[1]
        err = float(np.max(np.abs(dfa(x, scales=sc, device=dev).F / F - 1)))
        out("check dfa vs fathon", "max rel error", err, f"{err:.2e}")
    if "MFDFA" in peers:
        lag, f = peers["MFDFA"].MFDFA(x, sc, order=2, q=np.array([2.0]))
        err = float(np.max(np.abs(mfdfa(x, q=2.0, scales=sc, segments="both",
                                        device=dev).Fq[0] / f[:, 0] - 1)))
        out("check mfdfa vs MFDFA", "max rel error", err, f"{err:.2e}")
    return ok


def _dfa_peers():
    peers = {}
    try:
        import fathon
        from fathon import fathonUtils
        peers["fathon"] = (fathon, fathonUtils)
    except ImportError:
        pass
    try:
        import MFDFA
        peers["MFDFA"] = MFDFA
    except ImportError:
        pass
    return peers


def _fathon_run(x, scales, order, q):
    """fathon on one series: DFA (q None) or MF-DFA; it runs the scales in parallel
    (OpenMP, all cores); returns F (n_q, n_scales)."""
    import fathon
    from fathon import fathonUtils as fu
    prof = fu.toAggregated(x)
    if q is None:
        return fathon.DFA(prof).computeFlucVec(scales, polOrd=order)[1][None]
    return fathon.MFDFA(prof).computeFlucVec(scales, q, polOrd=order)[1]


def _mfdfa_job(args):
    import MFDFA
    x, lags, order, q = args
    return MFDFA.MFDFA(x, lags, order=order, q=q)[1].T


def _mfdfa_run(pool, xs, scales, order, q, workers):
    """MFDFA (NumPy, one process per core): one series split over the scales, or a batch
    split over the series; q without |q| < 0.1 (MFDFA drops them); forward segments are
    not among its options (it always adds the backward ones)."""
    if len(xs) == 1:
        parts = [scales[i::workers] for i in range(workers) if scales[i::workers].size]
        res = list(pool.map(_mfdfa_job, [(xs[0], p, order, q) for p in parts]))
        out = np.empty((q.size, scales.size))
        for i, r in enumerate(res):
            out[:, i::workers] = r
        return out[None]
    return np.stack(list(pool.map(_mfdfa_job, [(x, scales, order, q) for x in xs])))


def _dfa_call(fn, repeats):
    """(median seconds, phases of the median call) of fn(marks)."""
    fn(None)
    runs = []
    for _ in range(repeats):
        marks = []
        t0 = time.perf_counter()
        fn(marks)
        runs.append((time.perf_counter() - t0, marks, t0))
    runs.sort(key=lambda r: r[0])
    total, marks, t0 = runs[len(runs) // 2]
    return total, marks, t0


def _dfa_timed(dev, X, scales, order, q, repeats):
    """dfa()/mfdfa() end to end (median of `repeats` after a warm-up), and the phases of
    a separate traced run of the plan (its queue finished between phases)."""
    call = (lambda: dfa(X, scales=scales, order=order, device=dev, progress=False)) if q is None \
        else (lambda: mfdfa(X, q=q, scales=scales, order=order, device=dev, progress=False))
    total = timed(call, repeats)
    b = _ingest.batch("x", X, 2, "")
    qs = (2.0,) if q is None else tuple(q)
    plan = DFAPlan(dev, b, scales, order, "forward", qs, True)

    def traced(marks):
        out = plan.run_all(marks=marks)
        if marks is not None:
            fluctuations(qs, *out)
            marks.append(("finish on the host", time.perf_counter()))

    _, marks, t0 = _dfa_call(traced, max(3, repeats // 2))
    phases, last = [], t0
    for name, at in marks:
        phases.append(f"{name} {1e3 * (at - last):.2f}")
        last = at
    return total, "; ".join(phases)


def bench_dfa(dev, quick, repeats, sizes=None):
    """DFA-1 and MF-DFA-2 of one long series and of a batch, against fathon and MFDFA;
    sizes: (values of the one series, series of the batch, values of each)."""
    import concurrent.futures
    import os
    out = DFAReport(dev)
    if not check_dfa(dev, out):
        print("# DFA checks failed: no timings", flush=True)
        return
    n1, nb, tb = sizes or ((2**18, 64, 2**12) if quick else (2**24, 512, 2**16))
    one = 1.0 + fgn_davies_harte(n1, 0.7, seed=2)
    batch = 1.0 + np.random.default_rng(3).standard_normal((nb, tb))
    workers = os.cpu_count() or 1
    peers = _dfa_peers()
    ours = {}
    for label, X in ((f"one series 2^{n1.bit_length() - 1}", one),
                     (f"batch {nb}x2^{tb.bit_length() - 1}", batch)):
        n = X.shape[-1]
        sc = dfa_scales(n)
        for kind, order, q in (("DFA-1", 1, None), ("MF-DFA-2", 2, DFA_Q)):
            for dtype in (np.float64, np.float32):
                arr = np.ascontiguousarray(X.astype(dtype))
                total, phases = _dfa_timed(dev, arr, sc, order, q, repeats)
                ours[(label, kind, dtype)] = total
                out(f"{kind} {label} {dtype.__name__} ({sc.size} scales"
                    f"{'' if q is None else ', 21 q'})", "call s", total,
                    f"{total * 1e3:.2f} ms end to end ({arr.size / total:.3g} values/s); "
                    f"phases of a traced run, ms: {phases}")
    with concurrent.futures.ProcessPoolExecutor(workers) as pool:
        for label, X, nparts in ((f"one series 2^{n1.bit_length() - 1}", one, None),
                                 (f"batch {nb}x2^{tb.bit_length() - 1}", batch, None)):
            sc = dfa_scales(X.shape[-1])
            for kind, order, q in (("DFA-1", 1, None), ("MF-DFA-2", 2, DFA_Q)):
                mine = ours[(label, kind, np.float64)]
                # the peers on a part of the work (all of it would take minutes), scaled
                if X.ndim == 1:
                    cut = X if quick else X[:n1 >> (6 if q is not None else 2)]
                    part_sc = dfa_scales(cut.size)
                    xs = [cut]
                else:
                    count = X.shape[0] if quick else \
                        max(2, X.shape[0] >> (7 if q is not None else 3))
                    xs = list(X[:count])
                    part_sc = sc
                share = sum(x.size for x in xs) / X.size
                what = f"{'all' if share == 1 else f'{share:.3g} of the values, extrapolated'}"
                if "fathon" in peers:
                    t0 = time.perf_counter()
                    F = [_fathon_run(x, part_sc, order, q) for x in xs]
                    t = (time.perf_counter() - t0) / share
                    ref = mfdfa(np.stack(xs) if len(xs) > 1 else xs[0],
                                q=2.0 if q is None else q, scales=part_sc, order=order,
                                device=dev)
                    mine_F = np.asarray(ref.Fq).reshape(len(xs), -1, part_sc.size)
                    err = float(np.nanmax(np.abs(mine_F / np.stack(F) - 1)))
                    out(f"fathon {kind} {label} float64", "call s", t,
                        f"{t:.2f} s ({what}; OpenMP over the scales, {workers} cores); "
                        f"clphys {t / mine:.0f}x faster; max |F rel diff| {err:.1e}")
                    if not quick and X.ndim == 1:
                        target(f"{kind} 2^{n1.bit_length() - 1} vs fathon (same machine)",
                               ">= 100x", f"{t / mine:.0f}x", t / mine >= 100)
                if "MFDFA" in peers:
                    qm = np.array([2.0]) if q is None else q[np.abs(q) > 0.1]
                    t0 = time.perf_counter()
                    f = _mfdfa_run(pool, xs, part_sc, order, qm, workers)
                    t = (time.perf_counter() - t0) / share
                    ref = mfdfa(np.stack(xs) if len(xs) > 1 else xs[0], q=qm, scales=part_sc,
                                order=order, segments="both", device=dev)
                    err = float(np.nanmax(np.abs(np.asarray(ref.Fq).reshape(f.shape) / f - 1)))
                    out(f"MFDFA {kind} {label} float64", "call s", t,
                        f"{t:.2f} s ({what}; {workers} processes; its segments: both ways); "
                        f"clphys {t / mine:.0f}x faster; max |F rel diff| {err:.1e}")
    for kind, limit in (("DFA-1", 50e-3), ("MF-DFA-2", 150e-3)):
        t = ours[(f"one series 2^{n1.bit_length() - 1}", kind, np.float64)]
        target(f"{kind} one series 2^{n1.bit_length() - 1} float64", f"<= {limit * 1e3:.0f} ms",
               f"{t * 1e3:.2f} ms", None if quick else t <= limit)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (PoCL, CI): ~1 minute")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", metavar="FILE", help="also append the JSON lines to FILE")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--skip-pc", action="store_true")
    ap.add_argument("--only", choices=["pc", "dfa"], help="only this part (its checks, then "
                    "its timings): pc = pattern conformity, dfa = DFA and MF-DFA")
    args = ap.parse_args(argv)
    if args.repeats < 5:
        ap.error("--repeats must be at least 5 (medians of fewer calls are noise)")
    dev = clphys.device()
    reports[id(dev)] = Report.for_device(dev, args.json)
    f = dev.facts
    print(f"# device: {dev.name} ({f.platform}, driver {f.driver}), fp64={f.fp64}, "
          f"{f.compute_units} compute units", flush=True)
    quick = args.quick or not f.is_gpu
    started = time.perf_counter()
    if args.only == "pc":
        if not args.skip_check:
            check_pc(dev, quick, reporter(dev))
        bench_pc(dev, args.repeats, quick)
        return report_all(dev, args, quick, started)
    if args.only == "dfa":
        bench_dfa(dev, quick, args.repeats)
        return report_all(dev, args, quick, started)
    if not args.skip_check:
        check(dev, quick)
    T, max_lag = (2**18, 256) if quick else (2**24, 1024)
    single = bench_calls(dev, T, max_lag, args.repeats)
    for name in ("acf", "hurst"):
        for dtype, limit in ((np.float32, 6e-3), (np.float64, 10e-3)):
            t = single[(name, dtype)]
            target(f"{'autocorrelation' if name == 'acf' else name}() {dtype.__name__} "
                   f"T=2^{T.bit_length() - 1} max_lag={max_lag}", f"<= {limit * 1e3:.0f} ms",
                   f"{t * 1e3:.2f} ms", t <= limit if not quick else None)
    rates = {k: T * max_lag / v for k, v in single.items()}
    bench_fixed_cost(dev, args.repeats)
    bench_transfers(dev, T, max_lag, args.repeats)
    bench_all_lags(dev, 2**16 if quick else 2**24, args.repeats, not quick)
    n, Tb = (64, 2**12) if quick else (512, 2**16)
    bench_batch(dev, n, Tb, max_lag, rates, args.repeats, not quick)
    if not args.skip_pc:
        bench_pc(dev, args.repeats, quick)
    bench_dfa(dev, quick, args.repeats)
    return report_all(dev, args, quick, started)


def report_all(dev, args, quick, started):
    """The table of every figure, issue 14's targets, the JSON lines."""
    width = max(len(r[0]) for r in rows)
    mwidth = max(len(r[1]) for r in rows)
    print(f"\n{'workload':<{width}}  {'metric':<{mwidth}} result")
    for wl, metric, text in rows:
        print(f"{wl:<{width}}  {metric:<{mwidth}} {text}")
    print(f"\n# targets on {dev.name} ({time.perf_counter() - started:.0f} s in all"
          f"{'; --quick sizes: not the targets' if quick else ''})")
    head = ("target", "goal", "measured", "verdict")
    table = [(n, g, m, "n/a" if ok is None else "met" if ok else "NOT MET")
             for n, g, m, ok in targets]
    widths = [max(len(r[i]) for r in [head] + table) for i in range(4)]
    for r in [head] + table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    if failed:
        print(f"# SOME CHECKS FAILED: {', '.join(failed)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
