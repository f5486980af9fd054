"""Parallel multicanonical sampling of the 2D and 3D Ising model: thousands of
walkers, one histogram, the density of states and canonical averages at any
temperature. See docs/muca.md.

    from clphys import muca
    sim = muca.Multicanonical(8, dim=2, seed=0)
    history = sim.iterate(kl=1e-4)           # width, d_k, d_c, updates, seconds per iteration
    res = sim.produce(target_error=0.02)     # res.energies, res.ln_g, res.ln_g_err
    c = res.canonical([2.0, 2.5])            # .energy, .specific_heat (per spin) with errors
    res = muca.run(8, dim=2, seed=0)         # both in one call
"""

from .engine import default_walkers
from .geometry import Geometry
from .protocol import Protocol, chebyshev, kullback_leibler, thresholds
from .result import Canonical, MucaResult
from .simulation import History, IterationRecord, Multicanonical, run

__all__ = ["Multicanonical", "run", "MucaResult", "Canonical", "History", "IterationRecord",
           "Geometry", "Protocol", "thresholds", "kullback_leibler", "chebyshev", "default_walkers"]
