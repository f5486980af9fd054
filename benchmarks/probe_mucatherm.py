"""Probe for the muca thermalisation kernel (issue 11, branch mucatherm): the
iteration phase is almost all unrecorded (thermalisation) flips, so this
measures variants of that loop at 2D L = 32, each checked bit for bit against
the NumPy twin first, then the iteration phase end to end.

    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_mucatherm.py --json $OUT/probe_mucatherm.jsonl
    CLPHYS_DEVICE=portable python benchmarks/probe_mucatherm.py --quick      # PoCL, about a minute

Sections (JSON lines as they are measured, a summary table last; with --json
the PTX of every variant's thermalisation program, its NVIDIA build log and,
where ptxas and nvdisasm can be found on the machine (benchmarks/sass_loops.py),
its SASS loop counts go next to the JSON file, under ptx/):

  kernel    2D L = 32, exact weights (Beale): attempted flips/ns of unrecorded
            (thermalisation) and recorded launches, median of 5 (3) launches
            of 64000 steps, at W = 84480 (the default), 101376 (six groups of
            128 per SM) and 270336 (cudamuca's W).
            Variants (update.cl; those of runs 1-4 in docs/muca.md): popc off,
            rounds=2 (the generator's share: not the valid stream, not
            checked)
  iterate   the published iteration to d_k < 1e-4 at L = 32 with the default
            and every other valid variant (W = 84480 and 270336): wall
            from the constructor, iterations, flips/ns of the iteration phase,
            and the thermalisation's share of its flips (from the history)

--one-launch VARIANT W runs only a warm-up and one thermalisation launch, for a
profiler (Nsight Compute 2025 on the H100 found no kernel to profile in this
OpenCL process: "No kernels were profiled", run 3).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyopencl as cl  # noqa: E402

import probe_mucafast as pm  # noqa: E402  (twin check, rates, weights)
import sass_loops  # noqa: E402
from _report import Report  # noqa: E402
import clphys  # noqa: E402
from clphys.muca.engine import capped  # noqa: E402
from clphys.muca.geometry import Geometry  # noqa: E402

T0 = time.perf_counter()
EXTRA = ("rounds", "popc")        # engine options choose_options does not take
pm.EXTRA = EXTRA
pm.T0 = T0

BASE = dict(wg=128, lattice="local", table="local", hist="local", sites="direct")
# Runs 1-3 (s3/mucatherm, 09:08, 09:22, 09:36) measured main's loop against
# the variants that are now the default (next Philox block ahead, binx, popc
# with one descriptor uint4 per step) and others that lost and were removed
# (popc with two descriptor uint4, work groups of 192 with 64 registers, the
# descriptors as a __constant argument): docs/muca.md, benchmarks/RESULTS.md.
# Run 4 (branch mucatherm2, 10:11) measured two and four steps' descriptors per
# uint4 (16-bit / 32-bit packed offsets) against the default: both lost.
VARIANTS = [
    ("default", dict(BASE)),
    ("no-popc", dict(BASE, popc=False)),            # the shifts (as at L != 32)
    ("default-rounds2", dict(BASE, rounds=2)),      # the generator's share (not the valid stream)
]
QUICK = ("default", "no-popc")
COUNTS = (84480, 101376, 270336)


def build_info(dev, geom, opts, out_dir, tag, tools):
    """Registers and spills of the variant's thermalisation program (NVIDIA),
    its PTX, and the SASS loop counts where the tools are there."""
    if dev.facts.vendor != "nvidia":
        return {}
    o = pm.full_options(dev, geom, opts)
    params = dict(geom.template(), wg=o["wg"], lattice=o["lattice"], table=o["table"], hist=o["hist"],
                  record=False, magnet=False, wide=False, hist_rows=1, trips=False, sites=o["sites"],
                  rounds=o.get("rounds", 10), tm=False, popc=o.get("popc", True))
    out = {}
    try:
        prg = dev.build("muca/update.cl", options=("-cl-nv-verbose",), **params)
        if o.get("maxreg"):
            prg = capped(dev, prg, o["maxreg"], options=("-cl-nv-verbose",))
        log = prg.cl_program.get_build_info(dev.cl_device, cl.program_build_info.LOG)
        ptx = bytes(prg.cl_program.get_info(cl.program_info.BINARIES)[0])
        m = re.findall(r"Used (\d+) registers", log)
        spill = re.findall(r"(\d+) bytes spill stores", log)
        out = {"registers": int(m[-1]) if m else None, "spill_stores": int(spill[-1]) if spill else None}
        if out_dir:
            Path(out_dir, "ptx").mkdir(exist_ok=True)
            Path(out_dir, "ptx", f"{tag}.ptx").write_bytes(ptx)
            Path(out_dir, "ptx", f"{tag}.log").write_text(log)
        if tools.get("ptxas") and (tools.get("nvdisasm") or tools.get("cuobjdump")):
            dis, _ = sass_loops.sass(ptx.decode(errors="replace"), tools)
            lps = sass_loops.loops(dis)
            if lps:
                hot = max(lps, key=lambda lp: lp["ops"].get("LDS", 0))     # the loop with the steps
                out.update(sass_loop=hot["instructions"], sass_lds=hot["ops"].get("LDS", 0))
            if out_dir:
                Path(out_dir, "ptx", f"{tag}.sass.json").write_text(json.dumps(lps, indent=1))
    except Exception as exc:            # diagnostics only
        out["build_info_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return out


def twin_check(dev, opts, quick=False):
    """Bit for bit against the NumPy twin at 2D L = 6, 32 (and 34 where it
    fits); None for rounds != 10 (not the Philox stream)."""
    if opts.get("rounds", 10) != 10:
        return None
    cases = ((Geometry(2, 6), 37), (Geometry(2, 32), 40)) + (() if quick else ((Geometry(2, 34), 5),))
    for geom, walkers in cases:
        o = dict(opts, wg=min(opts["wg"], 4)) if dev.facts.vendor == "pocl" else opts
        if dev.facts.vendor == "pocl" and geom.L >= 32:
            o = dict(o, table="global", hist="global")      # PoCL's safe local memory (engine.py)
        try:
            o = pm.full_options(dev, geom, o)
        except ValueError as exc:
            if geom.L == 32:                  # the size measured: must be checked
                raise
            print(f"# twin check of {pm.name_of(opts)} at {geom} skipped: {str(exc)[:80]}")
            continue
        eng = pm.Engine(dev, geom, walkers, 5, options=o)
        eng.randomize()
        lat0 = pm.ref.initial_lattice(geom, walkers, 5)
        bins, mags = pm.ref.measure(geom, lat0)
        thr = pm.protocol.thresholds(pm.np.random.default_rng(1).normal(0, 1.5, geom.nbins), geom.dim)
        eng.set_thresholds(thr)
        eng.configure(1, False)
        eng.t = 3
        eng.advance(61, 13)
        eng.flush()
        want = pm.ref.update(geom, lat0, bins, mags, thr, 3, 61, 13, 5)
        if not (pm.np.array_equal(eng.read_lattice(), want[0])
                and pm.np.array_equal(eng.read_bins()[0], want[1]) and pm.np.array_equal(eng.hist, want[3])):
            return False
    return True


def section_kernel(dev, report, quick, out_dir, deadline, tools):
    L = 8 if quick else 32
    geom = Geometry(2, L)
    weights = pm.exact_weights(geom)
    steps = 400 if quick else 64000
    best = {}          # valid (twin-checked) variants: (fastest rate, options)
    for tag, opts in VARIANTS:
        if quick and tag not in QUICK:
            continue
        if pm.left(deadline) < 5:
            print(f"# kernel: out of time before {tag}")
            break
        if quick:
            opts = dict(opts, wg=8)
        try:
            ok = twin_check(dev, opts, quick)
            if ok is False:
                report.add(f"kernel 2D L={L} {tag}", "FAIL twin check", 0.0, options=pm.name_of(opts))
                print(f"#### FAIL: {tag} differs from the NumPy twin: not timed ####")
                continue
            info = build_info(dev, geom, opts, out_dir, tag, tools)
            for W in ([256] if quick else COUNTS):
                therm, spread = pm.rate(dev, geom, W, opts, steps, False, weights)
                rec, _ = pm.rate(dev, geom, W, opts, steps, True, weights, repeats=3)
                report.add(f"kernel 2D L={L} {tag} W={W}", "flips_per_ns_therm", therm, spread=spread,
                           recorded=rec, twin_exact=ok, options=pm.name_of(opts), **info)
                if ok and (tag not in best or therm > best[tag][0]):
                    best[tag] = (therm, opts)
        except Exception as exc:              # report and go on: one variant must not end the probe
            report.add(f"kernel 2D L={L} {tag}", "error", f"{type(exc).__name__}: {str(exc)[:300]}")
    return best


def one_launch(tag, walkers):
    dev = clphys.current_device()
    geom = Geometry(2, 32)
    opts = dict(VARIANTS)[tag]
    if dev.facts.vendor == "pocl":          # PoCL's safe local memory (engine.py): only to try it
        opts = dict(opts, wg=4, table="global", hist="global")
    eng = pm.Engine(dev, geom, int(walkers), 1, options=pm.full_options(dev, geom, opts))
    eng.randomize()
    eng.set_thresholds(pm.protocol.thresholds(pm.exact_weights(geom), geom.dim))
    eng.configure(1, False)
    eng.advance(4096, 4096)
    dev.queue.finish()
    t0 = time.perf_counter()
    eng.advance(64000, 64000)
    dev.queue.finish()
    print(f"# one launch {tag} W={walkers}: {int(walkers) * 64000 / (time.perf_counter() - t0) / 1e9:.1f} "
          "flips/ns (under a profiler: not a measurement)")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (PoCL)")
    p.add_argument("--json", default=None, help="append the JSON lines to this file (PTX next to it)")
    p.add_argument("--deadline", type=float, default=None, help="seconds for everything (default 140)")
    p.add_argument("--skip", default="", help="sections to skip: kernel,iterate")
    p.add_argument("--one-launch", nargs=2, metavar=("VARIANT", "W"), default=None,
                   help="only a warm-up launch and one timed thermalisation launch of 64000 steps at 2D "
                        "L = 32 (for a profiler: the second muca_update launch)")
    args = p.parse_args(argv)
    if args.one_launch:
        return one_launch(*args.one_launch)
    deadline = args.deadline or (120.0 if args.quick else 140.0)
    dev = clphys.current_device()
    f = dev.facts
    report = Report(f"{dev.name} | {f.platform} | {f.driver}", args.json)
    out_dir = os.path.dirname(os.path.abspath(args.json)) if args.json else None
    tools = sass_loops.find_tools()
    print(f"# device {dev.name} ({f.platform}, driver {f.driver}), {f.compute_units} compute units; "
          f"SASS tools {tools}")
    skip = set(filter(None, args.skip.split(",")))
    best = None
    if "kernel" not in skip:
        try:
            best = section_kernel(dev, report, args.quick, out_dir, deadline * 0.6, tools)
        except Exception as exc:
            report.add("section kernel", "error", f"{type(exc).__name__}: {str(exc)[:300]}")
    if "iterate" not in skip:
        L = 6 if args.quick else 32
        runs = [("default", None, None), ("default", None, 270336)]
        for tag, (_, opts) in (best or {}).items():
            if tag != "default":
                o = dict(opts, wg=8) if args.quick else opts
                runs += [(tag, o, None), (tag, o, 270336)]
        for tag, opts, walkers in runs:
            if args.quick and walkers:
                walkers = 1024
            try:
                pm.iterate_run(dev, report, L, deadline, tag, opts, walkers)
            except Exception as exc:
                report.add(f"iterate {tag} W={walkers}", "error", f"{type(exc).__name__}: {str(exc)[:300]}")
    report.print_summary()
    print(f"# probe time {time.perf_counter() - T0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
