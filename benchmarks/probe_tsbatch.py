"""Probe for issue 14 (tsbatch): many series at once at >= 50 % of one long series' rate.

    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_tsbatch.py --json $OUT/probe_tsbatch.jsonl
    CLPHYS_DEVICE=portable python benchmarks/probe_tsbatch.py --quick

hurst() and autocorrelation(), float32 and float64, host NumPy array in -> NumPy result
out: one series of T = 2^24 values and a batch of 512 x 2^16 (--quick: 2^18 and 64 x 2^12),
max_lag = 1024 (--quick: 256).  Every variant is first checked: the single series against
the float64 NumPy reference at a few lags, the batch's rows 0, middle and last at every
lag, and the streamed batch against the unstreamed one (hurst S bit for bit, rho within
1e-12); a failed check prints FAIL and the variant is not timed.  Then 3 rounds, each
timing every variant interleaved (median of 7 after a warm-up), so the spread between
rounds shows; the batch's rate as a share of the single series' rate of the same round
(target >= 50 %: batch time <= 4x the single call's, the batch having twice the values).
Variants of the batch: the default (streamed), unstreamed (`_stream=False`), the host
copy in 1 MB or 2 MB jobs (default 4 MB: the 16 threads then fill 4 segments at once, so
the first kernels wait for ~64 MB), the first segment in 1 MB jobs; and the batch's upload
alone (no kernels).  Last, the phases of the median of 3 calls per
variant (after a warm-up) with a queue finish at every mark (splits).
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
from clphys.timeseries import _transfer, autocorrelation, correlation, hurst  # noqa: E402
from clphys.timeseries.reference import autocorrelation_numpy, hurst_numpy  # noqa: E402

BUDGET = {"check": 60, "rounds": 60, "phases": 20}
records, failed = [], []


def emit(**rec):
    records.append(rec)
    print(json.dumps(rec), flush=True)


def make_data(quick):
    T, n, Tb, max_lag = (2**18, 64, 2**12, 256) if quick else (2**24, 512, 2**16, 1024)
    rng = np.random.default_rng(7)
    p = 1e4 + np.cumsum(rng.standard_normal(T))
    P = 1e4 + np.cumsum(rng.standard_normal((n, Tb)), axis=1)
    data = {}
    for dt in (np.float32, np.float64):
        data[("single", "hurst", dt)] = p.astype(dt)
        data[("single", "acf", dt)] = np.diff(p, prepend=p[0]).astype(dt)
        data[("batch", "hurst", dt)] = np.ascontiguousarray(P.astype(dt))
        data[("batch", "acf", dt)] = np.ascontiguousarray(np.diff(P, axis=1).astype(dt))
    return max_lag, data


def fn_of(name):
    return hurst if name == "hurst" else autocorrelation


def call(dev, key, arr, max_lag, **kw):
    kw = {k: v for k, v in kw.items() if k not in KNOBS}
    return fn_of(key[1])(arr, max_lag, device=dev, progress=False, **kw)


def check(dev, key, arr, max_lag):
    """(ok, note): the result against NumPy (float64 reference of the same values)."""
    kind, name, _ = key
    r = call(dev, key, arr, max_lag)
    a64 = arr.astype(np.float64)
    if kind == "single":
        lags = np.array([1, 2, 17, max_lag // 2, max_lag])
        rows = [(None, a64)]
    else:
        lags = None
        rows = [(s, a64[s]) for s in (0, len(a64) // 2, len(a64) - 1)]
    worst = 0.0
    for s, x in rows:
        if name == "hurst":
            S = hurst_numpy(x, max_lag, lags=lags) if lags is not None else \
                hurst_numpy(x, max_lag)[0]
            got = r.S if s is None else r.S[s]
            got = got[(lags if lags is not None else np.arange(1, max_lag + 1)) - 1]
            worst = max(worst, float(np.max(np.abs(got / S - 1))))
        else:
            rho = autocorrelation_numpy(x, max_lag, lags=lags)
            got = r.rho if s is None else r.rho[s]
            got = got[lags] if lags is not None else got
            worst = max(worst, float(np.max(np.abs(got - rho))))
    tol = 2e-6 if name == "hurst" else 1e-6
    ok = worst <= tol
    note = f"max {'rel |dS|' if name == 'hurst' else '|drho|'} {worst:.1e} vs NumPy (tol {tol})"
    if ok and kind == "batch":
        u = call(dev, key, arr, max_lag, _stream=False)
        if name == "hurst":
            same = np.array_equal(r.S, u.S) and np.array_equal(r.S_err, u.S_err)
            note += "; S, S_err = unstreamed bits" if same else "; S differs from unstreamed"
        else:
            d = float(np.max(np.abs(r.rho.astype(np.float64) - u.rho)))
            same = d <= 1e-12 if arr.dtype == np.float64 else d <= 1e-6
            note += f"; |rho - unstreamed| {d:.1e}"
        ok = ok and same
    return ok, note


KNOBS = {"_seg": (_transfer, "STREAM_SEGMENT_BYTES"),
         "_chunk": (_transfer, "STREAM_CHUNK"),
         "_first": (_transfer, "STREAM_FIRST_CHUNK")}


class segments:
    """The module constants named by kw's private keys (KNOBS) set inside the block."""

    def __init__(self, kw):
        self.kw = {k: v for k, v in kw.items() if k in KNOBS}
        self.old = {k: getattr(*KNOBS[k]) for k in self.kw}

    def __enter__(self):
        for k, v in self.kw.items():
            setattr(*KNOBS[k], v)

    def __exit__(self, *exc):
        for k, v in self.old.items():
            setattr(*KNOBS[k], v)


def source(key):
    """The data key of a variant key (its first part names the variant)."""
    return key if key[0] == "single" else ("batch",) + key[1:]


def timed(fn, repeats):
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def phases(dev, fn, repeats=3):
    """The synced phases of the median of `repeats` calls after a warm-up."""
    fn()
    runs = sorted((phase_call(dev, fn) for _ in range(repeats)), key=lambda r: r[0])
    return runs[len(runs) // 2][1]


def phase_call(dev, fn):
    correlation.TRACE, correlation.TRACE_SYNC = [], dev.queue
    try:
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        marks = correlation.TRACE + [("download and return", t1)]
    finally:
        correlation.TRACE = correlation.TRACE_SYNC = None
    out, last = [], t0
    for name, at in marks:
        out.append(f"{name} {1e3 * (at - last):.2f}")
        last = at
    return t1 - t0, f"{1e3 * (t1 - t0):.2f} ms: " + "; ".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    dev = clphys.device()
    f = dev.facts
    print(f"# device: {dev.name} ({f.platform}, driver {f.driver}), fp64={f.fp64}", flush=True)
    max_lag, data = make_data(args.quick)
    # (runs 1 and 2 also timed 8 / 32 MB segments and 8 / 32 groups per compute unit, run
    # 3 the results copied out in jobs for every thread and the pageable upload: no
    # consistent difference, resp. 2x slower; dropped)
    MB = 1 << 20
    k = 8 if args.quick else 1
    batches = [key for key in data if key[0] == "batch"]
    variants = [(key, {}) for key in data] + \
        [(("batch unstreamed",) + key[1:], {"_stream": False}) for key in batches] + \
        [((f"batch, {name}",) + key[1:], kw) for name, kw in (
            (f"copy jobs {MB // k >> 10} KB", {"_chunk": MB // k}),
            (f"copy jobs {2 * MB // k >> 10} KB", {"_chunk": 2 * MB // k}),
            (f"first segment in {MB // k >> 10} KB jobs", {"_first": MB // k}))
         for key in batches]
    start = time.perf_counter()
    good = []
    for key, kw in variants:
        arr = data[source(key)]
        if key[0] != "single" and key[0] != "batch":
            ok, note = ("batch",) + key[1:] in [k for k, _ in good], "checked as batch"
        elif time.perf_counter() - start > BUDGET["check"]:
            ok, note = False, "check skipped (over budget)"
        else:
            ok, note = check(dev, key, arr, max_lag)
        label = f"{key[0]} {key[1]} {key[2].__name__}"
        emit(section="check", variant=label, ok=ok, note=note)
        if not ok:
            failed.append(label)
            print(f"# FAIL {label}: {note}", flush=True)
        else:
            good.append((key, kw))
    table = {}
    t_rounds = time.perf_counter()
    for rnd in range(args.rounds):
        if time.perf_counter() - t_rounds > BUDGET["rounds"]:
            print(f"# round {rnd} skipped (over budget)", flush=True)
            break
        for key, kw in good:
            arr = data[source(key)]
            with segments(kw):
                t = timed(lambda: call(dev, ("x",) + key[1:], arr, max_lag, **kw), args.repeats)
            table.setdefault(key, []).append(t)
            emit(section="time", round=rnd, variant=f"{key[0]} {key[1]} {key[2].__name__}",
                 median_s=t, values=int(arr.size), max_lag=max_lag)
    uploads = {}
    for dt in (np.float32, np.float64):            # the batch's upload alone, no kernels
        arr = data[("batch", "hurst", dt)]
        spec = _transfer.default(dev, arr.nbytes)

        def up():
            with _transfer.Staged(dev, arr.nbytes, spec) as st:
                st.put([(0, arr)])
        uploads[dt] = timed(up, args.repeats)
        emit(section="upload", variant=f"batch upload alone {dt.__name__} ({spec.name})",
             median_s=uploads[dt], bytes=int(arr.nbytes))
    t_ph = time.perf_counter()
    notes = {}
    for key, kw in good:
        if time.perf_counter() - t_ph > BUDGET["phases"]:
            break
        arr = data[source(key)]
        with segments(kw):
            notes[key] = phases(dev, lambda: call(dev, ("x",) + key[1:], arr, max_lag, **kw))
        emit(section="phases", variant=f"{key[0]} {key[1]} {key[2].__name__}",
             phases=notes[key])
    print(f"\n# {dev.name}, max_lag = {max_lag}, median of {args.repeats} per round, "
          f"{len(next(iter(table.values()), []))} rounds ({time.perf_counter() - start:.0f} s)")
    print(f"{'variant':<34} {'ms per round':<28} {'share of the single rate per round'}")
    for key, ts in table.items():
        label = f"{key[0]} {key[1]} {key[2].__name__}"
        share = ""
        one = table.get(("single",) + key[1:])
        if key[0] != "single" and one:
            size = data[("batch",) + key[1:]].size / data[("single",) + key[1:]].size
            share = " / ".join(f"{size * s / b:.0%}" for s, b in zip(one, ts))
        print(f"{label:<34} {' / '.join(f'{1e3 * t:.2f}' for t in ts):<28} {share}")
    for dt, t in uploads.items():
        print(f"{'batch upload alone ' + dt.__name__:<34} {1e3 * t:.2f} "
              f"({data[('batch', 'hurst', dt)].nbytes >> 20} MB, no kernels)")
    print("# phases (median of 3 calls after a warm-up, a queue finish at every mark):")
    for key, text in notes.items():
        print(f"  {key[0]} {key[1]} {key[2].__name__}: {text}")
    if failed:
        print(f"# SOME CHECKS FAILED: {', '.join(failed)}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            for rec in records:
                fh.write(json.dumps(rec, default=str) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
