"""Probe for issue 14 (tsstream): hurst() and autocorrelation() end to end with the pair
sums streamed over the upload segments, against the unstreamed path and torch's FFT.

    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_tsstream.py --json $OUT/probe_tsstream.jsonl
    CLPHYS_DEVICE=portable python benchmarks/probe_tsstream.py --quick

Sections (each with its own time budget; rows past it are skipped and say so):

* calls: T = 2^24, max_lag = 1024 (--quick: 2^18, 256), float32 and float64, host NumPy
  array in, result out, median of 7 after a warm-up, with the phases of the median call:
  the unstreamed path (_stream=False), the default (16 MB segments, the last one halved
  down to 2 MB, 4 MB copy jobs of all segments queued at once, a copy queue), then variants
  (segment size; the ordered copy: each thread's share segment by segment; last segment
  not halved; one queue; 8 threads), one with a queue finish at every phase mark
  (splits the time after the upload into pair sums and finish); torch's FFT ACF of the
  same array (all lags) in the same run.  Every variant is first checked: hurst S bit for
  bit equal to the unstreamed S, the ACF within 2e-7 of it, and a streamed variant must
  have streamed (else FAIL).
* fallback: a series whose head misleads the provisional centre/scale (a jump of 1e6 sigma
  after the head; values 2^-100 then normal ones): the streamed-then-recomputed call
  against the unstreamed one (same results required).
* fixed: the per-call cost at T = 4096, max_lag = 16 (float64), median of 50, the default
  (one segment, streamed: no mean pass, one wait), the unstreamed path, and the default
  with the small per-call arrays sent every call (_common.SMALL_BYTES = 0), interleaved.

Prints JSON lines as it goes and one table last.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

import clphys  # noqa: E402
from clphys.timeseries import _common, _transfer, autocorrelation, correlation, hurst  # noqa: E402,E501

MB = 1 << 20
BUDGET = {"calls": 100, "fallback": 15, "fixed": 15}
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
            mod = _transfer
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
    seg = [256 * 1024, MB, 4 * MB] if quick else [8 * MB, 16 * MB, 32 * MB, 64 * MB]
    s = seg[1]                  # the default: 16 MB on the GPU
    out = [("unstreamed", {"_stream": False}, {}),
           ("stream default", {"_stream": True}, {})]
    out += [(f"stream {x // 1024} KB", {"_stream": True}, {"STREAM_SEGMENT_BYTES": x})
            for x in seg if x != s]
    seg_s = {"STREAM_SEGMENT_BYTES": s}
    out += [(f"stream {s // 1024} KB, ordered copy (threads' shares, segment by segment)",
             {"_stream": True}, {**seg_s, "STREAM_CHUNK": None}),
            (f"stream {s // 1024} KB, last segment not halved", {"_stream": True},
             {**seg_s, "STREAM_TAIL_BYTES": 0}),
            (f"stream {s // 1024} KB, one queue", {"_stream": True},
             {**seg_s, "COPY_QUEUE": False}),
            (f"stream {s // 1024} KB, 8 threads", {"_stream": True},
             {**seg_s, "COPY_THREADS": 8})]
    return out


def torch_acf(x):
    import torch
    d = torch.from_numpy(x).cuda()
    d = d - d.mean()
    n = d.numel()
    f = torch.fft.rfft(d, n=2 * n)
    c = torch.fft.irfft(f.real ** 2 + f.imag ** 2, n=2 * n)[:n]
    return (c / c[0]).cpu().numpy()


def torch_ok():
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:       # noqa: BLE001 - not installed / no CUDA
        return False


def calls(dev, quick):
    T, max_lag = (2**18, 256) if quick else (2**24, 1024)
    rng = np.random.default_rng(T)
    p64 = 1e4 + np.cumsum(rng.standard_normal(T))
    x64 = np.diff(p64, prepend=p64[0])
    reps = 7
    for dtype in (np.float32, np.float64):
        for name, fn, data in (("acf", autocorrelation, x64), ("hurst", hurst, p64)):
            arr = data.astype(dtype)
            wl = f"{name} T=2^{T.bit_length() - 1} max_lag={max_lag} {dtype.__name__}"
            want = fn(arr, max_lag, device=dev, _stream=False)
            for label, kw, kn in variants(quick) + [("stream default, synced phases",
                                                     {"_stream": True}, {"sync": True})]:
                if over("calls"):
                    emit(dev, "calls", wl, label, "rest skipped")
                    break
                sync = dev.queue if kn.pop("sync", False) else None
                with knobs(**kn):
                    _, phases, got = traced(lambda: fn(arr, max_lag, device=dev, **kw))
                    ok, why = same(name, got, want)
                    streamed = any(n == "streamed pair sums" for n, _ in phases)
                    if kw["_stream"] and not streamed:
                        ok, why = False, why + "; did NOT stream"
                    if not ok:
                        failed.append(f"{wl} {label}")
                        emit(dev, "calls", wl, label, "FAIL", why)
                        continue
                    t, ph, spread = median_call(lambda: fn(arr, max_lag, device=dev, **kw),
                                                reps, sync)
                emit(dev, "calls", f"{wl} | {label}", "s", t,
                     f"[{spread}] {ph} ({why})")
        if name == "hurst" and torch_ok() and not over("calls"):
            x = x64.astype(dtype)
            ref = autocorrelation(x, max_lag, stationary=True, device=dev).rho
            got = torch_acf(x)[:max_lag + 1]
            err = float(np.max(np.abs(got - ref)))
            tol = 1e-4 if dtype == np.float32 else 1e-7
            if err > tol:
                failed.append(f"torch {dtype.__name__}")
            import torch
            t, _, spread = median_call(lambda: (torch_acf(x), torch.cuda.synchronize()), reps)
            emit(dev, "calls", f"torch.fft acf all lags T=2^{T.bit_length() - 1} "
                 f"{dtype.__name__}", "s", t,
                 f"[{spread}] vs clphys stationary rho: {err:.1e} "
                 f"{'ok' if err <= tol else 'FAIL'}")
        elif name == "hurst":
            emit(dev, "calls", "torch.fft", "skipped", "no torch with CUDA here")


def fallback(dev, quick):
    T, max_lag = (2**18, 256) if quick else (2**24, 1024)
    rng = np.random.default_rng(7)
    x = rng.standard_normal(T)
    jump = x.copy()
    jump[2 * correlation.HEAD_VALUES:] += 1e6
    tiny = x.copy()
    tiny[:correlation.HEAD_VALUES] *= 2.0 ** -100
    for label, fn, data in (("acf, jump of 1e6 sigma after the head", autocorrelation, jump),
                            ("hurst, 2^-100 head", hurst, tiny)):
        for dtype in (np.float32, np.float64):
            if over("fallback"):
                emit(dev, "fallback", label, "rest skipped")
                return
            arr = data.astype(dtype)
            want = fn(arr, max_lag, device=dev, _stream=False)
            _, phases, got = traced(lambda: fn(arr, max_lag, device=dev, _stream=True))
            fell = any(n == "streamed pass discarded" for n, _ in phases)
            ok = fell and (np.array_equal(got.rho, want.rho) if hasattr(got, "rho")
                           else np.array_equal(got.S, want.S))
            wl = f"{label} T=2^{T.bit_length() - 1} {dtype.__name__}"
            if not ok:
                failed.append(wl)
                emit(dev, "fallback", wl, "FAIL", f"fell back: {fell}; same result: {ok}")
                continue
            for tag, st in (("streamed, fell back", True), ("unstreamed", False)):
                t, ph, spread = median_call(lambda: fn(arr, max_lag, device=dev, _stream=st), 5)
                emit(dev, "fallback", f"{wl} | {tag}", "s", t, f"[{spread}] {ph}")


def fixed(dev, quick):
    p = 1e4 + np.cumsum(np.random.default_rng(4).standard_normal(4096))
    for name, fn, data in (("hurst", hurst, p), ("acf", autocorrelation, np.diff(p))):
        for stream, small in [(None, 4096), (False, 4096), (None, 0)] * 2:   # interleaved
            if over("fixed"):
                emit(dev, "fixed", name, "rest skipped")
                return
            _common.SMALL_BYTES = small
            t, ph, spread = median_call(lambda: fn(data, 16, device=dev, progress=False,
                                                   _stream=stream), 50)
            _common.SMALL_BYTES = 4096
            emit(dev, "fixed", f"{name} T=4096 max_lag=16 float64 (fixed cost) | "
                 f"{'default (streamed)' if stream is None else 'unstreamed'}"
                 f"{'' if small else ', small arrays sent every call'}", "s", t,
                 f"[{spread}] {ph}")


SECTIONS = {"calls": calls, "fallback": fallback, "fixed": fixed}


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
