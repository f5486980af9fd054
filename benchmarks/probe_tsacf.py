"""Probe for issue 14 (tsacf): autocorrelation() end to end as fast as hurst().

    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_tsacf.py --json $OUT/probe_tsacf.jsonl
    CLPHYS_DEVICE=portable python benchmarks/probe_tsacf.py --quick

Sections (each with its own time budget; rows past it are skipped and say so):

* calls: T = 2^24, max_lag = 1024 (--quick: 2^18, 256), float32 and float64, host NumPy
  array in, result out, median of 7 after a warm-up, with the phases of the median call:
  the default (streamed), the public call without private arguments, the unstreamed
  path, upload variants (2 MB / 1 MB copy jobs, 8 MB segments with 2 MB jobs, the small
  tail segments copied inline by the main thread as before this branch, 12 copy threads,
  the first segment in 1 MB jobs), the provisional centre from the head as before this
  branch (discarded on the e2e data at 2^24), and the default with a queue finish at
  every phase mark (splits the time after the upload); the ACF of white noise too
  (default, synced).  Every variant is first checked: hurst S and S_err bit for bit
  equal to the unstreamed call's, the ACF within 2e-7 of it, and a streamed variant must
  have streamed (else FAIL).
* torch: torch's ACF(max_lag) by FFT of the same arrays (host array in, max_lag + 1
  values out, as a torch user would write it), checked against clphys's stationary ρ.
* upload: the host copy alone (np.copyto by 16 threads into a pinned buffer) and the
  upload alone (Staged.put, pinned, in overlapping segments; and the streamed copy with
  no kernels), to compare the calls' upload with max(host copy, DMA).
* fixed: the per-call cost of both calls at T = 4096, max_lag = 16 (float64), median of
  50, interleaved twice.

Prints JSON lines as it goes and one table last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import clphys  # noqa: E402
from clphys.timeseries import _common, _transfer, autocorrelation, correlation, hurst  # noqa: E402,E501

MB = 1 << 20
BUDGET = {"calls": 55, "torch": 20, "upload": 15, "fixed": 10}
records, rows, failed = [], [], []
_deadline = [0.0]


def emit(dev, section, workload, metric, value, note=""):
    rec = {"device": dev.name, "section": section, "workload": workload, "metric": metric,
           "value": value, "note": note}
    records.append(rec)
    print(json.dumps(rec), flush=True)
    rows.append((section, workload, metric,
                 f"{value * 1e3:.3f} ms" if isinstance(value, float) and metric == "s"
                 else str(value), note))


def over(section) -> bool:
    return time.perf_counter() > _deadline[0]


class knobs:
    """Set module constants of _transfer / correlation for a block, restored after."""

    def __init__(self, **kw):
        self.kw, self.old = kw, {}

    def __enter__(self):
        for k, v in self.kw.items():
            mod = correlation if hasattr(correlation, k) and not hasattr(_transfer, k) \
                else _transfer
            self.old[k] = (mod, getattr(mod, k))
            setattr(mod, k, v)
            if k == "COPY_THREADS":
                _transfer._pool = None          # a pool of the new size
        return self

    def __exit__(self, *exc):
        for k, (mod, v) in self.old.items():
            setattr(mod, k, v)
            if k == "COPY_THREADS":
                _transfer._pool = None


def traced(fn, sync=None):
    """(seconds, [(phase, ms since the previous mark)], result) of one call."""
    correlation.TRACE = []
    correlation.TRACE_SYNC = sync
    try:
        t0 = time.perf_counter()
        res = fn()
        t1 = time.perf_counter()
        marks = correlation.TRACE
    finally:
        correlation.TRACE = None
        correlation.TRACE_SYNC = None
    phases, last = [], t0
    for name, at in marks + [("download and return", t1)]:
        phases.append((name, 1e3 * (at - last)))
        last = at
    return t1 - t0, phases, res


def median_call(fn, repeats, sync=None):
    fn()
    runs = sorted((traced(fn, sync) for _ in range(repeats)), key=lambda r: r[0])
    t, phases, _ = runs[len(runs) // 2]
    spread = f"{1e3 * runs[0][0]:.2f}-{1e3 * runs[-1][0]:.2f}"
    return t, "; ".join(f"{n} {ms:.2f}" for n, ms in phases), spread


def same(name, got, want) -> tuple[bool, str]:
    if name == "hurst":
        ok = np.array_equal(got.S, want.S) and np.array_equal(got.S_err, want.S_err)
        return ok, "S, S_err bit-identical" if ok else \
            f"S differs: max rel {np.nanmax(np.abs(got.S / want.S - 1)):.1e}"
    err = float(np.nanmax(np.abs(got.rho.astype(np.float64) - want.rho)))
    return err <= 2e-7, f"max |drho| {err:.1e}"


def variants(quick):
    """(label, call kwargs, module constants) of every timed variant."""
    k = 1 if quick else 4                   # quick: segments and jobs 1/4 as large
    out = [("stream default", {"_stream": True}, {}),
           ("public call, no private arguments", {}, {}),
           ("unstreamed", {"_stream": False}, {})]
    out += [(f"stream, {x // 1024} KB copy jobs", {"_stream": True}, {"STREAM_CHUNK": x})
            for x in (MB // 2 * k, MB // 4 * k)]
    out += [(f"stream, {2 * k} MB segments, {k // 2 or 0.5} MB jobs", {"_stream": True},
             {"STREAM_SEGMENT_BYTES": 2 * k * MB, "STREAM_CHUNK": MB // 2 * k}),
            ("stream, tail segments copied inline (before tsacf)", {"_stream": True},
             {"STREAM_TAIL_THREADED": False}),
            ("stream, 12 copy threads", {"_stream": True}, {"COPY_THREADS": 12}),
            (f"stream, first segment in {MB // 4 * k // 1024} KB jobs", {"_stream": True},
             {"STREAM_FIRST_CHUNK": MB // 4 * k}),
            ("stream, centre from the head (as before tsacf: may be discarded)",
             {"_stream": True, "_may_fall_back": True}, {"CENTRE_SAMPLE": 0})]
    if quick:
        out = [(label, kw, {**{"STREAM_SEGMENT_BYTES": MB, "STREAM_CHUNK": MB // 4,
                               "STREAM_TAIL_BYTES": MB // 8}, **kn})
               for label, kw, kn in out]
    return out


def torch_acf(x, max_lag):
    """ρ(0 .. max_lag), stationary form, by FFT: host array in, NumPy out."""
    import torch
    d = torch.from_numpy(x).cuda()
    d = d - d.mean()
    n = d.numel()
    f = torch.fft.rfft(d, n=2 * n)
    c = torch.fft.irfft(f.real ** 2 + f.imag ** 2, n=2 * n)[:max_lag + 1]
    return (c / c[0]).cpu().numpy()


def torch_ok():
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:       # noqa: BLE001 - not installed / no CUDA
        return False


def data(quick):
    """The brief's e2e data (benchmarks/probe_e2e_same_run.py): white noise plus a random
    walk's share, whose level wanders (mean 4.6, sd 2.5 at T = 2^24: the head's mean
    misled the provisional centre before this branch), for both calls; and white noise."""
    T, max_lag = (2**18, 256) if quick else (2**24, 1024)
    rng = np.random.default_rng(1)
    x64 = np.cumsum(rng.standard_normal(T)) * 1e-3 + rng.standard_normal(T)
    return T, max_lag, x64, rng.standard_normal(T)


def calls(dev, quick):
    T, max_lag, x64, noise = data(quick)
    reps = 7
    for dtype in (np.float32, np.float64):
        for name, fn, series, which in (("acf", autocorrelation, x64, "all"),
                                        ("hurst", hurst, x64, "all"),
                                        ("acf", autocorrelation, noise, "white noise")):
            arr = series.astype(dtype)
            wl = f"{name} T=2^{T.bit_length() - 1} max_lag={max_lag} {dtype.__name__}" + \
                (" white noise" if which != "all" else "")
            want = fn(arr, max_lag, device=dev, _stream=False, method="direct")
            todo = variants(quick) if which == "all" else variants(quick)[:1]
            for label, kw, kn in todo + [("stream default, synced phases",
                                          {"_stream": True}, {"sync": True})]:
                if over("calls"):
                    emit(dev, "calls", wl, label, "rest skipped")
                    break
                kn = dict(kn)
                sync = dev.queue if kn.pop("sync", False) else None
                kw = {**kw, "method": "direct"} if kw else {}
                may_fall_back = kw.pop("_may_fall_back", False)
                with knobs(**kn):
                    _, phases, got = traced(lambda: fn(arr, max_lag, device=dev, **kw))
                    ok, why = same(name, got, want)
                    streamed = any(n == "streamed pair sums" for n, _ in phases)
                    if kw.get("_stream", dev.facts.is_gpu) and not streamed:
                        if may_fall_back:
                            why += "; streamed pass DISCARDED"
                        else:
                            ok, why = False, why + "; did NOT stream"
                    if not ok:
                        failed.append(f"{wl} {label}")
                        emit(dev, "calls", wl, label, "FAIL", why)
                        continue
                    t, ph, spread = median_call(lambda: fn(arr, max_lag, device=dev, **kw),
                                                reps, sync)
                emit(dev, "calls", f"{wl} | {label}", "s", t,
                     f"[{spread}] {ph} ({why})")


def torch_section(dev, quick):
    if not torch_ok():
        emit(dev, "torch", "torch.fft", "skipped", "no torch with CUDA here")
        return
    import torch
    T, max_lag, x64, _ = data(quick)
    for dtype in (np.float32, np.float64):
        if over("torch"):
            emit(dev, "torch", "torch.fft", "rest skipped")
            return
        x = x64.astype(dtype)
        ref = autocorrelation(x, max_lag, stationary=True, device=dev, method="direct").rho
        got = torch_acf(x, max_lag)
        err = float(np.max(np.abs(got - ref)))
        tol = 1e-4 if dtype == np.float32 else 1e-7
        if err > tol:
            failed.append(f"torch {dtype.__name__}")
        t, _, spread = median_call(lambda: (torch_acf(x, max_lag), torch.cuda.synchronize()), 7)
        emit(dev, "torch", f"torch.fft ACF({max_lag}) T=2^{T.bit_length() - 1} "
             f"{dtype.__name__}", "s", t,
             f"[{spread}] vs clphys stationary rho: {err:.1e} {'ok' if err <= tol else 'FAIL'}")


def upload(dev, quick):
    """The host copy and the upload alone, for the calls' upload phase."""
    T, _, x64, _ = data(quick)
    pool = _transfer._threads()
    for dtype in (np.float32, np.float64):
        if over("upload"):
            emit(dev, "upload", "upload", "rest skipped")
            return
        x = x64.astype(dtype)
        src = x.view(np.uint8)
        wl = f"T=2^{T.bit_length() - 1} {dtype.__name__} ({x.nbytes // MB} MB)"
        with _transfer.Staged(dev, x.nbytes, _transfer.Transfer("pinned", True)) as st:
            host = st.slot.mapped[:x.nbytes]
            parts = np.array_split(np.arange(0, x.nbytes, 4096), _transfer.COPY_THREADS)
            bounds = [(int(p[0]), int(p[-1]) + 4096 if i < len(parts) - 1 else x.nbytes)
                      for i, p in enumerate(parts) if p.size]

            def copy():
                list(pool.map(lambda ab: np.copyto(host[ab[0]:ab[1]], src[ab[0]:ab[1]]),
                              bounds))
            t, _, spread = median_call(copy, 7)
            ok = np.array_equal(host, src)
            if not ok:
                failed.append(f"host copy {wl}")
            emit(dev, "upload", f"host copy into pinned memory, {len(bounds)} threads, {wl}",
                 "s", t, f"[{spread}] {'ok' if ok else 'FAIL'}")
        for label, streamed in (("upload alone: pinned, 16 MB segments overlapped", False),
                                ("upload alone: streamed copy, no kernels", True)):
            def up():
                with _transfer.Staged(dev, x.nbytes, _transfer.default(dev, x.nbytes)) as st:
                    st.put([(0, x)], (lambda end: None) if streamed else None)
                    out = st
                return out
            t, _, spread = median_call(up, 7)
            with _transfer.Staged(dev, x.nbytes, _transfer.default(dev, x.nbytes)) as st:
                st.put([(0, x)], (lambda end: None) if streamed else None)
                back = np.empty_like(x)
                cl.enqueue_copy(dev.queue, back, st.buffer, is_blocking=True)
            ok = np.array_equal(back, x)
            if not ok:
                failed.append(f"{label} {wl}")
            emit(dev, "upload", f"{label}, {wl}", "s", t,
                 f"[{spread}] {'ok' if ok else 'FAIL'} "
                 f"(path {_transfer.default(dev, x.nbytes).name})")


def fixed(dev, quick):
    """The per-call cost at T = 4096, max_lag = 16 (float64), median of 50, interleaved."""
    p = 1e4 + np.cumsum(np.random.default_rng(4).standard_normal(4096))
    for _ in range(2):
        for name, fn, series in (("hurst", hurst, p), ("acf", autocorrelation, np.diff(p))):
            if over("fixed"):
                emit(dev, "fixed", name, "rest skipped")
                return
            t, ph, spread = median_call(lambda: fn(series, 16, device=dev, progress=False), 50)
            emit(dev, "fixed", f"{name} T=4096 max_lag=16 float64 (fixed cost), default", "s",
                 t, f"[{spread}] {ph}")


SECTIONS = {"calls": calls, "torch": torch_section, "upload": upload, "fixed": fixed}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (PoCL)")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--only", nargs="*", choices=list(SECTIONS))
    args = ap.parse_args(argv)
    dev = clphys.device()
    quick = args.quick or not dev.facts.is_gpu
    print(f"# device: {dev.name} ({dev.facts.platform}, driver {dev.facts.driver}), "
          f"copy threads {_transfer.COPY_THREADS}", flush=True)
    for name in args.only or list(SECTIONS):
        t0 = time.perf_counter()
        _deadline[0] = t0 + BUDGET[name] * (3 if quick else 1)
        try:
            SECTIONS[name](dev, quick)
        except Exception as exc:     # noqa: BLE001 - report, go on with the next section
            import traceback
            traceback.print_exc()
            failed.append(name)
            emit(dev, name, "section", "error", f"{exc.__class__.__name__}: {exc}")
        emit(dev, name, "section", "seconds", round(time.perf_counter() - t0, 1))
    print()
    w = max(len(r[1]) for r in rows)
    for section, wl, metric, value, note in rows:
        print(f"{section:<8} {wl:<{w}} {metric:<6} {value:>12}  {note}")
    if failed:
        print(f"# FAILED: {', '.join(failed)}")
    if args.json:
        with open(args.json, "w") as fh:
            for rec in records:
                fh.write(json.dumps(rec) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
