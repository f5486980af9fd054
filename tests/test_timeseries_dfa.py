"""dfa() and mfdfa() against the float64 NumPy reference on every test device, for every
detrending order, segmentation (forward, both, sliding), profile choice, accumulator and
dtype; batches; q = 0 and zero-variance segments; bad input; pandas input; Oclgrind; the
template's renders; the Gram polynomials and default scales."""

import itertools
import re
import warnings

import numpy as np
import pytest

from clphys.runtime import fake_facts, render
from clphys.timeseries import ZeroVarianceWarning, _ingest, dfa, mfdfa
from clphys.timeseries._dfa_device import DFAPlan, frame_exponent, gram_coefficients
from clphys.timeseries._dfa_finish import fluctuation_errors, fluctuations
from clphys.timeseries.dfa import DEFAULT_Q, default_scales
from clphys.timeseries.reference import dfa_fluctuations_numpy, mfdfa_numpy
from timeseries_plans import mfdfa_with

# Segments of up to 256 values go by one work item each, longer ones from block channels
# (non-overlapping) or runs (sliding): both paths in every case.
SCALES = np.array([6, 17, 64, 256, 301, 600])
QS = np.array([-3.0, -0.5, 0.0, 1.0, 2.0, 4.0])
MODES = [("forward", False), ("both", False), (None, True)]


def _series(n=1400, seed=0):
    """Noise with some memory (the profile of an AR(1)), on an offset."""
    rng = np.random.default_rng(seed)
    e = rng.standard_normal(n)
    x = np.empty(n)
    x[0] = e[0]
    for t in range(1, n):
        x[t] = 0.6 * x[t - 1] + e[t]
    return 5.0 + x


def _accs(dev):
    return ["compensated"] + (["double"] if dev.facts.fp64 else [])


# relative tolerances of F_q against the float64 reference (the profile of order 4 fits
# loses digits in the one-pass residual: see docs)
TOL = {"double": 1e-9, "compensated": 3e-6}


@pytest.mark.parametrize("segments,overlap", MODES, ids=["forward", "both", "sliding"])
@pytest.mark.parametrize("order", range(5))
def test_matches_reference(device, segments, overlap, order):
    x = _series()
    for integrate in (True, False):
        values = x if integrate else np.cumsum(x - 5.0)
        for acc in _accs(device):
            ref = mfdfa_numpy(values, SCALES, QS, order, segments or "forward", overlap,
                              integrate, accumulate=acc)
            m = mfdfa_with(values, q=QS, scales=SCALES, order=order, overlap=overlap,
                      integrate=integrate, segments=segments, device=device, accumulate=acc)
            np.testing.assert_allclose(m.Fq, ref.Fq, rtol=TOL[acc] * (30 if order == 4 else 1),
                                       err_msg=f"{acc} integrate={integrate}")
            # the errors: differences of group values, good to the values' precision
            err = fluctuation_errors(ref.Fq, ref.Fq_jack)
            slack = 1e-4 * err + 30 * TOL[acc] * (30 if order == 4 else 1) * ref.Fq
            assert np.all(np.abs(m.Fq_err - err) <= slack), f"{acc} integrate={integrate}"
            np.testing.assert_array_equal(m.segment_counts, ref.counts)
            np.testing.assert_array_equal(m.zero_segments, ref.zeros)


def test_float32_input(device):
    x = _series(900).astype(np.float32)
    ref = mfdfa_numpy(x.astype(np.float64), SCALES[:4], QS, 2)
    for acc in _accs(device):
        m = mfdfa_with(x, q=QS, scales=SCALES[:4], device=device, accumulate=acc)
        np.testing.assert_allclose(m.Fq, ref.Fq, rtol=TOL[acc])
    r = dfa(x, scales=SCALES[:4], device=device)
    np.testing.assert_allclose(r.F, mfdfa_numpy(x.astype(np.float64), SCALES[:4], [2.0], 1).Fq[0],
                               rtol=3e-6)


def test_dfa_is_q2_and_slope(device):
    x = _series(3000, seed=3)
    r = dfa(x, device=device)
    assert np.array_equal(r.scales, default_scales(3000))
    ref = mfdfa_numpy(x, r.scales, [2.0], 1).Fq[0]
    np.testing.assert_allclose(r.F, ref, rtol=1e-6)
    H = np.polyfit(np.log(r.scales), np.log(ref), 1)[0]
    assert r.H == pytest.approx(H, abs=1e-6)
    assert r.fit_range == (10, 640) and r.segments == "forward" and r.order == 1
    part = dfa(x, fit_range=(20, 400), device=device)
    assert part.fit_range == (20, 320)
    sel = (r.scales >= 20) & (r.scales <= 320)
    assert part.H == pytest.approx(np.polyfit(np.log(r.scales[sel]), np.log(ref[sel]), 1)[0],
                                   abs=1e-6)


def test_scale_invariance_and_offsets(device):
    """F scales with x (by 2^k exactly up to the float32 pairs), H does not; an offset of
    x changes nothing (the mean is taken out) nor does one of the profile (order >= 0)."""
    x = _series(2000, seed=5)
    base = dfa(x, device=device)
    for k in (-300, 40, 900):
        r = dfa(np.ldexp(x, k), device=device)
        np.testing.assert_allclose(r.F, np.ldexp(base.F, k), rtol=1e-12)
        assert r.H == pytest.approx(base.H, abs=1e-12)
    np.testing.assert_allclose(dfa(x + 1e6, device=device).F, base.F, rtol=1e-6)
    prof = np.cumsum(x - x.mean())
    np.testing.assert_allclose(dfa(prof + 3e5, integrate=False, device=device).F, base.F,
                               rtol=1e-7)


def test_batch_equals_each_series(device):
    rng = np.random.default_rng(7)
    X = rng.standard_normal((3, 1500)).cumsum(axis=1) * 0.01 + rng.standard_normal((3, 1500))
    sc = np.array([8, 40, 300])
    m = mfdfa(X, q=QS, scales=sc, order=1, device=device)
    assert m.Fq.shape == (3, QS.size, 3) and m.h.shape == (3, QS.size)
    parts = [X[0], X[1][:1100], X[2][:700]]
    ml = mfdfa(parts, q=QS, scales=sc, order=1, device=device)
    for i in range(3):
        one = mfdfa(X[i], q=QS, scales=sc, order=1, device=device)
        np.testing.assert_array_equal(m.Fq[i], one.Fq)
        np.testing.assert_array_equal(m.h_err[i], one.h_err)
        np.testing.assert_array_equal(ml.Fq[i], mfdfa(parts[i], q=QS, scales=sc, order=1,
                                                      device=device).Fq)
    r = dfa(X, scales=sc, overlap=True, device=device)
    assert r.F.shape == (3, 3) and r.H.shape == (3,)
    np.testing.assert_array_equal(r.F[1], dfa(X[1], scales=sc, overlap=True, device=device).F)


def test_zero_variance_segments(device):
    """A flat stretch of the profile (constant increments): its segments have F^2 = 0,
    are counted, left out of q <= 0 with a warning, and kept (as zeros) for q > 0."""
    x = _series(1200, seed=11)
    x[300:700] = 2.5                               # the profile is a straight line there
    sc = np.array([10, 40, 100])
    for acc in _accs(device):
        ref = mfdfa_numpy(x, sc, QS, 1, accumulate=acc)
        assert ref.zeros.min() > 0
        with pytest.warns(ZeroVarianceWarning, match="zero variance"):
            m = mfdfa_with(x, q=QS, scales=sc, order=1, device=device, accumulate=acc)
        np.testing.assert_array_equal(m.zero_segments, ref.zeros)
        assert np.all(np.isfinite(m.Fq)) and np.all(np.isfinite(m.h))
        np.testing.assert_allclose(m.Fq, ref.Fq, rtol=TOL[acc])
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # q > 0 only: nothing left out, no warning
        mfdfa(x, q=[1.0, 2.0], scales=sc, order=1, device=device)


def test_constant_series_is_nan_with_warning(device):
    with pytest.warns(RuntimeWarning):
        r = dfa(np.full(500, 3.0), scales=[10, 50], device=device)
    assert np.all(r.F == 0) and np.isnan(r.H)


def test_spectrum_from_tau(device):
    x = _series(4000, seed=2)
    m = mfdfa(x, device=device)
    assert np.array_equal(m.q, np.array(DEFAULT_Q))
    np.testing.assert_allclose(m.tau, m.q * m.h - 1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(m.alpha, np.gradient(m.tau, m.q), atol=1e-12)
    np.testing.assert_allclose(m.f_alpha, m.q * m.alpha - m.tau, atol=1e-12)
    assert m.tau_err[m.q == 0] == 0 and np.all(m.h_err > 0)
    one = mfdfa(x, q=2.0, device=device)
    assert np.isnan(one.alpha).all() and one.h[0] == pytest.approx(dfa(x, order=2,
                                                                        device=device).H)


@pytest.mark.parametrize("kwargs,err,match", [
    (dict(order=5), ValueError, "order"),
    (dict(order=1.5), TypeError, "order"),
    (dict(scales=[20, 10]), ValueError, "strictly increasing"),
    (dict(scales=[2, 10]), ValueError, "order \\+ 2"),
    (dict(scales=[10, 5000]), ValueError, "shortest"),
    (dict(scales=[10]), ValueError, "at least two"),
    (dict(scales=[10.5, 20]), TypeError, "integers"),
    (dict(segments="backward"), ValueError, "segments"),
    (dict(overlap=True, segments="both"), ValueError, "every start"),
    (dict(fit_range=(11, 19)), ValueError, "fit_range"),
    (dict(fit_range=5), TypeError, "fit_range"),
    (dict(integrate=1), TypeError, "integrate"),
    (dict(overlap="yes"), TypeError, "overlap"),
    (dict(progress="bar"), TypeError, "progress"),
    (dict(nan="skip"), ValueError, "nan"),
])
def test_bad_input(device, kwargs, err, match):
    x = _series(1000)
    with pytest.raises(err, match=match):
        dfa(x, device=device, **kwargs)


@pytest.mark.parametrize("q,match", [([1.0, 0.5], "increasing"), ([np.nan], "finite"),
                                     ([-60.0, 1.0], "within"), ([], "non-empty"),
                                     ("two", "real")])
def test_bad_q(device, q, match):
    with pytest.raises((ValueError, TypeError), match=match):
        mfdfa(_series(1000), q=q, device=device)


def test_bad_values_named(device):
    x = _series(1000)
    x[777] = np.nan
    with pytest.raises(ValueError, match="index 777"):
        dfa(x, device=device)
    with pytest.raises(ValueError, match=r"x\[1\] has a non-finite value .* index 5"):
        dfa([_series(500), np.r_[np.ones(5), np.inf, np.ones(500)]], scales=[10, 20],
            device=device)
    with pytest.raises(ValueError, match="at least 80 points"):
        dfa(np.arange(60.0), device=device)
    with pytest.raises(TypeError, match="real numbers"):
        dfa(["a", "b"], device=device)


def test_memory_checked_before_device_work(oclgrind):
    """Oclgrind has 128 MB: the plan refuses what would not fit, naming the buffers."""
    with pytest.raises(ValueError, match="profile"):
        dfa(np.zeros(1 << 23, np.float32), scales=[16, 64], device=oclgrind)


def test_pandas_input(device):
    pd = pytest.importorskip("pandas")
    X = np.stack([_series(1000, 1), _series(1000, 2)])
    df = pd.DataFrame({"DAX": X[0], "SMI": X[1]},
                      index=pd.date_range("2020-01-01", periods=1000, freq="D"))
    r = dfa(df, device=device)
    assert r.labels == ("DAX", "SMI")
    np.testing.assert_array_equal(r.F, dfa(X, device=device).F)
    s = df["SMI"]
    assert dfa(s, device=device).labels == ("SMI",)
    assert dfa(s, device=device).H == dfa(X[1], device=device).H
    gaps = df.copy()
    gaps.iloc[[10, 500], 0] = np.nan
    with pytest.raises(ValueError, match=r"x\['DAX'\] has 2 NaN value\(s\), the first at index "
                                         r"Timestamp\('2020-01-11"):
        dfa(gaps, device=device)
    dropped = dfa(gaps, nan="drop", device=device)
    np.testing.assert_array_equal(dropped.F[0], dfa(np.delete(X[0], [10, 500]), device=device).F)
    trading = df.drop(df.index[[3, 4, 10]])          # weekends and holidays: uneven steps
    with pytest.raises(ValueError, match="not evenly spaced .*spacing='ignore'"):
        dfa(trading, device=device)
    ok = dfa(trading, spacing="ignore", device=device)
    np.testing.assert_array_equal(ok.F, dfa(trading.to_numpy().T, device=device).F)
    business = pd.Series(X[0], index=pd.bdate_range("2021-01-04", periods=1000))
    assert np.isfinite(dfa(business, device=device).H)       # a regular business-day index
    with pytest.raises(TypeError, match="real numbers"):
        dfa(pd.DataFrame({"a": X[0], "b": ["x"] * 1000}), device=device)


@pytest.mark.oclgrind
def test_kernels_oclgrind(oclgrind):
    """Every DFA kernel, both accumulators, every segmentation, both profiles, on the
    simulator's race and uninitialised-memory checks (scales on both paths)."""
    x = np.random.default_rng(2).standard_normal(400)
    sc = np.array([6, 260])
    q = [-2.0, 0.0, 2.0]
    cases = [(("forward", False), "double", True), (("forward", False), "compensated", False),
             (("both", False), "compensated", True), (("both", False), "double", False),
             ((None, True), "double", True), ((None, True), "compensated", False)]
    for (segments, overlap), acc, integrate in cases:
        values = x if integrate else np.cumsum(x)
        m = mfdfa_with(values, q=q, scales=sc, order=2, overlap=overlap, segments=segments,
                  integrate=integrate, device=oclgrind, accumulate=acc)
        ref = mfdfa_numpy(values, sc, q, 2, segments or "forward", overlap, integrate)
        np.testing.assert_allclose(m.Fq, ref.Fq, rtol=TOL[acc])
    # the GPUs' shapes (the simulator is a CPU device): reduction trees of 64 items, one
    # scale per work group, 8 moments per tree
    b = _ingest.batch("x", x, 2, "")
    for acc, mode in (("double", "both"), ("compensated", "sliding")):
        plan = DFAPlan(oclgrind, b, sc, 1, mode, tuple(q), True, acc)
        plan.gwg, plan.rwg, plan.scales_per_group, plan.qb = 64, 64, 1, 8
        Fq = fluctuations(q, *plan.run_all())[0][0]
        ref = mfdfa_numpy(x, sc, q, 1, "forward" if mode == "sliding" else mode,
                          mode == "sliding", True)
        np.testing.assert_allclose(Fq, ref.Fq, rtol=TOL[acc])


@pytest.mark.parametrize("facts", [fake_facts(v, fp64) for v in ("nvidia", "amd", "pocl")
                                   for fp64 in (True, False)], ids=lambda f: f.cache_id)

def test_template_renders(facts):
    """dfa.cl for fake devices (listed in test_templates.RENDERED_IN): its three parts for
    every order, segmentation and profile; no double without fp64."""
    cases = [("prep", dict(order=o, block=256, wg=64, integrate=i))
             for o in range(5) for i in (True, False)]
    cases += [("fluct", dict(order=o, block=256, gwg=128, run=64, mode=m))
              for o in range(5) for m in ("forward", "both", "sliding")]
    cases += [("reduce", dict(gwg=128, mode=m, groups=16, qb=qb))
              for m in ("forward", "both", "sliding") for qb in (1, 8)]
    for part, params in cases:
        for acc in ("double", "compensated") if facts.fp64 else ("compensated",):
            src = render("timeseries/dfa.cl", facts, part=part, acc=acc, **params)
            assert src.count("{") == src.count("}") and "__kernel" in src
            if acc == "compensated":
                code = re.sub(r"//[^\n]*", "", src)
                assert not re.search(r"\bdouble\b|cl_khr_fp64", code)
    with pytest.raises(ValueError, match="order"):
        render("timeseries/dfa.cl", fake_facts("pocl"), part="prep", order=5, acc="double",
               block=256, wg=64, integrate=True)
    with pytest.raises(ValueError, match="part"):
        render("timeseries/dfa.cl", fake_facts("pocl"), part="all", acc="double")


@pytest.mark.parametrize("s", [6, 7, 10, 33, 256, 301, 4096])
def test_gram_polynomials_orthonormal(s):
    p = frame_exponent(s)
    z = (2.0 * np.arange(s) - (s - 1)) * 2.0 ** -p
    assert np.all(np.abs(z) < 1)
    Q = np.vander(z, 5, increasing=True) @ gram_coefficients(s, 4, p).T
    np.testing.assert_allclose(Q.T @ Q, np.eye(5), atol=1e-12)


def test_default_scales():
    assert default_scales(80).tolist() == [10, 20]
    assert default_scales(2**24).tolist() == [round(10 * 2**k) for k in range(19)]
    with pytest.raises(ValueError, match="80"):
        default_scales(79)


def test_reference_definition():
    """The reference's F^2 is the mean squared residual of np.polyfit on each segment."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal(300)
    for order, (segments, overlap) in itertools.product((0, 2), MODES):
        r = dfa_fluctuations_numpy(x, 30, order, segments or "forward", overlap)
        Y = np.cumsum(x - x.mean())
        t = np.arange(30)
        want = [np.mean((Y[a:a + 30] - np.polyval(np.polyfit(t, Y[a:a + 30], order), t)) ** 2)
                for a in r.starts]
        np.testing.assert_allclose(r.F2, want, rtol=1e-9)
    assert dfa_fluctuations_numpy(x, 30, 1, "both").starts.tolist() == \
        list(range(0, 300, 30)) * 2
