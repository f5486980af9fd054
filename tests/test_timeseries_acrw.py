"""The anti-correlated random walk: bit-exact against its NumPy twin and across
devices, and its exact moments (clphys.exact.timeseries) within 3 sigma."""

import numpy as np
import pytest

from clphys.exact.timeseries import acrw_increment_autocorrelation, acrw_msd
from clphys.timeseries import acrw, acrw_numpy, autocorrelation, hurst
from clphys.timeseries.acrw import BLOCK, acrw_thresholds


@pytest.mark.parametrize("n, phi, seed", [(1, 0.044, 0), (BLOCK + 1, 0.044, 7),
                                          (3 * BLOCK - 5, 0.5, 2**64 - 1), (777, 0.0, 3)])
def test_bit_exact_twin(device, n, phi, seed):
    p = acrw(n, phi, seed=seed, device=device)
    assert p.dtype == np.int64 and p.shape == (n,)
    np.testing.assert_array_equal(p, acrw_numpy(n, phi, seed=seed))


def test_walk_structure():
    """b(t) in {0, 1}; a(t) steps by -1, 0, +1; φ = 0 leaves a = 0; φ = 1/2 never rests."""
    p = acrw_numpy(5000, 0.0, seed=1)
    assert set(np.unique(p)) == {0, 1}
    p = acrw_numpy(5000, 0.5, seed=1)
    assert set(np.unique(np.diff(p))) <= {-2, -1, 0, 1, 2}
    assert acrw_thresholds(0.5) == (2**31, 2**32)       # every word gives ±1
    assert acrw_thresholds(0.044) == (round(0.044 * 2**32), 2 * round(0.044 * 2**32))
    assert not np.array_equal(acrw_numpy(100, 0.2, seed=1), acrw_numpy(100, 0.2, seed=2))


@pytest.mark.oclgrind
def test_oclgrind_matches_device(oclgrind, device):
    n = 2 * BLOCK + 37                         # three blocks, the last partial
    a = acrw(n, 0.044, seed=5, device=oclgrind)
    np.testing.assert_array_equal(a, acrw(n, 0.044, seed=5, device=device))
    np.testing.assert_array_equal(a, acrw_numpy(n, 0.044, seed=5))


@pytest.mark.parametrize("phi", [0.044, 0.2])
def test_increment_autocorrelation(device, phi):
    """ρ(1) = -1/(2(1 + 4φ)) (-0.425 at φ = 0.044, the Bund future) and ρ(k >= 2) = 0,
    each within 3 sigma; sigma from 64 independent batches of the same series."""
    n, batches, lags = 2**21, 64, 4
    x = np.diff(acrw(n + 1, phi, seed=11, device=device))
    rho = autocorrelation(x, lags, device=device).rho
    per_batch = np.array([[np.corrcoef(b[:-k], b[k:])[0, 1] for k in range(1, lags + 1)]
                          for b in x.reshape(batches, -1)])
    sigma = per_batch.std(axis=0, ddof=1) / np.sqrt(batches)
    exact = acrw_increment_autocorrelation(phi, np.arange(1, lags + 1))
    assert np.all(np.abs(rho[1:] - exact) < 3 * sigma), (rho[1:], exact, sigma)
    assert np.all(sigma < 2e-3)                 # the test has teeth


@pytest.mark.slow
def test_mean_squared_displacement(device):
    """⟨(p(t+Δt) - p(t))²⟩ = 2φΔt + 1/2: S_2(Δt)² of hurst(q=2), within 3 sigma from
    independent series.  H(Δt) is anti-persistent (< 1/2) at short lags, where the
    bid-ask-like b(t) dominates, and approaches the random walk's 1/2 at long lags."""
    phi, n, reps = 0.044, 100_001, 16
    lags = np.array([1, 2, 5, 20, 100, 400])
    msd = np.array([hurst(acrw(n, phi, seed=s, device=device), 400, q=2, device=device).S ** 2
                    for s in range(reps)])[:, lags - 1]
    mean, sigma = msd.mean(axis=0), msd.std(axis=0, ddof=1) / np.sqrt(reps)
    exact = acrw_msd(phi, lags)
    assert np.all(np.abs(mean - exact) < 3 * sigma), (mean, exact, sigma)
    assert np.all(sigma < 0.03 * exact)
    h = hurst(acrw(n, phi, seed=99, device=device), 400, device=device).H
    assert abs(np.mean(h[300:]) - 0.5) < 0.05 and np.mean(h[1:10]) < 0.35


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(n=0, phi=0.1), ValueError, "n must be >= 1"),
    (dict(n=10, phi=-0.01), ValueError, "phi must be >= 0"),
    (dict(n=10, phi=0.51), ValueError, "phi must be <= 0.5"),
    (dict(n=10, phi=float("nan")), ValueError, "phi must be finite"),
    (dict(n=10, phi=0.1, seed=-1), ValueError, "seed"),
    (dict(n=2.0, phi=0.1), TypeError, "n must be an integer"),
])
def test_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        acrw(device="no-such-device", **kwargs)
    with pytest.raises(exc, match=match):
        acrw_numpy(**kwargs)
