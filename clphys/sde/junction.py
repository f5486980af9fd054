"""Asymptotic mean velocity of the driven Josephson junction (Stewart-McCumber
model, :data:`clphys.sde.models.JOSEPHSON`):

    x'' + gamma x' = -2 pi cos(2 pi x) + a cos(omega t) + f + sqrt(2 gamma kT) xi(t).

<<v>> is the drift of x per unit time, averaged over realizations and over
the periods after a transient: the mean over paths of the displacement
x(t_end) - x(t_0) (x unwrapped, measured per path from its own position at
t_0) divided by t_end - t_0. Defaults are those of Januszewski and Kostur,
Comput. Phys. Commun. 181, 183 (2010) (after Machura et al., PRL 98, 040601
(2007)): gamma = 0.9, omega = 4.9, f = 0.1, kT = 0.001, a around 4.2, 100
steps per drive period (dt = 0.01 * 2 pi / omega), x(0) uniform in [0, 1),
v(0) uniform in [-2, 2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .. import _validate as check
from ..runtime.checkpoint import CheckpointError, check_arrays, field, load_checkpoint
from ..runtime.longrun import CHECKPOINT_EVERY, Interrupted, check_checkpoint_args, checkpointed_run
from .ensemble import Ensemble, EnsembleState
from .models import JOSEPHSON
from .plan import encode_params

__all__ = ["josephson", "JosephsonResult"]

CHECKPOINT_KIND = "sde-josephson"


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
              seed=0, dtype="float32", fast_math=False, progress=None, device=None,
              checkpoint=None, checkpoint_every=CHECKPOINT_EVERY, resume=None, comm=None,
              gather="root") -> JosephsonResult | None:
    """<<v>> per grid point; a, f, kT, gamma may be 1-D arrays (a Cartesian
    grid in that order); omega is a number (dt = 2 pi / (omega *
    steps_per_period)). Runs `periods` drive periods and averages over the
    last periods - transient (default transient: a quarter).

    Work is done in slices of about a quarter second: `progress` counts
    completed time steps, and Ctrl-C raises :class:`clphys.runtime.Interrupted`
    within about a second. With `checkpoint` (an .npz path) the run's state
    is written there every `checkpoint_every` seconds and on Ctrl-C;
    ``resume=path`` continues such a file (the other arguments must describe
    the same run) and gives the same result, bit for bit, as a run that was
    never stopped.

    comm (an mpi4py communicator): a collective call; the grid points (or,
    for fewer points than ranks, the paths of each) are split over the
    ranks, each path keeps the noise it has on one device, and the result
    is the one device's bit for bit (devices of one kind). It is returned on
    rank 0, and on every rank with ``gather="all"``; other ranks get None.
    Checkpoints are not written in a distributed run (checkpoint= and
    resume= are refused there)."""
    # Over 80 lines with its docstring: the run's closures share one plan and histogram.
    args = (a, gamma, omega, f, kT, n_paths, periods, transient, steps_per_period, density_bins,
            checkpoint, checkpoint_every)
    checked = _check_everywhere(args, comm, resume, scheme=scheme, rng=rng, seed=repr(seed), dtype=dtype,
                                fast_math=repr(fast_math))
    if comm is not None and comm.Get_rank() != 0:
        progress = False
    params, n_paths, periods, transient, spp, bins, checkpoint, checkpoint_every = checked
    omega = params["omega"]
    T = 2 * np.pi / omega
    dt = T / spp
    total = periods * spp
    setup = dict(n_paths=n_paths, params=params, dt=dt, scheme=scheme, rng=rng, seed=seed,
                 dtype=dtype, fast_math=fast_math)
    plan = {"periods": periods, "transient": transient, "steps_per_period": spp, "density_bins": bins}
    hist_spec = {"x": (bins, 0.0, 1.0)} if bins else None
    start = transient * spp          # the step where the measurement (and the displacement) starts

    if resume is not None:
        ens, hist_total = _resume(resume, setup, plan, total, device)
    else:
        ens = Ensemble(JOSEPHSON, n_paths, params, dt, scheme=scheme, rng=rng, seed=seed, dtype=dtype,
                       fast_math=fast_math, initial={"x": ("uniform", 0.0, 1.0),
                                                     "v": ("uniform", -2.0, 2.0)}, device=device,
                       comm=comm, gather=gather)
        hist_total = np.zeros((ens.share.n_grid, bins), np.uint64)
    last = {}

    def advance(n, report):
        """n more steps, not crossing the start of the measurement; there
        the displacement starts, and every period boundary after it is a
        sample (of the displacement and of x for the density). Runs on this
        rank's share only: the ranks meet once, at the end."""
        if ens.step < start:
            ens.run_local(steps=n, observables=[], progress=report)
            return
        if ens.origin_step != start:
            ens.set_origin()
        # the density samples x every period; <<v>> needs the displacement at the
        # end only, so without a density one sample ends each piece (a launch per
        # period cost more host time than a small share of paths runs on a GPU)
        try:
            loc = ens.run_local(steps=n, sample_every=spp if bins else n, observables=["displacement(x)"],
                                 histograms=hist_spec, progress=report)
        except Interrupted as exc:
            keep(exc.local)
            raise
        keep(loc)

    def keep(loc):
        if loc.hists:                     # not in the transient
            hist_total[...] += loc.hists[0]
        if loc.times.size:
            last["loc"] = loc

    def save():
        header, arrays = ens.state().checkpoint_parts()
        header["josephson"] = plan
        arrays["hist"] = hist_total
        return CHECKPOINT_KIND, header, arrays

    checkpointed_run(ens, total, spp, advance, lambda partial: None, save, progress=progress,
                     label="josephson", checkpoint=checkpoint, checkpoint_every=checkpoint_every,
                     boundaries=(start,))
    loc = last["loc"]
    if bins:
        loc.hists = [hist_total]          # the whole measurement's counts
    r = ens.finish(loc)
    if r is None:
        return None
    return _result(ens, r, n_paths, periods, transient, bins, dt, T)


def _check_everywhere(args, comm, resume, **identity):
    """josephson's arguments checked (on every rank of `comm`, which must
    agree on them and on `identity`; no checkpoints there)."""
    checkpoint = args[10]
    if comm is None:
        return _check_args(*args)
    from ..runtime import mpi
    mpi.comm_size_rank(comm)

    def refuse_checkpoints():
        if checkpoint is not None or resume is not None:
            raise ValueError("checkpoint= and resume= are not supported with comm= (a distributed "
                             "run); run on one process to checkpoint")
        return _check_args(*args)
    checked = mpi.all_ok(comm, refuse_checkpoints)
    mpi.agree(comm, "josephson arguments", params=encode_params(checked[0]),
              **{k: v for k, v in zip(("n_paths", "periods", "transient", "steps_per_period",
                                       "density_bins"), checked[1:6])}, **identity)
    return checked


def _result(ens, r, n_paths, periods, transient, bins, dt, T) -> JosephsonResult:
    """<<v>> with its error, and the density, from the RunResult of the measurement."""
    span = (periods - transient) * T
    v = r.mean["displacement(x)"][-1] / span
    v_err = np.sqrt(r.var["displacement(x)"][-1] / n_paths) / span
    density = edges = None
    if bins:
        counts = r.hist["x"].astype(float)
        density = counts / np.maximum(counts.sum(axis=-1, keepdims=True), 1) * bins
        edges = np.linspace(0.0, 1.0, bins + 1)
    return JosephsonResult(ens.grid, v, v_err, density, edges, n_paths, periods, transient, dt)


def _check_args(a, gamma, omega, f, kT, n_paths, periods, transient, steps_per_period, density_bins,
                checkpoint, checkpoint_every):
    """josephson's arguments checked: (params, n_paths, periods, transient,
    steps per period, density bins, checkpoint, checkpoint_every)."""
    omega = check.real("omega", omega, 0.0, strict_min=True)
    n_paths = check.integer("n_paths", n_paths, 1)
    periods = check.integer("periods", periods, 2)
    transient = periods // 4 if transient is None else check.integer("transient", transient, 0, periods - 1)
    spp = check.integer("steps_per_period", steps_per_period, 1)
    bins = check.integer("density_bins", density_bins, 0, 4096)
    checkpoint, checkpoint_every = check_checkpoint_args(checkpoint, checkpoint_every)
    params = {}
    for name, value in (("a", a), ("f", f), ("kT", kT), ("gamma", gamma)):
        arr = check.finite_array(name, value, dtype=float)
        if arr.ndim > 1:
            raise ValueError(f"{name} must be a number or a 1-D array, got shape {arr.shape}")
        if arr.size == 0:
            raise ValueError(f"{name} is an empty array")
        if name in ("kT", "gamma") and np.any(arr < 0 if name == "kT" else arr <= 0):
            raise ValueError(f"{name} must be {'>= 0' if name == 'kT' else '> 0'}, got {arr.min()}")
        params[name] = float(arr) if arr.ndim == 0 else arr
    params["omega"] = omega
    total = periods * spp
    if total >= 2**63:
        raise ValueError(f"periods x steps_per_period = {total} time steps; at most 2^63 - 1")
    _check_laps(params, periods, transient)
    return params, n_paths, periods, transient, spp, bins, checkpoint, checkpoint_every


MAX_LAPS = 2**31 - 2            # the kernel counts whole periods of x in an int32 per path


def _check_laps(params, periods, transient):
    """ValueError unless no path can run more laps (periods of x) than the int32 lap
    counter holds, in the transient or in the measurement (the count restarts at its
    start): |v| stays below max(2, (2 pi + |a| + |f|) / gamma) + 10 sqrt(kT) (the start
    values are in [-2, 2), the forces bounded, the thermal spread sqrt(kT))."""
    a, f = (float(np.max(np.abs(params[k]))) for k in ("a", "f"))
    gamma, kT = float(np.min(params["gamma"])), float(np.max(params["kT"]))
    span = max(transient, periods - transient) * 2 * np.pi / params["omega"]
    noise = 10 * np.sqrt(kT)
    vmax = max(2.0, (2 * np.pi + a + f) / gamma) + noise
    if vmax * span <= MAX_LAPS:
        return
    f_max = gamma * (MAX_LAPS / span - noise) - 2 * np.pi - a
    hint = (f"|f| <= {f_max:.4g} for these a, gamma, kT and periods" if f_max > 0 else
            "fewer periods, or a smaller |a| or kT")
    raise ValueError(f"josephson: a path may run up to {vmax * span:.3g} periods of x (|v| up "
                     f"to (2 pi + |a| + |f|) / gamma + 10 sqrt(kT) = {vmax:.3g} over "
                     f"max(transient, periods - transient) = {span:.4g} time units), more than "
                     f"its lap counter holds (2^31 - 2), so <<v>> would be wrong: use {hint}")


def _resume(path, setup, plan, total, device):
    """The ensemble and histogram of the Josephson run saved at `path`,
    checked to be the run the arguments describe."""
    header, files = load_checkpoint(path, CHECKPOINT_KIND)
    where = f"checkpoint {os.fspath(path)!r}"
    hist = files.pop("hist", None)
    state = EnsembleState.from_checkpoint_parts(header, files, path)
    if state.model != JOSEPHSON:
        raise CheckpointError(f"{where} holds another model: {state.model!r}")
    found = {"n_paths": state.n_paths, "params": encode_params(state.params), "dt": state.dt,
             "scheme": state.scheme, "rng": state.rng, "seed": state.seed, "dtype": state.dtype,
             "fast_math": state.fast_math, **field(header, "josephson", dict, path=os.fspath(path))}
    want = {**setup, "params": encode_params(_normal_params(setup["params"])), **plan}
    diff = [f"{k} is {found.get(k)!r} there, {v!r} here" for k, v in want.items() if found.get(k) != v]
    if diff:
        raise CheckpointError(f"{where} is of another run: {'; '.join(diff)}")
    if state.step >= total:
        raise CheckpointError(f"{where} is of a finished run (step {state.step} of {total})")
    start = plan["transient"] * plan["steps_per_period"]
    ok = ({start} if state.step > start else {0, start} if state.step == start else {0})
    if state.origin_step not in ok:
        raise CheckpointError(f"{where}: its displacement origin (step {state.origin_step}) is neither "
                              f"the start of the run nor of the measurement (step {start})")
    if hist is None:
        raise CheckpointError(f"{where} lacks the array 'hist'")
    n_grid = state.time.shape[0]
    check_arrays(path, {}, {"hist": hist}, {"hist": (np.uint64, (n_grid, plan["density_bins"]))})
    # one count per path and sample (a period boundary after the start), none for values off [0, 1)
    samples = max(0, state.step - start) // plan["steps_per_period"]
    if np.any(hist.sum(axis=1, dtype=np.float64) > state.n_paths * samples):
        raise CheckpointError(f"{where}: array 'hist' holds more counts than {state.n_paths} paths x "
                              f"{samples} samples at step {state.step}")
    return Ensemble.from_state(state, device=device), hist.copy()


def _normal_params(params):
    return {k: (float(v) if np.ndim(v) == 0 else np.asarray(v, float)) for k, v in params.items()}
