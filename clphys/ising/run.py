"""What an Ising ensemble runs on the device and what it computes after:
thermalisation and measurement sweeps in time-bounded slices, the series
they make, and the check for replicas trapped in a deterministic cycle."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pyopencl as cl

from ..progress import Progress
from ..runtime import Interrupted, check_memory, run_sliced
from ..runtime.memory import check_host_memory
from . import backends, reference
from .plan import CHUNK_BYTES, MEASURE_BYTES
from .samples import Samples, TrappedWarning

TRAP_TAIL = 8                # measurements checked for an exactly periodic tail
TRAP_READ_LIMIT = 256 << 20  # largest spin read-back for the trap check


class Run:
    """n_therm sweeps, then n_measure times (`every` sweeps, measure), done in
    slices.

    Parameters
    ----------
    ens : clphys.ising.Ensemble
        The ensemble it sweeps (this process's replicas).
    n_therm, n_measure, every : int
        Thermalisation sweeps, measurements, sweeps between measurements.
    done : int
        Sweeps of the run already made (a resumed run).
    measured : ndarray, optional
        int64 (m, R, 2) measurements of a resumed run.
    therm_before : int
        Sweeps at this temperature before the run (reported in Samples.n_therm).

    Notes
    -----
    Measurements (bond sum, magnetization per replica) go to a device buffer
    read back once per slice where the backend measures on the device.
    """

    def __init__(self, ens, n_therm, n_measure, every, done=0, measured=None, therm_before=0):
        self.ens, self.n_therm, self.n_measure, self.every = ens, n_therm, n_measure, every
        self.total = n_therm + n_measure * every
        self.therm_before = therm_before
        R = ens.local_replicas
        # the int64 sums and the E/N, M/N series made from them
        check_host_memory(32 * R * n_measure, f"{n_measure} measurements of {R} replicas",
                          "Measure less often (every=) or fewer times, or use fewer replicas.")
        self.out = np.zeros((n_measure, R, 2), dtype=np.int64)
        self.done = done
        if measured is not None:
            self.out[:len(measured)] = measured
        self.cap = max(2, min(n_measure + 1, CHUNK_BYTES // (MEASURE_BYTES * R)))
        self.largest = max(1, (self.cap - 1) * every)        # a slice holds <= cap measurements
        self._buf = None
        if n_measure and ens.backend.measures_on_device:
            check_memory(ens.device, {**ens.resident_bytes, "measurements": MEASURE_BYTES * R * self.cap},
                         f"measuring {R} replicas", "use fewer replicas per ensemble")

    @property
    def measured(self) -> int:
        """Measurements made so far."""
        return max(0, self.done - self.n_therm) // self.every

    def step(self, n: int) -> None:
        """Advance the run by n sweeps (measuring where an interval ends)."""
        ens = self.ens
        be, thr = ens.backend, ens.thresholds
        fast = be.measures_on_device
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
                                              MEASURE_BYTES * ens.local_replicas * self.cap)
                    be.measure_into(self._buf, local)
                    local += 1
                else:
                    self.out[m, :, 0], self.out[m, :, 1] = be.sums()
        if local:
            cl.enqueue_copy(ens.device.queue, self.out[m0:m0 + local], self._buf, is_blocking=True)
        self.done = end
        ens.count_settled(n)

    def run(self, progress: bool | Callable | None = None, bar: Any = None, total: int | None = None) -> None:
        """Do the remaining sweeps (or `total` of them) in time-bounded slices.

        The thermalisation and the measurements are sliced apart: on small lattices
        a measured sweep costs about ten thermalisation sweeps (a launch and a
        reduction per measurement; 2D L = 16, 32 replicas on PoCL: 47 against 4 us),
        so a slice sized on the one and crossing into the other would last many
        times its target, and Ctrl-C would wait for it."""
        start = self.done
        end = self.total if total is None else start + total
        meter = Progress(end - start, progress, label="ising") if bar is None else bar
        try:
            for phase_end in (min(self.n_therm, end), end):
                if self.done < phase_end:
                    run_sliced(phase_end - self.done, lambda _, n: self.step(n), self.ens.device.queue,
                               bar=meter, what="sweeps", largest=self.largest, comm=self.ens.slab_comm)
        except Interrupted:
            raise Interrupted(self.done - start, end - start, "sweeps") from None
        finally:
            if bar is None:
                meter.close()

    def measurements(self) -> np.ndarray:
        """int64 (measured, R, 2) bond sums and magnetizations of the whole
        lattice (summed over the ranks of a lattice split over them: collective)."""
        return self.ens.backend.reduce_measurements(self.out[:self.measured])

    def samples(self) -> Samples:
        """The E/N and M/N series of the measurements made."""
        ens = self.ens
        out = self.measurements()
        bond, mag = out[:, :, 0].T, out[:, :, 1].T
        energy = (-ens.J * bond - ens.h * mag) / ens.n_spins
        return Samples(ens.local_temperatures, ens.n_spins, energy, mag / ens.n_spins,
                       n_therm=self.therm_before + self.n_therm, every=self.every,
                       trapped=trapped_replicas(ens, bond, mag, self.every))


def trapped_replicas(ens: Any, bond: np.ndarray, mag: np.ndarray, every: int) -> np.ndarray:
    """(R,) bool: replicas in a deterministic cycle of the checkerboard
    update. Candidates have an exactly periodic (period 2 sweeps) tail of
    measurements; their spins confirm it (clphys.ising.reference.trapped)."""
    R, n = bond.shape
    trapped = np.zeros(R, dtype=bool)
    lag = 1 if every % 2 == 0 else 2
    tail = min(n, TRAP_TAIL)
    if ens.algorithm not in backends.PLAIN_ORDER or tail < lag + 2 or ens.slab_comm is not None:
        return trapped
    b, m = bond[:, n - tail:], mag[:, n - tail:]
    cand = np.all(b[:, lag:] == b[:, :-lag], axis=1) & np.all(m[:, lag:] == m[:, :-lag], axis=1)
    if not cand.any() or R * ens.n_spins > TRAP_READ_LIMIT:
        return trapped
    trapped[cand] = reference.trapped(ens.local_spins()[cand], ens.thresholds[cand])
    if trapped.any():
        idx = np.nonzero(trapped)[0]
        shown = ", ".join(map(str, idx[:8])) + (", ..." if idx.size > 8 else "")
        warnings.warn(f"{idx.size} of {R} replicas (replica {shown}) are trapped in a deterministic "
                      f"period-2 cycle of the checkerboard update (every spin of a colour flips with "
                      f"probability 1): their measurements are not Boltzmann samples; Samples.trapped "
                      f"marks them. Use a larger lattice (see docs/ising.md, Small lattices)",
                      TrappedWarning, stacklevel=4)
    return trapped
