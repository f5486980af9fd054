"""What an SDE ensemble keeps and returns: run results, states and their
checkpoint files."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyopencl as cl

from .. import _validate as check
from ..runtime import checkpoint as ckpt
from ..runtime import mpi
from ..runtime.checkpoint import CheckpointError, check_arrays, load_checkpoint, save_checkpoint
from ..runtime.files import check_output_path
from .model import Model
from .plan import (
    CHECKPOINT_KIND,
    DTYPES,
    RNGS,
    SCHEMES,
    TIME_RESYNC,
    decode_params,
    encode_params,
    parse_params,
)


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

    def error(self, name: str) -> np.ndarray:
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
    if TYPE_CHECKING:           # set by __post_init__, not a field
        _model: Model = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        try:
            model = Model.from_description(self.model_description)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"model_description: {exc}") from None
        object.__setattr__(self, "_model", model)
        n_paths = check.integer("n_paths", self.n_paths, 1)
        _normal, _shape, n_grid, values = parse_params(model, self.params)
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
    def save(self, path: str | os.PathLike) -> None:
        """Write the state to `path` (.npz), atomically."""
        save_checkpoint(path, CHECKPOINT_KIND, *self.checkpoint_parts())

    @classmethod
    def load(cls, path: str | os.PathLike) -> EnsembleState:
        """The state saved at `path`; :class:`clphys.runtime.checkpoint.CheckpointError`
        (a ValueError) naming whatever is missing, malformed or inconsistent."""
        header, files = load_checkpoint(path, CHECKPOINT_KIND)
        return cls.from_checkpoint_parts(header, files, path)

    def checkpoint_parts(self) -> tuple[dict, dict]:
        """(header, arrays) for :func:`clphys.runtime.checkpoint.save_checkpoint`;
        objects that hold an ensemble (e.g. a Josephson run) add their own."""
        header = {"model": self.model_description, "n_paths": self.n_paths,
                  "params": encode_params(self.params), "dt": self.dt, "scheme": self.scheme,
                  "rng": self.rng, "seed": self.seed, "dtype": self.dtype,
                  "fast_math": self.fast_math, "step": self.step, "origin_step": self.origin_step,
                  "time_resync": TIME_RESYNC, "algorithm": f"sde {self.scheme}", "RNG": self.rng}
        arrays = {"values": self.values, "laps": self.laps, "origin": self.origin, "time": self.time,
                  "xs_state": self.xs_state, "xs_spare": self.xs_spare}
        return header, arrays

    @classmethod
    def from_checkpoint_parts(cls, header: dict, files: dict, path: str | os.PathLike = "") -> EnsembleState:
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
        params = decode_params(ckpt.field(header, "params", list, path=path), where)
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



class EnsembleCheckpoints:
    """from_state(), load(), state() and save() of :class:`Ensemble`."""

    if TYPE_CHECKING:      # a mixin: the attributes are those of the class that uses it
        def __getattr__(self, name: str) -> Any: ...

    @classmethod
    def from_state(cls: Any, state: EnsembleState | str | os.PathLike, *, work_group_size: int | None = None,
                   device: Any = None, comm: Any = None, gather: str = "root") -> Any:
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
        st: EnsembleState = read() if comm is None else mpi.all_ok(comm, read)
        ens = cls(st.model, st.n_paths, st.params, st.dt, scheme=st.scheme,
                  rng=st.rng, seed=st.seed, dtype=st.dtype, fast_math=st.fast_math,
                  initial={}, work_group_size=work_group_size, device=device, comm=comm, gather=gather)
        if comm is not None:
            mpi.agree(comm, "states", step=st.step, origin_step=st.origin_step,
                      values=hashlib.sha1(st.values.tobytes()).hexdigest())
        q = ens.device.queue
        cl.enqueue_copy(q, ens._state.data, ens._local_of(st.values))
        cl.enqueue_copy(q, ens._origin.data, ens._local_of(st.origin))
        if ens._nper:
            cl.enqueue_copy(q, ens._laps.data, ens._local_of(st.laps))
        if ens.rng == "xorshift32":
            cl.enqueue_copy(q, ens._xs.data, ens._local_of(st.xs_state[None])[0])
            cl.enqueue_copy(q, ens._spare.data, ens._local_of(st.xs_spare[None])[0])
        g0 = ens.share.g0
        cl.enqueue_copy(q, ens._t[ens._tcur].data, np.ascontiguousarray(st.time[g0:g0 + ens._ng]))
        ens._t_valid = True
        ens._step, ens._origin_step = st.step, st.origin_step
        q.finish()
        return ens

    @classmethod
    def load(cls: Any, path: str | os.PathLike, *, model: Model | None = None, work_group_size: int | None = None,
             device: Any = None, comm: Any = None, gather: str = "root") -> Any:
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

        def write():
            if rank == 0:
                assert state is not None        # rank 0 holds the whole ensemble's state
                state.save(path)
        self._collective(write)
