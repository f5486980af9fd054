"""Ising Metropolis speed, in one command: correctness first, then the copy
bandwidth of the device, then spin flips per ns and GB/s moved for every
kernel design and update mode, against L, on the device chosen by
CLPHYS_DEVICE; a NumPy checkerboard on the CPU as the baseline.

    CLPHYS_DEVICE=nvidia python benchmarks/bench_ising.py --json ising_gpu.jsonl  # full (H100: ~5 min)
    CLPHYS_DEVICE=portable python benchmarks/bench_ising.py --quick               # PoCL (~3 min on 2 cores)
    ... --best --repeats 5    # best of 5 (a machine shared with other jobs)
    ... --no-tune            # skip the tuning variants
    ... --variants "lanes=1 words_per_item=4 wg=128; lanes=1 words_per_item=8"  # tune these instead
    ... --sizes 1024,4096:64,128      # L sweep sizes, 2D:3D
    ... --dump DIR                    # write the sweep kernels' PTX (NVIDIA)

Sections, in order (each figure is also a JSON line, benchmarks/_report.py; the
summary table comes last):

1. correctness: multispin (one word per spin) and checkerboard against the
   checkerboard twin, multispin with joint decisions and with several sweeps
   per launch against its twin, blocks against its twin (both modes), bit for
   bit; the decision code's acceptance rates against exp(-dE/T) (binomial).
   Nothing is timed unless every check passes (--force to time anyway).
2. copy bandwidth: clEnqueueCopyBuffer of a large buffer, GB/s = 2 x bytes / s.
3. L sweep: single multispin lattices from L = 64 (2D) / 16 (3D) to the
   largest, joint decisions ("auto", the default) and one word per spin
   ("1"), each with its default launch mode and, where that is several sweeps
   per launch, with one launch per half-sweep too; ensembles of small lattices.
4. blocks (2D, default tile, inner_sweeps 1) and checkerboard (both kernels).
5. tuning variants of the joint multispin kernel (work-group size x words per
   item) at the tuning sizes, and of the multi-sweep kernel at mid sizes.
6. on NVIDIA: static PTX instructions of the sweep kernels per spin.

GB/s moved is an ideal-traffic model (each word read or written once per
launch from DRAM): multispin 3/8 byte per flip (own colour read and written,
other colour read, 1 bit per spin), 1/(4m) with m sweeps per launch; blocks
1/(4k) with k inner sweeps; checkerboard 3 bytes per flip. Timing: warm-up,
then the median of several runs of n sweeps sized to ~--target seconds,
queue.finish() before the clock is read. T = T_c, random start.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import clphys  # noqa: E402
from _report import Report  # noqa: E402  (this folder is on sys.path when run as a script)
from clphys.exact import TC_2D, TC_3D  # noqa: E402
from clphys.ising import Ensemble2D, Ensemble3D, backends  # noqa: E402
from clphys.ising import reference as ref  # noqa: E402
from clphys.ising.multispin_plan import tuned  # noqa: E402  (launch plans: sweeps_per_launch=, band=)
from clphys.ising.thresholds import metropolis_thresholds  # noqa: E402

ENSEMBLE = {2: Ensemble2D, 3: Ensemble3D}
TC = {2: TC_2D, 3: TC_3D}
MODES = ("auto", 1)                      # spins_per_word: joint decisions, one word per spin


def label(v):
    return " ".join(f"{k}={v[k]}" for k in sorted(v)) or "default"


def timed_sweeps(ens, target, repeats, best=False):
    """Median (best: largest) spin flips per ns of repeated ens.sweep(n), n
    sized to ~target seconds (attempted site updates; blocks with
    inner_sweeps = k count k per sweep)."""
    q = ens.device.queue
    inner = ens.options.get("inner_sweeps", 1)
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
        rates.append(inner * ens.n_spins * ens.n_replicas * n / (time.perf_counter() - t0) / 1e9)
    return (max(rates) if best else statistics.median(rates)), n


def bytes_per_flip(alg, ens):
    """The ideal-traffic model of the module doc."""
    be = ens.backend
    if alg == "multispin":
        plan = be.plan
        return 0.25 / plan.sweeps_per_launch if plan.band else 0.375
    if alg == "blocks":
        return 0.25 / ens.options.get("inner_sweeps", 1)
    return 3.0


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


# ---------------------------------------------------------------- 1. correctness
def correctness(dev, report, quick):
    """Every kernel design and mode against its NumPy twin, bit for bit, and the
    decision code's acceptance rates; True if all pass."""
    from clphys.ising.blocks import BlocksBackend, reference_sweeps
    from clphys.ising.multispin import decision_counts
    ok = True

    def check(name, same):
        nonlocal ok
        ok &= bool(same)
        report.add(f"check {name}", "bit_exact", bool(same))

    temps, h = {2: [TC_2D, 1.3 * TC_2D], 3: [TC_3D, 1.3 * TC_3D]}, 0.1
    # plain sweep kernel (one launch per half-sweep: small lattices would
    # otherwise take the multi-sweep kernel) in several designs, then the
    # multi-sweep kernel with bands and whole replicas, then the defaults
    one = {"sweeps_per_launch": 1}
    ms_sets = [one, dict(one, lanes=1, accept="compare"), dict(one, lanes=1, words_per_item=32),
               dict(one, lanes=4, words_per_item=2), {"sweeps_per_launch": 2, "band": 4},
               {"sweeps_per_launch": 3}, {}]
    # (32, 16, 8): folded rows, 2 rows of a colour per word (multispin_fold)
    for shape in ((128, 16), (64, 8, 8), (32, 16, 8)):
        dim = len(shape)
        thr = np.stack([metropolis_thresholds(dim, T, 1.0, h) for T in temps[dim]])
        runs = [("checkerboard", {"chunks": c}, 1) for c in (False, True)]
        runs += [("multispin", dict(o, spins_per_word=m), m) for m in (1, "auto", 2) for o in ms_sets]
        for alg, opts, mode in runs:
            ens = tuned(ENSEMBLE[dim], shape, temps[dim], algorithm=alg, seed=42, h=h, device=dev, **opts)
            start = ens.spins()
            ens.sweep(5)
            want = ref.multispin_sweeps(start, thr, 5, seed=42, spins_per_word=mode)
            check(f"{alg} {dim}D {'x'.join(map(str, shape))} {label(opts)} vs NumPy twin",
                  np.array_equal(ens.spins(), want)
                  and np.array_equal(np.stack(ens.sums()), np.stack(ref.sums(want))))
    shape, tile = (256, 32), (128, 16)
    s0 = np.random.default_rng(1).choice(np.array([-1, 1], np.int8), size=(2, 32, 256))
    thr = np.stack([metropolis_thresholds(2, T, 1.0, h) for T in temps[2]])
    for mode in MODES:
        b = BlocksBackend(dev, shape, 2, rng="philox", seed=7, inner_sweeps=2, tile=tile,
                          spins_per_word=mode)
        b.set_spins(s0)
        b.sweep(3, thr)
        want, _ = reference_sweeps(s0, thr, 3, tile=tile, rng="philox", seed=7, inner_sweeps=2,
                                   spins_per_word=mode)
        check(f"blocks 2D 256x32 tile 128x16 spins_per_word={mode} vs NumPy twin",
              np.array_equal(b.spins(), want))
    # acceptance rates of the decision code (the sweep kernel's), binomial |z| < 5
    for dim in (2, 3):
        T = TC[dim]
        c = decision_counts(metropolis_thresholds(dim, T)[None], 2**20 if quick else 2**24, device=dev)
        k = np.arange(2 * dim + 1)
        p = np.minimum(1.0, np.exp(-2.0 * (2.0 * k - 2.0 * dim) / T))
        p = np.concatenate([p, p])
        A, P = c["class"][0, :, 0], c["class"][0, :, 1]
        sel = (p < 1) & (P > 0)
        z = (A[sel] - p[sel] * P[sel]) / np.sqrt(P[sel] * p[sel] * (1 - p[sel]))
        report.add(f"check decisions {dim}D T_c: {int(P.sum()):.3g} proposals, max |z|", "z",
                   round(float(np.abs(z).max()), 2))
        ok &= bool(np.all(np.abs(z) < 5) and np.array_equal(A[~sel & (P > 0)], P[~sel & (P > 0)]))
    return ok


# ---------------------------------------------------------------- 2. copy bandwidth
def copy_bandwidth(dev, nbytes, target):
    """GB/s of clEnqueueCopyBuffer (read + write counted), best of 3 runs."""
    import pyopencl as cl
    q = dev.queue
    a = cl.Buffer(dev.context, cl.mem_flags.READ_WRITE, nbytes)
    b = cl.Buffer(dev.context, cl.mem_flags.READ_WRITE, nbytes)
    cl.enqueue_fill_buffer(q, a, np.uint32(1), 0, nbytes)
    cl.enqueue_copy(q, b, a)
    q.finish()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            cl.enqueue_copy(q, b, a)
        q.finish()
        dt = time.perf_counter() - t0
        if dt > target / 2 or n > 4096:
            break
        n *= 2
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            cl.enqueue_copy(q, b, a)
        q.finish()
        best = max(best, 2 * nbytes * n / (time.perf_counter() - t0) / 1e9)
    return best


# ---------------------------------------------------------------- 3-5. timings
class Timer:
    def __init__(self, dev, report, target, repeats, copy_gbs, best=False):
        self.dev, self.report, self.target, self.repeats = dev, report, target, repeats
        self.copy, self.results, self.best = copy_gbs, {}, best

    def run(self, alg, dim, L, opts, R=1, tag=None):
        """Time one workload; store (flips/ns, GB/s, options) under its name and
        return its JSON extras (launch mode), or None if it cannot run: a
        variant whose options do not apply to this size or device (the
        constructor's ValueError) is reported as not applicable, not as an error."""
        name = tag or f"{alg} {dim}D L={L}" + (f" R={R}" if R > 1 else "")
        try:
            backends.load(alg).check_shape((L,) * dim)
            ens = tuned(ENSEMBLE[dim], L, np.full(R, TC[dim]), algorithm=alg, seed=1, device=self.dev, **opts)
        except ValueError as exc:
            print(f"# {name} {label(opts)}: not applicable ({exc})", flush=True)
            self.results[(name, label(opts))] = None
            return None
        try:
            rate, n = timed_sweeps(ens, self.target, self.repeats, self.best)
        except Exception as exc:            # a real failure: say so
            print(f"# {name} {label(opts)}: ERROR {type(exc).__name__}: {exc}", flush=True)
            return None
        gbs = rate * bytes_per_flip(alg, ens)
        extra = {"sweeps": n, "options": label(opts), "gb_per_s": round(gbs, 2)}
        if alg == "multispin":
            plan = ens.backend.plan
            extra.update(sweeps_per_launch=plan.sweeps_per_launch, band=plan.band and list(plan.band),
                         yband=plan.yband and list(plan.yband))
        self.report.add(f"{name} {label(opts)}", "flips_per_ns", round(rate, 4), **extra)
        self.results[(name, label(opts))] = (rate, gbs, opts)
        del ens
        return extra


def l_sweep(timer, sizes, quick):
    """Single multispin lattices against L, both modes, default launch mode,
    plus one launch per half-sweep where the default is several sweeps."""
    for dim, Ls in sizes.items():
        for L in Ls:
            for mode in MODES:
                info = timer.run("multispin", dim, L, {"spins_per_word": mode})
                if info and info.get("sweeps_per_launch", 1) > 1:
                    timer.run("multispin", dim, L, {"spins_per_word": mode, "sweeps_per_launch": 1})
    R, L = (64, 64) if quick else (4096, 128)
    for mode in MODES:
        timer.run("multispin", 2, L, {"spins_per_word": mode}, R=R)


def others(timer, quick):
    """blocks (both modes) and checkerboard (both kernels)."""
    Lb = 1024 if quick else 16384
    for mode in MODES:
        timer.run("blocks", 2, Lb, {"spins_per_word": mode})
    for dim, L in ((2, 1024 if quick else 16384), (3, 64 if quick else 256)):
        for chunks in (True, False):
            timer.run("checkerboard", dim, L, {"chunks": chunks})


def tune(timer, quick, variants):
    """Tuning variants: the joint sweep kernel at the tuning sizes, the
    multi-sweep kernel at mid sizes."""
    gpu = timer.dev.facts.is_gpu
    sizes = {2: 1024 if quick else 16384, 3: 64 if quick else 256}
    if variants is None:
        if gpu:
            variants = ([{"lanes": 1, "wg": wg, "words_per_item": w} for wg in (64, 128, 256)
                         for w in (1, 2, 4, 8, 16)] + [{"lanes": 4, "words_per_item": 4, "wg": 128}])
        else:
            variants = [{"lanes": n, "words_per_item": w} for w in (1, 2, 4, 8) for n in (4, 8)] + [
                {"lanes": 1, "words_per_item": 4}]
    for dim, L in sizes.items():
        for v in variants:
            timer.run("multispin", dim, L, dict(v, spins_per_word="auto"))
        # k = 2: a 16-cell (3D) / 9-cell (2D) table, twice the Philox calls of k = 4
        timer.run("multispin", dim, L, {"spins_per_word": 2})
    mids = {2: [256] if quick else [4096], 3: [32] if quick else [128, 256]}
    for dim, Ls in mids.items():
        for L in Ls:
            for spl in (1, 2, 4, 8):
                timer.run("multispin", dim, L, {"sweeps_per_launch": spl})


# ---------------------------------------------------------------- 6. PTX
def ptx_counts(dev, report, dump=None):
    """Static PTX instructions of the multispin sweep kernels (2D L = 16384,
    defaults) per spin: the loop body of ising_ms_sweep handles one 32-spin
    word, so (instructions - prologue) / 32 ~ instructions / 32."""
    import pyopencl as cl
    for mode in MODES:
        ens = Ensemble2D(16384, [TC_2D], seed=1, device=dev, spins_per_word=mode)
        ens.sweep(1)
        prg = ens.backend.sweep_prg
        try:
            ptx = bytes(prg.cl_program.get_info(cl.program_info.BINARIES)[0]).rstrip(b"\0").decode()
        except Exception as exc:
            print(f"# PTX of spins_per_word={mode}: {type(exc).__name__}: {exc}", flush=True)
            continue
        if dump:
            os.makedirs(dump, exist_ok=True)
            Path(dump, f"ms2d_spw{mode}.ptx").write_text(ptx)
        m = re.search(r"\.entry\s+ising_ms_sweep\b(.*?)\n}\n", ptx, re.S)
        if not m:
            continue
        body = [ln.strip() for ln in m.group(1).splitlines()]
        n = sum(1 for ln in body if ln and not ln.startswith(("//", ".", "{", "}", "$", "@$")) and ln.endswith(";")
                or ln.startswith("@%"))
        report.add(f"ptx ising_ms_sweep 2D spins_per_word={mode} (static, incl. prologue)",
                   "instructions", n, per_spin=round(n / 32, 1))
        del ens


# ---------------------------------------------------------------- main
def summary(timer, base, copy_gbs):
    print()
    print(f"copy bandwidth {copy_gbs:.1f} GB/s (clEnqueueCopyBuffer, read + write)")
    print(f"{'workload':<34} {'options':<44} {'flips/ns':>10} {'GB/s':>8} {'% copy':>7} {'x NumPy':>8}")
    for (name, opts), row in timer.results.items():
        if row is None:
            print(f"{name:<34} {opts:<44} {'not applicable':>10}")
            continue
        rate, gbs, _ = row
        dim = 3 if " 3D " in f" {name} " else 2
        print(f"{name:<34} {opts:<44} {rate:>10.3f} {gbs:>8.1f} {100 * gbs / copy_gbs:>6.1f}% "
              f"{rate / base[dim]:>8.1f}")
    for dim in (2, 3):
        print(f"{'numpy checkerboard (CPU) ' + str(dim) + 'D':<34} {'':<44} {base[dim]:>10.4f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (PoCL)")
    ap.add_argument("--json", default=None, help="append the JSON lines to this file")
    ap.add_argument("--target", type=float, default=None, help="seconds per timed run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--best", action="store_true",
                    help="report the best of the repeats, not the median (a machine shared with other jobs)")
    ap.add_argument("--sizes", default=None, help="L sweep sizes '2D,2D,...:3D,...'")
    ap.add_argument("--variants", default=None,
                    help="tuning variants of the joint kernel, e.g. 'lanes=1 words_per_item=4 wg=128; lanes=4'")
    ap.add_argument("--no-tune", action="store_true", help="skip the tuning variants")
    ap.add_argument("--force", action="store_true", help="time even if a correctness check fails")
    ap.add_argument("--dump", default=None, help="write the sweep kernels' PTX here (NVIDIA)")
    args = ap.parse_args(argv)

    dev = clphys.device()
    quick = args.quick or not dev.facts.is_gpu
    target = args.target or (0.3 if quick else 0.15)
    report = Report.for_device(dev, args.json)
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} device: {dev.facts.platform} | {dev.name} "
          f"(driver {dev.facts.driver}), {'quick' if quick else 'full'} run", flush=True)
    ok = correctness(dev, report, quick)
    print(f"# correctness vs NumPy twins: {'ok' if ok else 'FAILED'}", flush=True)
    if not ok and not args.force:
        return 1

    copy_gbs = copy_bandwidth(dev, (64 if quick else 1024) << 20, target)
    report.add("copy bandwidth (clEnqueueCopyBuffer, read + write)", "gb_per_s", round(copy_gbs, 1))
    timer = Timer(dev, report, target, args.repeats, copy_gbs, args.best)
    if args.sizes:
        two, _, three = args.sizes.partition(":")
        sizes = {d: [int(x) for x in t.split(",") if x] for d, t in ((2, two), (3, three))}
    elif quick:
        sizes = {2: [64, 128, 256, 512, 1024, 2048], 3: [16, 32, 64, 128]}
    else:
        sizes = {2: [64 << i for i in range(10)], 3: [16, 32, 64, 128, 256, 512]}
    l_sweep(timer, sizes, quick)
    others(timer, quick)
    if not args.no_tune:
        tune(timer, quick, parse_variants(args.variants) if args.variants else None)
    if dev.facts.vendor == "nvidia":
        ptx_counts(dev, report, args.dump)

    base = {}
    for dim, L in ((2, 512 if quick else 1024), (3, 64)):
        base[dim] = max(numpy_checkerboard(L, dim, 5) for _ in range(2))
        report.add(f"numpy checkerboard {dim}D L={L} (CPU, best of 2)", "flips_per_ns", round(base[dim], 5))
    summary(timer, base, copy_gbs)
    print(f"correctness vs NumPy twins: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


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


if __name__ == "__main__":
    sys.exit(main())
