"""What an SDE ensemble decides before the device: parameters and their grid,
the shares of the grid and paths over MPI ranks, a run's checked arguments
and the memory it needs."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _validate as check
from ..runtime import work_group_size as _wg_size
from ..runtime.checkpoint import CheckpointError
from ..runtime.memory import check_memory
from . import expr as _expr
from .model import Model

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


def parse_params(model: Model, params):
    """-> (axes [(names, arrays)], grid shape, per-parameter expanded values
    {name: float or (n_grid,) array}, normalized params)."""
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a mapping {{parameter: value}}, got {type(params).__name__}")
    scalars: dict[str, float] = {}
    normal: dict[str | tuple[str, ...], Any] = {}
    axes: list[tuple[tuple[str, ...], list[np.ndarray]]] = []
    seen: list[str] = []
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
    values: dict[str, float | np.ndarray] = dict(scalars)
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


def encode_params(params: dict) -> list:
    """Normalized params as JSON data: [[names], value(s)] in grid-axis order."""
    out: list[list] = []
    for key, value in params.items():
        if isinstance(key, tuple):
            out.append([list(key), [np.asarray(a).tolist() for a in value]])
        else:
            out.append([[key], value if isinstance(value, float) else np.asarray(value).tolist()])
    return out


def decode_params(items, where: str) -> dict:
    """The parameters of a checkpoint header, as encode_params wrote them."""
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
class RunPlan:
    """The checked arguments of one Ensemble.run; `spl`: the most steps per kernel
    launch (sized from the device; results do not depend on it)."""
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

    def with_steps_per_launch(self, steps_per_launch: int) -> RunPlan:
        """This plan with at most `steps_per_launch` steps per kernel launch (tests
        and benchmarks: results do not depend on it)."""
        return replace(self, spl=check.integer("steps_per_launch", steps_per_launch, 1))


@dataclass
class LocalRecord:
    """What one rank recorded in a run: moments (k, grid points, n_obs, 2) of its
    whole grid points, or its work groups' partial moments (k, n_grid, groups,
    n_obs) when the paths are split; histograms (grid points, bins) each;
    recorded paths (k, grid points, paths, n_vars)."""
    plan: RunPlan
    times: np.ndarray
    prg: object
    moments: np.ndarray | None = None
    partials: np.ndarray | None = None
    hists: list = field(default_factory=list)
    paths: np.ndarray | None = None

    def payload(self) -> dict:
        """What a rank sends to rank 0 at the end of a run."""
        return {"moments": self.moments, "partials": self.partials, "hists": self.hists,
                "paths": self.paths}


def work_group_size_default(facts, n_paths: int) -> int:
    """256 paths per work group, fewer (a power of two) for small ensembles."""
    return _wg_size(facts, min(256, _next_pow2(n_paths)))


class EnsemblePlanning:
    """The checks and planning of :meth:`Ensemble.run` (before any device work)."""

    if TYPE_CHECKING:      # a mixin: the attributes are those of the class that uses it
        def __getattr__(self, name: str) -> Any: ...

    def _plan(self, t_end, steps, sample_every, observables, histograms, record_paths) -> "RunPlan":
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
        spl = self._steps_per_launch_default()
        recording = bool(obs or hist or n_record)
        # samples every M steps from now and at the end: counted, never listed
        n_samples = n_steps // M + (n_steps % M != 0) if recording else 0
        plan = RunPlan(n_steps, M, obs_names, obs, hist_names, hist, hist_range, disp, n_record,
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


