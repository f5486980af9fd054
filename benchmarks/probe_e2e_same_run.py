"""Same-run comparison: host copy bandwidth, torch upload / ACF(max_lag) and clphys e2e."""
import sys, time, json, os
import numpy as np
from concurrent.futures import ThreadPoolExecutor
T = 1 << 24
rng = np.random.default_rng(1)
x64 = np.cumsum(rng.standard_normal(T)) * 1e-3 + rng.standard_normal(T)
x32 = x64.astype(np.float32)
def med(f, n=7):
    f(); ts = []
    for _ in range(n):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return 1e3 * float(np.median(ts)), 1e3 * min(ts)
which = sys.argv[1]
if which == "host":
    pool = ThreadPoolExecutor(16)
    for x in (x32, x64):
        dst = np.empty_like(x); dst[:] = 0
        print("host copy 1 thread", x.dtype, "%.2f ms (min %.2f)" % med(lambda: np.copyto(dst, x)))
        parts = np.array_split(np.arange(x.size), 16)
        sl = [slice(p[0], p[-1] + 1) for p in parts]
        def par():
            list(pool.map(lambda s: np.copyto(dst[s], x[s]), sl))
        print("host copy 16 threads", x.dtype, "%.2f ms (min %.2f)" % med(par))
    import torch
    for x in (x32, x64):
        def up():
            d = torch.from_numpy(x).cuda(); torch.cuda.synchronize()
        print("torch upload pageable", x.dtype, "%.2f ms (min %.2f)" % med(up))
        def acf():
            d = torch.from_numpy(x).cuda(); n = d.numel()
            d = d - d.mean()
            f = torch.fft.rfft(d, n=2 * n)
            c = torch.fft.irfft(f.real ** 2 + f.imag ** 2, n=2 * n)[:1025]
            r = (c / c[0]).cpu().numpy()
        print("torch acf max_lag 1024 (fft)", x.dtype, "%.2f ms (min %.2f)" % med(acf))
else:
    import clphys.timeseries as ts
    for x in (x32, x64):
        ts.autocorrelation(x, 1024); ts.hurst(x, 1024)
        print(which, "acf", x.dtype, "%.2f ms (min %.2f)" % med(lambda: ts.autocorrelation(x, 1024)))
        print(which, "hurst", x.dtype, "%.2f ms (min %.2f)" % med(lambda: ts.hurst(x, 1024)))
