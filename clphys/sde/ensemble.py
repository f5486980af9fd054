"""Ensembles of SDE realizations on the device, from a :class:`Model`.

One work item advances one realization through many time steps per launch,
keeping its state in registers; every `sample_every` steps the paths of each
grid point are reduced on the device (Chan's pairwise mean and variance,
double accumulation where the device has fp64).

Random numbers: ``rng="philox"`` (default) gives path i its Gaussians
j = 0, 1, ... as component j % 4 of the two Box-Muller pairs of
philox((i, j // 4, j // 2^34, 0), key(seed)), with j = step * n_sources +
source; they depend on nothing else (not on work-group size, launch split,
or device). ``rng="xorshift32"`` gives each path a xorshift32 state seeded
with :func:`clphys.rng.chained_seeds` and Box-Muller pairs of successive
words.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .. import _validate as check
from ..errors import DeviceError
from ..rng import chained_seeds, seed_key
from ..runtime import fp64_missing, mpi, resolve_device, zeros
from ..runtime import work_group_size as _wg_size
from ..runtime.longrun import Interrupted, run_sliced
from ..runtime.memory import check_memory
from .finish import EnsembleFinish
from .model import Model
from .plan import (
    DTYPES,
    GATHERS,
    RNGS,
    SCHEMES,
    TIME_RESYNC,
    EnsemblePlanning,
    LocalRecord,
    RunPlan,
    Share,
    check_fits,
    encode_params,
    parse_params,
    shares,
    work_group_size_default,
)
from .state import EnsembleCheckpoints, EnsembleState, RunResult

__all__ = ["Ensemble", "EnsembleState", "RunResult", "SCHEMES", "RNGS", "DTYPES", "TIME_RESYNC",
           "check_fits", "Share", "shares", "GATHERS"]


@dataclass
class _RunBuffers:
    """The program, device buffers and host counts of one run on one rank's share."""
    plan: RunPlan
    prg: Any
    mom: np.dtype
    n_groups: int
    nrl: int
    slots: int
    start: int
    partials: Any
    moments: Any
    hist_dev: Any
    hist_rng: Any
    rec: Any
    scalars: list
    hist_total: np.ndarray
    flush_every: int
    key: tuple
    noise_sources: int
    moments_wg: int
    pending_hist: int = 0


class Ensemble(EnsemblePlanning, EnsembleCheckpoints, EnsembleFinish):
    """n_paths realizations of `model` at every point of a parameter grid.

    params
        ``{parameter: value}``: a scalar, or a 1-D array (a sweep); arrays of
        different parameters form a Cartesian grid, in the order given.
        ``{("a", "f"): (a_values, f_values)}`` sweeps several parameters
        together along one axis (equal lengths).
    dt
        time step (> 0).
    scheme
        ``"srk2"``: Heun predictor-corrector with the same Gaussians in both
        stages (weak order 2 for additive noise); ``"euler"``: Euler-Maruyama
        (weak order 1).
    rng
        ``"philox"`` or ``"xorshift32"`` (module doc); ``seed`` a 64-bit int.
    dtype
        ``"float32"`` (default) or ``"float64"`` (needs fp64 on the device).
    fast_math
        build with ``-cl-fast-relaxed-math`` (faster transcendentals, less
        accurate).
    initial
        ``{variable: value}``: a scalar, an array broadcastable to
        (*grid_shape, n_paths), or ``("uniform", lo, hi)`` drawn on the device;
        missing variables start at 0. The initial positions are the origin of
        ``displacement(x)`` until :meth:`set_origin` moves it.
    work_group_size
        paths per work group (a power of two); default from the device.
    """

    def __init__(self, model, n_paths, params, dt, *, scheme="srk2", rng="philox", seed=0,
                 dtype="float32", fast_math=False, initial=None, work_group_size=None,
                 device=None, comm=None, gather="root"):
        self._comm, self._gather = None, "root"
        args = (model, n_paths, params, dt, scheme, rng, seed, dtype, fast_math, initial)
        if comm is None:
            init = self._check_args(*args)
        else:
            # collective: every rank checks, a failure anywhere is an error everywhere
            mpi.comm_size_rank(comm)
            init = mpi.all_ok(comm, self._check_args, *args)
            gather = mpi.all_ok(comm, check.choice, "gather", gather, GATHERS)
            mpi.agree(comm, "Ensemble parameters", **self._identity(init), gather=gather,
                      work_group_size=repr(work_group_size))
            self._comm, self._gather = comm, gather
        self._open(device, work_group_size, init)

    def _check_args(self, model, n_paths, params, dt, scheme, rng, seed, dtype, fast_math, initial):
        """Every argument checked (no device yet); returns the checked initial values."""
        if not isinstance(model, Model):
            raise TypeError(f"model must be a clphys.sde.Model, got {type(model).__name__}")
        self.model = model
        self.n_paths = check.integer("n_paths", n_paths, 1)
        self._params, self.grid_shape, self.n_grid, self._values = parse_params(model, params)
        self.dt = check.real("dt", dt, 0.0, strict_min=True)
        self.scheme = check.choice("scheme", scheme, SCHEMES)
        self.rng = check.choice("rng", rng, RNGS)
        self.seed = check.seed(seed)
        self.dtype = check.choice("dtype", dtype, DTYPES)
        if not isinstance(fast_math, bool):
            raise TypeError(f"fast_math must be True or False, got {fast_math!r}")
        self.fast_math = fast_math
        self.n_total = self.n_paths * self.n_grid
        if self.n_total >= 2**32:
            raise ValueError(f"n_paths x grid points = {self.n_paths} x {self.n_grid} = {self.n_total} "
                             "realizations; at most 2^32 - 1 are supported")
        periods = model.drive_periods(self._values)
        if periods is not None:
            periods = np.broadcast_to(periods, (self.n_grid,)).astype(float)
            bad = ~(np.isfinite(periods) & (periods > 0))
            if bad.any():
                raise ValueError(f"drive_period {model.drive_period!r} must be finite and > 0; it is "
                                 f"{periods[bad][0]} at grid point {int(np.argmax(bad))}")
        self._periods = periods
        return self._check_initial(initial)

    def _identity(self, init) -> dict:
        """What must agree across ranks (arrays by their hash)."""
        def tag(v):
            if isinstance(v, tuple):
                return list(v)
            return "sha1:" + hashlib.sha1(np.ascontiguousarray(v, dtype=float).tobytes()).hexdigest()
        return {"model": self.model.describe(), "n_paths": self.n_paths,
                "params": encode_params(self._params), "dt": self.dt, "scheme": self.scheme,
                "rng": self.rng, "seed": self.seed, "dtype": self.dtype, "fast_math": self.fast_math,
                "initial": {v: tag(val) for v, val in init.items()}}

    def _agree(self, call, **args):
        """At the start of a collective method: the same call with the same arguments on
        every rank, else ValueError on every rank (see runtime.mpi.check_call)."""
        if self._comm is not None:
            mpi.check_call(self._comm, call, **args)

    def _collective(self, fn, *args):
        """fn(*args) here; with a communicator on every rank, failing everywhere if it fails anywhere."""
        return fn(*args) if self._comm is None else mpi.all_ok(self._comm, fn, *args)

    def _open(self, device, work_group_size, init):
        """Device, work-group size, this rank's share, memory check, buffers, initial state."""
        def pick_device():
            self.device = dev = resolve_device(device)
            if self.dtype == "float64" and not dev.facts.fp64:
                raise fp64_missing(dev, "sde.Ensemble: dtype='float64'", "dtype='float32'")
            if work_group_size is None:
                return work_group_size_default(dev.facts, self.n_paths)
            wg = check.integer("work_group_size", work_group_size, 1, dev.facts.max_work_group)
            if wg & (wg - 1):
                raise ValueError(f"work_group_size must be a power of two, got {wg}")
            return wg

        wg = self._collective(pick_device)
        self.work_group_size = wg
        self._real = np.dtype(self.dtype)
        self._acc = np.dtype(np.float64 if self.device.facts.fp64 else np.float32)
        size, rank = (1, 0) if self._comm is None else mpi.comm_size_rank(self._comm)
        if self._comm is not None:
            # the same work groups and accumulator everywhere, or the statistics differ in their bits
            mpi.agree(self._comm, "work-group sizes and accumulators of the ranks' devices (pass "
                      "work_group_size=, or use devices of one kind)", work_group_size=wg,
                      accumulator=self._acc.name)
        self._shares = shares(self.n_grid, self.n_paths, wg, size)
        self.share = sh = self._shares[rank]
        self._ng, self._np = sh.n_grid, sh.n_paths      # this rank's grid points and paths per point
        self._nl = sh.n_grid * sh.n_paths
        self._groups_per_grid = -(-sh.n_paths // wg)
        self._nper = len(self.model.periodic)
        self._check_representable(init)
        self._collective(check_memory, self.device, self._buffer_sizes(),
                         f"an ensemble of {self._np} paths x {self._ng} grid points"
                         + (f" (rank {rank}'s share)" if size > 1 else ""),
                         "Use fewer paths or grid points" + (", or more ranks." if size > 1 else "."))
        self._step = 0
        self._origin_step = 0
        self._slice = 1                  # the slice size (steps) the last run settled on

        def make():
            try:
                self._alloc()
                self._set_initial(init)
            except cl.Error as exc:
                raise DeviceError(f"{self.device.name}: {exc}") from None
        self._collective(make)

    def _check_representable(self, init):
        for p in self.model.parameters:
            check_fits(f"params[{p!r}]", self._values[p], self._real)
        check_fits("dt", self.dt, self._real)
        if self._real.type(self.dt) == 0:
            raise ValueError(f"dt = {self.dt!r} is 0 in {self.dtype}; use dtype='float64'")
        if self._periods is not None:
            check_fits(f"drive_period {self.model.drive_period!r}", self._periods, self._real)
        for v, val in init.items():
            check_fits(f"initial[{v!r}]", val[1:] if isinstance(val, tuple) else val, self._real)

    def _buffer_sizes(self) -> dict:
        nv, r, n = len(self.model.variables), self._real.itemsize, self._nl
        return {"state": nv * n * r, "origin": nv * n * r, "laps": self._nper * n * 4,
                "rng": 8 * n if self.rng == "xorshift32" else 0,
                "parameters": len(self.model.parameters) * self._ng * r,
                "times": 3 * self._ng * r}

    # ------------------------------------------------------------ set-up
    def _check_initial(self, initial):
        initial = {} if initial is None else initial
        if not isinstance(initial, Mapping):
            raise TypeError(f"initial must be a mapping {{variable: value}}, got {type(initial).__name__}")
        out = {}
        shape = self.grid_shape + (self.n_paths,)
        for v, val in initial.items():
            if v not in self.model.variables:
                raise ValueError(f"initial: {v!r} is not a variable; variables are "
                                 f"{', '.join(self.model.variables)}")
            if isinstance(val, tuple) and len(val) == 3 and val[0] == "uniform":
                lo = check.real(f"initial[{v!r}] low", val[1])
                hi = check.real(f"initial[{v!r}] high", val[2])
                if hi <= lo:
                    raise ValueError(f"initial[{v!r}]: uniform needs low < high, got {lo}, {hi}")
                out[v] = ("uniform", lo, hi)
                continue
            arr = check.finite_array(f"initial[{v!r}]", val, dtype=float)
            try:
                out[v] = np.broadcast_to(arr, shape)
            except ValueError:
                raise ValueError(f"initial[{v!r}] has shape {arr.shape}, which does not broadcast to "
                                 f"(*grid_shape, n_paths) = {shape}") from None
        return out

    def _alloc(self):
        q = self.device.queue
        nv = len(self.model.variables)
        n = self._nl
        self._state = zeros(self.device, (nv, n), self._real)
        self._origin = zeros(self.device, (nv, n), self._real)
        self._laps = zeros(self.device, (max(self._nper, 1), n if self._nper else 1), np.int32)
        if self.rng == "xorshift32":
            # the seeds of the whole ensemble's paths, this rank's share of them
            seeds = chained_seeds(self.n_total, self.seed)
            self._xs = cla.to_device(q, self._local_of(seeds[None])[0])
            self._spare = zeros(self.device, n, np.float32)
        else:
            self._xs = zeros(self.device, 1, np.uint32)
            self._spare = zeros(self.device, 1, np.float32)
        gp = self._grid_params()
        mine = slice(self.share.g0, self.share.g0 + self._ng)
        table = np.array([np.broadcast_to(self._values[p], (self.n_grid,))[mine] for p in gp],
                         dtype=self._real).reshape(len(gp), self._ng)
        self._gpar = cla.to_device(q, table if gp else np.zeros(1, self._real))
        # t at the start of the next launch and at its end (swapped after each launch)
        self._t = [zeros(self.device, self._ng, self._real) for _ in range(2)]
        self._tcur, self._t_valid = 0, False
        self._period = cla.to_device(q, (self._periods[mine] if self._periods is not None
                                         else np.ones(self._ng)).astype(self._real))

    def _grid_params(self):
        return [p for p in self.model.parameters if not np.isscalar(self._values[p])]

    def _exact_time(self, step) -> np.ndarray:
        """(local grid points,) time at absolute `step`, modulo the drive period, from float64."""
        t = np.full(self._ng, step * self.dt)
        if self._periods is not None:
            t = np.mod(t, self._periods[self.share.g0:self.share.g0 + self._ng])
        return t.astype(self._real)

    def _local_of(self, whole) -> np.ndarray:
        """This rank's part (lead, local paths) of an array (lead, n_total) of every path."""
        sh = self.share
        lead = whole.shape[:-1]
        grid = whole.reshape(lead + (self.n_grid, self.n_paths))
        part = grid[..., sh.g0:sh.g0 + sh.n_grid, sh.p0:sh.p0 + sh.n_paths]
        return np.ascontiguousarray(part).reshape(lead + (self._nl,))

    def _set_initial(self, init):
        q = self.device.queue
        nv = len(self.model.variables)
        if any(not isinstance(val, tuple) for val in init.values()):
            host = np.zeros((nv, self._nl), dtype=self._real)
            for k, v in enumerate(self.model.variables):
                if v in init and not isinstance(init[v], tuple):
                    whole = np.asarray(init[v], dtype=self._real).reshape(1, self.n_total)
                    host[k] = self._local_of(whole)[0]
            cl.enqueue_copy(q, self._state.data, host)
        for k, v in enumerate(self.model.variables):
            val = init.get(v)
            if isinstance(val, tuple):
                prg = self._program((), (), ())
                k0, k1 = seed_key(self.seed)
                sh = self.share
                prg.sde_init_uniform(q, (self._nl,), None, self._state.data,
                                     np.uint64(k * self._nl), np.uint64(self._nl),
                                     self._real.type(val[1]), self._real.type(val[2]), np.uint32(k),
                                     np.uint32(k0), np.uint32(k1), np.uint64(sh.g0),
                                     np.uint64(sh.p0), np.uint64(sh.n_paths), np.uint64(self.n_paths))
        self.set_origin()

    def _program(self, obs, hist, disp):
        real = "double" if self.dtype == "float64" else "float"
        options = [] if real == "double" else ["-cl-single-precision-constant"]
        if self.fast_math:
            options.append("-cl-fast-relaxed-math")
        gp = self._grid_params()
        params = dict(real=real, model=self.model.render_spec(real), gparams=gp,
                      sparams=[p for p in self.model.parameters if p not in gp], scheme=self.scheme,
                      rng=self.rng, wg=self.work_group_size, wgf=_wg_size(self.device.facts, 64),
                      obs=list(obs), hist=list(hist), disp=list(disp))
        tag = hashlib.sha1(repr(sorted(params.items())).encode()).hexdigest()[:10]
        return self.device.build("sde/ensemble.cl", options=options, tag=tag, **params)

    # ------------------------------------------------------------ queries
    @property
    def step(self) -> int:
        """Time steps done so far."""
        return self._step

    @property
    def t(self) -> float:
        """Current time, step * dt."""
        return self._step * self.dt

    @property
    def origin_step(self) -> int:
        """The step at which :meth:`set_origin` was last called (0: the start)."""
        return self._origin_step

    @property
    def params(self) -> dict:
        """The parameters as given, normalized (floats and float arrays)."""
        return dict(self._params)

    @property
    def grid(self) -> dict:
        """{parameter: array of shape grid_shape} for every parameter."""
        return {p: np.broadcast_to(self._values[p], (self.n_grid,)).reshape(self.grid_shape)
                for p in self.model.parameters}

    def values(self, unwrap: bool = False) -> dict | None:
        """{variable: array (*grid_shape, n_paths)} of the current state;
        with unwrap=True periodic variables are float64 x + laps * period.
        With a communicator: collective, the whole ensemble's values on rank 0
        (every rank with gather='all'), None elsewhere."""
        self._agree("values", unwrap=unwrap)
        host = self._state.get()
        laps = self._laps.get() if self._nper else np.zeros((0, self._nl), np.int32)
        if self._comm is not None:
            whole = self._whole([host, laps], np.zeros(self._ng))
            if whole is None:
                return None
            host, laps, _t = whole
        out = {}
        for k, v in enumerate(self.model.variables):
            a = host[k]
            if unwrap and v in self.model.periodic:
                j = list(self.model.periodic).index(v)
                a = a.astype(np.float64) + laps[j].astype(np.float64) * self.model.periodic[v]
            out[v] = a.reshape(self.grid_shape + (self.n_paths,))
        return out

    def set_origin(self) -> None:
        """Make the current state the origin: from now on ``displacement(x)``
        in observables is x(now) - x(origin) per path (for periodic
        variables including the laps since), and the laps of periodic
        variables count from zero, so ``unwrap(x)`` starts in [0, period).
        The ensemble's initial state is the first origin."""
        q = self.device.queue
        cl.enqueue_copy(q, self._origin.data, self._state.data)
        if self._nper:
            cl.enqueue_copy(q, self._laps.data, np.zeros(self._laps.shape, np.int32))
        q.finish()
        self._origin_step = self._step

    def reset_laps(self) -> None:
        """Same as :meth:`set_origin` (its older name)."""
        self.set_origin()

    # ------------------------------------------------------------ running
    def run(self, t_end: float | None = None, *, steps: int | None = None, sample_every: int | None = None,
            observables: Sequence[str] | None = None, histograms: Mapping | None = None, record_paths: int = 0,
            progress: bool | Callable | None = None) -> RunResult | None:
        """Advance to `t_end` (or by `steps` steps), recording per grid point the
        mean and variance of each observable every `sample_every` steps and at the end.

        Parameters
        ----------
        t_end, steps : float or int
            The time to run to, or the number of steps: exactly one of them.
        sample_every : int, optional
            Steps between samples (default: one sample, at the end).
        observables : list of str, optional
            Variables or OpenCL C expressions of the variables, parameters, t,
            unwrap(periodic variable), displacement(variable); default the
            variables; ``[]`` records nothing.
        histograms : dict, optional
            ``{expression: (bins, low, high)}``: counts in [low, high) over the samples.
        record_paths : int
            Record the variables of the first this-many paths of each grid point.
        progress : None, bool or callable(done, total)
            Completed steps (work runs in slices of about a quarter second).

        Returns
        -------
        RunResult or None
            On rank 0 (every rank with ``gather="all"``) of a communicator; None elsewhere.

        Raises
        ------
        clphys.runtime.Interrupted
            On Ctrl-C within about a second, the ensemble at its last completed step;
            ``exc.partial`` holds the samples so far (None over several ranks).
        """
        return self.run_plan(self.plan_run(t_end, steps=steps, sample_every=sample_every,
                                           observables=observables, histograms=histograms,
                                           record_paths=record_paths), progress)

    def plan_run(self, t_end: float | None = None, *, steps: int | None = None,
                 sample_every: int | None = None, observables: Sequence[str] | None = None,
                 histograms: Mapping | None = None, record_paths: int = 0) -> RunPlan:
        """The :class:`clphys.sde.plan.RunPlan` of ``run(...)`` with these arguments,
        checked with the memory it needs (collective with comm); :meth:`run_plan`
        runs it. Tests and benchmarks may change its steps per kernel launch
        (``RunPlan.with_steps_per_launch``)."""
        self._agree("run", t_end=t_end, steps=steps, sample_every=sample_every,
                    observables=observables, histograms=histograms, record_paths=record_paths)
        return self._collective(self._plan, t_end, steps, sample_every, observables, histograms,
                                record_paths)

    def run_plan(self, plan: RunPlan, progress: bool | Callable | None = None) -> RunResult | None:
        """Run `plan` (made by :meth:`plan_run`); see :meth:`run`."""
        if self._comm is not None:
            mpi.agree(self._comm, "run arguments", steps=plan.n_steps, sample_every=plan.M,
                      observables=plan.obs_names, histograms=repr(plan.hist_spec),
                      record_paths=plan.n_record)
            if self._comm.Get_rank() != 0:
                progress = False
        return self.finish(self._advance(plan, progress))

    def run_local(self, t_end: float | None = None, *, steps: int | None = None,
                  sample_every: int | None = None, observables: Sequence[str] | None = None,
                  histograms: Mapping | None = None, record_paths: int = 0,
                  progress: bool | Callable | None = None) -> LocalRecord:
        """run() on this rank's share only, with no collective: for callers that
        run an unknown number of times per rank (time-bounded slices) and
        combine once at the end with :meth:`finish` (the Josephson sweep)."""
        return self._advance(self._plan(t_end, steps, sample_every, observables, histograms, record_paths),
                             progress)

    @property
    def _by_paths(self) -> bool:
        """The paths of a grid point are split over ranks (their moments are combined at the end)."""
        return self._np != self.n_paths

    def _advance(self, plan: RunPlan, progress) -> LocalRecord:
        """Run `plan` on this rank's share in time-bounded slices: what it recorded."""
        run = self._run_buffers(plan)
        try:
            run_sliced(plan.n_steps, lambda done, n: self._advance_slice(run, done, n), self.device.queue,
                       progress=progress, label="sde", what="time steps", first=self._slice)
        except Interrupted as exc:
            # with several ranks nothing collective may happen here: they stop at different steps
            exc.local = self._recorded(run)
            exc.partial = self.finish(exc.local) if self._comm is None else None
            raise
        return self._recorded(run)

    def _run_buffers(self, plan: RunPlan) -> _RunBuffers:
        """The program and device buffers of one run on this rank's share."""
        n_samples, obs, hist = plan.n_samples, plan.obs, plan.hist
        total_bins = sum(b for _, b in hist)
        dev, q, acc = self.device, self.device.queue, self._acc
        mom = np.dtype([("n", acc), ("mean", acc), ("m2", acc)])
        n_groups = self._groups_per_grid * self._ng
        nrl = min(self._np, max(0, plan.n_record - self.share.p0))
        dummy = zeros(dev, 1, np.uint32)
        slots = max(n_samples, 1) if self._by_paths else 1
        return _RunBuffers(
            plan=plan, prg=self._program(obs, hist, plan.disp), mom=mom, n_groups=n_groups, nrl=nrl,
            slots=slots, start=self._step,
            partials=zeros(dev, slots * n_groups * len(obs) * mom.itemsize, np.uint8) if obs else dummy,
            moments=(cla.empty(q, (max(n_samples, 1), self._ng, len(obs), 2), acc)
                     if obs and not self._by_paths else dummy),
            hist_dev=zeros(dev, max(total_bins * self._ng, 1), np.uint32),
            hist_rng=cla.to_device(q, np.array(plan.hist_range or [0.0], dtype=self._real)),
            rec=(cla.empty(q, (n_samples, self._ng, nrl, len(self.model.variables)), self._real)
                 if nrl and n_samples else dummy),
            scalars=[self._real.type(self._values[p]) for p in self.model.parameters
                     if p not in self._grid_params()],
            hist_total=np.zeros(total_bins * self._ng, dtype=np.uint64),
            flush_every=max(1, (2**32 - 1) // self._np),     # samples before uint32 bins could wrap
            key=seed_key(self.seed), noise_sources=len(self.model.noise_sources),
            moments_wg=_wg_size(dev.facts, 64))

    def _launch(self, run: _RunBuffers, k: int, slot: int) -> None:
        """k steps in one launch; slot >= 0: record sample `slot` at its end."""
        q, obs, by_paths = self.device.queue, run.plan.obs, self._by_paths
        S = self._step
        if not self._t_valid or S % TIME_RESYNC == 0:
            cl.enqueue_copy(q, self._t[self._tcur].data, self._exact_time(S))
            self._t_valid = True
        observe = slot >= 0
        pbase = max(slot, 0) * run.n_groups * len(obs) if by_paths else 0
        k0, k1 = run.key
        ns = run.noise_sources
        sh = self.share
        run.prg.sde_advance(q, (run.n_groups * self.work_group_size,), (self.work_group_size,),
                            self._state.data, self._laps.data, self._origin.data,
                            self._xs.data, self._spare.data, self._gpar.data,
                            self._t[self._tcur].data, self._t[1 - self._tcur].data, self._period.data,
                            np.uint32(self._np), np.uint32(self._ng),
                            np.uint32(self._groups_per_grid), self._real.type(self.dt),
                            np.uint32(k), np.uint64(S * ns), np.uint32(k0), np.uint32(k1),
                            *run.scalars, np.uint64(sh.g0), np.uint64(sh.p0), np.uint64(self.n_paths),
                            np.int32(observe), run.partials.data, np.uint64(pbase), run.hist_dev.data,
                            run.hist_rng.data, run.rec.data, np.uint32(run.nrl), np.uint32(max(slot, 0)))
        self._tcur ^= 1
        self._step += k
        if observe and obs and not by_paths:
            wgf = run.moments_wg
            run.prg.sde_moments(q, (self._ng * len(obs) * wgf,), (wgf,), run.partials.data,
                                np.uint32(self._groups_per_grid), np.uint32(len(obs)),
                                np.uint32(self._ng), np.uint32(slot), run.moments.data)
        if observe and run.plan.hist:
            run.pending_hist += 1
            if run.pending_hist == run.flush_every:
                self._flush_hist(run)

    def _flush_hist(self, run: _RunBuffers) -> None:
        """Add the device's uint32 histogram counts to the host's, and zero them."""
        run.hist_total += run.hist_dev.get().astype(np.uint64)
        cl.enqueue_copy(self.device.queue, run.hist_dev.data, np.zeros(run.hist_dev.shape, np.uint32))
        run.pending_hist = 0

    def _advance_slice(self, run: _RunBuffers, done: int, n: int) -> None:
        """Steps [done, done + n) of the run, in launches that end at the
        samples, at the time resyncs and after at most spl steps."""
        plan = run.plan
        M, n_steps, n_samples, recording = plan.M, plan.n_steps, plan.n_samples, plan.n_samples > 0
        self._slice = max(self._slice, n) if done else n
        s, end = done, done + n
        while s < end:
            k = min(end - s, plan.spl, TIME_RESYNC - self._step % TIME_RESYNC)
            if recording:
                k = min(k, M - s % M)
            e = s + k
            slot = -1
            if recording and (e % M == 0 or e == n_steps):
                slot = e // M - 1 if e % M == 0 else n_samples - 1
            self._launch(run, k, slot)
            s = e

    def _recorded(self, run: _RunBuffers) -> LocalRecord:
        """What this rank recorded so far."""
        plan = run.plan
        M, n_steps, obs = plan.M, plan.n_steps, plan.obs
        k = plan.n_samples if self._step - run.start == n_steps else (self._step - run.start) // M
        marks = np.minimum(np.arange(1, k + 1, dtype=np.int64) * M, n_steps)
        out = LocalRecord(plan, (run.start + marks) * self.dt, run.prg)
        if obs and k:
            if self._by_paths:
                host = np.empty((run.slots, self._ng, self._groups_per_grid, len(obs)), run.mom)
                cl.enqueue_copy(self.device.queue, host, run.partials.data)
                out.partials = host[:k]
            else:
                out.moments = run.moments.get()[:k]
        if plan.hist:
            self._flush_hist(run)
            off = 0
            for _e, bins in plan.hist:
                block = run.hist_total[off * self._ng:(off + bins) * self._ng]
                out.hists.append(block.reshape(self._ng, bins))
                off += bins
        if run.nrl and k:
            out.paths = run.rec.get()[:k]
        return out

