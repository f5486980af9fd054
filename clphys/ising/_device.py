"""Helpers shared by the Ising backends: option and size checks, uploads, and
the per-replica reduction of (bond sum, magnetization) partials."""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from .. import _validate
from ..runtime import work_group_size, zeros


def check_options(backend, options):
    """Merge `options` into backend.options (the defaults); TypeError for an
    unknown name, ValueError for a bad work-group size, before any device work."""
    unknown = sorted(set(options) - set(backend.options))
    if unknown:
        allowed = ", ".join(backend.options) or "none"
        raise TypeError(f"algorithm {backend.algorithm!r} got unknown option(s) "
                        f"{', '.join(unknown)}; it accepts: {allowed}")
    opts = {**backend.options, **options}
    if opts.get("wg") is not None:
        _validate.integer("wg", opts["wg"], 1)
    return opts


def device_wg(dev, wg, gpu_default=None):
    """The work-group size to use on dev: wg (<= the device maximum), else
    gpu_default on GPUs, else None (the driver chooses)."""
    if wg is not None:
        return _validate.integer("wg", wg, 1, dev.facts.max_work_group)
    return min(gpu_default, dev.facts.max_work_group) if gpu_default and dev.facts.is_gpu else None


def check_sides(shape, algorithm, rule, ok):
    """ValueError naming `rule` unless ok(L, axis) for every side."""
    for axis, L in zip("xyz", shape):
        if not ok(L, axis):
            raise ValueError(f"{algorithm}: L{axis} = {L} is not allowed; allowed sizes: {rule}")


def zeroed_buffer(dev, nbytes):
    """A read-write device buffer of nbytes zeros (see clphys.runtime.zeros)."""
    return zeros(dev, max(1, nbytes), np.uint8).data


def enqueue_upload(queue, buf, array):
    """Copy a host array into buf (blocking: the array may be reused at once)."""
    cl.enqueue_copy(queue, buf, np.ascontiguousarray(array), is_blocking=True)


class SumsReducer:
    """Per-replica partial pairs (int64 [R * parts][2]) and their reduction into a
    measurement buffer with cl_kernels/ising/sums.cl. `work` is the number of
    loop iterations per replica of the backend's partial-sum kernel."""

    def __init__(self, dev, n_replicas, work):
        self.dev, self.R = dev, n_replicas
        self.wg, self.parts = self._layout(dev.facts, work)
        self.prg = dev.build("ising/sums.cl", wg=self.wg)
        self.partial = zeroed_buffer(dev, 16 * n_replicas * self.parts)
        self._one = None

    @staticmethod
    def _layout(facts, work):
        wg = work_group_size(facts, 256)
        return wg, int(max(1, min(1024, work // (wg * 32))))

    @classmethod
    def nbytes(cls, facts, n_replicas, work) -> int:
        """Device bytes of the partial pairs and the one-measurement buffer."""
        return 16 * n_replicas * (cls._layout(facts, work)[1] + 1)

    def finish(self, buffer, index):
        """Enqueue the reduction of the partial pairs into measurement `index` of `buffer`."""
        self.prg.ising_sums_finish(self.dev.queue, (self.R * self.wg,), (self.wg,), self.partial,
                                   np.uint32(self.parts), buffer, np.uint32(index), np.uint32(self.R))

    def sums(self, measure_into):
        """(bond sum, magnetization) int64 (R,) through `measure_into` and one read-back."""
        if self._one is None:
            self._one = cl.Buffer(self.dev.context, cl.mem_flags.READ_WRITE, 16 * self.R)
        measure_into(self._one, 0)
        out = np.empty((self.R, 2), dtype=np.int64)
        cl.enqueue_copy(self.dev.queue, out, self._one)
        return out[:, 0].copy(), out[:, 1].copy()
