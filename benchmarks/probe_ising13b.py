"""Probe for branch ising13b (docs/ising.md, Speed): which multispin launch plan
is fastest at the sizes between the multi-sweep and the plain regimes, on
the device of CLPHYS_DEVICE, after the cheaper launch path (one kernel
instance per colour / buffer pair). Bit-exact checks of the tiles cut in y
first (nothing is timed if one fails), then per size: single launches,
bands of whole slabs, tiles cut in y (3D), sweeps per launch, whole replicas.

    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_ising13b.py --json $OUT/probe_ising13b.jsonl  # H100: ~2 min
    CLPHYS_DEVICE=portable python benchmarks/probe_ising13b.py --quick                             # PoCL: < 1 min

Each row: flips/ns (median of 3 runs of ~--target s), the plan the backend
took (sweeps per launch, band (slabs, halo), y tile (rows, halo), items per
group), µs per sweep, and the ratio to the size's default. The table ends
with the default and the fastest plan per size.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ising import ENSEMBLE, TC, Report, label, timed_sweeps  # noqa: E402

import clphys  # noqa: E402
from clphys.ising import reference as ref  # noqa: E402
from clphys.ising.thresholds import metropolis_thresholds  # noqa: E402

SPL = "sweeps_per_launch"


def plans(quick):
    """{(dim, L): [option sets]}; {} is the default."""
    if quick:
        return {(2, 64): [{}, {SPL: 1}, {SPL: 16, "band": 64}],
                (2, 256): [{}, {SPL: 1}, {SPL: 4, "band": 64}, {SPL: 16, "band": 256}],
                (3, 32): [{}, {SPL: 1}, {SPL: 2, "band": (8, 16)}, {SPL: 4, "band": 8}],
                (3, 64): [{}, {SPL: 1}, {SPL: 2, "band": (16, 16)}, {SPL: 2, "band": 16}]}
    return {
        # launch cost alone (run 1: 0.172 flips/ns = 24 us per sweep)
        (2, 64): [{SPL: 1}, {}, {SPL: 16}, {SPL: 64}],
        # whole replicas: m = 4 (default) against more sweeps per launch
        (2, 256): [{}, {SPL: 16}, {SPL: 64}],
        (3, 32): [{}, {SPL: 16}],
        # bands of whole slabs (default m = 4, run 1: m = 2) against tiles cut in y
        (3, 64): [{}, {SPL: 2}, {SPL: 1}, {SPL: 2, "band": (8, 16)}, {SPL: 4, "band": (16, 16)}],
        (3, 128): [{}, {SPL: 1}, {SPL: 2}, {SPL: 2, "band": (8, 16)}, {SPL: 2, "band": (16, 16)},
                   {SPL: 2, "band": (4, 32)}, {SPL: 2, "band": (8, 32)}, {SPL: 4, "band": (8, 16)},
                   {SPL: 1, "band": (16, 32)}],
        # no band of whole planes fits: tiles cut in y (default m = 2) against single launches
        (3, 256): [{}, {SPL: 1}, {SPL: 1, "wg": 64, "words_per_item": 4},
                   {SPL: 1, "wg": 256, "words_per_item": 4}, {SPL: 2, "band": (16, 32)},
                   {SPL: 2, "band": (16, 16)}, {SPL: 2, "band": (8, 32)}, {SPL: 2, "band": (8, 16)},
                   {SPL: 1, "band": (32, 32)}, {SPL: 1, "band": (16, 32)}, {SPL: 4}],
        (3, 512): [{}, {SPL: 2}, {SPL: 2, "band": (16, 16)}],
        (2, 2048): [{}, {SPL: 1}, {SPL: 2}, {SPL: 8}],
        (2, 4096): [{}, {SPL: 1}, {SPL: 2}, {SPL: 8}],
        (2, 8192): [{}, {SPL: 2}, {SPL: 4}],
    }


def checks(dev, report):
    """Tiles cut in y (and single launches through the new kernel instances)
    against the NumPy twin, bit for bit; True if all pass."""
    ok = True
    h, temps = 0.1, [TC[3], 1.3 * TC[3]]
    thr = np.stack([metropolis_thresholds(3, T, 1.0, h) for T in temps])
    for shape, opts in (((64, 16, 8), {SPL: 2, "band": (4, 8)}), ((128, 8, 8), {SPL: 3, "band": (8, 4)}),
                        ((64, 16, 8), {SPL: 1, "band": (2, 4)}), ((64, 16, 8), {SPL: 1})):
        ens = ENSEMBLE[3](shape, temps, seed=42, h=h, device=dev, **opts)
        start = ens.spins()
        ens.sweep(5)
        want = ref.multispin_sweeps(start, thr, 5, seed=42, spins_per_word="auto")
        same = bool(np.array_equal(ens.spins(), want))
        report.add(f"check multispin 3D {'x'.join(map(str, shape))} {label(opts)} vs NumPy twin",
                   "bit_exact", same)
        ok &= same
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (PoCL)")
    ap.add_argument("--json", default=None, help="append the JSON lines to this file")
    ap.add_argument("--target", type=float, default=None, help="seconds per timed run")
    args = ap.parse_args(argv)
    dev = clphys.device()
    quick = args.quick or not dev.facts.is_gpu
    target = args.target or (0.1 if quick else 0.15)
    report = Report(f"{dev.facts.platform} | {dev.name}", args.json)
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} device: {dev.facts.platform} | {dev.name} "
          f"(driver {dev.facts.driver}), probe ising13b, {'quick' if quick else 'full'}", flush=True)
    if not checks(dev, report):
        print("# bit-exact checks FAILED: nothing timed")
        return 1
    table = []
    for (dim, L), sets in plans(quick).items():
        rows = []
        for opts in sets:
            name = f"multispin {dim}D L={L}"
            try:
                ens = ENSEMBLE[dim](L, [TC[dim]], seed=1, device=dev, **opts)
            except ValueError as exc:
                print(f"# {name} {label(opts)}: not applicable ({exc})", flush=True)
                continue
            rate, n = timed_sweeps(ens, target, 3)
            be = ens._backend
            plan = (f"m={be.sweeps_per_launch} band={be.band} y={be.yband} "
                    f"items={be.mwg or be.wg} W={be.W}")
            us = L**dim / rate / 1e3
            report.add(f"{name} {label(opts)}", "flips_per_ns", round(rate, 3), sweeps=n, plan=plan,
                       us_per_sweep=round(us, 2))
            rows.append((name, label(opts), rate, us, plan))
            del ens
        default = next((r[2] for r in rows if r[1] == "default"), None)
        table += [(r, default) for r in rows]
    print(f"\n{'workload':<20} {'options':<42} {'flips/ns':>9} {'us/sweep':>9} {'x default':>9}  plan")
    for (name, opts, rate, us, plan), default in table:
        rel = f"{rate / default:9.2f}" if default else f"{'':>9}"
        print(f"{name:<20} {opts:<42} {rate:9.2f} {us:9.2f} {rel}  {plan}")
    print("\nbest per size:")
    for name in dict.fromkeys(r[0][0] for r in table):
        rows = [r for r, _ in table if r[0] == name]
        best = max(rows, key=lambda r: r[2])
        print(f"  {name:<20} {best[1]:<42} {best[2]:9.2f}  {best[4]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
