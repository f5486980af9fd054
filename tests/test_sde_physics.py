"""Physics of the built-in SDE models against exact results (fixed seeds,
tolerances in standard errors)."""

import numpy as np
import pytest

from clphys import exact
from clphys.sde import Ensemble, josephson, models


def test_josephson_equilibrium(device):
    """a = f = 0: Boltzmann equilibrium in V = sin(2 pi x): <v^2> = kT and
    <sin 2 pi x> = -I1(1/kT)/I0(1/kT). kT = 0.5 thermalizes within a few 1/gamma."""
    kT, n = 0.5, 4096
    p = {"gamma": 1.0, "a": 0.0, "omega": 1.0, "f": 0.0, "kT": kT}
    ens = Ensemble(models.JOSEPHSON, n, p, 0.02, seed=21,
                   initial={"x": ("uniform", 0, 1), "v": ("uniform", -1, 1)}, device=device)
    ens.run(6.0, observables=[])
    res = ens.run(12.0, sample_every=25, observables=["v*v", "sin(2*M_PI_F*x)"])
    # 12 samples over ~6 relaxation times: count them as 3 independent ones
    for name, want in (("v*v", kT), ("sin(2*M_PI_F*x)", exact.washboard_stationary_sin_mean(kT))):
        est = res.mean[name].mean()
        sigma = res.error(name).mean() / np.sqrt(3)
        assert abs(est - want) < 4 * sigma, (name, est, want, sigma)


def test_josephson_zero_bias_has_no_drift(device):
    """f = 0: x -> 1/2 - x with t -> t + T/2 maps the model onto itself, so
    <<v>> = 0 for any drive amplitude."""
    res = josephson(a=[1.0, 4.2], f=0.0, kT=0.05, n_paths=256, periods=40, transient=10,
                    steps_per_period=50, seed=3, device=device)
    assert res.v.shape == (2,)
    assert np.all(np.abs(res.v) < 4 * res.v_err + 1e-3), (res.v, res.v_err)


def test_josephson_large_bias_runs_freely(device):
    """Large f: the washboard averages out, <<v>> = f/gamma (corrections ~ (gamma/f)^3)."""
    f, gamma = 10.0, 0.9
    res = josephson(a=0.0, f=f, kT=0.01, gamma=gamma, n_paths=128, periods=20, transient=5,
                    steps_per_period=400, seed=4, device=device)
    assert float(res.v) == pytest.approx(f / gamma, rel=2e-3)
    assert res.density is None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_josephson_huge_bias_right_or_refused(device, dtype):
    """Up to the lap counter's range <<v>> is f/gamma (1e6 and 1e8 here: the transient's
    start values leave a deficit of ~2e-4); beyond it (f = 1e9 over 20 periods, 1e12)
    a ValueError gives the largest f (before, -5.58e6 +- 0 and 0 +- 0 came back)."""
    if dtype == "float64" and not device.facts.fp64:
        pytest.skip(f"{device.name} has no fp64")
    for f in (1e6, 1e8):
        res = josephson(f=f, n_paths=64, periods=20, dtype=dtype, seed=2, device=device)
        assert float(res.v) == pytest.approx(f / 0.9, rel=1e-3), (f, res.v)
    for f in (1e9, 1e12):
        with pytest.raises(ValueError, match=r"lap counter.*\|f\| <= 1.005e\+08"):
            josephson(f=f, n_paths=64, periods=20, dtype=dtype, device=device)
    with pytest.raises(ValueError, match=r"\|f\| <= 1999 "):       # a long run: a smaller f
        josephson(f=1e6, n_paths=64, periods=10**6, dtype=dtype, device=device)


def test_overdamped_tilted_washboard_velocity(device):
    """gamma dx = (f - V'(x)) dt + sqrt(2 gamma kT) dW against the exact
    Stratonovich formula, from the displacement over t = 8."""
    n, kT, f, T = 2048, 1.0, 3.0, 8.0
    ens = Ensemble(models.OVERDAMPED_WASHBOARD, n, {"gamma": 1.0, "V0": 1.0, "f": f, "kT": kT},
                   0.004, seed=5, initial={"x": ("uniform", 0, 1)}, device=device)
    ens.run(1.0, observables=[])
    ens.set_origin()
    res = ens.run(1.0 + T, observables=["displacement(x)"])
    v = res.mean["displacement(x)"][-1] / T          # each path from its own x(1)
    sigma = res.error("displacement(x)")[-1] / T
    want = exact.overdamped_tilted_washboard_velocity(f, kT)
    assert abs(v - want) < 4 * sigma, (v, want, sigma)
