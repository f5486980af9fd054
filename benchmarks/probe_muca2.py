"""Probe for the multicanonical follow-up (issue 11, branch muca2), phase 3:
the kernel variants built from phase 1's measurements and the production
protocol with its new defaults, in about 3 minutes on an H100.
docs/muca.md (Speed, Production) says what each section decided.

    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_muca2.py --json $OUT/probe_muca3.jsonl
    CLPHYS_DEVICE=portable python benchmarks/probe_muca2.py --quick         # PoCL, < 1 minute

Sections (each prints JSON lines {"device", "workload", "metric", "value", ...}
as it measures, and a summary table at the end; --json also writes PTX and
the NVIDIA build logs (registers, spills) of the variants next to the JSON file):

  kernel   2D L = 32: site descriptors (packed / direct), work-group size,
           table placement (register caps -cl-nv-maxrregcount 80 / 64 were
           measured in run 4, gained nothing and were removed); each first checked bit for bit
           against the NumPy twin at a tiny size; attempted flips/ns at fixed
           exact weights, thermalisation and recorded launches, at one
           resident wave of the variant (from its registers and local memory)
           and at W = 270336 (cudamuca's count)
  protocol the published iteration to d_k < 1e-4 with the default options and
           walkers (L = 16, 32; and L = 32 with W = 270336 and with the fastest
           variant), then the default production (thermalised and recorded by
           passages): seconds, flips, passages, max |ln g - Beale| / sigma
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyopencl as cl  # noqa: E402

import clphys  # noqa: E402
from clphys.exact import density_of_states  # noqa: E402
from clphys.muca import Multicanonical, protocol  # noqa: E402
from clphys.muca import reference as ref  # noqa: E402
from clphys.muca.engine import Engine, choose_options, default_walkers, resident_walkers  # noqa: E402
from clphys.muca.geometry import Geometry  # noqa: E402

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


def resident(dev, geom, opts, info):
    """One wave of resident walkers of this variant (NVIDIA: from its measured
    registers and local memory; elsewhere the default walker count)."""
    o = full_options(dev, geom, opts)
    return resident_walkers(dev, geom, o, info.get("registers")) or default_walkers(dev.facts)


def nv_build_info(dev, geom, opts, out_dir, tag):
    """Registers / spills from NVIDIA's verbose build, and the PTX, of the
    update kernel's thermalisation program with these options."""
    if dev.facts.vendor != "nvidia":
        return None
    o = full_options(dev, geom, opts)
    params = dict(geom.template(), wg=o["wg"], lattice=o["lattice"], table=o["table"], hist=o["hist"],
                  record=False, magnet=False, wide=False, hist_rows=1, trips=False, sites=o["sites"],
                  rounds=o["rounds"], tm=False)
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
    ("packed128", dict(wg=128, lattice="local", table="local", hist="local", sites="packed")),
    ("direct128", dict(wg=128, lattice="local", table="local", hist="local", sites="direct")),
    ("direct128-tg", dict(wg=128, lattice="local", table="global", hist="local", sites="direct")),
    ("direct192", dict(wg=192, lattice="local", table="local", hist="local", sites="direct")),
    ("direct256-tg", dict(wg=256, lattice="local", table="global", hist="local", sites="direct")),
    ("direct128-rounds2", dict(wg=128, lattice="local", table="local", hist="local", sites="direct",
                               rounds=2)),
]
QUICK_VARIANTS = ("packed128", "direct128", "direct128-tg")


def section_kernel(dev, report, quick, out_dir, deadline):
    L = 8 if quick else 32
    geom = Geometry(2, L)
    weights = exact_weights(geom)
    steps = 400 if quick else 16000
    rates = {}
    for tag, opts in KERNEL_VARIANTS:
        if quick and tag not in QUICK_VARIANTS:
            continue
        if left(deadline) < 6:
            print(f"# kernel: out of time before {tag}")
            break
        if quick:
            opts = dict(opts, wg=max(8, opts["wg"] // 16))
        try:
            full_options(dev, geom, opts)
        except ValueError as exc:
            print(f"# skip {tag}: {exc}")
            continue
        try:
            ok = twin_check(dev, opts, opts.get("rounds", 10), quick)
            info = nv_build_info(dev, geom, opts, out_dir, tag) or {}
            wave = resident(dev, geom, opts, info)
            for W in ([512] if quick else sorted({wave, 270336})):
                therm = rate(dev, geom, W, opts, steps, False, weights)
                rec = rate(dev, geom, W, opts, steps, True, weights)
                report.add(f"kernel 2D L={L} {tag} W={W}", "flips_per_ns_therm", therm, recorded=rec,
                           twin_exact=ok, waves=W / wave, per_walker_flips_per_us=therm * 1e3 / W,
                           options=name_of(opts), **info)
                if ok is not False and W == wave and not tag.endswith("rounds2"):
                    rates[tag] = (therm, opts)
        except Exception as exc:              # report and go on: one variant must not end the probe
            report.add(f"kernel 2D L={L} {tag}", "error", f"{type(exc).__name__}: {str(exc)[:300]}")
    return max(rates, key=lambda t: rates[t][0]) if rates else None, rates


# ------------------------------------------------------------------ the protocol with its defaults
def protocol_run(dev, report, L, deadline, walkers=None, options=None, produce=True, tag="default"):
    geom = Geometry(2, L)
    E, lg = density_of_states(L)
    t0 = time.perf_counter()
    sim = Multicanonical(L, walkers=walkers, seed=0, device=dev, **(options or {}))
    name = f"protocol 2D L={L} W={sim.walkers} {tag}"
    while not sim.converged and left(deadline) > 5:
        sim.iterate(kl=1e-4, max_iterations=1, progress=False)
    h = sim.history
    conv = time.perf_counter() - t0
    report.add(name, "wall_to_converge_s", conv, iterations=len(h), converged=sim.converged,
               flips_per_ns=float(h.flips.sum() / h.seconds.sum() / 1e9), options=sim.options)
    if not (produce and sim.converged):
        return
    t1 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = sim.produce(progress=False)
    secs = time.perf_counter() - t1
    z = np.abs(res.ln_g - lg) / res.ln_g_err if np.array_equal(res.energies, E) else np.array([np.nan])
    report.add(name, "production_seconds", secs, therm=res.therm, updates=res.updates,
               therm_passages=res.therm_passages, passages=res.passages,
               flips_per_ns=res.flips / secs / 1e9, warned=[str(c.message)[:160] for c in caught])
    report.add(name, "max_abs_dlng_over_sigma", float(np.nanmax(z)), beyond_3_sigma=int(np.sum(z > 3)),
               beyond_4_sigma=int(np.sum(z > 4)), energies=int(len(z)), chi2_per_bin=float(np.mean(z**2)),
               max_abs_dlng=float(np.nanmax(np.abs(res.ln_g - lg))), mean_err=float(np.mean(res.ln_g_err)),
               wall_total_s=time.perf_counter() - t0)


def section_protocol(dev, report, quick, deadline, best):
    if quick:
        protocol_run(dev, report, 6, deadline)
        return
    protocol_run(dev, report, 16, deadline)
    protocol_run(dev, report, 32, deadline)
    protocol_run(dev, report, 32, deadline, walkers=270336, produce=False, tag="cudamuca W")
    if best is not None:
        tag, opts = best
        keep = {k: v for k, v in opts.items() if k in ("wg", "lattice", "table", "hist", "sites")}
        protocol_run(dev, report, 32, deadline, options=keep, tag=f"fastest {tag}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (PoCL, under a minute)")
    p.add_argument("--json", default=None, help="append the JSON lines to this file (PTX next to it)")
    p.add_argument("--deadline", type=float, default=None, help="seconds for everything (default 170; quick 50)")
    p.add_argument("--skip", default="", help="sections to skip: kernel,protocol")
    args = p.parse_args(argv)
    deadline = args.deadline or (50.0 if args.quick else 200.0)
    dev = clphys.current_device()
    f = dev.facts
    report = Report(f"{dev.name} | {f.platform} | {f.driver}", args.json)
    out_dir = os.path.dirname(os.path.abspath(args.json)) if args.json else None
    print(f"# device {dev.name} ({f.platform}, driver {f.driver}), {f.compute_units} compute units, "
          f"local memory {f.local_mem} bytes per group")
    skip = set(filter(None, args.skip.split(",")))
    best = None
    if "kernel" not in skip:
        try:
            tag, rates = section_kernel(dev, report, args.quick, out_dir, deadline * 0.45)
            best = (tag, rates[tag][1]) if tag else None
        except Exception as exc:
            report.add("section kernel", "error", f"{type(exc).__name__}: {str(exc)[:300]}")
    if "protocol" not in skip:
        try:
            section_protocol(dev, report, args.quick, deadline, best)
        except Exception as exc:
            report.add("section protocol", "error", f"{type(exc).__name__}: {str(exc)[:300]}")
    report.print_summary()
    print(f"# probe time {time.perf_counter() - T0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
