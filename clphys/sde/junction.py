"""Asymptotic mean velocity of the driven Josephson junction (Stewart-McCumber
model, :data:`clphys.sde.models.JOSEPHSON`):

    x'' + gamma x' = -2 pi cos(2 pi x) + a cos(omega t) + f + sqrt(2 gamma kT) xi(t).

<<v>> is the drift of x per unit time, averaged over realizations and over
the periods after a transient: (<x(t_end)> - <x(t_0)>) / (t_end - t_0) with
x unwrapped.  Defaults are those of Januszewski and Kostur, Comput. Phys.
Commun. 181, 183 (2010) (after Machura et al., PRL 98, 040601 (2007)):
gamma = 0.9, omega = 4.9, f = 0.1, kT = 0.001, a around 4.2, 100 steps per
drive period (dt = 0.01 * 2 pi / omega), x(0) uniform in [0, 1), v(0)
uniform in [-2, 2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _validate as check
from ..progress import Progress
from .ensemble import Ensemble
from .models import JOSEPHSON

__all__ = ["josephson", "JosephsonResult"]


@dataclass(frozen=True)
class JosephsonResult:
    """grid: {parameter: values of shape grid_shape}; v, v_err: <<v>> and its
    standard error per grid point; density: (*grid_shape, bins) normalized
    density of x mod 1 at the drive phase 0 (stroboscopic, over the
    measured periods), with bin edges `edges`, or None."""
    grid: dict
    v: np.ndarray
    v_err: np.ndarray
    density: np.ndarray | None
    edges: np.ndarray | None
    n_paths: int
    periods: int
    transient: int
    dt: float


def josephson(a=4.2, *, gamma=0.9, omega=4.9, f=0.1, kT=0.001, n_paths=1024, periods=2000,
              transient=None, steps_per_period=100, density_bins=0, scheme="srk2", rng="philox",
              seed=0, dtype="float32", fast_math=False, progress=None, device=None) -> JosephsonResult:
    """<<v>> per grid point; a, f, kT, gamma may be 1-D arrays (a Cartesian
    grid in that order); omega is a number (dt = 2 pi / (omega *
    steps_per_period)). Runs `periods` drive periods and averages over the
    last periods - transient (default transient: a quarter)."""
    omega = check.real("omega", omega, 0.0, strict_min=True)
    n_paths = check.integer("n_paths", n_paths, 1)
    periods = check.integer("periods", periods, 2)
    transient = periods // 4 if transient is None else check.integer("transient", transient, 0, periods - 1)
    spp = check.integer("steps_per_period", steps_per_period, 1)
    bins = check.integer("density_bins", density_bins, 0, 4096)
    params = {}
    for name, value in (("a", a), ("f", f), ("kT", kT), ("gamma", gamma)):
        arr = check.finite_array(name, value, dtype=float)
        if arr.ndim > 1:
            raise ValueError(f"{name} must be a number or a 1-D array, got shape {arr.shape}")
        if name in ("kT", "gamma") and np.any(arr < 0 if name == "kT" else arr <= 0):
            raise ValueError(f"{name} must be {'>= 0' if name == 'kT' else '> 0'}, got {arr.min()}")
        params[name] = float(arr) if arr.ndim == 0 else arr
    params["omega"] = omega
    T = 2 * np.pi / omega
    dt = T / spp
    ens = Ensemble(JOSEPHSON, n_paths, params, dt, scheme=scheme, rng=rng, seed=seed, dtype=dtype,
                   fast_math=fast_math, initial={"x": ("uniform", 0.0, 1.0), "v": ("uniform", -2.0, 2.0)},
                   device=device)
    total = periods * spp
    with Progress(total, progress, label="josephson") as bar:
        offset = [0]          # steps of the earlier runs

        def report(done, _total):
            bar.update(offset[0] + done - bar.done)
        x0 = np.zeros(ens.grid_shape)
        if transient:
            r0 = ens.run(steps=transient * spp, observables=["x"], progress=report)
            x0 = r0.mean["x"][-1]
            offset[0] = bar.done
        ens.reset_laps()
        hist = {"x": (bins, 0.0, 1.0)} if bins else None
        r = ens.run(steps=(periods - transient) * spp, sample_every=spp, observables=["unwrap(x)"],
                    histograms=hist, progress=report)
    span = (periods - transient) * T
    v = (r.mean["unwrap(x)"][-1] - x0) / span
    v_err = np.sqrt(r.var["unwrap(x)"][-1] / n_paths) / span
    density = edges = None
    if bins:
        counts = r.hist["x"].astype(float)
        density = counts / np.maximum(counts.sum(axis=-1, keepdims=True), 1) * bins
        edges = r.hist_edges["x"]
    return JosephsonResult(ens.grid, v, v_err, density, edges, n_paths, periods, transient, dt)
