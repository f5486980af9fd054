"""Parallel multicanonical sampling: the weight iteration and the production run.

    sim = Multicanonical(8, dim=2, walkers=None, seed=0)
    history = sim.iterate(kl=1e-4)          # width, d_k, d_c, updates, seconds per iteration
    res = sim.produce(target_error=0.02)    # ln g(E) with errors; res.canonical(T)

The host loop is the published protocol (protocol.py); the walkers live on the
device (engine.py). Every step of every walker is a pure function of (seed,
global walker index, global step), and the work is queued in time-bounded
slices (clphys.runtime.run_sliced), so Ctrl-C stops within about a second
with the state consistent, and save()/load() resume bit for bit.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, fields, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .. import _validate
from ..progress import Progress, check_progress
from ..runtime import mpi, resolve_device
from ..runtime.longrun import Interrupted, interrupt_deferred, run_sliced
from . import protocol as proto
from .checkpoints import MulticanonicalCheckpoints
from .engine import MAGNET_BUDGET, Engine, buffer_sizes, check_engine_memory, choose_options, default_walkers
from .geometry import LANES, Geometry, groups
from .records import IterationRecord
from .result import MucaResult, make_result, max_ln_g_error, passage_span

TARGET_SECONDS = 0.25
# The production (docs/muca.md, Production): thermalise once under the final
# weights until the walkers made THERM_PASSAGES passages through the energy
# range each on average (recording from earlier biased ln g by 4-15 sigma at
# 2D L = 32 on an H100, less than 3 sigma from 0.53 passages on), then record
# until the largest jackknife error of ln g reaches the target; each part at
# most PASSAGE_CAP * width^2 flips per walker (a passage took 5-15 width^2 at
# L = 8 .. 32 with exact weights)
THERM_PASSAGES = 0.5
# symmetric runs: passages through half the range, twice as many (at 2D L = 64
# half a passage left ln g of one seed in four biased by up to 14 sigma)
THERM_PASSAGES_SYMMETRIC = 1.0
PASSAGE_CAP = 200
DEFAULT_BLOCKS = 100
# walkers that every work group's walkers (wg * per_item, powers of two) divide
BLOCK_ALIGN = 1024
ITERATION_ROWS = 64
# once an iteration's range is covered, its histogram counts a walker's bin at
# every COUNT_EVERY-th step (docs/muca.md, The method)
COUNT_EVERY = 4
DEFAULT_TARGET_ERROR = 0.02


def default_blocks(walkers: int) -> int:
    """The production's groups of walkers by default.

    The most from DEFAULT_BLOCKS down to half of it whose groups each hold a
    multiple of BLOCK_ALIGN walkers, else min(DEFAULT_BLOCKS, walkers).

    Groups of whole work groups let each launch count into one local histogram
    row; a work group that straddles two groups needs two rows, which at 2D
    L = 128 no longer fit an NVIDIA GPU's 48 KiB, so the production fell back to a
    global histogram (recorded launches 47 against 186 flips/ns on the H200,
    docs/muca.md). The rule depends on the walker count alone, so a seed gives
    the same run on every device.
    """
    walkers = int(walkers)
    for blocks in range(DEFAULT_BLOCKS, DEFAULT_BLOCKS // 2 - 1, -1):
        if walkers % (blocks * BLOCK_ALIGN) == 0:
            return blocks
    return min(DEFAULT_BLOCKS, walkers)


def production_args(walkers, geom, blocks=None, updates=None, therm=None, magnetization=None,
                    target_error=None, max_seconds=None, symmetric=False) -> dict:
    """The production's arguments for `walkers` walkers of `geom`, checked and
    with their defaults (no device work): what produce() and run() check first."""
    if blocks is None:
        blocks = default_blocks(walkers)
        if blocks < 2:
            raise ValueError(f"blocks: the default min({DEFAULT_BLOCKS}, walkers) = {blocks} is below 2: the "
                             f"production's errors need at least 2 groups of walkers; use walkers >= 2")
    else:
        blocks = _validate.integer("blocks", blocks, 2, walkers)
    if therm is not None:
        therm = _validate.integer("therm", therm, 0, 2**62)
    if updates is not None:
        updates = _validate.integer("updates", updates, 1, 2**62)
    if target_error is not None:
        target_error = _validate.real("target_error", target_error, 0.0, strict_min=True)
    if max_seconds is not None:
        max_seconds = _validate.real("max_seconds", max_seconds, 0.0, strict_min=True)
    if magnetization is None:
        magnet = not symmetric and buffer_sizes(geom, 1, blocks, True)["magnetization histograms"] <= MAGNET_BUDGET
    elif isinstance(magnetization, (bool, np.bool_)):
        magnet = bool(magnetization)
    else:
        raise TypeError(f"magnetization must be True, False or None, got {magnetization!r}")
    if magnet and symmetric:
        raise ValueError("magnetization=True needs the whole energy range: a symmetric run samples E <= 0, "
                         "and the magnetizations above E = 0 are not the mirror image of those below")
    return {"blocks": blocks, "updates": updates, "therm": therm, "magnet": magnet,
            "target_error": DEFAULT_TARGET_ERROR if target_error is None else target_error,
            "max_seconds": max_seconds}


class History(tuple):
    """The iterations so far (IterationRecord items); ``history.d_k`` etc. give arrays."""

    _fields = tuple(f.name for f in fields(IterationRecord))

    def __getattr__(self, name):
        if name in History._fields:
            return np.array([getattr(r, name) for r in self])
        raise AttributeError(name)

    def __str__(self):
        lines = [f"{'iter':>5} {'width':>7} {'therm':>9} {'updates':>9} {'d_k':>10} {'d_c':>8} "
                 f"{'visited':>7} {'seconds':>8}"]
        lines += [f"{r.iteration:5d} {r.width:7d} {r.therm:9d} {r.updates:9d} {r.d_k:10.3e} "
                  f"{r.d_c:8.3f} {r.visited:7d} {r.seconds:8.3f}" for r in self]
        return "\n".join(lines)


class Multicanonical(MulticanonicalCheckpoints):
    """W walkers, each an L^dim periodic Ising lattice (J = 1), sharing one set
    of multicanonical weights.

    L: even, >= 2; dim: 2 or 3; walkers: default engine.default_walkers (per
    compute unit, size and rank count, docs/muca.md "Walkers"); seed: 64-bit.
    Protocol (Gross et al. 2018): f_therm, z, factor, growth, min_width.
    Kernel options (results do not depend on them): wg (work-group size),
    table and hist ("local" or "global": where the threshold codes and the
    histogram live during a launch), lattice ("local": each work group's
    lattice words copied to local memory for a launch | "global"), per_item
    (walkers per work item: 1, 2, 4, ... 32); defaults from choose_options
    (clphys/muca/engine.py).

    symmetric: sample E <= 0 only, and take ln g(-E) = ln g(E) (exact: the
    periodic lattices of even L are bipartite, and flipping one sublattice
    maps E to -E). A wall in the weights keeps the walkers at E <= 0, so a
    passage (ground state to E = 0) is about four times shorter than one
    through the whole range. Each iteration is planned as one over the
    mirrored range, and the production thermalises to
    THERM_PASSAGES_SYMMETRIC (1.0) passages. The production's ln g and
    canonical energies cover every energy (the sampled half mirrored);
    magnetizations are not recorded (a sublattice flip does not map M to M).
    Measured on a GPU at 2D L = 64 and 128 and 3D L = 8-24: faster to
    converge and to produce (3D L = 24 in minutes instead of an hour of
    thermalisation; docs/muca.md, "Symmetric runs").

    comm (an mpi4py communicator): a collective construction; the walkers
    (default: as many as each rank's device would take) are split over the
    ranks in whole lattice words of 32, each keeping the Philox stream of its
    global index, and each histogram is summed over the ranks (Allreduce)
    where one device would read its own, so iterate() and produce() give, on
    every rank, bit for bit the results of the same walkers on one device.
    save()/load() are not supported over ranks; walker_state() gives this
    rank's walkers.
    """

    def __init__(self, L, dim=2, walkers=None, seed=0, device=None, *, f_therm=30.0, z=2.25,
                 factor=6.0, growth=1.1, min_width=10, wg=None, lattice=None, table=None, hist=None,
                 per_item=None, symmetric=False, comm=None):
        self._comm = comm
        self.symmetric = _validate.boolean("symmetric", symmetric)
        protocol = (f_therm, z, factor, growth, min_width)
        options = (wg, table, hist, per_item, lattice)
        if comm is None:
            self._setup(L, dim, walkers, seed, device, protocol, options, None)
            return
        size, rank = mpi.comm_size_rank(comm)
        total = mpi.all_ok(comm, self._setup, L, dim, walkers, seed, device, protocol, options, size)
        mpi.agree(comm, "multicanonical parameters", L=self.geom.L, dim=self.geom.dim, walkers=total,
                  seed=self.seed, protocol=repr(self.protocol), options=repr(self.options),
                  symmetric=self.symmetric)
        check_split(total, size)         # (the same on every rank: no one is left waiting)
        first, count = mpi.split(groups(total), size, rank)
        self.walkers = total
        mpi.all_ok(comm, self._open, min(LANES * count, total - LANES * first), LANES * first)

    def _setup(self, L, dim, walkers, seed, device, protocol, options, ranks):
        """Checks, device and kernel options; on one device the engine too. With
        `ranks`, returns the walkers of the whole ensemble."""
        self.geom = Geometry.checked(L, dim)
        self.protocol = proto.Protocol.checked(*protocol)
        self.seed = _validate.seed(seed)
        if walkers is not None:
            walkers = _validate.integer("walkers", walkers, 1, 2**31 - 1)
        dev = resolve_device(device)
        self.device = dev
        self._plan_choices = options
        self.options = choose_options(dev.facts, self.geom, *options)     # checked before the walkers
        if walkers is None:
            walkers = default_walkers(dev.facts, self.geom, ranks or 1, self.symmetric)
        if ranks is not None:
            return walkers
        self.walkers = walkers
        self._open(self.walkers, 0)

    def _open(self, count, first):
        """The engine of walkers first .. first + count - 1 of self.walkers."""
        check_engine_memory(self.device, self.geom, count)
        self.options = choose_options(self.device.facts, self.geom, *self._plan_choices, walkers=count)
        self._engine = Engine(self.device, self.geom, count, self.seed, offset=first, total=self.walkers,
                              options=self.options, comm=self._comm)
        self._engine.randomize()
        self.log_weights = np.zeros(self.geom.nbins)
        self.width = self.protocol.min_width
        self._u = 1.0                       # updates per walker before rounding (as cudamuca)
        self._kl = 1e-4
        self._history = []
        self._last_hist = None              # histogram of the last iteration ...
        self._applied = True                # ... and whether the weights were updated from it
        self._iter = None                   # the iteration in progress (after Ctrl-C)
        self._prod = None                   # the production in progress
        self._slice = 64                    # steps per launch slice, adapted to ~TARGET_SECONDS

    # ------------------------------------------------------------ properties
    @property
    def L(self) -> int:
        return self.geom.L

    @property
    def dim(self) -> int:
        return self.geom.dim

    @property
    def top(self) -> int:
        """The highest bin the walkers sample: that of E = 0 if symmetric, else
        the last (bin 0 is the ground state, so this is also the full width)."""
        return (self.geom.nbins - 1) // 2 if self.symmetric else self.geom.nbins - 1

    @property
    def therm_passages(self) -> float:
        """Passages per walker that the production's thermalisation waits for."""
        return THERM_PASSAGES_SYMMETRIC if self.symmetric else THERM_PASSAGES

    def _thresholds(self):
        log_w = proto.walled(self.log_weights, self.top) if self.symmetric else self.log_weights
        return proto.thresholds(log_w, self.dim)

    def _sampled(self, hist):
        """`hist` (..., bins) without counts above the top bin (a walker that
        crossed the wall, with probability 2^-32 per move)."""
        if not self.symmetric:
            return hist
        out = np.array(hist)
        out[..., self.top + 1:] = 0
        return out

    def _production_histograms(self):
        """(ln W, the blocks' histograms) over every bin; symmetric: above E = 0
        the mirror image of below (which also drops the counts above the wall),
        so that ln g, its errors and reweighting see the whole range."""
        log_w, block_hist = self.log_weights, self._reduce(self._engine.hist)
        if not self.symmetric:
            return log_w, block_hist
        top = self.top
        log_w, block_hist = np.array(log_w, np.float64), np.array(block_hist)
        log_w[top + 1:] = log_w[top - 1::-1]
        block_hist[..., top + 1:] = block_hist[..., top - 1::-1]
        return log_w, block_hist

    @property
    def history(self) -> History:
        return History(self._history)

    @property
    def energies(self) -> np.ndarray:
        """The energy of every bin of log_weights."""
        return self.geom.energies()

    @property
    def converged(self) -> bool:
        """The last iteration met the d_k bound of the last iterate() call, its
        histogram spanning the range reached."""
        if not self._history or self._applied or self._history[-1].d_k >= self._kl:
            return False
        # an empty histogram has d_k = 0 (1 recorded step of 4 counted, e.g. 2D
        # L = 8 with 67584 walkers): flat only if it spans the range reached
        return proto.spans(self._last_hist, min(self.width, self.top))

    @property
    def kl(self) -> float:
        """The d_k bound of the last iterate() call (1e-4 before any)."""
        return self._kl

    @property
    def steps(self) -> int:
        """Flips attempted by every walker so far (the global step counter)."""
        return self._engine.t

    def set_log_weights(self, log_w: ArrayLike) -> None:
        """Use these ln W(E) (one per bin of `energies`) from now on, e.g. -ln g(E)."""
        if self._iter is not None or self._prod is not None:
            raise ValueError("an iteration or production is in progress; finish it first")
        w = _validate.finite_array("log_weights", log_w, ndim=1, dtype=float)
        if w.shape != (self.geom.nbins,):
            raise ValueError(f"log_weights must have {self.geom.nbins} entries (one per energy "
                             f"{self.geom.e_min} .. {-self.geom.e_min} in steps of 4), got {w.shape[0]}")
        self.log_weights = w.astype(np.float64).copy()
        self._applied = True

    def walker_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lattices (words, walkers) uint32, energy bins, magnetizations) from the device."""
        bins, mags = self._engine.read_bins()
        return self._engine.read_lattice(), bins, mags

    def __repr__(self):
        return (f"<Multicanonical {self.geom}{', E <= 0' if self.symmetric else ''}, {self.walkers} walkers, seed {self.seed}, "
                f"{len(self._history)} iterations, on {self.device.name}>")

    # ------------------------------------------------------------ the weight iteration
    def iterate(self, kl: float = 1e-4, max_iterations: int | None = None, progress: bool | Callable | None = None,
                callback: Callable | None = None) -> History:
        """Weight iterations until d_k < kl (or max_iterations more of them).

        progress: None (a line per iteration on a terminal), True (always),
        False, or a callable f(done, max_iterations or 0); callback: called with
        each IterationRecord. Ctrl-C raises clphys.runtime.Interrupted within
        about a second, leaving the object consistent (save() it to resume).
        """
        self._kl = _validate.real("kl", kl, 0.0, strict_min=True)
        if max_iterations is not None:
            max_iterations = _validate.integer("max_iterations", max_iterations, 0)
        check_progress(progress)
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable, got {callback!r}")
        if self._prod is not None:
            raise ValueError("a production run is in progress: finish it with produce() first")
        if self._comm is not None and self._comm.Get_rank():
            progress = False
        report = _line_reporter(progress, self.top)
        done = 0
        with interrupt_deferred() as pending:
            while max_iterations is None or done < max_iterations:
                if self._iter is None:
                    if not self._applied:
                        if self.converged:
                            break
                        self._apply(self._last_hist)
                    self._start_iteration()
                self._run_iteration()
                record = self._finish_iteration()
                done += 1
                report(record, done, max_iterations)
                if callback is not None:
                    callback(record)
                stop = pending()
                if self._comm is not None:            # every rank stops after the same iteration
                    stop = any(self._comm.allgather(bool(stop)))
                if stop:
                    raise Interrupted(done, max_iterations or done, "iterations")
        return self.history

    def _start_iteration(self):
        # symmetric: the widths of the mirrored range, so that each iteration
        # thermalises and records as long as one over the whole range (with half
        # of them the weights diverged at 2D L = 128)
        k = 2 if self.symmetric else 1
        therm, updates, u = self.protocol.plan(k * self.width, k * self.top, self.walkers, self._u)
        # a histogram in global memory: ITERATION_ROWS rows (walker groups), summed
        # after the iteration (atomics of all walkers on one row contend)
        rows = ITERATION_ROWS if self._engine.options["hist"] == "global" else 1
        self._engine.configure(min(rows, self.walkers), False, every=self._iteration_every())
        self._engine.set_thresholds(self._thresholds())
        self._iter = {"therm": therm, "updates": updates, "u": u, "done": 0, "seconds": 0.0}

    def _iteration_every(self):
        """Steps per counted step of the next iteration's histogram."""
        return COUNT_EVERY if self.width >= self.top else 1

    def _advance(self, state, n):
        """Enqueue n more steps of the running phase (thermalisation first)."""
        skip = min(n, max(0, state["therm"] - state["done"]))
        self._engine.advance(n, skip)
        state["done"] += n

    def _run_phase(self, state, progress=False, label="", n=None):
        """The rest of the phase (or its next n steps) in time-bounded slices,
        ending early once a production's time budget (state["budget"]) is spent."""
        total = state["therm"] + state["updates"]
        t0 = time.perf_counter()
        start = state["done"]
        budget = state.get("budget", 0.0)
        spent = (lambda: state["seconds"] + time.perf_counter() - t0 >= budget) if budget > 0 else None
        try:
            run_sliced(total - start if n is None else n, lambda s, n: self._advance(state, n),
                       self._engine.queue,
                       progress=progress, label=label, what="steps per walker",
                       target_seconds=TARGET_SECONDS, first=self._slice, comm=self._comm, until=spent)
        finally:
            elapsed = time.perf_counter() - t0
            state["seconds"] += elapsed
            if state["done"] > start and elapsed > 0:
                rate = (state["done"] - start) / elapsed
                self._slice = max(1, int(rate * TARGET_SECONDS))

    def _run_iteration(self):
        self._run_phase(self._iter)

    def _finish_iteration(self):
        it = self._iter
        t0 = time.perf_counter()
        self._engine.flush()
        hist = self._sampled(self._reduce(self._engine.hist.sum(axis=0)))
        record = IterationRecord(
            iteration=len(self._history) + 1, width=int(self.width), therm=it["therm"],
            updates=it["updates"], d_k=proto.kullback_leibler(hist), d_c=proto.chebyshev(hist),
            visited=int(np.count_nonzero(hist)), seconds=it["seconds"] + time.perf_counter() - t0,
            flips=self.walkers * (it["therm"] + it["updates"]))
        self._history.append(record)
        self._last_hist, self._applied, self._u, self._iter = hist, False, it["u"], None
        return record

    def _apply(self, hist):
        rng = proto.covered_range(hist)
        if rng is not None:
            self.width = max(self.width, rng[1] - rng[0])
        self.log_weights = proto.update_weights(self.log_weights, hist)
        self._applied = True

    def _reduce(self, counts):
        """The histograms of every walker: the engine's totals, which its
        flush() already summed over the ranks (an MPI Allreduce of the counts)."""
        return counts

    # ------------------------------------------------------------ production
    @property
    def producing(self) -> bool:
        """A production run was interrupted (produce() continues it)."""
        return self._prod is not None

    @property
    def production_progress(self) -> dict | None:
        """Where an interrupted production stands (None without one): `phase`
        ("therm" or "record"), `flips_per_walker` done, `passages` per walker
        so far, `therm_flips_per_walker` (None while thermalising),
        `max_error` of ln g at the last check (None before one) and
        `seconds` spent."""
        p = self._prod
        if p is None:
            return None
        return {"phase": p["phase"], "flips_per_walker": int(p["done"]), "passages": float(p["passages"]),
                "therm_flips_per_walker": None if p["phase"] == "therm" else int(p["therm"]),
                "max_error": float(p["error"]) if p["error"] > 0 else None, "seconds": float(p["seconds"])}

    def produce(self, blocks: int | None = None, updates: int | None = None, therm: int | None = None,
                magnetization: bool | None = None, progress: bool | Callable | None = None, *,
                target_error: float | None = None, max_seconds: float | None = None) -> MucaResult:
        """A production run with the current weights: ln g(E) with errors.

        * thermalisation under these weights, once, not recorded: until the
          walkers made THERM_PASSAGES (0.5; symmetric: 1.0) passages through the energy range
          each on average (a passage: from one end to the other; a round trip
          is two), counted on the device (`therm`: that many flips per walker
          instead). The iteration leaves the walkers in the distribution of its
          last short window; recording from there biases ln g (docs/muca.md);
        * recording until the largest jackknife error of ln g over the visited
          energies is <= target_error (default DEFAULT_TARGET_ERROR), checked
          every `check` flips per walker (fixed by the size: a seed gives the
          same run), or until max_seconds of production (a wall-clock budget,
          looked at after every launch slice of ~TARGET_SECONDS: then the run
          depends on the device's speed), or the cap of
          PASSAGE_CAP * width^2 flips per walker; `updates`: exactly that many
          recorded flips per walker instead.

        The walkers form `blocks` groups of consecutive walkers, independent
        chains whose histograms give the jackknife errors; by default the most
        groups from 100 down to 50 that each hold a multiple of 1024 walkers,
        else min(100, walkers) (see default_blocks). magnetization: record
        (E, |M|) histograms for canonical() (default: when they take at most
        64 MiB). progress: a bar for the thermalisation (its passages against
        THERM_PASSAGES), then one for the recording ((target / error)^2, which
        grows like the recorded flips), each from 0 to 1000 for a callable; both
        grow about linearly with the flips, so each bar's time left is a fair
        estimate. The result says whether the target was reached (`reached`); a
        RuntimeWarning says when it was not or the thermalisation ended short. Ctrl-C raises
        clphys.runtime.Interrupted; save() and a later produce() continue the
        run bit for bit.
        """
        check_progress(progress)
        if self._comm is not None and self._comm.Get_rank():
            progress = False
        if self._iter is not None:
            raise ValueError("an iteration was interrupted: finish it with iterate() first")
        plan = production_args(self.walkers, self.geom, blocks, updates, therm, magnetization,
                               target_error, max_seconds, self.symmetric)
        if self._prod is None:
            self._start_production(plan)
        else:
            self._check_resumed_production(plan, dict(blocks=blocks, updates=updates, therm=therm,
                                                      magnetization=magnetization,
                                                      target_error=target_error, max_seconds=max_seconds))
        prod = self._prod
        self._run_production(progress)
        t0 = time.perf_counter()
        eng = self._engine
        eng.flush()
        log_w, block_hist = self._production_histograms()
        moments = self._reduce(eng.moments) if eng.magnet else None
        result = make_result(self.geom, log_w, block_hist, moments, walkers=self.walkers,
                             therm=prod["therm"], updates=prod["updates"], converged=self.converged,
                             iterations=len(self._history),
                             seconds=prod["seconds"] + time.perf_counter() - t0,
                             therm_passages=prod["therm_passages"], passages=prod["passages"],
                             target_error=prod["target"], symmetric=self.symmetric)
        self._prod = None
        self._warn_short(result)
        return result

    def _warn_short(self, res):
        short = []
        if res.therm_passages < self.therm_passages:
            short.append(f"the thermalisation under the final weights made {res.therm_passages:.2f} passages "
                         f"per walker {passage_span(self.symmetric)} (wanted {self.therm_passages}): ln g may be "
                         f"biased by more than its errors")
        if not res.reached:
            short.append(f"the largest error of ln g is {res.max_error:.3g}, above the target "
                         f"{res.target_error:g}" + (" (some energies were seen by one group of walkers only: "
                                                    "their errors are unknown)" if not np.isfinite(res.max_error)
                                                    else ""))
        if short:
            import warnings
            warnings.warn(f"multicanonical {self.geom}: " + "; ".join(short) + " (a longer production: "
                          "therm=None, updates=None, a larger max_seconds)", RuntimeWarning, stacklevel=3)

    def production_weights(self) -> np.ndarray:
        """The log weights a production would use now.

        Where the iteration stopped before it converged, its last histogram is
        applied first, as cudamuca does (the simulation keeps them).

        Returns
        -------
        numpy.ndarray
            ln W(E), one per bin of `energies` (a copy).

        Raises
        ------
        ValueError
            An iteration was interrupted (as produce()).
        """
        if self._iter is not None:
            raise ValueError("an iteration was interrupted: finish it with iterate() first")
        self._apply_pending()
        return self.log_weights.copy()

    def _apply_pending(self):
        if not self._applied and not self.converged:
            self._apply(self._last_hist)    # stopped early: use the newest weights, as cudamuca

    def for_production(self, walkers: int) -> Multicanonical:
        """A new simulation of other walkers with this one's weights, to produce with.

        The production is one thermalisation per walker, and fewer walkers make
        faster chains (2D L = 128 on an H200: 16896 walkers produced in 32
        minutes, 22 of them thermalising; the default 135168 would take ~37).

        Parameters
        ----------
        walkers : int
            Walkers of the new simulation, on new lattices, split over the same
            MPI ranks, with the kernel plan for that count; checked against the
            device's memory before any device work.

        Returns
        -------
        Multicanonical
            The same size, seed, protocol and range, holding production_weights().
        """
        walkers = _validate.integer("walkers", walkers, 1, 2**31 - 1)
        check_walkers(self.device, self.geom, walkers, self._comm)
        new = Multicanonical(self.L, self.dim, walkers, self.seed, self.device, symmetric=self.symmetric,
                             comm=self._comm, **asdict(self.protocol))
        new.set_log_weights(self.production_weights())
        return new

    def _start_production(self, plan):
        check_engine_memory(self.device, self.geom, self._engine.W, plan["blocks"], plan["magnet"])
        self._apply_pending()
        eng = self._engine
        eng.configure(plan["blocks"], plan["magnet"], trips=True)
        eng.reset_passages(0, self.top)     # passages between the lowest and the highest energy sampled
        eng.measure()                       # magnetizations are tracked only while recorded
        eng.set_thresholds(self._thresholds())
        w = float(self.top)
        cap = max(64, int(PASSAGE_CAP * w * w))
        therm, updates = plan["therm"], plan["updates"]
        self._prod = {"blocks": plan["blocks"], "magnet": plan["magnet"], "done": 0, "seconds": 0.0,
                      "therm_fixed": therm is not None, "updates_fixed": updates is not None,
                      # until decided: the cap (every step of the part unrecorded / recorded)
                      "therm": cap if therm is None else therm, "updates": cap if updates is None else updates,
                      "check": max(64, int(w * w) // 4), "cap": cap,
                      "phase": "record" if therm == 0 else "therm", "therm_passages": 0.0, "passages": 0.0,
                      "target": plan["target_error"], "budget": plan["max_seconds"] or 0.0, "error": -1.0}

    def _check_resumed_production(self, plan, given):
        prod = self._prod
        for name, key in (("blocks", "blocks"), ("magnetization", "magnet"), ("therm", "therm"),
                          ("updates", "updates"), ("target_error", "target")):
            value = given[name]
            if value is None:
                continue
            fixed = prod.get(key + "_fixed", True)
            if not fixed or value != prod[key]:
                raise ValueError(f"the production in progress has {name} = "
                                 f"{prod[key] if fixed else 'None (by passages)'}, got {value}")
        if given["max_seconds"] is not None:          # a new budget for the rest of the run
            prod["budget"] = prod["seconds"] + plan["max_seconds"]

    def mean_passages(self) -> float:
        """Passages per walker (through the whole energy range) counted since
        the production began, averaged over every walker (all ranks)."""
        words = self._engine.read_passages()
        total = float(np.sum(words >> 2, dtype=np.int64))
        if self._comm is not None:
            total = self._comm.allreduce(total)
        return total / self.walkers

    def _current_error(self):
        """The largest jackknife error of ln g over the energies recorded so far."""
        eng = self._engine
        eng.flush()
        return max_ln_g_error(self.geom, *self._production_histograms())

    def _run_production(self, progress):
        """Rounds of `check` steps (to the next multiple: the same steps on
        resume), deciding after each where the thermalisation and the recording end."""
        prod = self._prod
        bars = _PhaseBars(progress)
        # Ctrl-C between the slices (in a check) is acted on after the check: the
        # histograms are never left half flushed
        with interrupt_deferred() as pending, contextlib.closing(bars):
            while prod["phase"] != "done":
                end = prod["therm"] if prod["phase"] == "therm" else prod["therm"] + prod["updates"]
                n = min(end, (prod["done"] // prod["check"] + 1) * prod["check"]) - prod["done"]
                if n > 0:
                    self._run_phase(prod, n=n)
                p = self.mean_passages()
                prod["passages"] = p
                late = prod["budget"] > 0 and prod["seconds"] >= prod["budget"]
                if self._comm is not None:            # the ranks' clocks differ: one verdict
                    late = any(self._comm.allgather(late))
                if prod["phase"] == "therm":
                    ended = (prod["done"] >= prod["therm"] or late
                             or (not prod["therm_fixed"] and p >= self.therm_passages))
                    # the bar in what ends the phase: passages (flips, for a fixed length)
                    part = (prod["done"] / max(1, prod["therm"]) if prod["therm_fixed"]
                            else p / self.therm_passages)
                    bars.show("therm", part, f"muca production, thermalisation: {p:.2f} of "
                                             f"{self.therm_passages:g} passages per walker")
                    if ended:
                        prod["therm"], prod["therm_passages"], prod["phase"] = prod["done"], p, "record"
                else:
                    rec = prod["done"] - prod["therm"]
                    if prod["updates_fixed"]:
                        stop = rec >= prod["updates"]
                        part = rec / max(1, prod["updates"])
                    else:
                        err = self._current_error()
                        prod["error"] = err if math.isfinite(err) else -1.0
                        stop = err <= prod["target"] or rec >= prod["cap"] or (late and rec > 0)
                        # the squared error falls like 1 / (recorded flips)
                        part = (prod["target"] / err) ** 2 if err > 0 else 1.0
                    if stop:
                        prod["updates"], prod["phase"] = rec, "done"
                        part = 1.0
                    bars.show("record", part, f"muca production, recording: {p / 2:.2f} round trips per walker"
                                              + (f", error {prod['error']:.2g} (target {prod['target']:g})"
                                                 if prod["error"] > 0 else ""))
                stop = prod["phase"] != "done" and pending()
                if self._comm is not None:            # every rank stops after the same check
                    stop = any(self._comm.allgather(bool(stop)))
                if stop:
                    raise Interrupted(prod["done"], prod["therm"] + prod["updates"],
                                      "steps per walker of the production")


class _PhaseBars:
    """The production's progress: a bar of 1000 units for each phase in turn,
    filled to the fraction of the phase done."""

    def __init__(self, progress):
        self.progress, self.phase, self.bar, self.shown = progress, None, None, 0

    def show(self, phase, fraction, label):
        if phase != self.phase:
            self.close()
            self.phase, self.bar, self.shown = phase, Progress(1000, self.progress, label=label), 0
        self.bar.label = label
        done = int(1000 * min(1.0, fraction))
        if done > self.shown:
            self.bar.update(done - self.shown)
            self.shown = done

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _line_reporter(progress, full_width):
    """One line per iteration on stderr (progress True, or None on a terminal),
    or progress(done, max_iterations or 0) for a callable."""
    if callable(progress):
        return lambda record, done, most: progress(done, most or 0)
    show = progress is True or (progress is None and sys.stderr.isatty())
    if not show:
        return lambda record, done, most: None

    def line(r, done, most):
        print(f"muca iteration {r.iteration}: width {r.width}/{full_width}, d_k {r.d_k:.3e}, "
              f"d_c {r.d_c:.3f}, therm {r.therm}, updates {r.updates}, {r.seconds:.3f} s",
              file=sys.stderr, flush=True)
    return line


def check_split(walkers: int, ranks: int, name: str = "") -> None:
    """ValueError unless every one of `ranks` MPI ranks gets a lattice word of the
    walkers (`name`: the argument that gave them, for the message)."""
    if groups(walkers) < ranks:
        raise ValueError(f"{name + ' ' if name else ''}{walkers}{'' if name else ' walkers'} cannot be split "
                         f"over {ranks} MPI ranks: each rank needs at least one lattice word of {LANES} "
                         f"walkers (use >= {LANES * (ranks - 1) + 1})")


def check_walkers(device, geom: Geometry, walkers: int, comm: Any = None, name: str = "") -> None:
    """ValueError unless `walkers` split over the ranks of `comm` (None: one
    process) give each a word and fit the device (a rank's largest share),
    before any device work."""
    ranks = mpi.comm_size(comm)
    check_split(walkers, ranks, name)
    check_engine_memory(device, geom, LANES * -(-groups(walkers) // ranks))


def run(L: int, dim: int = 2, walkers: int | None = None, seed: int = 0, device: Any = None, *, kl: float = 1e-4,
        max_iterations: int | None = None, blocks: int | None = None, updates: int | None = None,
        magnetization: bool | None = None, target_error: float | None = None, max_seconds: float | None = None,
        progress: bool | Callable | None = None, symmetric: bool = False, production_walkers: int | None = None,
        **options: Any) -> MucaResult:
    """Iterate the weights to d_k < kl, then a production run: the result
    (see Multicanonical, iterate and produce for the arguments; every argument
    is checked before any device work). With production_walkers, the
    production runs on that many new walkers (Multicanonical.for_production).
    Warns if max_iterations ran out before convergence (the result says
    converged=False)."""
    if walkers is not None:
        walkers = _validate.integer("walkers", walkers, 1, 2**31 - 1)
    geom = Geometry.checked(L, dim)
    symmetric = _validate.boolean("symmetric", symmetric)
    count = (walkers if walkers is not None
             else default_walkers(resolve_device(device).facts, geom, mpi.comm_size(options.get("comm")), symmetric))
    if production_walkers is not None:
        count = _validate.integer("production_walkers", production_walkers, 1, 2**31 - 1)
    production_args(count, geom, blocks, updates, None, magnetization, target_error, max_seconds, symmetric)
    if production_walkers is not None:
        check_walkers(resolve_device(device), geom, count, options.get("comm"))
    _validate.real("kl", kl, 0.0, strict_min=True)
    if max_iterations is not None:
        _validate.integer("max_iterations", max_iterations, 0)
    check_progress(progress)
    sim = Multicanonical(L, dim, walkers, seed, device, symmetric=symmetric, **options)
    sim.iterate(kl=kl, max_iterations=max_iterations, progress=progress)
    if not sim.converged:
        import warnings
        warnings.warn(f"multicanonical {sim.geom}: d_k = {sim.history[-1].d_k:.3g} >= {kl} after "
                      f"{len(sim.history)} iterations; producing with the last weights",
                      RuntimeWarning, stacklevel=2)
    producer = sim if production_walkers is None else sim.for_production(production_walkers)
    res = producer.produce(blocks=blocks, updates=updates, magnetization=magnetization, progress=progress,
                           target_error=target_error, max_seconds=max_seconds)
    return replace(res, converged=sim.converged, iterations=len(sim.history))   # how the weights were made
