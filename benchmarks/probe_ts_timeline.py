"""Issue 14, the float32 single calls: where the time of hurst() / autocorrelation() goes
(T = 2^24, max_lag = 1024, the data of probe_e2e_same_run.py), and ways to feed the
pinned upload.

    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_ts_timeline.py timeline
    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_ts_timeline.py floors
    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_ts_timeline.py variants [rounds]
    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_ts_timeline.py lags

timeline: one call's events on a profiling queue (each copy job's start and end on the
host, each DMA and kernel on the device, mapped to host time through the events' queued
stamps), for the median of 7 calls; its own process, since the profiling queue replaces
the device's queue.  lags: the same for the autocorrelation of all lags by FFT.
floors: the pieces alone: 64 MB copied by 4-16 threads into the pinned buffer, its DMA,
both at once on two buffers, the driver's pageable copy from one thread and from four.
variants: other streamed segment plans (_transfer.STREAM_SEGMENT_BYTES, STREAM_TAIL_BYTES;
earlier runs: copy thread counts and switch intervals), end to end, each checked bit for
bit against the first's results; interleaved rounds, median of 7 after a warm-up.
"""
import statistics
import sys
import time

import numpy as np
import pyopencl as cl

import clphys
import clphys.timeseries as ts
from clphys.timeseries import _transfer as X
from clphys.timeseries import correlation as C

import os
T = 1 << int(os.environ.get("PROBE_LOG2_T", 24))
# PROBE_FORCE=1: the GPU's path (pinned, streamed) on any device, to try the probe on PoCL
THREADS, SWITCH = X.COPY_THREADS, X.SWITCH_INTERVAL         # the defaults
FORCE = dict(_transfer="pinned+overlap", _stream=True) if os.environ.get("PROBE_FORCE") else {}
rng = np.random.default_rng(1)
x64 = np.cumsum(rng.standard_normal(T)) * 1e-3 + rng.standard_normal(T)
x32 = x64.astype(np.float32)
CALLS = {f"{name} {x.dtype}": (lambda f=f, x=x: f(x, 1024, progress=False, **FORCE))
         for x in (x32, x64) for name, f in (("acf", ts.autocorrelation), ("hurst", ts.hurst))}


def timed(f, n=7):
    f()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        out.append(1e3 * (time.perf_counter() - t))
    return out


def timeline(calls=None):
    dev = clphys.current_device()
    prof = cl.command_queue_properties.PROFILING_ENABLE
    dev.queue = cl.CommandQueue(dev.context, dev.cl_device, properties=prof)
    X._copy_queues[dev] = cl.CommandQueue(dev.context, dev.cl_device, properties=prof)
    log, jobs = [], []
    copy0, kern0 = cl.enqueue_copy, cl.enqueue_nd_range_kernel

    def copy(q, dst, src, **kw):
        t = time.perf_counter()
        ev = copy0(q, dst, src, **kw)
        arr = src if isinstance(src, np.ndarray) else dst
        what = ("H2D" if isinstance(src, np.ndarray) else "D2H" if isinstance(dst, np.ndarray)
                else "D2D")
        size = arr.nbytes if isinstance(arr, np.ndarray) else kw.get("byte_count", 0)
        log.append((f"{what} {size / 2**20:.2f}MB q{'c' if q is not dev.queue else 'm'}", ev, t))
        return ev

    def kern(q, k, g, l, **kw):
        t = time.perf_counter()
        ev = kern0(q, k, g, l, **kw)
        log.append((k.function_name, ev, t))
        return ev

    cl.enqueue_copy, cl.enqueue_nd_range_kernel = copy, kern

    def timed_work(box):                    # _Copier._work, timing each slice
        while True:
            dst, src, done = box.get()
            t = time.perf_counter()
            np.copyto(dst, src)
            jobs.append((t, time.perf_counter(), dst.nbytes))
            done.put(None)
    X._Copier._work = staticmethod(timed_work)
    src = x32.view(np.uint8)

    def upload_only():                      # the streamed upload, no kernels behind it
        with X.Staged(dev, src.size, X.Transfer("pinned", True)) as st:
            st.put([(0, src)], on_segment=lambda end: C._mark(f"sent up to {end >> 20} MB"))
            dev.queue.finish()
    calls = calls or dict(CALLS, **{"upload only float32": upload_only})
    for name, call in calls.items():
        runs = []
        for _ in range(8):
            log.clear(), jobs.clear()
            C.TRACE = []
            t0 = time.perf_counter()
            call()
            t1 = time.perf_counter()
            runs.append((t1 - t0, t0, t1, list(log), list(jobs), list(C.TRACE)))
        runs = sorted(runs[1:], key=lambda r: r[0])
        total, t0, t1, events, cjobs, phases = runs[len(runs) // 2]
        off = statistics.median(t - ev.profile.queued * 1e-9 for _, ev, t in events)
        ms = lambda t: 1e3 * (t - t0)                                   # noqa: E731
        dms = lambda ns: ms(ns * 1e-9 + off)                            # noqa: E731
        print(f"\n== {name}: {1e3 * total:.2f} ms (median of 7); times in ms from the call")
        if cjobs:
            s = sorted(cjobs)
            print(f"copy slices: {len(s)}, {s[0][2] / 2**20:.2f}-{max(j[2] for j in s) / 2**20:.2f}"
                  f" MB; first start {ms(s[0][0]):.3f}, ends "
                  + " ".join(f"{ms(j[1]):.2f}" for j in sorted(s, key=lambda j: j[1])))
        rows = []
        for label, ev, t in events:
            p = ev.profile
            rows.append((dms(p.start), dms(p.end), ms(t), label))
        for a, b, e, label in sorted(rows):
            print(f"  {a:7.3f} {b:7.3f}  ({b - a:6.3f})  enq {e:7.3f}  {label}")
        for label, t in phases:
            print(f"  phase {ms(t):7.3f}  {label}")
        busy = lambda f: sum(b - a for a, b, _, lab in rows if f(lab))  # noqa: E731
        print(f"  summary: copy jobs end {max(ms(j[1]) for j in cjobs) if cjobs else 0:.2f}; "
              f"H2D busy {busy(lambda s: s.startswith('H2D')):.2f}; pair sums busy "
              f"{busy(lambda s: 'pair_sums' in s):.2f}; other kernels "
              f"{busy(lambda s: s.startswith('ts_') and 'pair_sums' not in s):.2f}; "
              f"last device end {max(b for _, b, _, _ in rows):.2f}; return {ms(t1):.2f}")


def floors():
    dev = clphys.current_device()
    q = dev.queue
    src = x32.view(np.uint8)
    nbytes = src.size
    slots = [X._Slot(dev, nbytes), X._Slot(dev, nbytes)]
    a, b = (s.map(q) for s in slots)
    a[:] = 1
    b[:] = 1
    dst = slots[0].device.data
    res = {}

    def threads(n):
        def copy():
            X.COPY_THREADS = n
            X._start_copy(a[:nbytes], src).wait()
        return copy
    for n in (4, 8, 12, 16):
        res[f"{n} copy threads, 64 MB into pinned"] = timed(threads(n))
    X.COPY_THREADS = THREADS

    def segmented():
        copies = [X._start_copy(a[lo:hi], src[lo:hi])
                  for lo, hi in X.stream_segments(0, nbytes)]
        [c.wait() for c in copies]
    res[f"{THREADS} copy threads, 64 MB in the stream's segments"] = timed(segmented)

    def staged():                   # the real upload, streamed, with no kernels behind it
        with X.Staged(dev, nbytes, X.Transfer("pinned", True)) as st:
            st.put([(0, src)], on_segment=lambda end: None)
            dev.queue.finish()
    res["a streamed upload (Staged.put), no kernels"] = timed(staged)
    res["DMA 64 MB from pinned"] = timed(
        lambda: cl.enqueue_copy(q, dst, a[:nbytes], is_blocking=True))
    q2 = cl.CommandQueue(dev.context, dev.cl_device)

    def both():
        ev = cl.enqueue_copy(q2, dst, b[:nbytes], is_blocking=False)
        X._start_copy(a[:nbytes], src).wait()
        ev.wait()
    res["threads copy into A while DMA from B"] = timed(both)
    res["pageable DMA 64 MB, one thread"] = timed(
        lambda: cl.enqueue_copy(q, dst, src, is_blocking=True))
    queues = [cl.CommandQueue(dev.context, dev.cl_device) for _ in range(4)]
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(4)

    def four():
        part = nbytes // 4
        fs = [pool.submit(cl.enqueue_copy, queues[i], dst, src[i * part:(i + 1) * part],
                          dst_offset=i * part, is_blocking=True) for i in range(4)]
        [f.result() for f in fs]
    res["pageable DMA 64 MB, four threads and queues"] = timed(four)
    for k, v in res.items():
        print(f"{k:48s} median {statistics.median(v):6.2f} ms  min {min(v):6.2f}", flush=True)


def variants(rounds):
    """Streamed segment sizes, end to end."""
    segment, tail = X.STREAM_SEGMENT_BYTES, X.STREAM_TAIL_BYTES
    setups = {f"segments {seg >> 20} MB, tail to {t >> 20} MB": (THREADS, SWITCH, seg, t)
              for seg, t in ((segment, tail), (16 << 20, 2 << 20), (16 << 20, 4 << 20),
                             (8 << 20, 0), (32 << 20, 0), (32 << 20, 8 << 20))}

    def apply(n, sw, seg=segment, t=tail):
        X.COPY_THREADS, X.SWITCH_INTERVAL = n, sw
        X.STREAM_SEGMENT_BYTES, X.STREAM_TAIL_BYTES = seg, t

    def values(res):
        return [np.asarray(v) for v in vars(res).values() if isinstance(v, np.ndarray)]
    ref = {}
    for label, setup in setups.items():
        apply(*setup)
        for name, call in CALLS.items():
            got = values(call())
            ref.setdefault(name, got)
            if not all(np.array_equal(a, b, equal_nan=True) for a, b in zip(ref[name], got)):
                print(f"check {label} {name}: DIFFERENT", flush=True)
    print("checks done (only differences are printed)", flush=True)
    table = {}
    for r in range(rounds):
        for label, setup in setups.items():
            apply(*setup)
            for name, call in CALLS.items():
                table.setdefault((label, name), []).append(statistics.median(timed(call)))
    apply(THREADS, SWITCH)
    names = list(CALLS)
    print(f"\n{'ms, median of 7 per round':28s}" + "".join(f"{n:>24s}" for n in names))
    for label in setups:
        print(f"{label:28s}" + "".join(
            f"{' / '.join(f'{v:.2f}' for v in table[(label, name)]):>24s}" for name in names))


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "variants"
    if mode == "timeline":
        timeline()
    elif mode == "lags":                    # all lags by FFT (errors=False), as the benchmark
        if os.environ.get("PROBE_HOLD"):       # the pool keeps this many GiB between calls
            trim = C._common.trim_pool
            C._common.trim_pool = lambda dev, keep=int(os.environ["PROBE_HOLD"]) << 30: \
                trim(dev, keep)
        timeline({f"acf all lags {x.dtype}": (lambda x=x: ts.autocorrelation(
            x, x.size - 1, stationary=True, progress=False, errors=False))
            for x in (x32, x64)})
    elif mode == "floors":
        floors()
    else:
        variants(int(sys.argv[2]) if len(sys.argv) > 2 else 3)
