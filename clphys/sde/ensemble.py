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
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .. import _validate as check
from ..rng import chained_seeds, seed_key
from ..errors import DeviceError
from ..runtime import fp64_missing, mpi, resolve_device, zeros
from ..runtime import work_group_size as _wg_size
from ..runtime import checkpoint as ckpt
from ..runtime.checkpoint import CheckpointError, check_arrays, load_checkpoint, save_checkpoint
from ..runtime.files import check_output_path
from ..runtime.longrun import Interrupted, run_sliced
from ..runtime.memory import check_memory
from . import expr as _expr
from .model import Model

__all__ = ["Ensemble", "EnsembleState", "RunResult", "SCHEMES", "RNGS", "DTYPES", "TIME_RESYNC",
           "check_fits", "Share", "shares", "GATHERS"]

SCHEMES = ("srk2", "euler")
RNGS = ("philox", "xorshift32")
DTYPES = ("float32", "float64")
MAX_HIST_BINS = 4096
# The kernels carry t from launch to launch in real_t; at absolute steps that are
# multiples of this the host sets it from float64 (t mod the drive period), so
# float32 rounding cannot accumulate and results do not depend on how a run is
# split into launches, slices or resumed runs.
TIME_RESYNC = 16384
CHECKPOINT_KIND = "sde-ensemble"
GATHERS = ("root", "all")        # where a distributed ensemble's results end up: rank 0, every rank


@dataclass(frozen=True)
class Share:
    """One rank's part of a distributed ensemble: grid points g0 .. g0 + n_grid - 1
    and, of each, paths p0 .. p0 + n_paths - 1 (p0 a multiple of the work-group size)."""
    g0: int
    n_grid: int
    p0: int
    n_paths: int


def shares(n_grid: int, n_paths: int, wg: int, size: int) -> list:
    """The Share of every rank of `size`: whole grid points where that balances
    the work as well as splitting the paths of every point (then nothing is
    combined across ranks before the end), else the paths of every grid point
    in whole work groups (whose partial moments are combined at the end, in the
    order one device combines them). ValueError if some rank would get nothing."""
    from ..runtime.mpi import split
    if size == 1:
        return [Share(0, n_grid, 0, n_paths)]
    groups = -(-n_paths // wg)
    by_grid = [Share(*split(n_grid, size, r), 0, n_paths) for r in range(size)]
    grid_load = max(s.n_grid for s in by_grid) * n_paths
    if groups >= size:
        by_paths = []
        for r in range(size):
            j0, nj = split(groups, size, r)
            by_paths.append(Share(0, n_grid, j0 * wg, min(n_paths, (j0 + nj) * wg) - j0 * wg))
        if n_grid < size or max(s.n_paths for s in by_paths) * n_grid < 0.9 * grid_load:
            return by_paths
    elif n_grid < size:
        small = wg
        while small > 1 and -(-n_paths // small) < size:
            small //= 2
        fix = f"a work_group_size of at most {small} (where the call takes one), " if small < wg else ""
        raise ValueError(f"an ensemble of {n_grid} grid point{'s' * (n_grid > 1)} x {n_paths} paths "
                         f"({groups} work group{'s' * (groups > 1)} of {wg} per point) cannot be split "
                         f"over {size} MPI ranks: use at least {(size - 1) * wg + 1} paths, {fix}"
                         f"or fewer ranks")
    return by_grid


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _parse_params(model: Model, params):
    """-> (axes [(names, arrays)], grid shape, per-parameter expanded values
    {name: float or (n_grid,) array}, normalized params)."""
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a mapping {{parameter: value}}, got {type(params).__name__}")
    scalars, axes, seen, normal = {}, [], [], {}
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
            normal[key] = tuple(arrs)
        else:
            arr = _validate_values(f"params[{key!r}]", value)
            if arr.ndim == 0:
                scalars[key] = normal[key] = float(arr)
            else:
                axes.append(((key,), [arr]))
                normal[key] = arr
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
    return normal, shape, n_grid, values


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


def check_fits(name, values, real) -> None:
    """ValueError unless every value survives the cast to the run's real
    type: nothing may become inf (or a positive dt become 0) silently."""
    real = np.dtype(real)
    v = np.abs(np.asarray(values, dtype=np.float64))
    big = v > np.finfo(real).max
    if big.any():
        raise ValueError(f"{name} = {float(np.asarray(values, np.float64)[big].flat[0])!r} does not fit "
                         f"{real.name} (largest {float(np.finfo(real).max):.3g}); use dtype='float64' "
                         "or rescale the model")


def _encode_params(params: dict) -> list:
    """Normalized params as JSON data: [[names], value(s)] in grid-axis order."""
    out = []
    for key, value in params.items():
        if isinstance(key, tuple):
            out.append([list(key), [np.asarray(a).tolist() for a in value]])
        else:
            out.append([[key], value if isinstance(value, float) else np.asarray(value).tolist()])
    return out


def _decode_params(items, where: str) -> dict:
    if not isinstance(items, list):
        raise CheckpointError(f"{where}: field 'params' must be a list, got {type(items).__name__}")
    params = {}
    for item in items:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], list) and item[0]
                and all(isinstance(n, str) for n in item[0])):
            raise CheckpointError(f"{where}: field 'params' has a malformed entry {item!r}")
        names, value = item
        if len(names) == 1:
            params[names[0]] = value
        elif isinstance(value, list):
            params[tuple(names)] = tuple(value)
        else:
            raise CheckpointError(f"{where}: field 'params' has a malformed entry {item!r}")
    return params


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

    @property
    def diverged(self) -> np.ndarray:
        """(*grid_shape,) bool: grid points where a mean or variance of some
        observable, at some sample, is not finite (paths ran off to inf or
        NaN: a smaller dt, or scheme="srk2"). run() warns about them."""
        bad = np.zeros(self.grid_shape, dtype=bool)
        for stats in (self.mean, self.var):
            for values in stats.values():
                bad |= ~np.isfinite(values).all(axis=0)
        return bad


@dataclass(frozen=True, eq=False)
class EnsembleState:
    """A checkpoint of an :class:`Ensemble`: everything that determines the
    rest of its run. :meth:`Ensemble.from_state` resumes it bit for bit;
    :meth:`save` / :meth:`load` store it in a file (npz with a JSON header, no
    pickle).

    The model is stored as its description (:meth:`Model.describe`), the
    parameters normalized (scalars as floats, sweeps as float arrays). Every
    field is checked when the state is made: a state with a negative step, an
    array of another shape or dtype than its ensemble needs (e.g. a truncated
    one) raises at once.
    """
    model_description: dict
    n_paths: int
    params: dict
    dt: float
    scheme: str
    rng: str
    seed: int
    dtype: str
    fast_math: bool
    step: int
    origin_step: int            # the step of the last set_origin (displacement(x) counts from it)
    values: np.ndarray          # (n_vars, n_total) of dtype
    laps: np.ndarray            # (n_periodic, n_total) int32
    origin: np.ndarray          # (n_vars, n_total) of dtype: positions at origin_step
    time: np.ndarray            # (n_grid,) of dtype: the kernels' t (mod the drive period)
    xs_state: np.ndarray        # xorshift32 states (n_total,) uint32, or empty
    xs_spare: np.ndarray        # xorshift32 spare Gaussians (n_total,) float32, or empty

    def __post_init__(self):
        try:
            model = Model.from_description(self.model_description)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"model_description: {exc}") from None
        object.__setattr__(self, "_model", model)
        n_paths = check.integer("n_paths", self.n_paths, 1)
        _normal, _shape, n_grid, values = _parse_params(model, self.params)
        check.real("dt", self.dt, 0.0, strict_min=True)
        check.choice("scheme", self.scheme, SCHEMES)
        check.choice("rng", self.rng, RNGS)
        check.seed(self.seed)
        check.choice("dtype", self.dtype, DTYPES)
        if not isinstance(self.fast_math, bool):
            raise TypeError(f"fast_math must be True or False, got {self.fast_math!r}")
        step = check.integer("step", self.step, 0)
        check.integer("origin_step", self.origin_step, 0, step)
        n_total = n_paths * n_grid
        real, nv, nper = np.dtype(self.dtype), len(model.variables), len(model.periodic)
        n_rng = n_total if self.rng == "xorshift32" else 0
        for name, dtype, shape in (("values", real, (nv, n_total)), ("laps", np.int32, (nper, n_total)),
                                   ("origin", real, (nv, n_total)), ("time", real, (n_grid,)),
                                   ("xs_state", np.uint32, (n_rng,)), ("xs_spare", np.float32, (n_rng,))):
            arr = getattr(self, name)
            if not isinstance(arr, np.ndarray):
                raise TypeError(f"EnsembleState.{name} must be a NumPy array, got {type(arr).__name__}")
            if arr.dtype != np.dtype(dtype) or arr.shape != shape:
                raise ValueError(f"EnsembleState.{name} is {arr.dtype} {arr.shape}; an ensemble of "
                                 f"{n_paths} paths x {n_grid} grid points ({self.dtype}, {self.rng}) "
                                 f"needs {np.dtype(dtype)} {shape}")
        for name in ("values", "origin", "time", "xs_spare"):
            bad = int(np.count_nonzero(~np.isfinite(getattr(self, name))))
            if bad:
                raise ValueError(f"EnsembleState.{name} holds {bad} values that are not finite (NaN or inf)")
        if not self.xs_state.all():
            raise ValueError("EnsembleState.xs_state holds a xorshift32 state of 0, which never leaves 0 "
                             "(the seeding never makes one)")
        self._check_time(model, values, n_grid, step)

    def _check_time(self, model, values, n_grid, step):
        """The kernels' t is step dt (modulo the drive period) up to float
        rounding between two resynchronisations (TIME_RESYNC steps): far
        below 1 % of the period or of t."""
        exact = np.full(n_grid, step * self.dt)
        periods = model.drive_periods(values)
        t = self.time.astype(np.float64)
        if periods is None:
            off = np.abs(t - exact)
            scale = np.maximum(exact, self.dt)
        else:
            periods = np.broadcast_to(np.asarray(periods, float), (n_grid,))
            off = np.mod(t - exact, periods)
            off = np.minimum(off, periods - off)
            scale = periods
        bad = np.nonzero(~(off <= 0.01 * scale))[0]
        if bad.size:
            g = int(bad[0])
            raise ValueError(f"EnsembleState.time is {self.time[g]!r} at grid point {g}, not step x dt = "
                             f"{exact[g]!r}" + ("" if periods is None else f" modulo the drive period "
                                                f"{periods[g]!r}"))

    @property
    def model(self) -> Model:
        """The model, rebuilt from its description."""
        return self._model

    # ---------------------------------------------------------------- files
    def save(self, path) -> None:
        """Write the state to `path` (.npz), atomically."""
        save_checkpoint(path, CHECKPOINT_KIND, *self.checkpoint_parts())

    @classmethod
    def load(cls, path) -> "EnsembleState":
        """The state saved at `path`; :class:`clphys.runtime.checkpoint.CheckpointError`
        (a ValueError) naming whatever is missing, malformed or inconsistent."""
        header, files = load_checkpoint(path, CHECKPOINT_KIND)
        return cls.from_checkpoint_parts(header, files, path)

    def checkpoint_parts(self):
        """(header, arrays) for :func:`clphys.runtime.checkpoint.save_checkpoint`;
        objects that hold an ensemble (e.g. a Josephson run) add their own."""
        header = {"model": self.model_description, "n_paths": self.n_paths,
                  "params": _encode_params(self.params), "dt": self.dt, "scheme": self.scheme,
                  "rng": self.rng, "seed": self.seed, "dtype": self.dtype,
                  "fast_math": self.fast_math, "step": self.step, "origin_step": self.origin_step,
                  "time_resync": TIME_RESYNC, "algorithm": f"sde {self.scheme}", "RNG": self.rng}
        arrays = {"values": self.values, "laps": self.laps, "origin": self.origin, "time": self.time,
                  "xs_state": self.xs_state, "xs_spare": self.xs_spare}
        return header, arrays

    @classmethod
    def from_checkpoint_parts(cls, header: dict, files: dict, path="") -> "EnsembleState":
        """The state in a loaded checkpoint (`files` holding exactly its arrays)."""
        where = f"checkpoint {path!r}"
        dtype = ckpt.field(header, "dtype", str, choices=DTYPES, path=path)
        rng = ckpt.field(header, "rng", str, choices=RNGS, path=path)
        ckpt.field(header, "time_resync", int, choices=(TIME_RESYNC,), path=path)
        real = np.dtype(dtype)
        check_arrays(path, header, files, {
            "values": (real, (None, None)), "laps": (np.int32, (None, None)),
            "origin": (real, (None, None)), "time": (real, (None,)),
            "xs_state": (np.uint32, (None,)), "xs_spare": (np.float32, (None,))})
        model = ckpt.field(header, "model", dict, path=path)
        params = _decode_params(ckpt.field(header, "params", list, path=path), where)
        try:
            return cls(model, ckpt.field(header, "n_paths", int, minimum=1, path=path), params,
                       ckpt.field(header, "dt", float, path=path),
                       ckpt.field(header, "scheme", str, choices=SCHEMES, path=path), rng,
                       ckpt.field(header, "seed", int, minimum=0, path=path), dtype,
                       ckpt.field(header, "fast_math", bool, path=path),
                       ckpt.field(header, "step", int, minimum=0, path=path),
                       ckpt.field(header, "origin_step", int, minimum=0, path=path),
                       *(files[k] for k in ("values", "laps", "origin", "time", "xs_state", "xs_spare")))
        except CheckpointError:
            raise
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"{where}: {exc}") from None


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
        self._params, self.grid_shape, self.n_grid, self._values = _parse_params(model, params)
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
                "params": _encode_params(self._params), "dt": self.dt, "scheme": self.scheme,
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
    @classmethod
    def from_state(cls, state, *, work_group_size=None, device=None, comm=None, gather="root"):
        """An ensemble continuing exactly where `state` (an
        :class:`EnsembleState` from :meth:`state`, or the path of a file
        written by :meth:`save`) was. With `comm` (collective) every rank
        passes the same state (or file) and keeps its share of it: a state
        continues bit for bit on any number of ranks."""
        def read():
            st = EnsembleState.load(state) if isinstance(state, (str, os.PathLike)) else state
            if not isinstance(st, EnsembleState):
                raise TypeError(f"state must be an EnsembleState or a checkpoint file name, "
                                f"got {type(st).__name__}")
            return st
        state = read() if comm is None else mpi.all_ok(comm, read)
        ens = cls(state.model, state.n_paths, state.params, state.dt, scheme=state.scheme,
                  rng=state.rng, seed=state.seed, dtype=state.dtype, fast_math=state.fast_math,
                  initial={}, work_group_size=work_group_size, device=device, comm=comm, gather=gather)
        if comm is not None:
            mpi.agree(comm, "states", step=state.step, origin_step=state.origin_step,
                      values=hashlib.sha1(state.values.tobytes()).hexdigest())
        q = ens.device.queue
        cl.enqueue_copy(q, ens._state.data, ens._local_of(state.values))
        cl.enqueue_copy(q, ens._origin.data, ens._local_of(state.origin))
        if ens._nper:
            cl.enqueue_copy(q, ens._laps.data, ens._local_of(state.laps))
        if ens.rng == "xorshift32":
            cl.enqueue_copy(q, ens._xs.data, ens._local_of(state.xs_state[None])[0])
            cl.enqueue_copy(q, ens._spare.data, ens._local_of(state.xs_spare[None])[0])
        g0 = ens.share.g0
        cl.enqueue_copy(q, ens._t[ens._tcur].data, np.ascontiguousarray(state.time[g0:g0 + ens._ng]))
        ens._t_valid = True
        ens._step, ens._origin_step = state.step, state.origin_step
        q.finish()
        return ens

    @classmethod
    def load(cls, path, *, model=None, work_group_size=None, device=None, comm=None, gather="root"):
        """The ensemble saved by :meth:`save` at `path`. With `model`, the
        file must hold that model (a CheckpointError says which it holds).
        With `comm` (collective) every rank reads the file (a shared file
        system) and keeps its share, on any number of ranks."""
        def read():
            st = EnsembleState.load(path)
            if model is not None and st.model != model:
                raise CheckpointError(f"checkpoint {os.fspath(path)!r} holds the model {st.model!r}, "
                                      f"not {model!r}")
            return st
        state = read() if comm is None else mpi.all_ok(comm, read)
        return cls.from_state(state, work_group_size=work_group_size, device=device, comm=comm,
                              gather=gather)

    def state(self) -> EnsembleState | None:
        """A checkpoint of everything that determines the future of the run.
        With a communicator: collective; the whole ensemble's state on rank 0
        (every rank with gather='all'), None elsewhere."""
        self._agree("state")
        xs = self._xs.get() if self.rng == "xorshift32" else np.zeros(0, np.uint32)
        sp = self._spare.get() if self.rng == "xorshift32" else np.zeros(0, np.float32)
        laps = self._laps.get() if self._nper else np.zeros((0, self._nl), np.int32)
        time = self._t[self._tcur].get() if self._t_valid else self._exact_time(self._step)
        values, origin = self._state.get(), self._origin.get()
        if self._comm is not None:
            whole = self._whole([values, laps, origin, xs[None] if xs.size else xs.reshape(0, 0),
                                 sp[None] if sp.size else sp.reshape(0, 0)], time)
            if whole is None:
                return None
            values, laps, origin, xs, sp, time = whole
            xs, sp = xs.reshape(-1), sp.reshape(-1)
        return EnsembleState(self.model.describe(), self.n_paths, dict(self._params), self.dt,
                             self.scheme, self.rng, self.seed, self.dtype, self.fast_math, self._step,
                             self._origin_step, values, laps, origin, time, xs, sp)

    def _whole(self, arrays, time):
        """Every rank's (lead, local paths) arrays as (lead, n_total) arrays of the
        whole ensemble, and the (n_grid,) times (collective: on rank 0, on every
        rank with gather='all', else None)."""
        got = self._comm.gather((arrays, time), root=0)
        out = None
        if got is not None:
            out = []
            for j, a in enumerate(arrays):
                grid = np.zeros(a.shape[:-1] + (self.n_grid, self.n_paths), a.dtype)
                for sh, (parts, _t) in zip(self._shares, got):
                    part = parts[j].reshape(a.shape[:-1] + (sh.n_grid, sh.n_paths))
                    grid[..., sh.g0:sh.g0 + sh.n_grid, sh.p0:sh.p0 + sh.n_paths] = part
                out.append(grid.reshape(a.shape[:-1] + (self.n_total,)) if a.shape[-1:] != (0,)
                           else a)
            out.append(got[0][1] if self._by_paths else np.concatenate([t for _a, t in got]))
        return self._comm.bcast(out, root=0) if self._gather == "all" else out

    def save(self, path) -> None:
        """Write :meth:`state` to `path` (.npz, atomically); :meth:`load` or
        :meth:`from_state` resume it bit for bit. With a communicator:
        collective, rank 0 writes the whole ensemble's state."""
        self._agree("save", path=os.fspath(path) if isinstance(path, (str, os.PathLike))
                    else repr(path))
        self._collective(check_output_path, path, "checkpoint", (".npz",))
        state = self.state()
        rank = 0 if self._comm is None else self._comm.Get_rank()
        self._collective(lambda: state.save(path) if rank == 0 else None)

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

    def values(self, unwrap=False) -> dict | None:
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

    def set_origin(self):
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

    def reset_laps(self):
        """Same as :meth:`set_origin` (its older name)."""
        self.set_origin()

    # ------------------------------------------------------------ running
    def run(self, t_end=None, *, steps=None, sample_every=None, observables=None, histograms=None,
            record_paths=0, steps_per_launch=None, progress=None) -> RunResult:
        """Advance to time `t_end` (or by `steps` time steps) and record, every
        `sample_every` steps (and at the end), per grid point the mean and
        variance of each observable.

        observables
            variable names or expressions (OpenCL C, with the variables,
            parameters, t, unwrap(periodic variable) and
            displacement(variable)); default: the variables. ``[]`` records
            nothing.
        histograms
            ``{expression: (bins, low, high)}``: counts of the values in
            [low, high), accumulated over the samples.
        record_paths
            record the variables of the first this-many realizations of each
            grid point at every sample.
        steps_per_launch
            most steps one kernel launch makes (default: sized from the
            ensemble and the device). Results do not depend on it.
        progress
            None, True/False or a callable(done, total) counting completed
            steps.

        The work is queued in slices of about a quarter second with the
        queue finished between them, so progress counts completed steps and
        Ctrl-C stops the run within about a second: it raises
        :class:`clphys.runtime.Interrupted` with the ensemble at the last
        completed step (consistent: it can be saved and continued) and the
        samples recorded so far as ``exc.partial`` (a RunResult).

        With a communicator (``Ensemble(..., comm=)``) run is collective:
        every rank calls it with the same arguments, advances its share,
        and the statistics are combined at the end, bit for bit those of
        one device (of the same kind). The RunResult is returned on rank 0,
        and on every rank with ``gather="all"``; other ranks get None.
        Progress is shown on rank 0 only. On Ctrl-C every rank raises
        Interrupted with ``exc.partial = None`` (the ranks may have stopped
        at different steps).
        """
        self._agree("run", t_end=t_end, steps=steps, sample_every=sample_every,
                    observables=observables, histograms=histograms, record_paths=record_paths)
        plan = self._collective(self._plan, t_end, steps, sample_every, observables, histograms,
                                record_paths, steps_per_launch)
        if self._comm is not None:
            mpi.agree(self._comm, "run arguments", steps=plan.n_steps, sample_every=plan.M,
                      observables=plan.obs_names, histograms=repr(plan.hist_spec),
                      record_paths=plan.n_record)
            if self._comm.Get_rank() != 0:
                progress = False
        return self._finish(self._advance(plan, progress))

    def _run_local(self, t_end=None, *, progress=None, **kwargs) -> "_Local":
        """run() on this rank's share only, with no collective: for callers that
        run an unknown number of times per rank (time-bounded slices) and
        combine once at the end with :meth:`_finish` (the Josephson sweep)."""
        return self._advance(self._plan(t_end, *(kwargs.get(k) for k in (
            "steps", "sample_every", "observables", "histograms")), kwargs.get("record_paths", 0),
            kwargs.get("steps_per_launch")), progress)

    def _plan(self, t_end, steps, sample_every, observables, histograms, record_paths,
              steps_per_launch) -> "_Plan":
        """The checked arguments of a run, with its memory checked."""
        n_steps = self._steps_for(t_end, steps)
        M = n_steps if sample_every is None else check.integer("sample_every", sample_every, 1)
        M = min(M, n_steps)             # the same samples, and the step arithmetic stays in int64
        obs_names, obs, hist_names, hist, hist_range, disp = self._recording(observables, histograms)
        n_record = check.integer("record_paths", record_paths, 0, self.n_paths)
        total_bins = sum(b for _, b in hist)
        wg = self.work_group_size
        local = (wg * 3 * self._acc.itemsize if obs else 0) + 4 * total_bins
        if local > self.device.facts.local_mem:
            raise ValueError(f"histograms need {4 * total_bins} bytes of local memory per work group; "
                             f"{self.device.name} has {self.device.facts.local_mem}: use fewer bins")
        spl = (self._steps_per_launch_default() if steps_per_launch is None
               else check.integer("steps_per_launch", steps_per_launch, 1))
        recording = bool(obs or hist or n_record)
        # samples every M steps from now and at the end: counted, never listed
        n_samples = n_steps // M + (n_steps % M != 0) if recording else 0
        plan = _Plan(n_steps, M, obs_names, obs, hist_names, hist, hist_range, disp, n_record,
                     spl, n_samples, dict(histograms or {}))
        sh, acc = self.share, self._acc
        mom = np.dtype([("n", acc), ("mean", acc), ("m2", acc)])
        n_groups = self._groups_per_grid * self._ng
        kept = n_samples if self._by_paths else 1          # partials kept per sample slot
        nrl = min(self._np, max(0, n_record - sh.p0))      # recorded paths of this rank's share
        nv = len(self.model.variables)
        check_memory(self.device, {
            **self._buffer_sizes(), "partials": kept * n_groups * len(obs) * mom.itemsize,
            "moments": 0 if self._by_paths else n_samples * self._ng * len(obs) * 2 * acc.itemsize,
            "histograms": total_bins * self._ng * 4,
            "paths": n_samples * self._ng * nrl * nv * self._real.itemsize},
            f"this run ({n_samples} samples of {self._ng} grid points)",
            "Record fewer samples (a larger sample_every), observables or paths"
            + (", or use more ranks." if self._comm is not None else "."))
        return plan

    @property
    def _by_paths(self) -> bool:
        """The paths of a grid point are split over ranks (their moments are combined at the end)."""
        return self._np != self.n_paths

    def _advance(self, plan: "_Plan", progress) -> "_Local":
        n_steps, M, obs, hist, n_samples = plan.n_steps, plan.M, plan.obs, plan.hist, plan.n_samples
        recording = n_samples > 0
        total_bins = sum(b for _, b in hist)
        sh, wg, acc, dev, q = self.share, self.work_group_size, self._acc, self.device, self.device.queue
        mom = np.dtype([("n", acc), ("mean", acc), ("m2", acc)])
        n_groups = self._groups_per_grid * self._ng
        by_paths = self._by_paths
        nv = len(self.model.variables)
        nrl = min(self._np, max(0, plan.n_record - sh.p0))

        prg = self._program(obs, hist, plan.disp)
        dummy = zeros(dev, 1, np.uint32)
        slots = max(n_samples, 1) if by_paths else 1
        partials = zeros(dev, slots * n_groups * len(obs) * mom.itemsize, np.uint8) if obs else dummy
        moments = (cla.empty(q, (max(n_samples, 1), self._ng, len(obs), 2), acc)
                   if obs and not by_paths else dummy)
        hist_dev = zeros(dev, max(total_bins * self._ng, 1), np.uint32)
        hist_rng = cla.to_device(q, np.array(plan.hist_range or [0.0], dtype=self._real))
        rec = (cla.empty(q, (n_samples, self._ng, nrl, nv), self._real)
               if nrl and n_samples else dummy)
        k0, k1 = seed_key(self.seed)
        ns = len(self.model.noise_sources)
        scal = [self._real.type(self._values[p]) for p in self.model.parameters if p not in self._grid_params()]
        hist_total = np.zeros(total_bins * self._ng, dtype=np.uint64)
        flush_every = max(1, (2**32 - 1) // self._np)     # samples before uint32 bins could wrap
        pending_hist = [0]
        gsize = (n_groups * wg,)
        wgf = _wg_size(dev.facts, 64)
        start = self._step

        def launch(k, slot):
            S = self._step
            if not self._t_valid or S % TIME_RESYNC == 0:
                cl.enqueue_copy(q, self._t[self._tcur].data, self._exact_time(S))
                self._t_valid = True
            observe = slot >= 0
            pbase = max(slot, 0) * n_groups * len(obs) if by_paths else 0
            prg.sde_advance(q, gsize, (wg,), self._state.data, self._laps.data, self._origin.data,
                            self._xs.data, self._spare.data, self._gpar.data,
                            self._t[self._tcur].data, self._t[1 - self._tcur].data, self._period.data,
                            np.uint32(self._np), np.uint32(self._ng),
                            np.uint32(self._groups_per_grid), self._real.type(self.dt),
                            np.uint32(k), np.uint64(S * ns), np.uint32(k0), np.uint32(k1),
                            *scal, np.uint64(sh.g0), np.uint64(sh.p0), np.uint64(self.n_paths),
                            np.int32(observe), partials.data, np.uint64(pbase), hist_dev.data,
                            hist_rng.data, rec.data, np.uint32(nrl), np.uint32(max(slot, 0)))
            self._tcur ^= 1
            self._step += k
            if observe and obs and not by_paths:
                prg.sde_moments(q, (self._ng * len(obs) * wgf,), (wgf,), partials.data,
                                np.uint32(self._groups_per_grid), np.uint32(len(obs)),
                                np.uint32(self._ng), np.uint32(slot), moments.data)
            if observe and hist:
                pending_hist[0] += 1
                if pending_hist[0] == flush_every:
                    flush_hist()

        def flush_hist():
            nonlocal hist_total
            hist_total += hist_dev.get().astype(np.uint64)
            cl.enqueue_copy(q, hist_dev.data, np.zeros(hist_dev.shape, np.uint32))
            pending_hist[0] = 0

        def advance(done, n):
            """Steps [done, done + n) of this run, in launches that end at the
            samples, at the time resyncs and after at most spl steps."""
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
                launch(k, slot)
                s = e

        def local():
            """What this rank recorded so far."""
            k = n_samples if self._step - start == n_steps else (self._step - start) // M
            marks = np.minimum(np.arange(1, k + 1, dtype=np.int64) * M, n_steps)
            out = _Local(plan, (start + marks) * self.dt, prg)
            if obs and k:
                if by_paths:
                    host = np.empty((slots, self._ng, self._groups_per_grid, len(obs)), mom)
                    cl.enqueue_copy(q, host, partials.data)
                    out.partials = host[:k]
                else:
                    out.moments = moments.get()[:k]
            if hist:
                flush_hist()
                off = 0
                for _e, bins in hist:
                    block = hist_total[off * self._ng:(off + bins) * self._ng]
                    out.hists.append(block.reshape(self._ng, bins))
                    off += bins
            if nrl and k:
                out.paths = rec.get()[:k]
            return out

        try:
            run_sliced(n_steps, advance, q, progress=progress, label="sde", what="time steps",
                       first=self._slice)
        except Interrupted as exc:
            # with several ranks nothing collective may happen here: they stop at different steps
            exc.local = local()
            exc.partial = self._finish(exc.local) if self._comm is None else None
            raise
        return local()

    def _finish(self, loc: "_Local"):
        """The RunResult of what every rank recorded (collective with a
        communicator: on rank 0, on every rank with gather='all', else None)."""
        plan, k = loc.plan, len(loc.times)
        if self._comm is not None:
            got = self._comm.gather(loc.payload(), root=0)
            if self._comm.Get_rank() == 0:
                result = self._combine(loc, got)
            else:
                result = None
            if self._gather == "all":
                result = self._comm.bcast(result, root=0)
            return result
        shp = (k,) + self.grid_shape
        mean, var = {}, {}
        if loc.moments is not None:
            for j, name in enumerate(plan.obs_names):
                mean[name] = loc.moments[:, :, j, 0].astype(np.float64).reshape(shp)
                var[name] = loc.moments[:, :, j, 1].astype(np.float64).reshape(shp)
        hists, edges = {}, {}
        for j, (name, (_e, bins), h) in enumerate(zip(plan.hist_names, plan.hist, loc.hists)):
            hists[name] = h.reshape(self.grid_shape + (bins,))
            edges[name] = np.linspace(plan.hist_range[2 * j], plan.hist_range[2 * j + 1], bins + 1)
        paths = {}
        if loc.paths is not None:
            for j, v in enumerate(self.model.variables):
                paths[v] = loc.paths[..., j].astype(np.float64).reshape(shp + (plan.n_record,))
        result = RunResult(loc.times, mean, var, self.n_paths, self.grid_shape, hists, edges, paths)
        bad = result.diverged
        if bad.any():
            first = tuple(int(i[0]) for i in np.nonzero(bad))
            warnings.warn(f"sde run: means or variances are not finite at {int(bad.sum())} of {bad.size} grid "
                          f"points (the first {first}, params {self._point_params(first)}): paths diverged; "
                          f"use a smaller dt (RunResult.diverged marks them)", RuntimeWarning, stacklevel=3)
        return result

    def _point_params(self, index) -> dict:
        """{parameter: value} at grid point `index`."""
        g = int(np.ravel_multi_index(index, self.grid_shape)) if self.grid_shape else 0
        return {p: float(np.broadcast_to(v, (self.n_grid,))[g]) for p, v in self._values.items()}

    def _combine(self, loc: "_Local", got: list):
        """On rank 0: the whole ensemble's record from every rank's (payloads
        in rank order), as if one device had made it; then :meth:`_finish`."""
        plan = loc.plan
        whole = _Local(plan, loc.times, loc.prg)
        if self._by_paths:
            # every grid point's work-group partials in the order one device keeps them,
            # combined by the same kernel: the same bits as one device
            if got[0]["partials"] is not None:
                whole.moments = self._moments_of(plan, np.concatenate([g["partials"] for g in got], axis=2),
                                                 loc.prg)
            whole.hists = [sum(g["hists"][j] for g in got) for j in range(len(plan.hist))]
            parts = [g["paths"] for g in got if g["paths"] is not None]
            whole.paths = np.concatenate(parts, axis=2) if parts else None
        else:
            if got[0]["moments"] is not None:
                whole.moments = np.concatenate([g["moments"] for g in got], axis=1)
            whole.hists = [np.concatenate([g["hists"][j] for g in got]) for j in range(len(plan.hist))]
            if got[0]["paths"] is not None:
                whole.paths = np.concatenate([g["paths"] for g in got], axis=1)
        comm, self._comm = self._comm, None
        try:
            return self._finish(whole)
        finally:
            self._comm = comm

    def _moments_of(self, plan, partials, prg) -> np.ndarray:
        """(k, n_grid, n_obs, 2) moments of the whole ensemble's partials
        (k, n_grid, groups per grid point, n_obs), one sample at a time."""
        k, n_grid, gpg, n_obs = partials.shape
        dev, q = self.device, self.device.queue
        wgf = _wg_size(dev.facts, 64)
        check_memory(dev, {"partials": partials[0].nbytes, "moments": k * n_grid * n_obs * 2 * self._acc.itemsize},
                     f"combining the moments of {k} samples", "Record fewer samples.")
        buf = cla.to_device(q, np.ascontiguousarray(partials[0]).view(np.uint8))
        moments = cla.empty(q, (max(k, 1), n_grid, n_obs, 2), self._acc)
        for slot in range(k):
            if slot:
                cl.enqueue_copy(q, buf.data, np.ascontiguousarray(partials[slot]))
            prg.sde_moments(q, (n_grid * n_obs * wgf,), (wgf,), buf.data, np.uint32(gpg),
                            np.uint32(n_obs), np.uint32(n_grid), np.uint32(slot), moments.data)
        return moments.get()[:k]

    def _steps_per_launch_default(self) -> int:
        # ~2^28 path-steps per launch on GPUs (launch overhead negligible), 2^20 on
        # CPUs (a launch well under a slice, so Ctrl-C is answered in time)
        budget = 2**28 if self.device.facts.is_gpu else 2**20
        return max(1, min(TIME_RESYNC, budget // self._nl))

    def _recording(self, observables, histograms):
        """Checked and rendered observables and histograms of a run, and the
        indices of the variables whose displacement they use."""
        obs_names = list(self.model.variables) if observables is None else observables
        if isinstance(obs_names, str) or not hasattr(obs_names, "__iter__"):
            raise TypeError(f"observables must be a list of expressions, got {observables!r}")
        obs_names = list(obs_names)
        real = "double" if self.dtype == "float64" else "float"
        variables = self.model.variables
        rename = {("unwrap", v): f"sde_uw_{variables.index(v)}" for v in self.model.periodic}
        rename.update({("displacement", v): f"sde_dp_{k}" for k, v in enumerate(variables)})
        disp = set()

        def checked(text):
            toks = self.model.check_observable(text)
            disp.update(variables.index(toks[i + 2][1]) for i, (kind, tok) in enumerate(toks)
                        if kind == "name" and tok == "displacement")
            return _expr.render(toks, real, rename)

        obs = [checked(o) for o in obs_names]
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
            check_fits(f"histograms[{h!r}] range", [lo, hi], self._real)
            if hi <= lo:
                raise ValueError(f"histograms[{h!r}]: low must be < high, got {lo}, {hi}")
            hist.append((checked(h), bins))
            hist_range += [lo, hi]
        return obs_names, obs, list(histograms), hist, hist_range, sorted(disp)

    def _steps_for(self, t_end, steps):
        if (t_end is None) == (steps is None):
            raise ValueError("give exactly one of t_end (the time to run to) and steps")
        # the Philox counter holds step x noise sources in 64 bits
        limit = min(2**63 - 1, (2**64 - 1) // max(1, len(self.model.noise_sources))) - self._step
        if steps is not None:
            return check.integer("steps", steps, 1, limit)
        return steps_to(t_end, self.t, self.dt, limit)


def steps_to(t_end, t: float, dt: float, limit: int = 2**63 - 1) -> int:
    """Time steps dt from time t to t_end: at least one (a t_end less than a step ahead is
    refused, not run for a whole step), a t_end between steps rounded up (within 1e-9
    relative of a step it counts as that step), at most `limit`."""
    t_end = check.real("t_end", t_end)
    x = (t_end - t) / dt
    if x > limit:
        raise ValueError(f"t_end = {t_end} is {x:.3g} steps of dt = {dt} away; at most {limit} "
                         f"steps remain")
    n = round(x) if abs(x - round(x)) <= 1e-9 * max(1.0, abs(x)) else math.ceil(x)
    if n < 1 or x < 1 - 1e-9:
        raise ValueError(f"t_end must be later than the current time t = {t} by at least one "
                         f"step dt = {dt}, got {t_end}")
    return int(n)


@dataclass
class _Plan:
    """The checked arguments of one Ensemble.run."""
    n_steps: int
    M: int
    obs_names: list
    obs: list
    hist_names: list
    hist: list
    hist_range: list
    disp: list
    n_record: int
    spl: int
    n_samples: int
    hist_spec: dict


@dataclass
class _Local:
    """What one rank recorded in a run: moments (k, grid points, n_obs, 2) of its
    whole grid points, or its work groups' partial moments (k, n_grid, groups,
    n_obs) when the paths are split; histograms (grid points, bins) each;
    recorded paths (k, grid points, paths, n_vars)."""
    plan: _Plan
    times: np.ndarray
    prg: object
    moments: np.ndarray | None = None
    partials: np.ndarray | None = None
    hists: list = field(default_factory=list)
    paths: np.ndarray | None = None

    def payload(self) -> dict:
        return {"moments": self.moments, "partials": self.partials, "hists": self.hists,
                "paths": self.paths}


def work_group_size_default(facts, n_paths: int) -> int:
    """256 paths per work group, fewer (a power of two) for small ensembles."""
    return _wg_size(facts, min(256, _next_pow2(n_paths)))
