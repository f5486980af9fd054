"""Real-valued pattern conformity: the sign forms cmp, local and scaled against the float64
NumPy reference (the figures of docs/timeseries.md's `sign="local"` paragraph).

    CLPHYS_DEVICE=portable python benchmarks/probe_pc3_precision.py            # ~4 min on PoCL
    CLPHYS_DEVICE=portable python benchmarks/probe_pc3_precision.py --quick    # ~20 s

Per walk 1e4 + cumsum(N(0, 1)) (tick=None), 20 x 20, chi = 100: max |ΔΞ| against the reference
(and relative to Ξ's jackknife error), against cmp, and the sums' errors relative to the
largest norm.  One JSON line per (walk, sign form).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import clphys  # noqa: E402
from clphys.timeseries import pattern_conformity  # noqa: E402
from clphys.timeseries.pattern import PatternTuning  # noqa: E402
from clphys.timeseries.reference import pattern_conformity_numpy  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one small walk")
    args = ap.parse_args(argv)
    dev = clphys.device()
    runs = [(1200, 400, 1)] if args.quick else [(3000, 1000, 1), (5000, 2000, 2),
                                                (5000, 2000, 3)]
    for T, mh, seed in runs:
        p = 1e4 + np.cumsum(np.random.default_rng(seed).standard_normal(T))
        ref = pattern_conformity_numpy(p, 20, 20, 100.0, mh)
        out = {sign: pattern_conformity(p, 20, 20, 100.0, mh, device=dev, tick=None,
                                        progress=False, _tuning=PatternTuning(
                                            wg=16, tb=64, slide=2, cellmad=True, sign=sign))
               for sign in ("cmp", "local", "scaled")}
        for sign, r in out.items():
            d = np.abs(r.Xi - ref.Xi)[:, 1:]
            scale = ref.norm.max()
            print(json.dumps(dict(
                T=T, max_history=mh, seed=seed, sign=sign, max_dXi_ref=float(d.max()),
                max_dXi_ref_over_err=float((d / r.Xi_err[:, 1:]).max()),
                max_dXi_cmp=float(np.abs(r.Xi - out["cmp"].Xi)[:, 1:].max()),
                xi_rel=float(np.max(np.abs(r.xi - ref.xi)) / scale),
                norm_rel=float(np.max(np.abs(r.norm - ref.norm)) / scale))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
