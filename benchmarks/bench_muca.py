"""Parallel multicanonical sampling: kernel speed, the published protocol end
to end, and the accuracy of ln g(E) against Beale's exact density of states,
on the device chosen by CLPHYS_DEVICE.

    CLPHYS_DEVICE=nvidia python benchmarks/bench_muca.py               # full GPU run
    CLPHYS_DEVICE=portable python benchmarks/bench_muca.py --quick     # PoCL, under a minute
    ... --json results.jsonl        # the JSON lines also to a file
    ... --sizes 32 --walkers 270336,65536 --seeds 3                     # time to converge, several W
    ... --variants "wg=128 lattice=local table=local hist=local; wg=256 lattice=global"

Sections (each prints JSON lines {"device", "workload", "metric", "value"} as
it measures, and a table at the end):

1. correctness: device walkers and histograms against the NumPy twin, bit
   for bit, for every kernel variant measured (tiny size);
2. kernel: attempted flips per ns at fixed exact weights (2D, Beale), per
   variant, for unrecorded (thermalisation) and recorded steps: the median of
   3 timed runs after a warm-up, queue.finish() before the clock is read (and
   the recorded counts checked: none lost); and the NumPy twin
   of the same update on the CPU;
3. protocol: the published weight iteration to d_k < 1e-4 and a production
   run, per size L and walker count: iterations, wall time (constructor with
   kernel builds, transfers and the host loop included), attempted flips and
   flips/ns of the iteration phase, and max |ln g - exact| / error over all
   energies (2D, L <= 128).

Every random word is one Philox4x32-10 word per attempted flip (plus one
shared site word per step for all walkers), so the RNG bound is the device's
Philox rate in words/ns (benchmarks/bench_rng.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import clphys  # noqa: E402
from clphys.exact import density_of_states  # noqa: E402
from clphys.muca import Multicanonical, protocol  # noqa: E402
from clphys.muca import reference as ref  # noqa: E402
from clphys.muca.engine import Engine, choose_options  # noqa: E402
from clphys.muca.geometry import Geometry  # noqa: E402


class Report:
    def __init__(self, device, json_path):
        self.device, self.rows = device, []
        self.fh = open(json_path, "a") if json_path else None

    def add(self, workload, metric, value, **extra):
        line = json.dumps({"device": self.device, "workload": workload, "metric": metric,
                           "value": value, **extra})
        print(line, flush=True)
        if self.fh:
            self.fh.write(line + "\n")
            self.fh.flush()
        self.rows.append((workload, metric, value))


def parse_variants(text):
    out = []
    for part in (text or "").split(";"):
        if not part.strip():
            continue
        opts = {}
        for item in part.split():
            key, _, value = item.partition("=")
            opts[key] = int(value) if key == "wg" else value
        out.append(opts)
    return out


def variant_name(opts):
    return " ".join(f"{k}={v}" for k, v in sorted(opts.items()))


def exact_weights(geom):
    E, ln_g = density_of_states(geom.L)
    w = np.zeros(geom.nbins)
    w[(E - geom.e_min) // 4] = -ln_g
    return w


# ------------------------------------------------------------------ 1. correctness
def correctness(dev, variants, report):
    ok = True
    for geom, walkers in ((Geometry(2, 6), 37), (Geometry(3, 4), 11)):
        lat0 = ref.initial_lattice(geom, walkers, 5)
        bins, mags = ref.measure(geom, lat0)
        thr = protocol.thresholds(np.random.default_rng(1).normal(0, 1.5, geom.nbins), geom.dim)
        want = ref.update(geom, lat0, bins, mags, thr, 3, 61, 13, 5, slots=4, magnet=True)
        for opts in variants:
            try:
                eng = Engine(dev, geom, walkers, 5, options=choose_options(dev.facts, geom, **opts))
            except ValueError as exc:           # a variant that does not fit this device
                print(f"# skip {variant_name(opts)} for {geom}: {exc}")
                continue
            eng.randomize()
            eng.set_thresholds(thr)
            eng.configure(4, True)
            eng.t = 3
            eng.advance(61, 13)
            eng.flush()
            same = (np.array_equal(eng.read_lattice(), want[0]) and np.array_equal(eng.hist, want[3])
                    and eng.hist.sum() == walkers * 48)
            ok &= same
            report.add(f"correctness {geom} {variant_name(opts)}", "bit-exact", bool(same))
    return ok


# ------------------------------------------------------------------ 2. kernel speed
def kernel_rate(dev, geom, walkers, opts, steps, recorded, weights):
    eng = Engine(dev, geom, walkers, 1, options=choose_options(dev.facts, geom, **opts))
    eng.randomize()
    eng.set_thresholds(protocol.thresholds(weights, geom.dim))
    eng.configure(1, False)
    q = dev.queue
    eng.advance(min(steps, 256), 0)          # build and warm up
    q.finish()
    eng.configure(1, False)                  # fresh histograms (the program is cached)
    n = max(64, steps)
    rates = []
    for _ in range(3):
        t0 = time.perf_counter()
        eng.advance(n, 0 if recorded else n)
        q.finish()
        rates.append(walkers * n / (time.perf_counter() - t0) / 1e9)
    eng.flush()
    assert eng.hist.sum() == (3 * walkers * n if recorded else 0), "lost counts"
    return statistics.median(rates)


def numpy_rate(geom, walkers, steps, weights):
    lat = ref.initial_lattice(geom, walkers, 1)
    bins, mags = ref.measure(geom, lat)
    thr = protocol.thresholds(weights, geom.dim)
    t0 = time.perf_counter()
    ref.update(geom, lat, bins, mags, thr, 0, steps, 0, 1)
    return walkers * steps / (time.perf_counter() - t0) / 1e9


# ------------------------------------------------------------------ 3. the protocol
def protocol_run(dev, L, walkers, seed, max_seconds, exact, report, blocks):
    t0 = time.perf_counter()
    sim = Multicanonical(L, walkers=walkers, seed=seed, device=dev)
    build = time.perf_counter() - t0
    while not sim.converged and time.perf_counter() - t0 < max_seconds:
        sim.iterate(kl=1e-4, max_iterations=1, progress=False)
    h = sim.history
    it_s, it_flips = float(h.seconds.sum()), int(h.flips.sum())
    name = f"protocol 2D L={L} W={sim.walkers} wg={sim.options['wg']} seed={seed}"
    extra = {"options": sim.options}
    report.add(name, "iterations", len(h), converged=sim.converged, **extra)
    report.add(name, "iteration_seconds", it_s)
    report.add(name, "iteration_flips", it_flips)
    report.add(name, "flips_per_ns", it_flips / it_s / 1e9)
    report.add(name, "ns_per_flip", it_s / it_flips * 1e9)
    report.add(name, "build_seconds", build)
    if not sim.converged:
        report.add(name, "wall_to_converge_s", float("nan"), note=f"not converged in {max_seconds} s")
        return
    t1 = time.perf_counter()
    report.add(name, "wall_to_converge_s", t1 - t0)
    res = sim.produce(blocks=blocks, magnetization=False)
    wall = time.perf_counter() - t0
    report.add(name, "production_seconds", time.perf_counter() - t1, updates=res.updates)
    report.add(name, "production_flips_per_ns", res.flips / res.seconds / 1e9)
    report.add(name, "wall_total_s", wall)
    if exact is not None:
        E, ln_g = exact
        if np.array_equal(E, res.energies):
            z = np.abs(res.ln_g - ln_g) / res.ln_g_err
            report.add(name, "max_abs_dlng_over_sigma", float(z.max()),
                       beyond_3_sigma=int(np.sum(z > 3)), energies=len(E),
                       max_abs_dlng=float(np.abs(res.ln_g - ln_g).max()))
        else:
            report.add(name, "max_abs_dlng_over_sigma", float("nan"),
                       note=f"{len(E) - len(res.energies)} energies never visited")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes for PoCL (under a minute)")
    p.add_argument("--sizes", default=None, help="protocol sizes L (default 16,32,64,128; quick 4,8)")
    p.add_argument("--walkers", default=None,
                   help="walker counts for the protocol runs, comma separated: numbers, 'auto' (the "
                        "device default) or 'auto/k' (default 'auto,auto/4'; quick 256)")
    p.add_argument("--large-walkers", default="auto/8",
                   help="walker counts for L >= 64 (default auto/8: the thermalisation of every "
                        "walker dominates there)")
    p.add_argument("--seeds", type=int, default=1, help="seeds per protocol run (iterations vary)")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="give up a protocol run after this many seconds (default 300; quick 20)")
    p.add_argument("--variants", default=None, help="kernel option sets ('k=v ...; ...')")
    p.add_argument("--kernel-L", default=None, help="sizes for the kernel speed (default 32; quick 8,32)")
    p.add_argument("--blocks", type=int, default=100)
    p.add_argument("--json", default=None, help="append the JSON lines to this file")
    p.add_argument("--skip", default="", help="sections to skip: correctness,kernel,protocol")
    args = p.parse_args(argv)

    dev = clphys.current_device()
    f = dev.facts
    report = Report(f"{dev.name} | {f.platform} | {f.driver}", args.json)
    print(f"# device {dev.name} ({f.platform}, driver {f.driver}), {f.compute_units} compute units")
    quick = args.quick
    skip = set(filter(None, args.skip.split(",")))
    default_opts = choose_options(f, Geometry(2, 32))
    variants = parse_variants(args.variants) or (
        [default_opts] if quick else
        [default_opts,
         dict(default_opts, hist="global"), dict(default_opts, lattice="global"),
         dict(default_opts, table="global"), dict(default_opts, wg=64),
         dict(wg=128, lattice="global", table="global", hist="global")])
    ok = True
    if "correctness" not in skip:
        ok = correctness(dev, variants, report)
        if not ok:
            print("# CORRECTNESS FAILED: speed figures below are not trustworthy")

    if "kernel" not in skip:
        kernel_sizes = [int(v) for v in (args.kernel_L or ("8,32" if quick else "32")).split(",")]
        for L in kernel_sizes:
            geom = Geometry(2, L)
            weights = exact_weights(geom)
            walkers = 512 if quick else clphys.muca.default_walkers(f)
            steps = 2000 if quick else 20000
            for opts in variants:
                name = f"kernel 2D L={L} W={walkers} {variant_name(opts)}"
                try:
                    for recorded in (False, True):
                        rate = kernel_rate(dev, geom, walkers, opts, steps, recorded, weights)
                        report.add(name, "flips_per_ns_recorded" if recorded else "flips_per_ns_therm",
                                   rate, ns_per_flip=1.0 / rate)
                except ValueError as exc:
                    print(f"# skip {name}: {exc}")
            nw, ns = (256, 100) if quick else (4096, 200)
            report.add(f"numpy twin 2D L={L} W={nw}", "flips_per_ns", numpy_rate(geom, nw, ns, weights),
                       note="the same update in NumPy (one step at a time, vectorised over walkers)")

    if "protocol" not in skip:
        sizes = [int(v) for v in (args.sizes or ("4,8" if quick else "16,32,64,128")).split(",")]
        max_seconds = args.max_seconds or (20.0 if quick else 300.0)
        exact = {}
        for L in sizes:
            if L <= 128:
                t0 = time.perf_counter()
                exact[L] = density_of_states(L)
                report.add(f"exact DOS L={L}", "seconds", time.perf_counter() - t0,
                           note="Beale, exact integers (host CPU, outside the timed runs)")
        for L in sizes:
            spec = (args.large_walkers if L >= 64 and not quick
                    else args.walkers or ("256" if quick else "auto,auto/4"))
            counts = []
            for item in spec.split(","):
                item = item.strip()
                if item.startswith("auto"):
                    div = int(item.partition("/")[2] or 1)
                    counts.append(max(1, clphys.muca.default_walkers(f) // div))
                else:
                    counts.append(int(item))
            for walkers in counts:
                for seed in range(args.seeds):
                    protocol_run(dev, L, walkers, seed, max_seconds, exact.get(L), report,
                                 min(args.blocks, walkers))

    print("\n# summary")
    width = max(len(w) for w, _, _ in report.rows) if report.rows else 10
    for workload, metric, value in report.rows:
        v = f"{value:.4g}" if isinstance(value, float) else str(value)
        print(f"{workload:<{width}}  {metric:<28} {v}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
