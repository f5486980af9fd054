"""Probe for the multicanonical follow-up (issue 11, branch muca2): measures,
in at most ~3 minutes on an H100, what decides the kernel and the production
protocol. NOTES-muca2.md says what each section decides.

    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_muca2.py --json $OUT/probe_muca2.jsonl
    CLPHYS_DEVICE=portable python benchmarks/probe_muca2.py --quick         # PoCL, < 1 minute

Sections (each prints JSON lines {"device", "workload", "metric", "value", ...}
as it measures, and a summary table at the end; --json also writes PTX and
the NVIDIA build logs of the variants next to the JSON file):

  kernel   2D L = 32 variants (neighbour code, table columns, walkers per work
           item, work-group size, table placement, Philox rounds as a
           diagnostic), each first checked bit for bit against the NumPy twin
           at a tiny size; attempted flips/ns at fixed exact weights,
           unrecorded and recorded; then flips/ns against the walker count
  large    L = 64 and L = 128: placements, work-group sizes, walker counts
  trips    round-trip (tunnelling) times with exact weights, L = 8 .. 32
  accuracy the published iteration to d_k < 1e-4 (time, iterations), then a
           production that records transition counts and passages from the
           first step: max |ln g - Beale| / sigma of the H/W estimator and of
           the transition-matrix estimator for production windows
           [A, B] in passages per walker, with their cost in seconds
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyopencl as cl  # noqa: E402

import clphys  # noqa: E402
from clphys.exact import density_of_states  # noqa: E402
from clphys.muca import Multicanonical, protocol  # noqa: E402
from clphys.muca import reference as ref  # noqa: E402
from clphys.muca.engine import Engine, _local_bytes, choose_options, default_walkers  # noqa: E402
from clphys.muca.geometry import Geometry  # noqa: E402
from clphys.muca.transition import transition_ln_g  # noqa: E402
from clphys.stats import jackknife_blocks  # noqa: E402

from bench_muca import Report  # noqa: E402  (this folder is on sys.path when run as a script)

T0 = time.perf_counter()


def left(deadline):
    return deadline - (time.perf_counter() - T0)


def exact_weights(geom):
    """-ln g from Beale; beyond L = 64 (minutes on the host) the entropy per
    spin of L = 64 interpolated, close enough to spread the walkers for timing."""
    if geom.L > 64:
        E, ln_g = density_of_states(64)
        e = geom.energies() / geom.N
        return -geom.N * np.interp(e, E / 64**2, ln_g / 64**2)
    E, ln_g = density_of_states(geom.L)
    w = np.zeros(geom.nbins)
    w[(E - geom.e_min) // 4] = -ln_g
    return w


def full_options(dev, geom, opts):
    o = dict(opts)
    rounds = o.pop("rounds", 10)
    full = choose_options(dev.facts, geom, **o)
    full["rounds"] = rounds
    return full


def name_of(opts):
    return " ".join(f"{k}={v}" for k, v in opts.items())


def resident(dev, geom, opts, regs=None):
    """Walkers resident at once: NVIDIA sm_90 rules (228 KiB shared memory per
    SM with 1 KiB reserved per group, 2048 threads, 32 groups, 64 K registers);
    other devices: the default walker count."""
    f = dev.facts
    if f.vendor != "nvidia":
        return default_walkers(f)
    o = full_options(dev, geom, opts)
    wg, wpi = o["wg"], o["wpi"]
    local = _local_bytes(geom, wg, o["lattice"], o["table"], o["hist"], 1, o["classes"], wpi)
    groups = min(32, 2048 // wg, (228 * 1024) // (local + 1024) if local else 32)
    if regs:
        groups = min(groups, 65536 // (-(-regs // 8) * 8 * wg))
    return f.compute_units * groups * wg * wpi


def nv_build_info(dev, geom, opts, out_dir, tag):
    """Registers / spills from NVIDIA's verbose build, and the PTX, of the
    update kernel with these options (iteration form: one slot, no magnet)."""
    if dev.facts.vendor != "nvidia":
        return None
    o = full_options(dev, geom, opts)
    params = dict(geom.template(), wg=o["wg"], lattice=o["lattice"], table=o["table"], hist=o["hist"],
                  magnet=False, wide=False, hist_rows=1, trips=False, nbr=o["nbr"],
                  classes=o["classes"], wpi=o["wpi"], rounds=o["rounds"], tm=False)
    try:
        prg = dev.build("muca/update.cl", options=("-cl-nv-verbose",), **params)
        log = prg.cl_program.get_build_info(dev.cl_device, cl.program_build_info.LOG)
        if out_dir:
            ptx = prg.cl_program.get_info(cl.program_info.BINARIES)[0]
            Path(out_dir, "ptx").mkdir(exist_ok=True)
            Path(out_dir, "ptx", f"{tag}.ptx").write_bytes(bytes(ptx))
            Path(out_dir, "ptx", f"{tag}.log").write_text(log)
    except Exception as exc:            # diagnostics only
        return {"error": str(exc)[:200]}
    m = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes spill stores", log)
    return {"registers": int(m.group(1)) if m else None, "spill_stores": int(spill.group(1)) if spill else None}


def twin_check(dev, opts, rounds, quick=False):
    """Bit for bit against the NumPy twin at tiny sizes (skipped for rounds != 10)."""
    if rounds != 10:
        return None
    for geom, walkers in ((Geometry(2, 6), 37),) + (() if quick else ((Geometry(2, 34), 5),)):
        try:
            o = full_options(dev, geom, opts)
        except ValueError:
            continue
        eng = Engine(dev, geom, walkers, 5, options=o)
        eng.randomize()
        lat0 = ref.initial_lattice(geom, walkers, 5)
        bins, mags = ref.measure(geom, lat0)
        thr = protocol.thresholds(np.random.default_rng(1).normal(0, 1.5, geom.nbins), geom.dim)
        eng.set_thresholds(thr)
        eng.configure(1, False)
        eng.t = 3
        eng.advance(61, 13)
        eng.flush()
        want = ref.update(geom, lat0, bins, mags, thr, 3, 61, 13, 5)
        if not (np.array_equal(eng.read_lattice(), want[0]) and np.array_equal(eng.hist, want[3])):
            return False
    return True


def rate(dev, geom, walkers, opts, steps, recorded, weights, repeats=3):
    eng = Engine(dev, geom, walkers, 1, options=full_options(dev, geom, opts))
    eng.randomize()
    eng.set_thresholds(protocol.thresholds(weights, geom.dim))
    eng.configure(1, False)
    q = dev.queue
    eng.advance(min(steps, 256), 0)
    q.finish()
    eng.configure(1, False)
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        eng.advance(steps, 0 if recorded else steps)
        q.finish()
        out.append(walkers * steps / (time.perf_counter() - t0) / 1e9)
    eng.flush()
    assert eng.hist.sum() == (repeats * walkers * steps if recorded else 0), "lost counts"
    return statistics.median(out)


# ------------------------------------------------------------------ kernel: L = 32
KERNEL_VARIANTS = [
    ("base", dict(wg=128, lattice="local", table="local", hist="local")),
    ("rounds7", dict(wg=128, lattice="local", table="local", hist="local", rounds=7)),
    ("rounds2", dict(wg=128, lattice="local", table="local", hist="local", rounds=2)),
    ("popc", dict(wg=128, lattice="local", table="local", hist="local", nbr="popc")),
    ("skip", dict(wg=128, lattice="local", table="local", hist="local", classes="skip")),
    ("skip192", dict(wg=192, lattice="local", table="local", hist="local", classes="skip")),
    ("popc-skip192", dict(wg=192, lattice="local", table="local", hist="local", nbr="popc",
                          classes="skip")),
    ("wpi2-64", dict(wg=64, lattice="local", table="local", hist="local", wpi=2)),
    ("popc-wpi2-64", dict(wg=64, lattice="local", table="local", hist="local", nbr="popc", wpi=2)),
    ("skip-wpi2-80", dict(wg=80, lattice="local", table="local", hist="local", classes="skip", wpi=2)),
    ("tglobal256", dict(wg=256, lattice="local", table="global", hist="local")),
    ("popc-tglobal256", dict(wg=256, lattice="local", table="global", hist="local", nbr="popc")),
]


QUICK_VARIANTS = ("base", "rounds7", "popc", "skip", "popc-wpi2-64")


def quick_opts(opts):
    return dict(opts, wg=max(8, opts["wg"] // 8))


def section_kernel(dev, report, quick, out_dir, deadline):
    L = 8 if quick else 32
    geom = Geometry(2, L)
    weights = exact_weights(geom)
    W = 512 if quick else default_walkers(dev.facts)
    steps = 400 if quick else 20000
    rates = {}
    for tag, opts in KERNEL_VARIANTS:
        if quick and tag not in QUICK_VARIANTS:
            continue
        if left(deadline) < 4:
            print(f"# kernel: out of time before {tag}")
            break
        if quick:
            opts = quick_opts(opts)
        try:
            full_options(dev, geom, opts)
        except ValueError as exc:
            print(f"# skip {tag}: {exc}")
            continue
        name = f"kernel 2D L={L} W={W} {tag}"
        try:
            ok = twin_check(dev, opts, opts.get("rounds", 10), quick)
            info = nv_build_info(dev, geom, opts, out_dir, tag) or {}
            res = resident(dev, geom, opts, info.get("registers"))
            therm = rate(dev, geom, W, opts, steps, False, weights)
            rec = rate(dev, geom, W, opts, steps, True, weights)
        except Exception as exc:              # report and go on: one variant must not end the probe
            report.add(name, "error", f"{type(exc).__name__}: {str(exc)[:300]}")
            continue
        if ok is not False:
            rates[tag] = (therm, opts, res)
        report.add(name, "flips_per_ns_therm", therm, recorded=rec, twin_exact=ok, resident=res,
                   options=name_of(opts), **info)
    # flips/ns against the walker count: the baseline and the fastest exact variant
    exact = [t for t in rates if not t.startswith("rounds")]
    best = max(exact, key=lambda t: rates[t][0]) if exact else None
    for tag in dict.fromkeys(["base", best]):
        if tag not in rates or left(deadline) < 5:
            continue
        _, opts, res = rates[tag]
        for W2 in sorted({max(opts["wg"], res // 4), max(opts["wg"], res // 2), res, 2 * res, W}):
            r = rate(dev, geom, W2, opts, steps, False, weights)
            report.add(f"walkers 2D L={L} {tag} W={W2}", "flips_per_ns_therm", r,
                       per_walker_flips_per_us=r * 1e3 / W2, waves=W2 / res)
    return best


# ------------------------------------------------------------------ large L
def section_large(dev, report, quick, out_dir, deadline):
    cu = dev.facts.compute_units
    if quick:
        cases = [(16, "g", dict(wg=16, lattice="global", table="global", hist="global"), [256]),
                 (34, "g-popc", dict(wg=16, lattice="global", table="global", hist="global", nbr="popc"),
                  [256])]
    else:
        g128 = dict(wg=128, lattice="global", table="global", hist="local")
        cases = [(64, "g128", g128, [cu * 256, cu * 512, cu * 1024, cu * 2048]),
                 (64, "g128-popc", dict(g128, nbr="popc"), [cu * 1024]),
                 (64, "g256", dict(g128, wg=256), [cu * 1024]),
                 (64, "g64", dict(g128, wg=64), [cu * 1024]),
                 (64, "loc32", dict(wg=32, lattice="local", table="global", hist="local"), [cu * 224, cu * 448]),
                 (64, "loc32-popc", dict(wg=32, lattice="local", table="global", hist="local", nbr="popc"),
                  [cu * 224]),
                 (128, "gg128", dict(wg=128, lattice="global", table="global", hist="global"),
                  [cu * 256, cu * 512, cu * 1024]),
                 (128, "gg128-popc", dict(wg=128, lattice="global", table="global", hist="global",
                                          nbr="popc"), [cu * 512])]
    for L, tag, opts, counts in cases:
        geom = Geometry(2, L)
        if left(deadline) < 3:
            print(f"# large: out of time before L={L} {tag}")
            break
        try:
            full_options(dev, geom, opts)
        except ValueError as exc:
            print(f"# skip L={L} {tag}: {exc}")
            continue
        weights = exact_weights(geom)
        info = nv_build_info(dev, geom, opts, out_dir, f"L{L}-{tag}") or {}
        steps = 300 if quick else (8000 if L == 64 else 3000)
        for W in counts:
            try:
                therm = rate(dev, geom, W, opts, steps, False, weights, repeats=2)
                rec = rate(dev, geom, W, opts, steps, True, weights, repeats=2)
            except Exception as exc:
                report.add(f"large 2D L={L} W={W} {tag}", "error", f"{type(exc).__name__}: {str(exc)[:300]}")
                continue
            report.add(f"large 2D L={L} W={W} {tag}", "flips_per_ns_therm", therm, recorded=rec,
                       per_walker_flips_per_us=therm * 1e3 / W, options=name_of(opts), **info)


# ------------------------------------------------------------------ round trips
def section_trips(dev, report, quick, deadline):
    cu = dev.facts.compute_units
    sizes = (4, 6) if quick else (8, 16, 24, 32)
    W = 256 if quick else cu * 128
    for L in sizes:
        if left(deadline) < 3:
            print(f"# trips: out of time before L={L}")
            break
        geom = Geometry(2, L)
        tau_guess = 1.19e6 * (L / 16) ** 4.7        # PoCL fit (flips per walker), NOTES-muca2.md
        steps = int(4 * tau_guess)
        eng = Engine(dev, geom, W, 2, options=choose_options(dev.facts, geom))
        eng.randomize()
        eng.set_thresholds(protocol.thresholds(exact_weights(geom), 2))
        eng.configure(1, False, True)
        eng.reset_passages(0, geom.nbins - 1)
        t0 = time.perf_counter()
        warm = steps // 4
        for _ in range(4):                         # in pieces, so a slow device stops in time
            eng.advance(warm // 4, warm // 4)
            dev.queue.finish()
            if time.perf_counter() - t0 > min(5.0, left(deadline) / 4):
                break
        p0 = (eng.read_passages() >> 2).astype(np.int64)
        t1 = time.perf_counter()
        budget = min(12.0, left(deadline) - 1)
        done = 0
        while done < steps - warm:
            n = min(steps - warm - done, max(1000, (steps - warm) // 8))
            eng.advance(n, n)
            dev.queue.finish()
            done += n
            if time.perf_counter() - t1 > budget:
                break
        p = (eng.read_passages() >> 2).astype(np.int64) - p0
        secs = time.perf_counter() - t1
        tau = 2.0 * done / max(p.mean(), 1e-9)
        report.add(f"trips 2D L={L} W={W} exact weights", "round_trip_flips", tau, sweeps=tau / geom.N,
                   passages_per_walker=float(p.mean()), steps=done, seconds=secs,
                   seconds_per_round_trip_at_this_W=secs * tau / max(done, 1),
                   warmup_seconds=t1 - t0)


# ------------------------------------------------------------------ accuracy and its cost
def blocks_for(W, span, most=100):
    """The most blocks <= most that split W into equal groups of whole work groups."""
    if W % span:
        return min(most, W)
    groups = W // span
    return max(d for d in range(1, most + 1) if groups % d == 0)


def production_windows(report, name, geom, log_w, snaps, lg_exact, sel):
    """max |d ln g| / sigma for windows between snapshots, H/W and TM."""
    N = geom.N
    w = log_w[sel]

    def hw(m):
        h = m.reshape(geom.nbins, -1).sum(axis=1)[sel]
        with np.errstate(divide="ignore"):
            v = np.log(h) - w
        f = np.isfinite(v)
        top = v[f].max()
        return v - top - math.log(np.sum(np.exp(v[f] - top))) + N * math.log(2.0)

    def tm(m):         # all jackknife samples at once
        return transition_ln_g(m.reshape(len(m), geom.nbins, geom.ncls), geom.dim, N)[:, sel]

    starts = {0} | {next((i for i, sn in enumerate(snaps) if sn[0] >= level), 0) for level in (0.45, 0.9)}
    for a in sorted(starts):                 # windows from 0, ~0.5 and ~1 passages per walker
        for b in range(a + 1, len(snaps)):
            pa, ta, ca = snaps[a]
            pb, tb, cb = snaps[b]
            data = (cb - ca).reshape(cb.shape[0], -1)
            for est_name, est, vec in (("HW", hw, False), ("TM", tm, True)):
                v, e = jackknife_blocks(data, est, vectorized=vec)
                z = np.abs(v - lg_exact) / e
                report.add(f"{name} window passages {pa:.2f}..{pb:.2f} {est_name}", "max_abs_dlng_over_sigma",
                           float(np.nanmax(z)), beyond_3_sigma=int(np.sum(z > 3)), beyond_4_sigma=int(np.sum(z > 4)),
                           energies=int(len(z)), max_abs_dlng=float(np.nanmax(np.abs(v - lg_exact))),
                           mean_err=float(np.mean(e)), seconds_to_end=tb, seconds_at_start=ta)


def section_accuracy(dev, report, quick, deadline):
    cu = dev.facts.compute_units
    if quick:
        runs = [(6, 512), (8, 512)]
        cap = 4.0
    else:
        full = default_walkers(dev.facts)
        runs = [(16, full), (16, cu * 640), (32, cu * 640), (32, full)]
        cap = 15.0
    for L, W in runs:
        if left(deadline) < (5 if quick else 15):
            print(f"# accuracy: out of time before L={L} W={W}")
            break
        geom = Geometry(2, L)
        E, lg = density_of_states(L)
        sel = (E - geom.e_min) // 4
        name = f"accuracy 2D L={L} W={W}"
        t0 = time.perf_counter()
        sim = Multicanonical(L, walkers=W, seed=0, device=dev)
        while not sim.converged and left(deadline) > (2 if quick else 10):
            sim.iterate(kl=1e-4, max_iterations=1, progress=False)
        h = sim.history
        conv = time.perf_counter() - t0
        report.add(name, "wall_to_converge_s", conv, iterations=len(h), converged=sim.converged,
                   flips_per_ns=float(h.flips.sum() / h.seconds.sum() / 1e9), options=sim.options)
        if not sim.converged:
            continue
        # the production: lattice local where it fits, the threshold table global,
        # transition counts in one local row per work group (slots of whole groups)
        wg = 32 if quick else 128
        try:
            opts = full_options(dev, geom, dict(wg=wg, lattice=None, table="global", hist="local"))
        except ValueError:
            opts = full_options(dev, geom, dict(wg=wg, lattice="global", table="global", hist="local"))
        blocks = blocks_for(W, opts["wg"])
        eng = Engine(dev, geom, W, 0, options=opts)
        lat, bins, mags = sim.walker_state()
        eng.write_lattice(lat, bins, mags)
        eng.t = sim.steps
        eng.set_thresholds(protocol.thresholds(sim.log_weights, 2))
        eng.configure(blocks, False, True, True)
        eng.reset_passages(0, geom.nbins - 1)
        tau_guess = 1.19e6 * (L / 16) ** 4.7
        chunk = max(256, int(tau_guess / 16))
        levels = [0.25, 0.5, 1.0, 2.0, 4.0]
        snaps = [(0.0, 0.0, np.zeros(eng.hist_shape, np.int64))]
        t1 = time.perf_counter()
        # first the old default production: 100 blocks' worth of one iteration's statistics
        steps = math.ceil(100 * 6.0 * geom.full_width ** 2.25 / W)
        eng.advance(steps, 0)
        eng.flush()
        snaps.append((float((eng.read_passages() >> 2).mean()), time.perf_counter() - t1, eng.hist.copy()))
        report.add(name, "old_default_production_steps", steps, seconds=snaps[-1][1])
        while levels and time.perf_counter() - t1 < min(cap, left(deadline) - (1 if quick else 3)):
            eng.advance(chunk, 0)
            steps += chunk
            eng.flush()
            p = float((eng.read_passages() >> 2).mean())
            if p >= levels[0]:
                while levels and p >= levels[0]:
                    levels.pop(0)
                snaps.append((p, time.perf_counter() - t1, eng.hist.copy()))
        secs = time.perf_counter() - t1
        p = float((eng.read_passages() >> 2).mean())
        if snaps[-1][0] != p:
            snaps.append((p, secs, eng.hist.copy()))
        report.add(name, "production_passages_per_walker", p, steps=steps, seconds=secs, blocks=blocks,
                   flips_per_ns=W * steps / secs / 1e9, options=name_of(opts),
                   hist_mode=eng.hist_mode, snapshots=[round(s[0], 3) for s in snaps])
        production_windows(report, name, geom, sim.log_weights, snaps, lg, sel)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (PoCL, under a minute)")
    p.add_argument("--json", default=None, help="append the JSON lines to this file (PTX next to it)")
    p.add_argument("--deadline", type=float, default=None, help="seconds for everything (default 170; quick 50)")
    p.add_argument("--skip", default="", help="sections to skip: kernel,large,trips,accuracy")
    args = p.parse_args(argv)
    deadline = args.deadline or (50.0 if args.quick else 170.0)
    dev = clphys.current_device()
    f = dev.facts
    report = Report(f"{dev.name} | {f.platform} | {f.driver}", args.json)
    out_dir = os.path.dirname(os.path.abspath(args.json)) if args.json else None
    print(f"# device {dev.name} ({f.platform}, driver {f.driver}), {f.compute_units} compute units, "
          f"local memory {f.local_mem} bytes per group")
    skip = set(filter(None, args.skip.split(",")))
    # each section ends by its share of the deadline (seconds since the start)
    ends = {"kernel": 0.29, "large": 0.43, "trips": 0.60, "accuracy": 1.0}
    sections = {"kernel": lambda end: section_kernel(dev, report, args.quick, out_dir, end),
                "large": lambda end: section_large(dev, report, args.quick, out_dir, end),
                "trips": lambda end: section_trips(dev, report, args.quick, end),
                "accuracy": lambda end: section_accuracy(dev, report, args.quick, end)}
    for name, run in sections.items():
        if name not in skip:
            try:
                run(deadline * ends[name])
            except Exception as exc:          # the other sections still run
                report.add(f"section {name}", "error", f"{type(exc).__name__}: {str(exc)[:300]}")
    print("\n# summary")
    width = max((len(w) for w, _, _ in report.rows), default=10)
    for workload, metric, value in report.rows:
        v = f"{value:.4g}" if isinstance(value, float) else str(value)
        print(f"{workload:<{width}}  {metric:<30} {v}")
    print(f"# probe time {time.perf_counter() - T0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
