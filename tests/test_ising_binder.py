"""Binder-cumulant scans: the U4 curves of consecutive sizes cross at the
known critical temperature (2D exact, 3D Ferrenberg-Xu-Landau), with errors."""

import math
import warnings

import numpy as np
import pytest

from clphys.exact import TC_2D, TC_3D
from clphys.ising import BinderScan, binder_scan
from clphys.stats import Estimate


def _check_crossings(scan, tc, allowance):
    for c in scan.crossings:
        t = c.temperature
        assert c.status == "ok" and math.isfinite(t.value) and 0 < t.error < 0.05, c
        # small sizes shift the crossing by corrections to scaling: allowance
        assert abs(t.value - tc) < 4 * t.error + allowance, (c, tc)
    # the curves are ordered oppositely at the two ends: they cross in between
    du = scan.binder[1:] - scan.binder[:-1]
    err = np.hypot(scan.binder_err[1:], scan.binder_err[:-1])
    assert np.all(du[:, 0] > 2 * err[:, 0]) and np.all(du[:, -1] < -2 * err[:, -1])
    assert scan.crossing == scan.crossings[-1].temperature


@pytest.mark.slow
def test_binder_crossing_2d(device):
    scan = binder_scan([8, 16, 32], np.linspace(2.15, 2.40, 6), dim=2, n_measure=1200, n_therm=1200,
                       every=3, replicas=16, seed=3, device=device)
    assert scan.n_therm == 1200 and scan.n_blocks >= 16 and scan.pieces == (1, 1, 1)
    assert np.all(scan.tau_int[2, 2:4] > scan.tau_int[0, 2:4])      # slower near Tc for larger L
    _check_crossings(scan, TC_2D, 0.015)
    assert scan.binder.shape == scan.susceptibility.shape == (3, 6)
    # susceptibility grows with L near Tc; C/N stays O(1) (log divergence)
    assert np.all(scan.susceptibility[2, 2:4] > 2 * scan.susceptibility[0, 2:4])
    assert np.all((scan.specific_heat > 0.5) & (scan.specific_heat < 2.5))
    text = str(scan)
    assert "U4 crossing L=8/16" in text and "L=16/32" in text and "Tc = 2.269185" in text
    assert len(text.splitlines()) == 2 + 18 + 3 + len(scan.warnings)


@pytest.mark.slow
def test_binder_crossing_3d(device):
    scan = binder_scan([8, 16], np.linspace(4.42, 4.60, 6), dim=3, n_therm=600, n_measure=600,
                       every=2, replicas=8, seed=2, device=device)
    _check_crossings(scan, TC_3D, 0.02)
    assert "3D" in str(scan) and "Tc = 4.511523" in str(scan)


def test_binder_warns_when_not_thermalised(device):
    """No thermalisation from the ordered start at T = 3 (L = 64: |m| relaxes
    from 1 to ~0.05 during the measurement): flagged; 100 sweeps suffice."""
    from clphys.ising.samples import NotEquilibratedWarning
    kw = dict(n_measure=200, every=1, replicas=16, seed=1, device=device)
    with pytest.warns(NotEquilibratedWarning, match=r"not in equilibrium at L=64 T=2.9, L=64 T=3:"):
        scan = binder_scan([32, 64], [2.9, 3.0], n_therm=0, **kw)
    assert any("not in equilibrium" in w for w in scan.warnings)
    assert "warning: not in equilibrium" in str(scan)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotEquilibratedWarning)
        scan = binder_scan([32, 64], [2.9, 3.0], n_therm=100, **kw)
    assert not any("not in equilibrium" in w for w in scan.warnings)


def test_binder_scan_validation():
    with pytest.raises(ValueError, match="at least 2 lattice sizes"):
        binder_scan([16], [2.2, 2.3], device="nowhere")
    with pytest.raises(ValueError, match="at least 2 different sizes"):
        binder_scan([16, 16], [2.2, 2.3], device="nowhere")
    with pytest.raises(ValueError, match="Lx = 12 is not allowed"):
        binder_scan([8, 12], [2.2, 2.3], device="nowhere")
    with pytest.raises(ValueError, match="at least 2 values"):
        binder_scan([8, 16], [2.2], device="nowhere")
    with pytest.raises(ValueError, match="non-finite"):
        binder_scan([8, 16], [2.2, float("nan")], device="nowhere")
    with pytest.raises(ValueError, match="n_measure must be >= 32"):
        binder_scan([8, 16], [2.2, 2.3], n_measure=10, device="nowhere")
    with pytest.raises(ValueError, match="dim must be one of"):
        binder_scan([8, 16], [2.2, 2.3], dim=4, device="nowhere")
    with pytest.raises(ValueError, match="accepts rng"):
        binder_scan([8, 16], [2.2, 2.3], rng="lcg", device="nowhere")


def test_crossing_fit_and_estimate_text():
    from clphys.ising.binder import crossing_of
    T = np.linspace(2.0, 2.5, 6)
    du = 0.3 * (2.27 - T) + 0.5 * (T - 2.27) ** 2          # root at 2.27
    deleted = du[:, None] + 1e-4 * np.tile([1.0, -1.0], (6, 8))
    c = crossing_of(T, du, deleted, (8, 16))
    assert c.status == "ok" and c.temperature.value == pytest.approx(2.27, abs=1e-12)
    assert crossing_of(T, np.ones(6), 1 + deleted - du[:, None], (8, 16)).status == "none"
    assert str(Estimate(2.2712, 0.0025)) == "2.2712(25)"
    assert BinderScan.__dataclass_params__.frozen
