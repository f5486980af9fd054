"""Ising kernels bit for bit: device spins against the NumPy twin
(clphys.ising.reference), algorithms against each other, PoCL against
Oclgrind; every template renders for fake devices; every kernel runs on Oclgrind."""

import numpy as np
import pytest

from clphys.ising import Ensemble2D, Ensemble3D, backends
from clphys.ising import reference as ref
from clphys.ising.thresholds import metropolis_thresholds
from clphys.runtime import fake_facts, render

ALGORITHMS = backends.available()
ENSEMBLE = {2: Ensemble2D, 3: Ensemble3D}


def _thr(dim, temps, J=1.0, h=0.0):
    return np.stack([metropolis_thresholds(dim, T, J, h) for T in temps])


def _run(dev, shape, temps, n, *, algorithm, rng="philox", seed=5, J=1.0, h=0.0, **options):
    ens = ENSEMBLE[len(shape)](shape, temps, J=J, h=h, algorithm=algorithm, rng=rng, seed=seed,
                               device=dev, **options)
    start = ens.spins()
    ens.sweep(n)
    return ens, start


def _allowed(algorithm, shape):
    try:
        backends.load(algorithm).check_shape(shape)
        return True
    except ValueError:
        return False


# --------------------------------------------------------------- NumPy twins
@pytest.mark.parametrize("shape,J,h", [((8, 6), 1.0, 0.0), ((6, 4, 4), 1.0, 0.3),
                                       ((10, 4), -0.7, -0.4)])
def test_checkerboard_philox_matches_numpy(device, shape, J, h):
    temps = [1.8, 2.6, 4.5]
    ens, start = _run(device, shape, temps, 3, algorithm="checkerboard", J=J, h=h)
    np.testing.assert_array_equal(start, ref.random_spins(shape, 3, 5))
    want = ref.checkerboard_sweeps(start, _thr(len(shape), temps, J, h), 3, seed=5)
    np.testing.assert_array_equal(ens.spins(), want)
    bond, mag = ens.sums()
    np.testing.assert_array_equal(np.stack([bond, mag]), np.stack(ref.sums(want)))
    assert ens._backend.get_state() == {"sweeps": 3}


@pytest.mark.parametrize("rng", ["lcg", "xorshift32"])
def test_checkerboard_stateful_matches_numpy(device, rng):
    shape, temps = (6, 6), [2.0, 3.0]        # 18 sites per colour: a partial group of 4
    ens, start = _run(device, shape, temps, 4, algorithm="checkerboard", rng=rng)
    want, states = ref.checkerboard_sweeps(start, _thr(2, temps), 4, rng=rng,
                                           states=ref.stateful_states(shape, 2, 5))
    np.testing.assert_array_equal(ens.spins(), want)
    np.testing.assert_array_equal(ens.state()["backend"]["rng_states"], states)
