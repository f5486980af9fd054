"""Ising lattices on the device: ensembles of replicas and single lattices.

H = -J sum_<ij> s_i s_j - h sum_i s_i, periodic boundaries, k_B = 1.

    ens = Ensemble2D(64, np.linspace(2.0, 2.5, 16), seed=1)   # 16 replicas, one launch
    ens.sweep(1000)
    ens.energy()                                               # (16,) E/N
    lat = Ising2D(1024, 2.269, algorithm="multispin")          # thin wrapper, 1 replica
    series = lat.sample(1000, every=2, n_therm=500)

A single lattice is an ensemble of one replica (replica 0), so Ising2D(L, T,
seed=s) and replica 0 of Ensemble2D(L, [T, ...], seed=s) give the same spins.
"""

from __future__ import annotations

import math

import numpy as np
import pyopencl as cl

from .. import _validate
from .. import rng as _rng
from ..progress import Progress
from ..runtime import resolve_device
from . import backends
from ._device import check_options, zeroed_buffer
from .samples import Samples
from .thresholds import metropolis_thresholds

STARTS = ("random", "up", "down")
STATE_FORMAT = "clphys.ising/1"
_MEASURE_BYTES = 16          # two int64 per replica and measurement
_CHUNK_BYTES = 32 << 20      # device buffer for measurements between read-backs


def _shape(L, dim):
    """(Lx, Ly[, Lz]) from an int or a tuple of `dim` ints."""
    if isinstance(L, (tuple, list)):
        if len(L) != dim:
            raise ValueError(f"L must be an int or a tuple of {dim} ints (Lx, Ly{', Lz' if dim == 3 else ''}), "
                             f"got {L!r}")
        return tuple(_validate.integer(f"L{a}", v, 2) for a, v in zip("xyz", L))
    return (_validate.integer("L", L, 2),) * dim


def _temperatures(T, name="temperatures"):
    arr = _validate.finite_array(name, np.atleast_1d(T), ndim=1, dtype=float)
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    if np.any(arr <= 0):
        raise ValueError(f"{name} must all be > 0, got {arr[arr <= 0][0]}")
    return arr.copy()


class Ensemble:
    """R independent replicas of one lattice size, updated in one launch.

    temperatures: one per replica (repeat a temperature for many seeds: every
    replica has its own random stream). Use :class:`Ensemble2D` /
    :class:`Ensemble3D`. Options (``wg=``, ``words_per_item=``, ...) go to the
    backend; see docs/ising.md.
    """
    dim = None

    def __init__(self, L, temperatures, *, J=1.0, h=0.0, algorithm=None, rng=None, seed=0,
                 start="random", device=None, **options):
        shape = _shape(L, self.dim)
        temps = _temperatures(temperatures)
        J = _validate.real("J", J)
        h = _validate.real("h", h)
        algorithm = backends.DEFAULT_ALGORITHM if algorithm is None else algorithm
        backend = backends.load(algorithm)
        if self.dim not in backend.dims:
            raise ValueError(f"algorithm {algorithm!r} supports dim {backend.dims}, not {self.dim}")
        rng = backends.check_rng(backend, rng)
        seed = _validate.seed(seed)
        _validate.choice("start", start, STARTS)
        backend.check_shape(shape)
        if hasattr(backend, "check_options"):       # optional: option values, no device
            backend.check_options(options)
        elif hasattr(backend, "options"):
            check_options(backend, options)
        self.shape, self.J, self.h = shape, J, h
        self.algorithm, self.rng, self.seed, self.options = algorithm, rng, seed, dict(options)
        self.n_spins = int(np.prod(shape))
        self._T = temps
        self._thr = self._thresholds(temps)
        self.device = resolve_device(device)
        self._backend = backend(self.device, shape, len(temps), rng=rng, seed=seed, **options)
        self._start(start)

    # ------------------------------------------------------------ set-up
    def _thresholds(self, temps):
        return np.stack([metropolis_thresholds(self.dim, T, self.J, self.h) for T in temps])

    def _start(self, start):
        dev, R = self.device, self.n_replicas
        Lz = self.shape[2] if self.dim == 3 else 1
        prg = dev.build("ising/init.cl", dim=self.dim, Lx=self.shape[0], Ly=self.shape[1], Lz=Lz)
        buf = zeroed_buffer(dev, R * self.n_spins)
        k0, k1 = _rng.seed_key(self.seed)
        items = R * 2 * (-(-(self.n_spins // 2) // 4))
        prg.ising_init_spins(dev.queue, (items,), None, buf, np.uint32(R),
                             np.uint32(STARTS.index(start)), np.uint32(k0), np.uint32(k1))
        if hasattr(self._backend, "set_spins_device"):
            self._backend.set_spins_device(buf)
        else:
            host = np.empty((R,) + tuple(reversed(self.shape)), dtype=np.int8)
            cl.enqueue_copy(dev.queue, host, buf)
            self._backend.set_spins(host)

    # ------------------------------------------------------------ properties
    @property
    def n_replicas(self) -> int:
        return len(self._T)

    @property
    def temperatures(self) -> np.ndarray:
        """Temperature of each replica; assign an array (or a scalar for all)
        between sweeps: only the threshold table changes, nothing recompiles."""
        return self._T.copy()

    @temperatures.setter
    def temperatures(self, T):
        temps = _temperatures(np.broadcast_to(T, self._T.shape) if np.ndim(T) == 0 else T)
        if temps.shape != self._T.shape:
            raise ValueError(f"temperatures must have {self.n_replicas} entries, got {temps.size}")
        self._thr, self._T = self._thresholds(temps), temps

    # ------------------------------------------------------------ dynamics
    def sweep(self, n=1):
        """n full sweeps (colour 0 then colour 1), enqueued without host sync."""
        n = _validate.integer("n", n, 0)
        if n:
            self._backend.sweep(n, self._thr)
        return self

    def sums(self):
        """(bond sum, magnetization) per replica, int64, reduced on the device."""
        return self._backend.sums()

    def energy(self) -> np.ndarray:
        """E/N per replica."""
        bond, mag = self.sums()
        return (-self.J * bond - self.h * mag) / self.n_spins

    def magnetization(self) -> np.ndarray:
        """M/N per replica (signed)."""
        return self.sums()[1] / self.n_spins

    def spins(self) -> np.ndarray:
        """int8 +-1 array (R, Ly, Lx) or (R, Lz, Ly, Lx)."""
        return self._backend.spins()

    def set_spins(self, spins):
        """Set every replica from (R, Ly, Lx) / (R, Lz, Ly, Lx) +-1 values, or
        all replicas from one (Ly, Lx) / (Lz, Ly, Lx) array."""
        lat = tuple(reversed(self.shape))
        arr = np.asarray(spins)
        if arr.shape == lat:
            arr = np.broadcast_to(arr, (self.n_replicas,) + lat)
        if arr.shape != (self.n_replicas,) + lat:
            raise ValueError(f"spins must have shape {(self.n_replicas,) + lat} or {lat}, got {arr.shape}")
        if arr.dtype.kind not in "iuf" or not np.all((arr == 1) | (arr == -1)):
            raise ValueError("spins must hold only +1 and -1")
        self._backend.set_spins(np.ascontiguousarray(arr, dtype=np.int8))

    # ------------------------------------------------------------ measurements
    def sample(self, n_measure, every=1, n_therm=0, progress=None) -> Samples:
        """n_therm sweeps, then n_measure times (`every` sweeps, measure).

        Returns :class:`Samples` with E/N and M/N series of shape (R, n_measure).
        The sums are reduced on the device into a buffer that is read back in
        large chunks, never once per measurement.
        """
        n_measure = _validate.integer("n_measure", n_measure, 1)
        every = _validate.integer("every", every, 1)
        n_therm = _validate.integer("n_therm", n_therm, 0)
        dev, R, be = self.device, self.n_replicas, self._backend
        out = np.empty((n_measure, R, 2), dtype=np.int64)
        cap = max(1, min(n_measure, _CHUNK_BYTES // (_MEASURE_BYTES * R)))
        chunk = max(1, min(cap, math.ceil(n_measure / 20)))   # ~20 read-backs give the bar steps
        fast = hasattr(be, "measure_into")
        buf = cl.Buffer(dev.context, cl.mem_flags.READ_WRITE, _MEASURE_BYTES * R * chunk) if fast else None
        with Progress(n_therm + n_measure * every, progress, label="ising") as bar:
            for start in range(0, n_therm, max(1, chunk * every)):
                n = min(chunk * every, n_therm - start)
                self.sweep(n)
                dev.queue.finish()
                bar.update(n)
            for m0 in range(0, n_measure, chunk):
                m1 = min(n_measure, m0 + chunk)
                for m in range(m0, m1):
                    be.sweep(every, self._thr)
                    if fast:
                        be.measure_into(buf, m - m0)
                    else:
                        out[m, :, 0], out[m, :, 1] = be.sums()
                if fast:
                    cl.enqueue_copy(dev.queue, out[m0:m1], buf, is_blocking=True)
                bar.update((m1 - m0) * every)
        bond, mag = out[:, :, 0].T, out[:, :, 1].T
        energy = (-self.J * bond - self.h * mag) / self.n_spins
        return Samples(self.temperatures, self.n_spins, energy, mag / self.n_spins)

    # ------------------------------------------------------------ checkpoints
    def state(self) -> dict:
        """Everything needed to continue bit for bit: spins, RNG counters and
        states, parameters (a dict of plain values and NumPy arrays)."""
        return {"format": STATE_FORMAT, "dim": self.dim, "shape": self.shape, "J": self.J,
                "h": self.h, "temperatures": self.temperatures, "algorithm": self.algorithm,
                "rng": self.rng, "seed": self.seed, "options": dict(self.options),
                "spins": self.spins(), "backend": self._backend.get_state()}

    @classmethod
    def from_state(cls, state, device=None):
        """Rebuild an ensemble from :meth:`state` (on `device`, any device)."""
        inst = cls.__new__(cls)
        inst._restore(state, device, single=False)
        return inst

    def _restore(self, state, device, single):
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"state must be a dict made by state() (format {STATE_FORMAT!r})")
        if state["dim"] != self.dim:
            raise ValueError(f"state is of a {state['dim']}D lattice, not {self.dim}D")
        temps = state["temperatures"]
        if single and len(temps) != 1:
            raise ValueError("state holds an ensemble; use Ensemble2D/3D.from_state")
        Ensemble.__init__(self, tuple(state["shape"]), temps, J=state["J"], h=state["h"],
                          algorithm=state["algorithm"], rng=state["rng"], seed=state["seed"],
                          start="up", device=device, **state["options"])
        self.set_spins(state["spins"])
        self._backend.set_state(state["backend"])

    def __repr__(self):
        return (f"<{type(self).__name__} {'x'.join(map(str, self.shape))} R={self.n_replicas} "
                f"algorithm={self.algorithm} rng={self.rng} on {self.device.name}>")


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
                 device=None, **options):
        T = _validate.real("T", T, minimum=0.0, strict_min=True)
        self._ens = self._ensemble(L, [T], J=J, h=h, algorithm=algorithm, rng=rng, seed=seed,
                                   start=start, device=device, **options)

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

    def sample(self, n_measure, every=1, n_therm=0, progress=None) -> Samples:
        """E/N and M/N series of length n_measure; see Ensemble.sample."""
        s = self._ens.sample(n_measure, every=every, n_therm=n_therm, progress=progress)
        return Samples(self.temperature, s.n_spins, s.energy[0], s.magnetization[0])

    def state(self) -> dict:
        return self._ens.state()

    @classmethod
    def from_state(cls, state, device=None):
        inst = cls.__new__(cls)
        inst._ens = cls._ensemble.__new__(cls._ensemble)
        inst._ens._restore(state, device, single=True)
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
