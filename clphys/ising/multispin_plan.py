"""How the multispin backend launches its sweeps: words per work item, one
launch per half-sweep or several sweeps per launch in tiles of local memory,
chosen by a cost model of the device (see docs/ising.md, Speed)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _validate


@dataclass(frozen=True)
class MultispinPlan:
    """The launch plan a multispin backend chose on its device.

    Attributes
    ----------
    sweeps_per_launch : int
        Sweeps per launch of the multi-sweep kernel (1: a launch per half-sweep).
    band : tuple or None
        (slabs, halo slabs) of a multi-sweep tile, None for single launches.
    yband : tuple or None
        (rows, halo rows) of a 3D tile cut in y, else None.
    words_per_item, lanes, work_group_size : int or None
        The sweep kernel's words per work item, SIMD lanes and work-group size.
    multisweep_work_group_size : int or None
        The multi-sweep kernel's work-group size.
    """

    sweeps_per_launch: int
    band: tuple | None
    yband: tuple | None
    words_per_item: int
    lanes: int
    work_group_size: int | None
    multisweep_work_group_size: int | None


@dataclass(frozen=True)
class LaunchChoice:
    """A launch plan forced on the multispin backend instead of the one its cost
    model picks for the device: the internal entry of tests and benchmarks
    (through :func:`tuned`); results do not depend on it.

    Attributes
    ----------
    sweeps_per_launch : int or None
        1: one launch per half-sweep (or with `band`, one multi-sweep launch per
        sweep); m > 1: up to m sweeps per launch of ising_ms_multisweep, a work
        group sweeping a tile of local memory between barriers (docs/ising.md,
        "Several sweeps per launch"); None: the cost model's choice.
    band : int, (int, int) or None
        Slabs per band of the multi-sweep kernel (a divisor of Ly in 2D, of Lz
        in 3D; the whole side: no halo), or in 3D (z planes, y rows); None: the
        cheapest tile that fits local memory.
    """

    sweeps_per_launch: int | None = None
    band: int | tuple | None = None

    def __post_init__(self):
        if self.sweeps_per_launch is not None:
            _validate.integer("sweeps_per_launch", self.sweeps_per_launch, 1, 2**16)
        band = self.band
        if isinstance(band, (tuple, list)):
            if len(band) != 2:
                raise ValueError(f"band must be an integer or (z planes, y rows), got {band!r}")
            object.__setattr__(self, "band", tuple(_validate.integer("band", b, 1) for b in band))
        elif band is not None:
            object.__setattr__(self, "band", _validate.integer("band", band, 1))


def tuned(cls, *args, sweeps_per_launch=None, band=None, **kwargs):
    """``cls(*args, **kwargs)``, an Ensemble2D/3D or Ising2D/3D of algorithm
    "multispin", with its launch plan forced (see :class:`LaunchChoice`; both
    None: the public constructor's own choice)."""
    launch = LaunchChoice(sweeps_per_launch, band)
    return with_launch(cls, None if launch == LaunchChoice() else launch, *args, **kwargs)


def with_launch(cls, launch: LaunchChoice | None, *args, **kwargs):
    """``cls(*args, **kwargs)`` whose multispin backend takes `launch`: the
    constructor reads it from the instance, so it is set before __init__ runs."""
    obj = cls.__new__(cls)
    obj._launch = launch  # noqa: SLF001 (read by the ising package's own constructors)
    cls.__init__(obj, *args, **kwargs)
    return obj


class LaunchPlanning:
    """The launch planning of :class:`clphys.ising.multispin.MultispinBackend`
    (its geometry attributes and tuning constants are the backend's)."""

    if TYPE_CHECKING:      # a mixin: the attributes are those of the class that uses it
        def __getattr__(self, name: str) -> Any: ...

    def _item_words(self, tile=None):
        """Words per work item, the largest power of two up to the one asked for
        that fits: lanes 1, rows of a z plane (one word each); lanes 4/8,
        consecutive words of a row, or where rows are short (fewer words than
        asked for) whole consecutive rows of a z plane, or of planes shorter than
        that whole consecutive planes, so that the joint mode's Philox calls
        fill the SIMD lanes. The multi-sweep kernel (tile) takes whole rows only
        where its rows have no halo: the whole replica (2D) or whole y rows
        (3D), and whole planes only in the whole replica."""
        W, Ly, WR = self._wanted_W, self.plane_rows, self.WR
        # a 2D slab share (own rows, then 2 x halo rows): an item's rows stay in
        # the own rows or in one halo (they run from multiples of gcd(own, halo))
        split2d = self._own is not None and self.dim == 2
        if self.lanes == 1:
            span = self._row_align() if split2d else Ly
            return min(W, span & -span)
        whole_rows = tile is None or not (tile[3] if self.dim == 3 else tile[1])
        if WR >= W or WR & (WR - 1) or not whole_rows:      # (rows of 3, 5, ... words: no runs of rows)
            return min(W, WR & -WR)
        span = math.gcd(self._row_align(), Ly) if split2d else Ly
        # 3D planes of fewer rows: whole consecutive planes (one device, and in
        # the multi-sweep kernel only the whole replica)
        planes = self.dim == 3 and self._own is None and (tile is None or not tile[1])
        while W > WR and span % (W // WR) and not (
                planes and (W // WR) % Ly == 0 and self.Lz % (W // WR // Ly) == 0):
            W //= 2
        return W

    def _row_align(self):
        """Rows an item's run of rows of a 2D slab share must start at multiples
        of: the own rows, and with halos deeper than 1 row (updated too, see
        clphys.ising.slabs) each halo."""
        return math.gcd(self._own, self._halo) if self._halo > 1 else self._own

    def _plan_launches(self, launch, dev):
        """(sweeps per launch, tile of the multi-sweep kernel or None: single
        launches)."""
        spl, band = launch.sweeps_per_launch, launch.band
        facts, gpu = dev.facts, dev.facts.is_gpu
        plain = 1, None
        if spl == 1 and band is None:
            return plain
        budget, units = facts.local_mem, facts.compute_units
        mwg = min(self.MULTISWEEP_WG[gpu], facts.max_work_group)
        shape = None if band is None else self._band_shape(band)
        tile = None
        if spl is None and gpu:
            if band is None and self.R * self.N > self.MULTISWEEP_MAX_SITES[gpu]:
                return plain
            if self._fits(self._tile(self._sides()[0], None, 1), budget):
                spl = self.MULTISWEEP_SWEEPS["whole"]
            elif shape[1] is None if shape else any(self._zbands(self.MULTISWEEP_SWEEPS["band"], budget)):
                spl = self.MULTISWEEP_SWEEPS["band"]
            else:
                spl = self.MULTISWEEP_SWEEPS["tile"]
        elif spl is None:
            spl, tile = self._cpu_plan(budget, units, shape)
            if tile is None:
                return plain
        if tile is None and shape is not None:
            tile = self._tile(*shape, spl)
            if not self._fits(tile, budget):
                raise ValueError(f"band {band!r} with {2 * spl}-slab halos needs {self._tile_bytes(tile)} "
                                 f"bytes of local memory, more than the {budget} there are; use a smaller one")
        if tile is None:
            tile = self._best_tile(spl, budget, units, mwg, gpu)
        if tile is None:
            if launch.sweeps_per_launch is None:
                return plain
            raise ValueError(f"sweeps_per_launch={spl}: no band of {'z planes' if self.dim == 3 else 'rows'} "
                             f"with a {2 * spl}-slab halo on each side fits the {budget} bytes of local "
                             f"memory ({self._tile_bytes(self._tile(1, None, 0))} bytes per slab); use fewer")
        return spl, tile

    def _group_size(self, tile, spl, per_item, facts):
        """Work-group size of the multi-sweep kernel: at most MULTISWEEP_WG, no
        larger than the first half-sweep's words (per_item words per item) need."""
        mwg = min(self.MULTISWEEP_WG[facts.is_gpu], facts.max_work_group)
        items = -(-self._half_sweep_words(tile, spl)[0] // per_item)
        floor = max(facts.wg_multiple, 1)
        while mwg // 2 >= max(items, floor):
            mwg //= 2
        return mwg

    # ------------------------------------------------ multi-sweep plans
    # A tile is (T, BH, TY, HY): a band of T slabs (rows in 2D, z planes in 3D)
    # with BH halo slabs on each side (0 iff T is the whole side); in 3D, TY
    # rows of each plane with HY halo rows (TY None: the whole plane, no halo).
    # Halos are 2 m for m sweeps per launch.
    def _sides(self):
        """(slabs per lattice, rows per slab)."""
        return (self.Lz, self.plane_rows) if self.dim == 3 else (self.shape[1], 1)

    def _tile(self, T, TY, spl):
        lout, rows = self._sides()
        TY = None if TY in (None, rows) else TY
        return (T, 0 if T == lout else 2 * spl, TY, 0 if TY is None else 2 * spl)

    def _band_shape(self, band):
        """(T, TY) of option `band`: slabs, or (z planes, y rows) in 3D."""
        lout, rows = self._sides()
        T, TY = (band, None) if isinstance(band, int) else band
        if TY is not None and self.dim == 2:
            raise ValueError(f"band must be an integer (rows per band) in 2D, got {band!r}")
        if lout % T or (TY is not None and rows % TY):
            raise ValueError(f"band must divide {lout}" + (f" and its y rows divide {rows}" if TY else "")
                             + f"; got {band!r}")
        return T, TY

    def _tile_bytes(self, tile):
        T, BH, TY, HY = tile
        rows = self._sides()[1] if TY is None else TY + 2 * HY
        return 8 * (T + 2 * BH) * rows * self.WR          # both colours

    def _fits(self, tile, budget):
        return self._tile_bytes(tile) <= budget

    def _half_sweep_words(self, tile, spl):
        """Words of one colour a group updates in each of the 2 spl half-sweeps
        of a launch (the valid region shrinks by one slab and row per half-sweep)."""
        T, BH, TY, HY = tile
        hs, hy = T + 2 * BH, (self._sides()[1] if TY is None else TY + 2 * HY)
        return [(hs - 2 - 2 * j if BH else hs) * (hy - 2 - 2 * j if HY else hy) * self.WR
                for j in range(2 * spl)]

    def _groups(self, tile):
        T, _, TY, _ = tile
        lout, rows = self._sides()
        return self.R * (lout // T) * (1 if TY is None else rows // TY)

    def _tiles(self, spl, budget):
        """Every tile for spl sweeps per launch that fits local memory."""
        lout, rows = self._sides()
        ys = [None] if self.dim == 2 else [d for d in range(rows, 0, -1) if rows % d == 0]
        for T in (d for d in range(lout, 0, -1) if lout % d == 0):
            for TY in ys:
                tile = self._tile(T, TY, spl)
                if self._fits(tile, budget):
                    yield tile

    def _zbands(self, spl, budget):
        """The tiles of whole slabs (no cut in y) that fit."""
        return (t for t in self._tiles(spl, budget) if t[2] is None)

    def _best_tile(self, spl, budget, units, mwg, gpu):
        """The tile that minimises waves of work groups x the time of one group:
        on GPUs its rounds (words / work-group size per half-sweep), on CPUs
        (one core per group) its words. GPUs take whole slabs (the plans
        measured) where the best of them is the whole replica or occupies at
        least half of the compute units, and always in 2D; otherwise (3D),
        tiles cut in y compete, ties
        going to more groups, then fewer words loaded (H100, 3D L = 128: 64
        groups of 2 planes ran 175 flips/ns, 128 tiles of 16 planes x 8 rows 338;
        L = 64: 60 -> 64-80). None if no tile fits."""
        def cost(tile):
            words = self._half_sweep_words(tile, spl)
            per_group = (sum(max(1, -(-n // mwg)) for n in words) if gpu
                         else sum(words) * self._cpu_word_cost(tile))
            return -(-self._groups(tile) // units) * per_group

        tiles = list(self._tiles(spl, budget))
        if not gpu:
            return min(tiles, key=cost, default=None)
        best = min((t for t in tiles if t[2] is None), key=cost, default=None)
        if best is not None and (self.dim == 2 or best[1] == 0 or 2 * self._groups(best) >= units):
            return best
        return min(tiles, key=lambda t: (cost(t), -min(self._groups(t), units),
                                         self._groups(t) * self._tile_bytes(t)), default=None)

    def _cpu_plan(self, budget, units, shape=None):
        """(sweeps per launch, tile) of the cheapest plan on a CPU, or (1, None)
        where single launches are cheapest (shape: the tile's (T, TY) if
        given). Model, in word updates of one core per sweep: single launches
        2 (CPU_LAUNCH_WORDS + words of a colour / cores), counting all cores but
        CPU_SPARE_CORES, word costs by _cpu_word_cost; m sweeps per launch
        (CPU_LAUNCH_WORDS + waves of groups x words of a group) / m."""
        units = max(1, units - self.CPU_SPARE_CORES)
        best = (1, None)
        plain = 2 * (self.CPU_LAUNCH_WORDS + self.R * self.words / units * self._cpu_word_cost(None))
        best_cost = None if shape else plain
        if shape is None and self.R * self.N > self.MULTISWEEP_MAX_SITES[False]:
            return best
        for spl in self.CPU_SWEEPS:
            tiles = [self._tile(*shape, spl)] if shape else self._tiles(spl, budget)
            for tile in tiles:
                if not self._fits(tile, budget):
                    continue
                group = sum(self._half_sweep_words(tile, spl)) * self._cpu_word_cost(tile)
                cost = (self.CPU_LAUNCH_WORDS + -(-self._groups(tile) // units) * group) / spl
                if best_cost is None or cost < best_cost:
                    best, best_cost = (spl, tile), cost
        if shape and best[1] is None:
            raise ValueError(f"band {shape}: its halos do not fit the {budget} bytes of local memory "
                             "even for 1 sweep per launch")
        return best

    def _cpu_word_cost(self, tile):
        """Cost of a word update on a CPU relative to long runs: each work item's
        run of W words carries CPU_RUN_WORDS of overhead (index arithmetic,
        Philox lanes left empty)."""
        return 1 + self.CPU_RUN_WORDS / self._item_words(tile)
