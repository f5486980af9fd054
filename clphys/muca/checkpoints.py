"""Checkpoints of a multicanonical simulation: save(), peek(), load(), and the
checks that a file holds counters, weights and statistics a run can reach."""

from __future__ import annotations

import os
from dataclasses import astuple, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from ..runtime.checkpoint import CheckpointError, check_arrays, field, load_checkpoint, save_checkpoint
from . import protocol as proto
from .geometry import Geometry, groups
from .records import PRODUCTION_KEYS, IterationRecord

CHECKPOINT_KIND = "muca"


class MulticanonicalCheckpoints:
    """save(), peek() and load() of :class:`Multicanonical`."""

    if TYPE_CHECKING:      # a mixin: the attributes are those of the class that uses it
        def __getattr__(self, name: str) -> Any: ...

    def save(self, path: str | os.PathLike) -> None:
        """Write the whole state (walkers, weights, counters, partial histograms)
        to `path` (.npz, clphys checkpoint format), atomically."""
        if self._comm is not None:
            raise ValueError("save() of walkers split over MPI ranks is not supported: run on one "
                             "process to checkpoint")
        folder = os.path.dirname(os.path.abspath(os.fspath(path)))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"cannot save the checkpoint {os.fspath(path)!r}: the folder {folder!r} "
                                    f"does not exist")
        eng = self._engine
        pend_hist, pend_mhist, since = eng.pending()
        lattice, bins, mags = self.walker_state()
        g = self.geom
        header = {"dim": g.dim, "L": g.L, "walkers": self.walkers, "seed": self.seed,
                  "sites": g.N, "groups": eng.G, "nbins": g.nbins, "nm": g.nm, "slots": eng.slots,
                  "magnet": eng.magnet, "mslots": eng.slots if eng.magnet else 0,
                  "since": since, "t": eng.t, "width": int(self.width),
                  "u": self._u, "kl": self._kl, "applied": self._applied,
                  "protocol": {f.name: getattr(self.protocol, f.name) for f in fields(self.protocol)},
                  "options": self.options, "iteration": self._iter, "production": self._prod,
                  "symmetric": self.symmetric,
                  "algorithm": "parallel multicanonical, walker-sliced lattice, Philox4x32-10"}
        arrays = {"lattice": lattice, "bins": bins, "mags": mags, "log_weights": self.log_weights,
                  "last_hist": (self._last_hist if self._last_hist is not None
                                else np.zeros(g.nbins, np.int64)),
                  "hist": eng.hist, "pending_hist": pend_hist,
                  # no (E, |M|) arrays without magnetization: they would be zeros of
                  # bins x |M| bins (2D L = 128: 537 MB, L = 256: 8.6 GB)
                  "moments": eng.moments if eng.magnet else np.zeros((0, g.nbins, 3)),
                  "pending_mhist": pend_mhist if eng.magnet else np.zeros((0, g.nbins, g.nm), np.uint32),
                  "history": np.array([astuple(r) for r in self._history], np.float64).reshape(-1, 9),
                  "passages": eng.read_passages()}
        save_checkpoint(path, CHECKPOINT_KIND, header, arrays)

    @staticmethod
    def peek(path: str | os.PathLike) -> dict:
        """{L, dim, walkers, seed, symmetric, producing} of the checkpoint at
        `path`, checked, without touching a device."""
        header, _ = load_checkpoint(path, CHECKPOINT_KIND)
        p = str(path)
        out = {"L": field(header, "L", int, minimum=2, path=p),
               "dim": field(header, "dim", int, choices=(2, 3), path=p),
               "walkers": field(header, "walkers", int, minimum=1, path=p),
               "seed": field(header, "seed", int, minimum=0, path=p),
               "symmetric": field(header, "symmetric", bool, path=p) if "symmetric" in header else False,
               "producing": header.get("production") is not None}
        try:
            Geometry.checked(out["L"], out["dim"])
        except ValueError as exc:
            raise CheckpointError(f"checkpoint {p!r}: {exc}") from None
        return out

    @classmethod
    def load(cls: Any, path: str | os.PathLike, device: Any = None, **options: Any) -> Any:
        """The simulation saved in `path`, ready to continue bit for bit (on any
        device; `options` are kernel options as in the constructor)."""
        p = str(path)
        info = cls.peek(path)
        L, dim, walkers, seed = info["L"], info["dim"], info["walkers"], info["seed"]
        geom = Geometry.checked(L, dim)
        spec = {"lattice": ("uint32", ("sites", "groups")), "bins": ("int32", ("walkers",)),
                "mags": ("int32", ("walkers",)), "log_weights": ("float64", ("nbins",)),
                "last_hist": ("int64", ("nbins",)), "hist": ("int64", ("slots", "nbins")),
                "pending_hist": ("uint32", ("slots", "nbins")),
                "moments": ("float64", ("mslots", "nbins", 3)),
                "pending_mhist": ("uint32", ("mslots", "nbins", "nm")),
                "history": ("float64", (None, 9)), "passages": ("uint32", ("walkers",))}
        header, arrays = load_checkpoint(path, CHECKPOINT_KIND)
        if isinstance(header.get("slots"), int) and "mslots" not in header:
            header["mslots"] = header["slots"]         # written before 2026-11-29: zeros when not magnet
        check_arrays(p, header, arrays, spec)
        magnet = field(header, "magnet", bool, path=p)
        if field(header, "mslots", int, path=p) not in ((header["slots"],) if magnet else (0, header["slots"])):
            raise CheckpointError(f"checkpoint {p!r}: mslots = {header['mslots']} does not match slots = "
                                  f"{header['slots']} and magnet = {magnet}")
        for name, want in (("sites", geom.N), ("groups", groups(walkers)), ("nbins", geom.nbins), ("nm", geom.nm)):
            if field(header, name, int, path=p) != want:
                raise CheckpointError(f"checkpoint {p!r}: {name} = {header[name]} does not match {geom}")
        slots = field(header, "slots", int, minimum=1, maximum=walkers, path=p)
        prot = field(header, "protocol", dict, path=p)
        try:
            protocol = proto.Protocol.checked(**prot)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"checkpoint {p!r}: protocol: {exc}") from None
        symmetric = info["symmetric"]
        _check_saved_meaning(header, arrays, geom, protocol, p)
        try:
            sim = cls(L, dim, walkers, seed, device, **prot, symmetric=symmetric, **options)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"checkpoint {p!r}: {exc}") from None
        sim._restore(header, arrays, p, slots)
        return sim

    def _restore(self, header, arrays, p, slots):
        eng = self._engine
        magnet = field(header, "magnet", bool, path=p)
        self.width = header["width"]         # (the iteration's width says how it counts)
        eng.configure(slots, magnet, every=self._iteration_every())
        eng.t = field(header, "t", int, minimum=0, path=p)
        eng.write_lattice(arrays["lattice"])
        bins, mags = eng.measure()
        if not np.array_equal(bins, arrays["bins"]) or (magnet and not np.array_equal(mags, arrays["mags"])):
            raise CheckpointError(f"checkpoint {p!r}: the stored energies do not match the stored spins")
        eng.hist[...] = arrays["hist"]
        if magnet:
            eng.moments[...] = arrays["moments"]
        since = field(header, "since", int, minimum=0, path=p)
        if since > eng.limit:
            raise CheckpointError(f"checkpoint {p!r}: since = {since} exceeds {eng.limit}")
        eng.set_pending(arrays["pending_hist"], arrays["pending_mhist"], since)
        w = arrays["log_weights"]
        if not np.all(np.isfinite(w)):
            raise CheckpointError(f"checkpoint {p!r}: log_weights are not all finite")
        self.log_weights = w.copy()
        self._u = float(header["u"])
        self._kl = float(header["kl"])
        self._applied = field(header, "applied", bool, path=p)
        rows = arrays["history"]
        self._history = [IterationRecord(int(r[0]), int(r[1]), int(r[2]), int(r[3]), float(r[4]),
                                         float(r[5]), int(r[6]), float(r[7]), int(r[8])) for r in rows]
        self._last_hist = arrays["last_hist"].copy() if self._history else None
        if not self._applied and not self._history:
            raise CheckpointError(f"checkpoint {p!r}: unapplied weights without an iteration")
        self._iter = _phase(header, "iteration", ("therm", "updates", "u", "done", "seconds"), p)
        self._prod = _phase(header, "production", PRODUCTION_KEYS, p)
        if self._prod is not None:
            eng.configure(slots, magnet, trips=True)
            eng.hist[...] = arrays["hist"]
            if magnet:
                eng.moments[...] = arrays["moments"]
            eng.set_pending(arrays["pending_hist"], arrays["pending_mhist"], since)
            eng.reset_passages(0, self.top, arrays["passages"])
        if self._iter is not None or self._prod is not None:
            eng.set_thresholds(self._thresholds())


def _check_saved_meaning(header, arrays, geom, protocol, p):
    """CheckpointError unless the counters, weights and statistics of a
    checkpoint are ones a run can reach (no device needed)."""
    where = f"checkpoint {p!r}"
    for name in ("u", "kl"):
        value = field(header, name, float, path=p)
        if not value > 0:
            raise CheckpointError(f"{where}: field {name!r} = {value!r} must be > 0")
    field(header, "width", int, minimum=protocol.min_width,
          maximum=max(protocol.min_width, geom.full_width), path=p)
    for name in ("hist", "last_hist", "moments"):
        bad = ~(arrays[name] >= 0)              # NaN too
        if bad.any():
            raise CheckpointError(f"{where}: array {name!r} holds {int(bad.sum())} negative or NaN values")
    m = arrays["moments"]                        # empty when no magnetization was recorded
    if not np.isfinite(m).all():
        raise CheckpointError(f"{where}: array 'moments' holds values that are not finite")
    # sums over the recorded counts of |m|, |m|^2, |m|^4 with 0 <= |m| <= 1
    slack = 1.0 + 1e-9
    if len(m) and (np.any(m[..., 0] > arrays["hist"] * slack) or np.any(m[..., 1] > m[..., 0] * slack)
                   or np.any(m[..., 2] > m[..., 1] * slack)):
        raise CheckpointError(f"{where}: array 'moments' is not the moments of |m| <= 1 of the counts in 'hist'")
    rows = arrays["history"]
    ints = rows[:, [0, 1, 2, 3, 6, 8]]
    if not np.isfinite(rows).all() or np.any(rows < 0) or np.any(ints != np.round(ints)) or \
            not np.array_equal(rows[:, 0], np.arange(1, len(rows) + 1)):
        raise CheckpointError(f"{where}: array 'history' is not a record of iterations 1, 2, ... "
                              f"(non-negative finite numbers, whole counts)")
    ends = arrays["passages"] & 3
    if np.any(ends == 3):
        raise CheckpointError(f"{where}: array 'passages' holds a walker whose last end is neither none, "
                              f"low nor high")
    done = sum(int(state["done"]) for state in (header.get("iteration"), header.get("production"))
               if isinstance(state, dict) and isinstance(state.get("done"), int))
    t = field(header, "t", int, minimum=0, path=p)
    if t < rows[:, 2].sum() + rows[:, 3].sum() + done:
        raise CheckpointError(f"{where}: field 't' = {t} is fewer steps than its iterations and the "
                              f"phase in progress made")


def _phase(header, name, keys, p):
    state = header.get(name)
    if state is None:
        return None
    if not isinstance(state, dict) or set(state) != set(keys):
        raise CheckpointError(f"checkpoint {p!r}: field {name!r} must hold {sorted(keys)}")
    for k in keys:
        if k in ("u", "seconds", "therm_passages", "passages", "target", "budget"):
            field(state, k, float, minimum=0, path=p)
        elif k == "error":
            field(state, k, float, minimum=-1, path=p)
        elif k in ("magnet", "therm_fixed", "updates_fixed"):
            field(state, k, bool, path=p)
        elif k == "phase":
            field(state, k, str, choices=("therm", "record", "done"), path=p)
        else:
            field(state, k, int, minimum=0, path=p)
    if state["done"] > state["therm"] + state["updates"]:
        raise CheckpointError(f"checkpoint {p!r}: {name} has done more steps than planned")
    return dict(state)
