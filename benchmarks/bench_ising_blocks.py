"""Speed and validation of the "blocks" (double red-black) 2D Ising algorithm.

    python benchmarks/bench_ising_blocks.py                 # full run (GPU: about 2 minutes)
    python benchmarks/bench_ising_blocks.py --quick         # small run (PoCL)
    python benchmarks/bench_ising_blocks.py --validate      # inner_sweeps > 1 against exact results
    options: --json FILE, --sizes 1024,16384, --val-sweeps N, --val-replicas N

The device is the one CLPHYS_DEVICE names (default selection otherwise).
Speed is spin flips per ns: one sweep with inner_sweeps = k counts as k
sweeps' worth (k * Lx * Ly * replicas attempted flips), since each inner sweep
visits every site once.  Every run first checks the kernels bit for bit
against the NumPy twin (exit status 1 on a mismatch).  Stage 1 times every
tile at the largest size (k = 1, device-default unroll), then the other
site-loop variants with the best tile; stage 2 times every size and k = 1, 2, 4 with the best
variant of each RNG.  Small lattices run as many replicas in one launch.  `bench_blocks(device, sizes, ...)` is the measuring
function, reusable from bench_ising.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyopencl as cl
import scipy.stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import clphys  # noqa: E402
from _report import Report  # noqa: E402  (this folder is on sys.path when run as a script)
from clphys.exact import TC_2D, finite_lattice  # noqa: E402
from clphys.ising.blocks import BlocksBackend, reference_sweeps  # noqa: E402
from clphys.ising.thresholds import metropolis_thresholds  # noqa: E402
from clphys.runtime import resolve_device  # noqa: E402

GPU_TILES = [(64, 64), (128, 64), (128, 128), (256, 128), (256, 256)]
CPU_TILES = [(32, 32), (64, 64), (128, 128)]


def _emit(report, row):
    """A row as a JSON line: through `report` (a _report.Report), else printed."""
    if report is None:
        print(json.dumps(row), flush=True)
        return
    extra = {k: v for k, v in row.items() if k not in ("device", "workload", "metric", "value")}
    report.add(row["workload"], row["metric"], row["value"], **extra)


def _replicas_for(L, fill):
    """Replicas so that a launch holds about `fill` sites (small L fill the device)."""
    return max(1, fill // (L * L))


def _time_sweeps(b, thr, min_time, repeats):
    """Median seconds per sweep: warm-up (compiles), calibrate, then repeats."""
    q = b.dev.queue
    b.sweep(1, thr)
    q.finish()
    n = 1
    while True:
        t = time.perf_counter()
        b.sweep(n, thr)
        q.finish()
        dt = time.perf_counter() - t
        if dt >= min_time or n >= 1 << 16:
            break
        n = min(1 << 16, max(2 * n, int(n * 1.5 * min_time / max(dt, 1e-6))))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        b.sweep(n, thr)
        q.finish()
        times.append((time.perf_counter() - t) / n)
    return statistics.median(times)


def bench_blocks(device, sizes, rngs=BlocksBackend.rngs, inner=(1, 2, 4), tiles=None,
                 unrolls=(None,), fill=1 << 24, min_time=0.1, repeats=5, T=TC_2D, report=None):
    """Rows {device, workload, metric="flips_per_ns", value, L, replicas, rng,
    inner_sweeps, tile, unroll, sweep_s} for every size x tile x unroll x rng x
    k; tiles None: the default tile; tiles that do not fit L or the device are
    skipped.  Lattices start all up: the kernels do the same work for any
    configuration (no data-dependent branches).  Each row also goes out as a JSON
    line (through `report` where given)."""
    dev = resolve_device(device)
    rows = []
    for L in sizes:
        R = _replicas_for(L, fill)
        thr = np.stack([metropolis_thresholds(2, T)] * R)
        for tile in (tiles or [None]):
            if tile is not None and (L % (2 * tile[0]) or L % (2 * tile[1])
                                     or tile[0] * tile[1] // 64 > dev.facts.max_work_group):
                continue
            for unroll in unrolls:
                for rng in rngs:
                    for k in inner:
                        try:
                            b = BlocksBackend(dev, (L, L), R, rng=rng, seed=1, inner_sweeps=k,
                                              tile=tile, unroll=unroll)
                            sec = _time_sweeps(b, thr, min_time, repeats)
                        except (ValueError, cl.Error, clphys.ClphysError) as exc:
                            print(f"# skipped L={L} rng={rng} k={k} tile={tile} unroll={unroll}: "
                                  f"{str(exc).splitlines()[0]}", flush=True)
                            continue
                        (W, H), u = b.tile, b.unroll
                        rows.append(dict(device=dev.name, workload=f"blocks 2D L={L} R={R} rng={rng} "
                                         f"k={k} tile={W}x{H} unroll={u}", metric="flips_per_ns",
                                         value=k * L * L * R / sec * 1e-9, L=L, replicas=R, rng=rng,
                                         inner_sweeps=k, tile=(W, H), unroll=u, sweep_s=sec))
                        _emit(report, rows[-1])
                        del b
    return rows


def numpy_baseline(L=512, sweeps=10, T=TC_2D, seed=0):
    """Flips per ns of a vectorised NumPy checkerboard Metropolis (int8, integer thresholds)."""
    rs = np.random.default_rng(seed)
    s = np.where(rs.random((L, L)) < 0.5, 1, -1).astype(np.int8)
    thr = metropolis_thresholds(2, T).astype(np.uint64)
    colour = (np.add.outer(np.arange(L), np.arange(L)) % 2).astype(bool)
    t = time.perf_counter()
    for _ in range(sweeps):
        for c in (False, True):
            k = ((np.roll(s, 1, 0) == s).astype(np.int8) + (np.roll(s, -1, 0) == s)
                 + (np.roll(s, 1, 1) == s) + (np.roll(s, -1, 1) == s))
            w = rs.integers(0, 2**32, size=(L, L), dtype=np.uint64)
            flip = (colour == c) & (w <= thr[(s < 0).astype(int), k])
            s[flip] *= -1
    return sweeps * L * L / (time.perf_counter() - t) * 1e-9


def correctness_check(dev, report=None):
    """Bit-exact comparison with the NumPy twin and the sums with NumPy; rows."""
    rows = []
    cases = [((32, 32), (16, 16), 2), ((128, 64), (32, 16), 2), ((256, 256), (128, 128), 1)]
    if dev.facts.max_work_group >= 1024:
        cases.append(((512, 512), (256, 256), 1))
    for shape, tile, R in cases:
        Lx, Ly = shape
        for rng in BlocksBackend.rngs:
            s0 = np.where(np.random.default_rng(3).random((R, Ly, Lx)) < 0.5, 1, -1).astype(np.int8)
            thr = np.stack([metropolis_thresholds(2, 2.0 + 0.3 * r, 1.0 - 1.5 * r, 0.1) for r in range(R)])
            try:
                b = BlocksBackend(dev, shape, R, rng=rng, seed=9, inner_sweeps=2, tile=tile)
            except ValueError as exc:     # the kernel's registers cap its work group below the tile's
                print(f"# check skipped {Lx}x{Ly} tile={tile} rng={rng}: {exc}", flush=True)
                continue
            b.set_spins(s0)
            b.sweep(2, thr)
            got = b.spins()
            want, _ = reference_sweeps(s0, thr, 2, tile=tile, rng=rng, seed=9, inner_sweeps=2)
            bonds = (got * np.roll(got, 1, 1)).sum((1, 2)) + (got * np.roll(got, 1, 2)).sum((1, 2))
            bond, mag = b.sums()
            ok = bool((got == want).all() and (bond == bonds).all() and (mag == got.sum((1, 2))).all())
            rows.append(dict(device=dev.name, workload=f"blocks check {Lx}x{Ly} tile={tile[0]}x{tile[1]} "
                             f"rng={rng}", metric="bit_exact", value=ok))
            _emit(report, rows[-1])
    return rows


# ---------------------------------------------------------------- validation
def _jackknife(f, *cols):
    n = cols[0].shape[1]
    full = f(*(c.mean(0).mean() for c in cols))
    loo = np.array([f(*(np.delete(c.mean(0), i).mean() for c in cols)) for i in range(n)])
    return full, float(np.sqrt((n - 1) / n * ((loo - loo.mean()) ** 2).sum()))


def _bond_series(b, thr, n_meas, batch=100):
    """Bond sums after each of n_meas sweeps, (n_meas, replicas): the sums go
    into a device buffer and come back once per `batch` sweeps."""
    R = b.n_replicas
    buf = cl.Buffer(b.dev.context, cl.mem_flags.READ_WRITE, batch * R * 16)
    out = np.empty((n_meas, R))
    host = np.empty((batch, R, 2), np.int64)
    for start in range(0, n_meas, batch):
        n = min(batch, n_meas - start)
        for t in range(n):
            b.sweep(1, thr)
            b.sums_into(buf, t * R)
        cl.enqueue_copy(b.dev.queue, host, buf)
        out[start:start + n] = host[:n, :, 0]
    return out


def validate(dev, L=32, temperatures=(2.0, TC_2D, 2.5), inner=(1, 2, 4, 8), replicas=64,
             n_therm=500, n_meas=4000, seed=1, report=None):
    """<E>/N and C/N against Kaufman's exact values for each rng and k: one
    launch holds `replicas` lattices per temperature; errors are jackknife
    over replicas.  Returns rows with value, error, exact and z."""
    rows = []
    exact = finite_lattice(L, list(temperatures))
    N = L * L
    T = np.repeat(temperatures, replicas)
    thr = np.stack([metropolis_thresholds(2, t) for t in T])
    for rng in BlocksBackend.rngs:
        for k in inner:
            b = BlocksBackend(dev, (L, L), len(T), rng=rng, seed=seed, inner_sweeps=k)
            b.sweep(n_therm, thr)
            E = -_bond_series(b, thr, n_meas)
            for i, temp in enumerate(temperatures):
                Ei = E[:, i * replicas:(i + 1) * replicas]
                for name, (v, e), want in (
                        ("E/N", _jackknife(lambda m: m / N, Ei), exact.energy[i]),
                        ("C/N", _jackknife(lambda m1, m2, temp=temp: (m2 - m1 ** 2) / (temp ** 2 * N), Ei, Ei ** 2),
                         exact.specific_heat[i])):
                    rows.append(dict(device=dev.name, workload=f"blocks validate L={L} T={temp:.4f} "
                                     f"rng={rng} k={k} replicas={replicas} sweeps={n_meas}",
                                     metric=name, value=float(v), error=e, exact=float(want),
                                     z=float((v - want) / e)))
                    _emit(report, rows[-1])
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (PoCL)")
    ap.add_argument("--validate", action="store_true", help="unbiasedness of inner_sweeps > 1")
    ap.add_argument("--sizes", help="comma-separated L (default: GPU 256,1024,4096,16384)")
    ap.add_argument("--val-sweeps", type=int, default=4000, help="measured sweeps per run")
    ap.add_argument("--val-replicas", type=int, default=64, help="replicas per temperature")
    ap.add_argument("--val-L", type=int, default=32, help="lattice side")
    ap.add_argument("--val-therm", type=int, default=500, help="thermalisation sweeps")
    ap.add_argument("--val-inner", default="1,2,4,8", help="comma-separated inner_sweeps")
    ap.add_argument("--json", help="also append the JSON lines to this file")
    args = ap.parse_args(argv)
    dev = clphys.device()
    print(f"# device: {dev.name} ({dev.facts.platform}, driver {dev.facts.driver})", flush=True)
    report = Report.for_device(dev, args.json)
    rows = correctness_check(dev, report)
    failed = [r for r in rows if not r["value"]]
    if args.validate:
        val = validate(dev, L=args.val_L, inner=[int(k) for k in args.val_inner.split(",")],
                       n_therm=args.val_therm, n_meas=args.val_sweeps, replicas=args.val_replicas,
                       report=report)
        rows += val
        table = [f"{'workload':<70} {'metric':>5} {'value':>12} {'error':>10} {'exact':>12} {'z':>6}"]
        table += [f"{r['workload']:<70} {r['metric']:>5} {r['value']:12.6f} {r['error']:10.2e} "
                  f"{r['exact']:12.6f} {r['z']:+6.2f}" for r in val]
        groups = {}
        for r in val:
            groups.setdefault(r["workload"].split(" rng=")[1].split(" replicas")[0], []).append(r["z"])
        for name, z in groups.items():
            chi2 = float(np.sum(np.square(z)))
            table.append(f"rng={name}: chi2 = {chi2:.1f} for {len(z)} values, "
                         f"p = {scipy.stats.chi2.sf(chi2, len(z)):.2f}")
    else:
        gpu = dev.facts.is_gpu and not args.quick
        sizes = ([int(v) for v in args.sizes.split(",")] if args.sizes
                 else [256, 1024, 4096, 16384] if gpu else [64, 256, 1024])
        fill = 1 << 24 if gpu else 1 << 18
        reps = 5 if gpu else 3
        kw = dict(fill=fill, repeats=reps, report=report)
        # stage 1: tiles (site code written out), then loop variants with the best tile
        scan = bench_blocks(dev, [max(sizes)], inner=(1,), tiles=GPU_TILES if gpu else CPU_TILES, **kw)
        best = {}
        for rng in BlocksBackend.rngs:
            top = max((r for r in scan if r["rng"] == rng), key=lambda r: r["value"], default=None)
            if top is None:
                continue
            scan += bench_blocks(dev, [max(sizes)], rngs=(rng,), inner=(1,), tiles=[top["tile"]],
                                 unrolls=(1, 4) if gpu else (0, 4), **kw)
            top = max((r for r in scan if r["rng"] == rng), key=lambda r: r["value"])
            best[rng] = (top["tile"], top["unroll"])
        # stage 2: every size and k with the best variant of each rng
        sweep_rows = []
        for rng, (tile, unroll) in best.items():
            for L in sizes:
                fits = L % (2 * tile[0]) == 0 and L % (2 * tile[1]) == 0
                sweep_rows += bench_blocks(dev, [L], rngs=(rng,), tiles=[tile if fits else None],
                                           unrolls=(unroll,), **kw)
        L_base = 256 if args.quick else 512
        base = numpy_baseline(L_base, sweeps=5)
        rows += scan + sweep_rows + [dict(device=dev.name, workload=f"numpy checkerboard 2D L={L_base} "
                                          "(host CPU)", metric="flips_per_ns", value=base)]
        _emit(report, rows[-1])
        table = [f"{'workload':<66} {'flips/ns':>10}"]
        table += [f"{r['workload']:<66} {r['value']:10.3f}" for r in scan + sweep_rows + rows[-1:]]
        table.append("best (tile, unroll) per rng: " + ", ".join(
            f"{rng}: {t[0]}x{t[1]}, unroll={u}" for rng, (t, u) in best.items()))
    table.append("correctness: " + ("all bit-exact" if not failed else
                                    "MISMATCH in " + ", ".join(r["workload"] for r in failed)))
    print("\n".join(table))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
