"""What cl_kernels/ising/multispin.cl is rendered from: the sweep plan's parameters,
checked, and every value derived from them that the template emits (the template
only writes code; the names are the template's)."""

from __future__ import annotations

# the multi-sweep kernel's values (_tiles; None without a band: the template names
# them either way, and renders with strict_undefined)
TILE_NAMES = ("BT", "BH", "LOUT", "TY", "HY", "HSY", "SW", "HS", "NBANDS", "NBY", "OFF", "OFFY")


def kernel_params(*, dim, Lx, Ly, Lz, W, lanes, wg, rwg, always, slots, accept="select", joint=None,
                  fold=1, band=None, mwg=None, yband=None, stats=False) -> dict:
    """The template parameters of one multispin program (ValueError for a plan the
    kernels cannot run).

    dim, Lx, Ly, Lz: the lattice; W: words per work item (dividing the words per row
    for lanes 4/8, or whole rows; 1 .. 32 rows for lanes 1); lanes: 1, 4 or 8; wg: the
    sweep's work-group size or None; rwg: the sums' work-group size (a power of two);
    always: the class ids a (2 dim + 1) + k accepted with certainty; slots: the groups
    of class ids that share a threshold (in level order with `joint`); accept
    ("select" or "compare", lanes 1); joint: None or (k, F, shift, cells) of joint
    decisions; fold: rows per word (clphys.ising.backends.multispin_fold); band:
    (slabs, halo slabs) of ising_ms_multisweep with mwg, its work-group size, and in
    3D yband (rows, halo rows) of a tile cut in y; stats: add ising_ms_accept_stats.
    """
    p = dict(dim=dim, Lx=Lx, Ly=Ly, Lz=Lz, W=W, lanes=lanes, wg=wg, rwg=rwg, always=always, slots=slots,
             accept=accept, joint=joint, fold=fold, band=band, mwg=mwg, yband=yband, stats=stats)
    p.update(_words(dim, Lx, Ly, Lz, fold))
    p.update(_items(p))
    p.update(_decisions(p))
    p.update(_tiles(p) if band else dict.fromkeys(TILE_NAMES))
    return p


def _words(dim, Lx, Ly, Lz, fold):
    """The word layout: spins per row and word, words per row, folded rows."""
    S = Lx // 2                                # spins of a colour per row
    if S % 4 or (S > 32 and S % 32):
        raise ValueError("multispin.cl: Lx/2 must be a multiple of 4 up to 32, else of 32; Lx = %d" % Lx)
    # folded rows (clphys.ising.backends.multispin_fold): a word holds the
    # colour's S spins of FOLD rows y, y + FOLDED_LY, ... of a z plane (FOLDED_LY = Ly / FOLD)
    if fold != 1 and (dim != 3 or S * fold > 32 or Ly % (2 * fold)):
        raise ValueError("multispin.cl: fold %r needs 3D, Lx/2 * fold <= 32 and Ly a multiple of "
                         "2 fold; got Lx = %d, Ly = %d" % (fold, Lx, Ly))
    FOLDED_LY = Ly // fold
    NBITS = min(S, 32) * fold                  # spins per word
    return dict(S=S, WR=max(1, S // 32), PARTIAL=S < 32, FOLD=fold, FOLDED_LY=FOLDED_LY,
                QS=S // 4,                     # Philox groups per row of a colour (Lx < 64)
                NBITS=NBITS, VALID=(1 << NBITS) - 1, ROWS=FOLDED_LY * Lz,
                LOWS=sum(1 << (j * S) for j in range(fold)))    # bit 0 of each sub-row


def _items(p):
    """What one work item takes (W words, runs of whole rows or planes)."""
    W, WR, FOLDED_LY, lanes = p["W"], p["WR"], p["FOLDED_LY"], p["lanes"]
    if lanes not in (1, 4, 8):
        raise ValueError("multispin.cl: lanes must be 1, 4 or 8, got %r" % (lanes,))
    # lanes 4/8 with fewer words per row than W: an item takes RR = W / WR
    # whole consecutive rows of one z plane (contiguous in memory)
    ROWS_RUN = lanes > 1 and WR < W
    RR = W // WR if ROWS_RUN else 1
    # 3D planes of fewer rows than that: an item takes PP = RR / FOLDED_LY whole
    # consecutive z planes (rows of planes of folded rows)
    PLANES = ROWS_RUN and p["dim"] == 3 and RR > FOLDED_LY
    PP = RR // FOLDED_LY if PLANES else 1
    if PLANES and (RR % FOLDED_LY or p["Lz"] % PP):
        raise ValueError("multispin.cl: W = %d words are %d rows, not whole planes of %d rows "
                         "dividing Lz = %d" % (W, RR, FOLDED_LY, p["Lz"]))
    if lanes > 1 and (W not in (1, 2, 4, 8) or (W % WR or (not PLANES and FOLDED_LY % RR) if ROWS_RUN else WR % W)):
        raise ValueError("multispin.cl: W must be 1, 2, 4 or 8 and divide the %d words per row, or "
                         "be whole rows (W / %d dividing Ly = %d)" % (WR, WR, p["Ly"]))
    if lanes == 1 and W not in (1, 2, 4, 8, 16, 32):
        raise ValueError("multispin.cl: W must be 1, 2, 4, 8, 16 or 32 with lanes = 1, got %r" % (W,))
    return dict(ROWS_RUN=ROWS_RUN, RR=RR, PLANES=PLANES, PP=PP, vec="" if W == 1 else str(W))


def _decisions(p):
    """The threshold classes and slots, and the joint decisions' layout."""
    if p["accept"] not in ("select", "compare"):
        raise ValueError("multispin.cl: accept must be 'select' or 'compare', got %r" % (p["accept"],))
    NCLS = 2 * p["dim"] + 1                    # classes per spin value: aligned neighbours k
    D = len(p["slots"])
    covered = sorted(sum((tuple(s) for s in p["slots"]), ()) + tuple(p["always"]))
    if covered != list(range(2 * NCLS)):
        raise ValueError("multispin.cl: slots and always must partition the %d classes" % (2 * NCLS))
    NBITS, joint = p["NBITS"], p["joint"]
    out = dict(NCLS=NCLS, D=D, NP=max(0, (D - 1).bit_length()))     # NP: slot-index bit planes
    if joint is not None:
        GROUP_SPINS, FIELD_BITS, TABLE_SHIFT, TABLE_CELLS = joint
        if not D or NBITS % GROUP_SPINS or FIELD_BITS < GROUP_SPINS or D * FIELD_BITS > 16 or TABLE_CELLS != 1 << (32 - TABLE_SHIFT):
            raise ValueError("multispin.cl: joint = %r does not fit %d slots and %d-bit words" % (joint, D, NBITS))
        GROUPS_PER_WORD = NBITS // GROUP_SPINS  # groups (one random word each) per word
        GROUPS_PER_ACC = FIELD_BITS // GROUP_SPINS  # groups per accumulator
        out.update(GROUP_SPINS=GROUP_SPINS, FIELD_BITS=FIELD_BITS, TABLE_SHIFT=TABLE_SHIFT, TABLE_CELLS=TABLE_CELLS, GROUPS_PER_WORD=GROUPS_PER_WORD, GROUPS_PER_ACC=GROUPS_PER_ACC,
                   ACCS_PER_WORD=-(-GROUPS_PER_WORD // GROUPS_PER_ACC),  # accumulators per word
                   CALLS_PER_WORD=-(-GROUPS_PER_WORD // 4))  # Philox calls per word
    else:                                      # (the template names them either way)
        out.update(GROUP_SPINS=0, FIELD_BITS=0, TABLE_SHIFT=0, TABLE_CELLS=0, GROUPS_PER_WORD=0, GROUPS_PER_ACC=0, ACCS_PER_WORD=0, CALLS_PER_WORD=NBITS // 4)
    # one word per spin in folded words: the counters of the natural rows (the
    # checkerboard's), group q of a word is group q % QS of its sub-row q / QS
    out["NATURAL_COUNTERS"] = p["FOLD"] > 1 and joint is None
    # Philox vector width of the lanes 4/8 design: joint words need only
    # W * CALLS_PER_WORD calls per item, so fewer lanes than `lanes` where that is less
    VL = p["lanes"]
    if joint is not None and VL > 1:
        VL = min(VL, max(2, 1 << ((p["W"] * out["CALLS_PER_WORD"]).bit_length() - 1)))
    out["VL"] = VL
    # the decision diagnostic's counters: spins per group, classes, counters per item
    GK = out["GROUP_SPINS"] if joint is not None else 4
    out.update(GK=GK, NCL=2 * NCLS, NCNT=2 * 2 * NCLS + 4 * D * GK)
    return out


def _tiles(p):
    """The tile of ising_ms_multisweep: a band of BT slabs with BH halo slabs per side,
    in 3D of TY rows with HY halo rows."""
    dim, FOLDED_LY, band = p["dim"], p["FOLDED_LY"], p["band"]
    BT, BH = band
    LOUT = p["Lz"] if dim == 3 else p["Ly"]    # slabs per lattice (z planes in 3D, rows in 2D)
    # 3D bands may also be cut in y: tiles of TY rows with HY halo rows on each
    # side (yband; the whole plane, no halo, by default); 2D slabs are one row
    TY, HY = p["yband"] or ((FOLDED_LY, 0) if dim == 3 else (1, 0))
    if LOUT % BT or (BH == 0) != (BT == LOUT) or not p["mwg"]:
        raise ValueError("multispin.cl: band %r must divide the %d slabs (halo 0 iff the band is "
                         "the whole lattice) and mwg must be set" % (band, LOUT))
    if dim == 3 and (FOLDED_LY % TY or (HY == 0) != (TY == FOLDED_LY)):
        raise ValueError("multispin.cl: yband %r must divide the %d rows of a plane (halo 0 iff the whole side)"
                         % ((TY, HY), FOLDED_LY))
    if dim == 2 and p["yband"]:
        raise ValueError("multispin.cl: yband is for 3D lattices")
    if p["PLANES"] and BH:
        raise ValueError("multispin.cl: runs of whole planes need the whole replica (no halo)")
    if p["ROWS_RUN"] and (HY if dim == 3 else BH):
        raise ValueError("multispin.cl: runs of whole rows (W > %d words per row) need rows with no "
                         "halo: the whole replica (2D) or whole y rows (3D)" % p["WR"])
    HSY = TY + 2 * HY                          # rows per slab in local memory
    return dict(BT=BT, BH=BH, LOUT=LOUT, TY=TY, HY=HY, HSY=HSY,
                SW=HSY * p["WR"],              # words per local slab and colour
                HS=BT + 2 * BH,                # slabs in local memory
                NBANDS=LOUT // BT, NBY=FOLDED_LY // TY if dim == 3 else 1,
                OFF=LOUT * (-(-BH // LOUT)) - BH,      # slab(s) = (band * BT + s + OFF) % LOUT
                OFFY=FOLDED_LY * (-(-HY // FOLDED_LY)) - HY)       # row(s) = (tile * TY + s + OFFY) % Ly
