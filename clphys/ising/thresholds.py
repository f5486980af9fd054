"""Metropolis acceptance as integer thresholds, computed on the host.

Every Ising kernel accepts a proposed flip of spin s when a raw 32-bit random
word w satisfies ``w <= thr[a, k]`` with

* a = 0 if s = +1 and 1 if s = -1,
* k = the number of the 2*dim neighbours equal to s (0..2*dim),
* dE = 2 J (2k - 2 dim) + 2 h s the energy change of the flip,
* thr = ceil(p 2^32) - 1 clamped to [0, 2^32 - 1], p = min(1, exp(-dE / T)).

So p = 1 is accepted always (thr = 2^32 - 1) and any other p is realised to
within 2^-32. No exp runs on the device, and a given word gives the same
decision on every device.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .. import _validate


def metropolis_thresholds(dim: int, T: float, J: float = 1.0, h: float = 0.0) -> np.ndarray:
    """uint32 table thr[a, k] of shape (2, 2*dim + 1); see the module doc."""
    dim = _validate.choice("dim", dim, (2, 3))
    T = _validate.real("T", T, minimum=0.0, strict_min=True)
    J = _validate.real("J", J)
    h = _validate.real("h", h)
    k = np.arange(2 * dim + 1)
    s = np.array([[1.0], [-1.0]])
    dE = 2.0 * J * (2.0 * k - 2.0 * dim) + 2.0 * h * s
    with np.errstate(over="ignore"):
        p = np.minimum(1.0, np.exp(-dE / T))
    thr = np.ceil(p * 2.0**32) - 1.0
    return np.clip(thr, 0, 2**32 - 1).astype(np.uint32)


# ---------------------------------------------------------------- kernel structure
_ALWAYS = 0xFFFFFFFF


def threshold_structure(thresholds):
    """(always, slots, per-slot thresholds (R, len(slots))) of a (R, 2, 2*dim+1) table."""
    thr = np.asarray(thresholds, dtype=np.uint32)
    cols = thr.reshape(thr.shape[0], -1)
    always = tuple(c for c in range(cols.shape[1]) if np.all(cols[:, c] == _ALWAYS))
    slots, values = [], []
    for c in range(cols.shape[1]):
        if c in always:
            continue
        for i, v in enumerate(values):
            if np.array_equal(v, cols[:, c]):
                slots[i].append(c)
                break
        else:
            slots.append([c])
            values.append(cols[:, c])
    table = np.stack(values, axis=1) if values else np.zeros((cols.shape[0], 1), np.uint32)
    return always, tuple(tuple(s) for s in slots), np.ascontiguousarray(table)


# ---------------------------------------------------------------- joint decisions
# One 32-bit random word decides the Metropolis tests of k spins at once
# (docs/ising.md, "Several spins per random word").
#
# The non-trivial acceptance probabilities of a replica are nested: with its
# D distinct values sorted, p_1 > p_2 > ... > p_D, a uniform u accepts a spin of
# level l (probability p_l) iff u < p_l, i.e. iff its *region* r = #{l : u < p_l}
# (0..D) is >= l. The region does not depend on the spin's class, so the k
# spins of a group need only the joint region vector (r_1..r_k), whose
# (D+1)^k outcomes have probabilities prod_j q(r_j) with q(r) = p_r - p_{r+1}
# (p_0 = 1, p_{D+1} = 0). Each outcome gets an integer count n_o within one unit
# of 2^32 times its exact probability (sum 2^32), and an alias table of M = 2^m
# cells of 2^(32-m) words each realises the counts exactly: a word w lies in cell
# w >> (32 - m) and gives the cell's primary outcome if w < cell_start + cutoff,
# else its alias (Walker's alias method in integers).

# The default update mode of the multispin and blocks (philox) kernels: "auto"
# (one random word decides several spins) or 1 (one word per spin: multispin's
# spins are then the checkerboard algorithm's). Chosen by speed: docs/ising.md
# "Speed". This is the one switch.
DEFAULT_SPINS_PER_WORD = "auto"
JOINT_SPINS = (2, 4, 8)          # spins per word the kernels support (powers of two)
MAX_CELLS = 256                  # largest table (outcomes (D + 1)^k; 2 KB per replica)
MASK_BITS = 16                   # mask bits per outcome in a table entry
# Joint tables are pure functions of (layout, a replica's thresholds) and take
# ms each on the host: built ones are kept for every later ensemble in the
# process (binder_scan's sizes, repeated runs), the most recent SHARED_TABLES.
SHARED_TABLES = 8192             # ~2 KB each
_shared_tables: OrderedDict = OrderedDict()


class JointLayout:
    """How one word's outcome is coded: k spins per word, D levels, M cells,
    and the thermometer mask of an outcome: bit (l - 1) * field + j is set
    when spin j of the group has region >= l (l = 1..D), so that the masks of
    `per_acc` consecutive groups can be added with shifts of j * k bits into
    one accumulator without overlapping (per_acc * k <= field, D * field <= 16)."""

    __slots__ = ("k", "levels", "cells", "field", "per_acc")

    def __init__(self, k, levels, cells):
        self.k, self.levels, self.cells = k, levels, cells
        self.field = max(k, (MASK_BITS // max(levels, 1)) // k * k)
        self.per_acc = self.field // k

    @property
    def shift(self):
        """Right shift of a word that gives its cell index."""
        return 32 - (self.cells.bit_length() - 1)

    def key(self):
        """A hashable key of the layout (k, levels, cells)."""
        return (self.k, self.levels, self.cells)

    def __eq__(self, other):
        return isinstance(other, JointLayout) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())

    def __repr__(self):
        return f"JointLayout(k={self.k}, levels={self.levels}, cells={self.cells})"


def joint_layout(levels: int, spins_per_word="auto", row_bits: int = 32) -> JointLayout | None:
    """The layout for D = `levels` nested probabilities: `spins_per_word` "auto"
    takes the largest k of JOINT_SPINS with (D + 1)^k <= MAX_CELLS outcomes and
    k D <= 16 mask bits; an int k must satisfy the same. k must divide
    `row_bits` (the spins of one kernel word). None when D = 0 (no random
    words needed)."""
    levels = _validate.integer("levels", levels, 0)
    if levels == 0:
        return None
    fits = lambda k: (levels + 1) ** k <= MAX_CELLS and k * levels <= MASK_BITS and row_bits % k == 0
    ok = [k for k in JOINT_SPINS if fits(k)]
    if spins_per_word == "auto":
        if not ok:
            raise ValueError(f"no joint layout for {levels} acceptance levels and {row_bits}-spin "
                             "words; use spins_per_word=1")
        k = max(ok)
    else:
        k = _validate.choice("spins_per_word", spins_per_word, JOINT_SPINS)
        if k not in ok:
            raise ValueError(f"spins_per_word={k} is not possible with {levels} acceptance levels "
                             f"((D + 1)^k = {(levels + 1) ** k} outcomes, at most {MAX_CELLS}; "
                             f"k must divide the {row_bits} spins of a row word); allowed here: "
                             f"{', '.join(map(str, ok + [1]))} or 'auto'")
    cells = 1 << max(1, ((levels + 1) ** k - 1).bit_length())
    return JointLayout(k, levels, cells)


def nested_order(slot_thresholds) -> tuple[int, ...]:
    """Order of the columns of a per-slot threshold table (R, D) that makes
    every replica's row non-increasing (level 1 = largest probability): the
    Metropolis probabilities exp(-dE/T) are nested the same way at every T.
    ValueError if no such order exists."""
    t = np.asarray(slot_thresholds, dtype=np.int64)
    order = tuple(sorted(range(t.shape[1]), key=lambda c: (-int(t[:, c].sum()), c)))
    s = t[:, order]
    if np.any(np.diff(s, axis=1) > 0):
        raise ValueError("acceptance thresholds are not ordered the same way in every replica; "
                         "joint decisions need nested probabilities (use spins_per_word=1)")
    return order


def outcome_counts(level_thresholds, k) -> list[int]:
    """Integer count (out of 2^32) of each joint outcome of k spins, outcome
    o = sum_j r_j (D + 1)^j, for one replica's thresholds (D,) in level order
    (accept iff word <= threshold, i.e. probability (t + 1) / 2^32).

    Exact integer arithmetic: the exact count of an outcome is
    prod_j Q(r_j) / 2^(32 (k - 1)) with Q the integer region weights; each
    count is that value rounded down or up (so within one unit of it), the
    counts sum to 2^32, and which ones are rounded up is chosen so that the
    acceptance probability of every spin position and level (a sum of
    (D + 1)^(k - 1) or more outcomes) stays as close as it can to its exact
    value: largest remainders first, then pairwise exchanges while they
    lower the largest marginal deviation (see marginal_errors), then single
    moves that make every marginal exact (_repair_marginals; for some small
    probabilities a count is then within two units)."""
    exact, up, frac, base, shift = _largest_remainders(level_thresholds, k)
    if k > 1:
        up = _balance_marginals(up, frac, base, k)
    counts = [(e >> shift) + int(u) for e, u in zip(exact, up)]
    if k > 1:
        _repair_marginals(counts, exact, shift, [int(t) + 1 for t in level_thresholds], base, k)
    return counts


def _largest_remainders(level_thresholds, k):
    """The start of outcome_counts' rounding: (exact weights x 2^(32 (k - 1)),
    which outcomes are rounded up by largest remainders, the remainders in
    units of 2^-40, D + 1, 32 (k - 1))."""
    P = [1 << 32] + [int(t) + 1 for t in level_thresholds] + [0]
    Q = [P[r] - P[r + 1] for r in range(len(P) - 1)]             # region weights, sum 2^32
    if min(Q) < 0:
        raise ValueError("level thresholds must be non-increasing")
    base = len(Q)
    shift = 32 * (k - 1)
    exact = []
    for o in range(base ** k):
        prod, x = 1, o
        for _ in range(k):
            prod *= Q[x % base]
            x //= base
        exact.append(prod)
    missing = (1 << 32) - sum(e >> shift for e in exact)
    low = (1 << shift) - 1
    rem = sorted(range(len(exact)), key=lambda o: (-(exact[o] & low), o))
    up = np.zeros(len(exact), dtype=bool)
    up[rem[:missing]] = True
    frac = [(e & low) >> (shift - 40) if shift > 40 else (e & low) << (40 - shift) for e in exact]
    return exact, up, frac, base, shift


def _repair_marginals(counts, exact, shift, wants, base, k):
    """Make every spin's acceptance exact where the exchanges left it a unit off (seen
    for small probabilities, e.g. one level at 315332 / 2^32 with k = 8): move single
    counts between two outcomes that differ only in spin j's region, l against l - 1.
    That changes only P(spin j accepted at level l), by one unit.  A move takes from an
    outcome rounded up and gives to one rounded down with a remainder, so that every
    count stays within one unit of its exact value; where no such pair exists, within
    two units (a joint probability off by 2^-31 instead of 2^-32; every marginal exact).
    In place; deterministic."""
    floor = [e >> shift for e in exact]
    low = (1 << shift) - 1
    o_all = range(len(counts))
    # the marginal counts, column (l - 1) k + j: region >= l at position j (_events)
    err = _events(base, k).T @ np.array(counts, dtype=np.int64) - np.repeat(wants, k)

    def pair(src, move, region, slack):
        return next(((o, o + move) for o in o_all if region(o) == src
                     and counts[o] >= floor[o] + 1 - slack and counts[o] > 0
                     and counts[o + move] <= floor[o + move] + slack
                     and (slack or exact[o + move] & low)), None)

    for c in np.flatnonzero(err):
        lev, j = divmod(int(c), k)
        lev += 1
        step = base ** j
        region = lambda o, step=step: (o // step) % base                  # noqa: E731
        # too many accepted: region l -> l - 1; too few: l - 1 -> l
        src, move = (lev, -step) if err[c] > 0 else (lev - 1, step)
        for _ in range(abs(int(err[c]))):
            found = pair(src, move, region, 0) or pair(src, move, region, 1)
            if found is None:
                break                           # joint_table refuses the table
            counts[found[0]] -= 1
            counts[found[1]] += 1


def _events(base, k):
    """(outcomes, D k) 0/1 matrix: outcome o has region >= l at position j."""
    o = np.arange(base ** k)
    return np.stack([((o // base**j) % base >= lev) for lev in range(1, base) for j in range(k)],
                    axis=1).astype(np.int64)


def _balance_marginals(up, frac, base, k, rounds=64):
    """Exchange rounded-up and rounded-down outcomes (only those with a
    non-zero remainder can be rounded up) while that lowers (max |E|, sum E^2)
    of the marginal deviations E, in integer units of 2^-40 (deterministic)."""
    one = 1 << 40
    A = _events(base, k)
    columns = A.shape[1]
    sets = A @ (np.int64(1) << np.arange(columns, dtype=np.int64))     # each outcome's columns as bits
    fr = np.array(frac, dtype=np.int64)
    E = A.T @ (up * one - fr)
    cost = lambda E: (int(np.abs(E).max()), int((E.astype(object) ** 2).sum()))
    best = cost(E)
    for _ in range(rounds):
        ins, outs = np.flatnonzero(up), np.flatnonzero(~up & (fr > 0))
        if not len(ins) or not len(outs):
            break
        # moving a unit from outcome i to o takes `one` from the columns only i
        # has and adds it to those only o has: max |E| after each move from the
        # largest |E - one|, |E + one| and |E| over those sets of columns
        s_in, s_out = sets[ins][:, None], sets[outs][None, :]
        worst = np.maximum(np.maximum(_largest_over_sets(np.abs(E - one))[s_in & ~s_out],
                                      _largest_over_sets(np.abs(E + one))[s_out & ~s_in]),
                           _largest_over_sets(np.abs(E))[~(s_in ^ s_out) & ((1 << columns) - 1)])
        cands = np.argwhere(worst == worst.min())
        trial = E[None, :] - one * (A[ins[cands[:, 0]]] - A[outs[cands[:, 1]]])
        if len(cands) > 1:
            # the candidates share max |E|; the exact sums of squares are needed
            # only near the smallest, found in floating point (relative error
            # < 1e-13 at these sizes, far inside the margin)
            sq = np.square(trial.astype(np.float64)).sum(axis=1)
            near = np.flatnonzero(sq <= sq.min() * (1 + 1e-9))
            cands, trial = cands[near], trial[near]
        options = sorted((cost(t), ins[a], outs[b]) for t, (a, b) in zip(trial, cands))
        c, o_in, o_out = options[0]
        if c >= best:
            break
        up[o_in], up[o_out] = False, True
        E, best = E - one * (A[o_in] - A[o_out]), c
    return up


def _largest_over_sets(values):
    """Table over every set S of the columns (bit c: column c) of max(values[S]), 0 for none."""
    table = np.zeros(1 << len(values), dtype=np.int64)
    for c, v in enumerate(values):
        table[1 << c:2 << c] = np.maximum(table[:1 << c], v)
    return table


def outcome_masks(layout: JointLayout) -> np.ndarray:
    """Thermometer mask of every outcome (uint32, (D + 1)^k)."""
    base, k = layout.levels + 1, layout.k
    o = np.arange(base ** k)
    masks = np.zeros(o.size, dtype=np.uint32)
    for j in range(k):
        r = (o // base**j) % base
        for lev in range(1, layout.levels + 1):
            masks |= ((r >= lev).astype(np.uint32) << np.uint32((lev - 1) * layout.field + j))
    return masks


def alias_cells(counts, cells: int):
    """Walker's alias table in integers: (cutoff, primary, alias) per cell, cell
    capacity 2^32 / cells; outcome o gets exactly counts[o] of the 2^32 words."""
    cap = (1 << 32) // cells
    n = list(counts) + [0] * (cells - len(counts))
    if len(n) != cells or sum(n) != 1 << 32:
        raise ValueError("counts must have at most `cells` entries summing to 2^32")
    cutoff, alias = [cap] * cells, list(range(cells))
    small = [i for i in range(cells) if n[i] < cap]
    large = [i for i in range(cells) if n[i] > cap]
    while small and large:
        s, big = small.pop(), large[-1]
        cutoff[s], alias[s] = n[s], big
        n[big] -= cap - n[s]
        if n[big] <= cap:
            large.pop()
            if n[big] < cap:
                small.append(big)
    return cutoff, list(range(cells)), alias


def joint_table(level_thresholds, layout: JointLayout) -> np.ndarray:
    """uint32 (cells, 2) table of one replica: entry c = (c * cap + cutoff,
    mask(primary) | mask(alias) << 16); word w of cell c gives the primary's
    mask if w < entry[0], else the alias's (a full cell aliases itself)."""
    counts = outcome_counts(level_thresholds, layout.k)
    err = marginal_errors(level_thresholds, layout, counts)
    if np.any(err):
        # never seen (every table of the tests and of a wide random search is
        # exact); refuse rather than bias a run
        raise ValueError(f"joint table for thresholds {list(map(int, level_thresholds))} misses "
                         f"an acceptance probability by up to {int(np.abs(err).max())} / 2^32; "
                         "use spins_per_word=1")
    cutoff, primary, alias = alias_cells(counts, layout.cells)
    masks = np.zeros(layout.cells, dtype=np.uint64)
    masks[:len(counts)] = outcome_masks(layout)
    cap = (1 << 32) // layout.cells
    out = np.empty((layout.cells, 2), dtype=np.uint32)
    for c in range(layout.cells):
        a = alias[c] if cutoff[c] < cap else primary[c]
        p = primary[c] if cutoff[c] > 0 else a
        out[c, 0] = c * cap + (cutoff[c] if cutoff[c] < cap else 0)
        out[c, 1] = int(masks[p]) | int(masks[a]) << MASK_BITS
    return out


def joint_tables(level_thresholds, layout: JointLayout, cache: dict | None = None) -> np.ndarray:
    """(R, cells, 2) uint32: joint_table of every replica's row of
    `level_thresholds` (R, D); rows already in `cache` (default: the
    process's most recent SHARED_TABLES tables) are not rebuilt."""
    t = np.asarray(level_thresholds, dtype=np.uint32)
    shared = _shared_tables
    tables: dict = shared if cache is None else cache
    out = np.empty((t.shape[0], layout.cells, 2), dtype=np.uint32)
    for r, row in enumerate(t):
        key = (layout.key(), row.tobytes())
        table = tables.get(key)
        if table is None:
            table = tables[key] = joint_table(row, layout)
            if tables is shared and len(shared) > SHARED_TABLES:
                shared.popitem(last=False)
        elif tables is shared:
            shared.move_to_end(key)
        out[r] = table
    return out


def decode_words(words, table, layout: JointLayout) -> np.ndarray:
    """NumPy decode (the kernels' twin): regions (..., k) of each word's k
    spins from one replica's table (cells, 2)."""
    w = np.asarray(words, dtype=np.uint32)
    e = np.asarray(table, dtype=np.uint32)[w >> np.uint32(layout.shift)]
    m = np.where(w < e[..., 0], e[..., 1], e[..., 1] >> np.uint32(MASK_BITS))
    regions = np.zeros(w.shape + (layout.k,), dtype=np.int64)
    for lev in range(1, layout.levels + 1):
        for j in range(layout.k):
            regions[..., j] += (m >> np.uint32((lev - 1) * layout.field + j)) & np.uint32(1)
    return regions


def marginal_errors(level_thresholds, layout: JointLayout, counts=None) -> np.ndarray:
    """Deviation, in units of 2^-32, of P(spin j accepted at level l) under
    the integer outcome counts (default: outcome_counts) from the one-word
    probability (t_l + 1) / 2^32: int64 (D, k)."""
    if counts is None:
        counts = outcome_counts(level_thresholds, layout.k)
    counts = np.array(counts, dtype=object)
    base, k = layout.levels + 1, layout.k
    o = np.arange(base ** k)
    err = np.zeros((layout.levels, k), dtype=np.int64)
    for lev in range(1, layout.levels + 1):
        want = int(level_thresholds[lev - 1]) + 1
        for j in range(k):
            err[lev - 1, j] = int(counts[((o // base**j) % base) >= lev].sum()) - want
    return err


class DecisionPlan:
    """How a kernel decides flips for a threshold table: classes accepted
    always, slots (groups of classes sharing a threshold column; in level order
    for joint decisions), the joint layout (None: one word per spin) and the
    uint32 data of the kernel's table argument: per-slot thresholds (R, D), or
    the joint alias tables (R, cells, 2); `slot_thresholds` (R, D) are the
    per-slot thresholds in slot order either way."""

    __slots__ = ("always", "slots", "layout", "data", "slot_thresholds")

    def __init__(self, always, slots, layout, data, slot_thresholds):
        self.always, self.slots, self.layout, self.data = always, slots, layout, data
        self.slot_thresholds = slot_thresholds

    def levels(self, n_classes):
        """Level of every class id (0: always accepted; l: slot l - 1)."""
        out = np.zeros(n_classes, dtype=np.int64)
        for i, slot in enumerate(self.slots):
            out[list(slot)] = i + 1
        return out


def decision_plan(thresholds, spins_per_word, row_bits=32, cache=None) -> DecisionPlan:
    """The DecisionPlan of a (R, 2, 2 dim + 1) threshold table for
    spins_per_word 1 (one word per spin) or "auto"/2/4/8 (joint decisions with
    `row_bits`-spin words); "auto" falls back to one word per spin where no
    joint layout applies, an explicit k raises ValueError there."""
    always, slots, table = threshold_structure(thresholds)
    if spins_per_word == 1 or not slots:
        return DecisionPlan(always, slots, None, table, table)
    try:
        order = nested_order(table)
        layout = joint_layout(len(slots), spins_per_word, row_bits)
    except ValueError:
        # "auto" is one word per spin where no joint table applies: replicas
        # whose probabilities are not nested alike (per-replica J or h through
        # a backend's own API; an Ensemble's replicas always are) or too many
        # levels for the mask bits
        if spins_per_word == "auto":
            return DecisionPlan(always, slots, None, table, table)
        raise
    assert layout is not None       # slots is not empty: at least one level
    slots, table = tuple(slots[i] for i in order), np.ascontiguousarray(table[:, order])
    return DecisionPlan(always, slots, layout, joint_tables(table, layout, cache), table)
