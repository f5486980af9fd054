"""The interface every Ising backend implements (see :mod:`clphys.ising.backends`
for the lattice, Metropolis and Philox conventions they share).

:class:`IsingBackend` is the contract the ensembles rely on; :class:`BackendDefaults`
gives a backend the parts it may take as they are (option checks, a start
from a device buffer by way of the host, no replica offset, no measurement
buffer on the device, measurements already whole).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
import pyopencl as cl

from ._device import check_options


class IsingBackend(Protocol):
    """Device state and kernels of one Ising algorithm for R replicas.

    Class attributes: ``algorithm`` (the ``algorithm=`` string), ``dims``
    (lattice dimensions supported), ``rngs`` (accepted rng names, the first
    the default), ``options`` (accepted options and their defaults),
    ``takes_replica_offset`` (whether ``r0``, the global index of replica 0 in
    the Philox counters, may be set: ensembles split over MPI ranks) and
    ``measures_on_device`` (whether :meth:`measure_into` is implemented;
    else the ensemble calls :meth:`sums` once per measurement).

    Notes
    -----
    Spin arrays are int8 +-1 of shape (R, *reversed(shape)), C order. The
    constructor ``(dev, shape, n_replicas, *, rng, seed, **options)`` builds
    kernels and allocates; spins are undefined until set.
    """

    algorithm: ClassVar[str]
    dims: ClassVar[tuple[int, ...]]
    rngs: ClassVar[tuple[str, ...]]
    options: ClassVar[dict[str, Any]]
    takes_replica_offset: ClassVar[bool]
    measures_on_device: ClassVar[bool]
    r0: int

    @classmethod
    def check_shape(cls, shape: tuple[int, ...]) -> Any:
        """ValueError naming the allowed sizes unless the backend takes `shape`."""

    @classmethod
    def check_options(cls, options: dict) -> dict:
        """`options` merged with the defaults; TypeError for an unknown name,
        ValueError for a bad value; no device work."""

    @classmethod
    def device_bytes(cls, facts: Any, shape: tuple[int, ...], n_replicas: int, rng: str = "philox",
                     **options: Any) -> dict:
        """{buffer: bytes} the backend allocates (the memory check before any device work)."""

    def set_spins(self, spins: np.ndarray) -> None:
        """Upload an int8 +-1 array (R, *reversed(shape))."""

    def set_spins_device(self, buffer: cl.Buffer) -> None:
        """The same from a device buffer of R * N int8 in that layout."""

    def spins(self) -> np.ndarray:
        """int8 +-1 array (R, *reversed(shape))."""

    def sweep(self, n: int, thresholds: np.ndarray) -> None:
        """Enqueue n full sweeps with uint32 thresholds (R, 2, 2 dim + 1); no host sync."""

    def sums(self) -> tuple[np.ndarray, np.ndarray]:
        """(bond sum, magnetization), int64 (R,), reduced on the device."""

    def measure_into(self, buffer: cl.Buffer, index: int) -> None:
        """Enqueue the sums of every replica into measurement `index` of an int64
        buffer laid out [measurement][replica][2]; no host sync."""

    def reduce_measurements(self, out: np.ndarray) -> np.ndarray:
        """The whole lattice's measurements from this process's int64 `out`
        (a copy summed over the ranks of a lattice split over them)."""

    def get_state(self) -> dict:
        """Everything besides the spins for a bit-exact resume: at least
        "sweeps", plus the generator states where the rng has them."""

    def set_state(self, state: dict) -> None:
        """Restore a :meth:`get_state` dict."""


class BackendDefaults:
    """The parts of :class:`IsingBackend` a backend may take as they are."""

    if TYPE_CHECKING:      # a mixin: the attributes are those of the class that uses it
        def __getattr__(self, name: str) -> Any: ...

    options: ClassVar[dict[str, Any]] = {}
    takes_replica_offset: ClassVar[bool] = False
    measures_on_device: ClassVar[bool] = False
    r0 = 0

    @classmethod
    def check_options(cls, options: dict) -> dict:
        """`options` merged with :attr:`options`; TypeError for an unknown name."""
        return check_options(cls, options)

    def set_spins_device(self, buffer: cl.Buffer) -> None:
        """Read the start back to the host and :meth:`set_spins` it."""
        host = np.empty((self.n_replicas,) + tuple(reversed(self.shape)), dtype=np.int8)
        cl.enqueue_copy(self.dev.queue, host, buffer)
        self.set_spins(host)

    def measure_into(self, buffer: cl.Buffer, index: int) -> None:
        """Not implemented where :attr:`measures_on_device` is False."""
        raise NotImplementedError(f"algorithm {self.algorithm!r} measures through sums()")

    def reduce_measurements(self, out: np.ndarray) -> np.ndarray:
        """`out` itself: the measurements of one process are whole."""
        return out
