#!/usr/bin/env python
"""Scaling over MPI ranks (one device per rank): weak scaling of one multispin
Ising lattice split in slabs (2D 32768^2 and 3D 512^3 per device), strong
scaling of one 65536^2 lattice, the Josephson sweep's speed-up, and where the
halo path spends its host time. Correctness first: a split lattice must give
the spins of the same lattice on one device.

    python benchmarks/bench_scaling.py --quick                 # PoCL, 2 ranks, small sizes
    python benchmarks/bench_scaling.py --quick --ranks 3
    CLPHYS_DEVICE=nvidia python benchmarks/bench_scaling.py --ranks 2 --json scaling.jsonl

This script is the driver: it starts the measurements itself with
``LAUNCHER -n k python bench_scaling.py --worker ...`` for k = 1 .. --ranks
(default launcher: the mpiexec beside this Python, i.e. the mpich wheel's).
With Open MPI on a GPU node (e.g. nvidia-h200-x2, Open MPI 4.1 in /usr/bin):

    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1   # only when running as root
    CLPHYS_DEVICE=nvidia python benchmarks/bench_scaling.py --ranks 2 \\
        --launcher "mpirun -x PYTHONPATH -x CLPHYS_DEVICE" --json scaling.jsonl

(the workers are started with this Python's full path, so mpirun's PATH does
not matter; carry mpi4py built for that MPI, not the mpich wheel).

Figures (JSON lines through benchmarks/_report.py, each naming the device model
and its rank count; the table last):
* weak 2D / 3D: total and per-rank flips/ns on k ranks, each rank holding
  --weak2d^2 (--weak3d^3) spins, and the efficiency (per-rank flips/ns on k
  ranks over one device without MPI); the issue's target is >= 95 % at 2
  GPUs;
* strong 2D: one --strong^2 lattice on 1 .. k ranks (speed-up over one
  device without MPI);
* halo path (rank 0 and the slowest rank, per half-sweep, the exchanges of
  halos of h slabs every h / 2 sweeps amortised over them): host time waiting
  for the edge slabs (edge kernels + device-to-host copies), in the MPI
  exchange, and queueing the halo writes, against the half-sweep's time;
  ``--halo 1 16`` measures each halo depth (1: an exchange per half-sweep, the
  older path), default the device's (clphys.ising.slabs.DEFAULT_HALO);
* josephson: a sweep of --points drive amplitudes x --paths paths over k
  ranks (grid points split), its speed-up (target >= 1.9x at 2 GPUs).
T = Tc (2D: 2.269185, 3D: 4.5115), random start, a warm-up of 4 sweeps, then
sweeps calibrated to ~--seconds, the median of --repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import Report  # noqa: E402  (this folder is on sys.path when run as a script)

TC = {2: 2.269185314213022, 3: 4.5115}


# ------------------------------------------------------------------ workers (run under MPI)
def _comm():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def _lattice(dim, shape, split, seed=1, halo=None):
    from clphys.ising import Ising2D, Ising3D
    cls = Ising2D if dim == 2 else Ising3D
    if split:
        return cls(shape, TC[dim], seed=seed, comm=_comm(), halo=halo)
    return cls(shape, TC[dim], seed=seed, sweeps_per_launch=1)


def _timed_sweeps(lat, comm, seconds, repeats):
    """Median seconds per sweep (all ranks in step: a barrier around each run)."""
    lat.sweep(4)                                  # compile, first launches
    lat.device.queue.finish()
    n = 4
    while True:                                   # calibrate on rank 0's clock
        comm.Barrier()
        t0 = time.perf_counter()
        lat.sweep(n)
        lat.device.queue.finish()
        comm.Barrier()
        t = comm.bcast(time.perf_counter() - t0, root=0)
        if t > 0.2 * seconds or n >= 1 << 20:
            break
        n *= 2
    n = max(1, int(n * seconds / max(t, 1e-9)))
    times = []
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        lat.sweep(n)
        lat.device.queue.finish()
        comm.Barrier()
        times.append(comm.bcast(time.perf_counter() - t0, root=0) / n)
    return statistics.median(times), n


def worker_lattice(args):
    comm = _comm()
    size = comm.Get_size()
    dim = 3 if args.worker.endswith("3d") else 2
    L = args.size
    if args.worker.startswith("weak"):
        shape = (L, L, L * size) if dim == 3 else (L, L * size)
    else:
        shape = (L,) * dim
    split = not args.plain
    lat = _lattice(dim, shape, split, halo=args.halo_slabs)
    before = dict(lat.halo_times) if split else None
    per_sweep, n = _timed_sweeps(lat, comm, args.seconds, args.repeats)
    out = {"ranks": size, "shape": list(shape), "sweep_s": per_sweep, "sweeps": n,
           "flips_per_ns": lat.n_spins / per_sweep / 1e9, "device": lat.device.facts.name,
           "driver": lat.device.facts.driver, "plain": not split}
    if split:
        t = lat.halo_times
        halves = max(1, t["half-sweeps"] - before["half-sweeps"])
        mine = {k: (t[k] - before[k]) / halves for k in ("edge wait", "exchange", "halo writes")}
        everyone = comm.gather(mine, root=0)
        if comm.Get_rank() == 0:
            out["halo_rank0_us"] = {k: 1e6 * v for k, v in everyone[0].items()}
            out["halo_max_us"] = {k: 1e6 * max(e[k] for e in everyone) for k in mine}
            out["half_sweep_us"] = 1e6 * per_sweep / 2
            out["local_shape"] = list(lat.local_shape)
            out["halo"] = lat.halo
    if comm.Get_rank() == 0:
        print("RESULT " + json.dumps(out), flush=True)


def worker_josephson(args):
    import numpy as np
    from clphys import sde
    comm = _comm()
    kw = dict(a=np.linspace(4.0, 4.4, args.points), n_paths=args.paths, periods=args.periods,
              comm=None if args.plain else comm)
    sde.josephson(**{**kw, "periods": 2})          # compile
    times = []
    for _ in range(args.repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        sde.josephson(**kw)
        comm.Barrier()
        times.append(comm.bcast(time.perf_counter() - t0, root=0))
    if comm.Get_rank() == 0:
        import clphys
        facts = clphys.device().facts
        steps = args.points * args.paths * args.periods * 100
        print("RESULT " + json.dumps({"ranks": comm.Get_size(), "seconds": statistics.median(times),
                                      "steps_per_s": steps / statistics.median(times),
                                      "plain": args.plain, "device": facts.name,
                                      "driver": facts.driver}), flush=True)


def worker_check(args):
    """A split lattice against the same lattice on one device (rank 0 runs both)."""
    import numpy as np
    comm = _comm()
    ok = True
    for dim, shape in ((2, (args.size, args.size)), (3, (32, 32, 16 * comm.Get_size()))):
        lat = _lattice(dim, shape, True, seed=5, halo=args.halo_slabs)
        lat.sweep(3)
        spins, e = lat.spins(), lat.energy()
        if comm.Get_rank() == 0:
            one = _lattice(dim, shape, False, seed=5)
            one.sweep(3)
            ok &= bool(np.array_equal(spins, one.spins()) and e == one.energy())
    if comm.Get_rank() == 0:
        print("RESULT " + json.dumps({"ok": ok}), flush=True)


# ------------------------------------------------------------------ driver
class Driver:
    def __init__(self, args):
        self.args = args
        self.rows = []
        self.failed = False
        self.report = Report(args.json, device=None, driver=None)   # each worker names its device
        self.launcher = shlex.split(args.launcher) if args.launcher else [_default_mpiexec()]

    def run(self, ranks, worker, *extra):
        cmd = [*self.launcher, "-n", str(ranks), sys.executable, str(Path(__file__).resolve()),
               "--worker", worker, "--seconds", str(self.args.seconds), "--repeats", str(self.args.repeats),
               *map(str, extra)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                                         os.environ.get("PYTHONPATH")])))
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=self.args.timeout)
        lines = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
        if r.returncode or not lines:
            print(f"FAILED: {' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}", file=sys.stderr)
            self.failed = True
            return None
        return json.loads(lines[-1][len("RESULT "):])

    def emit(self, result, ranks, workload, metric, value):
        """One figure of a worker's `result` (its device and driver) on `ranks` ranks."""
        self.report.add(workload, metric, float(value), ranks=ranks, device=result["device"],
                        driver=result["driver"])
        self.rows.append((f"{workload}, {ranks} rank{'s' * (ranks > 1)}", metric, value))

    def table(self):
        print(f"\n{'workload':<46} {'metric':<40} {'value':>12}")
        for w, m, v in self.rows:
            print(f"{w:<46} {m:<40} {v:12.4g}")


def _default_mpiexec():
    here = shutil.which("mpiexec", path=os.path.dirname(sys.executable))
    found = here or shutil.which("mpiexec") or shutil.which("mpirun")
    if not found:
        sys.exit("no mpiexec found: pip install 'clphys[mpi]' or pass --launcher")
    return found


def lattices(d, a, ranks):
    for case, size, label in (("weak2d", a.weak2d, f"2D {a.weak2d}^2 per rank"),
                              ("weak3d", a.weak3d, f"3D {a.weak3d}^3 per rank"),
                              ("strong2d", a.strong, f"2D {a.strong}^2 in all")):
        base = d.run(1, case, "--size", size, "--plain")
        if base is None:
            continue
        d.emit(base, 1, f"{case} {label}, no MPI", "flips/ns", base["flips_per_ns"])
        for k, halo in ((k, h) for k in range(1, ranks + 1) for h in a.halo):
            r = d.run(k, case, "--size", size, *(() if halo is None else ("--halo-slabs", halo)))
            if r is None:
                continue
            w = f"{case} {label}, halo {r['halo']}"
            d.emit(r, k, w, "flips/ns (total)", r["flips_per_ns"])
            d.emit(r, k, w, "flips/ns per rank", r["flips_per_ns"] / k)
            if case.startswith("weak"):
                d.emit(r, k, w, "efficiency (per rank / one device)", r["flips_per_ns"] / k / base["flips_per_ns"])
            else:
                d.emit(r, k, w, "speed-up over one device", r["flips_per_ns"] / base["flips_per_ns"])
            d.emit(r, k, w, "half-sweep us", r["half_sweep_us"])
            for part in ("edge wait", "exchange", "halo writes"):
                d.emit(r, k, w, f"halo path: {part} us (rank 0)", r["halo_rank0_us"][part])
                d.emit(r, k, w, f"halo path: {part} us (slowest rank)", r["halo_max_us"][part])


def josephson(d, a, ranks):
    extra = ("--points", a.points, "--paths", a.paths, "--periods", a.periods)
    base = d.run(1, "josephson", *extra, "--plain")
    if base is None:
        return
    w = f"josephson {a.points} points x {a.paths} paths x {a.periods} periods"
    d.emit(base, 1, f"{w}, no MPI", "seconds", base["seconds"])
    for k in range(2, ranks + 1):
        r = d.run(k, "josephson", *extra)
        if r is not None:
            d.emit(r, k, w, "seconds", r["seconds"])
            d.emit(r, k, w, "speed-up over one device", base["seconds"] / r["seconds"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (PoCL, a few minutes on 2 cores)")
    ap.add_argument("--ranks", type=int, default=2, help="largest number of ranks (default 2)")
    ap.add_argument("--launcher", default=None,
                    help="MPI launcher and its options, e.g. 'mpirun -x PYTHONPATH -x CLPHYS_DEVICE' "
                         "(default: the mpiexec beside this Python)")
    ap.add_argument("--seconds", type=float, default=None, help="seconds per timed run")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per figure (median)")
    ap.add_argument("--weak2d", type=int, default=None, help="2D L per rank (default 32768; quick 512)")
    ap.add_argument("--weak3d", type=int, default=None, help="3D L per rank (default 512; quick 64)")
    ap.add_argument("--strong", type=int, default=None, help="2D L of the strong scaling (default 65536; quick 1024)")
    ap.add_argument("--points", type=int, default=None, help="Josephson drive amplitudes (default 100; quick 8)")
    ap.add_argument("--paths", type=int, default=None, help="Josephson paths per point (default 1024; quick 256)")
    ap.add_argument("--periods", type=int, default=None, help="Josephson periods (default 2000; quick 20)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per launch")
    ap.add_argument("--halo", type=int, nargs="+", default=[None],
                    help="halo slabs per side of the split lattices, one run each (default: the "
                         "device's; e.g. --halo 1 16: an exchange per half-sweep, then every 8 sweeps)")
    ap.add_argument("--halo-slabs", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help="append the JSON lines to this file")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    quick = a.quick
    defaults = {"seconds": 0.5 if quick else 2.0, "repeats": 3 if quick else 5,
                "weak2d": 512 if quick else 32768, "weak3d": 64 if quick else 512,
                "strong": 1024 if quick else 65536, "points": 8 if quick else 100,
                "paths": 256 if quick else 1024, "periods": 20 if quick else 2000}
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.worker:
        if a.worker == "josephson":
            return worker_josephson(a)
        if a.worker == "check":
            return worker_check(a)
        return worker_lattice(a)
    d = Driver(a)
    check = d.run(a.ranks, "check", "--size", 128, *(() if a.halo[-1] is None else ("--halo-slabs", a.halo[-1])))
    if check is None or not check["ok"]:
        print("FAILED: a split lattice differs from the same lattice on one device", file=sys.stderr)
        d.failed = True
    else:
        print(f"check: a lattice split over {a.ranks} ranks has the spins of one device (2D, 3D)", flush=True)
    lattices(d, a, a.ranks)
    josephson(d, a, a.ranks)
    d.table()
    return 1 if d.failed else 0


if __name__ == "__main__":
    sys.exit(main())
