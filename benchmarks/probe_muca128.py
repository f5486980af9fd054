"""The 2D multicanonical iteration at L (default 128) for a wall budget in seconds: one JSON
line per iteration until the callback stops it (benchmarks/RESULTS.md, muca, L = 128 in part).

    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_muca128.py 280 128
"""
import sys, time, json
from clphys import muca
budget = float(sys.argv[1])
t0 = time.perf_counter()
L = int(sys.argv[2]) if len(sys.argv) > 2 else 128
sim = muca.Multicanonical(L, dim=2, seed=0)
print("walkers", sim.walkers if hasattr(sim, "walkers") else "?", "setup %.1f s" % (time.perf_counter() - t0), flush=True)
rows = []
def cb(rec):
    rows.append(rec)
    print(json.dumps({k: (float(v) if hasattr(v, "__float__") else str(v)) for k, v in vars(rec).items()}), flush=True)
    if time.perf_counter() - t0 > budget:
        raise KeyboardInterrupt
try:
    sim.iterate(progress=False, callback=cb)
    print("CONVERGED", time.perf_counter() - t0)
except KeyboardInterrupt:
    print("stopped after %d iterations, %.1f s" % (len(rows), time.perf_counter() - t0))
