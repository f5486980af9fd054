"""Probe for branch isingsmall (docs/ising.md, "Folded rows"): 3D lattices of
Lx = 16 and 32 with folded rows (4 / 2 rows of a colour per 32-bit word,
clphys.ising.backends.multispin_fold) against the previous layout (one row
per word, 8 / 16 spins; the same code with the fold switched off), on the
device of CLPHYS_DEVICE. Bit-exact checks first (both layouts against their
NumPy twins, every launch design the device takes by default and single
launches; nothing is timed if one fails), then flips/ns per size, layout and
update mode, interleaved (fold, no fold, fold, ...) so that a load change
hits both; the table ends with the ratio fold / no fold.

    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_isingsmall.py --json $OUT/probe_isingsmall.jsonl  # H100: < 1 min
    CLPHYS_DEVICE=portable python benchmarks/probe_isingsmall.py --quick                              # PoCL: ~2 min

Lattices of Lx >= 64 keep their layout and kernels (rendered sources
unchanged): the controls 3D L = 64 and 2D L = 64 are timed once each.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ising import ENSEMBLE, TC, Report, label, numpy_checkerboard, timed_sweeps  # noqa: E402

import clphys  # noqa: E402
from clphys.ising import multispin as _ms  # noqa: E402
from clphys.ising import reference as ref  # noqa: E402
from clphys.ising.thresholds import metropolis_thresholds  # noqa: E402

SPL = "sweeps_per_launch"


@contextlib.contextmanager
def folding(on):
    """Folded rows on (the library's layout) or off (one row per word, the
    layout before), in the backend and in its NumPy twin."""
    keep = _ms.multispin_fold, ref.multispin_fold
    if not on:
        _ms.multispin_fold = ref.multispin_fold = lambda shape: 1
    try:
        yield
    finally:
        _ms.multispin_fold, ref.multispin_fold = keep


def checks(dev, report):
    """Both layouts against their twins, bit for bit; True if all pass."""
    ok = True
    h, temps = 0.1, [TC[3], 1.3 * TC[3]]
    thr = np.stack([metropolis_thresholds(3, T, 1.0, h) for T in temps])
    cases = [((16, 16, 8), {}), ((16, 16, 8), {SPL: 1}), ((32, 8, 8), {}), ((32, 8, 8), {SPL: 1}),
             ((16, 16, 8), {SPL: 1, "spins_per_word": 1}), ((32, 16, 8), {SPL: 2, "band": (4, 4)}),
             ((32, 16, 16), {SPL: 2, "band": (4, 8)})]
    for on in (True, False):
        for shape, opts in cases:
            with folding(on):
                ens = ENSEMBLE[3](shape, temps, seed=42, h=h, device=dev, **opts)
                start = ens.spins()
                ens.sweep(5)
                want = ref.multispin_sweeps(start, thr, 5, seed=42,
                                            spins_per_word=opts.get("spins_per_word", "auto"))
            same = bool(np.array_equal(ens.spins(), want)
                        and np.array_equal(np.stack(ens.sums()), np.stack(ref.sums(want))))
            report.add(f"check multispin 3D {'x'.join(map(str, shape))} fold={'on' if on else 'off'} "
                       f"{label(opts)} vs NumPy twin", "bit_exact", same, fold=ens._backend.fold)
            if not same:
                print(f"# FAIL: {shape} fold={on} {label(opts)} differs from its twin", flush=True)
            ok &= same
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="PoCL: best of 5 instead of the median of 3")
    ap.add_argument("--json", default=None, help="append the JSON lines to this file")
    ap.add_argument("--target", type=float, default=None, help="seconds per timed run")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds (fold, no fold)")
    args = ap.parse_args(argv)
    dev = clphys.device()
    quick = args.quick or not dev.facts.is_gpu
    target = args.target or (0.3 if quick else 0.15)
    repeats, best = (5, True) if quick else (3, False)
    report = Report(f"{dev.facts.platform} | {dev.name}", args.json)
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} device: {dev.facts.platform} | {dev.name} "
          f"(driver {dev.facts.driver}), probe isingsmall", flush=True)
    if not checks(dev, report):
        print("# bit-exact checks FAILED: nothing timed")
        return 1
    rates = {}

    def time_one(dim, L, on, mode):
        name = f"multispin {dim}D L={L} spins_per_word={mode} fold={'on' if on else 'off'}"
        with folding(on):
            ens = ENSEMBLE[dim](L, [TC[dim]], seed=1, device=dev, spins_per_word=mode)
            rate, n = timed_sweeps(ens, target, repeats, best)
        be = ens._backend
        plan = f"m={be.sweeps_per_launch} band={be.band} y={be.yband} W={be.W} fold={be.fold}"
        report.add(name, "flips_per_ns", round(rate, 4), sweeps=n, plan=plan)
        rates.setdefault(name, []).append(rate)

    for _ in range(args.rounds):
        for L in (16, 32):
            for mode in ("auto", 1):
                for on in (True, False):
                    time_one(3, L, on, mode)
    time_one(3, 64, True, "auto")
    time_one(2, 64, True, "auto")
    base = max(numpy_checkerboard(64, 3, 5) for _ in range(2))
    report.add("numpy checkerboard 3D L=64 (CPU, best of 2)", "flips_per_ns", round(base, 5))

    print(f"\n{'workload':<58} {'flips/ns (each round)':<26} {'x NumPy':>8} {'fold/off':>8}")
    for name, rs in rates.items():
        off = rates.get(name.replace("fold=on", "fold=off"))
        ratio = f"{statistics.median(rs) / statistics.median(off):.2f}" if "fold=on" in name and off else ""
        print(f"{name:<58} {' '.join(f'{r:.3f}' for r in rs):<26} "
              f"{statistics.median(rs) / base:>8.1f} {ratio:>8}")
    print(f"numpy checkerboard 3D L=64 (CPU): {base:.4f} flips/ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
