"""Malformed inputs to the SDE API and commands (hypothesis): every one ends
in a clean ValueError/TypeError raised by clphys itself (never an exception
from inside NumPy or PyOpenCL), or CLI exit status 2 with a one-line
message; a value that happens to be valid runs a tiny job to the end.
Damaged checkpoints end in a CheckpointError naming what is wrong."""

import dataclasses
import json
import os
import traceback
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from clphys import exact
from clphys.cli import main
from clphys.runtime.checkpoint import CheckpointError
from clphys.sde import Ensemble, Kuramoto, Model, josephson, kuramoto, models

# a value silently cast to inf or NaN on the way is a failure too
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
CLPHYS_DIR = os.path.dirname(os.path.abspath(__import__("clphys").__file__))

# Values that are wrong for most parameters: wrong types, non-finite, out of
# range, absurdly large, ragged, empty, of another shape. (A few are valid for
# some parameters, e.g. -1 for a bias force: those runs are tiny.)
BAD = st.sampled_from([
    None, "abc", "", "4.2", True, False, float("nan"), float("inf"), -float("inf"), -1, 0, -0.5,
    1.5, 2**64, -2**70, 1e300, [], [[1.0, 2.0], [3.0]], [1.0, "x"], {"a": 1},
    1 + 2j, b"x", object(), np.array([np.nan]), np.zeros((2, 2)), np.array(["a"]),
    np.array([1 + 1j]), np.float32(np.inf), np.int64(-3), (1.0, 2.0), slice(1), ...,
])


def _assert_clean(call):
    """call() succeeds or raises ValueError/TypeError from clphys's own code,
    with a message."""
    try:
        call()
    except (ValueError, TypeError) as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        where = frames[-1].filename if frames else ""
        assert where.startswith(CLPHYS_DIR), (
            f"{type(exc).__name__} raised outside clphys ({where}): {exc}")
        assert str(exc).strip(), "an error without a message"
        return exc
    return None


# ------------------------------------------------------------------ API

JOSEPHSON_OK = dict(a=4.2, gamma=0.9, omega=4.9, f=0.1, kT=0.01, n_paths=4, periods=2, transient=0,
                    steps_per_period=5, density_bins=4, scheme="srk2", rng="philox", seed=0,
                    dtype="float32", fast_math=False, checkpoint=None, checkpoint_every=60.0,
                    resume=None)


def test_numbers_as_strings_and_runs_shorter_than_a_step(device):
    """A number given as a string is refused, not read as one (josephson(a="4.2") ran);
    t_end less than one step dt ahead is refused, not run for a whole step."""
    for name in ("a", "f", "kT", "gamma"):
        with pytest.raises(TypeError, match=f"{name} must be real numbers"):
            josephson(**dict(JOSEPHSON_OK, **{name: "4.2"}), device="no-such-device")
    with pytest.raises(TypeError, match="a must be real numbers"):
        josephson(**dict(JOSEPHSON_OK, a=[4.2, "4.3"]), device="no-such-device")
    with pytest.raises(ValueError, match="at least one step dt = 0.01, got 0.005"):
        kuramoto(64, 4.0, t_end=0.005, dt=0.01, device="no-such-device")
    ens = Ensemble(models.BROWNIAN, 8, {"D": 1.0}, 0.1, seed=1, device=device)
    with pytest.raises(ValueError, match="at least one step dt = 0.1, got 0.05"):
        ens.run(0.05)
    assert ens.run(0.1).times[-1] == pytest.approx(0.1)          # one step: fine


@pytest.mark.slow
@SETTINGS
@given(name=st.sampled_from(sorted(JOSEPHSON_OK)), value=BAD)
def test_josephson_bad_arguments(device, name, value):
    _assert_clean(lambda: josephson(**{**JOSEPHSON_OK, name: value}, device=device))


KURAMOTO_OK = dict(n=8, coupling=1.0, kT=0.5, gamma=1.0, omega=0.0, t_end=0.1, dt=0.05, sample_every=1,
                   kernel="auto", scheme="srk2", seed=0, dtype="float32", initial="uniform",
                   checkpoint=None, checkpoint_every=60.0, resume=None)


@SETTINGS
@given(name=st.sampled_from(sorted(KURAMOTO_OK)), value=BAD)
def test_kuramoto_bad_arguments(device, name, value):
    _assert_clean(lambda: kuramoto(**{**KURAMOTO_OK, name: value}, device=device))


ENSEMBLE_OK = dict(model=models.FREE_PARTICLE, n_paths=4, params={"gamma": 1.0, "kT": 1.0}, dt=0.1,
                   scheme="euler", rng="philox", seed=0, dtype="float32", fast_math=False,
                   initial=None, work_group_size=None)
RUN_OK = dict(steps=3, sample_every=None, observables=None, histograms=None, record_paths=0)


@SETTINGS
@given(name=st.sampled_from(sorted(ENSEMBLE_OK) + ["params.gamma", "initial.v", "params.zip"]),
       value=BAD)
def test_ensemble_bad_arguments(device, name, value):
    kw = dict(ENSEMBLE_OK)
    if name == "params.gamma":
        kw["params"] = {"gamma": value, "kT": 1.0}
    elif name == "initial.v":
        kw["initial"] = {"v": value}
    elif name == "params.zip":
        kw["params"] = {("gamma", "kT"): value}
    else:
        kw[name] = value
    with warnings.catch_warnings():
        # a valid but absurd value (gamma = -2^70: the noise sqrt(2 gamma kT) is NaN) runs and
        # gets the run's own warning that its paths diverged: not a silent NaN
        warnings.filterwarnings("ignore", "sde run: means or variances are not finite", RuntimeWarning)
        _assert_clean(lambda: Ensemble(**kw, device=device).run(steps=2))


@pytest.fixture(scope="module")
def small_ensemble():
    return Ensemble(models.FREE_PARTICLE, 4, {"gamma": 1.0, "kT": 1.0}, 0.1, scheme="euler")


@SETTINGS
@given(name=st.sampled_from(sorted(RUN_OK) + ["t_end", "histograms.v"]), value=BAD)
def test_ensemble_run_bad_arguments(small_ensemble, name, value):
    kw = dict(RUN_OK)
    if name == "t_end":
        kw.pop("steps")
    if name == "histograms.v":
        kw["histograms"] = {"v": value}
    else:
        kw[name] = value
    step = small_ensemble.step
    exc = _assert_clean(lambda: small_ensemble.run(**kw))
    if exc is not None:
        assert small_ensemble.step == step           # refused before any step


# expressions that cannot be valid: a fragment plus a character or word no expression may hold
EXPR = st.builds(lambda a, bad, b: a + bad + b,
                 st.sampled_from(["", "x", "v*v", "sin(x", "unwrap(", "displacement(v) + ", "1e3"]),
                 st.sampled_from([";", "{", "}", "=", "#", "@", "$", "//", "/*", "\"", "'", "[",
                                  " y", "unwrap(v)", "displacement(k)", "printf(", ",", ")(", "2(",
                                  ") x", " sde_x0", " t t", "\\n", "get_global_id(0)"]),
                 st.sampled_from(["", ")", " + 1", "x"]))


@SETTINGS
@given(text=EXPR)
def test_malformed_expressions_are_refused(small_ensemble, text):
    with pytest.raises(ValueError):
        small_ensemble.run(steps=1, observables=[text])
    exc = _assert_clean(lambda: Model(["x"], {"x": text}, parameters=["c"]))
    assert exc is not None


MODEL_OK = dict(variables=["x", "v"], drift={"x": "v", "v": "-c*v"}, noise={"v": "sqrt(c)"},
                parameters=["c"], periodic=None, drive_period=None, forcing=None, name="m")


@SETTINGS
@given(name=st.sampled_from(sorted(MODEL_OK) + ["drift.v", "noise.v", "periodic.x", "forcing.F"]),
       value=BAD)
def test_model_bad_arguments(name, value):
    kw = dict(MODEL_OK)
    if "." in name:
        key, sub = name.split(".")
        kw[key] = {sub: value}
    else:
        kw[name] = value
    _assert_clean(lambda: Model(**kw))


@SETTINGS
@given(fn=st.sampled_from(["kuramoto_order_parameter", "kuramoto_subcritical_r2",
                           "overdamped_tilted_washboard_velocity", "washboard_stationary_sin_mean",
                           "free_brownian_variance", "ou_velocity_mean"]),
       position=st.integers(0, 2), value=BAD)
def test_exact_sde_references_bad_arguments(fn, position, value):
    good = {"kuramoto_order_parameter": [4.0, 1.0], "kuramoto_subcritical_r2": [0.5, 1.0, 10],
            "overdamped_tilted_washboard_velocity": [1.0, 1.0, 1.0],
            "washboard_stationary_sin_mean": [0.5, 1.0], "free_brownian_variance": [1.0, 0.5],
            "ou_velocity_mean": [1.0, 1.0, 0.5]}[fn]
    args = list(good)
    args[min(position, len(args) - 1)] = value
    _assert_clean(lambda: getattr(exact, fn)(*args))


@SETTINGS
@given(name=st.sampled_from(["model_description", "n_paths", "params", "dt", "scheme", "rng", "seed",
                             "dtype", "fast_math", "step", "origin_step", "values", "laps", "origin",
                             "time", "xs_state", "xs_spare"]), value=BAD)
def test_ensemble_state_bad_fields(small_ensemble, name, value):
    state = small_ensemble.state()
    _assert_clean(lambda: dataclasses.replace(state, **{name: value}))


# ------------------------------------------------------------------ damaged checkpoints

@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    d = tmp_path_factory.mktemp("ck")
    ens = Ensemble(models.JOSEPHSON, 6, {"gamma": 0.9, "a": [3.0, 4.0], "omega": 4.9, "f": 0.1,
                                         "kT": 0.01}, 0.01, rng="xorshift32")
    ens.run(steps=3, observables=[])
    ens.save(d / "ens.npz")
    Kuramoto(12, 1.0, dt=0.05).save(d / "kur.npz")
    return {"ens": d / "ens.npz", "kur": d / "kur.npz"}


def _load_any(kind, path):
    return (Ensemble.load if kind == "ens" else Kuramoto.load)(path)


@SETTINGS
@given(kind=st.sampled_from(["ens", "kur"]), data=st.data(), value=BAD)
def test_damaged_header_fields(checkpoints, tmp_path_factory, kind, data, value):
    src = checkpoints[kind]
    with np.load(src, allow_pickle=False) as npz:
        files = {k: npz[k] for k in npz.files}
    header = json.loads(files.pop("__header__").tobytes().decode())
    name = data.draw(st.sampled_from(sorted(header)))
    try:
        header[name] = json.loads(json.dumps(value))
    except (TypeError, ValueError):
        header.pop(name)                          # not JSON: the field goes missing instead
    path = tmp_path_factory.mktemp("bad") / "c.npz"
    np.savez(path, __header__=np.frombuffer(json.dumps(header).encode(), np.uint8), **files)
    _assert_clean(lambda: _load_any(kind, path))


@SETTINGS
@given(kind=st.sampled_from(["ens", "kur"]), cut=st.floats(0.0, 0.999))
def test_truncated_checkpoints(checkpoints, tmp_path_factory, kind, cut):
    data = checkpoints[kind].read_bytes()
    path = tmp_path_factory.mktemp("cut") / "c.npz"
    path.write_bytes(data[:int(cut * len(data))])
    with pytest.raises(CheckpointError):
        _load_any(kind, path)


@SETTINGS
@given(kind=st.sampled_from(["ens", "kur"]), data=st.data(),
       new=st.sampled_from([np.zeros(0), np.zeros(3, np.int8), np.zeros((2, 2)), np.array([np.nan]),
                            np.arange(5, dtype=np.uint64), np.zeros((1, 1, 1), np.float32)]))
def test_damaged_arrays(checkpoints, tmp_path_factory, kind, data, new):
    src = checkpoints[kind]
    with np.load(src, allow_pickle=False) as npz:
        files = {k: npz[k] for k in npz.files}
    name = data.draw(st.sampled_from(sorted(k for k in files if k != "__header__")))
    assume(files[name].dtype != new.dtype or files[name].shape != new.shape)
    files[name] = new
    path = tmp_path_factory.mktemp("arr") / "c.npz"
    np.savez(path, **files)
    with pytest.raises(CheckpointError):
        _load_any(kind, path)


# ------------------------------------------------------------------ commands

BAD_TEXT = st.sampled_from(["", "abc", "nan", "inf", "-inf", "-1", "0", "1e400", "1.5", "1,2,",
                            "4:5", "4:5:0", "4:5:x", "99999999999999999999999", " ", "0x10",
                            "1e-400", "-0", ",", ":::", "1;2"])
JOSEPHSON_CLI = ["sde", "josephson", "--paths", "4", "--periods", "2", "--steps-per-period", "5",
                 "--bins", "4", "--no-progress"]
KURAMOTO_CLI = ["sde", "kuramoto", "--n", "8", "--t-end", "0.1", "--dt", "0.05", "--no-progress"]
OPTIONS = {"josephson": ["--a", "--f", "--kT", "--gamma", "--omega", "--paths", "--periods",
                         "--transient", "--steps-per-period", "--bins", "--scheme", "--rng", "--dtype",
                         "--seed", "--plot", "--checkpoint", "--resume", "-o"],
           "kuramoto": ["--n", "--coupling", "--noise", "--gamma", "--omega", "--dt", "--t-end",
                        "--sample-every", "--kernel", "--scheme", "--dtype", "--seed",
                        "--plot", "--checkpoint", "--resume", "-o"]}


@SETTINGS
@given(model=st.sampled_from(sorted(OPTIONS)), data=st.data(), value=BAD_TEXT)
def test_commands_with_bad_values_exit_2(tmp_path_factory, capsys, model, data, value):
    option = data.draw(st.sampled_from(OPTIONS[model]))
    base = JOSEPHSON_CLI if model == "josephson" else KURAMOTO_CLI
    os.chdir(tmp_path_factory.mktemp("cli"))
    try:
        rc = main(base + [option, value])
    except SystemExit as exc:                     # argparse: usage line and message, status 2
        rc = exc.code
    out, err = capsys.readouterr()
    if rc in (0, 3):
        # the value was valid after all (e.g. --seed 0; 3: valid, but paths diverged, --gamma 1e23)
        return
    assert rc == 2, (option, value, rc, err)
    assert "Traceback" not in err and err.strip(), (option, value, err)
    assert err.rstrip("\n").splitlines()[-1].startswith(("clphys sde: error:", "clphys sde josephson: error:",
                                                         "clphys sde kuramoto: error:")), err


def test_unknown_device_is_a_device_error(capsys):
    """A --device that matches nothing is a DeviceError (exit 1) listing the
    devices there are."""
    assert main(KURAMOTO_CLI + ["--device", "no-such-device"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("clphys sde kuramoto: error: no OpenCL device matches 'no-such-device'") and "Traceback" not in err


@pytest.fixture(scope="module")
def run_checkpoints(tmp_path_factory):
    """Checkpoints of unfinished Josephson and Kuramoto runs (written after
    their first chunk)."""
    d = tmp_path_factory.mktemp("runs")
    josephson(**{**JOSEPHSON_OK, "checkpoint": d / "j.npz", "checkpoint_every": 0.0})
    kuramoto(**{**KURAMOTO_OK, "checkpoint": d / "k.npz", "checkpoint_every": 0.0})
    return {"josephson": d / "j.npz", "kuramoto": d / "k.npz"}


@SETTINGS
@given(which=st.sampled_from(["josephson", "kuramoto"]), data=st.data(), value=BAD)
def test_resume_with_bad_arguments(run_checkpoints, which, data, value):
    """Resuming with a malformed argument: a clean error (the other run's
    description, or the argument's own check), never NumPy's."""
    ok = JOSEPHSON_OK if which == "josephson" else KURAMOTO_OK
    name = data.draw(st.sampled_from(sorted(set(ok) - {"resume", "checkpoint", "checkpoint_every"})))
    fn = josephson if which == "josephson" else kuramoto
    _assert_clean(lambda: fn(**{**ok, "resume": run_checkpoints[which], name: value}))
