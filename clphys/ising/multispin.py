"""``algorithm="multispin"``: one bit per spin, 32 spins per word, bitwise
neighbour counting (cl_kernels/ising/multispin.cl). In 3D, rows of Lx = 8,
16, 32 sites are folded: a word holds the colour's spins of 32 / (Lx/2) rows
of a z plane (clphys.ising.backends.multispin_fold, docs/ising.md "Folded
rows"); ``plane_rows`` is the word rows per plane.

Options (None: the device's default, from its DeviceFacts):

* ``spins_per_word``: how many spins one 32-bit Philox word decides. 1: one
  word per site update, the words and spins of the checkerboard algorithm
  (clphys.ising.reference.checkerboard_sweeps); "auto" (default,
  DEFAULT_SPINS_PER_WORD) or 2, 4, 8: one word decides the Metropolis tests of
  k spins through a per-replica alias table whose single-spin acceptance
  probabilities equal the one-word ones exactly (clphys.ising.thresholds,
  docs/ising.md "Several spins per random word"); "auto" takes the largest k
  the table allows (4 for the ferromagnet in zero field, 2D and 3D);

* ``lanes``: 4 or 8 Philox counters per vector call (SIMD width on CPUs;
  default 8 there), or 1: scalar Philox calls, each word's 32 spins in
  straight-line code with the 4 words of a call kept in registers, and
  work items that walk down rows, consecutive items on consecutive words
  (default on GPUs: fewest instructions per spin, coalesced loads);
* ``words_per_item``: words (32 spins each) per work item, reduced to the
  largest power of two that fits: with lanes 4/8, 1, 2, 4 or 8 consecutive
  words of a row (dividing the words per row; with rows shorter than that,
  of whole consecutive rows, where the rows have no halo, and in 3D with
  planes shorter than that of whole consecutive planes); with lanes 1, 1
  to 32 words of consecutive rows (dividing Ly), one per loop step (default:
  8 on CPUs; 4 on GPUs, halved while the launch would have fewer than
  ``MIN_GROUPS_PER_CU`` work groups per compute unit);
* ``accept`` (lanes 1): "select" (default) picks each spin's threshold from
  slot-index bit planes, then one integer compare; "compare" compares every
  word with every slot's threshold into one packed mask per slot;
* ``wg``: work-group size; None lets the driver choose on CPUs, 128 on GPUs.

Launches: one per half-sweep, or several sweeps per launch (ising_ms_multisweep:
a work group keeps a tile, a band of rows (2D) or z planes (3D) with a halo of
2m slabs, in 3D optionally cut in y with a halo of 2m rows, or a whole replica
when it fits, in local memory and sweeps it between barriers; the halo shrinks
by one slab per half-sweep, so the spins are exactly those of m sweeps of
single launches). On GPUs MULTISWEEP_SWEEPS up to MULTISWEEP_MAX_SITES sites in
all (where launches, not the device, set the pace), on CPUs the cheapest plan
by _cpu_plan's model, else single launches; the tile is the cheapest that fits
local memory by a simple cost model (_best_tile, _cpu_plan; GPUs cut in y only
where no band of whole planes fits). Tests and benchmarks force a plan through
clphys.ising.multispin_plan.tuned (LaunchChoice).

The threshold table is split on the host into classes accepted with certainty
(threshold 2^32 - 1 in every replica) and slots of classes that share a
threshold column; the kernel is specialised to that structure, which depends on
the signs of J and h but not on the temperature, so temperature scans compile once.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from .. import _validate
from .. import rng as _rng
from . import thresholds as _thr
from ._backend import BackendDefaults
from ._device import SumsReducer, check_options, check_sides, device_wg, enqueue_upload, zeroed_buffer
from .backends import multispin_fold
from .multispin_plan import LaunchChoice, LaunchPlanning, MultispinPlan
from .multispin_source import kernel_params

MAX_SITES = 2**32          # 32-bit compact and in-row site indices in the kernels
threshold_structure = _thr.threshold_structure     # re-exported (older imports)
DEFAULT_SPINS_PER_WORD = _thr.DEFAULT_SPINS_PER_WORD     # the switch lives in thresholds.py
SPINS_PER_WORD = (1, "auto") + _thr.JOINT_SPINS


class MultispinBackend(LaunchPlanning, BackendDefaults):
    """Device state and kernels of the "multispin" algorithm (one bit a spin,
    Philox); see the module doc and :class:`clphys.ising._backend.IsingBackend`."""
    algorithm = "multispin"
    dims = (2, 3)
    rngs = ("philox",)
    options = {"words_per_item": None, "lanes": None, "accept": "select", "wg": None,
               "spins_per_word": None}
    # defaults by device kind (DeviceFacts.is_gpu): see the module docstring and
    # docs/ising.md "Speed" for the measurements behind them
    GPU_DEFAULTS = {"lanes": 1, "words_per_item": 4}
    MIN_GROUPS_PER_CU = 6
    CPU_DEFAULTS = {"lanes": 8, "words_per_item": 8}
    # Several sweeps per launch up to this many sites (all replicas), by
    # DeviceFacts.is_gpu: two launches per sweep (~10 us each on an H100,
    # 15-30 us on PoCL) cost more than the sweep itself there.
    MULTISWEEP_MAX_SITES = {True: 2**25, False: 2**19}
    # GPUs: m for a whole replica in local memory, for bands of whole slabs,
    # and for 3D tiles cut in y too (where no band fits: the least redundant)
    MULTISWEEP_SWEEPS = {"whole": 4, "band": 4, "tile": 2}
    MULTISWEEP_WG = {True: 1024, False: 256}
    # the global index of replica 0 in the Philox counters: set by an ensemble
    # split over MPI ranks (clphys.ising.lattice.Ensemble(comm=...))
    takes_replica_offset = True
    measures_on_device = True
    r0 = 0
    # On CPUs (one core per work group) the plan, single launches or m sweeps
    # per launch with a tile, is the cheapest by the model of _cpu_plan: a
    # launch is worth CPU_LAUNCH_WORDS word updates of one core (PoCL: ~7-30
    # us per launch, ~9-25 ns per 32-spin word), a work item's run of W words
    # CPU_RUN_WORDS more, m from CPU_SWEEPS; the model counts on all cores but
    # CPU_SPARE_CORES (on the shared 2-core machine where it was fitted, two
    # groups ran no faster than one: docs/ising.md, Speed, PoCL)
    CPU_LAUNCH_WORDS = 400
    CPU_RUN_WORDS = 0.6
    CPU_SPARE_CORES = 1
    CPU_SWEEPS = (1, 2, 4, 8, 16, 32, 64)

    @classmethod
    def check_shape(cls, shape):
        """ValueError unless Lx is a multiple of 8 up to 64 (of 64 beyond) and Ly, Lz are even."""
        check_sides(shape, "multispin", "Lx a multiple of 8 up to 64, or of 64 beyond; "
                    "Ly (and Lz) even and >= 2",
                    lambda L, axis: (L % 8 == 0 and (L <= 64 or L % 64 == 0)) if axis == "x"
                    else (L >= 2 and L % 2 == 0))
        if int(np.prod(shape)) > MAX_SITES:
            raise ValueError(f"multispin: at most {MAX_SITES} sites per lattice, got shape {shape}")

    @classmethod
    def check_options(cls, options):
        """The options merged with the defaults, each value checked (no device work)."""
        opts = check_options(cls, options)
        if opts["lanes"] is not None:
            _validate.choice("lanes", opts["lanes"], (1, 4, 8))
        if opts["words_per_item"] is not None:
            allowed = (1, 2, 4, 8) if opts["lanes"] in (4, 8) else (1, 2, 4, 8, 16, 32)
            _validate.choice("words_per_item", opts["words_per_item"], allowed)
        _validate.choice("accept", opts["accept"], ("select", "compare"))
        if opts["spins_per_word"] is not None:
            _validate.choice("spins_per_word", opts["spins_per_word"], SPINS_PER_WORD)
        return opts

    @classmethod
    def device_bytes(cls, facts, shape, n_replicas, launch: LaunchChoice | None = None, **options) -> dict:
        """{buffer: bytes} this backend allocates for n_replicas lattices of
        `shape` (for the memory check before any device work); launch: a forced
        launch plan (clphys.ising.multispin_plan.tuned)."""
        launch = launch or LaunchChoice()
        words = int(np.prod(shape[1:])) * max(1, shape[0] // 64) // multispin_fold(shape)
        spins = 2 * 4 * n_replicas * words
        need = {"spins (1 bit each)": spins,
                "partial sums": SumsReducer.nbytes(facts, n_replicas, words),
                "thresholds": 4 * n_replicas * 2 * (2 * len(shape) + 1),
                "joint decision tables": 8 * _thr.MAX_CELLS * n_replicas}
        if (n_replicas * int(np.prod(shape)) <= cls.MULTISWEEP_MAX_SITES[facts.is_gpu]
                or launch.band is not None or (launch.sweeps_per_launch or 1) > 1):
            need["band copies (several sweeps per launch)"] = spins
        return need

    def __init__(self, dev, shape, n_replicas, *, rng, seed, own=None, halo=1, launch=None, **options):
        """own (clphys.ising.slabs): the lattice is one rank's share of a lattice
        split over MPI ranks: its first `own` slabs (rows in 2D, z planes in 3D)
        are its own, the 2 x halo slabs after them are halos; one sweep per launch.
        launch: a LaunchChoice forced by clphys.ising.multispin_plan.tuned, or None."""
        opts = self.check_options(options)
        launch = launch or LaunchChoice()
        if own is not None:
            if launch.sweeps_per_launch not in (None, 1) or launch.band is not None:
                raise ValueError("a lattice split over MPI ranks runs one sweep per launch: "
                                 "sweeps_per_launch must be 1 (or None) and band None")
            launch = LaunchChoice(sweeps_per_launch=1)
        defaults = self.GPU_DEFAULTS if dev.facts.is_gpu else self.CPU_DEFAULTS
        W = opts["words_per_item"] if opts["words_per_item"] is not None else defaults["words_per_item"]
        lanes = opts["lanes"] if opts["lanes"] is not None else defaults["lanes"]
        if opts["lanes"] is None and W not in (1, 2, 4, 8):
            lanes = 1                   # the default follows the words_per_item the user chose
        if lanes > 1 and W not in (1, 2, 4, 8):
            raise ValueError(f"words_per_item must be one of 1, 2, 4, 8 with lanes={lanes}; got {W}")
        wg = device_wg(dev, opts["wg"], gpu_default=128)
        self.dev, self.shape, self.R, self.seed = dev, tuple(shape), n_replicas, seed
        self.dim = len(shape)
        self.N = int(np.prod(shape))
        Lx, Ly = shape[0], shape[1]
        self.Lz = shape[2] if self.dim == 3 else 1
        S = Lx // 2
        self.WR = max(1, S // 32)
        # 3D rows shorter than 32 spins of a colour: several rows per word
        self.fold = multispin_fold(shape)
        self.plane_rows = Ly // self.fold         # word rows per z plane
        self.rows = self.plane_rows * self.Lz
        self.words = self.rows * self.WR          # per colour and replica
        self.row_bits = min(S, 32) * self.fold    # spins per word
        spw = opts["spins_per_word"]
        self.spins_per_word = _thr.DEFAULT_SPINS_PER_WORD if spw is None else spw
        if self.spins_per_word not in (1, "auto") and self.row_bits % self.spins_per_word:
            raise ValueError(f"spins_per_word={self.spins_per_word} must divide the "
                             f"{self.row_bits} spins of a row word (Lx = {Lx})")
        self.lanes, self._wanted_W, self._own, self._halo = lanes, W, own, halo
        self.sweeps_per_launch, tile = self._plan_launches(launch, dev)
        W = self._item_words(tile)
        self.band = self.yband = self.mwg = None
        if tile is not None:
            T, BH, TY, HY = tile
            self.band, self.yband = (T, BH), (None if TY is None else (TY, HY))
            self.mwg = self._group_size(tile, self.sweeps_per_launch, W if lanes > 1 else 1, dev.facts)
        if opts["words_per_item"] is None and dev.facts.is_gpu:
            # keep at least MIN_GROUPS_PER_CU work groups per compute unit (the
            # waves' tail costs more than the per-item setup saved)
            min_items = self.MIN_GROUPS_PER_CU * dev.facts.compute_units * wg
            while W > 1 and n_replicas * self.words // W < min_items:
                W //= 2
        self.W, self.wg = W, wg
        # rows of one work item, and the rows (words per colour) updated and summed
        self.rows_per_item = W if lanes == 1 else max(1, W // self.WR)
        self.own_rows = self.rows if own is None else own * (self.plane_rows if self.dim == 3 else 1)
        self.sum_words = self.own_rows * self.WR
        self.reducer = SumsReducer(dev, n_replicas, self.words)
        self._params = dict(dim=self.dim, Lx=Lx, Ly=Ly, Lz=self.Lz, fold=self.fold, W=W, lanes=lanes, wg=wg,
                            rwg=self.reducer.wg, band=self.band, yband=self.yband, mwg=self.mwg)
        self._accept = opts["accept"]
        self._programs = {}
        self._launchers = {}          # kernel instances by (program, name, variant)
        # pack/unpack/sums come from the smallest variant (no slots)
        self.prg = self._program(tuple(range(2 * (2 * self.dim + 1))), (), None)
        nbytes = 4 * n_replicas * self.words
        self.bufs = [zeroed_buffer(dev, nbytes) for _ in (0, 1)]
        # the multi-sweep kernel reads one pair and writes the other, then they swap
        self.alt = [zeroed_buffer(dev, nbytes) for _ in (0, 1)] if self.band else None
        self._pair = self.bufs
        self._nat = None
        self._thr_key = None
        self.key = _rng.seed_key(seed)
        self.t = 0

    @property
    def plan(self) -> MultispinPlan:
        """The launch plan chosen for this lattice on this device."""
        return MultispinPlan(self.sweeps_per_launch, self.band, self.yband, self.W, self.lanes, self.wg,
                             self.mwg)

    def _program(self, always, slots, joint):
        key = (always, slots, joint)
        if key not in self._programs:
            params = dict(self._params)
            if self.lanes == 1:
                params["accept"] = self._accept
            prg = self.dev.build("ising/multispin.cl", **kernel_params(always=always, slots=slots, joint=joint,
                                                                       **params))
            if self.band and prg.ising_ms_multisweep.work_group_limit(self.dev) < self.mwg:
                # registers cap the group: rebuild every program with the cap
                # (a power of two) so that they stay interchangeable
                cap = prg.ising_ms_multisweep.work_group_limit(self.dev)
                self.mwg = self._params["mwg"] = 1 << (cap.bit_length() - 1)
                self._programs.clear()
                self._launchers.clear()
                return self._program(always, slots, joint)
            self._programs[key] = prg
        return self._programs[key]

    def _natural(self):
        if self._nat is None:
            self._nat = zeroed_buffer(self.dev, self.R * self.N)
        return self._nat

    # ------------------------------------------------------------ spins
    def set_spins_device(self, buffer):
        """Pack an int8 device buffer in natural order into the two colours' words."""
        n = 2 * self.R * self.words
        self.prg.ising_ms_pack(self.dev.queue, (n,), None, buffer, self.bufs[0], self.bufs[1],
                               np.uint32(self.R))

    def set_spins(self, spins):
        """Upload int8 +-1 spins (R, *reversed(shape))."""
        enqueue_upload(self.dev.queue, self._natural(), np.ascontiguousarray(spins, dtype=np.int8))
        self.set_spins_device(self._nat)

    def spins(self):
        """int8 +-1 spins (R, *reversed(shape))."""
        n = 2 * self.R * self.words
        self.prg.ising_ms_unpack(self.dev.queue, (n,), None, self.bufs[0], self.bufs[1],
                                 self._natural(), np.uint32(self.R))
        out = np.empty((self.R,) + tuple(reversed(self.shape)), dtype=np.int8)
        cl.enqueue_copy(self.dev.queue, out, self._nat)
        return out

    # ------------------------------------------------------------ dynamics
    def _set_thresholds(self, thresholds):
        thr = np.ascontiguousarray(thresholds, dtype=np.uint32)
        key = thr.tobytes()
        if key != self._thr_key:
            plan = _thr.decision_plan(thr, self.spins_per_word, self.row_bits)
            always, slots, table = plan.always, plan.slots, plan.data
            joint = plan.layout and (plan.layout.k, plan.layout.field, plan.layout.shift,
                                     plan.layout.cells)
            self.sweep_prg = self._program(always, slots, joint)
            self.thr_buf = cl.Buffer(self.dev.context, cl.mem_flags.READ_ONLY, table.nbytes)
            enqueue_upload(self.dev.queue, self.thr_buf, table)
            self._thr_key = key

    def sweep(self, n, thresholds):
        """Enqueue n full sweeps with per-replica thresholds; no host sync."""
        self._set_thresholds(thresholds)
        items = self.R * self.words // self.W
        local = (self.wg,) if self.wg else None
        glob = (-(-items // self.wg) * self.wg,) if self.wg else (items,)
        q = self.dev.queue
        if self.band:
            return self._multisweep(n)
        b = self.bufs
        kc = [self._launcher("ising_ms_sweep", c) for c in (0, 1)]
        for _ in range(n):
            lo, hi = np.uint32(self.t & 0xFFFFFFFF), np.uint32(self.t >> 32)
            for c in (0, 1):
                kc[c](q, glob, local, b[c], b[1 - c], self.thr_buf, np.uint32(c), np.uint32(self.R),
                      np.uint32(self.key[0]), np.uint32(self.key[1]), lo, hi, np.uint32(self.r0),
                      np.uint32(0), np.uint32(self.rows), np.uint32(self.rows), np.uint32(0),
                      np.uint32(self.rows), np.uint32(self.rows))
            self.t += 1

    def _launcher(self, name, variant):
        """Kernel `name` of the current sweep program, one instance per variant
        (colour, buffer pair): each keeps its own arguments, so that a launch
        re-sets only the sweep counter, not the buffers (microseconds each)."""
        key = (self.sweep_prg, name, variant)
        if key not in self._launchers:
            self._launchers[key] = self.sweep_prg.instance(name)
        return self._launchers[key]

    def half_sweep(self, colour, rows, counters, thresholds, wait_for=None, t=None):
        """Enqueue the update of colour `colour` in the rows (row_begin, n_rows,
        row_wrap): n_rows rows from row_begin on, wrapping to row 0 at row_wrap
        (all multiples of rows_per_item), of every replica. counters (gfirst,
        gsplit, grows): local row r has the Philox counters of global row
        (gfirst + r) mod grows, rows from gsplit on those of the global row
        self.rows before it (cl_kernels/ising/multispin.cl). Returns the
        launch's event. t: the sweep (default self.t, which it does not count:
        clphys.ising.slabs does)."""
        t = self.t if t is None else t
        self._set_thresholds(thresholds)
        items = self.R * rows[1] * self.WR // self.W
        local = (self.wg,) if self.wg else None
        glob = (-(-items // self.wg) * self.wg,) if self.wg else (items,)
        b = self.bufs
        # one instance per colour and row range (a slab share's edges, its interior, ...)
        k = self._launcher("ising_ms_sweep", (colour,) + tuple(rows))
        return k(self.dev.queue, glob, local, b[colour], b[1 - colour], self.thr_buf, np.uint32(colour),
                 np.uint32(self.R), np.uint32(self.key[0]), np.uint32(self.key[1]),
                 np.uint32(t & 0xFFFFFFFF), np.uint32(t >> 32), np.uint32(self.r0),
                 *(np.uint32(v) for v in tuple(rows) + tuple(counters)), wait_for=wait_for)

    def _multisweep(self, n):
        glob = (self._groups(self.band + (self.yband or (None, 0))) * self.mwg,)
        done = 0
        while done < n:
            m = min(self.sweeps_per_launch, n - done)
            lo, hi = np.uint32(self.t & 0xFFFFFFFF), np.uint32(self.t >> 32)
            k = self._launcher("ising_ms_multisweep", self.bufs is self._pair)
            k(self.dev.queue, glob, (self.mwg,), self.bufs[0], self.bufs[1], self.alt[0], self.alt[1],
              self.thr_buf, np.uint32(self.R), np.uint32(self.key[0]), np.uint32(self.key[1]), lo, hi,
              np.uint32(2 * m), np.uint32(self.r0))
            self.bufs, self.alt = self.alt, self.bufs
            self.t += m
            done += m

    # ------------------------------------------------------------ observables
    def measure_into(self, buffer, index):
        """See clphys.ising.backends: int64 pair (bond, M) of measurement `index`."""
        red = self.reducer
        self.prg.ising_ms_sums(self.dev.queue, (self.R * red.parts * red.wg,), (red.wg,),
                               self.bufs[0], self.bufs[1], red.partial, np.uint32(red.parts),
                               np.uint32(self.sum_words))
        red.finish(buffer, index)

    def sums(self):
        """(bond sum, magnetization) int64 (R,), reduced on the device."""
        return self.reducer.sums(self.measure_into)

    # ------------------------------------------------------------ checkpoint
    def get_state(self):
        """The sweep counter and the update mode (spins_per_word)."""
        return {"sweeps": self.t, "spins_per_word": self.spins_per_word}

    def set_state(self, state):
        """Sweep counter and update mode of a checkpoint (states written before
        the joint mode existed have no spins_per_word: they used one word per spin)."""
        self.t = _validate.integer("state['sweeps']", state["sweeps"], 0, 2**63 - 2)
        spw = state.get("spins_per_word", 1)
        spw = spw if isinstance(spw, str) else _validate.integer("state['spins_per_word']", spw)
        spw = _validate.choice("state['spins_per_word']", spw, SPINS_PER_WORD)
        if spw not in (1, "auto") and self.row_bits % spw:
            raise ValueError(f"state['spins_per_word'] = {spw} does not divide the {self.row_bits} "
                             "spins of a row word")
        if spw != self.spins_per_word:
            self.spins_per_word, self._thr_key = spw, None


def decision_counts(thresholds, words, *, spins_per_word=None, seed=0, device=None, items=256):
    """Diagnostic of the sweep kernel's decision code (tests and benchmarks):
    the code of the lanes = 1 sweep decides the spins of `words` random 32-spin
    words with random neighbour words, per replica of `thresholds` (R, 2,
    2 dim + 1), and counts proposals and accepted flips. Returns a dict of
    int64 arrays: "class" (R, 2 (2 dim + 1), 2) = (accepted, proposed) per
    class a (2 dim + 1) + k; "level" (R, D, k, 4) = (accepted, proposed,
    accepted pairs, pairs) per level l = 1..D (in the plan's slot order) and
    position j of a spin in its group, where a pair is the spins at positions
    j, j + 1 of one group, both of level l; and "plan", the DecisionPlan."""
    from ..runtime import resolve_device
    thr = np.ascontiguousarray(thresholds, dtype=np.uint32)
    if thr.ndim != 3 or thr.shape[1] != 2 or thr.shape[2] not in (5, 7):
        raise ValueError(f"thresholds must have shape (R, 2, 5) or (R, 2, 7), got {thr.shape}")
    words = _validate.integer("words", words, 1)
    items = _validate.integer("items", items, 1)
    spw = _thr.DEFAULT_SPINS_PER_WORD if spins_per_word is None else _validate.choice(
        "spins_per_word", spins_per_word, SPINS_PER_WORD)
    seed = _validate.seed(seed)
    dim = (thr.shape[2] - 1) // 2
    plan = _thr.decision_plan(thr, spw)
    lay = plan.layout
    kp = kernel_params(dim=dim, Lx=64, Ly=2, Lz=2 if dim == 3 else 1, W=1, lanes=1, wg=None, rwg=64,
                       always=plan.always, slots=plan.slots, accept="select", stats=True,
                       joint=lay and (lay.k, lay.field, lay.shift, lay.cells))
    cpw, ncls, ncnt = kp["CALLS_PER_WORD"], kp["NCL"], kp["NCNT"]  # Philox calls, classes, counters
    iters = -(-words // items)
    if items * iters * cpw >= 2**32:
        raise ValueError(f"words = {words} is too many for one call (at most {2**32 // cpw - items})")
    dev = resolve_device(device)
    prg = dev.build("ising/multispin.cl", **kp)
    R, D, gk = thr.shape[0], kp["D"], kp["GK"]
    table = cl.Buffer(dev.context, cl.mem_flags.READ_ONLY, max(4, plan.data.nbytes))
    enqueue_upload(dev.queue, table, plan.data)
    out = zeroed_buffer(dev, 4 * R * items * ncnt)
    k0, k1 = _rng.seed_key(seed)
    prg.ising_ms_accept_stats(dev.queue, (items, R), None, table, np.uint32(k0), np.uint32(k1),
                              np.uint32(iters), out)
    counts = np.empty((R, items, ncnt), dtype=np.uint32)
    cl.enqueue_copy(dev.queue, counts, out)
    total = counts.astype(np.int64).sum(axis=1)
    return {"class": total[:, :2 * ncls].reshape(R, ncls, 2),
            "level": total[:, 2 * ncls:].reshape(R, D, gk, 4), "plan": plan}
