"""The period-2 trap of the checkerboard Metropolis update on tiny lattices
(issue 10): every spin of a colour with dE <= 0 flips with probability 1, so
a few states cycle forever. Enumerated exactly; a trapped replica is found
by sample() and reported (TrappedWarning, Samples.trapped)."""

import warnings

import numpy as np
import pytest

from clphys.ising import Ensemble2D
from clphys.ising import reference as ref
from clphys.ising.samples import TrappedWarning
from clphys.ising.thresholds import metropolis_thresholds


def _all_states(shape):
    n = shape[0] * shape[1]
    bits = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
    return (1 - 2 * bits.astype(np.int8)).reshape((-1, shape[1], shape[0]))


def _traps(shape, T, J, h):
    spins = _all_states(shape)
    thr = np.broadcast_to(metropolis_thresholds(2, T, J, h), (len(spins), 2, 5))
    return spins[ref.trapped(spins, thr)]


@pytest.mark.parametrize("T", [1.0, 2.0, 2.269, 50.0])
@pytest.mark.parametrize("J", [1.0, -1.0])
def test_trap_states_of_the_4x4_and_8x2_tori(T, J):
    """h = 0: 36 trap states on 4x4 and 4 on 8x2 at every T, all with E = 0
    and M = 0 (a trapped replica's measurements are constant). The points of
    the enumeration tests (J, h) = (1, 0.4), (-1, 0.6) have none, so those
    tests cannot be caught by a trap."""
    for shape, count in (((4, 4), 36), ((8, 2), 4)):
        traps = _traps(shape, T, J, 0.0)
        assert len(traps) == count
        bond, mag = ref.sums(traps)
        assert np.all(bond == 0) and np.all(mag == 0)
        # a trap state returns after two sweeps whatever the random words
        thr = np.broadcast_to(metropolis_thresholds(2, T, J, 0.0), (len(traps), 2, 5))
        again = ref.checkerboard_sweeps(traps, thr, 2, seed=3)
        np.testing.assert_array_equal(again, traps)
    for J, h in ((1.0, 0.4), (-1.0, 0.6)):
        assert len(_traps((4, 4), 2.0, J, h)) == 0 and len(_traps((8, 2), 2.0, J, h)) == 0


@pytest.mark.parametrize("algorithm,shape", [("checkerboard", (4, 4)), ("multispin", (8, 2))])
def test_trapped_replica_is_found_and_reported(device, algorithm, shape):
    """Replica 1 starts in a trap, replica 2 is frozen (ordered at T = 0.3,
    also an exactly periodic series, but not a trap), replica 0 is thermal."""
    trap = _traps(shape, 2.0, 1.0, 0.0)[0]
    ens = Ensemble2D(shape, [2.0, 2.0, 0.3], algorithm=algorithm, seed=1, device=device)
    start = ens.spins()
    start[1], start[2] = trap, 1
    ens.set_spins(start)
    with pytest.warns(TrappedWarning, match=r"1 of 3 replicas \(replica 1\) are trapped"):
        s = ens.sample(64, n_therm=16)
    np.testing.assert_array_equal(s.trapped, [False, True, False])
    assert np.all(s.energy[1] == 0) and np.all(s.magnetization[1] == 0)
    assert np.all(s.energy[2] == -2.0)
    # no warning when nothing is trapped
    ens.set_spins(np.ones(tuple(reversed(shape)), np.int8))
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrappedWarning)
        s = ens.sample(16, n_therm=0)
    assert not s.trapped.any()


def test_single_lattice_reports_a_trap(device):
    from clphys.ising import Ising2D
    lat = Ising2D((4, 4), 2.0, algorithm="checkerboard", device=device)
    lat.set_spins(_traps((4, 4), 2.0, 1.0, 0.0)[5])
    with pytest.warns(TrappedWarning):
        s = lat.sample(20, n_therm=0)
    assert s.trapped is True and s.energy.std() == 0
