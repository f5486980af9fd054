"""What an SDE ensemble computes after a run: its RunResult, combined over
MPI ranks as if one device had made it."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..runtime import work_group_size as _wg_size
from ..runtime.memory import check_memory
from .plan import LocalRecord
from .state import RunResult


class EnsembleFinish:
    """The end of :meth:`Ensemble.run`: moments, histograms and paths as a RunResult."""

    if TYPE_CHECKING:      # a mixin: the attributes are those of the class that uses it
        _comm: Any
        def __getattr__(self, name: str) -> Any: ...

    def finish(self, loc: LocalRecord) -> RunResult | None:
        """The RunResult of what every rank recorded (collective with a
        communicator: on rank 0, on every rank with gather='all', else None)."""
        plan, k = loc.plan, len(loc.times)
        if self._comm is not None:
            got = self._comm.gather(loc.payload(), root=0)
            if self._comm.Get_rank() == 0:
                result = self._combine(loc, got)
            else:
                result = None
            if self._gather == "all":
                result = self._comm.bcast(result, root=0)
            return result
        shp = (k,) + self.grid_shape
        mean, var = {}, {}
        if loc.moments is not None:
            for j, name in enumerate(plan.obs_names):
                mean[name] = loc.moments[:, :, j, 0].astype(np.float64).reshape(shp)
                var[name] = loc.moments[:, :, j, 1].astype(np.float64).reshape(shp)
        hists, edges = {}, {}
        for j, (name, (_e, bins), h) in enumerate(zip(plan.hist_names, plan.hist, loc.hists)):
            hists[name] = h.reshape(self.grid_shape + (bins,))
            edges[name] = np.linspace(plan.hist_range[2 * j], plan.hist_range[2 * j + 1], bins + 1)
        paths = {}
        if loc.paths is not None:
            for j, v in enumerate(self.model.variables):
                paths[v] = loc.paths[..., j].astype(np.float64).reshape(shp + (plan.n_record,))
        result = RunResult(loc.times, mean, var, self.n_paths, self.grid_shape, hists, edges, paths)
        bad = result.diverged
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])      # () without a parameter sweep
            warnings.warn(f"sde run: means or variances are not finite at {int(bad.sum())} of {bad.size} grid "
                          f"points (the first {first}, params {self._point_params(first)}): paths diverged; "
                          f"use a smaller dt (RunResult.diverged marks them)", RuntimeWarning, stacklevel=3)
        return result

    def _point_params(self, index) -> dict:
        """{parameter: value} at grid point `index`."""
        g = int(np.ravel_multi_index(index, self.grid_shape)) if self.grid_shape else 0
        return {p: float(np.broadcast_to(v, (self.n_grid,))[g]) for p, v in self._values.items()}

    def _combine(self, loc: "LocalRecord", got: list):
        """On rank 0: the whole ensemble's record from every rank's (payloads
        in rank order), as if one device had made it; then :meth:`finish`."""
        plan = loc.plan
        whole = LocalRecord(plan, loc.times, loc.prg)
        if self._by_paths:
            # every grid point's work-group partials in the order one device keeps them,
            # combined by the same kernel: the same bits as one device
            if got[0]["partials"] is not None:
                whole.moments = self._moments_of(plan, np.concatenate([g["partials"] for g in got], axis=2),
                                                 loc.prg)
            whole.hists = [sum(g["hists"][j] for g in got) for j in range(len(plan.hist))]
            parts = [g["paths"] for g in got if g["paths"] is not None]
            whole.paths = np.concatenate(parts, axis=2) if parts else None
        else:
            if got[0]["moments"] is not None:
                whole.moments = np.concatenate([g["moments"] for g in got], axis=1)
            whole.hists = [np.concatenate([g["hists"][j] for g in got]) for j in range(len(plan.hist))]
            if got[0]["paths"] is not None:
                whole.paths = np.concatenate([g["paths"] for g in got], axis=1)
        comm, self._comm = self._comm, None
        try:
            return self.finish(whole)
        finally:
            self._comm = comm

    def _moments_of(self, plan, partials, prg) -> np.ndarray:
        """(k, n_grid, n_obs, 2) moments of the whole ensemble's partials
        (k, n_grid, groups per grid point, n_obs), one sample at a time."""
        k, n_grid, gpg, n_obs = partials.shape
        dev, q = self.device, self.device.queue
        wgf = _wg_size(dev.facts, 64)
        check_memory(dev, {"partials": partials[0].nbytes, "moments": k * n_grid * n_obs * 2 * self._acc.itemsize},
                     f"combining the moments of {k} samples", "Record fewer samples.")
        buf = cla.to_device(q, np.ascontiguousarray(partials[0]).view(np.uint8))
        moments = cla.empty(q, (max(k, 1), n_grid, n_obs, 2), self._acc)
        for slot in range(k):
            if slot:
                cl.enqueue_copy(q, buf.data, np.ascontiguousarray(partials[slot]))
            prg.sde_moments(q, (n_grid * n_obs * wgf,), (wgf,), buf.data, np.uint32(gpg),
                            np.uint32(n_obs), np.uint32(n_grid), np.uint32(slot), moments.data)
        return moments.get()[:k]
