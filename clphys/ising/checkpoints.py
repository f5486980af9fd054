"""Checkpoints of Ising ensembles: in-memory states and .npz files (the
clphys checkpoint format), written and read back with every field checked."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _validate
from ..runtime import mpi
from ..runtime.checkpoint import CheckpointError, field, load_checkpoint, save_checkpoint
from ..runtime.files import check_output_path
from . import backends
from .plan import check_temperatures

STATE_FORMAT = "clphys.ising/1"
CHECKPOINT_KIND = "ising-ensemble"
# multispin launch plans that older states and files list among the options; they
# do not change the spins, and the loaded ensemble plans its own launches
LAUNCH_KEYS = ("sweeps_per_launch", "band")


def public_options(options: dict) -> dict:
    """The saved `options` without a launch plan of an older state or file."""
    return {k: v for k, v in options.items() if k not in LAUNCH_KEYS}


class EnsembleCheckpoints:
    """state(), from_state(), save() and load() of :class:`clphys.ising.Ensemble`."""

    if TYPE_CHECKING:      # a mixin: the attributes are those of the class that uses it
        def __getattr__(self, name: str) -> Any: ...

    def _no_split_checkpoint(self):
        if self._comm is not None:
            raise ValueError("state() and save() of an ensemble split over MPI ranks are not "
                             "supported: checkpoint each rank's replicas as an ensemble of its own "
                             "(replica_offset=) or run on one process")

    def state(self) -> dict:
        """Everything needed to continue bit for bit, as an in-memory dict
        (spins, RNG counters and states, parameters). To store it, use
        :meth:`save`."""
        self._no_split_checkpoint()
        return {"format": STATE_FORMAT, "dim": self.dim, "shape": self.shape, "J": self.J,
                "h": self.h, "temperatures": self.temperatures, "algorithm": self.algorithm,
                "rng": self.rng, "seed": self.seed, "options": dict(self.options),
                "spins": self.spins(), "backend": self._backend.get_state(), "settled": self._settled}

    @classmethod
    def from_state(cls, state: dict, device: Any = None) -> EnsembleCheckpoints:
        """Rebuild an ensemble from :meth:`state` (on `device`, any device)."""
        return cls.restored(state, device, single=False)

    @classmethod
    def restored(cls, state: dict, device: Any, single: bool) -> EnsembleCheckpoints:
        """:meth:`from_state`; `single`: refuse a state of several replicas."""
        inst = cls.__new__(cls)
        inst._restore(state, device, single)  # noqa: SLF001 (an instance of this class)
        return inst

    def _restore(self, state, device, single):
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"state must be a dict made by state() (format {STATE_FORMAT!r})")
        missing = sorted({"dim", "shape", "J", "h", "temperatures", "algorithm", "rng", "seed", "options",
                          "spins", "backend"} - set(state))
        if missing:
            raise ValueError(f"state lacks {missing}: use a dict made by state(), or save()/load()")
        if state["dim"] != self.dim:
            raise ValueError(f"state is of a {state['dim']}D lattice, not {self.dim}D")
        for key, kind, what in (("shape", (tuple, list), "tuple"), ("options", dict, "dict"),
                                ("backend", dict, "dict")):
            if not isinstance(state[key], kind):
                raise ValueError(f"state[{key!r}] must be a {what}, got {type(state[key]).__name__}")
        try:
            temps = check_temperatures(state["temperatures"], "state['temperatures']")
            if single and len(temps) != 1:
                raise ValueError("state holds an ensemble; use Ensemble2D/3D.from_state")
            self._init_ensemble(tuple(state["shape"]), temps, J=state["J"], h=state["h"],
                                algorithm=state["algorithm"], rng=state["rng"], seed=state["seed"],
                                start="up", device=device, **public_options(state["options"]))
        except TypeError as exc:           # a value of another type: the state is malformed
            raise ValueError(f"state is malformed: {exc}") from None
        self.set_spins(state["spins"])
        problem = backend_state_problem(self._backend.get_state(), state["backend"])
        if problem:
            raise ValueError(f"state['backend']: the {self.algorithm}/{self.rng} generator state {problem}")
        try:
            self._backend.set_state(state["backend"])
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"state['backend'] is malformed: {exc!r}") from None
        settled = state.get("settled", 0)
        self._settled = _validate.integer("state['settled']", settled, 0, self.sweeps)

    def checkpoint(self) -> tuple[dict, dict]:
        """(header, arrays) of the checkpoint format (see :meth:`save`)."""
        bstate = self._backend.get_state()
        scalars = {k: (list(v) if isinstance(v, tuple) else v) for k, v in bstate.items()
                   if not isinstance(v, np.ndarray)}
        arrays = {f"backend.{k}": v for k, v in bstate.items() if isinstance(v, np.ndarray)}
        spins = self.spins().reshape(self.n_replicas, -1)
        arrays["spins"] = np.packbits(spins < 0, axis=1)
        arrays["temperatures"] = self.temperatures
        # options the backend resolved on this device (e.g. the blocks tile)
        # are recorded, so the state continues bit for bit on any device
        options = {**{k: v for k, v in scalars.items() if k in self._backend.options},
                   **{k: (list(v) if isinstance(v, tuple) else v) for k, v in self.options.items()
                      if v is not None}}
        header = {"dim": self.dim, "shape": list(self.shape), "replicas": self.n_replicas,
                  "J": self.J, "h": self.h, "algorithm": self.algorithm, "rng": self.rng,
                  "seed": self.seed, "options": options,
                  "settled": self._settled, "backend": scalars}
        return header, arrays

    def save(self, path: str | os.PathLike) -> None:
        """Write a checkpoint to `path` (.npz; written to a temporary name and
        renamed): spins (1 bit each), temperatures, generator counters and
        states, parameters, in the clphys checkpoint format (plain arrays and a
        JSON header, loadable with allow_pickle=False)."""
        self._no_split_checkpoint()
        if self._slab is not None:        # a lattice split over ranks: rank 0 writes the whole of it
            self._agree("save", path=os.fspath(path) if isinstance(path, (str, os.PathLike))
                        else repr(path))
            path = mpi.all_ok(self._slab, check_output_path, path, "path", (".npz",))
            header, arrays = self.checkpoint()
            root = self._slab.Get_rank() == 0

            def write():
                if root:
                    save_checkpoint(path, CHECKPOINT_KIND, header, arrays)
            mpi.all_ok(self._slab, write)
            return
        path = check_output_path(path, "path", (".npz",))
        header, arrays = self.checkpoint()
        save_checkpoint(path, CHECKPOINT_KIND, header, arrays)

    @classmethod
    def load(cls, path: str | os.PathLike, device: Any = None) -> EnsembleCheckpoints:
        """The ensemble saved at `path` by :meth:`save`, on `device` (any
        device); it continues bit for bit. Every field is checked:
        :class:`clphys.runtime.checkpoint.CheckpointError` (a ValueError)
        says what is wrong."""
        header, arrays = load_checkpoint(path, CHECKPOINT_KIND)
        return cls.from_checkpoint(header, arrays, str(path), device)

    @classmethod
    def from_checkpoint(cls, header: dict, arrays: dict, path: str, device: Any = None, single: bool = False,
                        extra: tuple = ()) -> EnsembleCheckpoints:
        """The ensemble of a loaded checkpoint (header, arrays) read from
        `path`; `single`: refuse several replicas; `extra`: arrays besides
        the ensemble's that the file may hold."""
        inst = cls.__new__(cls)
        inst._from_checkpoint(header, arrays, path, device, single, extra)  # noqa: SLF001 (as above)
        return inst

    def _from_checkpoint(self, header, arrays, path, device, single, extra=()):
        where = f"checkpoint {path!r}"
        dim = field(header, "dim", int, choices=(2, 3), path=path)
        if dim != self.dim:
            raise CheckpointError(f"{where} holds a {dim}D lattice, not a {self.dim}D one: "
                                  f"use Ensemble{dim}D / Ising{dim}D")
        shape = field(header, "shape", list, path=path)
        if len(shape) != dim or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 2
                                        for v in shape):
            raise CheckpointError(f"{where}: field 'shape' = {shape!r} is not {dim} sizes >= 2")
        R = field(header, "replicas", int, minimum=1, path=path)
        if single and R != 1:
            raise CheckpointError(f"{where} holds an ensemble of {R} replicas; use "
                                  f"Ensemble{dim}D.load")
        J, h = field(header, "J", float, path=path), field(header, "h", float, path=path)
        algorithm = field(header, "algorithm", str, choices=tuple(backends.REGISTRY), path=path)
        rng = field(header, "rng", str, choices=backends.KNOWN_RNGS, path=path)
        seed = field(header, "seed", int, minimum=0, path=path)
        options = field(header, "options", dict, path=path)
        settled = field(header, "settled", int, minimum=0, path=path)
        bscalars = field(header, "backend", dict, path=path)
        N = int(np.prod(shape))
        want = {"spins": (np.uint8, (R, -(-N // 8))), "temperatures": (np.float64, (R,))}
        for name, (dtype, shp) in want.items():
            check_array(where, arrays, name, dtype, shp)
        barrays = {k[len("backend."):]: v for k, v in arrays.items() if k.startswith("backend.")}
        unexpected = sorted(set(arrays) - set(want) - {f"backend.{k}" for k in barrays} - set(extra))
        if unexpected:
            raise CheckpointError(f"{where} has unexpected arrays {unexpected}")
        options = {k: (tuple(v) if isinstance(v, list) else v) for k, v in public_options(options).items()}
        try:
            temps = check_temperatures(arrays["temperatures"])
            self._init_ensemble(tuple(shape), temps, J=J, h=h, algorithm=algorithm, rng=rng,
                                seed=seed, start="up", device=device, **options)
        except (ValueError, TypeError) as exc:
            raise CheckpointError(f"{where}: {exc}") from None
        fresh = self._backend.get_state()
        loaded = {**{k: (tuple(v) if isinstance(v, list) else v) for k, v in bscalars.items()}, **barrays}
        for k, v in fresh.items():
            if isinstance(v, np.ndarray) and k in loaded:
                check_array(where, arrays, f"backend.{k}", v.dtype, v.shape)
        problem = backend_state_problem(fresh, loaded)
        if problem:
            raise CheckpointError(f"{where}: the {algorithm}/{rng} generator state {problem}")
        bits = np.unpackbits(arrays["spins"], axis=1, count=N)
        spins = (1 - 2 * bits.astype(np.int8)).reshape((R,) + tuple(reversed(shape)))
        try:
            self._backend.set_state(loaded)
        except (ValueError, TypeError, KeyError) as exc:
            raise CheckpointError(f"{where}: {exc}") from None
        self.set_spins(spins)
        self._settled = checked_settled(where, settled, self.sweeps)


def backend_state_problem(fresh: dict, loaded: dict) -> str | None:
    """What is wrong with a backend state `loaded` for the backend whose own
    state is `fresh` (the same keys, of the same types and array shapes), or None.
    spins_per_word may be missing: states made before the joint mode have
    none (the backends resume them one word per spin)."""
    missing = sorted(set(fresh) - set(loaded) - {"spins_per_word"})
    extra = sorted(set(loaded) - set(fresh))
    if missing or extra:
        return f"lacks {missing}" if missing else f"has unexpected {extra}"
    for k, v in fresh.items():
        if k not in loaded:
            continue
        got = loaded[k]
        if isinstance(v, np.ndarray):
            if not isinstance(got, np.ndarray) or got.dtype != v.dtype or got.shape != v.shape:
                return (f"field {k!r} is not a {v.dtype} array of shape {v.shape}"
                        + (f" (got {got.dtype} {got.shape})" if isinstance(got, np.ndarray) else ""))
        elif (v is None) != (got is None) or (v is not None and type(got) is not type(v)):
            return f"field {k!r} = {got!r} is not of type {type(v).__name__}"
    return None


def checked_settled(where: str, settled: int, sweeps: int) -> int:
    """The `settled` counter of a checkpoint: the sweeps at the current
    temperature are some of the sweeps made since the start."""
    if settled > sweeps:
        raise CheckpointError(f"{where}: field 'settled' = {settled} exceeds the {sweeps} sweeps the "
                              f"lattice made since its start")
    return settled


def check_array(where: str, arrays: dict, name: str, dtype: Any, shape: tuple) -> None:
    """CheckpointError unless arrays[name] exists with this dtype and shape."""
    if name not in arrays:
        raise CheckpointError(f"{where} lacks the array {name!r}")
    arr = arrays[name]
    if arr.dtype != np.dtype(dtype):
        raise CheckpointError(f"{where}: array {name!r} has dtype {arr.dtype}, expected {np.dtype(dtype)}")
    if arr.shape != tuple(shape):
        raise CheckpointError(f"{where}: array {name!r} has shape {arr.shape}, expected {tuple(shape)} "
                              f"(a file from another lattice size or number of replicas?)")

