"""
Multicanonical ln g(E) and C(T) against Beale's exact result
============================================================

A parallel multicanonical run (many walkers, one set of weights) gives the
density of states g(E) of the 2D Ising model with jackknife errors; canonical
averages at any temperature follow by reweighting. For the L x L torus Beale
(1996) gives g(E) exactly (:func:`clphys.exact.density_of_states`), so both
the density of states and the specific heat C(T) can be checked point by point.

Sized for under a minute on two CPU cores (L = 8, a 3 % error target); on a GPU
``muca.run(32, dim=2)`` takes seconds (see the performance page).
"""

import matplotlib.pyplot as plt
import numpy as np

from clphys import muca
from clphys.exact import density_of_states

L = 8
res = muca.run(L, dim=2, seed=0, target_error=0.03)
E, ln_g = density_of_states(L)
dev = (res.ln_g - ln_g) / res.ln_g_err
print(f"{len(E)} energies, largest error {res.max_error:.3f}, "
      f"largest |ln g - exact| / error {np.max(np.abs(dev)):.2f}")

# %%
# The specific heat per spin from the exact density of states, against the
# reweighted run:

T = np.linspace(1.5, 3.5, 81)
N = L * L
w = ln_g[None, :] - E[None, :] / T[:, None]
p = np.exp(w - w.max(axis=1, keepdims=True))
p /= p.sum(axis=1, keepdims=True)
mean_E = p @ E
C_exact = (p @ E.astype(float) ** 2 - mean_E ** 2) / (T ** 2 * N)
c = res.canonical(T)
z = (c.specific_heat - C_exact) / c.specific_heat_err
print(f"C(T): largest |C - exact| / error over {len(T)} temperatures: {np.max(np.abs(z)):.2f}")

fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
a1.errorbar(res.energies / N, res.ln_g - ln_g, yerr=res.ln_g_err, fmt="o", ms=3, capsize=2)
a1.axhline(0, color="gray", lw=0.8)
a1.set(xlabel="E / N", ylabel="ln g - ln g (Beale)", title=f"density of states, L = {L}")
a2.plot(T, C_exact, "k-", lw=1, label="exact (Beale)")
a2.errorbar(T[::4], c.specific_heat[::4], yerr=c.specific_heat_err[::4], fmt="o", ms=3,
            capsize=2, label="multicanonical")
a2.set(xlabel="T", ylabel="C / N", title="specific heat by reweighting")
a2.legend()
fig.tight_layout()
