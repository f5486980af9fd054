"""Malformed inputs to every public Ising function and class, and to the
`clphys ising` / `clphys binder` commands, generated with hypothesis: each
gives a clean ValueError/TypeError (or DeviceError for the deliberately
unknown device, when the input happened to be valid) whose traceback ends
in clphys, or CLI exit status 2 with a message; never an exception from
NumPy or PyOpenCL. Invalid inputs are refused before any device work (the
device is one that does not exist). Few examples, derandomized: fast and
deterministic."""

import os
import traceback

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import clphys
from clphys.cli import main
from clphys.errors import DeviceError
from clphys.ising import Ensemble2D, Ensemble3D, Ising2D, Ising3D, Samples, binder_scan, metropolis_thresholds
from clphys.ising.binder import crossing_of
from clphys.runtime import test_devices as _test_devices
from clphys.stats import mean_estimates, series_estimate

NOWHERE = "no-such-device-anywhere"
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

junk = st.one_of(
    st.none(), st.booleans(), st.text(max_size=4), st.binary(max_size=3),
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**70, 2**70),
    st.complex_numbers(allow_nan=True), st.lists(st.one_of(st.integers(-3, 3), st.text(max_size=1)), max_size=3),
    st.sampled_from([np.array([[1.0, 2.0]]), np.array(["a"]), np.array([np.nan]), np.zeros((0,)),
                     object(), {"a": 1}, (64, 64, 64, 64), 2**64, -1, 0, 1.5, float("nan")]),
)


def _clean(call):
    """Run call(); an exception must be ValueError/TypeError/DeviceError with a
    message, raised from clphys code (its traceback ends in clphys/)."""
    try:
        call()
    except (ValueError, TypeError, DeviceError) as exc:
        assert str(exc), repr(exc)
        last = traceback.extract_tb(exc.__traceback__)[-1].filename
        assert f"{os.sep}clphys{os.sep}" in last, (repr(exc), last)
        return exc
    return None


LATTICE_KW = {"L": 64, "T": 2.0, "J": 1.0, "h": 0.0, "algorithm": None, "rng": None, "seed": 0,
              "start": "random"}


@SETTINGS
@given(name=st.sampled_from(sorted(LATTICE_KW)), value=junk, cls=st.sampled_from([Ising2D, Ising3D]))
def test_lattice_constructors(name, value, cls):
    kw = dict(LATTICE_KW, **{name: value})
    L, T = kw.pop("L"), kw.pop("T")
    _clean(lambda: cls(L, T, device=NOWHERE, **kw))


@SETTINGS
@given(name=st.sampled_from(["L", "temperatures", "J", "h", "seed", "start", "algorithm", "rng"]),
       value=junk, cls=st.sampled_from([Ensemble2D, Ensemble3D]))
def test_ensemble_constructors(name, value, cls):
    kw = {"L": 8, "temperatures": [2.0, 3.0], name: value}
    L, temps = kw.pop("L"), kw.pop("temperatures")
    _clean(lambda: cls(L, temps, device=NOWHERE, **kw))


def test_the_base_ensemble_names_its_subclasses():
    from clphys.ising import Ensemble
    with pytest.raises(TypeError, match="create one of those"):
        Ensemble(8, [2.0], device=NOWHERE)


TAKEN = {"L", "T", "J", "h", "algorithm", "rng", "seed", "start", "device"}


@SETTINGS
@given(option=st.text(min_size=1, max_size=8).filter(lambda t: t.isidentifier() and t not in TAKEN),
       value=junk)
def test_unknown_and_bad_options(option, value):
    exc = _clean(lambda: Ising2D(64, 2.0, device=NOWHERE, **{option: value}))
    assert not isinstance(exc, DeviceError) or option in ("wg", "lanes", "words_per_item", "accept")


BINDER_KW = {"sizes": [8, 16], "temperatures": [2.2, 2.3], "dim": 2, "n_therm": None, "n_measure": 64,
             "every": 1, "replicas": 2, "seed": 0, "algorithm": None, "rng": None, "progress": None}


@SETTINGS
@given(name=st.sampled_from(sorted(BINDER_KW)), value=junk)
def test_binder_scan(name, value):
    kw = dict(BINDER_KW, **{name: value})
    sizes, temps = kw.pop("sizes"), kw.pop("temperatures")
    _clean(lambda: binder_scan(sizes, temps, device=NOWHERE, **kw))


@SETTINGS
@given(args=st.tuples(junk, junk, junk, junk), which=st.integers(0, 3))
def test_thresholds(args, which):
    good = [2, 2.0, 1.0, 0.0]
    good[which] = args[which]
    _clean(lambda: metropolis_thresholds(*good))


@SETTINGS
@given(name=st.sampled_from(["temperature", "n_spins", "energy", "magnetization", "n_therm", "every",
                             "trapped"]), value=junk)
def test_samples(name, value):
    kw = {"temperature": 2.0, "n_spins": 64, "energy": np.linspace(-1, -2, 20),
          "magnetization": np.linspace(0, 1, 20), name: value}
    _clean(lambda: Samples(**kw).specific_heat())


@SETTINGS
@given(x=junk, func=st.sampled_from([None, "x", lambda m: np.array([1.0, 2.0])]), c=junk)
def test_stats_estimators(x, func, c):
    _clean(lambda: series_estimate(x, func))
    _clean(lambda: series_estimate(np.arange(30.0), None, c=c))
    _clean(lambda: mean_estimates(x))
    _clean(lambda: crossing_of(x, x, x))


@pytest.fixture(scope="module")
def ensemble():
    return Ensemble2D(8, [2.0, 3.0], device=clphys.device(_test_devices()[0]))


def _invalid(value):
    """`value`, or -1 where it is a valid count (a huge valid count would run)."""
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0
    return -1 if ok else value


def test_progress_argument_checked(ensemble):
    with pytest.raises(TypeError, match="progress must be None, True, False or a callable"):
        ensemble.sample(2, progress="yes")
    with pytest.raises(TypeError, match="progress must be None"):
        binder_scan([8, 16], [2.2, 2.3], progress=3, device=NOWHERE)


def test_checked_before_the_run():
    """Refused before any device work (the device does not exist): repeated temperatures
    in a scan (they failed in the crossing fit after the whole simulation) and numbers
    given as strings (NumPy read "2.3" as 2.3)."""
    with pytest.raises(ValueError, match="distinct, got 2.25 more than once"):
        binder_scan([16, 32], [2.2, 2.25, 2.25, 2.3], device=NOWHERE)
    with pytest.raises(TypeError, match="temperatures must be real numbers"):
        binder_scan([16, 32], ["2.2", "2.3"], device=NOWHERE)
    with pytest.raises(TypeError, match="temperatures must be real numbers"):
        Ensemble2D(16, ["2.2", 2.3], device=NOWHERE)
    with pytest.raises(TypeError, match="T must be a real number"):
        Ising2D(16, "2.3", device=NOWHERE)


@pytest.mark.parametrize("algorithm, rng", [("multispin", None), ("checkerboard", "lcg")])
def test_malformed_in_memory_states(ensemble, algorithm, rng):
    """from_state() of a dict whose generator state lacks a field, has a stray one or holds
    junk: ValueError/TypeError naming state['backend'] (a bare KeyError came out of the
    backend before)."""
    lat = Ising2D(8, 2.3, algorithm=algorithm, rng=rng, seed=1, device=ensemble.device)
    state = lat.state()
    for key in state["backend"]:
        if key == "spins_per_word":       # optional: states made before the joint mode lack it
            continue
        bad = dict(state, backend={k: v for k, v in state["backend"].items() if k != key})
        with pytest.raises(ValueError, match=rf"state\['backend'\].*lacks \['{key}'\]"):
            Ising2D.from_state(bad, device=ensemble.device)
        junked = dict(state, backend=dict(state["backend"], **{key: "x"}))
        assert _clean(lambda junked=junked: Ising2D.from_state(junked, device=ensemble.device)) is not None
    for backend in (None, [], dict(state["backend"], extra=1)):
        with pytest.raises(ValueError, match=r"state\['backend'\]"):
            Ising2D.from_state(dict(state, backend=backend), device=ensemble.device)
    assert np.array_equal(Ising2D.from_state(state, device=ensemble.device).spins(), lat.spins())


@SETTINGS
@given(method=st.sampled_from(["sweep", "sample_n", "sample_every", "sample_therm", "set_spins",
                               "temperatures", "save", "load"]), value=junk)
def test_ensemble_methods(ensemble, tmp_path_factory, method, value):
    sweeps = ensemble.sweeps
    calls = {"sweep": lambda: ensemble.sweep(_invalid(value)),
             "sample_n": lambda: ensemble.sample(_invalid(value)),
             "sample_every": lambda: ensemble.sample(2, every=_invalid(value)),
             "sample_therm": lambda: ensemble.sample(2, n_therm=_invalid(value) if value is not None else -1),
             "set_spins": lambda: ensemble.set_spins(value),
             "temperatures": lambda: setattr(ensemble, "temperatures", value),
             "save": lambda: ensemble.save(value),
             "load": lambda: Ensemble2D.load(value)}
    here = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))        # a valid relative name is written here
    try:
        exc = _clean(calls[method])
    finally:
        os.chdir(here)
    assert exc is not None or method in ("save", "temperatures"), (method, value)
    if method not in ("save", "temperatures"):
        assert ensemble.sweeps == sweeps            # refused before any sweep
    ensemble.temperatures = [2.0, 3.0]


CLI_OPTIONS = {
    "ising": ["--size", "--temperature", "--sweeps", "--therm", "--every", "--coupling", "--field",
              "--start", "--seed", "--dim", "--algorithm", "--rng", "--checkpoint", "--resume",
              "--checkpoint-every", "--plot"],
    "binder": ["--sizes", "--tmin", "--tmax", "--points", "--therm", "--measure", "--every", "--replicas",
               "--seed", "--dim", "--algorithm", "--rng", "--plot"],
}
cli_text = st.one_of(st.text(max_size=6), st.sampled_from(
    ["-1", "0", "nan", "inf", "1e400", "64x", "8,x", "2.5", "", "-", "/no/such/dir/f.npz", "9" * 30,
     "x.png", "12", "1,2,3,4", "lcg", "wolff"]))


@SETTINGS
@given(cmd=st.sampled_from(sorted(CLI_OPTIONS)), data=st.data())
def test_cli_commands(cmd, data, capsys):
    option = data.draw(st.sampled_from(CLI_OPTIONS[cmd]))
    value = data.draw(cli_text)
    try:
        code = main([cmd, "--device", NOWHERE, "--no-progress", option, value])
    except SystemExit as exc:                 # argparse's own usage error
        code = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if code == 1:                             # valid after all: it got as far as the device
        assert "no OpenCL device matches" in err, err
    else:
        assert code == 2 and f"clphys {cmd}: error:" in err, (code, err)
