"""The walkers on one device: buffers, kernels and launches (no protocol).

An :class:`Engine` holds W walkers with global indices offset .. offset + W - 1
out of `total` (offset a multiple of 32: the walker-sliced lattice keeps 32
walkers per word); every random word depends on the global index and the
global step t only, so engines over disjoint walker ranges (e.g. MPI ranks)
give histograms that add up to those of one engine with all walkers.
Histograms are counted in 32 bits on the device and added into 64-bit host
totals at deterministic points (every `limit` recorded steps, limit =
(2^32 - 1) // (the most walkers of one histogram slot), so no count can wrap),
and whenever the caller reads them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyopencl as cl

from .. import _validate
from ..rng import seed_key
from ..runtime import zeros
from ..runtime.memory import check_memory, format_bytes
from . import protocol
from .geometry import LANES, Geometry, groups

SITES_CAP = 1 << 16            # steps per launch (descriptors: 2 dim + 1 words each)
LATTICE_MODES = ("local", "global")
TABLE_MODES = ("local", "global")
HIST_MODES = ("local", "global")
PER_ITEM = (1, 2, 4, 8, 16, 32)
# a 16-bit local histogram is flushed between blocks of 4 steps, with room for a
# ragged end of 3: at least 7 steps between flushes
MIN_FLUSH_STEPS = 7
MAGNET_BUDGET = 64 << 20       # magnetization histograms are recorded by default up to this size
# pip PoCL 3.0 (pthread device) corrupts its own memory once a work group uses
# more than ~6 KiB of local memory (a plain 1600-word __local array, launched
# once, breaks later launches and builds in the process), whatever it reports:
# stay well below that on PoCL.
POCL_LOCAL_BUDGET = 4096
# walkers per compute unit by default (Multicanonical(walkers=None), docs/muca.md
# "Walkers"), each the count that converged fastest over the seeds measured on an
# H200: GPUs 512 in 3D and in 2D up to L = 32 (L = 32: 1.40 s to converge against
# 1.51-6.65 s with 256 to 64; 3D L = 24: 3 seeds in 254-300 s); 768 at 2D L = 64
# (counting 1 step in 4 once the range is covered, one call: 11.2-11.7 s for seeds 1-6,
# 7.0 s for seed 7, 13.1 s for seed 0 building the programs, mean 11.2 s, against
# 9.5-10.0 s for 6 seeds and 16.8-16.9 s for 2 at 512, mean 11.5 s; 512 produces
# faster, 94 against 113 s for seed 0, as its chains run faster); 1024 from 2D L = 128
# on, where 512 converged for one seed of three (280 s; the others' weights oscillated)
# and 1024 for all three (367-370 s; 252-258 s with a later kernel, while 768 took
# 272 s for seed 1 and had not converged seed 0 in 276 s); L = 256 follows L = 128
# unmeasured. Each walker thermalises 30 w flips per iteration, so the work grows with
# W faster than the kernel's rate. CPUs 64.
GPU_WALKERS_PER_UNIT = 512
GPU_WALKERS_PER_UNIT_MID_2D, MID_2D = 768, 64
GPU_WALKERS_PER_UNIT_LARGE_2D, LARGE_2D = 1024, 128
CPU_WALKERS_PER_UNIT = 64
# On several ranks every GPU takes GPU_WALKERS_PER_UNIT, also from 2D L = 128 on: two
# H200s with 512 per SM each (135168 walkers in all, one H200's count, the same
# iterations) converged 2D L = 128 with E <= 0 in 183-185 s (2 seeds) against 291 s
# with 1024 each (and in 184-185 s with 256 each), the whole range in 198-200 s (3 seeds);
# 2D L = 64 in 5.7-10.1 s (8 seeds). On 4 GPUs (270336 in all) unmeasured. A symmetric run
# (E <= 0: half the bins, so twice the walkers per bin) takes GPU_WALKERS_PER_UNIT on one
# H200 too: 2D L = 128 converged in 195-198 s (seeds 0-2; seeds 1 and 2 oscillated over the
# whole range at this count) at 871 iterations against 278-282 s (878 iterations) with 1024.
# NVIDIA 2D L = 128: at most this many walkers per SM (e.g. a production with given weights,
# which is one thermalisation per chain) take one walker per work item (measured there only;
# at L = 256 that plan would count into windows, untried on a GPU)
FEW_PER_UNIT, FEW_L = 128, 128


def default_walkers(facts, geom: Geometry | None = None, ranks: int = 1, symmetric: bool = False) -> int:
    """Walkers by default over `ranks` devices like `facts`, per compute unit of
    each: on a GPU GPU_WALKERS_PER_UNIT, except on one rank for the whole energy
    range (not `symmetric`) of a 2D geometry: GPU_WALKERS_PER_UNIT_MID_2D from L =
    MID_2D and GPU_WALKERS_PER_UNIT_LARGE_2D from L = LARGE_2D on (each the fastest
    to converge over the seeds measured at its sizes, range and rank count); on a
    CPU CPU_WALKERS_PER_UNIT."""
    ranks = _validate.integer("ranks", ranks, 1)
    whole_2d_L = geom.L if ranks == 1 and not symmetric and geom is not None and geom.dim == 2 else 0
    if not facts.is_gpu:
        per_unit = CPU_WALKERS_PER_UNIT
    elif whole_2d_L >= LARGE_2D:
        per_unit = GPU_WALKERS_PER_UNIT_LARGE_2D
    elif whole_2d_L >= MID_2D:
        per_unit = GPU_WALKERS_PER_UNIT_MID_2D
    else:
        per_unit = GPU_WALKERS_PER_UNIT
    return int(facts.compute_units) * per_unit * ranks


def local_room(facts):
    """Bytes of local memory a work group may use (PoCL: see POCL_LOCAL_BUDGET)."""
    return min(facts.local_mem, POCL_LOCAL_BUDGET) if facts.vendor == "pocl" else facts.local_mem


def code_bytes(geom: Geometry, layout: str = "pair") -> int:
    """Bytes of the threshold-code table: one byte per pair of bins ("pair"), per
    (bin, nd) ("row") or two per (bin, nd) ("row16"), padded to words
    (protocol.pair_codes, row_codes)."""
    per_bin = {"pair": geom.dim, "row": geom.ncls, "row16": 2 * geom.ncls}[layout]
    return -(-geom.nbins * per_bin // 4) * 4


def hist_bytes(geom: Geometry, bits: int = 32, rows: int = 1) -> int:
    """Bytes of a local histogram: `rows` rows of 32-bit counts, or of 16-bit
    counts two to a word, and a spare word (the counts of walkers past W)."""
    return (rows * (geom.nbins if bits == 32 else (geom.nbins + 1) // 2) + 1) * 4


# A global histogram counted through per-walker windows in local memory: bins
# per window and steps between their flushes (H200, recorded flips/ns against runs
# only in one A/B: 2D L = 256 68 -> 146, 3D L = 32 47 -> 98, since 224 / 124 with the
# flush limit per slot). 8-bit counts (at most 247 steps between flushes) give twice
# the bins of 16-bit ones in the same memory: 96 bins 239-243 / 129-130 against 48
# 16-bit bins 219-225 / 115-125; 48, 64, 128 8-bit bins 220, 225, 217 at L = 256, 96
# 16-bit bins (twice the memory) 110
WINDOW_BINS = 96
WINDOW_FLUSH_STEPS = 244


def window_plan(facts, geom: Geometry, options: dict, wg: int, per_item: int, hist: str) -> int:
    """Bins of each walker's local window for a launch that counts into the
    global histogram (0: none): on GPUs, where the window fits beside what the
    plan keeps in local memory and the range holds it."""
    if "window" in options:
        return int(options["window"])
    # not in 3D: at L = 32 (H200, the walkers spread, recorded flips/ns counting 1 step in 4 /
    # every step) each count added to global memory when the walker leaves its bin ran 200 / 138
    # against 151 / 129 with the windows, whose local memory takes L1 from the codes
    if hist != "global" or not facts.is_gpu or geom.nbins < 2 * WINDOW_BINS or geom.dim == 3:
        return 0
    used = _local_bytes(geom, wg, options.get("table_recorded", options["table"]), "global", options["combine"],
                        layout=recorded_layout(options), lattice=options.get("lattice", "global"),
                        per_item=per_item)
    return WINDOW_BINS if used + window_bytes(WINDOW_BINS, wg, per_item) <= local_room(facts) else 0


def recorded_layout(options: dict) -> str:
    """The code layout of the recorded launches ("layout_recorded", else the plan's)."""
    return options.get("layout_recorded", options.get("layout", "pair"))


def window_bytes(bins: int, wg: int, per_item: int) -> int:
    """Bytes of a work group's windows: 8-bit counts, four to a word, per walker."""
    return bins // 4 * wg * per_item * 4


def hist_flush_steps(wg: int, per_item: int) -> int:
    """Steps between the flushes of a 16-bit local histogram inside a launch: a
    count grows by at most the work group's walkers (wg x per_item) per step."""
    return 0xFFFF // (wg * per_item)


def _local_bytes(geom, wg, table, hist, combine, hist_rows=1, layout="pair", lattice="global", per_item=1,
                 hist_bits=32):
    return ((geom.N * wg // (LANES // per_item) * 4 if lattice == "local" else 0)
            + (code_bytes(geom, layout) if table == "local" else 0)
            + (hist_bytes(geom, hist_bits, hist_rows) if hist == "local" else 0)
            + (2 * wg * 4 if combine == "local" else 0))


def _check_local(facts, geom, needed, what, hint=""):
    """ValueError unless `needed` bytes of local memory per work group fit the device."""
    room = local_room(facts)
    if needed > room:
        raise ValueError(f"{what} need {format_bytes(needed)} of local memory per work group for {geom}; "
                         f"{facts.name or 'the device'} allows {format_bytes(room)}"
                         + (" (PoCL: a safe cap, see POCL_LOCAL_BUDGET)" if facts.vendor == "pocl" else "") + hint)


def _hist_plans(flush_steps, table, move_codes=True):
    """(bits, table of the recorded launches) of a local histogram, best first:
    32-bit counts, 16-bit counts (where a launch can flush them in time) with
    the codes where the plan has them, then (move_codes) with the codes in
    global memory."""
    plans = [(32, table)]
    if flush_steps >= MIN_FLUSH_STEPS:
        plans += [(16, table)] + ([(16, "global")] if move_codes else [])
    return list(dict.fromkeys(plans))


def _checked_choices(facts, wg, table, hist, per_item, lattice):
    """The caller's plan choices checked (None: the plan's default); returns wg, per_item."""
    if lattice is not None:
        _validate.choice("lattice", lattice, LATTICE_MODES)
    if table is not None:
        _validate.choice("table", table, TABLE_MODES)
    if hist is not None:
        _validate.choice("hist", hist, HIST_MODES)
    if per_item is not None:
        per_item = _validate.integer("per_item", per_item)
        _validate.choice("per_item", per_item, PER_ITEM)
    if wg is not None:
        wg = _validate.integer("wg", wg, 1, facts.max_work_group)
    return wg, per_item


def choose_options(facts, geom: Geometry, wg=None, table=None, hist=None, per_item=None, lattice=None,
                   walkers=None) -> dict:
    """The kernel plan for `walkers` on this device (None: the default count):
    work-group size (the recorded launches' own where it differs:
    "wg_recorded"), walkers per work item (per_item: 1, 2,
    4, ... 32; the 32 / per_item items of a lattice word combine their flips by
    a warp vote on NVIDIA, else through local memory), the layout of the
    threshold codes (per pair of bins, per row in 8 bits, or in 16 bits in the
    unrecorded launches: "layout", "layout_recorded"), where the codes
    and the histogram live during a launch (local memory where they fit;
    a histogram in 32-bit counts, else in 16-bit ones flushed during the
    launch, if need be with the recorded launches reading the codes from
    global memory unless the caller chose `table`), and in which launches
    ("unrecorded", "recorded", "all", "none") the loads are ordered so that a
    warp does not wait for the ones it just issued (desc_ahead, nd_first). The
    caller's choices, checked, else defaults from `facts`: on GPUs one walker
    per work item (wg 128 on NVIDIA, 64 elsewhere, smaller where the walkers
    would otherwise leave a compute unit without a work group), on CPUs one
    work item per word of 32 walkers (wg 8). Results do not depend on any of
    these."""
    wg_chosen = wg is not None
    wg, per_item = _checked_choices(facts, wg, table, hist, per_item, lattice)
    room = local_room(facts)
    table_arg = table
    few = (facts.vendor == "nvidia" and geom.dim == 2 and geom.L == FEW_L and walkers is not None
           and walkers <= FEW_PER_UNIT * facts.compute_units)
    if per_item is None:
        # GPUs: one walker per work item where the lattices fit local memory, else two
        # (NVIDIA, global lattice: two walkers per item ran 234 / 205 flips/ns against
        # 208 / 206 for one at 2D L = 64 on an H200, unrecorded / recorded)
        per_item = LANES
        if facts.is_gpu:
            per_item = 1
            small = _local_bytes(geom, wg or (128 if facts.vendor == "nvidia" else 64), "global", "global", "none",
                                 lattice="local", per_item=1)
            # ... unless the walkers are few: one walker per item keeps four warps per SM (one per
            # scheduler) where two per item would leave two (H200, 2D L = 128, 128 walkers per SM:
            # a chain ran 4.48e6 flips/s with one per item, 3.84e6 with two)
            if (facts.vendor == "nvidia" and lattice != "local" and (lattice == "global" or small > room)
                    and not few):
                per_item = 2
                # 2D L <= 128 with >= 2048 walkers per SM: four per item, more steps in flight per
                # item (H200, L = 64: 435 / 410 against 388 / 363 flips/ns at 2048 per SM, 447 /
                # 422 against 390 / 376 at 4096; L = 128 with work groups of 256: 439 / 351 against
                # 363 / 289; at 512-1024 per SM four lose 11-26 %, in 3D L = 16 recorded 17 %)
                if geom.dim == 2 and geom.L <= 128 and (walkers or 0) >= 2048 * facts.compute_units:
                    per_item = 4
    combine = "none" if per_item == LANES else ("ballot" if facts.vendor == "nvidia" else "local")
    if combine == "local" and facts.vendor == "pocl":
        # PoCL 3.0 never finishes a launch of the update whose items share words
        # through work-group barriers (Intel's CPU runtime and Oclgrind run it)
        raise ValueError(f"per_item = {per_item} is not supported on PoCL (its launches do not finish); "
                         f"use per_item = {LANES} (one work item per lattice word, the default there)")
    step = LANES // per_item                    # work items per word: wg must hold whole words
    if wg is None:
        wg = 128 if facts.vendor == "nvidia" else (64 if facts.is_gpu else 8)
        wg = max(step, min(wg, facts.max_work_group) // step * step)
    if wg % step or (combine == "ballot" and wg % 32):
        raise ValueError(f"wg must be a multiple of {max(step, 32 if combine == 'ballot' else 1)} with "
                         f"per_item = {per_item} ({step} work items per lattice word"
                         + (", whole warps on NVIDIA" if combine == "ballot" else "") + f"), got {wg}")
    def need(lat, tab, lay, his, bits=32):
        return _local_bytes(geom, wg, tab, his, combine, layout=lay, lattice=lat, per_item=per_item,
                            hist_bits=bits)

    # in local memory where they fit, by priority: the group's lattice words, the
    # threshold codes (one per (bin, nd) "row": fewer instructions per flip than one
    # per pair of bins), the histogram
    if lattice is None:
        lattice = "local" if need("local", "global", "row", "global") <= room else "global"
    layout = "row" if need(lattice, "local", "row", "global") <= room else "pair"
    if table is None:
        table = "local" if need(lattice, "local", layout, "global") <= room else "global"
        # NVIDIA: row codes read from global memory (through L1) beat pair codes in local
        # memory (H200, 2D L = 128: 357 / 281 against 307 / 256 flips/ns unrecorded / recorded)
        if layout == "pair" and facts.vendor == "nvidia":
            table = "global"
    if table == "global":
        layout = "row" if need(lattice, "global", "row", "global") <= room else "pair"
    # a local histogram: 32-bit counts, else 16-bit ones flushed during the launch,
    # else 16-bit ones with the recorded launches reading the codes from global memory
    hist_bits, table_recorded = 32, table
    if hist != "global":
        fits = [(bits, tab) for bits, tab in _hist_plans(hist_flush_steps(wg, per_item), table, table_arg is None)
                if need(lattice, tab, layout, "local", bits) <= room]
        if fits:
            hist, (hist_bits, table_recorded) = "local", fits[0]
        elif hist is None:
            hist = "global"
    def work_groups(size):
        return -(-walkers // (size * per_item))
    def busiest(size):
        """The walkers of the busiest compute unit with work groups of `size` items."""
        return -(-work_groups(size) // facts.compute_units) * size * per_item
    # NVIDIA 2D, codes in global memory beside 16-bit local counts (L = 128): work groups of
    # 256 items (H200: 366 / 308 against 361 / 286 flips/ns with 128, not analysed; 3D L = 24
    # 177 / 159 against 185 / 161) unless they leave more walkers on the busiest SM (768 per
    # SM: 299 / 230 against 357 / 243 with 128)
    if (not wg_chosen and facts.vendor == "nvidia" and geom.dim == 2 and table == "global"
            and hist == "local" and hist_bits == 16 and facts.max_work_group >= 256
            and (walkers is None or busiest(256) <= busiest(wg))):
        wg = 256        # 16-bit counts are flushed every 65535 // (256 per_item) >= 7 steps: always in time
    # NVIDIA 2D, codes in global memory beside 16-bit local counts, 1024 walkers per SM (L =
    # 128): the recorded launches in work groups of 512. The driver sizes local memory for the
    # work groups an SM could hold by their items (8 of 256, 4 of 512) and leaves L1 the rest:
    # ~24 KB beside 8 x 33 KB of counts (H200, a pointer chase), by that rule ~124 KB beside 4, room for
    # the 82 KB of codes that walkers spread over the range use (H200, such walkers, recorded
    # 298 against 279 flips/ns; the unrecorded launches, no local memory, lose: 374 against 395)
    wg_recorded = wg
    if (not wg_chosen and facts.vendor == "nvidia" and geom.dim == 2 and table == "global" and hist == "local"
            and hist_bits == 16 and per_item == 2 and wg == 256 and facts.max_work_group >= 512
            and walkers is not None and walkers >= 1024 * facts.compute_units and busiest(512) <= busiest(wg)):
        wg_recorded = 512   # <= 128 registers per item: the recorded kernel there takes 120-123
    # GPUs: smaller work groups where the walkers would leave a compute unit without one
    # and the busiest unit would hold fewer
    # (H200, 2D L = 128 at 256 walkers per SM: 175 / 125 flips/ns with 128 items, 153 / 121
    # with 256; at 128 per SM, one walker per item, 93 / 77 with 128 against 82 / 76 with 256
    # and 89 / 54 with 64: smaller groups than needed lose in the recorded launches; at 384 per
    # SM, 256 items, 99 groups, 229 / 179 against 218 / 158 with 128, 512 at most either way)
    whole = max(step, 32 if combine == "ballot" else 1)
    while (not wg_chosen and facts.is_gpu and walkers is not None and wg > whole and wg // 2 % whole == 0
           and work_groups(wg) < facts.compute_units and busiest(wg // 2) < busiest(wg)):
        wg //= 2
    # NVIDIA 2D, lattice in global memory, codes in local memory: 16-bit codes in the unrecorded
    # launches where they fit (the exact threshold read in 1 of 65536 moves instead of 1 of 256;
    # H200, L = 64: 346 against 311 flips/ns at 512 walkers per SM, 386 against 369 at 768). The
    # recorded launches keep 8-bit ones beside their counts (16-bit there: 271 against 290, 318
    # against 350); with the codes in global memory (L = 128, 256) 16 bits gain nothing (390 / 300
    # against 393 / 305, 359 / 224 against 369 / 233)
    layout_recorded = layout
    if (facts.vendor == "nvidia" and geom.dim == 2 and lattice == "global" and table == "local"
            and layout == "row" and need(lattice, "local", "row16", "global") <= room):
        layout = "row16"
    # NVIDIA, codes read from global memory through L1 (2D L >= 128, 3D L >= 24): 16-bit codes
    # (the exact threshold read in 1 of 65536 moves, not 1 of 256) in the launches where they
    # gained with the walkers spread over the range, as in a run (H200, unrecorded / recorded
    # counting 1 step in 4 / every step, flips/ns): 2D L = 256 in the unrecorded launches, 337 /
    # 244 / 215 against 300 / 240 / 218; 2D L = 128 in the recorded ones (with the loads ordered,
    # below) 396 / 384 / 326 against 397 / 372 / 310 (in both: unrecorded 365); 3D in both,
    # L = 32 (no windows) 205 / 191 / 158 against 202 / 200 / 138, L = 24 213 / 236 / 217
    # against 210 / 230 / 211
    if facts.vendor == "nvidia" and table == table_recorded == "global" and layout == "row":
        if geom.dim == 3:
            layout = layout_recorded = "row16"
        elif hist == "global":
            layout = "row16"
        elif wg_recorded == 512:
            layout_recorded = "row16"
    needed = max(need(lattice, table, layout, "global"),
                 need(lattice, table_recorded, layout_recorded, hist, hist_bits))
    _check_local(facts, geom, needed, f"lattice={lattice!r}, table={table!r}, hist={hist!r} with wg = {wg}",
                 ": choose 'global' for some of them or a smaller wg")
    # NVIDIA, lattice in global memory: the next block's words loaded during this one
    # (ahead), by every lane of the word (H200, 2D L = 64: 264 against 240 flips/ns for the
    # word's first lane loading and handing it over by a shuffle, which waited for the load)
    ahead = combine == "ballot" and lattice == "global"
    # with ahead, the step descriptors loaded a block before the words (desc_ahead) and
    # every step's nd computed before the next block's loads (nd_first): a warp then does
    # not wait for loads it just issued. Which launches ("unrecorded", "recorded", "all"
    # or "none") take them, by what they did on an H200 (flips/ns, both / desc_ahead /
    # neither): 2D, unrecorded, L = 128 at 512 walkers per SM 305 / 275 / 226, at 1024
    # 393 / 387 / 366, L = 64 at 512 312 / 306 / 292; recorded, L = 128 at 512 240 / 228 /
    # 198, at 1024 242 / 230 / 305. 3D L = 16 at 512: unrecorded 223 / 258 / 238, recorded
    # 242 / 229 / 208; at 1024 (desc_ahead) 244 against 301. With more registers than the
    # resident warps leave (recorded at 1024 per SM, every launch at 2048: 2D L = 128 375 /
    # 350 against 439 / 358) they lose. At 768 per SM: L = 64 recorded 349 against 319
    # (every seed converged in 12.9-13.2 s against 13.6-13.7 s), L = 128 186 against 231.
    # At 1024 per SM the recorded kernel takes 126 registers at L = 64 (396 against 378; L = 48
    # unmeasured) and 170 at L = 128 (260 against 314; the driver ignores -cl-nv-maxrregcount).
    per_unit = (walkers or default_walkers(facts, geom)) / max(1, facts.compute_units)
    if not ahead or per_unit > (1024 if geom.dim == 2 else 512):
        desc_ahead = nd_first = "none"
    elif geom.dim == 2:
        # the recorded launches in work groups of 512 (2D L = 128 at 1024 per SM), counting 1
        # step in 4 / every step, spread: 372 / 310 against 344 / 295 (8-bit codes)
        both_launches = per_unit <= (1024 if geom.L <= 64 else 512) or wg_recorded == 512
        desc_ahead = nd_first = "all" if both_launches else "unrecorded"
    else:
        desc_ahead, nd_first = "all", "recorded"
    return {"wg": wg, "lattice": lattice, "table": table, "hist": hist, "per_item": per_item,
            "combine": combine, "layout": layout, "ahead": ahead,
            "hist_bits": hist_bits, "table_recorded": table_recorded,
            "desc_ahead": desc_ahead, "nd_first": nd_first,
            **({"layout_recorded": layout_recorded} if layout_recorded != layout else {}),
            **({"wg_recorded": wg_recorded} if wg_recorded != wg else {})}


def histogram_plan(facts, geom: Geometry, options: dict, wg: int, per_item: int, flush: int, total: int,
                   offset: int, slots: int) -> tuple:
    """(hist, bits, table, rows) of launches that count `slots` groups of `total`
    walkers, this engine's from walker `offset` on: the plan's local histogram
    with one row when no work group straddles two groups (every iteration), else
    two rows, in 16 bits or with the codes in global memory where 32-bit rows do
    not fit, else the global histogram."""
    o = options
    span = wg * per_item                 # walkers of one work group
    aligned = total % slots == 0 and (total // slots) % span == 0 and offset % span == 0
    rows = 1 if slots == 1 or aligned else 2
    hist, bits, table = o["hist"], o.get("hist_bits", 32), o.get("table_recorded", o["table"])
    if hist == "local" and total // slots < span:
        hist = "global"           # a work group could span three slots: count per walker
    if hist == "local":
        fits = [(b, tab) for b, tab in _hist_plans(flush, table) if b <= bits and _local_bytes(
            geom, wg, tab, "local", o["combine"], rows, recorded_layout(o), o.get("lattice", "global"),
            per_item, b) <= local_room(facts)]
        hist, (bits, table) = ("local", fits[0]) if fits else ("global", (32, o["table"]))
    return hist, bits, table, rows


def buffer_sizes(geom: Geometry, walkers: int, slots: int = 1, magnet: bool = False) -> dict:
    """Bytes of every device buffer an engine allocates, with the most its codes take (16-bit
    row codes for the unrecorded launches beside 8-bit ones for the recorded)."""
    sizes = {"lattices": geom.N * (groups(walkers) + 32) * 4, "energies": walkers * 4, "magnetizations": walkers * 4,
             "thresholds": code_bytes(geom, "row16") + code_bytes(geom, "row") + geom.nbins * geom.ncls * 4,
             "sites": (SITES_CAP + 4) * (2 * geom.dim + 1) * 4,
             "histograms": slots * geom.nbins * 4, "passages": walkers * 4}
    if magnet:
        sizes["magnetization histograms"] = slots * geom.nbins * geom.nm * 4
    return sizes


def check_engine_memory(dev, geom, walkers, slots=1, magnet=False):
    """ValueError unless the walkers' buffers fit the device (before any allocation)."""
    if geom.N * (groups(walkers) + 32) >= 2**29:
        raise ValueError(f"multicanonical {geom} with {walkers} walkers: the lattice words (sites x "
                         f"walkers / 32 = {geom.N * groups(walkers)}) must stay below 2^29 (byte offsets "
                         f"in 31 bits); use fewer walkers")
    check_memory(dev, buffer_sizes(geom, walkers, slots, magnet),
                 f"multicanonical {geom} with {walkers} walkers",
                 "Use fewer walkers (walkers=) or a smaller L.")


class Engine:
    """W walkers of `geom` on `dev` (see the module doc). Public state:
    ``t`` (steps done by every walker), ``hist`` / ``moments`` (host totals)."""

    def __init__(self, dev, geom: Geometry, walkers: int, seed: int, *, offset: int = 0,
                 total: int | None = None, options: dict, comm=None):
        if offset % LANES:
            raise ValueError(f"offset must be a multiple of {LANES} (whole lattice words), got {offset}")
        self.dev, self.geom, self.W = dev, geom, walkers
        self.G = groups(walkers)
        # the lattice padded to whole work groups of both launches (words of no walker): every
        # work item has its word
        self.wg = options["wg"]
        self.wg_recorded = options.get("wg_recorded", self.wg)
        per_group = math.lcm(self.wg, self.wg_recorded) // (LANES // options["per_item"])
        self.Gp = -(-self.G // per_group) * per_group
        self.comm = comm                 # engines of the other walkers (MPI ranks): counts are summed
        self.offset = offset
        self.total = walkers if total is None else total
        self.options = dict(options)
        self.per_item = options["per_item"]
        self.key = seed_key(seed)
        self.seed = seed
        self._setup = dev.build("muca/setup.cl", **geom.template())
        self.lattice = self._buffer(geom.N * self.Gp, np.uint32)
        self.bins = self._buffer(walkers, np.int32)
        self.mags = self._buffer(walkers, np.int32)
        layouts = (self.options.get("layout", "pair"), recorded_layout(self.options))
        if layouts[0] != layouts[1] and "pair" in layouts:
            raise ValueError(f"the recorded launches' code layout may differ from the others' only between "
                             f"'row' and 'row16' (one exact table), got {layouts}")
        # the codes of the unrecorded and the recorded launches (the same buffer where they agree)
        self.codes = self._buffer(code_bytes(geom, layouts[0]) // 4, np.uint32)
        self.codes_recorded = (self.codes if layouts[0] == layouts[1]
                               else self._buffer(code_bytes(geom, layouts[1]) // 4, np.uint32))
        self.exact = self._buffer(geom.nbins * geom.ncls, np.uint32)
        self.passages = self._buffer(walkers, np.uint32)
        self.trip_range = (0, geom.nbins - 1)
        self.sites = self._buffer((SITES_CAP + 4) * (2 * geom.dim + 1), np.uint32)
        self.t = 0
        self._hist_buf = self._mhist_buf = None
        self._programs: dict[tuple, Any] = {}        # built programs by their template options
        self.slots = 0
        self.configure(1, False)

    # ----------------------------------------------------------- setup
    @property
    def queue(self):
        """The device queue the engine enqueues on."""
        return self.dev.queue

    def _buffer(self, n, dtype):
        # zeroed pyopencl arrays (clphys.runtime.zeros: on Oclgrind written from
        # the host, and kept alive by the test suite; its checker otherwise
        # confuses freed buffers with later ones); kernels get .data
        return zeros(self.dev, max(1, n), dtype).data

    def _small(self, n):
        """(global, local) sizes of the small kernels: a fixed work-group size (PoCL
        compiles a kernel again for every new one), the global size padded to it."""
        wg = min(64, self.dev.facts.max_work_group)
        return (-(-max(1, n) // wg) * wg,), (wg,)

    def _items(self):
        """Global work size: (32 / per_item) items per word, whole work groups."""
        return self.Gp * (LANES // self.per_item)

    def randomize(self):
        """Random initial spins (Philox words), then measure."""
        quads = (self.geom.N + 3) // 4
        self._setup.muca_randomize(self.queue, *self._small(quads * self.Gp), self.lattice, np.uint32(self.Gp),
                                   np.uint32(self.offset // LANES), np.uint32(self.total),
                                   np.uint32(self.key[0]), np.uint32(self.key[1]))
        return self.measure()

    def measure(self):
        """Energy bins and magnetizations of every walker recomputed from the spins."""
        self._setup.muca_measure(self.queue, *self._small(self.W), self.lattice, self.bins, self.mags,
                                 np.uint32(self.W), np.uint32(self.Gp))
        return self.read_bins()

    def read_bins(self):
        """Energy bins and magnetisation bins of every walker (host copies)."""
        bins = np.empty(self.W, np.int32)
        mags = np.empty(self.W, np.int32)
        cl.enqueue_copy(self.queue, bins, self.bins)
        cl.enqueue_copy(self.queue, mags, self.mags)
        return bins, mags

    def set_thresholds(self, thr):
        """The acceptance table thr[bin, k] (protocol.thresholds), as the codes of
        each launch's layout and the exact thresholds."""
        thr = np.ascontiguousarray(thr, dtype=np.uint32)
        if thr.shape != (self.geom.nbins, self.geom.ncls):
            raise ValueError(f"thresholds must have shape {(self.geom.nbins, self.geom.ncls)}, got {thr.shape}")
        targets = [(self.codes, self.options.get("layout", "pair"))]
        if self.codes_recorded is not self.codes:
            targets.append((self.codes_recorded, recorded_layout(self.options)))
        for buf, layout in targets:
            codes, exact = protocol.layout_codes(thr, self.geom.dim, layout)
            padded = np.zeros(code_bytes(self.geom, layout), np.uint8)
            padded[:codes.nbytes] = codes.view(np.uint8)
            cl.enqueue_copy(self.queue, buf, padded)
        cl.enqueue_copy(self.queue, self.exact, exact, is_blocking=True)

    # ----------------------------------------------------------- histograms
    def configure(self, slots: int, magnet: bool, trips: bool = False, every: int = 1):
        """Start new histograms: `slots` groups of walkers (jackknife blocks), and
        (E, |M|) histograms if `magnet`. Totals restart at zero. With `trips`,
        the launches also count each walker's passages between the ends of
        `trip_range` (see reset_passages). `every` (1, 2 or 4): the recorded
        launches count a walker's bin at the steps t that are multiples of it."""
        if every not in (1, 2, 4):
            raise ValueError(f"every must be 1, 2 or 4, got {every!r}")
        g = self.geom
        o = self.options
        wg_rec = self.wg_recorded           # the histogram is counted in the recorded launches
        flush = o.get("hist_flush", hist_flush_steps(wg_rec, self.per_item))
        hist, bits, table, rows = histogram_plan(self.dev.facts, g, o, wg_rec, self.per_item, flush,
                                                 self.total, self.offset, slots)
        window = window_plan(self.dev.facts, g, o, wg_rec, self.per_item, hist)
        # a histogram in global memory without windows: a walker's steps in one bin added by
        # one atomic when it leaves the bin (H200, 2D L = 256: 33 -> 51-58 recorded flips/ns;
        # 3D L = 32: 43-46 -> 57-60; PoCL on 2 cores: 2-3 % faster); with local counts the
        # extra registers cost more than the atomics they save (H200, 2D L = 64: 357 -> 301)
        runs = bool(o.get("runs", hist == "global" and not window))
        # the windows' and 16-bit rows' flush intervals, `every` times longer when 1 step in
        # `every` is counted
        window_flush = int(o.get("window_flush", WINDOW_FLUSH_STEPS)) * every
        # two programs: the thermalisation's launches (nothing counted) and the recorded ones
        self._prog = {}
        for record in (False, True):
            launch = "recorded" if record else "unrecorded"
            wg = wg_rec if record else self.wg
            key = (hist, bits, table, bool(magnet), rows, bool(trips), record, runs, window, window_flush, every)
            if key not in self._programs:     # built once per engine (each iteration configures)
                layout = recorded_layout(o) if record else o.get("layout", "pair")
                tab = table if record else o["table"]
                used = _local_bytes(g, wg, tab, hist if record else "global", o["combine"], rows, layout,
                                    o.get("lattice", "global"), self.per_item, bits) + (
                    window_bytes(window, wg, self.per_item) if record and window else 0)
                _check_local(self.dev.facts, g, used, f"the {launch} launches of {o}")
                self._programs[key] = self.dev.build(
                    "muca/update.cl", **g.template(), wg=wg, K=self.per_item, combine=o["combine"],
                    table=tab, hist=hist, record=record, magnet=bool(magnet),
                    hist_rows=rows, hist_bits=bits, hist_flush=flush * every if bits == 16 else 0,
                    trips=bool(trips), ahead=bool(o.get("ahead", True)), layout=layout,
                    nd_first=o.get("nd_first", "none") in ("all", launch),
                    desc_ahead=o.get("desc_ahead", "none") in ("all", launch),
                    lattice=o.get("lattice", "global"), full=self.W == self.Gp * LANES,
                    runs=runs, window=window, window_flush=window_flush, every=every if record else 1)
            self._prog[record] = self._programs[key]
        self.trips = bool(trips)
        self.hist_shape = (slots, g.nbins)
        msize = slots * g.nbins * g.nm if magnet else 1
        if self._hist_buf is None or (self.hist_shape, msize) != (self._hist_zero.shape, self._mhist_zero.size):
            self._hist_zero = np.zeros(self.hist_shape, np.uint32)
            self._hist_buf = self._buffer(self._hist_zero.size, np.uint32)
            self._mhist_zero = np.zeros(msize, np.uint32)
            self._mhist_buf = self._buffer(msize, np.uint32)
        self.slots, self.magnet = slots, bool(magnet)
        # recorded steps between flushes, fixed by the whole ensemble (every engine flushes
        # at the same steps): a count of one slot grows by at most its walkers per counted
        # step (1 in `every`), so the counts summed over the ranks cannot wrap (64 slots at
        # 2D L = 256 on an H200: recorded 147 -> 211 flips/ns against a limit from all the walkers)
        self.limit = (2**32 - 1) // -(-self.total // slots) * every
        self.every = every
        self.hist_mode = f"window{window}" if window else hist if hist == "global" else f"local{bits}"
        self.hist = np.zeros(self.hist_shape, np.int64)
        self.moments = np.zeros((slots, g.nbins, 3), np.float64) if magnet else None
        self._since = 0
        self._zero_device()

    # ----------------------------------------------------------- passages
    def reset_passages(self, lo: int, hi: int, state=None):
        """Count passages between the energy bins <= lo and >= hi from now on:
        a walker makes one when it reaches the end opposite to the last one it
        saw (a round trip is two). `state`: per-walker words to continue from
        (passages << 2 | last end), default none yet."""
        self.trip_range = (int(lo), int(hi))
        state = np.zeros(self.W, np.uint32) if state is None else np.ascontiguousarray(state, np.uint32)
        cl.enqueue_copy(self.queue, self.passages, state)

    def read_passages(self):
        """Per-walker words passages << 2 | last end (0 none, 1 low, 2 high)."""
        out = np.empty(self.W, np.uint32)
        cl.enqueue_copy(self.queue, out, self.passages)
        return out

    def _zero_device(self):
        cl.enqueue_copy(self.queue, self._hist_buf, self._hist_zero)
        cl.enqueue_copy(self.queue, self._mhist_buf, self._mhist_zero)

    def pending(self):
        """The device's counts since the last flush: (hist, mhist or None, recorded steps)."""
        g = self.geom
        h = np.empty(self.hist_shape, np.uint32)
        cl.enqueue_copy(self.queue, h, self._hist_buf)
        mh = None
        if self.magnet:
            mh = np.empty((self.slots, g.nbins, g.nm), np.uint32)
            cl.enqueue_copy(self.queue, mh, self._mhist_buf)
        return h, mh, self._since

    def set_pending(self, hist, mhist, since):
        """Upload histograms accumulated since the last configure (a resumed run)."""
        cl.enqueue_copy(self.queue, self._hist_buf, np.ascontiguousarray(hist, np.uint32))
        if self.magnet:
            cl.enqueue_copy(self.queue, self._mhist_buf, np.ascontiguousarray(mhist, np.uint32))
        self._since = int(since)

    def flush(self):
        """Add the device counts into the host totals and zero them. With a
        communicator (collective) the counts of every rank's walkers are summed
        first, so the totals are those of one engine with all the walkers."""
        h, mh, _ = self.pending()
        if self.comm is not None:
            from mpi4py import MPI
            self.comm.Allreduce(MPI.IN_PLACE, h, op=MPI.SUM)
            if self.magnet:
                self.comm.Allreduce(MPI.IN_PLACE, mh, op=MPI.SUM)
        self.hist += h
        if self.magnet:
            # moments of |m| = |M| / N per (slot, bin): sum of counts |m|^1, ^2, ^4
            am = 2.0 * np.arange(self.geom.nm) / self.geom.N
            c = mh.astype(np.float64)
            self.moments += np.stack([c @ am, c @ am**2, c @ am**4], axis=-1)
        self._zero_device()
        self._since = 0

    # ----------------------------------------------------------- dynamics
    def advance(self, n: int, n_skip: int):
        """Steps t .. t + n - 1 for every walker; the first n_skip are not
        recorded. Enqueued (the caller finishes the queue)."""
        i = 0
        while i < n:
            chunk = min(n - i, SITES_CAP)
            first_rec = max(0, n_skip - i)
            if first_rec < chunk:
                if self._since == self.limit:
                    self.flush()
                chunk = min(chunk, first_rec + self.limit - self._since)
            skip = min(first_rec, chunk)
            if skip:
                self._launch(skip, False)
            if chunk > skip:
                self._launch(chunk - skip, True)
            self._since += chunk - skip
            i += chunk
            if self._since == self.limit:
                self.flush()

    def _launch(self, n, record):
        t = self.t
        lo, hi = np.uint32(t & 0xFFFFFFFF), np.uint32(t >> 32)
        k0, k1 = np.uint32(self.key[0]), np.uint32(self.key[1])
        blocks = ((t + n - 1) >> 2) - (t >> 2) + 1
        wg = self.wg_recorded if record else self.wg
        stride = 4 * (wg // (LANES // self.per_item) if self.options.get("lattice") == "local" else self.Gp)
        self._setup.muca_sites(self.queue, *self._small(blocks), self.sites, lo, hi, np.uint32(n), k0, k1,
                               np.uint32(stride))
        self._prog[record].muca_update(
            self.queue, (self._items(),), (wg,), self.lattice, self.bins, self.mags,
            self.codes_recorded if record else self.codes,
            self.exact, self.sites, self._hist_buf, self._mhist_buf, self.passages, np.uint32(n), lo, hi,
            k0, k1, np.uint32(self.W), np.uint32(self.offset), np.uint32(self.slots), np.uint32(self.total),
            np.int32(self.trip_range[0]), np.int32(self.trip_range[1]), np.uint32(self.Gp))
        self.t += n

    # ----------------------------------------------------------- state
    def read_lattice(self):
        """(sites, groups) uint32: the walker-sliced lattice (geometry.py)."""
        out = np.empty((self.geom.N, self.Gp), np.uint32)
        cl.enqueue_copy(self.queue, out, self.lattice)
        return np.ascontiguousarray(out[:, :self.G])

    def write_lattice(self, lattice, bins=None, mags=None):
        """Upload the walkers' lattice words (and their energy and magnetisation bins)."""
        lattice = np.ascontiguousarray(lattice, np.uint32)
        if lattice.shape != (self.geom.N, self.G):
            raise ValueError(f"lattice must have shape {(self.geom.N, self.G)}, got {lattice.shape}")
        padded = np.zeros((self.geom.N, self.Gp), np.uint32)
        padded[:, :self.G] = lattice
        cl.enqueue_copy(self.queue, self.lattice, padded)
        if bins is not None:
            cl.enqueue_copy(self.queue, self.bins, np.ascontiguousarray(bins, np.int32))
            cl.enqueue_copy(self.queue, self.mags, np.ascontiguousarray(mags, np.int32))
