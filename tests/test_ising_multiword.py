"""Multispin with joint decisions (one Philox word decides several spins):
the alias tables (exact counts, exact single-spin probabilities), the kernels
against their NumPy twin and PoCL against Oclgrind, the decision code's
acceptance rates over >= 1e8 proposals, and E, C against Kaufman's exact
finite-lattice values."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from clphys.exact import finite_lattice
from clphys.ising import Ensemble2D, Ensemble3D
from clphys.ising import reference as ref
from clphys.ising import thresholds as th
from clphys.ising.backends import multispin_fold
from clphys.ising.multispin import DEFAULT_SPINS_PER_WORD, MultispinBackend, decision_counts
from clphys.ising.multispin_plan import tuned
from clphys.stats import jackknife

ENSEMBLE = {2: Ensemble2D, 3: Ensemble3D}


def _thr(dim, temps, J=1.0, h=0.0):
    return np.stack([th.metropolis_thresholds(dim, T, J, h) for T in temps])


def _plan(dim, T, J=1.0, h=0.0, spw="auto"):
    return th.decision_plan(_thr(dim, [T], J, h), spw)


def _exact_counts(level_thresholds, k):
    """2^32 * prod q(r_j) per outcome, as exact fractions (numerator, 2^(32(k-1)))."""
    P = [1 << 32] + [int(t) + 1 for t in level_thresholds] + [0]
    Q = [P[r] - P[r + 1] for r in range(len(P) - 1)]
    out = []
    for o in range(len(Q) ** k):
        prod = 1
        for j in range(k):
            prod *= Q[(o // len(Q) ** j) % len(Q)]
        out.append(prod)
    return out, 32 * (k - 1)


def _realised(table, layout):
    """Words (out of 2^32) that the alias table gives to each mask."""
    cap = (1 << 32) // layout.cells
    got = {}
    for c, (x, m) in enumerate(np.asarray(table, dtype=np.int64)):
        cut = int(x) - c * cap
        assert 0 <= cut < cap
        got[int(m) & 0xFFFF] = got.get(int(m) & 0xFFFF, 0) + cut
        got[int(m) >> 16] = got.get(int(m) >> 16, 0) + cap - cut
    return {m: n for m, n in got.items() if n}


# --------------------------------------------------------------- tables
@pytest.mark.parametrize("dim,J,h,levels,k,cells", [(2, 1.0, 0.0, 2, 4, 128), (3, 1.0, 0.0, 3, 4, 256),
                                                    (2, 1.0, 0.3, 5, 2, 64), (3, -1.0, 0.2, 7, 2, 64),
                                                    (2, 0.0, 0.5, 1, 8, 256)])
def test_layout_choice(dim, J, h, levels, k, cells):
    """Fewest words per spin with at most 256 outcomes and 16 mask bits."""
    plan = _plan(dim, 2.3, J, h)
    assert len(plan.slots) == levels
    assert (plan.layout.k, plan.layout.cells) == (k, cells)
    assert plan.layout.levels * plan.layout.field <= 16 and plan.layout.field >= k


@pytest.mark.slow
@pytest.mark.parametrize("dim,J,h", [(2, 1.0, 0.0), (3, 1.0, 0.0), (2, -0.6, 0.4), (3, 1.0, -0.3),
                                     (2, 0.0, 0.7)])
@pytest.mark.parametrize("T", [0.4, 1.5, 2.269, 4.51, 30.0])
def test_tables_realise_exact_counts(dim, J, h, T):
    """Every joint outcome gets exactly its integer count of the 2^32 words
    (alias table), each count is within one word of 2^32 prod q(r_j), and the
    acceptance probability of every spin of the group equals its one-word
    value (t + 1) / 2^32 exactly."""
    plan = _plan(dim, T, J, h)
    lay, levels = plan.layout, plan.slot_thresholds[0]
    counts = th.outcome_counts(levels, lay.k)
    assert sum(counts) == 1 << 32
    exact, shift = _exact_counts(levels, lay.k)
    assert all(abs((n << shift) - e) < 1 << shift for n, e in zip(counts, exact))
    masks = th.outcome_masks(lay)
    want = {}
    for m, n in zip(masks.tolist(), counts):
        want[m] = want.get(m, 0) + n
    assert _realised(plan.data[0], lay) == {m: n for m, n in want.items() if n}
    assert not np.any(th.marginal_errors(levels, lay))


# derandomized: the same examples on every run (a random search once found the
# small-probability case below, then repaired by _repair_marginals)
@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=7), st.sampled_from([2, 4, 8]))
@example([315331], 8)
@example([246666], 8)
@example([209013], 8)
def test_tables_for_any_nested_thresholds(values, k):
    """Any non-increasing thresholds (including 0 and 2^32 - 1 ties): exact
    alias counts and exact single-spin probabilities, or a clear refusal of a
    layout with too many outcomes."""
    levels = sorted(values, reverse=True)
    try:
        lay = th.joint_layout(len(levels), k)
    except ValueError as exc:
        assert "spins_per_word" in str(exc) and (len(levels) + 1) ** k > th.MAX_CELLS or k * len(levels) > 16
        return
    table = th.joint_table(np.array(levels, dtype=np.uint32), lay)
    counts = th.outcome_counts(levels, k)
    want = {}
    for m, n in zip(th.outcome_masks(lay).tolist(), counts):
        want[m] = want.get(m, 0) + n
    assert _realised(table, lay) == {m: n for m, n in want.items() if n}
    assert not np.any(th.marginal_errors(levels, lay))


def _balance_exactly(up, frac, base, k, rounds=64):
    """th._balance_marginals with every tied candidate's cost in exact integers
    (the library ranks them in floating point first)."""
    one, A, fr = 1 << 40, th._events(base, k), np.array(frac, dtype=np.int64)
    E = A.T @ (up * one - fr)
    cost = lambda E: (int(np.abs(E).max()), sum(int(x) ** 2 for x in E))  # noqa: E731
    best = cost(E)
    for _ in range(rounds):
        ins, outs = np.flatnonzero(up), np.flatnonzero(~up & (fr > 0))
        if not len(ins) or not len(outs):
            break
        options = sorted((cost(E - one * (A[a] - A[b])), a, b) for a in ins for b in outs)
        c, o_in, o_out = options[0]
        if c >= best:
            break
        up[o_in], up[o_out] = False, True
        E, best = E - one * (A[o_in] - A[o_out]), c
    return up


@pytest.mark.parametrize("dim, T, k", [(2, 2.269, 4), (2, 1.0, 2), (3, 4.5115, 4), (3, 3.0, 2), (3, 9.0, 4)])
def test_balanced_rounding_is_the_exact_optimum(dim, T, k):
    """The rounding of the joint outcome counts picks, in every exchange, the
    pair an exact search over all pairs picks (cost in exact integers)."""
    levels = [int(np.ceil(np.exp(-4 * d / T) * 2**32)) - 1 for d in range(1, dim + 1)]
    _, up, frac, base, _ = th._largest_remainders(levels, k)
    assert np.array_equal(th._balance_marginals(up.copy(), frac, base, k),
                          _balance_exactly(up.copy(), frac, base, k))


def test_joint_tables_built_once_per_process(monkeypatch):
    """The shared cache returns the tables a fresh build gives, builds each
    (layout, thresholds) once, and keeps only the most recent SHARED_TABLES."""
    lay = th.joint_layout(3, 4)
    rows = np.array([[np.ceil(np.exp(-4 * d / T) * 2**32) - 1 for d in (1, 2, 3)] for T in (3.9, 4.2, 4.5, 4.8)],
                    dtype=np.uint32)
    fresh = th.joint_tables(rows, lay, cache={})
    monkeypatch.setattr(th, "_shared_tables", type(th._shared_tables)())
    monkeypatch.setattr(th, "SHARED_TABLES", 3)
    built = []
    real = th.joint_table
    monkeypatch.setattr(th, "joint_table", lambda row, layout: built.append(row.tobytes()) or real(row, layout))
    assert np.array_equal(th.joint_tables(rows[:2], lay), fresh[:2])
    assert np.array_equal(th.joint_tables(rows, lay), fresh)       # rows 0, 1 kept: 2 builds more
    assert len(built) == 4 and len(th._shared_tables) == 3          # row 0 (least recent) dropped
    assert np.array_equal(th.joint_tables(rows[1:], lay), fresh[1:]) and len(built) == 4


def test_decode_words_matches_table_semantics():
    """decode_words (the twin's decoder) gives region vectors with the
    probabilities of the table: all words of 8 cells, exactly."""
    lay = th.joint_layout(2, 4)
    levels = th.metropolis_thresholds(2, 2.269)[0, 3:]          # k = 3, 4 aligned: p1 > p2
    table = th.joint_table(levels, lay)
    cap = (1 << 32) // lay.cells
    for c in (0, 1, 17, 64, 127):
        w = np.arange(c * cap, (c + 1) * cap, 4097, dtype=np.uint64).astype(np.uint32)
        reg = th.decode_words(w, table, lay)
        prim = w < table[c, 0]
        for mask, sel in ((int(table[c, 1]) & 0xFFFF, prim), (int(table[c, 1]) >> 16, ~prim)):
            r = [sum((mask >> ((lev - 1) * lay.field + j)) & 1 for lev in (1, 2)) for j in range(4)]
            assert np.all(reg[sel] == r)


def test_not_nested_refused():
    with pytest.raises(ValueError, match="not ordered"):
        th.nested_order(np.array([[5, 9], [9, 5]], dtype=np.uint32))


# --------------------------------------------------------------- kernels vs twin
TWIN_CASES = [((64, 4), 1.0, 0.0, {}), ((16, 6), 1.0, 0.3, {}), ((128, 4), 1.0, 0.0, {"lanes": 1, "wg": 4}),
              ((256, 2), -0.8, 0.0, {"lanes": 1, "words_per_item": 2, "wg": 8}),
              ((8, 4, 6), 1.0, 0.0, {}), ((128, 2, 4), 0.5, -0.2, {"lanes": 1}),
              ((24, 4), -1.0, 0.0, {"lanes": 4, "words_per_item": 1}),
              ((128, 4), 1.0, 0.0, {"lanes": 8, "words_per_item": 2, "spins_per_word": 2}),
              ((64, 4), 0.0, 0.6, {"lanes": 1}), ((64, 4), 0.0, -0.6, {"lanes": 8, "words_per_item": 1}),
              # one word per row, lanes 4/8: an item takes several rows
              ((64, 8), 1.0, 0.2, {"lanes": 8, "words_per_item": 4}), ((24, 8), -1.0, 0.0, {"lanes": 4}),
              ((64, 8, 4), 1.0, 0.0, {"lanes": 8, "words_per_item": 8}),
              ((64, 8, 4), 1.0, 0.3, {"lanes": 4, "words_per_item": 2, "spins_per_word": 1}),
              ((128, 4, 4), 1.0, 0.0, {"lanes": 8, "words_per_item": 4}), ((128, 8), 1.0, 0.2, {"lanes": 8, "words_per_item": 8}),
              ((128, 4, 2), -1.0, 0.1, {"lanes": 4, "words_per_item": 8, "spins_per_word": 1}),
              # folded 3D rows (Lx = 8, 16, 32: 8, 4, 2 rows per word; 2 where Ly = 12 allows no more),
              # items of whole planes (lanes 4/8) and natural counters of the one-word mode
              ((16, 8, 4), 1.0, 0.0, {"lanes": 1}), ((16, 8, 4), 1.0, 0.3, {"spins_per_word": 1}),
              ((32, 8, 2), -1.0, 0.2, {"lanes": 4, "words_per_item": 2}),
              ((8, 16, 2), 1.0, 0.0, {"lanes": 8, "words_per_item": 8}),
              ((16, 12, 2), 1.0, 0.0, {"lanes": 1, "spins_per_word": 1}),
              ((16, 12, 4), 0.0, 0.5, {"lanes": 4, "words_per_item": 8, "spins_per_word": 1})]


def test_multispin_fold():
    """Rows per word: 3D with Lx/2 dividing 32, halved until Ly/k is even; else 1."""
    shapes = [(16, 16, 16), (32, 32, 32), (8, 8, 8), (16, 12, 4), (24, 8, 8), (64, 64, 64), (16, 16), (16, 2, 2)]
    assert [multispin_fold(s) for s in shapes] == [4, 2, 4, 2, 1, 1, 1, 1]


@pytest.mark.slow
@pytest.mark.parametrize("shape,J,h,opts", TWIN_CASES)
def test_joint_mode_matches_numpy_twin(device, shape, J, h, opts):
    """Same spins as clphys.ising.reference.multispin_sweeps, bit for bit: 2D
    and 3D, partial and multi-word rows, J < 0, h != 0, J = 0 (k = 8),
    both sweep designs, several words per item, one temperature per replica
    (the plain sweep kernel: one launch per half-sweep)."""
    temps = [1.9, 2.6, 4.6]
    ens = tuned(ENSEMBLE[len(shape)], shape, temps, J=J, h=h, seed=5, device=device, sweeps_per_launch=1,
                **opts)
    start = ens.spins()
    ens.sweep(3)
    spw = opts.get("spins_per_word", "auto")
    want = ref.multispin_sweeps(start, _thr(len(shape), temps, J, h), 3, seed=5, spins_per_word=spw)
    got = ens.spins()
    assert np.any(got != start)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.stack(ens.sums()), np.stack(ref.sums(want)))
    if spw != 1:
        one_word = ref.multispin_sweeps(start, _thr(len(shape), temps, J, h), 3, seed=5, spins_per_word=1)
        assert np.any(got != one_word)          # the joint mode is not the one-word mode


def test_default_mode_and_sweep_continuation(device):
    """The default is DEFAULT_SPINS_PER_WORD; sweeps counted across calls."""
    ens = Ensemble2D((64, 8), [2.2, 2.9], seed=3, device=device)
    start = ens.spins()
    ens.sweep(2)
    ens.sweep(1)
    want = ref.multispin_sweeps(start, _thr(2, [2.2, 2.9]), 3, seed=3, spins_per_word=DEFAULT_SPINS_PER_WORD)
    np.testing.assert_array_equal(ens.spins(), want)
    assert ens.state()["backend"] == {"sweeps": 3, "spins_per_word": DEFAULT_SPINS_PER_WORD}


@pytest.mark.slow
def test_pocl_and_oclgrind_agree(device, oclgrind):
    """Joint-mode sweeps and the decision diagnostic on Oclgrind (race and
    uninitialised checks) give what the test device gives."""
    cases = [((16, 2), 1.0, 0.0, {"lanes": 1}), ((128, 2), 1.0, 0.2, {"lanes": 8, "words_per_item": 2}),
             ((8, 2, 2), 1.0, 0.0, {}), ((64, 2), 0.0, 0.4, {"lanes": 1, "words_per_item": 2}),
             ((64, 2, 2), 1.0, 0.0, {"lanes": 4, "words_per_item": 1, "spins_per_word": 2}),
             ((32, 4, 2), 1.0, 0.1, {"lanes": 4, "words_per_item": 4}),          # rows per item
             ((16, 8, 4), 1.0, 0.0, {"lanes": 8, "words_per_item": 8}),          # folded, whole planes
             ((16, 8, 2), 1.0, 0.2, {"lanes": 1, "spins_per_word": 1})]
    for shape, J, h, opts in cases:
        out = []
        for dev in (device, oclgrind):
            ens = tuned(ENSEMBLE[len(shape)], shape, [2.0, 3.5], J=J, h=h, seed=9, device=dev,
                        sweeps_per_launch=1, **opts)
            ens.sweep(2)
            out.append(ens.spins())
        np.testing.assert_array_equal(out[0], out[1], err_msg=f"{shape} {opts}")
    thr = _thr(2, [2.0, 3.0])
    a, b = (decision_counts(thr, 8, seed=1, device=d, items=4) for d in (device, oclgrind))
    np.testing.assert_array_equal(a["class"], b["class"])
    np.testing.assert_array_equal(a["level"], b["level"])


# --------------------------------------------------------------- decision statistics
@pytest.mark.parametrize("dim,T,J,h,spw,words", [(2, 2.269, 1.0, 0.0, "auto", 2**22),
                                                  (2, 2.269, 1.0, 0.0, 2, 2**20),
                                                  (3, 4.5115, 1.0, 0.0, "auto", 2**21),
                                                  (2, 2.0, -0.7, 0.3, "auto", 2**20),
                                                  (2, 1.5, 0.0, 0.5, "auto", 2**20),
                                                  (2, 2.269, 1.0, 0.0, 1, 2**20)])
def test_acceptance_rates_binomial(device, dim, T, J, h, spw, words):
    """The sweep kernel's decision code on random spins: the acceptance rate of
    every class, and of every (level, position in the group), against exp(-dE/T)
    (binomial, |z| < 5 for each of up to ~50 rates); pairs of neighbouring
    positions of one group accepted together at the rate p^2 (independence).
    The first case makes 1.3e8 proposals."""
    thr = _thr(dim, [T], J, h)
    c = decision_counts(thr, words, spins_per_word=spw, seed=7, device=device)
    ncls = 2 * dim + 1
    k = np.arange(ncls)
    dE = 2.0 * J * (2.0 * k - 2.0 * dim) + 2.0 * h * np.array([[1.0], [-1.0]])
    p = np.minimum(1.0, np.exp(-dE / T)).ravel()
    A, P = c["class"][0, :, 0], c["class"][0, :, 1]
    assert P.sum() >= 32 * words and (words < 2**22 or P.sum() >= 1e8)
    always = p == 1.0
    assert np.array_equal(A[always], P[always])
    test = ~always & (P > 0)
    z = (A[test] - p[test] * P[test]) / np.sqrt(P[test] * p[test] * (1 - p[test]))
    assert np.all(np.abs(z) < 5), z
    lev = c["level"][0]
    plev = np.array([p[slot[0]] for slot in c["plan"].slots])[:, None]   # slot classes share p
    zl = (lev[..., 0] - plev * lev[..., 1]) / np.sqrt(lev[..., 1] * plev * (1 - plev))
    assert np.all(np.abs(zl) < 5), zl
    q = lev[..., :-1, 3]
    assert np.all(q > 1000)
    p2 = plev**2
    zp = (lev[..., :-1, 2] - p2 * q) / np.sqrt(q * p2 * (1 - p2))
    assert np.all(np.abs(zp) < 5), zp


def test_decision_counts_validation():
    with pytest.raises(ValueError, match="thresholds must have shape"):
        decision_counts(np.zeros((2, 5), np.uint32), 8)
    with pytest.raises(ValueError, match="words must be"):
        decision_counts(_thr(2, [2.0]), 0)
    with pytest.raises(ValueError, match="spins_per_word"):
        decision_counts(_thr(2, [2.0]), 8, spins_per_word=3)


# --------------------------------------------------------------- physics
@pytest.mark.slow
@pytest.mark.parametrize("T", [4.5, 6.0])
def test_folded_3d_joint_mode_matches_one_word_statistics(device, T):
    """3D L = 16 (folded rows, 4 per word): the joint mode's E/N and |M|/N equal
    the one-word mode's (the checkerboard's spins) within 4 sigma, 48
    independent replicas each (their run means as samples), at T_c and above."""
    assert multispin_fold((16, 16, 16)) == 4
    stats = []
    for mode, seed in (("auto", 11), (1, 12)):
        ens = Ensemble3D(16, [T] * 48, spins_per_word=mode, seed=seed, device=device)
        s = ens.sample(600, every=1, n_therm=400)
        runs = np.stack([s.energy.mean(axis=1), np.abs(s.magnetization).mean(axis=1)])
        stats.append((runs.mean(axis=1), runs.std(axis=1, ddof=1) / np.sqrt(48)))
    (a, sa), (b, sb) = stats
    z = (a - b) / np.hypot(sa, sb)
    assert np.all(np.abs(z) < 4), f"E/N, |M|/N: joint {a} +- {sa}, one word {b} +- {sb}"


@pytest.mark.slow
def test_energy_and_heat_vs_kaufman(device):
    """<E>/N and C/N of the joint mode on the 32 x 32 torus at T = 2.0, 2.269,
    2.5 against Kaufman's exact values; 64 independent replicas per temperature
    in one ensemble (replicas as jackknife blocks: no autocorrelation
    assumption). Each value within 4 sigma (seed-robust), and the six z values
    together within chi^2_6 < 27.9 (p = 1e-4)."""
    L, R, temps = 32, 64, (2.0, 2.269, 2.5)
    ens = Ensemble2D(L, np.repeat(temps, R), seed=21, device=device, spins_per_word="auto")
    s = ens.sample(2000, n_therm=1000)
    N, zs = L * L, []
    for i, T in enumerate(temps):
        e = s.energy[i * R:(i + 1) * R]
        m, m2 = e.mean(axis=1), (e * e).mean(axis=1)
        E = jackknife(m, n_blocks=R)
        C = jackknife(np.stack([m, m2]), lambda a: N * (a[1] - a[0] ** 2) / T**2, n_blocks=R)
        exact = finite_lattice(L, T)
        zs += [(E.value - exact.energy) / E.error, (C.value - exact.specific_heat) / C.error]
        assert E.error < 2.5e-3 and C.error < 0.03 * exact.specific_heat      # the test has teeth
    zs = np.array(zs)
    assert np.all(np.abs(zs) < 4) and np.sum(zs**2) < 27.9, zs


# --------------------------------------------------------------- options and state
def test_options_checked_before_device_work():
    with pytest.raises(ValueError, match="spins_per_word must be one of"):
        MultispinBackend.check_options({"spins_per_word": 3})
    with pytest.raises(ValueError, match="spins_per_word must be one of"):
        Ensemble2D(16, [2.0], spins_per_word=0)
    assert MultispinBackend.check_options({"spins_per_word": "auto"})["spins_per_word"] == "auto"


def test_impossible_spins_per_word(device):
    with pytest.raises(ValueError, match="spins_per_word=8 must divide the 12 spins"):
        Ensemble2D((24, 4), [2.0], spins_per_word=8, device=device)
    ens = Ensemble2D(16, [2.0], spins_per_word=8, device=device)      # 2 levels: 3^8 outcomes
    before = ens.spins()
    with pytest.raises(ValueError, match="spins_per_word=8 is not possible with 2 acceptance levels"):
        ens.sweep(1)
    np.testing.assert_array_equal(ens.spins(), before)


def test_checkpoint_keeps_the_mode(device):
    """A state resumes in the mode it was made in, bit for bit; a state without
    spins_per_word (made before the joint mode) resumes one word per spin."""
    ens = Ensemble2D(32, [2.1, 2.6], seed=4, device=device)
    ens.sweep(2)
    state = ens.state()
    ens.sweep(3)
    again = Ensemble2D.from_state(state, device=device)
    again.sweep(3)
    np.testing.assert_array_equal(again.spins(), ens.spins())
    old = dict(state, backend={"sweeps": state["backend"]["sweeps"]})
    legacy = Ensemble2D.from_state(old, device=device)
    legacy.sweep(3)
    want = ref.multispin_sweeps(state["spins"], _thr(2, [2.1, 2.6]), 3, seed=4, sweep=2, spins_per_word=1)
    np.testing.assert_array_equal(legacy.spins(), want)


# --------------------------------------------------------------- blocks
BLOCKS_CASES = [((16, 16), (32, 32), 1.0, 0.0, "auto"), ((32, 16), (64, 32), 1.0, 0.3, "auto"),
                ((128, 16), (256, 32), -1.0, 0.0, "auto"), ((16, 16), (64, 32), 0.0, 0.5, "auto"),
                ((64, 16), (128, 32), 1.0, 0.0, 2)]


@pytest.mark.slow
@pytest.mark.parametrize("tile,shape,J,h,spw", BLOCKS_CASES)
def test_blocks_joint_matches_twin(device, tile, shape, J, h, spw):
    """Blocks with joint decisions against its NumPy twin, bit for bit: narrow
    tiles (a Philox call spans two plane words), one and several words per
    plane row, k = 2, 4, 8, two inner sweeps, counters continued across calls."""
    from clphys.ising.blocks import BlocksBackend, reference_sweeps
    Lx, Ly = shape
    s0 = np.random.default_rng(1).choice(np.array([-1, 1], np.int8), size=(2, Ly, Lx))
    thr = _thr(2, [2.0, 2.8], J, h)
    b = BlocksBackend(device, shape, 2, rng="philox", seed=7, inner_sweeps=2, tile=tile, spins_per_word=spw)
    b.set_spins(s0)
    b.sweep(1, thr)
    b.sweep(2, thr)
    want, _ = reference_sweeps(s0, thr, 3, tile=tile, rng="philox", seed=7, inner_sweeps=2, spins_per_word=spw)
    one, _ = reference_sweeps(s0, thr, 3, tile=tile, rng="philox", seed=7, inner_sweeps=2, spins_per_word=1)
    got = b.spins()
    np.testing.assert_array_equal(got, want)
    assert np.any(got != one) and np.mean(got != s0) > 0.2


def test_blocks_joint_oclgrind(device, oclgrind):
    from clphys.ising.blocks import BlocksBackend
    s0 = np.random.default_rng(3).choice(np.array([-1, 1], np.int8), size=(2, 32, 64))
    out = []
    for dev in (device, oclgrind):
        b = BlocksBackend(dev, (64, 32), 2, rng="philox", seed=5, inner_sweeps=2, tile=(16, 16),
                          spins_per_word="auto")
        b.set_spins(s0)
        b.sweep(1, _thr(2, [2.1, 3.0], 1.0, 0.2))
        out.append(b.spins())
    np.testing.assert_array_equal(out[0], out[1])


@pytest.mark.slow
@pytest.mark.parametrize("inner", [1, 2])
def test_blocks_joint_energy_vs_kaufman(device, inner):
    """Blocks with joint decisions (through Ensemble2D, 16 x 16 tiles): <E>/N
    and C/N on the 32 x 32 torus at T = 2.0 and 2.5, 48 replicas each, within
    4 sigma of Kaufman's values (chi^2_4 < 23.5, p = 1e-4)."""
    L, R, temps = 32, 48, (2.0, 2.5)
    ens = Ensemble2D(L, np.repeat(temps, R), algorithm="blocks", seed=31, device=device,
                     inner_sweeps=inner, spins_per_word="auto")
    assert ens._backend.spins_per_word == "auto"
    s = ens.sample(1200, n_therm=400)
    zs = []
    for i, T in enumerate(temps):
        e = s.energy[i * R:(i + 1) * R]
        m, m2 = e.mean(axis=1), (e * e).mean(axis=1)
        E = jackknife(m, n_blocks=R)
        C = jackknife(np.stack([m, m2]), lambda a: L * L * (a[1] - a[0] ** 2) / T**2, n_blocks=R)
        exact = finite_lattice(L, T)
        zs += [(E.value - exact.energy) / E.error, (C.value - exact.specific_heat) / C.error]
        assert E.error < 1e-3 and C.error < 0.04 * exact.specific_heat
    zs = np.array(zs)
    assert np.all(np.abs(zs) < 4) and np.sum(zs**2) < 23.5, zs


def test_blocks_joint_state_and_options(device):
    """The mode is part of the state; a state without it (older) resumes one
    word per site; halfbit-lcg has no joint mode."""
    from clphys.ising.blocks import BlocksBackend, reference_sweeps
    thr = _thr(2, [2.2])
    s0 = np.random.default_rng(2).choice(np.array([-1, 1], np.int8), size=(1, 32, 32))
    b = BlocksBackend(device, (32, 32), 1, rng="philox", seed=3, spins_per_word="auto")
    b.set_spins(s0)
    b.sweep(2, thr)
    state = b.get_state()
    assert state["spins_per_word"] == "auto"
    old = {k: v for k, v in state.items() if k != "spins_per_word"}
    c = BlocksBackend(device, (32, 32), 1, rng="philox", seed=3, spins_per_word="auto")
    c.set_state(old)
    c.set_spins(b.spins())
    c.sweep(1, thr)
    want, _ = reference_sweeps(b.spins(), thr, 1, tile=c.tile, rng="philox", seed=3, sweeps_done=2,
                               spins_per_word=1)
    np.testing.assert_array_equal(c.spins(), want)
    with pytest.raises(ValueError, match="needs rng='philox'"):
        BlocksBackend(device, (32, 32), 1, rng="halfbit-lcg", seed=3, spins_per_word=4)
    with pytest.raises(ValueError, match="spins_per_word must be one of"):
        BlocksBackend(device, (32, 32), 1, rng="philox", seed=3, spins_per_word=3)


@pytest.mark.parametrize("value", [315331, 246666, 209013, 774474, 154989])
def test_small_probabilities_exact_after_the_repair(value):
    """One level of probability ~5e-5..2e-4 with k = 8: largest remainders and
    exchanges left one spin's acceptance a unit off; the repair makes every
    marginal exact with every count within two units of its exact weight."""
    lay = th.joint_layout(1, 8)
    counts = th.outcome_counts([value], 8)
    assert sum(counts) == 1 << 32 and not np.any(th.marginal_errors([value], lay, counts))
    exact, shift = _exact_counts([value], 8)
    assert all(abs((n << shift) - e) < 2 << shift for n, e in zip(counts, exact))
    assert _realised(th.joint_table(np.array([value], np.uint32), lay), lay)
