"""The SDE ensemble engine on every test device: bit-level agreement with
the NumPy twin, exact moments of simple processes, weak orders of the
schemes, checkpoints, precision, histograms, recorded paths and bad input.

Statistical tests use fixed seeds; tolerances are stated in standard errors
(sigma) of the estimate."""

import dataclasses

import numpy as np
import pytest

from clphys import exact
from clphys.sde import Ensemble, EnsembleState, Model, models
from clphys.sde.reference import integrate, philox_normals, xorshift_normals
from conftest import require_fp64

PENDULUM = Model(["x", "v"], {"x": "v", "v": "-gamma*v - sin(x) + a*cos(w*t)"}, {"v": "s"},
                 ["gamma", "s", "a", "w"], name="pendulum")
OU = Model(["v"], {"v": "-gamma*v"}, {"v": "sqrt(2*gamma*kT)"}, ["gamma", "kT"], name="ou")


@pytest.mark.parametrize("rng", ["philox", "xorshift32"])
@pytest.mark.parametrize("scheme", ["euler", "srk2"])
def test_device_matches_numpy_twin(device, rng, scheme):
    """Same Gaussians and same scheme as the NumPy reference, float32 rounding
    apart; the run is split into launches of odd lengths on purpose."""
    n, dt, s = 37, 0.05, np.array([0.3, 1.0])
    ens = Ensemble(PENDULUM, n, {"gamma": 0.5, "s": s, "a": 0.7, "w": 2.0}, dt, scheme=scheme,
                   rng=rng, seed=5, initial={"x": 0.1}, device=device)
    ens.run(steps=7, observables=[])
    ens.run_plan(ens.plan_run(steps=6, observables=[]).with_steps_per_launch(2))
    Z = (philox_normals(5, np.arange(2 * n), 0, 13) if rng == "philox"
         else xorshift_normals(5, 2 * n, 13))
    b = np.zeros((2, 2 * n))
    b[1] = np.repeat(s, n)

    def drift(x, t):
        return np.stack([x[1], -0.5 * x[1] - np.sin(x[0]) + 0.7 * np.cos(2.0 * t)])

    x = np.zeros((2, 2 * n))
    x[0] = 0.1
    t = 0.0
    for k in range(13):
        w = b * Z[:, k] * np.sqrt(dt)
        a = drift(x, t)
        y = x + a * dt + w
        x = x + a * dt + w if scheme == "euler" else x + 0.5 * dt * (a + drift(y, t + dt)) + w
        t += dt
    got = ens.values()
    assert np.abs(got["x"].ravel() - x[0]).max() < 2e-6
    assert np.abs(got["v"].ravel() - x[1]).max() < 2e-6
    assert ens.t == pytest.approx(13 * dt)


def test_forcing_equals_inline_time_dependence(device):
    """A forcing is evaluated once per step and carried over; the result is
    the same as writing the time dependence into the drift."""
    forced = Model(["x", "v"], {"x": "v", "v": "-gamma*v - sin(x) + F"}, {"v": "s"},
                   ["gamma", "s", "a", "w"], forcing={"F": "a*cos(w*t)"}, drive_period="2*M_PI/w")
    inline = Model(["x", "v"], {"x": "v", "v": "-gamma*v - sin(x) + a*cos(w*t)"}, {"v": "s"},
                   ["gamma", "s", "a", "w"], drive_period="2*M_PI/w")
    out = []
    for m in (forced, inline):
        for scheme in ("srk2", "euler"):
            ens = Ensemble(m, 16, {"gamma": 0.5, "s": 0.3, "a": [0.7, 1.5], "w": 2.0}, 0.05,
                           scheme=scheme, seed=2, device=device)
            ens.run_plan(ens.plan_run(steps=30, observables=[]).with_steps_per_launch(7))
            out.append(ens.values()["x"])
    assert np.allclose(out[0], out[2], atol=1e-6) and np.allclose(out[1], out[3], atol=1e-6)
    assert not np.allclose(out[0], out[1], atol=1e-3)       # the schemes do differ
    ens = Ensemble(forced, 4, {"gamma": 0.5, "s": 0.3, "a": 0.7, "w": 2.0}, 0.05, device=device)
    r = ens.run(steps=10, observables=["F", "a*cos(w*t)"])
    assert r.mean["F"] == pytest.approx(r.mean["a*cos(w*t)"]) and r.mean["F"][0] == pytest.approx(0.7 * np.cos(1.0))


def test_integrate_reference_runs():
    """The NumPy integrator used by the benchmark: Euler on dv = -v dt is (1 - dt)^n."""
    x = integrate(lambda x, t: -x, np.ones((1, 3)), np.zeros((1, 1)), 0.1, 10,
                  lambda n: np.zeros((1, 3)), scheme="euler")
    assert x == pytest.approx(0.9 ** 10)


def test_free_brownian_variance(device):
    D = np.array([0.5, 2.0])
    n = 1 << 14
    ens = Ensemble(models.BROWNIAN, n, {"D": D}, 0.01, scheme="euler", seed=1, device=device)
    res = ens.run(1.0, sample_every=25)
    want = np.array([exact.free_brownian_variance(d, res.times) for d in D]).T
    # sample variance of n Gaussians: relative sigma sqrt(2/(n-1))
    sigma = want * np.sqrt(2.0 / (n - 1))
    assert np.all(np.abs(res.var["x"] - want) < 4 * sigma)
    assert np.all(np.abs(res.mean["x"]) < 4 * np.sqrt(want / n))


def test_free_particle_relaxation(device):
    """<v(t)> = v0 e^{-gamma t}, <v^2(t)> = kT + (v0^2 - kT) e^{-2 gamma t}."""
    n, kT = 1 << 13, 0.5
    ens = Ensemble(models.FREE_PARTICLE, n, {"gamma": 1.0, "kT": kT}, 0.01, seed=2,
                   initial={"v": 1.0}, device=device)
    res = ens.run(5.0, sample_every=50, observables=["v", "v*v"])
    v_exact = exact.ou_velocity_mean(1.0, 1.0, res.times)
    v2_exact = exact.ou_velocity_second_moment(1.0, 1.0, kT, res.times)
    assert np.all(np.abs(res.mean["v"] - v_exact) < 4 * res.error("v"))
    assert np.all(np.abs(res.mean["v*v"] - v2_exact) < 4 * res.error("v*v"))
    assert abs(res.mean["v*v"][-1] - kT) < 4 * res.error("v*v")[-1]


def _ou_stationary(scheme, a, kT=1.0):
    """Exact stationary <v^2> of the scheme for dv = -gamma v dt + sqrt(2 gamma kT) dW,
    a = gamma dt: v' = A v + B sqrt(2 a kT) xi."""
    A, B = (1 - a, 1.0) if scheme == "euler" else (1 - a + a * a / 2, 1 - a / 2)
    return 2 * a * kT * B * B / (1 - A * A)


@pytest.mark.parametrize("scheme, order", [("srk2", 2), ("euler", 1)])
def test_weak_order(device, scheme, order):
    """Stationary <v^2> of the OU process at gamma dt = 0.5 and 0.25: the
    simulation matches the scheme's exact discrete-time value (4 sigma), and
    the bias falls ~2^order times when dt halves (4.4 for SRK2, 2.3 for Euler
    at these steps)."""
    n, samples = 1 << 16, 32
    rng = np.random.default_rng(3)
    bias = []
    for a in (0.5, 0.25):
        ens = Ensemble(OU, n, {"gamma": 1.0, "kT": 1.0}, a, scheme=scheme, seed=4,
                       initial={"v": rng.normal(size=n)}, device=device)
        ens.run(5.0, observables=[])
        res = ens.run(5.0 + samples, sample_every=round(1 / a), observables=["v*v"])
        m = res.mean["v*v"]          # samples one relaxation time apart: nearly independent
        est, sigma = m.mean(), m.std(ddof=1) / np.sqrt(len(m))
        want = _ou_stationary(scheme, a)
        assert abs(est - want) < 4 * sigma + 1e-4, (a, est, want, sigma)
        bias.append(est - 1.0)
    ratio = bias[0] / bias[1]
    lo, hi = (3.0, 6.5) if order == 2 else (1.7, 3.0)
    assert lo < ratio < hi, (bias, ratio)


@pytest.mark.parametrize("rng", ["philox", "xorshift32"])
def test_checkpoint_resumes_bit_for_bit(device, rng):
    params = {"gamma": 0.9, "a": [3.0, 4.2], "omega": 4.9, "f": 0.1, "kT": 0.01}
    ens = Ensemble(models.JOSEPHSON, 48, params, 0.0128, rng=rng, seed=11,
                   initial={"x": ("uniform", 0, 1), "v": ("uniform", -2, 2)}, device=device)
    ens.run(steps=33, observables=[])
    st = ens.state()
    a = ens.run(steps=41, sample_every=7, observables=["unwrap(x)"])
    b_ens = Ensemble.from_state(st, device=device)
    b = b_ens.run(steps=41, sample_every=7, observables=["unwrap(x)"])
    va, vb = ens.values(), b_ens.values()
    assert np.array_equal(va["x"], vb["x"]) and np.array_equal(va["v"], vb["v"])
    assert np.array_equal(ens.state().laps, b_ens.state().laps)
    assert np.array_equal(a.mean["unwrap(x)"], b.mean["unwrap(x)"])
    assert b_ens.step == 74
    # the final state seeds a new ensemble (laps folded into x)
    c = Ensemble(models.JOSEPHSON, 48, params, 0.0128, initial=ens.values(unwrap=True), device=device)
    got = c.values(unwrap=True)["x"]
    assert np.allclose(got, ens.values(unwrap=True)["x"], atol=1e-5 * np.abs(got).max())


def test_time_is_kept_modulo_the_drive_period(device):
    """dx = cos(w t) dt from step 10^9 on: float32 time would have no digits
    left for t; modulo the period x follows sin(w t)/w."""
    m = Model(["x"], {"x": "cos(w*t)"}, parameters=["w"], drive_period="2*M_PI/w")
    w, dt = 2.0, np.pi / 2 / 250          # 500 steps per period
    ens = Ensemble(m, 1, {"w": w}, dt, device=device)
    step = 10**9 + 125                                          # t mod T = T/4: phase pi/2
    st = dataclasses.replace(ens.state(), step=step, origin_step=step,
                             time=np.array([np.mod(step * dt, np.pi)], np.float32))
    ens = Ensemble.from_state(st, device=device)
    res = ens.run(steps=500, sample_every=125, observables=["x", "t"])
    t = (10**9 + 125 + np.arange(1, 5) * 125) * dt
    want = (np.sin(w * t) - np.sin(w * t[0] - w * 125 * dt)) / w
    assert np.allclose(res.mean["x"], want, atol=1e-4)
    assert np.allclose(res.mean["t"], np.mod(t, np.pi), atol=1e-4)


def test_float32_and_float64_agree(device):
    require_fp64(device)
    p = {"gamma": 1.0, "kT": 0.5}
    r = {}
    for dtype in ("float32", "float64"):
        ens = Ensemble(models.FREE_PARTICLE, 4096, p, 0.02, dtype=dtype, seed=8, device=device)
        r[dtype] = ens.run(4.0, sample_every=50, observables=["v*v", "x"])
    # the same Gaussians drive both: far closer than the statistical error
    for o in ("v*v", "x"):
        assert np.all(np.abs(r["float32"].mean[o] - r["float64"].mean[o]) < 0.05 * r["float64"].error(o))


def test_fast_math_builds_and_agrees(device):
    p = {"gamma": 0.9, "a": 4.2, "omega": 4.9, "f": 0.1, "kT": 0.001}
    out = []
    for fast in (False, True):
        ens = Ensemble(models.JOSEPHSON, 64, p, 0.0128, fast_math=fast, seed=3,
                       initial={"x": ("uniform", 0, 1)}, device=device)
        ens.run(steps=20, observables=[])
        out.append(ens.values())
    assert np.allclose(out[0]["v"], out[1]["v"], atol=1e-3)


def test_histograms_and_recorded_paths(device):
    n = 4096
    ens = Ensemble(models.BROWNIAN, n, {"D": 0.5}, 0.01, seed=6, device=device)
    res = ens.run(1.0, sample_every=50, histograms={"x": (16, -2.0, 2.0), "x*x": (4, 0.0, 1.0)},
                  record_paths=3)
    counts = res.hist["x"]
    assert counts.shape == (16,) and res.hist_edges["x"][[0, -1]].tolist() == [-2.0, 2.0]
    # samples at t = 0.5 and 1 (variances 0.5 and 1): expected counts per bin
    from math import erf, sqrt
    cdf = lambda x, v: 0.5 * (1 + erf(x / sqrt(2 * v)))
    e = res.hist_edges["x"]
    want = sum(n * np.diff([cdf(x, v) for x in e]) for v in (0.5, 1.0))
    assert np.all(np.abs(counts - want) < 4 * np.sqrt(want) + 1)
    assert res.hist["x*x"].sum() <= 2 * n
    final = ens.values()["x"]
    assert res.paths["x"].shape == (2, 3)
    assert np.array_equal(res.paths["x"][-1], final[:3])


def test_periodic_unwrap_and_reset_laps(device):
    m = Model(["x"], {"x": "c"}, parameters=["c"], periodic={"x": 0.5})
    ens = Ensemble(m, 4, {"c": [1.0, -1.0]}, 0.01, device=device)
    res = ens.run(steps=300, sample_every=150, observables=["x", "unwrap(x)"], record_paths=1)
    assert np.allclose(res.mean["unwrap(x)"][-1], [3.0, -3.0], atol=1e-4)
    assert np.all((res.mean["x"] >= 0) & (res.mean["x"] < 0.5))
    assert np.allclose(res.paths["x"][:, :, 0], [[1.5, -1.5], [3.0, -3.0]], atol=1e-4)
    ens.reset_laps()
    assert np.allclose(ens.values(unwrap=True)["x"], ens.values()["x"])


def test_grid_axes_and_zipped_sweeps(device):
    m = Model(["x"], {"x": "a + 10*b + 100*c"}, parameters=["a", "b", "c"])
    ens = Ensemble(m, 2, {"c": [1.0, 2.0, 3.0], ("a", "b"): ([1.0, 2.0], [3.0, 4.0])}, 1.0,
                   device=device)
    assert ens.grid_shape == (3, 2)
    res = ens.run(steps=1)
    want = 100 * np.array([1.0, 2.0, 3.0])[:, None] + np.array([31.0, 42.0])[None, :]
    assert np.allclose(res.mean["x"][0], want)
    assert np.allclose(ens.grid["b"], [[3, 4]] * 3)


def test_bad_input(device, monkeypatch):
    p = {"gamma": 1.0, "kT": 1.0}
    E = lambda **kw: Ensemble(**{**dict(model=models.FREE_PARTICLE, n_paths=8, params=p, dt=0.1,
                                        device=device), **kw})
    cases = [
        (dict(model="x"), TypeError, "Model"),
        (dict(n_paths=0), ValueError, "n_paths must be >= 1"),
        (dict(dt=0.0), ValueError, "dt must be > 0"),
        (dict(dt=-1.0), ValueError, "dt must be > 0"),
        (dict(dt=np.nan), ValueError, "dt must be finite"),
        (dict(params={"gamma": 1.0}), ValueError, "no value for 'kT'"),
        (dict(params={**p, "gama": 1.0}), ValueError, "not a parameter"),
        (dict(params={**p, "kT": np.nan}), ValueError, "non-finite"),
        (dict(params={**p, "kT": [1.0, np.inf]}), ValueError, "non-finite"),
        (dict(params={**p, "kT": [[1.0]]}), ValueError, "1-D"),
        (dict(params={**p, "kT": []}), ValueError, "empty"),
        (dict(params={"gamma": 1.0, ("kT",): ([1.0, 2.0],), ("gamma",): ([1.0],)}), ValueError, "twice"),
        (dict(params={("gamma", "kT"): ([1.0, 2.0], [1.0, 2.0, 3.0])}), ValueError,
         "mismatched parameter array lengths"),
        (dict(scheme="rk4"), ValueError, "scheme"),
        (dict(rng="mt"), ValueError, "rng"),
        (dict(dtype="float16"), ValueError, "dtype"),
        (dict(seed=-1), ValueError, "seed"),
        (dict(work_group_size=3), ValueError, "power of two"),
        (dict(initial={"y": 1.0}), ValueError, "not a variable"),
        (dict(initial={"v": np.ones(3)}), ValueError, "does not broadcast"),
        (dict(initial={"v": ("uniform", 1.0, 0.0)}), ValueError, "low < high"),
        (dict(model=models.JOSEPHSON, params={"gamma": 1, "a": 1, "omega": [1.0, 0.0], "f": 0, "kT": 1}),
         ValueError, "drive_period"),
        (dict(n_paths=2**20, params={"gamma": 1.0, "kT": np.ones(2**12)}), ValueError, r"2\^32"),
    ]
    for kw, exc, what in cases:
        with pytest.raises(exc, match=what):
            E(**kw)
    # a grid too large for the device: the message says how large it would be
    big = Model([f"x{i}" for i in range(16)], {}, parameters=["c"])
    n = int(2 * device.facts.global_mem / (16 * 8)) // 1024 + 1
    with pytest.raises(ValueError, match=r"ensemble of \d+ paths x 1024 grid points needs [0-9.]+ GiB"):
        Ensemble(big, n, {"c": np.ones(1024)}, 0.1, dtype="float32", device=device)
    # float64 where the device has no fp64
    monkeypatch.setattr(device, "facts", dataclasses.replace(device.facts, fp64=False))
    with pytest.raises(ValueError, match="needs fp64"):
        E(dtype="float64")
    monkeypatch.undo()

    ens = E()
    run_cases = [
        (dict(t_end=0.0), ValueError, "later than"),
        (dict(), ValueError, "exactly one"),
        (dict(t_end=1.0, steps=3), ValueError, "exactly one"),
        (dict(steps=3, sample_every=0), ValueError, "sample_every"),
        (dict(steps=3, observables=["vv"]), ValueError, "unknown name 'vv'"),
        (dict(steps=3, observables="v"), TypeError, "list"),
        (dict(steps=3, histograms={"v": (0, 0, 1)}), ValueError, "bins"),
        (dict(steps=3, histograms={"v": (4, 1, 0)}), ValueError, "low must be < high"),
        (dict(steps=3, histograms={"v": 4}), ValueError, r"\(bins, low, high\)"),
        (dict(steps=3, record_paths=9), ValueError, "record_paths"),
    ]
    for kw, exc, what in run_cases:
        with pytest.raises(exc, match=what):
            ens.run(**kw)
    assert ens.step == 0
    with pytest.raises(TypeError, match="EnsembleState"):
        Ensemble.from_state({"step": 1})
    assert isinstance(ens.state(), EnsembleState)


def test_run_local_is_run_and_refuses_unknown_keywords(device):
    """run_local then finish records what run records, bit for bit; a misspelt
    keyword raises TypeError before any step instead of being dropped."""
    def ensemble():
        return Ensemble(models.FREE_PARTICLE, 8, {"gamma": [0.5, 1.0], "kT": 1.0}, 0.1, seed=3, device=device)
    kw = {"steps": 6, "sample_every": 2, "observables": ["v", "x*x"], "histograms": {"v": (4, -2.0, 2.0)},
          "record_paths": 2}
    a, b = ensemble(), ensemble()
    whole = a.run(**kw)
    local = b.finish(b.run_local(**kw))
    assert whole is not None and local is not None
    np.testing.assert_array_equal(local.times, whole.times)
    for got, want in ((local.mean, whole.mean), (local.var, whole.var), (local.hist, whole.hist),
                      (local.paths, whole.paths)):
        assert sorted(got) == sorted(want)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
    with pytest.raises(TypeError, match="sample_evry"):
        b.run_local(steps=3, sample_evry=1)
    assert b.step == 6


def test_steps_per_launch_is_the_plans(device):
    """The steps per kernel launch are an internal choice of the run's plan (tests
    and benchmarks), not an argument of run(); the plan checks them."""
    ens = Ensemble(models.FREE_PARTICLE, 8, {"gamma": 1.0, "kT": 1.0}, 0.1, seed=3, device=device)
    with pytest.raises(TypeError, match="steps_per_launch"):
        ens.run(steps=3, steps_per_launch=2)
    plan = ens.plan_run(steps=3, observables=["v"])
    with pytest.raises(ValueError, match="steps_per_launch must be >= 1"):
        plan.with_steps_per_launch(0)
    assert plan.with_steps_per_launch(2).spl == 2 and ens.step == 0


def test_diverged_paths_warn_without_a_parameter_sweep(device):
    """Paths that run off to inf warn and are marked in RunResult.diverged, on a
    grid of one point (no swept parameter) as on a sweep."""
    for gamma, shape in ((-1e21, ()), ([1.0, -1e21], (2,))):
        ens = Ensemble(models.FREE_PARTICLE, 4, {"gamma": gamma, "kT": 1.0}, 0.1, scheme="euler", seed=1,
                       device=device)
        with pytest.warns(RuntimeWarning, match="paths diverged"):
            res = ens.run(steps=3)
        assert res is not None and res.diverged.shape == shape
        np.testing.assert_array_equal(res.diverged, np.array(gamma) < 0)
