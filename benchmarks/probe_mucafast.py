"""Probe for the muca iteration kernel at >= 500 flips/ns (issue 11, branch
mucafast): the update kernel's variants at 2D L = 32, each checked bit for bit
against the NumPy twin first, then the iteration with the fastest.

    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_mucafast.py --json $OUT/probe_mucafast.jsonl
    CLPHYS_DEVICE=portable python benchmarks/probe_mucafast.py --quick      # PoCL, about a minute

Sections (JSON lines {"device", "workload", "metric", "value", ...} as they are
measured, a summary table last; --json also writes the PTX and NVIDIA build
logs (registers, spills) next to the JSON file, under ptx/):

  kernel    2D L = 32, exact weights (Beale), attempted flips/ns of unrecorded
            (thermalisation) and recorded launches, median of 5 timed launches
            of 64000 steps; at W = 84480 (the current default) and at one
            resident wave of the variant (from its registers and local memory).
            Variants: maxreg (a .maxnreg cap of the thermalisation's program on
            NVIDIA: 80 fits 6 groups of 128 per SM; 0 none), sites, table,
            rounds=2 (the generator's share, not a valid stream). A variant
            that fails the twin check is printed as FAIL and not timed. (The
            variants of runs 1-3 are in NOTES-mucafast.md on the mucafast branch.)
  sweep     the fastest valid variant at W = wave / 2, wave, 2 wave, 270336
  iterate   the published iteration to d_k < 1e-4 at L = 32 with the current
            defaults and with the fastest variant (wall, iterations, flips/ns of
            the iteration phase)
  --final   (instead of the above) the default against the kernel before it
            at W = 84480 and 270336, and the iteration at L = 32 with both W
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyopencl as cl  # noqa: E402

from _report import Report  # noqa: E402  (this folder is on sys.path when run as a script)
import clphys  # noqa: E402
from clphys.exact import density_of_states  # noqa: E402
from clphys.muca import Multicanonical, protocol  # noqa: E402
from clphys.muca import reference as ref  # noqa: E402
from clphys.muca import simulation  # noqa: E402
from clphys.muca.engine import (Engine, _local_bytes, capped,  # noqa: E402
                                choose_options, default_walkers, resident_walkers)
from clphys.muca.geometry import Geometry  # noqa: E402

T0 = time.perf_counter()
EXTRA = ("rounds",)          # engine options choose_options does not take


def left(deadline):
    return deadline - (time.perf_counter() - T0)


def exact_weights(geom):
    E, ln_g = density_of_states(geom.L)
    w = np.zeros(geom.nbins)
    w[(E - geom.e_min) // 4] = -ln_g
    return w


def full_options(dev, geom, opts):
    o = {k: v for k, v in opts.items() if k not in EXTRA}
    return dict(choose_options(dev.facts, geom, **o), **{k: opts[k] for k in EXTRA if k in opts})


def name_of(opts):
    return " ".join(f"{k}={v}" for k, v in opts.items())


def nv_build_info(dev, geom, opts, out_dir, tag):
    """Registers / spills (NVIDIA verbose build of the thermalisation program,
    with the variant's register cap) and the PTX."""
    if dev.facts.vendor != "nvidia":
        return {}
    o = full_options(dev, geom, opts)
    params = dict(geom.template(), wg=o["wg"], lattice=o["lattice"], table=o["table"], hist=o["hist"],
                  record=False, magnet=False, wide=False, hist_rows=1, trips=False, sites=o["sites"],
                  rounds=o.get("rounds", 10), tm=False)
    try:
        prg = dev.build("muca/update.cl", options=("-cl-nv-verbose",), **params)
        log = prg.cl_program.get_build_info(dev.cl_device, cl.program_build_info.LOG)
        if o.get("maxreg"):
            prg = capped(dev, prg, o["maxreg"], options=("-cl-nv-verbose",))
            log = prg.cl_program.get_build_info(dev.cl_device, cl.program_build_info.LOG)
        if out_dir:
            ptx = prg.cl_program.get_info(cl.program_info.BINARIES)[0]
            Path(out_dir, "ptx").mkdir(exist_ok=True)
            Path(out_dir, "ptx", f"{tag}.ptx").write_bytes(bytes(ptx))
            Path(out_dir, "ptx", f"{tag}.log").write_text(log)
    except Exception as exc:            # diagnostics only
        return {"build_info_error": str(exc)[:200]}
    m = re.findall(r"Used (\d+) registers", log)
    spill = re.findall(r"(\d+) bytes spill stores", log)
    return {"registers": int(m[-1]) if m else None, "spill_stores": int(spill[-1]) if spill else None}


def twin_check(dev, opts, quick=False):
    """Bit for bit against the NumPy twin (lattices, bins, histogram) at tiny
    sizes, L = 32 among them; None for rounds != 10 (not the Philox stream)."""
    if opts.get("rounds", 10) != 10:
        return None
    cases = ((Geometry(2, 6), 37), (Geometry(2, 32), 40)) + (() if quick else ((Geometry(2, 34), 5),))
    for geom, walkers in cases:
        o = dict(opts, wg=min(opts["wg"], 4)) if dev.facts.vendor == "pocl" else opts
        if dev.facts.vendor == "pocl" and geom.L >= 32:
            o = dict(o, table="global", hist="global")      # PoCL's safe local memory (engine.py)
        try:
            o = full_options(dev, geom, o)
            need = _local_bytes(geom, o["wg"], o["lattice"], o["table"], o["hist"])
            if need > dev.facts.local_mem:
                raise ValueError(f"{need} bytes of local memory")
        except ValueError as exc:
            if geom.L == 32:                  # the size measured: must be checked
                raise
            print(f"# twin check of {name_of(opts)} at {geom} skipped: {str(exc)[:80]}")
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
        if not (np.array_equal(eng.read_lattice(), want[0]) and np.array_equal(eng.read_bins()[0], want[1])
                and np.array_equal(eng.hist, want[3])):
            return False
    return True


def rate(dev, geom, walkers, opts, steps, recorded, weights, repeats=5):
    eng = Engine(dev, geom, walkers, 1, options=full_options(dev, geom, opts))
    eng.randomize()
    eng.set_thresholds(protocol.thresholds(weights, geom.dim))
    eng.configure(1, False)
    q = dev.queue
    eng.advance(min(steps, 4096), 0)
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
    return statistics.median(out), (min(out), max(out))


def wave_of(dev, geom, opts, info):
    o = full_options(dev, geom, opts)
    return resident_walkers(dev, geom, o, info.get("registers")) or default_walkers(dev.facts)


BASE = dict(wg=128, lattice="local", table="local", hist="local", sites="direct")
# Runs s2/mucafast 2-3 (2026-11-25) also measured flow="select" (no branch per
# flip), "pipe" / "pipeb" (the next step's words loaded before the store), two
# walkers per work item, bits by rotate, 16-bit thresholds in local memory and
# caps of 64 / 72 registers: none beat the default (branch, thermalisation
# capped at 80), all removed (NOTES-mucafast.md on the mucafast branch, docs/muca.md). maxreg caps the
# thermalisation's program only; 0 = no cap (the default is 80 on NVIDIA).
KERNEL_VARIANTS = [
    ("branch-nocap", dict(BASE, maxreg=0)),                   # the kernel before this branch
    ("default", dict(BASE)),                                  # thermalisation capped at 80
    ("cap64", dict(BASE, maxreg=64)),
    ("packed", dict(BASE, sites="packed")),
    ("table-global", dict(BASE, table="global")),
    ("default-rounds2", dict(BASE, rounds=2)),
]
QUICK_VARIANTS = ("branch-nocap", "default", "packed")


def section_kernel(dev, report, quick, out_dir, deadline, variants=None, counts=None):
    """variants: tags of KERNEL_VARIANTS (default all; quick QUICK_VARIANTS);
    counts: walker counts (default the variant's wave and 84480)."""
    L = 8 if quick else 32
    geom = Geometry(2, L)
    weights = exact_weights(geom)
    steps = 400 if quick else 64000
    best = {}
    for tag, opts in KERNEL_VARIANTS:
        if tag not in (variants or (QUICK_VARIANTS if quick else (tag,))):
            continue
        if left(deadline) < 5:
            print(f"# kernel: out of time before {tag}")
            break
        if quick:
            opts = dict(opts, wg=8)
        try:
            ok = twin_check(dev, opts, quick)
            if ok is False:
                report.add(f"kernel 2D L={L} {tag}", "FAIL twin check", 0.0, options=name_of(opts))
                print(f"#### FAIL: {tag} differs from the NumPy twin: not timed ####")
                continue
            info = nv_build_info(dev, geom, opts, out_dir, tag)
            wave = wave_of(dev, geom, opts, info)
            for W in ([256] if quick else sorted(counts or {wave, 84480})):
                therm, spread = rate(dev, geom, W, opts, steps, False, weights)
                rec, _ = rate(dev, geom, W, opts, steps, True, weights, repeats=3)
                report.add(f"kernel 2D L={L} {tag} W={W}", "flips_per_ns_therm", therm, spread=spread,
                           recorded=rec, twin_exact=ok, waves=W / wave, wave=wave,
                           per_walker_flips_per_us=therm * 1e3 / W, options=name_of(opts), **info)
                if ok and (tag not in best or therm > best[tag][0]):
                    best[tag] = (therm, opts, W)
        except Exception as exc:              # report and go on: one variant must not end the probe
            report.add(f"kernel 2D L={L} {tag}", "error", f"{type(exc).__name__}: {str(exc)[:300]}")
    if not best:
        return None
    tag = max(best, key=lambda t: best[t][0])
    return tag, best[tag][1]


def section_sweep(dev, report, quick, out_dir, deadline, tag, opts):
    geom = Geometry(2, 8 if quick else 32)
    weights = exact_weights(geom)
    info = nv_build_info(dev, geom, opts, None, tag)
    wave = wave_of(dev, geom, opts, info)
    for W in ([128, 512] if quick else sorted({wave // 2, wave, 2 * wave, 270336})):
        if left(deadline) < 3:
            break
        therm, spread = rate(dev, geom, W, opts, 400 if quick else 64000, False, weights)
        report.add(f"sweep 2D L={geom.L} {tag} W={W}", "flips_per_ns_therm", therm, spread=spread,
                   waves=W / wave, per_walker_flips_per_us=therm * 1e3 / W)


def iterate_run(dev, report, L, deadline, tag, opts=None, walkers=None):
    """The published iteration to d_k < 1e-4 (wall from the constructor);
    opts: the variant's options over the defaults (rounds patched into
    choose_options's answer)."""
    extra = {k: v for k, v in (opts or {}).items() if k in EXTRA}
    base = {k: v for k, v in (opts or {}).items() if k not in EXTRA}
    real = simulation.choose_options

    def with_extra(*a, **k):
        return dict(real(*a, **k), **extra)

    t0 = time.perf_counter()
    with mock.patch.object(simulation, "choose_options", with_extra):
        sim = Multicanonical(L, walkers=walkers, seed=0, device=dev, **base)
    while not sim.converged and left(deadline) > 2:
        sim.iterate(kl=1e-4, max_iterations=1, progress=False)
    h = sim.history
    therm = float((h.therm * sim.walkers).sum() / h.flips.sum())    # the thermalisation's share
    report.add(f"iterate 2D L={L} W={sim.walkers} {tag}", "wall_to_converge_s", time.perf_counter() - t0,
               iterations=len(h), converged=sim.converged, therm_share=therm,
               flips_per_ns=float(h.flips.sum() / h.seconds.sum() / 1e9), iteration_seconds=float(h.seconds.sum()),
               options=name_of(dict(sim.options, **extra)))


def final(dev, report, quick, out_dir, deadline):
    tags = ("branch-nocap", "default")
    try:
        section_kernel(dev, report, quick, out_dir, deadline * 0.5, tags, None if quick else (84480, 270336))
    except Exception as exc:
        report.add("final kernel", "error", f"{type(exc).__name__}: {str(exc)[:300]}")
    L, big = (6, 1024) if quick else (32, 270336)
    before = dict(KERNEL_VARIANTS)["branch-nocap"]
    for tag, opts, walkers in (("default", None, None), ("default", None, big),
                               ("branch-nocap", dict(before, wg=8) if quick else before, big)):
        try:
            iterate_run(dev, report, L, deadline, tag, opts, walkers)
        except Exception as exc:
            report.add(f"final iterate {tag} W={walkers}", "error", f"{type(exc).__name__}: {str(exc)[:300]}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (PoCL)")
    p.add_argument("--json", default=None, help="append the JSON lines to this file (PTX next to it)")
    p.add_argument("--deadline", type=float, default=None, help="seconds for everything (default 140)")
    p.add_argument("--skip", default="", help="sections to skip: kernel,sweep,iterate")
    p.add_argument("--final", action="store_true",
                   help="only the default against the kernel before it at W = 84480 and 270336, and "
                        "the iteration at L = 32 with W = default and 270336")
    args = p.parse_args(argv)
    deadline = args.deadline or (120.0 if args.quick else 150.0)
    dev = clphys.current_device()
    f = dev.facts
    report = Report(f"{dev.name} | {f.platform} | {f.driver}", args.json)
    out_dir = os.path.dirname(os.path.abspath(args.json)) if args.json else None
    print(f"# device {dev.name} ({f.platform}, driver {f.driver}), {f.compute_units} compute units")
    skip = set(filter(None, args.skip.split(",")))
    if args.final:
        final(dev, report, args.quick, out_dir, deadline)
        skip = {"kernel", "sweep", "iterate"}
    best = None
    if "kernel" not in skip:
        try:
            best = section_kernel(dev, report, args.quick, out_dir, deadline * 0.65)
        except Exception as exc:
            report.add("section kernel", "error", f"{type(exc).__name__}: {str(exc)[:300]}")
    if best and "sweep" not in skip:
        try:
            section_sweep(dev, report, args.quick, out_dir, deadline * 0.78, *best)
        except Exception as exc:
            report.add("section sweep", "error", f"{type(exc).__name__}: {str(exc)[:300]}")
    if "iterate" not in skip:
        L = 6 if args.quick else 32
        try:
            iterate_run(dev, report, L, deadline, "default")
            if best:
                tag, opts = best
                o = dict(opts, wg=8) if args.quick else opts
                wave = None if args.quick else wave_of(dev, Geometry(2, L), o, nv_build_info(
                    dev, Geometry(2, L), o, None, tag))
                iterate_run(dev, report, L, deadline, f"fastest {tag}", o, walkers=wave)
        except Exception as exc:
            report.add("section iterate", "error", f"{type(exc).__name__}: {str(exc)[:300]}")
    report.print_summary()
    print(f"# probe time {time.perf_counter() - T0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
