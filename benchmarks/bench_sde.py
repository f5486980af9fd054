#!/usr/bin/env python
"""SDE benchmark: Josephson-junction SRK2 ensembles, Kuramoto mean-field and
all-pairs, against NumPy on the CPU; tuning variants and a correctness check
in the same run.

    python benchmarks/bench_sde.py                 # full run (GPU: ~2-3 minutes)
    python benchmarks/bench_sde.py --quick         # small sizes (PoCL)
    CLPHYS_DEVICE=nvidia python benchmarks/bench_sde.py --json sde.jsonl

Figures:
* Josephson (clphys.sde.models.JOSEPHSON, the 2010 paper's parameters,
  dt = 0.01 * 2 pi / omega): steps/s = paths x steps / time, for 2^16..2^22
  paths, with and without fast_math; at the largest size also work-group
  sizes x steps per launch, xorshift32, Euler, float64, cospi(2x) for
  cos(2 pi x), and the drive inline instead of a carried forcing.
* Kuramoto mean-field (K/N coupling, SRK2): oscillator-steps/s at N = 2^24,
  per work-group size.
* Kuramoto all-pairs: pair interactions/s = N^2 x coupling evaluations
  (2 per SRK2 step) / time at N = 2^16 with K/N computed pair by pair, per
  tile (work-group) size and number of j slices; and with a K_ij matrix at
  N = 2^14.
* NumPy baselines (float32, vectorized) of the same steps.

Each configuration: a warm-up (compiles), a calibration run that sizes the
timed runs to ~--seconds each, then the median of --repeats runs (each ends
with queue.finish()). JSON lines (benchmarks/_report.py) are printed as
figures come in, then the best of each group of tuning variants, the table
last. Exit status 1 if a correctness check fails.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import clphys  # noqa: E402
from _report import Report  # noqa: E402  (this folder is on sys.path when run as a script)
from clphys.sde import Ensemble, Kuramoto, Model, models  # noqa: E402
from clphys.sde.reference import kuramoto_normals, philox_normals  # noqa: E402

JOSEPHSON = {"gamma": 0.9, "a": 4.2, "omega": 4.9, "f": 0.1, "kT": 0.001}
DT = 0.01 * 2 * math.pi / 4.9
INIT = {"x": ("uniform", 0.0, 1.0), "v": ("uniform", -2.0, 2.0)}


class Bench:
    def __init__(self, dev, args):
        self.dev, self.args = dev, args
        self.rows = []
        self.failed = False
        self.report = Report.for_device(dev, args.json)

    def emit(self, workload, metric, value, config="", **extra):
        """One figure: its workload is `workload` and `config` (sizes, options);
        `extra` fields go into the JSON line only."""
        self.report.add(f"{workload} {config}".strip(), metric, float(value), **extra)
        if "ok" in extra:
            config = f"{config} tol={extra['tol']} {'PASS' if extra['ok'] else 'FAIL'}".strip()
        self.rows.append((workload, config, metric, value))

    def timed(self, step, units_per_step, first=4):
        """Median rate (units per second) of step(k) (k steps, returns after
        the device is done), with k calibrated to ~args.seconds per run."""
        step(first)                                   # warm-up: compile, first launches
        k = first
        while True:
            t0 = time.perf_counter()
            step(k)
            t = time.perf_counter() - t0
            if t > 0.2 * self.args.seconds or k >= 2**30:
                break
            k *= 4
        k = max(1, int(k * self.args.seconds / max(t, 1e-6)))
        times = []
        for _ in range(self.args.repeats):
            t0 = time.perf_counter()
            step(k)
            times.append(time.perf_counter() - t0)
        return units_per_step * k / statistics.median(times)


# ------------------------------------------------------------------ Josephson
# the same model with cospi(2x) for cos(2 pi x): exact range reduction, may be cheaper
JOSEPHSON_COSPI = Model(
    variables=["x", "v"],
    drift={"x": "v", "v": "-gamma*v - 2*M_PI_F*cospi(2*x) + drive + f"},
    noise={"v": "sqrt(2*gamma*kT)"}, parameters=["gamma", "a", "omega", "f", "kT"],
    forcing={"drive": "a*cos(omega*t)"},
    periodic={"x": 1.0}, drive_period="2*M_PI/omega", name="josephson_cospi")


# the drive written inline: two cos(omega t) per SRK2 step instead of one carried forcing
JOSEPHSON_INLINE = Model(
    variables=["x", "v"],
    drift={"x": "v", "v": "-gamma*v - 2*M_PI_F*cos(2*M_PI_F*x) + a*cos(omega*t) + f"},
    noise={"v": "sqrt(2*gamma*kT)"}, parameters=["gamma", "a", "omega", "f", "kT"],
    periodic={"x": 1.0}, drive_period="2*M_PI/omega", name="josephson_inline")


def josephson_rate(b, n, fast, wg=None, spl=None, rng="philox", dtype="float32", scheme="srk2",
                   model=models.JOSEPHSON):
    ens = Ensemble(model, n, JOSEPHSON, DT, scheme=scheme, rng=rng, dtype=dtype,
                   fast_math=fast, initial=INIT, work_group_size=wg, device=b.dev)
    def run(k):
        plan = ens.plan_run(steps=k, observables=[])
        return ens.run_plan(plan if spl is None else plan.with_steps_per_launch(spl))
    return b.timed(run, n), ens


def bench_josephson(b):
    a = b.args
    sizes = [2**k for k in (range(12, 15) if a.quick else range(16, 23))]
    for fast in (False, True):
        for n in sizes:
            rate, ens = josephson_rate(b, n, fast)
            b.emit("josephson srk2", "steps/s", rate, f"paths=2^{int(math.log2(n))} fast_math={int(fast)}",
                   wg=ens.work_group_size)
    n = sizes[-1]
    wgs = [64, 256] if a.quick else [64, 128, 256, 512]
    spls = [None] if a.quick else [None, 512, 4096]
    for fast in (False, True):
        for wg in wgs:
            if wg > b.dev.facts.max_work_group:
                continue
            for spl in spls:
                rate, _ = josephson_rate(b, n, fast, wg=wg, spl=spl)
                b.emit("josephson srk2 tuning", "steps/s", rate,
                       f"paths=2^{int(math.log2(n))} fast_math={int(fast)} wg={wg} "
                       f"steps_per_launch={spl or 'auto'}")
    for label, kw in (("xorshift32", dict(rng="xorshift32")), ("euler", dict(scheme="euler")),
                      ("float64", dict(dtype="float64")), ("cospi(2x) model", dict(model=JOSEPHSON_COSPI)),
                      ("cospi(2x) model fast_math", dict(model=JOSEPHSON_COSPI, fast=True)),
                      ("inline drive", dict(model=JOSEPHSON_INLINE)),
                      ("inline drive fast_math", dict(model=JOSEPHSON_INLINE, fast=True))):
        if label == "float64" and not b.dev.facts.fp64:
            continue
        fast = kw.pop("fast", False)
        rate, _ = josephson_rate(b, n, fast, **kw)
        b.emit(f"josephson {label}", "steps/s", rate, f"paths=2^{int(math.log2(n))} fast_math={int(fast)}")


def numpy_josephson(b):
    n = 2**12 if b.args.quick else 2**16
    p = JOSEPHSON
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, n).astype(np.float32)
    v = rng.uniform(-2, 2, n).astype(np.float32)
    f32 = np.float32
    dt, T = f32(DT), 2 * math.pi / p["omega"]
    amp = f32(math.sqrt(2 * p["gamma"] * p["kT"] * DT))
    state = {"t": 0.0, "x": x, "v": v}

    def acc(x, v, t):
        return (-f32(p["gamma"]) * v - f32(2 * np.pi) * np.cos(f32(2 * np.pi) * x)
                + f32(p["a"] * math.cos(p["omega"] * t)) + f32(p["f"]))

    def step(k):
        x, v, t = state["x"], state["v"], state["t"]
        for _ in range(k):
            w = amp * rng.standard_normal(n, dtype=np.float32)
            t1 = (t + DT) % T
            a0 = acc(x, v, t)
            xp, vp = x + v * dt, v + a0 * dt + w
            x, v = x + f32(0.5) * dt * (v + vp), v + f32(0.5) * dt * (a0 + acc(xp, vp, t1)) + w
            x -= np.floor(x)
            t = t1
        state.update(x=x, v=v, t=t)

    b.emit("josephson srk2 numpy (CPU, float32)", "steps/s", b.timed(step, n, first=2),
           f"paths=2^{int(math.log2(n))}")


def check_josephson(b):
    """Device trajectories against NumPy (float64) with the same Gaussians."""
    n, steps = 64, 40
    for fast in (False, True):
        ens = Ensemble(models.JOSEPHSON, n, JOSEPHSON, DT, fast_math=fast, seed=7,
                       initial={"x": np.linspace(0, 1, n, endpoint=False), "v": 0.5}, device=b.dev)
        ens.run(steps=steps, observables=[])
        got = ens.values(unwrap=True)
        Z = philox_normals(7, np.arange(n), 0, steps)
        p, T = JOSEPHSON, 2 * math.pi / JOSEPHSON["omega"]
        x, v, t = np.linspace(0, 1, n, endpoint=False), np.full(n, 0.5), 0.0
        amp = math.sqrt(2 * p["gamma"] * p["kT"] * DT)
        acc = lambda x, v, t, p=p: (-p["gamma"] * v - 2 * np.pi * np.cos(2 * np.pi * x)
                               + p["a"] * np.cos(p["omega"] * t) + p["f"])
        for k in range(steps):
            w = amp * Z[:, k]
            t1 = (t + DT) % T
            a0 = acc(x, v, t)
            xp, vp = x + v * DT, v + a0 * DT + w
            x, v = x + 0.5 * DT * (v + vp), v + 0.5 * DT * (a0 + acc(xp, vp, t1)) + w
            t = t1
        err = max(np.abs(got["x"].ravel() - x).max(), np.abs(got["v"].ravel() - v).max())
        tol = 5e-3 if fast else 1e-3
        ok = err < tol
        b.failed |= not ok
        b.emit("check josephson vs numpy", "max_abs_error", err, f"fast_math={int(fast)}",
               tol=tol, ok=bool(ok))


# ------------------------------------------------------------------ Kuramoto
def kuramoto_rate(b, n, kernel, coupling=4.0, wg=None, slices=None, scheme="srk2"):
    sim = Kuramoto(n, coupling, kT=1.0, dt=0.01, kernel=kernel, scheme=scheme, seed=1,
                   work_group_size=wg, slices=slices, device=b.dev)
    evals = 2 if scheme == "srk2" else 1
    per_step = n if kernel == "mean-field" else n * n * evals
    return b.timed(lambda k: sim.run(steps=k, sample_every=k), per_step, first=1), sim


def bench_kuramoto(b):
    a = b.args
    n = 2**16 if a.quick else 2**24
    for scheme in ("srk2", "euler"):
        for wg in ([64, 256] if a.quick else [64, 128, 256, 512]):
            if wg > b.dev.facts.max_work_group:
                continue
            rate, _ = kuramoto_rate(b, n, "mean-field", wg=wg, scheme=scheme)
            b.emit(f"kuramoto mean-field {scheme}", "oscillator-steps/s", rate,
                   f"N=2^{int(math.log2(n))} wg={wg}")
    n = 2**11 if a.quick else 2**16
    for wg in ([64, 128] if a.quick else [64, 128, 256, 512]):
        for slices in ([1, 2] if a.quick else [1, 2, 4, 8]):
            if wg > b.dev.facts.max_work_group:
                continue
            rate, _ = kuramoto_rate(b, n, "all-pairs", wg=wg, slices=slices)
            b.emit("kuramoto all-pairs K/N srk2", "pair-interactions/s", rate,
                   f"N=2^{int(math.log2(n))} tile={wg} slices={slices}")
    n = 2**10 if a.quick else 2**14
    K = np.random.default_rng(2).uniform(0, 8, (n, n)) / n
    for wg in ([64] if a.quick else [64, 128, 256]):
        rate, _ = kuramoto_rate(b, n, "all-pairs", coupling=K, wg=wg)
        b.emit("kuramoto all-pairs K_ij matrix srk2", "pair-interactions/s", rate,
               f"N=2^{int(math.log2(n))} tile={wg}")


def numpy_kuramoto(b):
    rng = np.random.default_rng(0)
    for kind, n in (("mean-field", 2**16 if b.args.quick else 2**20), ("matrix", 2**10 if b.args.quick else 2**12)):
        th = rng.uniform(0, 2 * np.pi, n).astype(np.float32)
        K = (rng.uniform(0, 8, (n, n)) / n).astype(np.float32) if kind == "matrix" else None
        amp, dt = np.float32(math.sqrt(2 * 0.01)), np.float32(0.01)
        state = {"th": th}

        def drift(x, K=K, n=n):
            s, c = np.sin(x), np.cos(x)
            if K is None:
                return np.float32(4.0 / n) * (c * s.sum() - s * c.sum())
            return c * (K @ s) - s * (K @ c)

        def step(k, state=state, amp=amp, dt=dt, n=n, drift=drift):
            x = state["th"]
            for _ in range(k):
                w = amp * rng.standard_normal(n, dtype=np.float32)
                a0 = drift(x)
                x = np.mod(x + np.float32(0.5) * dt * (a0 + drift(x + a0 * dt + w)) + w, np.float32(2 * np.pi))
            state["th"] = x

        if kind == "mean-field":
            b.emit("kuramoto mean-field numpy (CPU, float32)", "oscillator-steps/s",
                   b.timed(step, n, first=1), f"N=2^{int(math.log2(n))}")
        else:
            b.emit("kuramoto K_ij matrix numpy (CPU, float32, BLAS)", "pair-interactions/s",
                   b.timed(step, 2 * n * n, first=1), f"N=2^{int(math.log2(n))}")


def check_kuramoto(b):
    """Mean-field, all-pairs (K/N and matrix) and NumPy with the same Gaussians."""
    n, steps, dt = 1000, 10, 0.02
    th0 = np.random.default_rng(3).uniform(0, 2 * np.pi, n)
    out = {}
    for label, coupling, kernel in (("mean-field", 3.0, "mean-field"), ("all-pairs", 3.0, "all-pairs"),
                                    ("matrix", np.full((n, n), 3.0 / n), "all-pairs")):
        sim = Kuramoto(n, coupling, kT=0.5, dt=dt, kernel=kernel, seed=4, initial=th0, device=b.dev)
        sim.run(steps=steps)
        out[label] = sim.theta
    th = th0.copy()
    amp = math.sqrt(2 * 0.5 * dt)

    def drift(x):
        s, c = np.sin(x), np.cos(x)
        return 3.0 / n * (c * s.sum() - s * c.sum())

    for k in range(steps):
        w = amp * kuramoto_normals(4, n, k)
        a0 = drift(th)
        th = np.mod(th + 0.5 * dt * (a0 + drift(th + a0 * dt + w)) + w, 2 * np.pi)
    for label, got in out.items():
        err = np.abs(np.angle(np.exp(1j * (got - th)))).max()
        ok = err < 1e-3
        b.failed |= not ok
        b.emit(f"check kuramoto {label} vs numpy", "max_abs_error", err, "", tol=1e-3, ok=bool(ok))


TUNING_KEYS = ("wg=", "tile=", "slices=", "steps_per_launch=")


def best_of_tunings(rows):
    """{(workload with its sizes, metric): (tuning, value)}: the fastest of each
    group of rows that differ only in tuning options (work-group size, tile, j
    slices, steps per launch)."""
    best = {}
    for wl, cfg, metric, value in rows:
        words = cfg.split()
        tuning = " ".join(w for w in words if w.startswith(TUNING_KEYS))
        if not metric.endswith("/s") or not tuning:
            continue
        key = (" ".join([wl] + [w for w in words if not w.startswith(TUNING_KEYS)]), metric)
        if value > best.get(key, ("", 0.0))[1]:
            best[key] = (tuning, value)
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (PoCL)")
    ap.add_argument("--json", default=None, help="also append the JSON lines to this file")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=None, help="target time per timed run")
    ap.add_argument("--only", choices=("josephson", "kuramoto", "numpy", "check"), default=None)
    args = ap.parse_args(argv)
    if args.seconds is None:
        args.seconds = 0.3 if args.quick else 0.15
    dev = clphys.device()
    f = dev.facts
    print(f"# device: {dev.name} ({f.platform}, driver {f.driver}), {f.compute_units} compute units, "
          f"fp64={f.fp64}", flush=True)
    b = Bench(dev, args)
    t0 = time.perf_counter()
    parts = {"check": (check_josephson, check_kuramoto), "josephson": (bench_josephson,),
             "kuramoto": (bench_kuramoto,), "numpy": (numpy_josephson, numpy_kuramoto)}
    for name in ("check", "josephson", "kuramoto", "numpy"):
        if args.only in (None, name):
            for fn in parts[name]:
                fn(b)
    best = best_of_tunings(b.rows)
    for (wl, metric), (cfg, value) in best.items():
        b.report.add(wl, metric, value, best_of=cfg)
    print(f"\n# {dev.name}: total {time.perf_counter() - t0:.0f} s")
    w1 = max(len(r[0]) for r in b.rows)
    w2 = max(len(r[1]) for r in b.rows)
    print(f"{'workload':<{w1}}  {'configuration':<{w2}}  {'metric':<20}  value")
    for wl, cfg, metric, value in b.rows:
        print(f"{wl:<{w1}}  {cfg:<{w2}}  {metric:<20}  {value:.4g}")
    print("\nbest over the tuning variants:")
    for (wl, metric), (cfg, value) in best.items():
        print(f"  {wl:<{w1 + w2}}  {value:.3e} {metric}  [{cfg}]")
    if b.failed:
        print("\nCORRECTNESS CHECK FAILED", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
