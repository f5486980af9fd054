"""The pageable head of a streamed upload (clphys/timeseries/_transfer.py,
PAGEABLE_HEAD_BYTES): the driver copies the first bytes straight from the caller's array
while the copy threads fill the pinned buffer with the rest.  hurst() and
autocorrelation() at T = 2^24, max_lag = 1024 (float32 and float64; the data of
probe_e2e_same_run.py), and 512 series of 2^16, for each head size, interleaved in
rounds, median of 7 after a warm-up; every variant's results checked bit for bit against
head 0 first.  torch's FFT ACF(1024) of the same arrays in the same run when installed.

    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_ts_head.py [rounds] [heads in MB, comma-separated]
"""
import sys
import time

import numpy as np

import clphys.timeseries as ts
from clphys.timeseries import _transfer

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
HEADS = [int(float(h) * (1 << 20)) for h in (sys.argv[2] if len(sys.argv) > 2 else "0,8,16,24").split(",")]
T = 1 << 24
rng = np.random.default_rng(1)
x64 = np.cumsum(rng.standard_normal(T)) * 1e-3 + rng.standard_normal(T)
x32 = x64.astype(np.float32)
batch64 = rng.standard_normal((512, 1 << 16))
batch32 = batch64.astype(np.float32)


def med(f, n=7):
    f()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


calls = {f"{name} {x.dtype}": (lambda f=f, x=x: f(x, 1024, progress=False))
         for x in (x32, x64) for name, f in (("acf", ts.autocorrelation), ("hurst", ts.hurst))}
calls.update({f"batch {name} {x.dtype}": (lambda f=f, x=x: f(x, 1024, progress=False))
              for x in (batch32, batch64) for name, f in (("acf", ts.autocorrelation), ("hurst", ts.hurst))})


def values(res):
    return [np.asarray(v) for v in vars(res).values() if isinstance(v, np.ndarray)]


reference = {}
for head in HEADS:
    _transfer.PAGEABLE_HEAD_BYTES = head
    for name, call in calls.items():
        got = values(call())
        if head == HEADS[0]:
            reference[name] = got
        else:
            same = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(reference[name], got))
            print(f"check head {head >> 20} MB {name}: {'bit-identical' if same else 'DIFFERENT'}", flush=True)

table = {}
for rnd in range(ROUNDS):
    for head in HEADS:
        _transfer.PAGEABLE_HEAD_BYTES = head
        for name, call in calls.items():
            ms = med(call)
            table.setdefault((name, head), []).append(ms)
            print(f"round {rnd} head {head >> 20} MB {name}: {ms:.2f} ms", flush=True)

try:
    import torch
    if torch.cuda.is_available():
        for x in (x32, x64):
            def acf(x=x):
                d = torch.from_numpy(x).cuda()
                n = d.numel()
                d = d - d.mean()
                f = torch.fft.rfft(d, n=2 * n)
                c = torch.fft.irfft(f.real ** 2 + f.imag ** 2, n=2 * n)[:1025]
                return (c / c[0]).cpu().numpy()
            print(f"torch FFT ACF(1024) {x.dtype}: {med(acf):.2f} ms", flush=True)
except ImportError:
    print("torch: not installed")

print("\ncall | " + " | ".join(f"head {h >> 20} MB" for h in HEADS) + "   (ms, median of 7 per round; rounds)")
for name in calls:
    print(name + " | " + " | ".join("/".join(f"{v:.2f}" for v in table[(name, h)]) for h in HEADS))
