"""Every public entry point on every OpenCL implementation (the ``portability``
selection: CI runs it on Intel's CPU runtime and Mesa rusticl besides the
whole suite on PoCL; ``CLPHYS_PORTABILITY_DEVICES``).

* integer Monte Carlo and random numbers give the checked-in bits
  (``portability_hashes.json``) on every device;
* floating-point codes agree with an fp64 device (PoCL) within each case's
  stated tolerance, on devices without fp64 too (compensated float32 sums);
  an option that needs fp64 raises a ValueError naming it there;
* the commands ``clphys ising`` and ``clphys muca`` print what they print on
  the fp64 device.

The cases and their tolerances are in ``portability_cases.py``; docs/portability.md
has the story.
"""

import functools
import importlib
import inspect
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import clphys
from clphys.runtime import survey
from portability_cases import BITS, CASES, CLOSE, ENTRY_POINTS, digest, expected_hash, load_hashes, results

pytestmark = pytest.mark.portability

PUBLIC_MODULES = ("clphys.rng", "clphys.ising", "clphys.timeseries", "clphys.sde", "clphys.muca",
                  "clphys.runtime")


def _public_callables_with_device():
    out = set()
    for modname in PUBLIC_MODULES:
        mod = importlib.import_module(modname)
        names = getattr(mod, "__all__", None) or [n for n in vars(mod) if not n.startswith("_")]
        for name in names:
            obj = getattr(mod, name, None)
            if not callable(obj) or getattr(obj, "__module__", "").split(".")[0] != "clphys":
                continue
            try:
                params = inspect.signature(obj).parameters
            except (TypeError, ValueError):
                continue
            if "device" in params:
                out.add(f"{modname}.{name}")
    return out


def test_every_public_entry_point_has_a_case():
    public = _public_callables_with_device()
    missing = sorted(public - set(ENTRY_POINTS))
    assert not missing, f"add portability cases for {missing} to tests/portability_cases.py"
    unknown = sorted(c for cases in ENTRY_POINTS.values() for c in cases if c not in CASES)
    assert not unknown, unknown
    assert len(public) >= 20          # the introspection found the API


def test_hash_file_names_its_producers():
    table = load_hashes()
    assert set(BITS) - {n for n, c in BITS.items() if c.same_as} == set(table["hashes"])
    assert table["produced_by"] and all(isinstance(s, str) for s in table["produced_by"])


@pytest.mark.parametrize("name", sorted(BITS))
def test_same_bits_everywhere(device, name):
    got = digest(results(name, device))
    want = expected_hash(name, load_hashes()["hashes"])
    assert got == want, (f"{name} on {device.name} ({device.facts.driver}) gave hash {got}, the "
                         f"checked-in one is {want} (tests/record_portability_hashes.py prints them)")


def _fp64_reference():
    """The device the floating-point cases are compared with: PoCL with fp64
    where usable, else any usable fp64 device."""
    usable = [s.facts for s in survey(include_simulators=False) if s.usable and s.facts.fp64]
    usable.sort(key=lambda f: f.vendor != "pocl")
    return clphys.device(usable[0].index) if usable else None


@functools.lru_cache(maxsize=None)
def _reference_results(name):
    return results(name, _fp64_reference())


def _compare(name, got, want, dev):
    """`got` within the case's tolerance of `want`. Jackknife errors ("*_err") of the
    time series are an exception: their blocks are whole tiles, and a GPU's tiles
    differ from a CPU's, so only their size must agree, within the spread of two
    16-block estimates (each good to about 18 %: median 25 %, at most a factor 2)."""
    case = CLOSE[name]
    assert set(got) == set(want)
    for key, a in got.items():
        b = want[key]
        assert a.shape == b.shape, (name, key, a.shape, b.shape)
        assert np.array_equal(np.isnan(a), np.isnan(b)), (name, key, "NaNs differ")
        if case.sigmas:
            if key.endswith("_err"):
                continue
            err = np.hypot(got[key + "_err"], want[key + "_err"])
            bad = np.abs(a - b) > case.sigmas * err
            assert not bad.any(), (f"{name}: {key} on {dev.name} {a} vs fp64 {b}, more than "
                                   f"{case.sigmas} sigma ({err}) apart")
        elif key.endswith("_err") and not np.allclose(a, b, rtol=case.rtol, atol=case.atol, equal_nan=True):
            with np.errstate(divide="ignore", invalid="ignore"):
                rel = np.abs(a - b) / np.abs(b)
            rel = rel[np.isfinite(rel)]
            assert np.median(rel) < 0.25 and rel.max() < 1.0, (
                f"{name}: {key} on {dev.name} differs from the fp64 device's by {np.median(rel):.2f} "
                f"(median) and {rel.max():.2f} (largest), relative")
        else:
            ok = np.isclose(a, b, rtol=case.rtol, atol=case.atol, equal_nan=True)
            worst = np.nanmax(np.abs(a - b)) if a.size else 0.0
            assert ok.all(), (f"{name}: {key} on {dev.name} differs from the fp64 device by up to "
                              f"{worst:.3g} (rtol {case.rtol}, atol {case.atol})")


@pytest.mark.parametrize("name", sorted(CLOSE))
def test_agrees_with_the_fp64_device(device, name):
    case = CLOSE[name]
    if case.fp64 and not device.facts.fp64:
        with pytest.raises(ValueError, match="fp64"):
            results(name, device)
        return
    got = results(name, device)
    for key, a in got.items():
        assert not np.isinf(a).any(), (name, key)
    ref = _fp64_reference()
    if ref is None:
        pytest.skip("no usable fp64 device to compare with")
    if ref.facts.cache_id == device.facts.cache_id:
        return                       # the reference itself: the domain tests check it
    _compare(name, got, _reference_results(name), device)


def _cli(args, dev):
    env = dict(os.environ, CLPHYS_DEVICE=dev.facts.index, PYTHONUNBUFFERED="1")
    r = subprocess.run([sys.executable, "-m", "clphys.cli", *args], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def _numbers(out):
    """The printed results: without the lines of times and speeds, and without the
    device's name (and its kernel options) at the end of the first line."""
    lines = [ln for ln in out.splitlines() if not re.match(r"(time|wall|speed|production)\b", ln)]
    return [re.sub(r" on .*$", "", lines[0])] + lines[1:]


@functools.lru_cache(maxsize=None)
def _reference_cli(args):
    return _numbers(_cli(list(args), _fp64_reference()))


@pytest.mark.parametrize("args", [
    ("ising", "--dim", "2", "--size", "64", "--temperature", "2.269", "--sweeps", "200"),
    # a fixed production after at most 5 iterations: the same bits in seconds (rusticl's
    # launches cost ~1 ms: the default run to the error target took minutes there)
    ("muca", "--dim", "2", "--size", "8", "--walkers", "128", "--production-blocks", "20",
     "--production-updates", "4096", "--max-iterations", "5"),
], ids=["ising", "muca"])
def test_commands_print_what_the_fp64_device_prints(device, args):
    ref = _fp64_reference()
    if ref is None:
        pytest.skip("no usable fp64 device to compare with")
    if ref.facts.cache_id == device.facts.cache_id:
        pytest.skip("the reference device itself (tests/test_*_cli.py check its output)")
    assert _numbers(_cli(list(args), device)) == _reference_cli(args)


def test_templates_without_fp64_mention_no_double():
    """render() refuses a program with double for a device without fp64 (so no
    device ever gets one); here every test_templates.py case is rendered for fake
    facts without fp64 and searched independently of that check."""
    from clphys.runtime import fake_facts, render
    from clphys.runtime.render import check_no_double
    from test_templates import RENDER_CASES
    for vendor in ("nvidia", "amd", "intel", "pocl"):
        facts = fake_facts(vendor, fp64=False)
        for template, cases in RENDER_CASES.items():
            for params in cases:
                try:
                    src = render(template, facts, **params)
                except ValueError as exc:
                    assert "fp64" in str(exc), (template, params, exc)
                    continue
                code = re.sub(r"//[^\n]*|/\*.*?\*/", "", src, flags=re.S)
                assert not re.search(r"\bdouble\d*\b|cl_khr_fp64", code), (template, params)
    for bad in ("double x = 1.0;", "#pragma OPENCL EXTENSION cl_khr_fp64 : enable", "double4 v;",
                "float y = convert_double(x);", "as_double2(u)"):
        with pytest.raises(ValueError, match="without fp64"):
            check_no_double("t.cl", "__kernel void k() {\n" + bad + "\n}")
    check_no_double("t.cl", "// double in a comment\n/* and\n double here */ float doubled, x_double;")
    with pytest.raises(ValueError, match=r"line 3"):
        check_no_double("t.cl", "/* a\n comment */\ndouble y;")


# The integer codes on the Oclgrind simulator too (seconds each there; with its
# race and uninitialised-value checks on): the same bits.
OCLGRIND_CASES = ["rng.words", "rng.philox", "rng.checksum", "rng.uniform", "timeseries.acrw",
                  "ising.multispin.philox", "ising.blocks.philox"]


@pytest.mark.oclgrind
@pytest.mark.parametrize("name", OCLGRIND_CASES)
def test_same_bits_on_oclgrind(oclgrind, name):
    assert digest(results(name, oclgrind)) == expected_hash(name, load_hashes()["hashes"]), name


def _fp64_options(dev):
    """The options that need fp64, each as a call on `dev`."""
    from clphys.runtime import reduce_sum
    return {
        "hurst: method='fft'": lambda: clphys.timeseries.hurst(np.cumsum(np.ones(4096)), max_lag=8, q=2,
                                                               method="fft", device=dev),
        "sde.Ensemble: dtype='float64'": lambda: clphys.sde.Ensemble(
            clphys.sde.models.BROWNIAN, 64, {"D": 1.0}, 0.01, dtype="float64", device=dev),
        "sde.Kuramoto: dtype='float64'": lambda: clphys.sde.Kuramoto(64, 1.0, dtype="float64", device=dev),
        "reduce_sum: float64 input": lambda: reduce_sum(np.ones(8), device=dev),
        "reduce_sum: accumulate='double'": lambda: reduce_sum(np.ones(8, np.float32), device=dev,
                                                              accumulate="double"),
    }


@pytest.mark.parametrize("option", sorted(_fp64_options(None)))
def test_fp64_options_name_the_function_and_a_device_that_has_it(device, option):
    """Every public function runs without fp64; an option that needs it raises a
    DeviceError (a ValueError too) before any device work, naming the function,
    the missing fp64 and the visible devices that would do. On devices with fp64
    it is checked on a copy whose facts say otherwise."""
    import dataclasses

    from clphys.errors import Fp64Error
    from clphys.runtime import Device
    dev = device
    if device.facts.fp64:
        dev = Device.__new__(Device)
        dev.__dict__.update(device.__dict__)
        dev.facts, dev.programs = dataclasses.replace(device.facts, fp64=False, cache_id="no-fp64"), {}
    built = len(dev.programs)
    with pytest.raises(Fp64Error) as err:
        _fp64_options(dev)[option]()
    assert isinstance(err.value, clphys.DeviceError) and isinstance(err.value, ValueError)
    msg = str(err.value)
    assert msg.startswith(option) and "needs fp64" in msg and dev.name in msg, msg
    have = [s.facts for s in survey(include_simulators=False) if s.facts.fp64]
    assert all(f"{f.index} {f.platform} | {f.name}" in msg for f in have), msg
    assert len(dev.programs) == built            # nothing was built


def test_info_shows_fp64_per_device():
    r = subprocess.run([sys.executable, "-m", "clphys.cli", "info"], capture_output=True, text=True,
                       timeout=300)
    blocks = re.split(r"\n  device ", r.stdout)[1:]
    statuses = {s.facts.index: s.facts for s in survey()}
    assert len(blocks) == len(statuses), r.stdout
    for block in blocks:
        facts = statuses[block.split(":", 2)[0] + ":" + block.split(":", 2)[1]]
        assert re.search(r"\bfp64=yes\b" if facts.fp64 else r"\bfp64=no\b", block), block


@pytest.mark.oclgrind
def test_windowed_autocorrelation_writes_in_bounds_on_oclgrind(oclgrind, monkeypatch):
    """A series too long for the device is worked on in windows. Converting its two
    ends once wrote per-block sums past the end of a small buffer: PoCL did not
    notice, the Intel CPU runtime (buffers in the host heap) aborted. The oclgrind
    fixture fails the test on any invalid access."""
    import dataclasses

    from clphys.timeseries import _pair_sums
    from clphys.timeseries._pair_plan import PairShape
    from timeseries_plans import acf_with
    x = np.diff(np.cumsum(np.random.default_rng(8).standard_normal(8001)))
    t = PairShape(wg=8, lags_per_item=4, tile=64, run_length=16)
    whole = acf_with(x, 100, device=oclgrind, pair_shape=t).rho
    monkeypatch.setattr(oclgrind, "facts", dataclasses.replace(oclgrind.facts, global_mem=120_000,
                                                               max_alloc=40_000))
    monkeypatch.setattr(_pair_sums, "FIRST_SLICE_PAIRS", {True: 1, False: 1})
    assert np.array_equal(acf_with(x, 100, device=oclgrind, pair_shape=t).rho, whole)
