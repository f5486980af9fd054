"""Ising Metropolis speed in spin flips per ns (site updates per ns) for every
algorithm in the registry, 2D and 3D, several sizes and tuning variants, on
the device chosen by CLPHYS_DEVICE; plus a NumPy checkerboard baseline on the
CPU and a bit-exact correctness check against the NumPy twin.

    CLPHYS_DEVICE=nvidia python benchmarks/bench_ising.py            # full GPU run (~3 min)
    CLPHYS_DEVICE=portable python benchmarks/bench_ising.py --quick  # small PoCL run
    ... --json results.jsonl                                         # JSON lines to a file too
    ... --algorithms multispin --variants "lanes=1 words_per_item=4 wg=128; lanes=4 words_per_item=4"
    ... --diagnose --dump DIR    # multispin timing diagnostics, program binaries (PTX) and build logs

Output: one JSON line per figure ({"device", "workload", "metric", "value"}) as
it is measured, then a table. Timing: the first sweeps build and warm up,
then the median of several timed runs of n sweeps, queue.finish() before the
clock is read; n is chosen so that a run takes about `--target` seconds.
Temperature: T_c (2D exact, 3D numerical), random start.
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
from clphys.exact import TC_2D, TC_3D  # noqa: E402
from clphys.ising import Ensemble2D, Ensemble3D, backends  # noqa: E402
from clphys.ising import reference as ref  # noqa: E402
from clphys.ising.thresholds import metropolis_thresholds  # noqa: E402

ENSEMBLE = {2: Ensemble2D, 3: Ensemble3D}
TC = {2: TC_2D, 3: TC_3D}


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


def timed_sweeps(ens, target, repeats):
    """Median spin flips per ns of ens.sweep(n), n sized to ~target seconds."""
    q = ens.device.queue
    ens.sweep(2)
    q.finish()
    n, dt = 2, 0.0
    while True:                          # grow n until one run takes >= target / 4
        t0 = time.perf_counter()
        ens.sweep(n)
        q.finish()
        dt = time.perf_counter() - t0
        if dt >= target / 4 or n >= 1 << 16:
            break
        n *= 4
    n = max(1, int(n * target / max(dt, 1e-9)))
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ens.sweep(n)
        q.finish()
        rates.append(ens.n_spins * ens.n_replicas * n / (time.perf_counter() - t0) / 1e9)
    return statistics.median(rates), n


def numpy_checkerboard(L, dim, sweeps, seed=0):
    """Plain NumPy checkerboard Metropolis (np.roll neighbour sums, PCG64
    float32 uniforms, exp table): flips per ns on the CPU."""
    rng = np.random.default_rng(seed)
    shape = (L,) * dim
    s = np.where(rng.random(shape) < 0.5, -1, 1).astype(np.int8)
    T = TC[dim]
    p = np.exp(-2.0 * np.arange(-2 * dim, 2 * dim + 1) / T).astype(np.float32)   # index s*sum + 2dim
    idx = np.indices(shape).sum(axis=0) % 2
    masks = [idx == c for c in (0, 1)]

    def sweep(s):
        for m in masks:
            nb = sum(np.roll(s, d, a) for a in range(dim) for d in (1, -1))
            accept = rng.random(shape, dtype=np.float32) < p[s * nb + 2 * dim]
            s = np.where(m & accept, -s, s)
        return s

    s = sweep(s)
    t0 = time.perf_counter()
    for _ in range(sweeps):
        s = sweep(s)
    return L**dim * sweeps / (time.perf_counter() - t0) / 1e9


def correctness(dev, report):
    """The plain-order algorithms against the NumPy twin on small 2D and 3D
    lattices, bit for bit (other designs update in another order)."""
    ok = True
    extra = {"multispin": [{"lanes": 1, "accept": "select"}, {"lanes": 1, "accept": "compare"},
                           {"lanes": 1, "words_per_item": 32}, {"lanes": 4, "words_per_item": 2}]}
    for alg in [a for a in backends.available() if a in backends.PLAIN_ORDER]:
        be = backends.load(alg)
        for shape in ((128, 16), (64, 8, 8)):
            if len(shape) not in be.dims:
                continue
            try:
                be.check_shape(shape)
            except ValueError:
                continue
            for opts in [{}] + extra.get(alg, []):
                temps = [TC[len(shape)], 1.3 * TC[len(shape)]]
                ens = ENSEMBLE[len(shape)](shape, temps, algorithm=alg, seed=42, h=0.1, device=dev,
                                           **opts)
                start = ens.spins()
                ens.sweep(3)
                thr = np.stack([metropolis_thresholds(len(shape), T, 1.0, 0.1) for T in temps])
                want = ref.checkerboard_sweeps(start, thr, 3, seed=42)
                same = bool(np.array_equal(ens.spins(), want)) and bool(
                    np.array_equal(np.stack(ens.sums()), np.stack(ref.sums(want))))
                ok &= same
                report.add(f"check {alg} {len(shape)}D {'x'.join(map(str, shape))} {label(opts)} "
                           "vs NumPy twin", "bit_exact", same)
    return ok


def variants(be, quick, is_gpu):
    """Tuning variants (option dicts) of a backend, from the options it has."""
    opts = getattr(be, "options", {})
    if be.algorithm == "multispin":
        # lanes 1 (scalar Philox, work items walking rows) is the GPU design;
        # lanes 4/8 the CPU one (SIMD Philox lanes): tune each where it runs.
        # {} = the device's defaults (also timed at every size)
        if is_gpu:
            wgs = [128] if quick else [64, 128, 256]
            return ([{}] + [{"lanes": 1, "wg": wg, "words_per_item": w}
                            for wg in wgs for w in (1, 2, 4, 8, 16)]
                    + [{"lanes": 1, "wg": 128, "words_per_item": 4, "accept": "compare"},
                       {"lanes": 4, "wg": 128, "words_per_item": 4}])
        return [{"lanes": n, "words_per_item": w} for w in (1, 2, 4, 8) for n in (4, 8)] + [
            {"lanes": 1, "words_per_item": 4}]
    wgs = [None] if not is_gpu else ([128] if quick else [64, 128, 256])
    wpis = [1, 2, 4, 8] if "words_per_item" in opts else [None]
    lanes = [4, 8] if "lanes" in opts else [None]
    out = []
    for wg in (wgs if "wg" in opts else [None]):
        for w in wpis:
            for n in lanes:
                v = {k: x for k, x in (("wg", wg), ("words_per_item", w), ("lanes", n)) if x is not None}
                out.append(v)
    return out


def parse_variants(text):
    """'lanes=1 words_per_item=4 wg=128; lanes=4' -> option dicts (ints where they parse)."""
    out = []
    for part in text.split(";"):
        v = {}
        for item in part.split():
            k, _, x = item.partition("=")
            v[k] = int(x) if x.lstrip("-").isdigit() else (None if x == "None" else x)
        if v:
            out.append(v)
    return out


def diagnose(dev, report, target, repeats, dump, L2=16384, L3=512):
    """Where a multispin sweep's time goes (timing only; the diagnostic kernels
    compute wrong spins): Philox replaced by a cheap hash, and the per-spin
    accept (threshold select, compare, bit set) replaced by an XOR of the
    words. With --dump DIR also the sweep programs' binaries (PTX on NVIDIA)
    and build logs with -cl-nv-verbose (register counts) for the variants."""
    import pyopencl as cl
    cases = [(2, L2, {"lanes": 1, "words_per_item": 4, "wg": 128}),
             (2, L2, {"lanes": 4, "words_per_item": 4, "wg": 128}),
             (3, L3, {"lanes": 1, "words_per_item": 4, "wg": 128}),
             (3, L3, {"lanes": 8, "words_per_item": 2, "wg": 64})]
    for dim, L, v in cases:
        for diag in ((None, "hash", "nocompare") if v["lanes"] == 1 and dim == 2 else (None,)):
            ens = ENSEMBLE[dim](L, [TC[dim]], seed=1, device=dev, **v)
            be = ens._backend
            if diag:
                be._params["diag"] = diag
            try:
                rate, n = timed_sweeps(ens, target, repeats)
            except Exception as exc:
                print(f"# diagnose {dim}D {label(v)} {diag}: {type(exc).__name__}: {exc}", flush=True)
                continue
            tag = f"{dim}D L={L} {label(v)}" + (f" diag={diag}" if diag else "")
            report.add(f"diagnose multispin {tag}", "flips_per_ns", round(rate, 4), sweeps=n)
            if dump and not diag:
                os.makedirs(dump, exist_ok=True)
                stem = f"ms{dim}d_" + "_".join(f"{k}{v[k]}" for k in sorted(v))
                prg = be.sweep_prg
                try:
                    binary = bytes(prg.cl_program.get_info(cl.program_info.BINARIES)[0])
                    Path(dump, f"{stem}.ptx").write_bytes(binary.rstrip(b"\0"))
                    raw = cl.Program(cl._cl._Program(dev.context, prg.source))   # no binary cache
                    raw.build(options=["-cl-nv-verbose"] if dev.facts.vendor == "nvidia" else [])
                    log = raw.get_build_info(dev.cl_device, cl.program_build_info.LOG)
                    Path(dump, f"{stem}.log").write_text(log)
                    lines = log.splitlines()
                    at = [i for i, line in enumerate(lines) if "entry function 'ising_ms_sweep'" in line]
                    if at:   # ptxas's report of the sweep kernel: registers, spills
                        print(f"# ptxas {stem}: " + " | ".join(
                            line.strip() for line in lines[at[0] + 1:at[0] + 4]), flush=True)
                except Exception as exc:
                    print(f"# dump {stem}: {type(exc).__name__}: {exc}", flush=True)
            del ens


def label(v):
    return " ".join(f"{k}={v[k]}" for k in sorted(v)) or "default"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (PoCL)")
    ap.add_argument("--json", default=None, help="append the JSON lines to this file")
    ap.add_argument("--target", type=float, default=None, help="seconds per timed run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--algorithms", default=None, help="comma-separated subset")
    ap.add_argument("--variants", default=None,
                    help="tuning variants to time instead of the built-in list, e.g. "
                         "'lanes=1 words_per_item=4 wg=128; lanes=4 words_per_item=4'")
    ap.add_argument("--sizes", default=None,
                    help="per-dimension sizes 'L2D,L2D,...:L3D,...' (the first of each is the tuning size)")
    ap.add_argument("--no-ensemble", action="store_true",
                    help="skip the ensemble figure (and time the NumPy baseline on 1 sweep)")
    ap.add_argument("--diagnose", action="store_true", help="multispin timing diagnostics")
    ap.add_argument("--dump", default=None,
                    help="with --diagnose: write program binaries and build logs here")
    args = ap.parse_args(argv)

    dev = clphys.device()
    gpu = dev.facts.is_gpu
    quick = args.quick or not gpu
    target = args.target or (0.3 if quick else 0.15)
    report = Report(f"{dev.facts.platform} | {dev.name}", args.json)
    print(f"# device: {dev.facts.platform} | {dev.name} (driver {dev.facts.driver}), "
          f"{'quick' if quick else 'full'} run", flush=True)
    ok = correctness(dev, report)

    # sizes: (tuning size, other sizes) per algorithm and dimension
    if quick:
        plan = {("multispin", 2): (1024, [256, 2048]), ("multispin", 3): (64, [128]),
                ("checkerboard", 2): (1024, []), ("checkerboard", 3): (64, []),
                ("blocks", 2): (1024, []), ("blocks", 3): (64, [])}
    else:
        plan = {("multispin", 2): (16384, [4096, 32768]), ("multispin", 3): (256, [128, 512]),
                ("checkerboard", 2): (16384, [4096]), ("checkerboard", 3): (256, []),
                ("blocks", 2): (16384, [4096, 32768]), ("blocks", 3): (256, [512])}
    if args.sizes:
        two, _, three = args.sizes.partition(":")
        for dim, text in ((2, two), (3, three)):
            sizes = [int(x) for x in text.split(",") if x]
            for alg in ("multispin", "checkerboard", "blocks"):
                if sizes:
                    plan[(alg, dim)] = (sizes[0], sizes[1:])
                else:
                    plan.pop((alg, dim), None)
    if args.diagnose:
        diagnose(dev, report, target, args.repeats, args.dump, plan[("multispin", 2)][0],
                 plan[("multispin", 3)][-1][-1] if plan[("multispin", 3)][1] else plan[("multispin", 3)][0])
    algs = args.algorithms.split(",") if args.algorithms else backends.available()
    best = {}
    for alg in algs:
        be = backends.load(alg)
        for dim in be.dims:
            if (alg, dim) not in plan:
                continue
            L0, others = plan[(alg, dim)]
            results = []
            for v in (parse_variants(args.variants) if args.variants else variants(be, quick, gpu)):
                try:
                    be.check_shape((L0,) * dim)
                    ens = ENSEMBLE[dim](L0, [TC[dim]], algorithm=alg, seed=1, device=dev, **v)
                    rate, n = timed_sweeps(ens, target, args.repeats)
                except Exception as exc:          # a variant the device cannot run
                    print(f"# {alg} {dim}D L={L0} {label(v)}: {type(exc).__name__}: {exc}", flush=True)
                    continue
                del ens
                results.append((rate, v))
                report.add(f"{alg} {dim}D L={L0} {label(v)}", "flips_per_ns", round(rate, 4), sweeps=n)
            if not results:
                continue
            rate, v = max(results, key=lambda r: r[0])
            best[(alg, dim, L0)] = (rate, v)
            tuned = [v] + ([{}] if v and {} in [x for _, x in results] else [])
            for L in others:
                for vv in tuned:
                    try:
                        be.check_shape((L,) * dim)
                        ens = ENSEMBLE[dim](L, [TC[dim]], algorithm=alg, seed=1, device=dev, **vv)
                        r, n = timed_sweeps(ens, target, args.repeats)
                    except Exception as exc:
                        print(f"# {alg} {dim}D L={L} {label(vv)}: {type(exc).__name__}: {exc}", flush=True)
                        continue
                    del ens
                    if vv is v or r > best.get((alg, dim, L), (0.0,))[0]:
                        best[(alg, dim, L)] = (r, vv)
                    report.add(f"{alg} {dim}D L={L} {label(vv)}", "flips_per_ns", round(r, 4), sweeps=n)

    # small lattices fill the device through ensembles of replicas
    if "multispin" in algs and not args.no_ensemble:
        R, L = (64, 64) if quick else (4096, 128)
        ens = Ensemble2D(L, np.full(R, TC_2D), seed=1, device=dev)
        r, n = timed_sweeps(ens, target, args.repeats)
        del ens
        best[("multispin ensemble", 2, L)] = (r, {"replicas": R})
        report.add(f"multispin 2D ensemble {R} x L={L}", "flips_per_ns", round(r, 4), sweeps=n)

    base = {}
    for dim, L, n in ((2, 512 if quick else 1024, 5), (3, 64, 5)):
        base[dim] = numpy_checkerboard(L, dim, 1 if args.no_ensemble else n)
        report.add(f"numpy checkerboard {dim}D L={L} (CPU)", "flips_per_ns", round(base[dim], 5))

    print()
    print(f"{'algorithm':<20} {'dim':>3} {'L':>6} {'flips/ns':>10} {'x NumPy':>8}  variant")
    for (alg, dim, L), (rate, v) in sorted(best.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        print(f"{alg:<20} {dim:>3} {L:>6} {rate:>10.3f} {rate / base[dim]:>8.1f}  {label(v)}")
    for dim in (2, 3):
        print(f"{'numpy (CPU)':<20} {dim:>3} {'':>6} {base[dim]:>10.4f} {1.0:>8.1f}")
    print(f"correctness vs NumPy twin: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
