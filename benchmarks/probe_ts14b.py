"""Phase-1 probe for the issue-14 follow-up (branch ts14b): measures, in one run of at
most ~3 minutes on an H100, what decides how hurst(), autocorrelation() and
pattern_conformity() get to their end-to-end targets.  docs/timeseries.md says what each
section decides.

    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_ts14b.py --json $OUT/probe_ts14b.jsonl
    CLPHYS_DEVICE=portable python benchmarks/probe_ts14b.py --quick      # < 1 min on PoCL

Sections (each prints rows of one table; every figure is a median):
  env     THP settings, cores, numpy
  host    host memcpy GB/s: resident -> resident / pinned (mapped ALLOC_HOST_PTR) by
          1..16 threads, np.copyto vs ctypes.memmove, chunk sizes; into fresh np.empty
          arrays (page faults) and ways around them (MADV_POPULATE_WRITE, MAP_POPULATE)
  dma     pinned -> device, pageable -> device, device -> pinned / resident / fresh,
          CL_MEM_USE_HOST_PTR, a kernel reading ALLOC_HOST_PTR memory directly
  pipe    Staged.put (copy into pinned overlapped with the DMA) by segment size, copy
          chunk, threads and copy function
  calls   fixed cost of a tiny call; hurst()/autocorrelation() at T = 2^24, max_lag = 1024
          with phases (this branch's defaults)
  pairs   the pair kernels: tuning x groups G x jackknife blocks K (kernel alone), and
          sliced vs one launch vs kernel alone
  lags    all lags by FFT: the call, its steps one by one (upload, moments, FFT, finish,
          downloads fresh / touched / pageable), the pool kept, FFT radix/columns, torch
          and CuPy split into transfers and device work
  pc      pattern conformity kernel variants (Δt⁻ compiled in, mad Q, compare signs) at
          T = 65537, 20 x 20, max_history = 16384, each checked against NumPy
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import clphys  # noqa: E402
from clphys.timeseries import _common, _fft, _ingest, correlation as C  # noqa: E402
from clphys.timeseries import _transfer as X  # noqa: E402
from clphys.timeseries import autocorrelation, hurst  # noqa: E402
from clphys.timeseries import pattern as PC  # noqa: E402
from clphys.timeseries.reference import pattern_conformity_numpy  # noqa: E402
from bench_timeseries import _available, call, cupy_acf, torch_acf  # noqa: E402

MB = 1 << 20
records, rows = [], []
START = time.perf_counter()
BUDGET = 170.0            # seconds; later sections are skipped past it


def emit(dev, section, workload, metric, value, note=""):
    rec = {"device": dev.name if dev else "", "section": section, "workload": workload,
           "metric": metric, "value": value}
    if note:
        rec["note"] = note
    records.append(rec)
    shown = f"{value:.4g}" if isinstance(value, float) else str(value)
    rows.append((section, workload, metric, shown, note))
    print(json.dumps(rec), flush=True)


def median_time(fn, reps=5, warm=1, sync=None):
    for _ in range(warm):
        fn()
        if sync:
            sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


# seconds each section may take at most on a GPU (its later measurements are skipped)
SECTION_BUDGET = {"host": 15, "dma": 8, "pipe": 15, "calls": 20, "pc": 50, "lags": 35,
                  "pairs": 35}
_deadline = [float("inf")]


def over_budget(section):
    now = time.perf_counter()
    if now - START > BUDGET or now > _deadline[0]:
        print(f"# {section}: rest skipped (time budget spent)", flush=True)
        return True
    return False


# ---------------------------------------------------------------- env

def env(dev, quick=False):
    for f in ("enabled", "defrag"):
        try:
            v = Path(f"/sys/kernel/mm/transparent_hugepage/{f}").read_text().strip()
        except OSError as exc:
            v = f"n/a ({exc.__class__.__name__})"
        emit(dev, "env", f"THP {f}", "setting", v)
    emit(dev, "env", "cpus", "count", f"{os.cpu_count()} (affinity "
         f"{len(os.sched_getaffinity(0))})")
    emit(dev, "env", "numpy", "version", np.__version__)
    f = dev.facts
    emit(dev, "env", "device", "facts", f"{dev.name}; {f.platform}; driver {f.driver}; "
         f"CU {f.compute_units}; fp64 {f.fp64}; local {f.local_mem}")


# ---------------------------------------------------------------- host copies

_libc = ctypes.CDLL(None, use_errno=True)
MADV_HUGEPAGE, MADV_POPULATE_WRITE = 14, 23


def _pieces(n, parts, align=4096):
    step = -(-n // parts // align) * align
    return [(a, min(n, a + step)) for a in range(0, n, step)]


def threaded_copy(pool, dst, src, threads, how="copyto", chunk=None):
    """dst[:] = src (uint8 views) by `threads` threads: equal contiguous parts, or chunks
    of `chunk` bytes handed out in order; np.copyto or ctypes.memmove."""
    n = src.size
    parts = _pieces(n, threads) if chunk is None else [(a, min(n, a + chunk))
                                                       for a in range(0, n, chunk)]
    if how == "copyto":
        def job(a, b):
            np.copyto(dst[a:b], src[a:b])
    else:
        d0, s0 = dst.ctypes.data, src.ctypes.data

        def job(a, b):
            ctypes.memmove(d0 + a, s0 + a, b - a)
    if threads == 1:
        for a, b in parts:
            job(a, b)
        return
    for f in [pool.submit(job, a, b) for a, b in parts]:
        f.result()


def pinned_array(dev, nbytes):
    mf = cl.mem_flags
    buf = cl.Buffer(dev.context, mf.READ_WRITE | mf.ALLOC_HOST_PTR, nbytes)
    arr, _ = cl.enqueue_map_buffer(dev.queue, buf, cl.map_flags.WRITE | cl.map_flags.READ, 0,
                                   (nbytes,), np.uint8, is_blocking=True)
    return buf, arr


def host(dev, quick):
    size = 8 * MB if quick else 128 * MB
    src = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)
    dst = np.ones(size, np.uint8)
    pbuf, pinned = pinned_array(dev, size)
    pinned[:] = 1
    pools = {n: ThreadPoolExecutor(n) for n in (2, 4, 8, 16)}
    reps = 3 if quick else 5
    for name, target in (("resident", dst), ("pinned", pinned)):
        for how in ("copyto", "memmove"):
            for n in (1, 2, 4, 8, 16):
                if over_budget("host"):
                    return
                t = median_time(lambda: threaded_copy(pools.get(n), target, src, n, how), reps)
                emit(dev, "host", f"copy {size // MB} MB -> {name}, {n} threads, {how}",
                     "GB/s", size / t / 1e9)
        for n, chunk in ((8, MB), (8, 4 * MB), (16, MB), (16, 4 * MB)):
            t = median_time(lambda: threaded_copy(pools[n], target, src, n, "copyto", chunk),
                            reps)
            emit(dev, "host", f"copy {size // MB} MB -> {name}, {n} threads, copyto, "
                 f"{chunk // MB} MB chunks", "GB/s", size / t / 1e9)

    # fresh destinations: what every result array of a call pays
    def fresh(kind, n):
        def run():
            if kind == "mmap-populate":
                mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
                               | getattr(mmap, "MAP_POPULATE", 0x8000))
                out = np.frombuffer(mm, np.uint8)
            else:
                out = np.empty(size, np.uint8)
                if kind in ("populate", "hugepage"):
                    a = out.ctypes.data
                    lo = -(-a // 4096) * 4096
                    hi = (a + size) // 4096 * 4096
                    adv = MADV_POPULATE_WRITE if kind == "populate" else MADV_HUGEPAGE
                    if _libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), adv):
                        raise OSError(ctypes.get_errno(), "madvise")
            threaded_copy(pools.get(n), out, src, n)
            return out
        return run

    for kind in ("empty", "hugepage", "populate", "mmap-populate"):
        for n in (1, 8, 16):
            try:
                t = median_time(fresh(kind, n), reps)
                emit(dev, "host", f"copy {size // MB} MB -> fresh ({kind}), {n} threads",
                     "GB/s", size / t / 1e9)
            except OSError as exc:
                emit(dev, "host", f"copy -> fresh ({kind})", "error", str(exc))
                break
    t = median_time(lambda: np.empty(size, np.uint8), reps)
    emit(dev, "host", f"np.empty({size // MB} MB) alone", "ms", t * 1e3)
    for p in pools.values():
        p.shutdown()
    pinned.base.release()
    del pbuf


# ---------------------------------------------------------------- transfers

def dma(dev, quick):
    q = dev.queue
    size = 8 * MB if quick else 128 * MB
    reps = 3 if quick else 5
    src = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)
    touched = np.ones(size, np.uint8)
    dbuf = cl.Buffer(dev.context, cl.mem_flags.READ_WRITE, size)
    pbuf, pinned = pinned_array(dev, size)
    pinned[:] = src
    sync = q.finish
    for nb in ([size] if quick else [16 * MB, 64 * MB, size]):
        cases = {
            "h2d from mapped pinned": lambda: cl.enqueue_copy(q, dbuf, pinned[:nb]),
            "h2d pinned buffer -> device buffer": lambda: cl.enqueue_copy(
                q, dbuf, pbuf, byte_count=nb),
            "h2d pageable (resident numpy)": lambda: cl.enqueue_copy(q, dbuf, src[:nb]),
            "d2h into mapped pinned": lambda: cl.enqueue_copy(q, pinned[:nb], dbuf),
            "d2h into resident numpy": lambda: cl.enqueue_copy(q, touched[:nb], dbuf),
            "d2h into fresh np.empty": lambda: cl.enqueue_copy(q, np.empty(nb, np.uint8), dbuf),
        }
        for name, fn in cases.items():
            t = median_time(fn, reps, sync=sync)
            emit(dev, "dma", f"{name}, {nb // MB} MB", "GB/s", nb / t / 1e9)
    # the caller's memory handed to the driver
    mf = cl.mem_flags

    def use_host_ptr(copy):
        b = cl.Buffer(dev.context, mf.READ_ONLY | mf.USE_HOST_PTR, hostbuf=src)
        if copy:
            cl.enqueue_copy(q, dbuf, b, byte_count=size)
        q.finish()
        b.release()
    for copy in (False, True):
        t = median_time(lambda: use_host_ptr(copy), reps)
        emit(dev, "dma", f"USE_HOST_PTR create{' + copy to device' if copy else ''}, "
             f"{size // MB} MB", "ms", t * 1e3, f"{size / t / 1e9:.1f} GB/s")
    # a kernel reading ALLOC_HOST_PTR memory straight (zero copy?) vs device memory
    prg = cl.Program(dev.context, """
        __kernel void rd(__global const uint4 *x, __global uint *out, const uint n) {
            uint4 s = (uint4)(0); const uint g = get_global_size(0);
            for (uint i = get_global_id(0); i < n; i += g) s ^= x[i];
            out[get_global_id(0)] = s.x ^ s.y ^ s.z ^ s.w; }""").build()
    out = cl.Buffer(dev.context, mf.READ_WRITE, 4 * 65536)
    n16 = size // 16
    for name, buf in (("device buffer", dbuf), ("ALLOC_HOST_PTR buffer", pbuf)):
        t = median_time(lambda: prg.rd(q, (65536,), (256,), buf, out, np.uint32(n16)), reps,
                        sync=sync)
        emit(dev, "dma", f"kernel reads {name}, {size // MB} MB", "GB/s", size / t / 1e9)
    pinned.base.release()


def pipe(dev, quick):
    """Staged.put end to end (host copy into pinned overlapped with the DMA)."""
    reps = 3 if quick else 5
    n = 1 << (20 if quick else 24)
    x64 = np.random.default_rng(1).standard_normal(n)
    saved = (X.SEGMENT_BYTES, X.COPY_CHUNK, X.COPY_THREADS, X._copy_jobs)
    orig_jobs = X._copy_jobs

    def jobs_parts(dst, src):       # one contiguous part per thread, np.copyto
        if src.size < 2 * MB:
            dst[:] = src
            return []
        pool = X._threads()
        return [pool.submit(np.copyto, dst[a:b], src[a:b])
                for a, b in _pieces(src.size, X.COPY_THREADS)]

    def jobs_memmove(dst, src):     # one contiguous part per thread, memmove
        if src.size < 2 * MB:
            dst[:] = src
            return []
        pool = X._threads()
        d0, s0 = dst.ctypes.data, src.ctypes.data
        return [pool.submit(ctypes.memmove, d0 + a, s0 + a, b - a)
                for a, b in _pieces(src.size, X.COPY_THREADS)]

    segs = (4 * MB,) if quick else (4 * MB, 8 * MB, 16 * MB, 32 * MB, 1 << 30)
    variants = [("chunks 1 MB", orig_jobs, MB), ("chunks 4 MB", orig_jobs, 4 * MB),
                ("parts copyto", jobs_parts, MB), ("parts memmove", jobs_memmove, MB)]
    try:
        for dtype in (np.float32, np.float64):
            x = x64.astype(dtype)
            for threads in ((4,) if quick else (8, 16)):
                X.COPY_THREADS = threads
                if X._pool is not None:
                    X._pool.shutdown()
                    X._pool = None
                for seg in segs:
                    if over_budget("pipe"):
                        return
                    for name, fn, chunk in variants:
                        X.SEGMENT_BYTES, X.COPY_CHUNK, X._copy_jobs = seg, chunk, fn

                        def put():
                            with X.Staged(dev, x.nbytes, X.Transfer("pinned", True)) as st:
                                st.put([(0, x)])
                        t = median_time(put, reps)
                        seg_name = "whole" if seg >= x.nbytes else f"{seg // MB} MB segments"
                        emit(dev, "pipe", f"put {x.nbytes // MB} MB {dtype.__name__}, "
                             f"{seg_name}, {threads} threads, {name}", "GB/s",
                             x.nbytes / t / 1e9, f"{t * 1e3:.2f} ms")
            X.SEGMENT_BYTES, X.COPY_CHUNK, X._copy_jobs = saved[0], saved[1], orig_jobs
            for spec in ("pageable", "pinned"):
                def put():
                    with X.Staged(dev, x.nbytes, X.parse(spec)) as st:
                        st.put([(0, x)])
                t = median_time(put, reps)
                emit(dev, "pipe", f"put {x.nbytes // MB} MB {dtype.__name__}, {spec}", "GB/s",
                     x.nbytes / t / 1e9, f"{t * 1e3:.2f} ms")
    finally:
        X.SEGMENT_BYTES, X.COPY_CHUNK, X.COPY_THREADS, X._copy_jobs = saved
        if X._pool is not None:
            X._pool.shutdown()
            X._pool = None


# ---------------------------------------------------------------- public calls

def calls(dev, quick):
    reps = 5 if quick else 9
    x = np.random.default_rng(2).standard_normal(4096)
    for name, fn in (("hurst", hurst), ("acf", autocorrelation)):
        t = median_time(lambda: fn(x, 16, device=dev, progress=False), 20)
        emit(dev, "calls", f"{name} T=4096 max_lag=16 float64 (fixed cost)", "ms", t * 1e3)
    T, max_lag = (1 << 18, 256) if quick else (1 << 24, 1024)
    p = 1e4 + np.cumsum(np.random.default_rng(T).standard_normal(T))
    dx = np.diff(p, prepend=p[0])
    for name, fn, data in (("hurst", hurst, p), ("acf", autocorrelation, dx)):
        for dtype in (np.float32, np.float64):
            arr = data.astype(dtype)
            t, ph = call(lambda: fn(arr, max_lag, device=dev, progress=False), reps)
            emit(dev, "calls", f"{name} T=2^{T.bit_length() - 1} max_lag={max_lag} "
                 f"{dtype.__name__}", "ms", t * 1e3, ph)


# ---------------------------------------------------------------- pair kernels

def _direct(dev, data, kind, max_lag, tuning):
    value, centred = {"hurst": ("blocked", False), "acf": ("float", True)}[kind]
    b = _ingest.batch("x", data, max_lag + 1, "")
    return C._Direct(dev, b, max_lag, 1, value, 1, tuning=tuning), centred


def kernel_only(dev, run, pairs, K, tpb, reps):
    """Seconds of one ts_pair_sums launch over every tile (no zero fill, no finish)."""
    t = run.tuning
    prg = dev.build("timeseries/pairs.cl", pairs=pairs, value=run.value, acc=run.acc,
                    wg=t.wg, lpi=t.lpi, chunk=t.chunk, run=t.run, rows=run.rows,
                    block=C.BLOCK)
    Gs = min(run.G, tpb)
    partial = cla.zeros(dev.queue, len(pairs) * run.E * K * Gs * run.nlags,
                        _common.ACC_DTYPE[run.acc])
    q = run.inp._array(np.ones(1, np.float32))

    def launch():
        prg.ts_pair_sums(dev.queue, (run.lag_blocks * t.wg, run.E * run.G), (t.wg, 1),
                         run.y.data, run.tab.data, run._voff.data, run._nts.data,
                         run._ns.data, run._nchs.data, np.uint32(run.E), np.uint32(0),
                         np.uint32(run.G), np.int64(0),
                         np.uint32(run.lag0), np.uint32(run.nlags), np.uint32(0),
                         np.uint32(run.tiles), np.uint32(K), np.uint32(tpb), q.data, q.data,
                         partial.data)
    return median_time(launch, reps, sync=dev.queue.finish)


def pairs(dev, quick):
    reps = 3 if quick else 5
    T, max_lag = (1 << 16, 256) if quick else (1 << 24, 1024)
    p = 1e4 + np.cumsum(np.random.default_rng(4).standard_normal(T))
    data = {"hurst": p, "acf": np.diff(p, prepend=p[0])}
    fn = {"hurst": ["absdiff"], "acf": ["product"]}
    if dev.facts.is_gpu and not quick:
        tunings = [(128, 8, 1024), (224, 5, 1024), (160, 7, 1024), (352, 3, 1024),
                   (96, 11, 1024), (256, 4, 1024), (128, 8, 2048), (224, 5, 2048)]
        groups = (1024, 2112, 4224)         # 4224 for the first two tunings only
    else:
        tunings = [(32, 8, 512), (64, 4, 512)]
        groups = (4, 16)
    pairs_n = T * max_lag
    for kind in ("hurst", "acf"):
        for wg, lpi, chunk in tunings:
            if wg > dev.facts.max_work_group or over_budget("pairs"):
                continue
            for G in (groups if (wg, lpi, chunk) in tunings[:2] else groups[:2]):
                tun = C.PairTuning(wg=wg, lpi=lpi, chunk=chunk, run=32, groups=G)
                run, centred = _direct(dev, data[kind], kind, max_lag, tun)
                with C._staged(dev, run.raw_bytes(), None) as st:
                    run.prepare(st, centred=centred)
                    for K, tpb in ((run.K, run.tpb), (1, run.tiles)):
                        k = kernel_only(dev, run, fn[kind], K, tpb, reps)
                        emit(dev, "pairs", f"{kind} kernel wg={wg} lpi={lpi} chunk={chunk} "
                             f"G={run.G} K={K}", "ms", k * 1e3,
                             f"{pairs_n / k:.3g} lag-pairs/s")
                    if kind == "acf" and (wg, lpi, chunk) == tunings[0]:
                        # Hurst's |b - a| on the plain float layout: what the blocked
                        # layout's table reads cost
                        k = kernel_only(dev, run, ["absdiff"], run.K, run.tpb, reps)
                        emit(dev, "pairs", f"hurst absdiff on float layout wg={wg} lpi={lpi} "
                             f"chunk={chunk} G={run.G} K={run.K}", "ms", k * 1e3,
                             f"{pairs_n / k:.3g} lag-pairs/s")
        # the whole sums() as the calls run it: sliced (production) and in one launch
        for wg, lpi, chunk in tunings[:2]:
            for G in (None,) + groups[:2]:
                if over_budget("pairs"):
                    return
                tun = C.PairTuning(wg=wg, lpi=lpi, chunk=chunk, run=32, groups=G)
                run, centred = _direct(dev, data[kind], kind, max_lag, tun)
                with C._staged(dev, run.raw_bytes(), None) as st:
                    run.prepare(st, centred=centred)
                    for mode in ("sliced", "one launch"):
                        if mode == "one launch":
                            run.first_slice = run.tiles
                        t = median_time(lambda: run.sums(st, fn[kind]), reps,
                                        sync=dev.queue.finish)
                        emit(dev, "pairs", f"{kind} sums() {mode} wg={wg} lpi={lpi} "
                             f"chunk={chunk} G={run.G}{' (default)' if G is None else ''}",
                             "ms", t * 1e3, f"{pairs_n / t:.3g} lag-pairs/s")


# ---------------------------------------------------------------- all lags

def all_lags_steps(dev, x, reps):
    """The FFT path's steps one at a time (stationary, errors=False, fp64), queue finished
    after each: ms per step (median over reps)."""
    b = _ingest.batch("x", x, 2, "")
    T = x.size
    nl = T
    L = _fft.fft_length(T, T - 1)
    odtype = C._out_dtype(b)
    q = dev.queue
    steps = {}

    def once():
        marks = [time.perf_counter()]
        inp = _ingest.Input(dev, b, C.FFT_SPAN, "real", True)
        with C._staged(dev, x.nbytes, None) as st:
            inp.load(st)
            exps = inp.scales(inp.check())
            marks.append(time.perf_counter())
            shift = np.ldexp(b.first_values(), exps)
            centre = inp.centres(inp.moments(shift), shift)
            marks.append(time.perf_counter())
            rows = C._FFTRows(dev, inp, 1, L, "double", centre)
            for s in rows.steps:
                s()
            q.finish()
            marks.append(time.perf_counter())
            out, second, _ = rows.finish(inp, b.lengths, nl, exps, "stationary", odtype)
            q.finish()
            marks.append(time.perf_counter())
            C._xfer.download(dev, out.data, np.empty((1, nl), odtype))
            marks.append(time.perf_counter())
            touched = np.ones((1, nl), odtype)
            marks.append(time.perf_counter())
            C._xfer.download(dev, out.data, touched)
            marks.append(time.perf_counter())
            cl.enqueue_copy(q, np.empty((1, nl), odtype), out.data, is_blocking=True)
            marks.append(time.perf_counter())
            cl.enqueue_copy(q, touched, out.data, is_blocking=True)
            marks.append(time.perf_counter())
        C._common.trim_pool(dev)
        marks.append(time.perf_counter())
        return np.diff(marks)

    names = ["upload and check", "moments", "convert and FFT", "finish kernels",
             "download pinned->fresh", "(touching an array)", "download pinned->touched",
             "download pageable->fresh", "download pageable->touched", "exit and trim pool"]
    once()
    runs = np.array([once() for _ in range(reps)])
    for i, name in enumerate(names):
        steps[name] = float(np.median(runs[:, i]))
    return steps


def lags(dev, quick):
    reps = 3 if quick else 5
    T = 1 << (14 if quick else 24)
    x64 = np.random.default_rng(T + 1).standard_normal(T) + 0.1
    for dtype in (np.float32, np.float64):
        x = x64.astype(dtype)
        t, ph = call(lambda: autocorrelation(x, T - 1, stationary=True, device=dev,
                                                  progress=False, errors=False), reps)
        emit(dev, "lags", f"acf all lags T=2^{T.bit_length() - 1} {dtype.__name__} call",
             "ms", t * 1e3, ph)
        saved = _common.POOL_HOLD_BYTES
        _common.POOL_HOLD_BYTES = 8 << 30
        try:
            t = median_time(lambda: autocorrelation(x, T - 1, stationary=True, device=dev,
                                                    progress=False, errors=False), reps)
        finally:
            _common.POOL_HOLD_BYTES = saved
        emit(dev, "lags", f"acf all lags {dtype.__name__} call, pool kept (8 GiB)", "ms",
             t * 1e3)
        if dev.facts.fp64:
            for name, v in all_lags_steps(dev, x, reps).items():
                emit(dev, "lags", f"all lags {dtype.__name__} step: {name}", "ms", v * 1e3)
        if over_budget("lags"):
            return
    if dev.facts.fp64:
        n = _fft.fft_length(T, T - 1) // 2
        shapes = [("double", b, J) for b in ((4, 6) if quick else (6, 7, 8))
                  for J in ((1, 4) if quick else (1, 4, 16))] + [("float", None, None)]
        for real, bits, J in shapes:
            if over_budget("lags"):
                break
            try:
                fft = _fft.FFT(dev, n, 1, real, max_bits=bits, jmax=J)
            except Exception as exc:          # noqa: BLE001 - a variant may not build
                emit(dev, "lags", f"fft {real} bits={bits} J={J}", "error", str(exc))
                continue
            A = cla.zeros(dev.queue, 2 * n, fft.cdtype)
            B, Cb = cla.empty_like(A), cla.empty_like(A)

            def transforms():
                fwd, out = fft.launches(A.data, B.data, Cb.data, -1)
                inv, _ = fft.launches(out, B.data, Cb.data, +1)
                for step in fwd + [lambda: fft.power(out)] + inv:
                    step()
            try:
                k = median_time(transforms, reps, sync=dev.queue.finish)
            except cl.Error as exc:
                emit(dev, "lags", f"fft {real} bits={bits} J={J}", "error", str(exc))
                continue
            emit(dev, "lags", f"fft {real} n=2^{n.bit_length() - 1} bits={bits} J={J} "
                 f"radices {[R for R, _, _, _ in fft.passes]}", "ms", k * 1e3)
            del A, B, Cb
    torch_cupy(dev, x64, reps)


def torch_cupy(dev, x64, reps):
    """torch's and CuPy's all-lags ACF (the benchmark's), and torch's split into transfers
    and device work."""
    if _available("torch"):
        import torch
        for dtype in (np.float32, np.float64):
            x = x64.astype(dtype)
            n = x.size
            d0 = torch.from_numpy(x).cuda()

            def device_only():
                d = d0 - d0.mean()
                f = torch.fft.rfft(d, n=2 * n)
                return torch.fft.irfft(f.real ** 2 + f.imag ** 2, n=2 * n)[:n]
            res = device_only()
            pin = torch.empty(res.shape, dtype=res.dtype, pin_memory=True)
            cases = {"full call": lambda: torch_acf(x), "device work only": device_only,
                     "upload only (pageable)": lambda: torch.from_numpy(x).cuda(),
                     "download only (fresh pageable)": lambda: res.cpu(),
                     "download only (pinned)": lambda: pin.copy_(res)}
            for name, fn in cases.items():
                t = median_time(fn, reps, sync=torch.cuda.synchronize)
                emit(dev, "lags", f"torch {dtype.__name__} T={n}: {name}", "ms", t * 1e3)
    else:
        emit(dev, "lags", "torch", "skipped", "no torch with CUDA")
    if _available("cupy"):
        import cupy
        for dtype in (np.float32, np.float64):
            x = x64.astype(dtype)
            t = median_time(lambda: cupy_acf(x), reps, sync=cupy.cuda.runtime.deviceSynchronize)
            emit(dev, "lags", f"cupy {dtype.__name__} T={x.size}: full call", "ms", t * 1e3)
    else:
        emit(dev, "lags", "cupy", "skipped", "no cupy with CUDA")


# ---------------------------------------------------------------- pattern conformity

def pc_run(dev, p, maxp, maxf, chi, mh, wg=64, tb=128, mfix=False, qform="plain", sign="sub",
           exp="exp", ms=None):
    """Ξ of one series by ts_pc_sweep over every t̂ in one launch (one per Δt⁻ with mfix,
    only the Δt⁻ in `ms` if given); returns (Xi, seconds of the launches incl. queue
    finish, build seconds)."""
    s = _common.series("p", p, maxp + maxf + 1, "")
    values, origin, e, _ = PC._ticks(s, "auto")
    T = s.size
    acc = _common.accumulator(dev)
    units = -(-(T - 1) // wg)
    ncells, ncounts = maxp * 2 * maxf, maxp * 3
    q = dev.queue
    x = cla.to_device(q, _common.float_pairs(values, origin, e))
    pool = cla.zeros(q, (units, ncells), _common.ACC_DTYPE[acc])
    cpool = cla.zeros(q, (units, ncounts), np.uint64)
    t0 = time.perf_counter()
    common = dict(wg=wg, tb=tb, maxp=maxp, maxf=maxf, acc=acc, exp=exp, qform=qform,
                  sign=sign)
    ms = list(ms or range(1, maxp + 1)) if mfix else [0]
    prgs = {m: dev.build("timeseries/pattern.cl", mfix=m, **common) for m in ms}
    built = time.perf_counter() - t0
    args = (x.data, np.uint64(0), np.uint32(0), np.uint32(T), np.uint32(T), np.uint32(1),
            np.uint32(T), np.uint32(0), np.uint32(units), np.uint32(mh), np.float32(chi),
            pool.data, cpool.data)
    q.finish()
    t0 = time.perf_counter()
    for m in sorted(ms, reverse=True):
        prgs[m].ts_pc_sweep(q, (units * wg, 1 if m else maxp), (wg, 1), *args)
    q.finish()
    secs = time.perf_counter() - t0
    tot = _common.acc_to_float64(pool.get()).reshape(units, maxp, 2 * maxf).sum(axis=0)
    xi, norm = tot[:, :maxf].T, tot[:, maxf:].T
    with np.errstate(invalid="ignore", divide="ignore"):
        Xi = np.where(norm > 0, xi / np.where(norm > 0, norm, 1.0), np.nan)
    return Xi, secs, built


def _pc_triples(T, ms, mh):
    """(t̂, τ) pairs of the Δt⁻ in ms: the triples of those Δt⁻."""
    return sum(PC.pattern_pairs(T, m, mh) - PC.pattern_pairs(T, m - 1, mh) for m in ms)


def pc(dev, quick):
    """Variants of pattern.cl: (params, Δt⁻ timed (None: all), checked against NumPy)."""
    best = dict(mfix=True, qform="mad", sign="cmp")
    sub = (4, 6) if quick else (10, 20)
    variants = [(dict(), None, True), (dict(sign="cmp"), None, False),
                (dict(qform="mad", sign="cmp"), None, True),
                (dict(mfix=True), None, True), (best, None, True),
                (dict(mfix=True, sign="cmp"), sub, False),
                (dict(mfix=True, qform="fast", sign="cmp"), sub, True)]
    if not quick and dev.facts.is_gpu:
        variants += [(dict(best, wg=128), sub, False), (dict(best, wg=32), sub, False),
                     (dict(best, tb=256), sub, False), (dict(best, exp="native_exp"), sub, True)]
    # accuracy: small cases (tick data, real-valued walk) against the float64 NumPy reference
    from clphys.timeseries import acrw_numpy
    small = acrw_numpy(1_500, 0.044, seed=3)
    walk = np.cumsum(np.random.default_rng(6).standard_normal(1_200))
    refs = [(small, pattern_conformity_numpy(small, 6, 5, 100.0, 400).Xi, 6, 5, 400),
            (walk, pattern_conformity_numpy(walk, 6, 5, 100.0, 300).Xi, 6, 5, 300)]
    if quick:
        T, maxp, maxf, mh = 2_000, 6, 6, 256
    else:
        T, maxp, maxf, mh = 65_537, 20, 20, 16_384
    big = 1e4 + np.cumsum(np.random.default_rng(5).standard_normal(T))
    full = PC.pattern_pairs(10**6, 20, 16384) / PC.pattern_pairs(T, maxp, mh)
    base = {}
    for v, ms, checked in variants:
        if over_budget("pc"):
            return
        name = " ".join(f"{k}={val}" for k, val in v.items()) or "current kernel"
        errs = []
        for series, ref, mp, mf, h in (refs if checked else []):
            Xi, _, _ = pc_run(dev, series, mp, mf, 100.0, h, **v)
            errs.append(float(np.nanmax(np.abs(Xi - ref))))
        run = dict(v, ms=ms) if ms else v
        Xi, secs, built = pc_run(dev, big, maxp, maxf, 100.0, mh, **run)
        Xi2, secs2, _ = pc_run(dev, big, maxp, maxf, 100.0, mh, **run)
        secs = min(secs, secs2)
        cols = [m - 1 for m in ms] if ms else slice(None)
        key = tuple(ms or ())
        base.setdefault(key, Xi)
        diff = float(np.nanmax(np.abs(Xi[:, cols] - base[key][:, cols])))
        triples = _pc_triples(T, ms or range(1, maxp + 1), mh)
        what = f"Δt⁻ in {list(ms)}" if ms else "all Δt⁻"
        emit(dev, "pc", f"pc T={T} {maxp}x{maxf} mh={mh} {what}: {name}", "triples/s",
             triples / secs, f"{secs:.3f} s; build {built:.1f} s; max |ΔΞ| vs NumPy "
             f"{max(errs) if errs else float('nan'):.1e}; vs first of its kind {diff:.1e}"
             + ("" if ms else f"; T=1e6 estimate {secs * full:.2f} s"))
    # where the time goes: the current kernel at other (max_past, max_future)
    if not quick:
        for mp, mf in ((20, 1), (20, 10), (10, 20)):
            if over_budget("pc"):
                return
            _, secs, _ = pc_run(dev, big, mp, mf, 100.0, mh)
            emit(dev, "pc", f"pc T={T} {mp}x{mf} mh={mh}: current kernel", "triples/s",
                 PC.pattern_pairs(T, mp, mh) / secs, f"{secs:.3f} s")


SECTIONS = {"env": env, "host": host, "dma": dma, "pipe": pipe, "calls": calls,
            "pc": pc, "lags": lags, "pairs": pairs}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (PoCL): < 1 minute")
    ap.add_argument("--json", metavar="FILE", help="also write the JSON lines to FILE")
    ap.add_argument("--only", nargs="*", choices=list(SECTIONS), help="run these sections")
    args = ap.parse_args(argv)
    dev = clphys.device()
    quick = args.quick or not dev.facts.is_gpu
    print(f"# device: {dev.name} ({dev.facts.platform}, driver {dev.facts.driver})", flush=True)
    for name in args.only or list(SECTIONS):
        if name != "env" and over_budget(name):
            continue
        t0 = time.perf_counter()
        _deadline[0] = t0 + SECTION_BUDGET.get(name, 30) * (10 if quick else 1)
        try:
            SECTIONS[name](dev, quick)
        except Exception as exc:     # noqa: BLE001 - report and go on with the next section
            import traceback
            traceback.print_exc()
            emit(dev, name, "section", "error", f"{exc.__class__.__name__}: {exc}")
        emit(dev, name, "section", "s", time.perf_counter() - t0)
    w = max(len(r[1]) for r in rows)
    print()
    for section, wl, metric, value, note in rows:
        print(f"{section:<6} {wl:<{w}}  {metric:<10} {value:>12}  {note}")
    if args.json:
        with open(args.json, "w") as fh:
            for rec in records:
                fh.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
