"""Ising lattices on the device: ensembles of replicas and single lattices.

H = -J sum_<ij> s_i s_j - h sum_i s_i, periodic boundaries, k_B = 1.

    ens = Ensemble2D(64, np.linspace(2.0, 2.5, 16), seed=1)   # 16 replicas, one launch
    ens.sweep(1000)
    ens.energy()                                               # (16,) E/N
    lat = Ising2D(1024, 2.269, algorithm="multispin")          # thin wrapper, 1 replica
    series = lat.sample(1000, every=2)                         # thermalises first
    lat.save("run.npz"); lat = Ising2D.load("run.npz")         # continues bit for bit

A single lattice is an ensemble of one replica (replica 0), so Ising2D(L, T,
seed=s) and replica 0 of Ensemble2D(L, [T, ...], seed=s) give the same spins.
"""

from __future__ import annotations

import inspect
import math
import os
import warnings

import numpy as np
import pyopencl as cl

from .. import _validate
from .. import rng as _rng
from ..progress import check_progress
from ..runtime import check_memory, items_that_fit, mpi, resolve_device, run_sliced
from ..runtime.checkpoint import CheckpointError, field, load_checkpoint, save_checkpoint
from ..runtime.files import check_output_path
from ..runtime.memory import check_host_memory
from . import backends, reference
from ._device import check_options, zeroed_buffer
from .samples import Samples, TrappedWarning
from .thresholds import metropolis_thresholds

STARTS = ("random", "up", "down")
SWEEP_QUEUE = 256            # sweep(n) enqueues at most this many without a sync
MAX_SWEEPS = 2**62           # the Philox sweep counter has 2^63 - 1 values (one reserved)
STATE_FORMAT = "clphys.ising/1"
CHECKPOINT_KIND = "ising-ensemble"
_MEASURE_BYTES = 16          # two int64 per replica and measurement
_CHUNK_BYTES = 32 << 20      # device buffer for measurements between read-backs
# sample()'s default thermalisation: this fraction of the measured sweeps (so a
# run long enough for its errors, >= 50 tau_int, thermalises >= 12 tau_int)
THERM_FRACTION = 0.25
_TRAP_TAIL = 8               # measurements checked for an exactly periodic tail
_TRAP_READ_LIMIT = 256 << 20  # largest spin read-back for the trap check


def default_therm(measured_sweeps: int) -> int:
    """Thermalisation sweeps used when none are given: a quarter of the
    measured sweeps (sample() and `clphys ising`; binder_scan, whose ordered
    start must relax near Tc, uses as many as it measures)."""
    return int(measured_sweeps * THERM_FRACTION)


def split_run(total: int, every: int, n_therm=None):
    """(n_therm, n_measure) of a run of `total` sweeps measured every `every`
    sweeps: n_therm defaults to the default_therm rule (a fifth of the total
    is a quarter of the rest), but leaves at least one measurement where
    total >= every; sweeps that do not fill a measurement interval go to the
    thermalisation."""
    if n_therm is None:
        n_therm = int(total * THERM_FRACTION / (1 + THERM_FRACTION))
        if total >= every:              # never the sweeps of the one measurement total and every allow
            n_therm = min(n_therm, total - every)
    n_measure = (total - n_therm) // every
    return total - n_measure * every, n_measure


def _shape(L, dim):
    """(Lx, Ly[, Lz]) from an int or a tuple of `dim` ints."""
    if isinstance(L, (tuple, list)):
        if len(L) != dim:
            raise ValueError(f"L must be an int or a tuple of {dim} ints (Lx, Ly{', Lz' if dim == 3 else ''}), "
                             f"got {L!r}")
        return tuple(_validate.integer(f"L{a}", v, 2) for a, v in zip("xyz", L))
    return (_validate.integer("L", L, 2),) * dim


def _temperatures(T, name="temperatures"):
    arr = _validate.finite_array(name, T, dtype=float)
    arr = np.atleast_1d(arr)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a number or a 1-D sequence, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    if np.any(arr <= 0):
        raise ValueError(f"{name} must all be > 0, got {arr[arr <= 0][0]}")
    return arr.copy()


def _backend_options(backend):
    """Names of the options the backend accepts (its `options`, or its
    constructor's keyword arguments)."""
    if hasattr(backend, "options"):
        return set(backend.options)
    params = inspect.signature(backend.__init__).parameters
    return {k for k, p in params.items() if p.kind is p.KEYWORD_ONLY and k not in ("rng", "seed")}


def _check_backend(backend, dim, shape, rng, options):
    """The rng to use (the backend's default for None), once `backend` is
    known to take a lattice of `dim` and `shape`, that rng and these options
    (no device work); ValueError or TypeError naming what it does not take."""
    if dim not in backend.dims:
        raise ValueError(f"algorithm {backend.algorithm!r} supports dim {backend.dims}, not {dim}")
    rng = backends.check_rng(backend, rng)
    backend.check_shape(shape)
    if hasattr(backend, "check_options"):       # optional: option values, no device
        backend.check_options(options)
    elif hasattr(backend, "options"):
        check_options(backend, options)
    else:
        unknown = sorted(set(options) - _backend_options(backend))
        if unknown:
            raise TypeError(f"algorithm {backend.algorithm!r} got unknown option(s) {', '.join(unknown)}; "
                            f"it accepts: {', '.join(sorted(_backend_options(backend)))}")
    return rng


def _default_algorithm(dim, shape, rng, options) -> str:
    """The algorithm used when none is given: the first of the registry that
    takes the lattice, rng and options the user chose (an L = 6 lattice or
    rng="lcg" runs the checkerboard, which multispin refuses). When none
    does, the default's own error says why, naming it as the default."""
    for name in backends.available():
        try:
            _check_backend(backends.load(name), dim, shape, rng, options)
        except (ValueError, TypeError):
            continue
        return name
    try:
        _check_backend(backends.load(backends.DEFAULT_ALGORITHM), dim, shape, rng, options)
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"no algorithm takes these arguments (algorithm=None); the default "
                        f"{backends.DEFAULT_ALGORITHM!r} says: {exc}") from None
    return backends.DEFAULT_ALGORITHM


def device_need(backend, facts, shape, n_replicas, rng, options) -> dict:
    """{buffer: bytes} an ensemble needs on the device at its peak (while it
    makes its start): the backend's buffers and the int8 start buffer."""
    N = int(np.prod(shape))
    if hasattr(backend, "device_bytes"):
        need = dict(backend.device_bytes(facts, shape, n_replicas, rng=rng, **options))
    else:                                   # a backend that does not say: one byte a spin
        need = {"spins": n_replicas * N}
    need["start (int8, temporary)"] = n_replicas * N
    return need


def replicas_that_fit(backend, facts, shape, rng, options, limit=None) -> int:
    """How many replicas of `shape` fit on the device at once (0 if none)."""
    one, two = (device_need(backend, facts, shape, r, rng, options) for r in (1, 2))
    per = sum(two.values()) - sum(one.values())
    largest = max(two[k] - one[k] for k in one)
    n = items_that_fit(facts, max(1, per), sum(one.values()) - per, largest_per_item=max(1, largest),
                       limit=limit)
    while n > 0 and not _fits(facts, device_need(backend, facts, shape, n, rng, options)):
        n -= max(1, n // 64)
    return n


def _fits(facts, need):
    try:
        check_memory(facts, need, "")
        return True
    except ValueError:
        return False


class _Run:
    """n_therm sweeps, then n_measure times (`every` sweeps, measure), done in
    slices: step(n) advances n sweeps. Measurements (bond sum, magnetization
    per replica) go to a device buffer and are read back once per slice."""

    def __init__(self, ens, n_therm, n_measure, every, done=0, measured=None, therm_before=0):
        self.ens, self.n_therm, self.n_measure, self.every = ens, n_therm, n_measure, every
        self.total = n_therm + n_measure * every
        self.therm_before = therm_before      # sweeps at this temperature before the run
        R = len(ens._T)                       # this rank's replicas
        # the int64 sums and the E/N, M/N series made from them
        check_host_memory(32 * R * n_measure, f"{n_measure} measurements of {R} replicas",
                          "Measure less often (every=) or fewer times, or use fewer replicas.")
        self.out = np.zeros((n_measure, R, 2), dtype=np.int64)
        self.done = done
        if measured is not None:
            self.out[:len(measured)] = measured
        self.cap = max(2, min(n_measure + 1, _CHUNK_BYTES // (_MEASURE_BYTES * R)))
        self.largest = max(1, (self.cap - 1) * every)        # a slice holds <= cap measurements
        self._buf = None
        if n_measure and hasattr(ens._backend, "measure_into"):
            check_memory(ens.device, {**ens._resident, "measurements": _MEASURE_BYTES * R * self.cap},
                         f"measuring {R} replicas", "use fewer replicas per ensemble")

    @property
    def measured(self) -> int:
        return max(0, self.done - self.n_therm) // self.every

    def step(self, n):
        ens = self.ens
        be, thr = ens._backend, ens._thr
        fast = hasattr(be, "measure_into")
        s, end = self.done, self.done + n
        if s < self.n_therm:
            k = min(end, self.n_therm) - s
            be.sweep(k, thr)
            s += k
        m0, local = self.measured, 0
        while s < end:
            r = (s - self.n_therm) % self.every
            k = min(self.every - r, end - s)
            be.sweep(k, thr)
            s += k
            if r + k == self.every:
                m = (s - self.n_therm) // self.every - 1
                if fast:
                    if self._buf is None:
                        self._buf = cl.Buffer(ens.device.context, cl.mem_flags.READ_WRITE,
                                              _MEASURE_BYTES * len(ens._T) * self.cap)
                    be.measure_into(self._buf, local)
                    local += 1
                else:
                    self.out[m, :, 0], self.out[m, :, 1] = be.sums()
        if local:
            cl.enqueue_copy(ens.device.queue, self.out[m0:m0 + local], self._buf, is_blocking=True)
        self.done = end
        ens._settled += n

    def run(self, progress=None, bar=None, total=None):
        """Do the remaining sweeps (or `total` of them) in time-bounded slices."""
        todo = self.total - self.done if total is None else total
        run_sliced(todo, lambda start, n: self.step(n), self.ens.device.queue, progress=progress,
                   bar=bar, label="ising", what="sweeps", largest=self.largest, comm=self.ens._slab)

    def samples(self) -> Samples:
        ens = self.ens
        m = self.measured
        out = self.out[:m]
        if hasattr(ens._backend, "reduce_measurements"):     # a lattice split over ranks
            out = out.copy()
            ens._backend.reduce_measurements(out)
        bond, mag = out[:, :, 0].T, out[:, :, 1].T
        energy = (-ens.J * bond - ens.h * mag) / ens.n_spins
        return Samples(ens._T.copy(), ens.n_spins, energy, mag / ens.n_spins,
                       n_therm=self.therm_before + self.n_therm, every=self.every,
                       trapped=ens._trapped(bond, mag, self.every))


class Ensemble:
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
    dim = None

    def __init__(self, L, temperatures, *, J=1.0, h=0.0, algorithm=None, rng=None, seed=0,
                 start="random", device=None, replica_offset=0, comm=None, gather="root",
                 _slab_comm=None, **options):
        self._comm, self._gather, self._slab = None, "root", None
        self._T_all, self._r0 = None, 0
        if _slab_comm is not None:          # one lattice split over ranks (Ising2D/3D(comm=))
            mpi.comm_size_rank(_slab_comm)
            options = dict(options)
            halo = options.pop("halo", None)        # how deep the halos are, not physics: not saved
            args = (L, temperatures, J, h, algorithm, rng, seed, start, replica_offset, options)
            backend = mpi.all_ok(_slab_comm, self._check_args, *args, slab_size=_slab_comm.Get_size(),
                                 halo=halo)
            mpi.agree(_slab_comm, "lattice parameters", L=list(self.shape), T=self._T.tolist(), J=self.J,
                      h=self.h, algorithm=self.algorithm, rng=self.rng, seed=self.seed, start=start,
                      options=repr(sorted(self.options.items())), halo=self._halo)
            self._slab = _slab_comm
            mpi.all_ok(_slab_comm, self._open, backend, device, start)
            self._backend.exchange_halos()      # every rank has its spins: no one waits for a failed one
            return
        if comm is None:
            self._setup(L, temperatures, J, h, algorithm, rng, seed, start, device, replica_offset,
                        options)
            return
        size, rank = mpi.comm_size_rank(comm)

        def check():
            temps = _temperatures(temperatures)
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

    def _setup(self, L, temperatures, J, h, algorithm, rng, seed, start, device, replica_offset,
               options):
        backend = self._check_args(L, temperatures, J, h, algorithm, rng, seed, start, replica_offset,
                                   options)
        self._open(backend, device, start)

    def _check_args(self, L, temperatures, J, h, algorithm, rng, seed, start, replica_offset, options,
                    slab_size=None, halo=None):
        """Every argument checked (no device work); returns the backend class."""
        shape = _shape(L, self.dim)
        temps = _temperatures(temperatures)
        J = _validate.real("J", J)
        h = _validate.real("h", h)
        if algorithm is None:
            algorithm = "multispin" if slab_size is not None else _default_algorithm(self.dim, shape, rng, options)
        if not isinstance(algorithm, str):
            raise TypeError(f"algorithm must be a string, got {algorithm!r}")
        backend = backends.load(algorithm)
        rng = _check_backend(backend, self.dim, shape, rng, options)
        seed = _validate.seed(seed)
        _validate.choice("start", start, STARTS)
        r0 = _validate.integer("replica_offset", replica_offset, 0, 2**32 - len(temps))
        if r0 and not (hasattr(backend, "r0") and rng == "philox"):
            raise ValueError(f"algorithm {algorithm!r} with rng {rng!r} cannot continue the replica "
                             f"numbering of another ensemble (a replica offset, or an ensemble split "
                             f"over MPI ranks): use multispin or checkerboard with rng='philox'")
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
            halo = halo_depth(self.shape[-1], size, self._halo, self.device.facts.is_gpu)
            local = local_shape(self.shape, size, rank, halo)
            need = SlabBackend.device_bytes(self.device.facts, local, halo, **self.options)
            check_memory(self.device, need, f"rank {rank}'s share {'x'.join(map(str, local))} (with "
                         f"halos) of a {'x'.join(map(str, self.shape))} lattice",
                         "Use more ranks or a smaller lattice.")
            self._resident = need
            self._backend = SlabBackend(self._slab, self.device, self.shape, rng=self.rng, seed=self.seed,
                                        halo=halo, **self.options)
            self._settled = 0
            self._backend.start(STARTS.index(start))
            return
        self._check_memory(backend, len(self._T))
        self._backend = backend(self.device, self.shape, len(self._T), rng=self.rng, seed=self.seed,
                                **self.options)
        if self._r0:
            self._backend.r0 = self._r0
        self._settled = 0          # sweeps since the start, set_spins or a temperature change
        self._start(start)

    # ------------------------------------------------------------ set-up
    def _thresholds(self, temps):
        uniq, index = np.unique(temps, return_inverse=True)
        table = np.stack([metropolis_thresholds(self.dim, T, self.J, self.h) for T in uniq])
        return np.ascontiguousarray(table[index.ravel()])

    def _check_memory(self, backend, R):
        facts = self.device.facts
        need = device_need(backend, facts, self.shape, R, self.rng, self.options)
        if _fits(facts, need):
            self._resident = {k: v for k, v in need.items() if "temporary" not in k}
            return
        fit = replicas_that_fit(backend, facts, self.shape, self.rng, self.options)
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
        if hasattr(self._backend, "set_spins_device"):
            self._backend.set_spins_device(buf)
        else:
            host = np.empty((R,) + tuple(reversed(self.shape)), dtype=np.int8)
            cl.enqueue_copy(dev.queue, host, buf)
            self._backend.set_spins(host)

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
    def temperatures(self, T):
        self._agree("temperatures", T=mpi.digest(T) if self._mpi() is not None else None)
        whole = self._T if self._T_all is None else self._T_all
        temps = _temperatures(np.broadcast_to(T, whole.shape) if np.ndim(T) == 0 else T)
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

    # ------------------------------------------------------------ dynamics
    def sweep(self, n=1):
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

    def sums(self):
        """(bond sum, magnetization) per replica, int64, reduced on the device."""
        self._agree("sums")
        both = self._gathered(np.stack(self._backend.sums(), axis=1))
        return None if both is None else (both[:, 0].copy(), both[:, 1].copy())

    def energy(self) -> np.ndarray:
        """E/N per replica."""
        sums = self.sums()
        return None if sums is None else (-self.J * sums[0] - self.h * sums[1]) / self.n_spins

    def magnetization(self) -> np.ndarray:
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

    def _local_spins(self) -> np.ndarray:
        self._check_spin_copy()
        return self._backend.spins()

    def spins(self) -> np.ndarray:
        """int8 +-1 array (R, Ly, Lx) or (R, Lz, Ly, Lx)."""
        self._agree("spins")
        if self._comm is not None:
            check_host_memory(self.n_replicas * self.n_spins, "gathering the spins of every replica",
                              "Use fewer replicas per ensemble.")
        return self._gathered(self._local_spins())

    def set_spins(self, spins):
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
    def _run(self, n_measure, every, n_therm):
        n_measure = _validate.integer("n_measure", n_measure, 1)
        every = _validate.integer("every", every, 1)
        if n_therm is None:
            n_therm = max(0, default_therm(n_measure * every) - self._settled)
        n_therm = _validate.integer("n_therm", n_therm, 0)
        return _Run(self, n_therm, n_measure, every, therm_before=self._settled)

    def sample(self, n_measure, every=1, n_therm=None, progress=None) -> Samples:
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
        run = self._run(n_measure, every, n_therm)
        run.run(progress)
        return self._gathered_samples(run.samples())

    def _gathered_samples(self, s: Samples) -> Samples:
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

    def _trapped(self, bond, mag, every):
        """(R,) bool: replicas in a deterministic cycle of the checkerboard
        update. Candidates have an exactly periodic (period 2 sweeps) tail of
        measurements; their spins confirm it (clphys.ising.reference.trapped)."""
        R, n = bond.shape
        trapped = np.zeros(R, dtype=bool)
        lag = 1 if every % 2 == 0 else 2
        tail = min(n, _TRAP_TAIL)
        if self.algorithm not in backends.PLAIN_ORDER or tail < lag + 2 or self._slab is not None:
            return trapped
        b, m = bond[:, n - tail:], mag[:, n - tail:]
        cand = np.all(b[:, lag:] == b[:, :-lag], axis=1) & np.all(m[:, lag:] == m[:, :-lag], axis=1)
        if not cand.any() or R * self.n_spins > _TRAP_READ_LIMIT:
            return trapped
        trapped[cand] = reference.trapped(self._local_spins()[cand], self._thr[cand])
        if trapped.any():
            idx = np.nonzero(trapped)[0]
            shown = ", ".join(map(str, idx[:8])) + (", ..." if idx.size > 8 else "")
            warnings.warn(f"{idx.size} of {R} replicas (replica {shown}) are trapped in a deterministic "
                          f"period-2 cycle of the checkerboard update (every spin of a colour flips with "
                          f"probability 1): their measurements are not Boltzmann samples; Samples.trapped "
                          f"marks them. Use a larger lattice (see docs/ising.md, Small lattices)",
                          TrappedWarning, stacklevel=4)
        return trapped

    # ------------------------------------------------------------ checkpoints
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
    def from_state(cls, state, device=None):
        """Rebuild an ensemble from :meth:`state` (on `device`, any device)."""
        inst = cls.__new__(cls)
        inst._restore(state, device, single=False)
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
            temps = _temperatures(state["temperatures"], "state['temperatures']")
            if single and len(temps) != 1:
                raise ValueError("state holds an ensemble; use Ensemble2D/3D.from_state")
            Ensemble.__init__(self, tuple(state["shape"]), temps, J=state["J"], h=state["h"],
                              algorithm=state["algorithm"], rng=state["rng"], seed=state["seed"],
                              start="up", device=device, **state["options"])
        except TypeError as exc:           # a value of another type: the state is malformed
            raise ValueError(f"state is malformed: {exc}") from None
        self.set_spins(state["spins"])
        problem = _backend_state_problem(self._backend.get_state(), state["backend"])
        if problem:
            raise ValueError(f"state['backend']: the {self.algorithm}/{self.rng} generator state {problem}")
        try:
            self._backend.set_state(state["backend"])
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"state['backend'] is malformed: {exc!r}") from None
        settled = state.get("settled", 0)
        self._settled = _validate.integer("state['settled']", settled, 0, self.sweeps)

    def _checkpoint(self):
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
        options = {**{k: v for k, v in scalars.items() if k in _backend_options(type(self._backend))},
                   **{k: (list(v) if isinstance(v, tuple) else v) for k, v in self.options.items()
                      if v is not None}}
        header = {"dim": self.dim, "shape": list(self.shape), "replicas": self.n_replicas,
                  "J": self.J, "h": self.h, "algorithm": self.algorithm, "rng": self.rng,
                  "seed": self.seed, "options": options,
                  "settled": self._settled, "backend": scalars}
        return header, arrays

    def save(self, path):
        """Write a checkpoint to `path` (.npz; written to a temporary name and
        renamed): spins (1 bit each), temperatures, generator counters and
        states, parameters, in the clphys checkpoint format (plain arrays and a
        JSON header, loadable with allow_pickle=False)."""
        self._no_split_checkpoint()
        if self._slab is not None:        # a lattice split over ranks: rank 0 writes the whole of it
            self._agree("save", path=os.fspath(path) if isinstance(path, (str, os.PathLike))
                        else repr(path))
            path = mpi.all_ok(self._slab, check_output_path, path, "path", (".npz",))
            header, arrays = self._checkpoint()
            root = self._slab.Get_rank() == 0
            mpi.all_ok(self._slab, lambda: root and save_checkpoint(path, CHECKPOINT_KIND, header, arrays))
            return
        path = check_output_path(path, "path", (".npz",))
        header, arrays = self._checkpoint()
        save_checkpoint(path, CHECKPOINT_KIND, header, arrays)

    @classmethod
    def load(cls, path, device=None):
        """The ensemble saved at `path` by :meth:`save`, on `device` (any
        device); it continues bit for bit. Every field is checked:
        :class:`clphys.runtime.checkpoint.CheckpointError` (a ValueError)
        says what is wrong."""
        header, arrays = load_checkpoint(path, CHECKPOINT_KIND)
        inst = cls.__new__(cls)
        inst._from_checkpoint(header, arrays, str(path), device, single=False)
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
            _check_array(where, arrays, name, dtype, shp)
        barrays = {k[len("backend."):]: v for k, v in arrays.items() if k.startswith("backend.")}
        unexpected = sorted(set(arrays) - set(want) - {f"backend.{k}" for k in barrays} - set(extra))
        if unexpected:
            raise CheckpointError(f"{where} has unexpected arrays {unexpected}")
        options = {k: (tuple(v) if isinstance(v, list) else v) for k, v in options.items()}
        try:
            temps = _temperatures(arrays["temperatures"])
            Ensemble.__init__(self, tuple(shape), temps, J=J, h=h, algorithm=algorithm, rng=rng,
                              seed=seed, start="up", device=device, **options)
        except (ValueError, TypeError) as exc:
            raise CheckpointError(f"{where}: {exc}") from None
        fresh = self._backend.get_state()
        loaded = {**{k: (tuple(v) if isinstance(v, list) else v) for k, v in bscalars.items()}, **barrays}
        for k, v in fresh.items():
            if isinstance(v, np.ndarray) and k in loaded:
                _check_array(where, arrays, f"backend.{k}", v.dtype, v.shape)
        problem = _backend_state_problem(fresh, loaded)
        if problem:
            raise CheckpointError(f"{where}: the {algorithm}/{rng} generator state {problem}")
        bits = np.unpackbits(arrays["spins"], axis=1, count=N)
        spins = (1 - 2 * bits.astype(np.int8)).reshape((R,) + tuple(reversed(shape)))
        try:
            self._backend.set_state(loaded)
        except (ValueError, TypeError, KeyError) as exc:
            raise CheckpointError(f"{where}: {exc}") from None
        self.set_spins(spins)
        self._settled = _checked_settled(where, settled, self.sweeps)

    def __repr__(self):
        return (f"<{type(self).__name__} {'x'.join(map(str, self.shape))} R={self.n_replicas} "
                f"algorithm={self.algorithm} rng={self.rng} on {self.device.name}>")


def _backend_state_problem(fresh: dict, loaded: dict) -> str | None:
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


def _checked_settled(where, settled, sweeps) -> int:
    """The `settled` counter of a checkpoint: the sweeps at the current
    temperature are some of the sweeps made since the start."""
    if settled > sweeps:
        raise CheckpointError(f"{where}: field 'settled' = {settled} exceeds the {sweeps} sweeps the "
                              f"lattice made since its start")
    return settled


def _check_array(where, arrays, name, dtype, shape):
    if name not in arrays:
        raise CheckpointError(f"{where} lacks the array {name!r}")
    arr = arrays[name]
    if arr.dtype != np.dtype(dtype):
        raise CheckpointError(f"{where}: array {name!r} has dtype {arr.dtype}, expected {np.dtype(dtype)}")
    if arr.shape != tuple(shape):
        raise CheckpointError(f"{where}: array {name!r} has shape {arr.shape}, expected {tuple(shape)} "
                              f"(a file from another lattice size or number of replicas?)")


class Ensemble2D(Ensemble):
    """Replicas of an L x L (or (Lx, Ly)) square lattice; see :class:`Ensemble`."""
    dim = 2


class Ensemble3D(Ensemble):
    """Replicas of an L x L x L (or (Lx, Ly, Lz)) cubic lattice; see :class:`Ensemble`."""
    dim = 3


class _Single:
    """One lattice: an ensemble of one replica with scalar results."""
    _ensemble = None

    def __init__(self, L, T, *, J=1.0, h=0.0, algorithm=None, rng=None, seed=0, start="random",
                 device=None, comm=None, **options):
        if comm is not None:
            T = mpi.all_ok(comm, _validate.real, "T", T, 0.0, None, strict_min=True)
        else:
            T = _validate.real("T", T, minimum=0.0, strict_min=True)
            if "halo" in options:
                raise ValueError("halo (slabs per side of a lattice split over MPI ranks) needs comm")
        self._ens = self._ensemble(L, [T], J=J, h=h, algorithm=algorithm, rng=rng, seed=seed,
                                   start=start, device=device, _slab_comm=comm, **options)

    @property
    def local_shape(self) -> tuple:
        """This rank's part of the lattice, (Lx, rows) in 2D, (Lx, Ly, planes) in
        3D (the whole shape on one device)."""
        be = self._ens._backend
        return be.local_shape[:-1] + (be.own,) if self._ens._slab is not None else self.shape

    @property
    def halo(self) -> int | None:
        """Halo slabs per side of a lattice split over ranks (one exchange every
        halo / 2 sweeps; 1: every half-sweep), None on one device."""
        return self._ens._backend.h if self._ens._slab is not None else None

    @property
    def halo_times(self) -> dict | None:
        """Host seconds of the halo path of a lattice split over ranks, and the
        half-sweeps and exchanges made (see clphys.ising.slabs), None on one
        device."""
        be = self._ens._backend
        return dict(be.halo_times) if self._ens._slab is not None else None

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
    def temperature(self, T):
        self._ens.temperatures = [_validate.real("temperature", T, minimum=0.0, strict_min=True)]

    def sweep(self, n=1):
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

    def set_spins(self, spins):
        lat = tuple(reversed(self.shape))
        arr = np.asarray(spins)
        if arr.shape != lat:
            raise ValueError(f"spins must have shape {lat}, got {arr.shape}")
        self._ens.set_spins(arr)

    def sample(self, n_measure, every=1, n_therm=None, progress=None) -> Samples:
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
    def from_state(cls, state, device=None):
        inst = cls.__new__(cls)
        inst._ens = cls._ensemble.__new__(cls._ensemble)
        inst._ens._restore(state, device, single=True)
        return inst

    def save(self, path):
        """Write a checkpoint (see Ensemble.save)."""
        self._ens.save(path)

    @classmethod
    def load(cls, path, device=None, comm=None):
        """The lattice saved at `path` (see Ensemble.load); a file holding
        an ensemble of several replicas is refused. With `comm` (collective;
        every rank reads the file) the lattice is split over the ranks: a file
        written on one device or on any number of ranks continues bit for bit."""
        if comm is None:
            header, arrays = load_checkpoint(path, CHECKPOINT_KIND)
            inst = cls.__new__(cls)
            inst._ens = cls._ensemble.__new__(cls._ensemble)
            inst._ens._from_checkpoint(header, arrays, str(path), device, single=True)
            return inst

        def read():
            # checked as a one-device load would, without a device: then the fields
            header, arrays = load_checkpoint(path, CHECKPOINT_KIND)
            if field(header, "replicas", int, minimum=1, path=path) != 1:
                raise CheckpointError(f"checkpoint {str(path)!r} holds an ensemble; use "
                                      f"Ensemble{cls._ensemble.dim}D.load")
            return header, arrays
        header, arrays = mpi.all_ok(comm, read)
        return cls._split_from(header, arrays, str(path), device, comm)

    @classmethod
    def _split_from(cls, header, arrays, path, device, comm):
        """A lattice split over the ranks of `comm` from a loaded (and read-
        checked) checkpoint of one lattice (collective; every rank holds the
        same file, so a bad one fails alike everywhere)."""
        where = f"checkpoint {path!r}"
        shape = field(header, "shape", list, path=path)
        dim = cls._ensemble.dim
        if len(shape) != dim or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 2
                                        for v in shape):
            raise CheckpointError(f"{where}: field 'shape' = {shape!r} is not {dim} sizes >= 2")
        _check_array(where, arrays, "spins", np.uint8, (1, -(-int(np.prod(shape)) // 8)))
        _check_array(where, arrays, "temperatures", np.float64, (1,))
        options = {k: (tuple(v) if isinstance(v, list) else v)
                   for k, v in field(header, "options", dict, path=path).items()}
        for k in ("sweeps_per_launch", "band"):       # one sweep per launch over ranks
            options.pop(k, None)
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
        problem = _backend_state_problem(ens._backend.get_state(),
                                         {k: (tuple(v) if isinstance(v, list) else v) for k, v in bstate.items()})
        if problem:                     # the same file on every rank: every rank refuses it
            raise CheckpointError(f"{where}: the {ens.algorithm}/{ens.rng} generator state {problem}")
        mpi.all_ok(comm, ens._backend.set_spins, spins)
        mpi.all_ok(comm, ens._backend.set_state, bstate)
        ens._backend.exchange_halos()
        settled = field(header, "settled", int, minimum=0, path=path)
        ens._settled = _checked_settled(where, settled, ens.sweeps)
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
