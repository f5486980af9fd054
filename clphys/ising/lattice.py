"""Ising lattices on the device: ensembles of replicas.

H = -J sum_<ij> s_i s_j - h sum_i s_i, periodic boundaries, k_B = 1.

    ens = Ensemble2D(64, np.linspace(2.0, 2.5, 16), seed=1)   # 16 replicas, one launch
    ens.sweep(1000)
    ens.energy()                                               # (16,) E/N
    lat = Ising2D(1024, 2.269, algorithm="multispin")          # thin wrapper, 1 replica
    series = lat.sample(1000, every=2)                         # thermalises first
    lat.save("run.npz"); lat = Ising2D.load("run.npz")         # continues bit for bit

A single lattice is an ensemble of one replica (replica 0), so Ising2D(L, T,
seed=s) and replica 0 of Ensemble2D(L, [T, ...], seed=s) give the same spins.
What is decided before the device is in :mod:`clphys.ising.plan`, the run loop
in :mod:`clphys.ising.run`, checkpoints in :mod:`clphys.ising.checkpoints`,
single lattices in :mod:`clphys.ising.single`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .. import _validate
from .. import rng as _rng
from ..progress import check_progress
from ..runtime import check_memory, mpi, resolve_device, run_sliced
from ..runtime.memory import check_host_memory
from . import backends
from ._backend import IsingBackend
from ._device import zeroed_buffer
from .checkpoints import EnsembleCheckpoints
from .multispin_plan import LaunchChoice
from .plan import (
    MAX_SWEEPS,
    STARTS,
    SWEEP_QUEUE,
    check_backend,
    check_temperatures,
    default_algorithm,
    default_therm,
    device_need,
    fits,
    lattice_shape,
    replicas_that_fit,
    split_run,
)
from .run import Run
from .samples import Samples
from .thresholds import metropolis_thresholds


class Ensemble(EnsembleCheckpoints):
    """R independent replicas of one lattice size, updated in one launch.

    temperatures: one per replica (repeat a temperature for many seeds: every
    replica has its own random stream). Use :class:`Ensemble2D` /
    :class:`Ensemble3D`. Options (``wg=``, ``words_per_item=``, ...) go to the
    backend; see docs/ising.md. The device memory the ensemble needs is
    checked before anything is allocated.

    Several MPI ranks: with ``comm`` (an mpi4py communicator; a collective
    call with the same arguments on every rank) the replicas are split over
    the ranks, each keeping the Philox stream of its global replica index,
    so every replica's spins and measurements are bit for bit those of one
    device. sweep() is local; sums(), energy(), magnetization(), spins() and
    sample() are collective and return the whole ensemble's results on rank
    0 (every rank with ``gather="all"``), None elsewhere. Needs a backend
    with a replica offset (multispin, checkerboard) and rng="philox".
    ``replica_offset`` (no comm) is that offset itself: the global index of
    replica 0 of this ensemble.
    """
    dim: Any = None              # 2 or 3 in Ensemble2D / Ensemble3D
    # a multispin launch plan forced by clphys.ising.multispin_plan.tuned (tests,
    # benchmarks); None: the backend's own choice
    _launch: LaunchChoice | None = None

    def __init__(self, L, temperatures, *, J=1.0, h=0.0, algorithm=None, rng=None, seed=0,
                 start="random", device=None, replica_offset=0, comm=None, gather="root", **options):
        self._blank()
        if comm is None:
            self._setup(L, temperatures, J, h, algorithm, rng, seed, start, device, replica_offset,
                        options)
            return
        size, rank = mpi.comm_size_rank(comm)

        def check():
            temps = check_temperatures(temperatures)
            _validate.choice("gather", gather, ("root", "all"))
            if replica_offset != 0:
                raise ValueError("replica_offset is set from comm; give one or the other")
            if temps.size < size:
                raise ValueError(f"{temps.size} replicas cannot be split over {size} MPI ranks: use at "
                                 f"least one replica per rank")
            return temps
        temps = mpi.all_ok(comm, check)
        mpi.agree(comm, "ensemble parameters", L=repr(L), temperatures=temps.tolist(), J=repr(J),
                  h=repr(h), algorithm=repr(algorithm), rng=repr(rng), seed=repr(seed),
                  start=repr(start), options=repr(sorted(options.items())), gather=gather)
        first, count = mpi.split(temps.size, size, rank)
        self._comm, self._gather, self._T_all = comm, gather, temps
        mpi.all_ok(comm, self._setup, L, temps[first:first + count], J, h, algorithm, rng, seed,
                   start, device, first, options)

    def _blank(self):
        """No MPI split yet; refuses the base class."""
        if self.dim is None:
            raise TypeError("Ensemble is the base of Ensemble2D and Ensemble3D: create one of those")
        self._comm, self._gather, self._slab = None, "root", None
        self._T_all, self._r0 = None, 0

    @classmethod
    def _split_lattice(cls, comm, launch, L, temperatures, *, J, h, algorithm, rng, seed, start, device,
                       **options):
        """One lattice split over the ranks of `comm` (``Ising2D/3D(comm=)``), with the
        multispin launch plan `launch` (None: the backend's choice)."""
        self = cls.__new__(cls)
        self._launch = launch
        self._blank()
        mpi.comm_size_rank(comm)
        halo = options.pop("halo", None)        # how deep the halos are, not physics: not saved
        args = (L, temperatures, J, h, algorithm, rng, seed, start, 0, options)
        backend = mpi.all_ok(comm, self._check_args, *args, slab_size=comm.Get_size(), halo=halo)
        mpi.agree(comm, "lattice parameters", L=list(self.shape), T=self._T.tolist(), J=self.J,
                  h=self.h, algorithm=self.algorithm, rng=self.rng, seed=self.seed, start=start,
                  options=repr(sorted(self.options.items())), halo=self._halo)
        self._slab = comm
        mpi.all_ok(comm, self._open, backend, device, start)
        self._backend.exchange_halos()      # every rank has its spins: no one waits for a failed one
        return self

    def _setup(self, L, temperatures, J, h, algorithm, rng, seed, start, device, replica_offset,
               options):
        backend = self._check_args(L, temperatures, J, h, algorithm, rng, seed, start, replica_offset,
                                   options)
        self._open(backend, device, start)

    def _check_args(self, L, temperatures, J, h, algorithm, rng, seed, start, replica_offset, options,
                    slab_size=None, halo=None):
        """Every argument checked (no device work); returns the backend class."""
        shape = lattice_shape(L, self.dim)
        temps = check_temperatures(temperatures)
        J = _validate.real("J", J)
        h = _validate.real("h", h)
        if algorithm is None:
            algorithm = "multispin" if slab_size is not None else default_algorithm(self.dim, shape, rng, options)
        if not isinstance(algorithm, str):
            raise TypeError(f"algorithm must be a string, got {algorithm!r}")
        backend = backends.load(algorithm)
        rng = check_backend(backend, self.dim, shape, rng, options)
        seed = _validate.seed(seed)
        _validate.choice("start", start, STARTS)
        r0 = _validate.integer("replica_offset", replica_offset, 0, 2**32 - len(temps))
        if r0 and not (backend.takes_replica_offset and rng == "philox"):
            raise ValueError(f"algorithm {algorithm!r} with rng {rng!r} cannot continue the replica "
                             f"numbering of another ensemble (a replica offset, or an ensemble split "
                             f"over MPI ranks): use multispin or checkerboard with rng='philox'")
        if self._launch is not None and algorithm != "multispin":
            raise ValueError(f"a forced launch plan is multispin's, not {algorithm!r}'s")
        if slab_size is not None:
            if algorithm != "multispin" or len(temps) != 1:
                raise ValueError(f"a lattice split over MPI ranks runs algorithm 'multispin' (got "
                                 f"{algorithm!r}); run the other algorithms on one device")
            from .slabs import check_halo
            self._halo = check_halo(halo, shape[-1], slab_size)
        self._r0 = r0
        self.shape, self.J, self.h = shape, J, h
        self.algorithm, self.rng, self.seed, self.options = algorithm, rng, seed, dict(options)
        self.n_spins = int(np.prod(shape))
        self._T = temps
        self._thr = self._thresholds(temps)
        return backend

    def _open(self, backend, device, start):
        """Device, memory check, backend, initial spins."""
        self.device = resolve_device(device)
        if self._slab is not None:
            from .slabs import SlabBackend, halo_depth, local_shape
            size, rank = mpi.comm_size_rank(self._slab)
            halo = halo_depth(self.shape[-1], size, self._halo, self.device.facts.is_gpu, len(self.shape))
            local = local_shape(self.shape, size, rank, halo)
            need = SlabBackend.device_bytes(self.device.facts, local, halo, **self._backend_options)
            check_memory(self.device, need, f"rank {rank}'s share {'x'.join(map(str, local))} (with "
                         f"halos) of a {'x'.join(map(str, self.shape))} lattice",
                         "Use more ranks or a smaller lattice.")
            self._resident = need
            self._backend = SlabBackend(self._slab, self.device, self.shape, rng=self.rng, seed=self.seed,
                                        halo=halo, **self._backend_options)
            self._settled = 0
            self._backend.start(STARTS.index(start))
            return
        self._check_memory(backend, len(self._T))
        self._backend = backend(self.device, self.shape, len(self._T), rng=self.rng, seed=self.seed,
                                **self._backend_options)
        if self._r0:
            self._backend.r0 = self._r0
        self._settled = 0          # sweeps since the start, set_spins or a temperature change
        self._start(start)

    # ------------------------------------------------------------ set-up
    @property
    def _backend_options(self) -> dict:
        """The options and any forced launch plan, as the backend takes them."""
        return self.options if self._launch is None else {**self.options, "launch": self._launch}

    def _thresholds(self, temps):
        uniq, index = np.unique(temps, return_inverse=True)
        table = np.stack([metropolis_thresholds(self.dim, T, self.J, self.h) for T in uniq])
        return np.ascontiguousarray(table[index.ravel()])

    def _check_memory(self, backend, R):
        facts = self.device.facts
        need = device_need(backend, facts, self.shape, R, self.rng, self._backend_options)
        if fits(facts, need):
            self._resident = {k: v for k, v in need.items() if "temporary" not in k}
            return
        fit = replicas_that_fit(backend, facts, self.shape, self.rng, self._backend_options)
        size = "x".join(map(str, self.shape))
        hint = (f"use at most {fit} replicas per ensemble (split the run into several ensembles "
                f"with different seeds)" if fit else "use a smaller lattice")
        check_memory(facts, need, f"{type(self).__name__} of {R} replicas of {size}", hint)

    def _start(self, start):
        dev, R = self.device, len(self._T)
        Lz = self.shape[2] if self.dim == 3 else 1
        prg = dev.build("ising/init.cl", dim=self.dim, Lx=self.shape[0], Ly=self.shape[1], Lz=Lz)
        buf = zeroed_buffer(dev, R * self.n_spins)
        k0, k1 = _rng.seed_key(self.seed)
        items = R * 2 * (-(-(self.n_spins // 2) // 4))
        prg.ising_init_spins(dev.queue, (items,), None, buf, np.uint32(R),
                             np.uint32(STARTS.index(start)), np.uint32(k0), np.uint32(k1),
                             np.uint32(self._r0), np.uint32(0))
        self._backend.set_spins_device(buf)

    # ------------------------------------------------------------ properties
    @property
    def n_replicas(self) -> int:
        """Replicas of the whole ensemble (over every MPI rank)."""
        return len(self._T if self._T_all is None else self._T_all)

    @property
    def temperatures(self) -> np.ndarray:
        """Temperature of each replica; assign an array (or a scalar for all)
        between sweeps: only the threshold table changes, nothing recompiles.
        (With comm: every replica's; assign the same values on every rank.)"""
        return (self._T if self._T_all is None else self._T_all).copy()

    @temperatures.setter
    def temperatures(self, T: ArrayLike) -> None:
        self._agree("temperatures", T=mpi.digest(T) if self._mpi() is not None else None)
        whole = self._T if self._T_all is None else self._T_all
        temps = check_temperatures(np.broadcast_to(T, whole.shape) if np.ndim(T) == 0 else T)
        if temps.shape != whole.shape:
            raise ValueError(f"temperatures must have {whole.size} entries, got {temps.size}")
        if self._T_all is not None:
            self._T_all = temps
            temps = temps[self._r0:self._r0 + len(self._T)]
        if not np.array_equal(temps, self._T):
            self._settled = 0
        self._thr, self._T = self._thresholds(temps), temps

    @property
    def sweeps(self) -> int:
        """Sweeps made since the start, at any temperature."""
        st = self._backend.get_state()
        return int(st["sweeps"])

    @property
    def settled(self) -> int:
        """Sweeps made at the current temperatures since the start, the last
        set_spins or the last temperature change (sample() counts them
        towards its thermalisation)."""
        return self._settled

    # ------------------------------------------------------------ for the package
    # (the run loop, checkpoints, binder_scan, the CLI and the benchmarks)
    @property
    def backend(self) -> IsingBackend:
        """The kernel backend of this process's replicas."""
        return self._backend

    @property
    def slab_comm(self) -> Any:
        """The communicator of a lattice split over MPI ranks, else None."""
        return self._slab

    @property
    def thresholds(self) -> np.ndarray:
        """uint32 Metropolis thresholds (R, 2, 2 dim + 1) of this process's replicas."""
        return self._thr

    @property
    def local_temperatures(self) -> np.ndarray:
        """A copy of the temperatures of this process's replicas."""
        return self._T.copy()

    @property
    def local_replicas(self) -> int:
        """Replicas on this process."""
        return len(self._T)

    @property
    def resident_bytes(self) -> dict:
        """{buffer: bytes} the ensemble keeps on the device."""
        return dict(self._resident)

    def count_settled(self, n: int) -> None:
        """Count n sweeps made at the current temperatures (by a Run)."""
        self._settled += n

    def resume_settled(self, settled: int) -> None:
        """Set the sweeps made at the current temperatures (a loaded checkpoint)."""
        self._settled = settled

    # ------------------------------------------------------------ dynamics
    def sweep(self, n: int = 1) -> Ensemble:
        """n full sweeps (colour 0 then colour 1). Up to SWEEP_QUEUE sweeps are
        enqueued without host sync; more run in time-bounded slices (Ctrl-C
        stops at the next slice with clphys.runtime.Interrupted)."""
        if self._slab is not None:          # (an ensemble split by replicas sweeps alone)
            mpi.check_call(self._slab, "sweep", n=n)
        n = _validate.integer("n", n, 0, MAX_SWEEPS)
        if n <= SWEEP_QUEUE and self._slab is None:
            if n:
                self._backend.sweep(n, self._thr)
                self._settled += n
            return self

        def advance(start, k):
            self._backend.sweep(k, self._thr)
            self._settled += k
        if n:
            run_sliced(n, advance, self.device.queue, what="sweeps", comm=self._slab)
        return self

    def _mpi(self):
        """The communicator of a split lattice or ensemble, else None."""
        return self._slab if self._slab is not None else self._comm

    def _agree(self, call, **args):
        """At the start of a collective method: the same call with the same arguments on
        every rank, else ValueError on every rank (see runtime.mpi.check_call)."""
        comm = self._mpi()
        if comm is not None:
            mpi.check_call(comm, call, **args)

    def _gathered(self, part, axis=0):
        """This rank's per-replica array joined with the other ranks' (collective
        with comm: on rank 0, on every rank with gather='all', else None)."""
        if self._comm is None:
            return part
        got = self._comm.gather(part, root=0)
        whole = None if got is None else np.concatenate(got, axis=axis)
        return self._comm.bcast(whole, root=0) if self._gather == "all" else whole

    def sums(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(bond sum, magnetization) per replica, int64, reduced on the device."""
        self._agree("sums")
        both = self._gathered(np.stack(self._backend.sums(), axis=1))
        return None if both is None else (both[:, 0].copy(), both[:, 1].copy())

    def energy(self) -> np.ndarray | None:
        """E/N per replica."""
        sums = self.sums()
        return None if sums is None else (-self.J * sums[0] - self.h * sums[1]) / self.n_spins

    def magnetization(self) -> np.ndarray | None:
        """M/N per replica (signed)."""
        sums = self.sums()
        return None if sums is None else sums[1] / self.n_spins

    def _check_spin_copy(self):
        if self._slab is not None:
            from .slabs import check_gather
            return check_gather(self.shape)
        nbytes = len(self._T) * self.n_spins
        what = f"reading the spins of {len(self._T)} replicas of {'x'.join(map(str, self.shape))}"
        check_memory(self.device, {**self._resident, "int8 copy of the spins": nbytes}, what,
                     "use fewer replicas per ensemble")
        check_host_memory(nbytes, what, "Use fewer replicas per ensemble.")

    def local_spins(self) -> np.ndarray:
        """int8 spins of this process's replicas (no collective call)."""
        self._check_spin_copy()
        return self._backend.spins()

    def spins(self) -> np.ndarray | None:
        """int8 +-1 array (R, Ly, Lx) or (R, Lz, Ly, Lx)."""
        self._agree("spins")
        if self._comm is not None:
            check_host_memory(self.n_replicas * self.n_spins, "gathering the spins of every replica",
                              "Use fewer replicas per ensemble.")
        return self._gathered(self.local_spins())

    def set_spins(self, spins: ArrayLike) -> None:
        """Set every replica from (R, Ly, Lx) / (R, Lz, Ly, Lx) +-1 values, or
        all replicas from one (Ly, Lx) / (Lz, Ly, Lx) array."""
        self._agree("set_spins", spins=mpi.digest(spins) if self._mpi() is not None else None)
        lat = tuple(reversed(self.shape))
        arr = np.asarray(spins)
        if arr.shape == lat:
            arr = np.broadcast_to(arr, (self.n_replicas,) + lat)
        if arr.shape != (self.n_replicas,) + lat:
            raise ValueError(f"spins must have shape {(self.n_replicas,) + lat} or {lat}, got {arr.shape}")
        if arr.dtype.kind not in "iuf" or not np.all((arr == 1) | (arr == -1)):
            raise ValueError("spins must hold only +1 and -1")
        if self._comm is not None:
            arr = arr[self._r0:self._r0 + len(self._T)]
        self._check_spin_copy()
        self._backend.set_spins(np.ascontiguousarray(arr, dtype=np.int8))
        self._settled = 0

    # ------------------------------------------------------------ measurements
    def plan_run(self, n_measure: int, every: int = 1, n_therm: int | None = None) -> Run:
        """The :class:`clphys.ising.run.Run` that :meth:`sample` makes (its
        arguments checked); run() does its sweeps, samples() its series."""
        n_measure = _validate.integer("n_measure", n_measure, 1)
        every = _validate.integer("every", every, 1)
        if n_therm is None:
            n_therm = max(0, default_therm(n_measure * every) - self._settled)
        n_therm = _validate.integer("n_therm", n_therm, 0)
        return Run(self, n_therm, n_measure, every, therm_before=self._settled)

    def sample(self, n_measure: int, every: int = 1, n_therm: int | None = None,
               progress: bool | Callable | None = None) -> Samples | None:
        """n_therm sweeps, then n_measure times (`every` sweeps, measure).

        n_therm=None thermalises for a quarter of the measured sweeps
        (n_measure * every / 4), less the sweeps the lattice already made at
        its current temperature (:attr:`settled`); the total is reported as
        ``Samples.n_therm``. Returns :class:`Samples` with E/N and M/N series
        of shape (R, n_measure). The sums are reduced on the device into a
        buffer read back once per slice of work (slices of ~0.25 s: the
        progress bar counts completed sweeps and Ctrl-C stops at the next
        slice with :class:`clphys.runtime.Interrupted`). Warns
        (TrappedWarning) about replicas caught in a deterministic cycle of
        the update (see docs/ising.md, "Small lattices").
        """
        self._agree("sample", n_measure=n_measure, every=every, n_therm=n_therm)
        check_progress(progress)
        if self._comm is not None and self._comm.Get_rank():
            progress = False
        run = self.plan_run(n_measure, every, n_therm)
        run.run(progress)
        return self._gathered_samples(run.samples())

    def _gathered_samples(self, s: Samples) -> Samples | None:
        """The Samples of every replica (collective with comm, see sums())."""
        if self._comm is None:
            return s
        e = self._gathered(s.energy)
        m = self._gathered(s.magnetization)
        trapped = self._gathered(np.asarray(s.trapped))
        if e is None:
            return None
        return Samples(self.temperatures, s.n_spins, e, m, n_therm=s.n_therm, every=s.every,
                       trapped=trapped)

    def __repr__(self):
        return (f"<{type(self).__name__} {'x'.join(map(str, self.shape))} R={self.n_replicas} "
                f"algorithm={self.algorithm} rng={self.rng} on {self.device.name}>")

    def _init_ensemble(self, *args, **kwargs) -> None:
        """Ensemble's own __init__, for the loaders in checkpoints.py (a subclass's
        __init__ takes other arguments)."""
        Ensemble.__init__(self, *args, **kwargs)


class Ensemble2D(Ensemble):
    """Replicas of an L x L (or (Lx, Ly)) square lattice; see :class:`Ensemble`."""
    dim = 2


class Ensemble3D(Ensemble):
    """Replicas of an L x L x L (or (Lx, Ly, Lz)) cubic lattice; see :class:`Ensemble`."""
    dim = 3



__all__ = ["Ensemble", "Ensemble2D", "Ensemble3D", "STARTS", "default_therm", "split_run", "device_need",
           "replicas_that_fit"]
