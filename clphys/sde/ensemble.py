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
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .. import _validate as check
from ..progress import Progress
from ..rng import chained_seeds, seed_key
from ..runtime import resolve_device, zeros
from ..runtime import work_group_size as _wg_size
from . import expr as _expr
from .model import Model

__all__ = ["Ensemble", "EnsembleState", "RunResult", "SCHEMES", "RNGS", "DTYPES"]

SCHEMES = ("srk2", "euler")
RNGS = ("philox", "xorshift32")
DTYPES = ("float32", "float64")
MAX_HIST_BINS = 4096


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def check_memory(dev, buffers: dict, what: str):
    """ValueError if the buffers ({name: bytes}) do not fit the device: one
    above the largest allocation, or all together above global memory."""
    total = sum(buffers.values())
    big = max(buffers, key=buffers.get)
    f = dev.facts
    if buffers[big] > f.max_alloc or total > f.global_mem:
        parts = ", ".join(f"{k} {_gib(v)}" for k, v in buffers.items() if v > 2**20)
        raise ValueError(f"{what} is too large for {dev.name}: it needs {_gib(total)} ({parts}); "
                         f"the device has {_gib(f.global_mem)} of global memory and allocates at most "
                         f"{_gib(f.max_alloc)} at once. Use fewer paths or grid points.")


def _parse_params(model: Model, params):
    """-> (axes [(names, arrays)], grid shape, per-parameter expanded values
    {name: float or (n_grid,) array}, normalized params)."""
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a mapping {{parameter: value}}, got {type(params).__name__}")
    scalars, axes, seen = {}, [], []
    for key, value in params.items():
        names = key if isinstance(key, tuple) else (key,)
        for n in names:
            if n not in model.parameters:
                raise ValueError(f"params: {n!r} is not a parameter of the model; its parameters are "
                                 f"{', '.join(model.parameters) or '(none)'}")
            if n in seen:
                raise ValueError(f"params: {n!r} is given twice")
            seen.append(n)
        if isinstance(key, tuple):
            # zipped sweep: several parameters along one grid axis
            if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != len(names):
                raise ValueError(f"params[{key!r}] must be a sequence of {len(names)} equal-length arrays")
            arrs = [_validate_values(f"params[{n!r}]", v, zipped=True) for n, v in zip(names, value)]
            lens = {n: a.size for n, a in zip(names, arrs)}
            if len(set(lens.values())) != 1:
                raise ValueError("params: mismatched parameter array lengths on one axis: "
                                 + ", ".join(f"{n} has {k}" for n, k in lens.items()))
            axes.append((names, arrs))
        else:
            arr = _validate_values(f"params[{key!r}]", value)
            if arr.ndim == 0:
                scalars[key] = float(arr)
            else:
                axes.append(((key,), [arr]))
    missing = [p for p in model.parameters if p not in seen]
    if missing:
        raise ValueError(f"params: no value for {', '.join(map(repr, missing))} "
                         f"(the model's parameters are {', '.join(model.parameters)})")
    shape = tuple(arrs[0].size for _, arrs in axes)
    n_grid = int(np.prod(shape, dtype=np.int64)) if shape else 1
    values = dict(scalars)
    if axes:
        mesh = np.meshgrid(*[np.arange(k) for k in shape], indexing="ij")
        for ax, (names, arrs) in enumerate(axes):
            for n, a in zip(names, arrs):
                values[n] = a[mesh[ax].ravel()]
    return axes, shape, n_grid, values


def _validate_values(name, value, zipped=False):
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a real number or a 1-D array of them, got {value!r}")
    arr = check.finite_array(name, value, dtype=None if not np.isscalar(value) else float)
    if arr.dtype.kind == "b":
        raise TypeError(f"{name} must be real numbers, got booleans")
    arr = arr.astype(float)
    if arr.ndim > 1 or (zipped and arr.ndim != 1):
        raise ValueError(f"{name} must be a scalar or a 1-D array (a sweep), got shape {arr.shape}")
    if arr.ndim == 1 and arr.size == 0:
        raise ValueError(f"{name} is an empty array")
    return arr


@dataclass(frozen=True)
class RunResult:
    """What :meth:`Ensemble.run` recorded.

    times: (n_samples,) times of the samples. mean[name], var[name]:
    (n_samples, *grid_shape) mean and unbiased variance over the n_paths
    realizations of each grid point, for every observable `name`.
    hist[name]: (*grid_shape, bins) counts accumulated over every sample of
    the run, with hist_edges[name] (bins + 1,). paths[variable]:
    (n_samples, *grid_shape, record_paths) values of the first realizations
    (periodic variables unwrapped).
    """
    times: np.ndarray
    mean: dict
    var: dict
    n_paths: int
    grid_shape: tuple
    hist: dict = field(default_factory=dict)
    hist_edges: dict = field(default_factory=dict)
    paths: dict = field(default_factory=dict)

    def error(self, name) -> np.ndarray:
        """Standard error of mean[name]: sqrt(var / n_paths)."""
        return np.sqrt(self.var[name] / self.n_paths)


@dataclass(frozen=True)
class EnsembleState:
    """A checkpoint: :meth:`Ensemble.from_state` resumes it bit for bit."""
    model: Model
    n_paths: int
    params: dict
    dt: float
    scheme: str
    rng: str
    seed: int
    dtype: str
    fast_math: bool
    step: int
    values: np.ndarray          # (n_vars, n_total)
    laps: np.ndarray            # (n_periodic, n_total) int32
    xs_state: np.ndarray        # xorshift32 states (or empty)
    xs_spare: np.ndarray        # xorshift32 spare Gaussians (or empty)


class Ensemble:
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
        missing variables start at 0.
    work_group_size
        paths per work group (a power of two); default from the device.
    """

    def __init__(self, model, n_paths, params, dt, *, scheme="srk2", rng="philox", seed=0,
                 dtype="float32", fast_math=False, initial=None, work_group_size=None,
                 device=None):
        if not isinstance(model, Model):
            raise TypeError(f"model must be a clphys.sde.Model, got {type(model).__name__}")
        self.model = model
        self.n_paths = check.integer("n_paths", n_paths, 1)
        self.axes, self.grid_shape, self.n_grid, self._values = _parse_params(model, params)
        self._params = dict(params)
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
        init = self._check_initial(initial)
        self.device = dev = resolve_device(device)
        if self.dtype == "float64" and not dev.facts.fp64:
            raise ValueError(f"dtype='float64' needs fp64, which {dev.name} lacks; use 'float32'")
        if work_group_size is None:
            wg = work_group_size_default(dev.facts, self.n_paths)
        else:
            wg = check.integer("work_group_size", work_group_size, 1, dev.facts.max_work_group)
            if wg & (wg - 1):
                raise ValueError(f"work_group_size must be a power of two, got {wg}")
        self.work_group_size = wg
        self._groups_per_grid = -(-self.n_paths // wg)
        self._real = np.dtype(self.dtype)
        self._acc = np.dtype(np.float64 if dev.facts.fp64 else np.float32)
        nv, nper = len(model.variables), len(model.periodic)
        self._nper = nper
        check_memory(dev, {"state": nv * self.n_total * self._real.itemsize,
                           "laps": nper * self.n_total * 4,
                           "rng": 8 * self.n_total if self.rng == "xorshift32" else 0},
                     f"an ensemble of {self.n_paths} paths x {self.n_grid} grid points")
        self._step = 0
        self._alloc()
        self._set_initial(init)

    # ------------------------------------------------------------ set-up
    @classmethod
    def from_state(cls, state, *, work_group_size=None, device=None):
        """An ensemble continuing exactly where `state` (from :meth:`state`) was."""
        if not isinstance(state, EnsembleState):
            raise TypeError(f"state must be an EnsembleState, got {type(state).__name__}")
        ens = cls(state.model, state.n_paths, state.params, state.dt, scheme=state.scheme,
                  rng=state.rng, seed=state.seed, dtype=state.dtype, fast_math=state.fast_math,
                  initial={}, work_group_size=work_group_size, device=device)
        want = (len(state.model.variables), ens.n_total)
        if state.values.shape != want or state.laps.shape != (ens._nper, ens.n_total):
            raise ValueError(f"state arrays have shape {state.values.shape}, expected {want}")
        q = ens.device.queue
        cl.enqueue_copy(q, ens._state.data, np.ascontiguousarray(state.values, ens._real))
        if ens._nper:
            cl.enqueue_copy(q, ens._laps.data, np.ascontiguousarray(state.laps, np.int32))
        if ens.rng == "xorshift32":
            cl.enqueue_copy(q, ens._xs.data, np.ascontiguousarray(state.xs_state, np.uint32))
            cl.enqueue_copy(q, ens._spare.data, np.ascontiguousarray(state.xs_spare, np.float32))
        ens._step = int(state.step)
        q.finish()
        return ens

    def state(self) -> EnsembleState:
        """A checkpoint of everything that determines the future of the run."""
        xs = self._xs.get() if self.rng == "xorshift32" else np.zeros(0, np.uint32)
        sp = self._spare.get() if self.rng == "xorshift32" else np.zeros(0, np.float32)
        return EnsembleState(self.model, self.n_paths, dict(self._params), self.dt, self.scheme,
                             self.rng, self.seed, self.dtype, self.fast_math, self._step,
                             self._state.get(), self._laps.get() if self._nper else
                             np.zeros((0, self.n_total), np.int32), xs, sp)

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
        self._state = zeros(self.device, (nv, self.n_total), self._real)
        self._laps = zeros(self.device, (max(self._nper, 1), self.n_total if self._nper else 1), np.int32)
        if self.rng == "xorshift32":
            self._xs = cla.to_device(q, chained_seeds(self.n_total, self.seed))
            self._spare = zeros(self.device, self.n_total, np.float32)
        else:
            self._xs = zeros(self.device, 1, np.uint32)
            self._spare = zeros(self.device, 1, np.float32)
        gp = self._grid_params()
        table = np.array([np.broadcast_to(self._values[p], (self.n_grid,)) for p in gp],
                         dtype=self._real).reshape(len(gp), self.n_grid)
        self._gpar = cla.to_device(q, table if gp else np.zeros(1, self._real))

    def _grid_params(self):
        return [p for p in self.model.parameters if not np.isscalar(self._values[p])]

    def _set_initial(self, init):
        q = self.device.queue
        nv = len(self.model.variables)
        if any(not isinstance(val, tuple) for val in init.values()):
            host = np.zeros((nv, self.n_total), dtype=self._real)
            for k, v in enumerate(self.model.variables):
                if v in init and not isinstance(init[v], tuple):
                    host[k] = np.asarray(init[v], dtype=self._real).reshape(self.n_total)
            cl.enqueue_copy(q, self._state.data, host)
        for k, v in enumerate(self.model.variables):
            val = init.get(v)
            if isinstance(val, tuple):
                prg = self._program((), ())
                k0, k1 = seed_key(self.seed)
                prg.sde_init_uniform(q, (self.n_total,), None, self._state.data,
                                     np.uint64(k * self.n_total), np.uint64(self.n_total),
                                     self._real.type(val[1]), self._real.type(val[2]), np.uint32(k),
                                     np.uint32(k0), np.uint32(k1))
        q.finish()

    def _program(self, obs, hist):
        real = "double" if self.dtype == "float64" else "float"
        options = [] if real == "double" else ["-cl-single-precision-constant"]
        if self.fast_math:
            options.append("-cl-fast-relaxed-math")
        gp = self._grid_params()
        params = dict(real=real, model=self.model.render_spec(real), gparams=gp,
                      sparams=[p for p in self.model.parameters if p not in gp], scheme=self.scheme,
                      rng=self.rng, wg=self.work_group_size, wgf=_wg_size(self.device.facts, 64),
                      obs=list(obs), hist=list(hist))
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
    def grid(self) -> dict:
        """{parameter: array of shape grid_shape} for every parameter."""
        return {p: np.broadcast_to(self._values[p], (self.n_grid,)).reshape(self.grid_shape)
                for p in self.model.parameters}

    def values(self, unwrap=False) -> dict:
        """{variable: array (*grid_shape, n_paths)} of the current state;
        with unwrap=True periodic variables are float64 x + laps * period."""
        host = self._state.get()
        laps = self._laps.get()
        out = {}
        for k, v in enumerate(self.model.variables):
            a = host[k]
            if unwrap and v in self.model.periodic:
                j = list(self.model.periodic).index(v)
                a = a.astype(np.float64) + laps[j].astype(np.float64) * self.model.periodic[v]
            out[v] = a.reshape(self.grid_shape + (self.n_paths,))
        return out

    def reset_laps(self):
        """Start counting the laps of periodic variables from zero, so that
        unwrap(x) measures the displacement from now on."""
        if self._nper:
            cl.enqueue_copy(self.device.queue, self._laps.data, np.zeros(self._laps.shape, np.int32))
            self.device.queue.finish()

    # ------------------------------------------------------------ running
    def run(self, t_end=None, *, steps=None, sample_every=None, observables=None, histograms=None,
            record_paths=0, steps_per_launch=None, progress=None) -> RunResult:
        """Advance to time `t_end` (or by `steps` time steps) and record, every
        `sample_every` steps (and at the end), per grid point the mean and
        variance of each observable.

        observables
            variable names or expressions (OpenCL C, with the variables,
            parameters, t and unwrap(periodic variable)); default: the
            variables. ``[]`` records nothing.
        histograms
            ``{expression: (bins, low, high)}``: counts of the values in
            [low, high), accumulated over the samples.
        record_paths
            record the variables of the first this-many realizations of each
            grid point at every sample.
        steps_per_launch
            most steps one kernel launch makes (default: sized from the
            ensemble and the device).
        """
        n_steps = self._steps_for(t_end, steps)
        M = n_steps if sample_every is None else check.integer("sample_every", sample_every, 1)
        obs_names, obs, hist_names, hist, hist_range = self._recording(observables, histograms)
        n_record = check.integer("record_paths", record_paths, 0, self.n_paths)
        total_bins = sum(b for _, b in hist)
        wg = self.work_group_size
        local = (wg * 3 * self._acc.itemsize if obs else 0) + 4 * total_bins
        if local > self.device.facts.local_mem:
            raise ValueError(f"histograms need {4 * total_bins} bytes of local memory per work group; "
                             f"{self.device.name} has {self.device.facts.local_mem}: use fewer bins")
        if steps_per_launch is None:
            spl = max(1, (2**28 if self.device.facts.is_gpu else 2**24) // self.n_total)
        else:
            spl = check.integer("steps_per_launch", steps_per_launch, 1)

        # samples (in steps from now): every M steps and at the end, if anything is recorded
        marks = []
        if obs or hist or n_record:
            marks = list(range(M, n_steps + 1, M))
            if not marks or marks[-1] != n_steps:
                marks.append(n_steps)
        launches, done = [], 0          # (steps, sample slot or -1)
        for stop in sorted(set(marks) | {n_steps}):
            while done < stop:
                k = min(spl, stop - done)
                done += k
                launches.append((k, marks.index(done) if done == stop and done in marks else -1))
        n_samples = len(marks)

        q, dev = self.device.queue, self.device
        acc = self._acc
        mom = np.dtype([("n", acc), ("mean", acc), ("m2", acc)])
        n_groups = self._groups_per_grid * self.n_grid
        check_memory(dev, {"state": self._state.nbytes,
                           "partials": n_groups * max(len(obs), 1) * mom.itemsize,
                           "moments": n_samples * self.n_grid * max(len(obs), 1) * 2 * acc.itemsize,
                           "histograms": total_bins * self.n_grid * 4,
                           "paths": n_samples * self.n_grid * n_record * len(self.model.variables)
                           * self._real.itemsize,
                           "times": len(launches) * 2 * self.n_grid * self._real.itemsize},
                     f"this run ({n_samples} samples)")
        prg = self._program(obs, hist)
        dummy = zeros(self.device, 1, np.uint32)
        partials = zeros(self.device, n_groups * len(obs) * mom.itemsize, np.uint8) if obs else dummy
        moments = cla.empty(q, (max(n_samples, 1), self.n_grid, len(obs), 2), acc) if obs else dummy
        hist_dev = zeros(self.device, max(total_bins * self.n_grid, 1), np.uint32)
        hist_rng = cla.to_device(q, np.array(hist_range or [0.0], dtype=self._real))
        rec = (cla.empty(q, (n_samples, self.n_grid, n_record, len(self.model.variables)), self._real)
               if n_record and n_samples else dummy)
        # time at each launch start, modulo the drive period, computed in float64
        starts = self._step + np.cumsum([0] + [k for k, _ in launches[:-1]])
        t0 = np.broadcast_to(starts[:, None] * self.dt, (len(starts), self.n_grid))
        if self._periods is not None:
            tinfo = np.stack([np.mod(t0, self._periods[None, :]),
                              np.broadcast_to(self._periods, t0.shape)], axis=1)
        else:
            tinfo = np.stack([t0, np.zeros_like(t0)], axis=1)
        tinfo_dev = cla.to_device(q, np.ascontiguousarray(tinfo, dtype=self._real))
        k0, k1 = seed_key(self.seed)
        ns = len(self.model.noise_sources)
        scal = [self._real.type(self._values[p]) for p in self.model.parameters if p not in self._grid_params()]
        hist_total = np.zeros(total_bins * self.n_grid, dtype=np.uint64)
        flush_every = max(1, (2**32 - 1) // self.n_paths)
        since_flush = 0
        gsize = (n_groups * wg,)
        with Progress(n_steps, progress, label="sde") as bar:
            for li, (k, slot) in enumerate(launches):
                observe = slot >= 0
                prg.sde_advance(q, gsize, (wg,), self._state.data, self._laps.data, self._xs.data,
                                self._spare.data, self._gpar.data, tinfo_dev.data, np.uint32(li),
                                np.uint32(self.n_paths), np.uint32(self.n_grid),
                                np.uint32(self._groups_per_grid), self._real.type(self.dt),
                                np.uint32(k), np.uint64(self._step * ns), np.uint32(k0), np.uint32(k1),
                                *scal, np.int32(observe), partials.data, hist_dev.data, hist_rng.data,
                                rec.data, np.uint32(n_record), np.uint32(max(slot, 0)))
                self._step += k
                if observe and obs:
                    wgf = _wg_size(dev.facts, 64)
                    prg.sde_moments(q, (self.n_grid * len(obs) * wgf,), (wgf,), partials.data,
                                    np.uint32(self._groups_per_grid), np.uint32(len(obs)),
                                    np.uint32(self.n_grid), np.uint32(slot), moments.data)
                if observe and hist:
                    since_flush += 1
                    if since_flush == flush_every:
                        hist_total += hist_dev.get().astype(np.uint64)
                        cl.enqueue_copy(q, hist_dev.data, np.zeros(hist_dev.shape, np.uint32))
                        since_flush = 0
                bar.update(k)
        q.finish()
        times = (self._step - n_steps + np.array(marks, dtype=np.int64)) * self.dt
        shp = (n_samples,) + self.grid_shape
        mean, var = {}, {}
        if obs and n_samples:
            m = moments.get()
            for j, name in enumerate(obs_names):
                mean[name] = m[:, :, j, 0].astype(np.float64).reshape(shp)
                var[name] = m[:, :, j, 1].astype(np.float64).reshape(shp)
        hists, edges = {}, {}
        if hist:
            hist_total += hist_dev.get().astype(np.uint64)
            off = 0
            for name, (_e, bins), j in zip(hist_names, hist, range(len(hist))):
                block = hist_total[off * self.n_grid:(off + bins) * self.n_grid]
                hists[name] = block.reshape(self.grid_shape + (bins,))
                edges[name] = np.linspace(hist_range[2 * j], hist_range[2 * j + 1], bins + 1)
                off += bins
        paths = {}
        if n_record and n_samples:
            r = rec.get()
            for j, v in enumerate(self.model.variables):
                paths[v] = r[..., j].astype(np.float64).reshape(shp + (n_record,))
        return RunResult(times, mean, var, self.n_paths, self.grid_shape, hists, edges, paths)

    def _recording(self, observables, histograms):
        """Checked and rendered observables and histograms of a run."""
        obs_names = list(self.model.variables) if observables is None else observables
        if isinstance(obs_names, str) or not hasattr(obs_names, "__iter__"):
            raise TypeError(f"observables must be a list of expressions, got {observables!r}")
        obs_names = list(obs_names)
        real = "double" if self.dtype == "float64" else "float"
        rename = {("unwrap", v): f"sde_uw_{self.model.variables.index(v)}" for v in self.model.periodic}
        obs = [_expr.render(self.model.check_observable(o), real, rename) for o in obs_names]
        histograms = {} if histograms is None else histograms
        if not isinstance(histograms, Mapping):
            raise TypeError("histograms must be a mapping {expression: (bins, low, high)}")
        hist, hist_range = [], []
        for h, spec in histograms.items():
            if not (isinstance(spec, (tuple, list)) and len(spec) == 3):
                raise ValueError(f"histograms[{h!r}] must be (bins, low, high), got {spec!r}")
            bins = check.integer(f"histograms[{h!r}] bins", spec[0], 1, MAX_HIST_BINS)
            lo = check.real(f"histograms[{h!r}] low", spec[1])
            hi = check.real(f"histograms[{h!r}] high", spec[2])
            if hi <= lo:
                raise ValueError(f"histograms[{h!r}]: low must be < high, got {lo}, {hi}")
            hist.append((_expr.render(self.model.check_observable(h), real, rename), bins))
            hist_range += [lo, hi]
        return obs_names, obs, list(histograms), hist, hist_range

    def _steps_for(self, t_end, steps):
        if (t_end is None) == (steps is None):
            raise ValueError("give exactly one of t_end (the time to run to) and steps")
        if steps is not None:
            return check.integer("steps", steps, 1)
        t_end = check.real("t_end", t_end)
        x = (t_end - self.t) / self.dt
        n = round(x) if abs(x - round(x)) <= 1e-9 * max(1.0, abs(x)) else math.ceil(x)
        if n < 1:
            raise ValueError(f"t_end must be later than the current time t = {self.t} by at least "
                             f"one step dt = {self.dt}, got {t_end}")
        return int(n)


def work_group_size_default(facts, n_paths: int) -> int:
    """256 paths per work group, fewer (a power of two) for small ensembles."""
    return _wg_size(facts, min(256, _next_pow2(n_paths)))
