"""What a multicanonical simulation keeps of its iterations and production,
shared by the simulation and its checkpoints."""

from __future__ import annotations

from dataclasses import dataclass

PRODUCTION_KEYS = ("blocks", "magnet", "done", "seconds", "therm_fixed", "updates_fixed", "therm", "updates",
                   "check", "cap", "phase", "therm_passages", "passages", "target", "budget", "error")


@dataclass(frozen=True)
class IterationRecord:
    """One weight iteration: the width w it used, its thermalisation and
    recorded flips per walker, the flatness of its histogram (d_k, d_c), the
    energies it visited, wall seconds and attempted flips (all walkers)."""
    iteration: int
    width: int
    therm: int
    updates: int
    d_k: float
    d_c: float
    visited: int
    seconds: float
    flips: int
