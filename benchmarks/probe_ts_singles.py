"""Same process: hurst() and autocorrelation() at T = 2^24, max_lag = 1024 on the data of
probe_e2e_same_run.py and of bench_timeseries.py, interleaved, three rounds (benchmarks/RESULTS.md,
issue 14 after the merges).

    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_ts_singles.py
"""
import time, numpy as np
import clphys.timeseries as ts
T = 1 << 24
rng = np.random.default_rng(1)
xe = np.cumsum(rng.standard_normal(T)) * 1e-3 + rng.standard_normal(T)        # e2e.py
rb = np.random.default_rng(T)
pb = 1e4 + np.cumsum(rb.standard_normal(T)); xb = np.diff(pb, prepend=pb[0])  # bench
def med(f, n=7):
    f(); ts_ = []
    for _ in range(n):
        t = time.perf_counter(); f(); ts_.append(time.perf_counter() - t)
    return 1e3 * float(np.median(ts_))
cases = {"e2e acf": (ts.autocorrelation, xe), "bench acf": (ts.autocorrelation, xb),
         "e2e hurst": (ts.hurst, xe), "bench hurst": (ts.hurst, pb)}
arrs = {(k, d): np.ascontiguousarray(a.astype(d)) for k, (f, a) in cases.items() for d in (np.float32, np.float64)}
for rnd in range(3):
    for (k, d), a in arrs.items():
        f = cases[k][0]
        print(rnd, k, d.__name__, "%.2f ms" % med(lambda: f(a, 1024, progress=False)), flush=True)
