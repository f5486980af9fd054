"""Single Ising lattices (Ising2D, Ising3D): ensembles of one replica with
scalar results, and one lattice split over MPI ranks."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .. import _validate
from ..runtime import mpi
from ..runtime.checkpoint import CheckpointError, field, load_checkpoint
from .checkpoints import CHECKPOINT_KIND, backend_state_problem, check_array, checked_settled, public_options
from .lattice import Ensemble, Ensemble2D, Ensemble3D
from .multispin_plan import LaunchChoice, with_launch
from .samples import Samples


class _Single:
    """One lattice: an ensemble of one replica with scalar results."""
    _ensemble: Any = None        # Ensemble2D or Ensemble3D in Ising2D / Ising3D
    _launch: LaunchChoice | None = None     # see Ensemble._launch

    def __init__(self, L, T, *, J=1.0, h=0.0, algorithm=None, rng=None, seed=0, start="random",
                 device=None, comm=None, **options):
        if comm is not None:
            T = mpi.all_ok(comm, _validate.real, "T", T, 0.0, None, strict_min=True)
        else:
            T = _validate.real("T", T, minimum=0.0, strict_min=True)
            if "halo" in options:
                raise ValueError("halo (slabs per side of a lattice split over MPI ranks) needs comm")
        kw = dict(J=J, h=h, algorithm=algorithm, rng=rng, seed=seed, start=start, device=device, **options)
        self._ens = (with_launch(self._ensemble, self._launch, L, [T], **kw) if comm is None else
                     self._ensemble._split_lattice(comm, self._launch, L, [T], **kw))  # noqa: SLF001

    @property
    def ensemble(self) -> Ensemble:
        """The ensemble of one replica behind this lattice."""
        return self._ens

    @property
    def local_shape(self) -> tuple:
        """This rank's part of the lattice, (Lx, rows) in 2D, (Lx, Ly, planes) in
        3D (the whole shape on one device)."""
        be = self._ens.backend
        return be.local_shape[:-1] + (be.own,) if self._ens.slab_comm is not None else self.shape

    @property
    def halo(self) -> int | None:
        """Halo slabs per side of a lattice split over ranks (one exchange every
        halo / 2 sweeps; 1: every half-sweep), None on one device."""
        return self._ens.backend.h if self._ens.slab_comm is not None else None

    shape = property(lambda self: self._ens.shape)
    J = property(lambda self: self._ens.J)
    h = property(lambda self: self._ens.h)
    algorithm = property(lambda self: self._ens.algorithm)
    rng = property(lambda self: self._ens.rng)
    seed = property(lambda self: self._ens.seed)
    device = property(lambda self: self._ens.device)
    n_spins = property(lambda self: self._ens.n_spins)

    @property
    def temperature(self) -> float:
        """Settable between sweeps without recompiling."""
        return float(self._ens.temperatures[0])

    @temperature.setter
    def temperature(self, T: float) -> None:
        self._ens.temperatures = [_validate.real("temperature", T, minimum=0.0, strict_min=True)]

    def sweep(self, n: int = 1) -> _Single:
        self._ens.sweep(n)
        return self

    def energy(self) -> float:
        """E/N."""
        return float(self._ens.energy()[0])

    def magnetization(self) -> float:
        """M/N (signed)."""
        return float(self._ens.magnetization()[0])

    def spins(self) -> np.ndarray:
        """int8 +-1 array (Ly, Lx) or (Lz, Ly, Lx)."""
        return self._ens.spins()[0]

    def set_spins(self, spins: ArrayLike) -> None:
        lat = tuple(reversed(self.shape))
        arr = np.asarray(spins)
        if arr.shape != lat:
            raise ValueError(f"spins must have shape {lat}, got {arr.shape}")
        self._ens.set_spins(arr)

    def sample(self, n_measure: int, every: int = 1, n_therm: int | None = None,
               progress: bool | Callable | None = None) -> Samples:
        """E/N and M/N series of length n_measure; see Ensemble.sample."""
        s = self._ens.sample(n_measure, every=every, n_therm=n_therm, progress=progress)
        return Samples(self.temperature, s.n_spins, s.energy[0], s.magnetization[0], n_therm=s.n_therm,
                       every=s.every, trapped=bool(s.trapped[0]))

    sweeps = property(lambda self: self._ens.sweeps, doc="Sweeps made since the start.")
    settled = property(lambda self: self._ens.settled,
                       doc="Sweeps made at the current temperature (see Ensemble.settled).")

    def state(self) -> dict:
        return self._ens.state()

    @classmethod
    def from_state(cls, state: dict, device: Any = None) -> _Single:
        return cls._wrap(cls._ensemble.restored(state, device, single=True))

    @classmethod
    def _wrap(cls, ens):
        inst = cls.__new__(cls)
        inst._ens = ens  # noqa: SLF001 (an instance of this class)
        return inst

    def save(self, path: str | os.PathLike) -> None:
        """Write a checkpoint (see Ensemble.save)."""
        self._ens.save(path)

    @classmethod
    def load(cls, path: str | os.PathLike, device: Any = None, comm: Any = None) -> _Single:
        """The lattice saved at `path` (see Ensemble.load); a file holding
        an ensemble of several replicas is refused. With `comm` (collective;
        every rank reads the file) the lattice is split over the ranks: a file
        written on one device or on any number of ranks continues bit for bit."""
        if comm is None:
            header, arrays = load_checkpoint(path, CHECKPOINT_KIND)
            return cls.from_checkpoint(header, arrays, str(path), device)

        def read():
            # checked as a one-device load would, without a device: then the fields
            header, arrays = load_checkpoint(path, CHECKPOINT_KIND)
            if field(header, "replicas", int, minimum=1, path=path) != 1:
                raise CheckpointError(f"checkpoint {str(path)!r} holds an ensemble; use "
                                      f"Ensemble{cls._ensemble.dim}D.load")
            return header, arrays
        header, arrays = mpi.all_ok(comm, read)
        return cls.split_from_checkpoint(header, arrays, str(path), device, comm)

    @classmethod
    def from_checkpoint(cls, header: dict, arrays: dict, path: str, device: Any = None,
                        extra: tuple = ()) -> _Single:
        """The lattice of a loaded checkpoint (see Ensemble.from_checkpoint)."""
        return cls._wrap(cls._ensemble.from_checkpoint(header, arrays, path, device, single=True,
                                                       extra=extra))

    @classmethod
    def split_from_checkpoint(cls, header: dict, arrays: dict, path: str, device: Any, comm: Any) -> _Single:
        """A lattice split over the ranks of `comm` from a loaded (and read-
        checked) checkpoint of one lattice (collective; every rank holds the
        same file, so a bad one fails alike everywhere)."""
        where = f"checkpoint {path!r}"
        shape = field(header, "shape", list, path=path)
        dim = cls._ensemble.dim
        if len(shape) != dim or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 2
                                        for v in shape):
            raise CheckpointError(f"{where}: field 'shape' = {shape!r} is not {dim} sizes >= 2")
        check_array(where, arrays, "spins", np.uint8, (1, -(-int(np.prod(shape)) // 8)))
        check_array(where, arrays, "temperatures", np.float64, (1,))
        options = {k: (tuple(v) if isinstance(v, list) else v)
                   for k, v in field(header, "options", dict, path=path).items()}
        options = public_options(options)
        temps = arrays.get("temperatures")
        inst = cls(tuple(shape), float(temps[0]) if temps is not None and temps.size else 1.0,
                   J=field(header, "J", float, path=path), h=field(header, "h", float, path=path),
                   algorithm=field(header, "algorithm", str, path=path),
                   rng=field(header, "rng", str, path=path), seed=field(header, "seed", int, path=path),
                   start="up", device=device, comm=comm, **options)
        N = int(np.prod(shape))
        bits = np.unpackbits(arrays["spins"], axis=1, count=N)
        spins = (1 - 2 * bits.astype(np.int8)).reshape((1,) + tuple(reversed(shape)))
        bstate = field(header, "backend", dict, path=path)
        ens = inst._ens
        problem = backend_state_problem(ens.backend.get_state(),
                                         {k: (tuple(v) if isinstance(v, list) else v) for k, v in bstate.items()})
        if problem:                     # the same file on every rank: every rank refuses it
            raise CheckpointError(f"{where}: the {ens.algorithm}/{ens.rng} generator state {problem}")
        mpi.all_ok(comm, ens.backend.set_spins, spins)
        mpi.all_ok(comm, ens.backend.set_state, bstate)
        ens.backend.exchange_halos()
        ens.resume_settled(checked_settled(where, field(header, "settled", int, minimum=0, path=path),
                                           ens.sweeps))
        return inst

    def __repr__(self):
        return (f"<{type(self).__name__} {'x'.join(map(str, self.shape))} T={self.temperature:g} "
                f"algorithm={self.algorithm} rng={self.rng} on {self.device.name}>")


class Ising2D(_Single):
    """An L x L (or (Lx, Ly)) periodic square lattice at temperature T.

    Ising2D(L, T, *, J=1.0, h=0.0, algorithm="multispin", rng=<algorithm default>,
    seed=0, start="random"|"up"|"down", device=None, **options)
    """
    _ensemble = Ensemble2D


class Ising3D(_Single):
    """An L x L x L (or (Lx, Ly, Lz)) periodic cubic lattice; see Ising2D."""
    _ensemble = Ensemble3D
