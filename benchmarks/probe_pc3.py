"""Probe for issue 14's pattern-conformity target (branch pc3): one program per Δt⁻
(per_past) with launches that cover every jackknife block (block rows), against the
one-program default; each variant checked against the NumPy reference first (and the
scaled signs bit for bit against cmp on tick data), their rates at T = 2^18 + 1 and the
target workload (T = 10^6, 20 x 20, chi = 100, max_history = 16384) end to end for the
fastest ones, with scaled's difference from cmp there.  At most ~150 s on an H100.

    CLPHYS_DEVICE=nvidia python3 benchmarks/probe_pc3.py --json $OUT/probe_pc3.jsonl --out $OUT/pc3
    CLPHYS_DEVICE=portable python benchmarks/probe_pc3.py --quick        # PoCL, ~1-2 min

Sections (each with its own time budget; the rest of a section is skipped past it):
  check   every variant at 20 x 20 (the program the timing uses) on a real-valued walk
          and on tick data (ties) against pattern_conformity_numpy: Ξ to 1e-5, the
          counts exactly; pre-equivalent variants also bit for bit against the default
  rate    every variant that passed, T = 2^18 + 1, max_history = 16384: (t̂, τ, Δt⁻)/s and
          the T = 10^6 estimate (T = 65537 under-fills a per-Δt⁻ launch: 1024 groups)
  full    the target workload end to end for the default and the fastest ones
  info    the fastest variant built with -cl-nv-verbose (registers, spills: the build
          log), its local/private memory, its PTX under --out
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import clphys  # noqa: E402
from clphys.runtime.render import render  # noqa: E402
from clphys.timeseries import pattern_conformity  # noqa: E402
from clphys.timeseries.pattern import PatternTuning, default_tuning, local_bytes  # noqa: E402
from clphys.timeseries.pattern import pattern_pairs  # noqa: E402
from clphys.timeseries.reference import pattern_conformity_numpy  # noqa: E402

MP = MF = 20
CHI, MH = 100.0, 16384
START = time.perf_counter()
BUDGET = {"check": 60, "rate": 20, "full": 25, "info": 5}
records, rows = [], []


def emit(dev, section, workload, metric, value, note=""):
    rec = {"device": dev.name, "section": section, "workload": workload, "metric": metric,
           "value": value}
    if note:
        rec["note"] = note
    records.append(rec)
    shown = f"{value:.4g}" if isinstance(value, float) else str(value)
    rows.append((section, workload, metric, shown, note))
    print(json.dumps(rec), flush=True)


def variants(facts, quick):
    """(label, tuning): pre (the CPUs' default) first, then the one-program default before
    pc3 (slide2 cmp cellmad), then per-Δt⁻ programs with block-row launches (pp).
    H100 history (2026-11-25; RESULTS.md has the tables).  Batch 1 (T = 10^6 end to end):
    one program 2.59 s, pp2 cmp 2.34 s (its bits), pp2 local 1.99 s, pp2 scaled 2.06 s; rates
    at T = 2^18 + 1: pp2 cmp 1.34e11, pp4 cmp 1.33e11, pp2 local 1.58e11.  Batch 2: cellsat
    1 (clamp) / 2 (fma.rn.sat by PTX): pp2 cmp 1.36 / 1.36e11, pp2 local 1.60 / 1.61e11;
    bench_timeseries --only pc: the default (cmp on real values then) 2.33 s, local 1.95 s.
    Batch 3: the default then (pp2 local sat1, tb 128) against no cellsat, U = 4 and tb = 256
    in the same run, rates in interleaved rounds (spread <= 0.6 %): 1.626e11; sat0 1.587e11;
    pp4 1.647e11; tb 256 1.652e11; T = 10^6: the default as called 1.951 s, tb 256 1.904 s
    (since the default for per-Δt⁻ jobs)."""
    d = default_tuning(facts, MF, max_past=MP)
    base = dict(wg=d.wg, tb=d.tb)
    pp = dict(base, launch_pairs=2**34, cellmad=True, per_past=True, sign="local")
    out = [("pre (the CPUs' default)", PatternTuning(**base, pre=True)),
           ("one program (the default before)", PatternTuning(**base, slide=2, cellmad=True,
                                                              launch_pairs=2**34)),
           ("pp2 local sat1 (default)", PatternTuning(**pp, slide=2, cellsat=1))]
    if facts.is_gpu and not quick:
        out += [("pp2 local sat0", PatternTuning(**pp, slide=2)),
                ("pp4 local sat1", PatternTuning(**pp, slide=4, cellsat=1)),
                ("pp2 local sat1 tb256", PatternTuning(**dict(pp, tb=256), slide=2,
                                                       cellsat=1))]
    return [(n, t) for n, t in out if local_bytes(t, MP, MF) <= facts.local_mem]


def walk(n, seed):
    return 1e4 + np.cumsum(np.random.default_rng(seed).standard_normal(n))


def ticks(n, seed):
    """Prices in cents and the same series in integer ticks (the reference's input: its
    float64 arithmetic decides the ties exactly only on integers)."""
    k = np.cumsum(np.random.default_rng(seed).integers(-2, 3, n)).astype(np.float64)
    return 100.0 + 0.01 * k, k


def left(section, t0):
    return time.perf_counter() - t0 < BUDGET[section] * SCALE[0]


SCALE = [1.0]


def check(dev, vs, quick):
    t0 = time.perf_counter()
    T, mh = (700, 150) if quick else (900, 250)
    w, (cents, k) = walk(T, 3), ticks(T, 4)
    data = {"walk": w, "ticks": cents}
    refs = {"walk": pattern_conformity_numpy(w, MP, MF, CHI, mh),
            "ticks": pattern_conformity_numpy(k, MP, MF, CHI, mh)}
    emit(dev, "check", f"NumPy references T={T} max_history={mh}", "s", time.perf_counter() - t0)
    passed, base, pp_ticks = [], {}, {}
    for label, t in vs:
        if not left("check", t0):
            print("# check: rest skipped (time budget spent)", flush=True)
            break
        bad = []
        for kind, p in data.items():
            a = time.perf_counter()
            try:
                r = pattern_conformity(p, MP, MF, CHI, mh, device=dev, _tuning=t,
                                       progress=False)
            except Exception as exc:        # noqa: BLE001 - a variant that does not build
                bad.append(f"{kind}: {exc.__class__.__name__}: {str(exc)[:300]}")
                break
            if kind == "walk":
                emit(dev, "check", label, "first call s", time.perf_counter() - a,
                     "the build included")
            ref = refs[kind]
            err = float(np.nanmax(np.abs(r.Xi - ref.Xi)))
            nan_ok = np.array_equal(np.isnan(r.Xi), np.isnan(ref.Xi))
            counts = all(np.array_equal(getattr(r, n), getattr(ref, n))
                         for n in ("skipped_current", "skipped_history", "pairs"))
            if not (err <= 1e-5 and nan_ok and counts):
                bad.append(f"{kind}: max|dXi| {err:.2e} nan {nan_ok} counts {counts}")
            note = f"max|dXi| {kind} {err:.2e}"
            if label == vs[0][0]:
                base[kind] = r
            if label.startswith("one program"):
                pp_ticks[kind] = r
            elif (label.startswith("pp") and (kind == "ticks" or " cmp" in label)
                  and t.tb == vs[1][1].tb):     # (the tile's float32 sums: tb's order)
                # cmp sat: cmp's bits; local: cmp's bits where the products are exact (ticks)
                twin = pp_ticks[kind]
                same = (np.array_equal(r.xi, twin.xi) and np.array_equal(r.norm, twin.norm))
                note += "; same bits as cmp" if same else "; BITS DIFFER from cmp"
                if not same:
                    bad.append(f"{kind}: bits differ from cmp")
            emit(dev, "check", f"{label} {kind}", "max|dXi|", err, note)
        if bad:
            emit(dev, "check", label, "FAIL", "FAIL", "; ".join(bad))
            print(f"!!!!! FAIL {label}: {bad}", flush=True)
        else:
            passed.append((label, t))
    return passed


def rate(dev, vs, quick):
    """Rates in interleaved rounds (every variant once per round: drifts hit all alike)."""
    t0 = time.perf_counter()
    T, mh = (2_000, 512) if quick else (2**18 + 1, MH)
    p = walk(T, 5)
    triples = pattern_pairs(T, MP, mh)
    full = pattern_pairs(10**6, MP, MH)
    for _, t in vs:
        pattern_conformity(p[:200], MP, MF, CHI, mh, device=dev, _tuning=t, progress=False)
    times = {label: [] for label, _ in vs}
    for _ in range(3):
        if not left("rate", t0):
            print("# rate: rest skipped (time budget spent)", flush=True)
            break
        for label, t in vs:
            a = time.perf_counter()
            pattern_conformity(p, MP, MF, CHI, mh, device=dev, _tuning=t, progress=False)
            times[label].append(time.perf_counter() - a)
    out = []
    for label, t in vs:
        s = min(times[label])
        emit(dev, "rate", f"{label} T={T} max_history={mh}", "triples/s", triples / s,
             f"rounds {' / '.join(f'{x:.3f}' for x in times[label])} s; T=1e6 estimate "
             f"{full / (triples / s):.2f} s")
        out.append((triples / s, label, t))
    return sorted(out, key=lambda x: -x[0])


def full(dev, ranked, vs, quick):
    """The default and the fastest other per-Δt⁻ variant end to end, three runs each, and
    their difference (Ξ, and relative to Ξ's jackknife error)."""
    t0 = time.perf_counter()
    T, mh = (4_000, 512) if quick else (10**6, MH)
    p = walk(T, 5)
    # the default as a user calls it (tuning None: its host checks included), if it is
    # the listed one at this size
    resolved = default_tuning(dev.facts, MF, pattern_pairs(T, MP, mh), MP)
    default = [(lb + " as called", None) if t == resolved else (lb, t)
               for lb, t in vs if "(default)" in lb]
    other = [(lb, t) for _, lb, t in ranked if lb.startswith("pp") and "(default)" not in lb]
    chosen = default + other[:1]             # the one-program default: 2.59 s in batch 1
    best, ref = None, None
    for label, t in chosen:
        if not left("full", t0):
            print("# full: rest skipped (time budget spent)", flush=True)
            break
        ts = []
        for _ in range(3):
            a = time.perf_counter()
            r = pattern_conformity(p, MP, MF, CHI, mh, device=dev, _tuning=t, progress=False)
            ts.append(time.perf_counter() - a)
        s = sorted(ts)[1]
        emit(dev, "full", f"{label} T={T} 20x20 chi=100 max_history={mh}", "median s", s,
             f"runs {' / '.join(f'{x:.3f}' for x in ts)} s" +
             ("; target <= 2 s" if T == 10**6 else ""))
        if ref is None:
            ref = r
        else:
            d = np.abs(r.Xi - ref.Xi)[:, 1:]
            z = d / ref.Xi_err[:, 1:]
            emit(dev, "full", f"{label} vs {chosen[0][0]}", "max|dXi|", float(d.max()),
                 f"max |dXi|/Xi_err {float(z.max()):.3g}; max|Xi_err| "
                 f"{float(ref.Xi_err[:, 1:].max()):.3g}; bits same "
                 f"{np.array_equal(r.xi, ref.xi) and np.array_equal(r.norm, ref.norm)}")
        if best is None or s < best[0]:
            best = (s, label, t)
    return best


def info(dev, label, t, out_dir):
    shape = dict(wg=t.wg, tb=t.tb, maxp=MP, maxf=MF, acc="double" if dev.facts.fp64 else
                 "compensated", exp=t.exp, qform=t.qform, sign=t.sign, pre=int(t.pre),
                 slide=t.slide, qsw=int(t.qsw), cellmad=int(t.cellmad), hoist=int(t.hoist),
                 cellsat=int(t.cellsat))
    if t.per_past:
        shape.update(mfix=MP, brow=1)                   # the longest window's program
    src = render("timeseries/pattern.cl", dev.facts, **shape)
    opts = ["-cl-nv-verbose"] if dev.facts.vendor == "nvidia" else []
    prg = cl.Program(dev.context, src).build(options=opts)
    log = prg.get_build_info(dev.cl_device, cl.program_build_info.LOG) or ""
    for line in log.splitlines():
        if any(w in line for w in ("registers", "spill", "smem", "stack", "ptxas")):
            emit(dev, "info", label, "build log", line.strip())
    k = cl.Kernel(prg, "ts_pc_sweep")
    wgi = cl.kernel_work_group_info
    for name in ("LOCAL_MEM_SIZE", "PRIVATE_MEM_SIZE", "WORK_GROUP_SIZE"):
        try:
            emit(dev, "info", label, name, int(k.get_work_group_info(getattr(wgi, name),
                                                                     dev.cl_device)))
        except cl.Error as exc:
            emit(dev, "info", label, name, f"n/a {exc}")
    for i, b in enumerate(prg.binaries):            # PTX on NVIDIA: which forms the cells took
        text = b.decode("latin-1")
        counts = {op: text.count(op) for op in ("fma.rn.sat.f32", "min.f32", "max.f32",
                                                "selp.f32", "setp.", "fma.rn.f32", "mov.f32")}
        emit(dev, "info", label, "PTX op counts", json.dumps(counts))
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        Path(out_dir, "pattern_best.cl").write_text(src)
        Path(out_dir, "pattern_best.buildlog").write_text(log)
        for i, b in enumerate(prg.binaries):
            Path(out_dir, f"pattern_best.{i}.ptx").write_bytes(b)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (PoCL)")
    ap.add_argument("--json", metavar="FILE", help="also write the JSON lines to FILE")
    ap.add_argument("--out", metavar="DIR", help="write the best variant's source/PTX here")
    args = ap.parse_args(argv)
    dev = clphys.device()
    quick = args.quick or not dev.facts.is_gpu
    if quick:
        SCALE[0] = 10.0
    f = dev.facts
    print(f"# device: {dev.name} ({f.platform}, driver {f.driver}, CU {f.compute_units}, "
          f"local {f.local_mem})", flush=True)
    vs = variants(f, quick)
    passed = check(dev, vs, quick)
    ranked = rate(dev, passed, quick) if passed else []
    if ranked:
        best = full(dev, ranked, passed, quick) or (None, ranked[0][1], ranked[0][2])
        # the fastest, and the fastest with the clamp form (did it become fma.rn.sat?)
        sat1 = [(None, lb, t) for _, lb, t in ranked if t.cellsat == 1][:1]
        for i, (_, label, t) in enumerate([best] + [x for x in sat1 if x[1] != best[1]]):
            try:
                info(dev, label, t, args.out and f"{args.out}/{i}")
            except Exception as exc:        # noqa: BLE001 - diagnostics only
                emit(dev, "info", label, "error", f"{exc.__class__.__name__}: {exc}")
    emit(dev, "all", "probe", "s", time.perf_counter() - START)
    w = max(len(r[1]) for r in rows)
    print()
    for section, wl, metric, value, note in rows:
        print(f"{section:<6} {wl:<{w}}  {metric:<10} {value:>12}  {note}")
    if args.json:
        with open(args.json, "w") as fh:
            for rec in records:
                fh.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
