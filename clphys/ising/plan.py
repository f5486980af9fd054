"""What an Ising ensemble decides before the device: its arguments checked, the
algorithm chosen, the device memory it needs, how a run of sweeps is split."""

from __future__ import annotations

import numpy as np

from .. import _validate
from ..runtime import check_memory, items_that_fit
from . import backends
from ._backend import IsingBackend

STARTS = ("random", "up", "down")
SWEEP_QUEUE = 256            # sweep(n) enqueues at most this many without a sync
MAX_SWEEPS = 2**62           # the Philox sweep counter has 2^63 - 1 values (one reserved)
MEASURE_BYTES = 16          # two int64 per replica and measurement
CHUNK_BYTES = 32 << 20      # device buffer for measurements between read-backs
# sample()'s default thermalisation: this fraction of the measured sweeps (so a
# run long enough for its errors, >= 50 tau_int, thermalises >= 12 tau_int)
THERM_FRACTION = 0.25



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


def lattice_shape(L, dim):
    """(Lx, Ly[, Lz]) from an int or a tuple of `dim` ints."""
    if isinstance(L, (tuple, list)):
        if len(L) != dim:
            raise ValueError(f"L must be an int or a tuple of {dim} ints (Lx, Ly{', Lz' if dim == 3 else ''}), "
                             f"got {L!r}")
        return tuple(_validate.integer(f"L{a}", v, 2) for a, v in zip("xyz", L))
    return (_validate.integer("L", L, 2),) * dim


def check_temperatures(T, name="temperatures"):
    """A copy of `T` as a 1-D float array of temperatures > 0; ValueError naming `name`."""
    arr = _validate.finite_array(name, T, dtype=float)
    arr = np.atleast_1d(arr)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a number or a 1-D sequence, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    if np.any(arr <= 0):
        raise ValueError(f"{name} must all be > 0, got {arr[arr <= 0][0]}")
    return arr.copy()


def check_backend(backend: type[IsingBackend], dim, shape, rng, options):
    """The rng to use (the backend's default for None), once `backend` is
    known to take a lattice of `dim` and `shape`, that rng and these options
    (no device work); ValueError or TypeError naming what it does not take."""
    if dim not in backend.dims:
        raise ValueError(f"algorithm {backend.algorithm!r} supports dim {backend.dims}, not {dim}")
    rng = backends.check_rng(backend, rng)
    backend.check_shape(shape)
    backend.check_options(options)
    return rng


def default_algorithm(dim, shape, rng, options) -> str:
    """The algorithm used when none is given: the first of the registry that
    takes the lattice, rng and options the user chose (an L = 6 lattice or
    rng="lcg" runs the checkerboard, which multispin refuses). When none
    does, the default's own error says why, naming it as the default."""
    for name in backends.available():
        try:
            check_backend(backends.load(name), dim, shape, rng, options)
        except (ValueError, TypeError):
            continue
        return name
    try:
        check_backend(backends.load(backends.DEFAULT_ALGORITHM), dim, shape, rng, options)
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"no algorithm takes these arguments (algorithm=None); the default "
                        f"{backends.DEFAULT_ALGORITHM!r} says: {exc}") from None
    return backends.DEFAULT_ALGORITHM


def device_need(backend, facts, shape, n_replicas, rng, options) -> dict:
    """{buffer: bytes} an ensemble needs on the device at its peak (while it
    makes its start): the backend's buffers and the int8 start buffer."""
    need = dict(backend.device_bytes(facts, shape, n_replicas, rng=rng, **options))
    need["start (int8, temporary)"] = n_replicas * int(np.prod(shape))
    return need


def replicas_that_fit(backend, facts, shape, rng, options, limit=None) -> int:
    """How many replicas of `shape` fit on the device at once (0 if none)."""
    one, two = (device_need(backend, facts, shape, r, rng, options) for r in (1, 2))
    per = sum(two.values()) - sum(one.values())
    largest = max(two[k] - one[k] for k in one)
    n = items_that_fit(facts, max(1, per), sum(one.values()) - per, largest_per_item=max(1, largest),
                       limit=limit)
    while n > 0 and not fits(facts, device_need(backend, facts, shape, n, rng, options)):
        n -= max(1, n // 64)
    return n


def fits(facts, need) -> bool:
    """Whether the buffers `need` fit on the device of `facts`."""
    try:
        check_memory(facts, need, "")
        return True
    except ValueError:
        return False

