"""The walkers on one device: buffers, kernels and launches (no protocol).

An :class:`Engine` holds W walkers with global indices offset .. offset + W - 1
out of `total`; every random word depends on the global index and the global
step t only, so engines over disjoint walker ranges (e.g. MPI ranks) give
histograms that add up to those of one engine with all walkers. Histograms are
counted in 32 bits on the device and added into 64-bit host totals at
deterministic points (every `limit` recorded steps, limit = (2^32 - 1) // W,
so no count can wrap), and whenever the caller reads them.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pyopencl as cl

from .. import _validate
from ..rng import seed_key
from ..runtime import zeros
from ..runtime.memory import check_memory, format_bytes
from ..runtime.render import Program
from .geometry import Geometry

SITES_CAP = 1 << 16            # steps per launch (site descriptors: 16 bytes each)
LATTICE_MODES = ("local", "global")
TABLE_MODES = ("local", "global")
HIST_MODES = ("local", "global")
SITES_MODES = ("packed", "direct")
# sites="direct" on NVIDIA: the thermalisation's program capped at this many
# registers per work item (benchmarks/probe_mucafast.py, docs/muca.md: 6 instead
# of 5 groups of 128 fit an H100 SM; 357 instead of 331 flips/ns at W = 84480, 401
# instead of 276 at 270336; the recorded program keeps its 96: the cap cost it 3 %)
DIRECT_MAXREG = 80
MAGNET_BUDGET = 64 << 20       # magnetization histograms are recorded by default up to this size
# pip PoCL 3.0 (pthread device) corrupts its own memory once a work group uses
# more than ~6 KiB of local memory (a plain 1600-word __local array, launched
# once, breaks later launches and builds in the process), whatever it reports:
# stay well below that on PoCL.
POCL_LOCAL_BUDGET = 4096


def default_walkers(facts) -> int:
    """The paper's rule: compute units times resident work items per unit
    (2048 on GPUs; 64 per core on CPUs)."""
    return int(facts.compute_units) * (2048 if facts.is_gpu else 64)


# NVIDIA: local (shared) memory per SM by compute capability (major, minor), the
# 1 KiB it reserves per work group, threads and registers per SM
NV_SHARED_PER_SM = {(7, 0): 96 << 10, (7, 5): 64 << 10, (8, 0): 164 << 10, (8, 6): 100 << 10,
                    (8, 7): 164 << 10, (8, 9): 100 << 10, (9, 0): 228 << 10}
NV_RESERVED_PER_GROUP, NV_THREADS_PER_SM, NV_REGISTERS_PER_SM = 1024, 2048, 65536
# registers per work item of the recorded program (no cap) with sites="direct",
# wg = 128: 96 in ptxas's report for sm_90 (probe_muca2.py run 4,
# probe_mucafast.py; packed descriptors: 80)
NV_REGISTERS_ASSUMED = 96


def resident_walkers(dev, geom, options, registers=None) -> int | None:
    """Walkers resident at once (one wave) on an NVIDIA GPU whose compute
    capability we know: work groups per SM limited by threads, local memory
    (the larger of the thermalisation's and the recorded program's, as
    Engine.configure lays them out) and `registers` per work item (default
    NV_REGISTERS_ASSUMED); None elsewhere."""
    facts = dev.facts
    try:
        cc = (dev.cl_device.compute_capability_major_nv, dev.cl_device.compute_capability_minor_nv)
    except Exception:                        # not NVIDIA, or no cl_nv_device_attribute_query
        return None
    shared = NV_SHARED_PER_SM.get(cc)
    if facts.vendor != "nvidia" or shared is None:
        return None
    wg = options["wg"]
    if registers is None:
        registers = NV_REGISTERS_ASSUMED
    lattice, table, hist = options["lattice"], options["table"], options["hist"]
    recorded = _local_bytes(geom, wg, lattice, table, hist)
    if recorded > local_room(facts):            # the recorded program's table goes global
        recorded = _local_bytes(geom, wg, lattice, "global", hist)
    local = max(_local_bytes(geom, wg, lattice, table, "global"), recorded)
    groups = min(NV_THREADS_PER_SM // wg, shared // (local + NV_RESERVED_PER_GROUP),
                 NV_REGISTERS_PER_SM // (-(-registers // 8) * 8 * wg))
    return facts.compute_units * max(1, groups) * wg


def capped(dev, prg, registers, options=()):
    """`prg` with at most `registers` per work item: on NVIDIA rebuilt from its
    PTX with a `.maxnreg` directive (the OpenCL compiler takes no register cap:
    -cl-nv-maxrregcount left ptxas at 96 in run 4); elsewhere, or without a
    cap, `prg` itself (also, with a RuntimeWarning, where the PTX cannot be
    patched or rebuilt). Cached on the device."""
    if registers is None or dev.facts.vendor != "nvidia":
        return prg
    key = ("maxnreg", id(prg), int(registers), tuple(options))
    out = dev.programs.get(key)
    if out is None:
        try:
            ptx = with_maxnreg(bytes(prg.cl_program.get_info(cl.program_info.BINARIES)[0]).decode(), registers)
            cl_prg = cl.Program(dev.context, [dev.cl_device], [ptx.encode()]).build(options=list(options))
            out = Program(cl_prg, prg.source, dev.facts.vendor)
        except (ValueError, UnicodeDecodeError, cl.Error) as exc:     # a speed option only: go on uncapped
            warnings.warn(f"{dev.name}: no register cap ({registers}) for the muca kernel, it runs "
                          f"uncapped: {str(exc)[:200]}", RuntimeWarning, stacklevel=2)
            out = prg
        dev.programs[key] = out
    return out


def with_maxnreg(ptx: str, registers: int) -> str:
    """PTX text with `.maxnreg registers` after the (one) kernel's .reqntid line."""
    out, count = re.subn(r"^(\s*\.reqntid[^\n]*)$", r"\1\n.maxnreg %d" % registers, ptx, count=1, flags=re.M)
    if not count:
        raise ValueError("maxreg: the kernel's PTX has no .reqntid line to put .maxnreg after")
    return out


def local_room(facts):
    """Bytes of local memory a work group may use (PoCL: see POCL_LOCAL_BUDGET)."""
    return min(facts.local_mem, POCL_LOCAL_BUDGET) if facts.vendor == "pocl" else facts.local_mem


def site_words(geom, sites):
    """uint32 words per step of the site descriptors (update.cl, setup.cl)."""
    return 4 if sites == "packed" else (8 if geom.dim == 2 and geom.wpr == 1 else 12)


def _local_bytes(geom, wg, lattice, table, hist, hist_rows=1):
    return ((wg * geom.words * 4 if lattice == "local" else 0)
            + (geom.nbins * geom.ncls * 4 if table == "local" else 0)
            + (hist_rows * geom.nbins * 4 if hist == "local" else 0))


def choose_options(facts, geom: Geometry, wg=None, lattice=None, table=None, hist=None,
                   sites=None, maxreg=None) -> dict:
    """Work-group size and where lattice, threshold table and histogram live
    during a launch: the caller's choices, checked, else defaults from `facts`:
    each in local memory where it fits (fastest on PoCL; on GPUs the walker
    lattices then never touch global memory inside a launch). sites: the site
    descriptors, "direct" (default on GPUs with local lattices) or "packed" (update.cl;
    results do not depend on it); maxreg: registers per work item at most in the
    thermalisation's program (NVIDIA only, `capped`; 0: the compiler's choice;
    default DIRECT_MAXREG with sites="direct", else 0)."""
    if maxreg is not None:
        maxreg = _validate.integer("maxreg", maxreg, 0, 255)
        if 0 < maxreg < 32:
            raise ValueError(f"maxreg must be 0 (no cap) or 32 .. 255, got {maxreg}")
    if lattice is not None:
        _validate.choice("lattice", lattice, LATTICE_MODES)
    if table is not None:
        _validate.choice("table", table, TABLE_MODES)
    if hist is not None:
        _validate.choice("hist", hist, HIST_MODES)
    if sites is not None:
        _validate.choice("sites", sites, SITES_MODES)
        if sites == "direct" and lattice == "global":
            raise ValueError("sites='direct' needs lattice='local', got lattice='global'")
    room = local_room(facts)
    if wg is None:
        wanted = (128, 64) if facts.is_gpu else ((8,) if facts.vendor == "oclgrind" else (64,))
        candidates = [c for c in wanted if c <= facts.max_work_group] or [facts.max_work_group]
    else:
        candidates = [_validate.integer("wg", wg, 1, facts.max_work_group)]
    if table is None:
        table = "local" if geom.nbins * geom.ncls * 4 <= room // 2 else "global"
    if hist is None:
        hist = "local" if _local_bytes(geom, 1, "global", table, "local") <= room * 3 // 4 else "global"
    def need(c, lat):
        # the thermalisation's program holds lattice + table, the recorded one
        # lattice + histogram (+ the table where it still fits: Engine.configure)
        return max(_local_bytes(geom, c, lat, table, "global"), _local_bytes(geom, c, lat, "global", hist))

    if lattice is None:
        fits = [c for c in candidates if need(c, "local") <= room]
        lattice = "local" if fits else "global"
        candidates = fits or candidates
    if sites == "direct" and lattice == "global":
        raise ValueError(f"sites='direct' needs the lattices in local memory, and they do not fit for {geom}")
    if sites is None:       # direct: fewer integer instructions per flip on GPUs (docs/muca.md)
        sites = "direct" if lattice == "local" and facts.is_gpu else "packed"
    if maxreg is None:
        maxreg = DIRECT_MAXREG if sites == "direct" else 0
    wg = candidates[0]
    if need(wg, lattice) > room:
        raise ValueError(f"lattice={lattice!r}, table={table!r}, hist={hist!r} with wg = {wg} need "
                         f"{format_bytes(need(wg, lattice))} of local memory per work group for {geom}; "
                         f"{facts.name or 'the device'} allows {format_bytes(room)}"
                         + (" (PoCL: a safe cap, see POCL_LOCAL_BUDGET)" if facts.vendor == "pocl" else "")
                         + ": choose 'global' for some of them or a smaller wg")
    return {"wg": wg, "lattice": lattice, "table": table, "hist": hist, "sites": sites, "maxreg": maxreg}


def buffer_sizes(geom: Geometry, walkers: int, slots: int = 1, magnet: bool = False,
                 tm: bool = False) -> dict:
    """Bytes of every device buffer an engine allocates (sites: the larger,
    direct, descriptors; tm: transition counts instead of energy counts)."""
    sizes = {"lattices": walkers * geom.words * 4, "energies": walkers * 4, "magnetizations": walkers * 4,
             "thresholds": geom.nbins * geom.ncls * 4, "sites": SITES_CAP * 4 * site_words(geom, "direct"),
             "histograms": slots * geom.nbins * (geom.ncls if tm else 1) * 4, "passages": walkers * 4}
    if magnet:
        sizes["magnetization histograms"] = slots * geom.nbins * geom.nm * 4
    return sizes


class Engine:
    """W walkers of `geom` on `dev` (see the module doc). Public state:
    ``t`` (steps done by every walker), ``hist`` / ``moments`` (host totals)."""

    def __init__(self, dev, geom: Geometry, walkers: int, seed: int, *, offset: int = 0,
                 total: int | None = None, options: dict, comm=None):
        self.dev, self.geom, self.W = dev, geom, walkers
        self.comm = comm                 # engines of the other walkers (MPI ranks): counts are summed
        self.offset = offset
        self.total = walkers if total is None else total
        self.wg, self.lattice_mode = options["wg"], options["lattice"]
        self.table_mode, self.hist_pref = options["table"], options["hist"]
        self.sites_mode = options.get("sites", "packed")
        self.rounds = options.get("rounds", 10)     # Philox rounds: 10; fewer only in the probe
        self.maxreg = options.get("maxreg") or None  # NVIDIA: thermalisation's registers per item at most
        # update.cl popc (2D L = 32, sites "direct"): one descriptor uint4 per step and nd
        # by one popcount; options["popc"] = False keeps the shifts (measurements)
        self.popc = bool(options.get("popc", True)) and geom.dim == 2 and geom.L == 32 \
            and self.sites_mode == "direct"
        self.key = seed_key(seed)
        self.seed = seed
        self._setup = dev.build("muca/setup.cl", **geom.template())
        self.lattice = self._buffer(walkers * geom.words, np.uint32)
        self.bins = self._buffer(walkers, np.int32)
        self.mags = self._buffer(walkers, np.int32)
        self.thr = self._buffer(geom.nbins * geom.ncls, np.uint32)
        self.passages = self._buffer(walkers, np.uint32)
        self.trip_range = (0, geom.nbins - 1)
        self.sites = self._buffer(SITES_CAP * (4 if self.popc else site_words(geom, self.sites_mode)), np.uint32)
        # recorded steps between flushes: fixed by the whole ensemble (every engine
        # flushes at the same steps, and the counts summed over them cannot wrap)
        self.limit = (2**32 - 1) // self.total
        self.t = 0
        self._hist_buf = self._mhist_buf = None
        self._programs = {}
        self.slots = 0
        self.configure(1, False)

    # ----------------------------------------------------------- setup
    @property
    def queue(self):
        return self.dev.queue

    def _buffer(self, n, dtype):
        # zeroed pyopencl arrays (clphys.runtime.zeros: on Oclgrind written from
        # the host, and kept alive by the test suite; its checker otherwise
        # confuses freed buffers with later ones); kernels get .data
        return zeros(self.dev, max(1, n), dtype).data

    def _groups(self):
        return -(-self.W // self.wg)

    def randomize(self):
        """Random initial spins (Philox words), then measure."""
        self._setup.muca_randomize(self.queue, (self._groups() * self.wg,), (self.wg,), self.lattice,
                                   np.uint32(self.W), np.uint32(self.offset),
                                   np.uint32(self.key[0]), np.uint32(self.key[1]))
        return self.measure()

    def measure(self):
        """Energy bins and magnetizations of every walker recomputed from the spins."""
        self._setup.muca_measure(self.queue, (self._groups() * self.wg,), (self.wg,), self.lattice,
                                 self.bins, self.mags, np.uint32(self.W))
        return self.read_bins()

    def read_bins(self):
        bins = np.empty(self.W, np.int32)
        mags = np.empty(self.W, np.int32)
        cl.enqueue_copy(self.queue, bins, self.bins)
        cl.enqueue_copy(self.queue, mags, self.mags)
        return bins, mags

    def set_thresholds(self, thr):
        thr = np.ascontiguousarray(thr, dtype=np.uint32)
        if thr.shape != (self.geom.nbins, self.geom.ncls):
            raise ValueError(f"thresholds must have shape {(self.geom.nbins, self.geom.ncls)}, got {thr.shape}")
        if self.sites_mode == "direct":      # columns by differing neighbours nd = 2 dim - k
            thr = np.ascontiguousarray(thr[:, ::-1])
        cl.enqueue_copy(self.queue, self.thr, thr, is_blocking=True)

    # ----------------------------------------------------------- histograms
    def configure(self, slots: int, magnet: bool, trips: bool = False, tm: bool = False):
        """Start new histograms: `slots` groups of walkers (jackknife blocks), and
        (E, |M|) histograms if `magnet`. Totals restart at zero. With `trips`,
        the launches also count each walker's passages between the ends of
        `trip_range` (see reset_passages). With `tm`, the histograms count
        (bin before the step, k of the proposed flip): hist has shape
        (slots, nbins, 2 dim + 1) and its sum over k is the energy histogram."""
        g = self.geom
        hist = self.hist_pref
        span = self.wg
        # one local row when no work group straddles two slots (the iterations:
        # one slot; 4 KiB less per work group at L = 32)
        aligned = self.total % slots == 0 and (self.total // slots) % span == 0 and self.offset % span == 0
        rows = 1 if slots == 1 or aligned else 2
        if hist == "local" and self.total // slots < span:
            hist = "global"           # a work group could span three slots: count per walker
        row = g.nbins * (g.ncls if tm else 1) * 4
        if hist == "local" and (_local_bytes(g, span, self.lattice_mode, "global", "global")
                                + rows * row > local_room(self.dev.facts)):
            hist = "global"           # not even with the table in global memory
        # two programs: the thermalisation's launches (nothing counted, no
        # histogram code or local histogram) and the recorded ones, whose local
        # histogram may push the table out to global memory (e.g. wg = 192 at L = 32)
        self._prog = {}
        for record in (False, True):
            table = self.table_mode
            if (record and hist == "local" and table != "global"
                    and _local_bytes(g, span, self.lattice_mode, table, "global") + rows * row
                    > local_room(self.dev.facts)):
                table = "global"
            key = (hist, bool(magnet), rows, bool(trips), bool(tm), record, table)
            if key not in self._programs:     # built once per engine (each iteration configures)
                self._programs[key] = capped(self.dev, self.dev.build(
                    "muca/update.cl", **g.template(), wg=self.wg,
                    lattice=self.lattice_mode, table=table, hist=hist, record=record,
                    magnet=bool(magnet), wide=self.W * g.words >= 2**32, hist_rows=rows,
                    trips=bool(trips), sites=self.sites_mode, rounds=self.rounds, tm=bool(tm),
                    popc=self.popc),
                    None if record else self.maxreg)
            self._prog[record] = self._programs[key]
        self.trips, self.tm = bool(trips), bool(tm)
        self.hist_shape = (slots, g.nbins) + ((g.ncls,) if tm else ())
        msize = slots * g.nbins * g.nm if magnet else 1
        if self._hist_buf is None or (self.hist_shape, msize) != (self._hist_zero.shape, self._mhist_zero.size):
            self._hist_zero = np.zeros(self.hist_shape, np.uint32)
            self._hist_buf = self._buffer(self._hist_zero.size, np.uint32)
            self._mhist_zero = np.zeros(msize, np.uint32)
            self._mhist_buf = self._buffer(msize, np.uint32)
        self.slots, self.magnet, self.hist_mode = slots, bool(magnet), hist
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
        if self.sites_mode == "direct":
            self._setup.muca_sites_direct(self.queue, (blocks,), None, self.sites, lo, hi, np.uint32(n),
                                          k0, k1, np.uint32(self.wg), np.uint32(self.popc))
        else:
            self._setup.muca_sites(self.queue, (blocks,), None, self.sites, lo, hi, np.uint32(n), k0, k1)
        self._prog[record].muca_update(self.queue, (self._groups() * self.wg,), (self.wg,), self.lattice,
                               self.bins, self.mags, self.thr, self.sites, self._hist_buf,
                               self._mhist_buf, self.passages, np.uint32(n), lo, hi,
                               k0, k1, np.uint32(self.W), np.uint32(self.offset), np.uint32(self.slots),
                               np.uint32(self.total), np.int32(self.trip_range[0]),
                               np.int32(self.trip_range[1]))
        self.t += n

    # ----------------------------------------------------------- state
    def read_lattice(self):
        out = np.empty((self.geom.words, self.W), np.uint32)
        cl.enqueue_copy(self.queue, out, self.lattice)
        return out

    def write_lattice(self, lattice, bins=None, mags=None):
        lattice = np.ascontiguousarray(lattice, np.uint32)
        if lattice.shape != (self.geom.words, self.W):
            raise ValueError(f"lattice must have shape {(self.geom.words, self.W)}, got {lattice.shape}")
        cl.enqueue_copy(self.queue, self.lattice, lattice)
        if bins is not None:
            cl.enqueue_copy(self.queue, self.bins, np.ascontiguousarray(bins, np.int32))
            cl.enqueue_copy(self.queue, self.mags, np.ascontiguousarray(mags, np.int32))


def check_engine_memory(dev, geom, walkers, slots=1, magnet=False):
    check_memory(dev, buffer_sizes(geom, walkers, slots, magnet),
                 f"multicanonical {geom} with {walkers} walkers",
                 "Use fewer walkers (walkers=) or a smaller L.")
