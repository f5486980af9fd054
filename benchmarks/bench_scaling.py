#!/usr/bin/env python
"""Scaling over MPI ranks, one device per rank, every distributed workload in
one invocation: the Ising lattice split in slabs (weak 2D and 3D, strong 2D),
sweeps and ensembles split by points or replicas (Josephson, Kuramoto,
binder_scan, Ensemble2D/3D), multicanonical walkers, and NVIDIA's
cuIsingModel in the same run (``--peer``). Correctness first: a split lattice
must give the spins of the same lattice on one device.

    python benchmarks/bench_scaling.py --quick                     # PoCL, small sizes
    CLPHYS_DEVICE=nvidia python benchmarks/bench_scaling.py --ranks 4 \\
        --peer ../shared/peers/cuIsingModel --json scaling.jsonl --plot scaling.png

This script is the driver: it starts the measurements itself with
``LAUNCHER -n k python bench_scaling.py --worker ...`` (default launcher: the
mpiexec beside this Python, i.e. the mpich wheel's; ``--launcher "mpirun -x
PYTHONPATH -x CLPHYS_DEVICE"`` for Open MPI) for k in 1, 2, 4, ... up to
--ranks. docs/mpi.md ("Speed") says how to read the figures.

Figures (JSON lines through benchmarks/_report.py, each naming the device
model and its rank count; the table last):

* lattices (T = Tc, random start, 4 sweeps of warm-up, then sweeps calibrated
  to ~--seconds, the median of --repeats): weak 2D / 3D (--weak2d^2 /
  --weak3d^3 per rank) and strong 2D (one --strong^2 lattice): flips/ns,
  efficiency per rank against one device without MPI ("alone", GPU 0) and
  against every device running its own lattice at the same time ("all
  alone": the spread of the devices and of a busy host, no exchange). Each
  halo depth of --halo2d / --halo3d is measured. Where the time goes, per
  sweep, from a profiled run of a few exchange cycles: the device's span and
  busy time, kernels by phase (update, edges, ahead, rings), copies (edge
  reads, halo writes), and the host's edge wait, MPI exchange and halo-write
  queueing (slowest rank);
* sweeps (their size calibrated so that one device takes --sweep-seconds, the
  small Josephson sweep --small-seconds, and the large one, 100 x 1024 x 2000):
  seconds and speed-up on k ranks, and "compute": the slowest rank's share run
  alone (no MPI), so that call - compute is what distributing costs; the
  "-wide" Josephson and Ensemble3D sweeps have 4 times the paths or replicas,
  so that each of 4 GPUs gets as many as one GPU alone has in the narrow ones;
* muca: the same walkers (k x one device's default, or k x
  --muca-walkers-per-rank) and iterations on one device and on k ranks:
  seconds per iteration, speed-up, and whether the log weights are equal bit
  for bit;
* peer: cuIsingModel (built from a copy of --peer with its Makefile.cuda13)
  weak and strong 2D on 1 .. k GPUs.
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
import tempfile
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


def _say(result):
    print("RESULT " + json.dumps(result), flush=True)


def _facts():
    import clphys
    f = clphys.device().facts
    return {"device": f.name, "driver": f.driver}


def _clock(comm, fn, mine=None):
    """Seconds of fn() on every rank, barrier to barrier (rank 0's clock); this
    rank's own seconds appended to the list `mine` if given."""
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    if mine is not None:
        mine.append(time.perf_counter() - t0)
    comm.Barrier()
    return comm.bcast(time.perf_counter() - t0, root=0)


def _lattice(dim, shape, comm=None, halo=None, seed=1):
    from clphys.ising import Ising2D, Ising3D
    from clphys.ising.multispin_plan import tuned
    cls = Ising2D if dim == 2 else Ising3D
    if comm is not None:
        return cls(shape, TC[dim], seed=seed, comm=comm, halo=halo)
    return tuned(cls, shape, TC[dim], seed=seed, sweeps_per_launch=1)


def _timed_sweeps(lat, comm, seconds, repeats, mine=None):
    """Median seconds per sweep (all ranks in step: a barrier around each run);
    `mine` (a list) gets this rank's own median."""
    q = lat.device.queue

    def run(n):
        lat.sweep(n)
        q.finish()
    run(4)                                        # compile, first launches
    n = 4
    while True:                                   # calibrate on rank 0's clock
        t = _clock(comm, lambda n=n: run(n))
        if t > 0.2 * seconds or n >= 1 << 20:
            break
        n *= 2
    n = max(1, int(n * seconds / max(t, 1e-9)))
    own = []
    times = [_clock(comm, lambda: run(n), own) / n for _ in range(repeats)]
    if mine is not None:
        mine.append(statistics.median(own) / n)
    return statistics.median(times), n


def _profile(lat, comm, sweeps):
    """Where one rank's time goes in `sweeps` sweeps of a split lattice (whole
    exchange cycles through the backend, profiling queues): per sweep, in us."""
    be, dev = lat.ensemble.backend, lat.device
    thr = lat.ensemble.thresholds
    with be.profiled() as start_trace:
        be.sweep(sweeps, thr)                      # (new queues: warm)
        dev.queue.finish()
        before = dict(be.halo_times)
        trace = start_trace()
        comm.Barrier()
        t0 = time.perf_counter()
        be.sweep(sweeps, thr)
        dev.queue.finish()
        be.copies.finish()
        wall = time.perf_counter() - t0
    evs = [(phase, e.profile.start, e.profile.end) for phase, e in trace]
    kernels = sorted((s, e) for p, s, e in evs if p not in ("edge reads", "halo writes"))   # (and edge copies)
    span = max(e for _, e in kernels) - kernels[0][0]
    busy, end = 0, kernels[0][0]
    for s, e in kernels:
        busy += max(0, e - max(s, end))
        end = max(end, e)
    per = 1e-3 / sweeps                            # ns in all -> us per sweep
    out = {"wall": 1e6 * wall / sweeps, "device span": span * per, "device busy": busy * per,
           "device idle": (span - busy) * per,
           "launches": sum(p not in ("edge reads", "halo writes") for p, _, _ in evs) / sweeps}
    for phase in ("update", "edges", "ahead", "rings", "edge copies", "edge reads", "halo writes"):
        out[phase] = sum(e - s for p, s, e in evs if p == phase) * per
    for part in ("edge wait", "exchange", "halo writes"):
        out["host " + part] = 1e6 * (be.halo_times[part] - before[part]) / sweeps
    out["redundant share"] = (be.h - 1) / (be.own + be.h - 1) if be.h > 1 else 0.0
    return out


def _cases(a, size):
    """(case, dim, shape on `size` ranks, halos to measure)."""
    return [("weak2d", 2, (a.weak2d, a.weak2d * size), a.halo2d),
            ("weak3d", 3, (a.weak3d, a.weak3d, a.weak3d * size), a.halo3d),
            ("strong2d", 2, (a.strong, a.strong), a.halo2d)]


def worker_lattices(a):
    """--mode alone: every rank its own lattice of one rank's share, no MPI
    in the sweeps (rank 0's rate, and every rank's); split: one lattice over
    the ranks, for each halo depth."""
    import gc
    comm = _comm()
    size, rank = comm.Get_size(), comm.Get_rank()
    for case, dim, shape, halos in _cases(a, size):
        if a.mode == "alone":
            one = shape if case == "strong2d" else shape[:-1] + (shape[-1] // size,)
            lat = _lattice(dim, one)
            mine = []
            per_sweep, n = _timed_sweeps(lat, comm, a.seconds, a.repeats, mine)
            # each rank's own rate, all ranks running at once
            rates = comm.gather(lat.n_spins / mine[0] / 1e9, root=0)
            out = {"case": case, "ranks": size, "shape": list(one), "flips_per_ns": lat.n_spins / per_sweep / 1e9,
                   "per_rank": rates, "sweep_s": per_sweep, **_facts()}
            del lat
            gc.collect()
            if rank == 0:
                _say(out)
            continue
        for halo in halos:
            lat = _lattice(dim, shape, comm, halo=halo)
            per_sweep, n = _timed_sweeps(lat, comm, a.seconds, a.repeats)
            cycle = max(1, lat.halo // 2)
            prof = _profile(lat, comm, cycle * max(2, -(-16 // cycle)))
            profs = comm.gather(prof, root=0)
            out = {"case": case, "ranks": size, "shape": list(shape), "halo": lat.halo,
                   "flips_per_ns": lat.n_spins / per_sweep / 1e9, "sweep_s": per_sweep, "sweeps": n,
                   "local_shape": list(lat.local_shape), **_facts()}
            if rank == 0:
                out["profile rank 0"] = profs[0]
                out["profile slowest"] = {k: max(p[k] for p in profs) for k in profs[0]}
                _say(out)
            del lat
            gc.collect()


def worker_check(a):
    """A split lattice against the same lattice on one device (rank 0 runs both)."""
    import numpy as np
    comm = _comm()
    ok = True
    for dim, shape in ((2, (a.size, a.size)), (3, (32, 32, 16 * comm.Get_size()))):
        for halo in (None, 2):
            lat = _lattice(dim, shape, comm, halo=halo, seed=5)
            lat.sweep(5)
            spins, e = lat.spins(), lat.energy()
            if comm.Get_rank() == 0:
                one = _lattice(dim, shape, seed=5)
                one.sweep(5)
                ok &= bool(np.array_equal(spins, one.spins()) and e == one.energy())
    if comm.Get_rank() == 0:
        _say({"ok": ok, **_facts()})


# -- sweeps: each has a size knob (calibrated on one device), a run over the
# ranks (comm) and a run of one rank's share alone (comm None)
def _sweeps(a):
    import numpy as np

    from clphys import sde
    from clphys.ising import Ensemble2D, Ensemble3D, binder_scan
    from clphys.runtime.mpi import split

    def share(items, comm):
        if comm is None:
            return items
        first, count = split(len(items), comm.Get_size(), comm.Get_rank())
        return items[first:first + count]

    def josephson(points, paths):
        a_ = np.linspace(4.0, 4.4, points)

        def run(periods, comm, alone=False):
            mine = share(a_, comm) if alone else a_
            if len(mine):
                sde.josephson(a=mine, n_paths=paths, periods=periods, comm=None if alone else comm)
        return run

    def kuramoto(n, points):
        K = np.linspace(0.5, 4.0, points)

        def run(steps, comm, alone=False):
            mine = share(K, comm) if alone else K
            if len(mine):
                sde.kuramoto_sweep(n, mine, 1.0, t_end=steps * 0.01, dt=0.01, sample_every=100,
                                   comm=None if alone else comm)
        return run

    def ensemble(cls, L, replicas):
        T = np.linspace(0.9, 1.1, replicas) * TC[2 if cls is Ensemble2D else 3]

        def run(measure, comm, alone=False):
            if alone and comm is not None:
                first, count = split(replicas, comm.Get_size(), comm.Get_rank())
                if count:
                    cls(L, T[first:first + count], replica_offset=first).sample(measure, every=10, n_therm=0)
            else:
                cls(L, T, comm=comm).sample(measure, every=10, n_therm=0)
        return run

    def binder(sizes, temps, replicas):
        def run(measure, comm, alone=False):
            if not alone:
                binder_scan(sizes, np.linspace(2.2, 2.35, temps), replicas=replicas, n_measure=measure,
                            every=2, comm=comm)
        return run

    q = a.quick
    # name: (label with {} for the knob, run, smallest knob, target seconds or None: fixed knob)
    return {
        "josephson": ("josephson 100 points x {} paths x {{}} periods".format(256 if q else 8192),
                      josephson(100, 256 if q else 8192), 2, a.sweep_seconds),
        # the same sweeps with 4 times the paths or replicas: shares that fill a GPU each
        "josephson-wide": ("josephson 100 points x {} paths x {{}} periods".format(1024 if q else 32768),
                           josephson(100, 1024 if q else 32768), 2, a.sweep_seconds),
        "josephson-small": ("josephson 256 points x {} paths x {{}} periods".format(64 if q else 1024),
                            josephson(256, 64 if q else 1024), 2, a.small_seconds),
        "josephson-issue": ("josephson 100 points x {} paths x {{}} periods".format(16 if q else 1024),
                            josephson(100, 16 if q else 1024), 20 if q else 2000, None),
        "kuramoto": ("kuramoto_sweep N={} 16 couplings x {{}} steps".format(2**12 if q else 2**22),
                     kuramoto(2**12 if q else 2**22, 16), 100, a.sweep_seconds),
        "binder": ("binder_scan L=32,64 8 T x {} replicas, {{}} measurements".format(8 if q else 128),
                   binder((32, 64), 8, 8 if q else 128), 32, a.sweep_seconds),
        "ensemble2d": ("Ensemble2D L={} x {} replicas, {{}} measurements every 10".format(
            64 if q else 512, 16 if q else 256), ensemble(Ensemble2D, 64 if q else 512, 16 if q else 256),
            10, a.sweep_seconds),
        "ensemble3d": ("Ensemble3D L={} x {} replicas, {{}} measurements every 10".format(
            16 if q else 64, 16 if q else 256), ensemble(Ensemble3D, 16 if q else 64, 16 if q else 256),
            10, a.sweep_seconds),
        "ensemble3d-wide": ("Ensemble3D L={} x {} replicas, {{}} measurements every 10".format(
            16 if q else 64, 64 if q else 1024), ensemble(Ensemble3D, 16 if q else 64, 64 if q else 1024),
            10, a.sweep_seconds),
    }


def worker_sweeps(a):
    """--mode alone (one rank): calibrate each sweep's size to its target time
    and time it; split: the sizes of --knobs over the ranks, and each rank's
    share alone."""
    comm = _comm()
    size = comm.Get_size()
    knobs = json.loads(a.knobs) if a.knobs else {}
    for name, (label, run, smallest, target) in _sweeps(a).items():
        if a.only and name not in a.only:
            continue
        run(smallest, None if a.mode == "alone" else comm)          # compile, first calls
        if a.mode == "alone":
            knob = smallest
            if target is not None:
                knob = _calibrate(comm, run, smallest, target)
            times = [_clock(comm, lambda run=run, knob=knob: run(knob, None)) for _ in range(a.repeats if target is None
                                                                        or target < 1 else 1)]
            out = {"name": name, "label": label.format(knob), "knob": knob, "ranks": 1,
                   "seconds": statistics.median(times)}
        else:
            knob = knobs[name]
            reps = 1 if knob_is_long(a, name) else a.repeats
            times = [_clock(comm, lambda run=run, knob=knob: run(knob, comm)) for _ in range(reps)]
            alone = [_clock(comm, lambda run=run, knob=knob: run(knob, comm, alone=True)) for _ in range(reps)]
            out = {"name": name, "label": label.format(knob), "knob": knob, "ranks": size,
                   "seconds": statistics.median(times),
                   "compute": None if name == "binder" else statistics.median(alone)}
        if comm.Get_rank() == 0:
            _say({**out, **_facts()})


def _calibrate(comm, run, smallest, target):
    """The knob whose run takes about `target` seconds on one device: from the
    time per unit of the knob between two sizes, so that a fixed cost (set-up,
    planning) is not taken for work that grows with the knob."""
    knob = smallest
    t = _clock(comm, lambda: run(knob, None))
    if t >= target:
        return knob
    while True:
        bigger = int(knob * min(16, max(2, 0.2 * target / max(t, 1e-6))))
        t2 = _clock(comm, lambda bigger=bigger: run(bigger, None))
        per = (t2 - t) / (bigger - knob)
        if t2 > 0.1 * target and per > 0 and t2 - t > 0.05 * t2:
            return max(smallest, round(bigger + (target - t2) / per))
        if t2 > 2 * target:
            return bigger
        knob, t = bigger, t2


def knob_is_long(a, name):
    return name not in ("josephson-small", "josephson-issue")


def worker_muca(a):
    """The same walkers and iterations on one device (--mode alone, one rank)
    and over the ranks: seconds per iteration and a digest of the weights."""
    import hashlib

    from clphys.muca import Multicanonical
    comm = _comm()
    for L in a.muca:
        t0 = time.perf_counter()
        if a.mode == "alone":
            walkers = (a.muca_walkers_per_rank or Multicanonical(L).walkers) * a.muca_ranks
            m = Multicanonical(L, walkers=walkers)
        else:
            walkers = a.muca_walkers[str(L)]
            m = Multicanonical(L, walkers=walkers, comm=comm)
        setup = _clock(comm, lambda: None) + time.perf_counter() - t0
        # the first iteration (kernel builds) untimed, on one device as over the ranks
        m.iterate(max_iterations=1, progress=False)
        times = []
        limit = a.muca_iterations.get(str(L)) if a.muca_iterations else None
        while not m.converged and (len(times) < limit if limit else
                                   (sum(times) < a.muca_seconds and len(times) < 50)):
            times.append(_clock(comm, lambda m=m: m.iterate(max_iterations=1, progress=False)))
        if comm.Get_rank() == 0:
            _say({"L": L, "walkers": walkers, "ranks": comm.Get_size(), "iterations": len(times),
                  "first": 1,
                  "seconds": sum(times), "setup": setup, "converged": bool(m.converged),
                  "weights": hashlib.blake2b(m.log_weights.tobytes(), digest_size=8).hexdigest(),
                  **_facts()})


# ------------------------------------------------------------------ driver
class Driver:
    def __init__(self, args):
        self.args = args
        self.rows = []
        self.failed = False
        self.report = Report(args.json, device=None, driver=None)   # each worker names its device
        self.launcher = shlex.split(args.launcher) if args.launcher else [_default_mpiexec()]
        self.curves = {}          # plot: label -> {ranks: efficiency}
        self.breakdown = []       # (lattice, one device's sweep us, profile of the slowest rank)
        self.peers = {}           # (case, GPUs): cuIsingModel's figure

    def peer_of(self, case, ranks):
        return self.peers.get((case, ranks))

    def run(self, ranks, worker, *extra):
        a = self.args
        cmd = [*self.launcher, "-n", str(ranks), sys.executable, str(Path(__file__).resolve()),
               "--worker", worker, "--seconds", str(a.seconds), "--repeats", str(a.repeats),
               *(["--quick"] if a.quick else []), *map(str, extra)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                                         os.environ.get("PYTHONPATH")])))
        t0 = time.perf_counter()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=a.timeout)
        except subprocess.TimeoutExpired as exc:
            print(f"FAILED (timeout): {' '.join(cmd)}\n{(exc.stdout or '')[-2000:]}", file=sys.stderr)
            self.failed = True
            return []
        out = [json.loads(line[len("RESULT "):]) for line in r.stdout.splitlines()
               if line.startswith("RESULT ")]
        print(f"# {worker} on {ranks} rank(s): {time.perf_counter() - t0:.1f} s", flush=True)
        if r.returncode or not out:
            print(f"FAILED: {' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}", file=sys.stderr)
            self.failed = True
        return out

    def emit(self, result, ranks, workload, metric, value, **extra):
        """One figure of a worker's `result` (its device and driver) on `ranks` ranks."""
        if value is None:
            return
        extra = {k: v for k, v in extra.items() if v is not None}
        self.report.add(workload, metric, value, ranks=ranks, device=result["device"],
                        driver=result["driver"], **extra)
        self.rows.append((f"{workload}, {ranks} rank{'s' * (ranks > 1)}", metric, value))

    def curve(self, label, ranks, value):
        self.curves.setdefault(label, {})[ranks] = value

    def table(self):
        print(f"\n{'workload':<64} {'metric':<44} {'value':>12}")
        for w, m, v in self.rows:
            print(f"{w:<64} {m:<44} {v:12.4g}" if isinstance(v, (int, float)) else f"{w:<64} {m:<44} {v!s:>12}")
        if not self.breakdown:
            return
        # per sweep, us, slowest rank: the device's span, its kernels by phase,
        # the copies (on their own queue, beside the kernels), the host's waits
        cols = ("wall", "device span", "device busy", "device idle", "update", "edges", "ahead", "rings",
                "edge copies", "edge reads", "halo writes", "host edge wait", "host exchange", "host halo writes")
        print("\nwhere the time goes, us per sweep (slowest rank; 'one': one device without MPI; "
              "'launches' per sweep; 'redundant': share of the rows updated that are halo rows)")
        print(f"{'lattice':<48} {'one':>7} " + " ".join(f"{c.replace('host ', 'h.'):>10}" for c in cols)
              + f" {'launches':>8} {'redundant':>9}")
        for w, one, p in self.breakdown:
            print(f"{w:<48} {one:7.1f} " + " ".join(f"{p[c]:10.1f}" for c in cols)
                  + f" {p['launches']:8.2f} {p['redundant share']:9.4f}")


def _default_mpiexec():
    here = shutil.which("mpiexec", path=os.path.dirname(sys.executable))
    found = here or shutil.which("mpiexec") or shutil.which("mpirun")
    if not found:
        sys.exit("no mpiexec found: pip install 'clphys[mpi]' or pass --launcher")
    return found


def _halo_args(a):
    return ["--weak2d", a.weak2d, "--weak3d", a.weak3d, "--strong", a.strong,
            "--halo2d", *a.halo2d, "--halo3d", *a.halo3d]


def lattices(d, a, counts):
    """Workloads are named as in earlier records (the halo only where one was
    asked for), so that new figures replace old ones in RESULTS.md; the peer's
    figure of the same workload and GPUs (``peer``, run first) goes with it."""
    labels = {"weak2d": f"2D {a.weak2d}^2 per rank", "weak3d": f"3D {a.weak3d}^3 per rank",
              "strong2d": f"2D {a.strong}^2 in all"}
    extra = _halo_args(a)
    base = {r["case"]: r for r in d.run(1, "lattices", "--mode", "alone", *extra)}
    every = {r["case"]: r for r in d.run(counts[-1], "lattices", "--mode", "alone", *extra)} if counts[-1] > 1 else {}
    for case, r in base.items():
        e = every.get(case, {}).get("per_rank")
        d.emit(r, 1, f"{case} {labels[case]}, no MPI", "flips/ns", r["flips_per_ns"], peer=d.peer_of(case, 1),
               **({"every_device_at_once": e, "note": f"every GPU at once: >= {min(e):.0f}"} if e else {}))
    asked = {"weak2d": a.halo2d, "strong2d": a.halo2d, "weak3d": a.halo3d}
    for k in counts:
        for r in d.run(k, "lattices", "--mode", "split", *extra):
            case, b = r["case"], base.get(r["case"])
            if b is None:
                continue
            w = f"{case} {labels[case]}" + (f", halo {r['halo']}" if any(asked[case]) else "")
            d.emit(r, k, w, "flips/ns (total)", r["flips_per_ns"], halo=r["halo"], peer=d.peer_of(case, k))
            if case.startswith("weak"):
                eff = r["flips_per_ns"] / k / b["flips_per_ns"]
                d.emit(r, k, w, "efficiency (per rank / one device)", eff, halo=r["halo"])
            else:
                eff = r["flips_per_ns"] / b["flips_per_ns"] / k
                d.emit(r, k, w, "speed-up over one device", r["flips_per_ns"] / b["flips_per_ns"], halo=r["halo"])
            d.curve(f"{case} (halo {r['halo']})", k, eff)
            prof = r["profile slowest"]
            one_us = 1e6 * b["sweep_s"] / (k if case == "strong2d" else 1)
            d.emit(r, k, w, "sweep us", 1e6 * r["sweep_s"], halo=r["halo"], one_device_us=one_us,
                   profile=prof, profile_rank0=r["profile rank 0"])
            d.breakdown.append((f"{w}, {k} rank{'s' * (k > 1)}", one_us, prof))


def sweeps(d, a, counts):
    base = d.run(1, "sweeps", "--mode", "alone", *(["--only", *a.only] if a.only else []))
    if not base:
        return
    knobs = {r["name"]: r["knob"] for r in base}
    byname = {r["name"]: r for r in base}
    for r in base:
        d.emit(r, 1, f"{r['label']}, no MPI", "seconds", r["seconds"])
    for k in counts[1:]:
        for r in d.run(k, "sweeps", "--mode", "split", "--knobs", json.dumps(knobs),
                       *(["--only", *a.only] if a.only else [])):
            b = byname[r["name"]]
            d.emit(r, k, r["label"], "seconds", r["seconds"])
            d.emit(r, k, r["label"], "speed-up over one device", b["seconds"] / r["seconds"])
            d.emit(r, k, r["label"], "compute: slowest rank's share alone, seconds", r["compute"])
            d.curve(r["name"], k, b["seconds"] / r["seconds"] / k)


def muca(d, a, counts):
    if not a.muca or counts[-1] == 1:
        return
    k = counts[-1]
    per_rank = ["--muca-walkers-per-rank", a.muca_walkers_per_rank] if a.muca_walkers_per_rank else []
    base = d.run(1, "muca", "--mode", "alone", "--muca", *a.muca, "--muca-ranks", k,
                 "--muca-seconds", a.muca_seconds, *per_rank)
    if not base:
        return
    walkers = json.dumps({str(r["L"]): r["walkers"] for r in base})
    iters = json.dumps({str(r["L"]): r["iterations"] for r in base})
    split = {r["L"]: r for r in d.run(k, "muca", "--mode", "split", "--muca", *a.muca,
                                       "--muca-walkers", walkers, "--muca-iterations", iters)}
    for b in base:
        w = f"muca 2D L={b['L']} W={b['walkers']}, iterations 2-{b['iterations'] + 1}"
        d.emit(b, 1, w, "seconds per iteration", b["seconds"] / max(1, b["iterations"]), setup_s=b["setup"])
        r = split.get(b["L"])
        if r is None:
            continue
        d.emit(r, k, w, "seconds per iteration", r["seconds"] / max(1, r["iterations"]), setup_s=r["setup"])
        d.emit(r, k, w, "speed-up over one device (same walkers and iterations)",
               b["seconds"] / r["seconds"] if r["iterations"] == b["iterations"] else None)
        d.emit(r, k, w, "log weights equal one device's", r["weights"] == b["weights"])
        d.curve(f"muca L={b['L']}", k, b["seconds"] / r["seconds"] / k)


def peer(d, a, counts):
    """cuIsingModel: weak (--weak2d^2 per GPU) and strong (--strong^2) 2D on
    the same GPU counts, kept for the lattices' records (``peer``)."""
    if not a.peer:
        return
    exe = Path(a.peer) / "cuIsing"
    if not exe.exists():                            # built here, in a copy of the sources
        build = Path(tempfile.mkdtemp(prefix="cuising-"))
        shutil.copytree(a.peer, build, dirs_exist_ok=True)
        r = subprocess.run(["make", "-C", str(build), "-f", "Makefile.cuda13"], capture_output=True, text=True,
                           check=False)
        exe = build / "cuIsing"
        if r.returncode or not exe.exists():
            print(f"FAILED: building cuIsingModel\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}", file=sys.stderr)
            d.failed = True
            return
    env = dict(os.environ, CUDA_MODULE_LOADING="EAGER")
    base = {}
    for case, side in (("weak2d", a.weak2d), ("strong2d", a.strong)):
        for k in counts:
            y = side if case == "weak2d" else side // k
            steps = max(50, int(a.seconds * 1.4e12 / (side * y)))
            out = subprocess.run([str(exe), "-x", str(side), "-y", str(y), "-n", str(steps), "-t", str(TC[2]),
                                  "-g", str(k)], capture_output=True, text=True, env=env, timeout=a.timeout)
            rate = None
            for line in out.stdout.splitlines():
                if "spins/ns:" in line:
                    rate = float(line.split("spins/ns:")[1].split(",")[0])
            if rate is None:
                print(f"FAILED: cuIsing -g {k} ({case})\n{out.stdout[-1500:]}\n{out.stderr[-1500:]}",
                      file=sys.stderr)
                continue
            base.setdefault(case, rate)
            eff = rate / k / base[case]
            d.peers[(case, k)] = {"name": "cuIsingModel", "value": rate,
                                  "efficiency" if case == "weak2d" else "speed-up": eff if case == "weak2d" else rate / base[case]}
            d.curve(f"cuIsingModel {case}", k, eff)
            print(f"# cuIsingModel {case} on {k} GPU(s): {rate:.0f} flips/ns", flush=True)


def plot(d, path):
    """The efficiency curves (and a JSON file of them beside the plot)."""
    Path(str(path) + ".json").write_text(json.dumps(d.curves, indent=1))
    try:
        import matplotlib
    except ImportError:
        print(f"# no matplotlib: only {path}.json written", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = plt.cm.tab20.colors
    for i, (label, pts) in enumerate(sorted(d.curves.items())):
        ks = sorted(pts)
        ax.plot(ks, [pts[k] for k in ks], "o-" if "cuIsing" not in label else "s--", label=label,
                color=colours[(2 * i) % 20 + (2 * i) // 20 % 2])
    ax.set_xlabel("GPUs (MPI ranks)")
    ax.set_ylabel("efficiency (speed-up / GPUs)")
    ax.set_xticks(sorted({k for pts in d.curves.values() for k in pts}))
    ax.set_ylim(0, 1.1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (PoCL, a few minutes on 2 cores)")
    ap.add_argument("--ranks", type=int, default=2, help="largest number of ranks (default 2); measured "
                    "on 1, 2, 4, ... and this many")
    ap.add_argument("--counts", type=int, nargs="+", default=None,
                    help="rank counts to measure (default 1, 2, 4, ... and --ranks)")
    ap.add_argument("--launcher", default=None,
                    help="MPI launcher and its options, e.g. 'mpirun -x PYTHONPATH -x CLPHYS_DEVICE' "
                         "(default: the mpiexec beside this Python)")
    ap.add_argument("--seconds", type=float, default=None, help="seconds per timed lattice run")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per figure (median)")
    ap.add_argument("--weak2d", type=int, default=None, help="2D L per rank (default 32768; quick 512)")
    ap.add_argument("--weak3d", type=int, default=None, help="3D L per rank (default 512; quick 32)")
    ap.add_argument("--strong", type=int, default=None, help="2D L of the strong scaling (default 65536; quick 1024)")
    ap.add_argument("--halo2d", type=int, nargs="+", default=None,
                    help="halo depths of the split 2D lattices, one run each (0: the device's default)")
    ap.add_argument("--halo3d", type=int, nargs="+", default=None, help="the same for 3D")
    ap.add_argument("--sweep-seconds", type=float, default=None,
                    help="one device's time for the large sweeps (default 5; quick 0.5)")
    ap.add_argument("--small-seconds", type=float, default=None,
                    help="one device's time for the small Josephson sweep (default 0.2; quick 0.2)")
    ap.add_argument("--only", nargs="+", default=None, help="sweeps to measure (default all)")
    ap.add_argument("--muca", type=int, nargs="*", default=None, help="muca L (default 64 128; quick 8)")
    ap.add_argument("--muca-seconds", type=float, default=None,
                    help="iterations of one device up to about this many seconds (default 20; quick 2)")
    ap.add_argument("--muca-walkers-per-rank", type=int, default=None,
                    help="muca walkers per rank (default: one device's default; one device runs k times as many)")
    ap.add_argument("--parts", nargs="+", default=["check", "lattices", "sweeps", "muca", "peer"],
                    help="what to measure, in this order (default all)")
    ap.add_argument("--peer", default=None, help="cuIsingModel's folder: its cuIsing run, or where there "
                    "is none, built in a copy with its Makefile.cuda13 (CUDA)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per launch")
    ap.add_argument("--json", default=None, help="append the JSON lines to this file")
    ap.add_argument("--plot", default=None, help="write a plot of efficiency against GPUs (PNG)")
    for hidden, kw in (("--worker", {}), ("--mode", {}), ("--size", {"type": int}), ("--knobs", {}),
                       ("--muca-ranks", {"type": int}), ("--muca-walkers", {"type": json.loads}),
                       ("--muca-iterations", {"type": json.loads})):
        ap.add_argument(hidden, default=None, help=argparse.SUPPRESS, **kw)
    a = ap.parse_args()
    quick = a.quick
    defaults = {"seconds": 0.3 if quick else 1.5, "repeats": 3, "weak2d": 512 if quick else 32768,
                "weak3d": 32 if quick else 512, "strong": 1024 if quick else 65536,
                "halo2d": [0], "halo3d": [0], "sweep_seconds": 0.5 if quick else 5.0,
                "small_seconds": 0.2, "muca": [8] if quick else [64, 128],
                "muca_seconds": 2.0 if quick else 20.0}
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.halo2d = [h or None for h in a.halo2d]
    a.halo3d = [h or None for h in a.halo3d]
    if a.worker:
        return {"check": worker_check, "lattices": worker_lattices, "sweeps": worker_sweeps,
                "muca": worker_muca}[a.worker](a)
    a.halo2d = [h or 0 for h in a.halo2d]
    a.halo3d = [h or 0 for h in a.halo3d]
    counts = sorted({1 << i for i in range(a.ranks.bit_length()) if 1 << i <= a.ranks} | {a.ranks})
    if a.counts:
        counts = sorted(set(a.counts) | {1, a.ranks})
    d = Driver(a)
    if "check" in a.parts:
        check = d.run(a.ranks, "check", "--size", 128)
        if not check or not check[0]["ok"]:
            print("FAILED: a split lattice differs from the same lattice on one device", file=sys.stderr)
            d.failed = True
        else:
            d.emit(check[0], a.ranks, "split 2D 128^2 and 3D lattices equal one device (5 sweeps)",
                   "bit for bit", True)
    parts = {"lattices": lattices, "sweeps": sweeps, "muca": muca, "peer": peer}
    if "peer" in a.parts and "lattices" in a.parts:          # the peer first: its figures go with the lattices'
        a.parts = ["peer"] + [p for p in a.parts if p != "peer"]
    for part in a.parts:
        if part in parts:
            parts[part](d, a, counts)
    d.table()
    if a.plot and d.curves:
        plot(d, a.plot)
        print(f"# plot: {a.plot}")
    return 1 if d.failed else 0


if __name__ == "__main__":
    sys.exit(main())
