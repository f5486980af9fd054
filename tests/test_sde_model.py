"""clphys.sde without a device: model descriptions, expression checks, the
CLI's value parser, and template rendering for fake device facts."""

import argparse
import math

import numpy as np
import pytest

from clphys.runtime import fake_facts, render
from clphys.sde import Model, expr, models
from clphys.sde.cli import parse_values

VENDORS = ("nvidia", "amd", "pocl")


def test_builtin_models_describe_themselves():
    m = models.JOSEPHSON
    assert m.variables == ("x", "v")
    assert m.parameters == ("gamma", "a", "omega", "f", "kT")
    assert m.noise_sources == ("v",)
    assert m.periodic == {"x": 1.0}
    assert m.drive_periods({"omega": np.array([2 * np.pi, np.pi])}) == pytest.approx([1.0, 2.0])
    assert models.BROWNIAN.drive_periods({"D": 1.0}) is None
    assert m.forcing == {"drive": "a*cos(omega*t)"}
    assert m == Model(["x", "v"], dict(zip(("x", "v"), m.drift)), {"v": "sqrt(2*gamma*kT)"},
                      m.parameters, periodic={"x": 1.0}, drive_period="2*M_PI/omega",
                      forcing={"drive": "a*cos(omega*t)"})
    assert hash(m) != hash(models.FREE_PARTICLE) and len(m.tag) == 8


def test_shared_and_separate_noise_sources():
    m = Model(["x", "y"], {"x": "-x", "y": "-y"},
              noise={"x": {"w1": "s", "w2": "0.5*s"}, "y": {"w1": "s"}}, parameters=["s"])
    assert m.noise_sources == ("w1", "w2")
    spec = m.render_spec("float")
    assert [(vi, si) for vi, si, _ in spec["noise"]] == [(0, 0), (0, 1), (1, 0)]
    assert spec["drift"] == ["(- x)", "(- y)"]


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError) as err:
        Model(["x", "v"], {"x": "v", "v": "-gama*v"}, {"v": "1"}, ["gamma", "kT"])
    msg = str(err.value)
    assert "'gama'" in msg and "did you mean 'gamma'" in msg
    assert "variables: x, v" in msg and "parameters: gamma, kT" in msg and "M_PI_F" in msg


@pytest.mark.parametrize("drift, what", [
    ("x; x = 0", "unexpected character ';'"),
    ("{x}", "unexpected character '{'"),
    ("x = 1", "unexpected character '='"),
    ("x // c", "unexpected character"),
    ("(x", "unbalanced '('"),
    ("x)", "unbalanced ')'"),
    ("x, x", "',' outside a function call"),
    ("sin + x", "sin is a function"),
    ("x(2)", "x is not a function"),
    ("2 x", "missing operator"),
    ("real_t + x", "cast"),
    ("unwrap(x)", "observables only"),
    ("", "empty expression"),
    ("\"x\"", "unexpected character"),
])
def test_expressions_are_checked(drift, what):
    with pytest.raises(ValueError, match=what.replace("(", r"\(").replace(")", r"\)")):
        Model(["x"], {"x": drift}, parameters=["c"], periodic=["x"])


def test_expressions_accept_c_arithmetic():
    m = Model(["x"], {"x": "c > 0 ? -c*x : fmax(x, 1.0f) + (real_t)2 * M_PI_F + 1e-3 + 0x10"},
              noise={"x": 0.5}, parameters=["c"])
    assert "M_PI_F" in m.render_spec("float")["drift"][0]
    assert "M_PI " in m.render_spec("double")["drift"][0] + " "   # double twin of the constant
    assert m.check_observable("cos(x) * t + c")


@pytest.mark.parametrize("kwargs, what", [
    (dict(variables=[]), "at least one"),
    (dict(variables="x"), "list of names"),
    (dict(variables=["x", "x"]), "duplicates"),
    (dict(variables=["sin"]), "reserved"),
    (dict(variables=["t"]), "reserved"),
    (dict(variables=["sde_x"]), "reserved"),
    (dict(variables=["2x"]), "not a C identifier"),
    (dict(parameters=["x"]), "both variable and parameter"),
    (dict(drift={"y": "1"}), "unknown variable"),
    (dict(drift="x"), "mapping"),
    (dict(noise={"x": "x"}), "additive"),
    (dict(noise={"x": "t"}), "additive"),
    (dict(noise={"x": {"sin": "1"}}), "reserved"),
    (dict(periodic={"x": 0.0}), "period > 0"),
    (dict(periodic={"x": math.inf}), "period > 0"),
    (dict(drive_period="x"), "unknown name 'x'"),
    (dict(drive_period=math.nan), "not finite"),
    (dict(name=""), "non-empty"),
    (dict(forcing={"F": "x"}), "unknown name 'x'"),
    (dict(forcing={"c": "t"}), "already a variable or parameter"),
    (dict(forcing={"cos": "t"}), "reserved"),
    (dict(forcing="t"), "mapping"),
])
def test_bad_models(kwargs, what):
    base = dict(variables=["x"], drift={"x": "-c*x"}, parameters=["c"])
    base.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=what):
        Model(**base)


def test_observables_and_unwrap():
    m = models.JOSEPHSON
    assert m.check_observable("unwrap(x) / t")
    with pytest.raises(ValueError, match="periodic variable"):
        m.check_observable("unwrap(v)")
    with pytest.raises(ValueError, match="unknown name 'y'"):
        m.check_observable("y")
    with pytest.raises(ValueError, match="none"):
        models.FREE_PARTICLE.check_observable("unwrap(x)")


def test_host_evaluation_of_the_drive_period():
    toks = expr.check("p", "2*M_PI_F/sqrt(w) + 0x1", {"w": "parameter"}, allow_t=False)
    assert expr.host_eval("p", toks, {"w": np.array([4.0])}) == pytest.approx([np.pi + 1])
    toks = expr.check("p", "w > 1 ? w : 1", {"w": "parameter"}, allow_t=False)
    with pytest.raises(ValueError, match="not supported"):
        expr.host_eval("p", toks, {"w": 2.0})


def test_parse_values():
    assert parse_values("4.2") == 4.2
    assert parse_values("4:5:3") == pytest.approx([4, 4.5, 5])
    assert parse_values("1,2") == pytest.approx([1, 2])
    for bad in ("a", "1:2", "1:2:0"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_values(bad)


def _ensemble_params(model, real, **kw):
    p = dict(real=real, model=model.render_spec(real), gparams=list(model.parameters[:1]),
             sparams=list(model.parameters[1:]), scheme="srk2", rng="philox", wg=64, wgf=64,
             obs=["(x)", "(cos(x))", "(sde_dp_0)"], hist=[("(x)", 10)], disp=[0], tag="t" + model.tag)
    p.update(kw)
    return p


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("fp64", [True, False])
def test_templates_render_for_fake_devices(vendor, fp64):
    facts = fake_facts(vendor, fp64)
    reals = ["float", "double"] if fp64 else ["float"]
    for real in reals:
        for scheme in ("srk2", "euler"):
            for rng in ("philox", "xorshift32"):
                src = render("sde/ensemble.cl", facts,
                             **_ensemble_params(models.JOSEPHSON, real, scheme=scheme, rng=rng))
                assert "void sde_advance(" in src and "void sde_moments(" in src
                assert ("double acc_t" in src) == fp64
        src = render("sde/ensemble.cl", facts, **_ensemble_params(models.BROWNIAN, real, obs=[], hist=[]))
        assert "sde_scratch" not in src and "sde_lh" not in src
        for coupling in ("mean-field", "uniform", "matrix"):
            src = render("sde/kuramoto.cl", facts, real=real, coupling=coupling, omega_array=True,
                         wg=128, wgf=64)
            for k in ("kuramoto_pairs", "kuramoto_euler", "kuramoto_predict", "kuramoto_correct"):
                assert f"void {k}(" in src
    if not fp64:
        with pytest.raises(ValueError, match="fp64"):
            render("sde/ensemble.cl", facts, **_ensemble_params(models.BROWNIAN, "double"))
    with pytest.raises(ValueError, match="scheme"):
        render("sde/ensemble.cl", facts, **_ensemble_params(models.BROWNIAN, "float", scheme="rk4"))
    with pytest.raises(ValueError, match="coupling"):
        render("sde/kuramoto.cl", facts, real="float", coupling="ring", omega_array=False, wg=64, wgf=64)
