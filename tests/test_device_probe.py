"""Device usability: a device that cannot build a trivial program is
never picked by default, naming it says what is wrong and how to fix it, and
`clphys info`, the CLI and the test suite itself report it. A failing build is
injected (tests/fake_unknown_cpu.py), so no broken device is needed."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pyopencl as cl
import pytest

import clphys
import fake_unknown_cpu
from clphys.cli import main

devices_module = sys.modules["clphys.runtime.devices"]
TESTS = Path(__file__).resolve().parent


@pytest.fixture
def fresh_probes(monkeypatch):
    """Forget probe verdicts (and the env's device choice) for one test."""
    monkeypatch.setattr(devices_module, "_verdicts", {})
    monkeypatch.delenv("CLPHYS_DEVICE", raising=False)
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    monkeypatch.setattr(devices_module, "_current", devices_module.contextvars.ContextVar("t", default=None))


@pytest.fixture
def unknown_cpu(fresh_probes, monkeypatch):
    """Every non-simulator device fails its probe like the pip PoCL on a new CPU."""
    calls = []

    def counting(device):
        calls.append(device.facts.index)
        return fake_unknown_cpu.fake_try_build(device)

    monkeypatch.setenv("FAKE_UNKNOWN_CPU", "all")
    monkeypatch.setattr(devices_module, "_try_build", counting)
    return calls


FIX = ("apt-get install pocl-opencl-icd", "conda install -c conda-forge pocl")


def test_import_probes_nothing():
    code = ("import sys, clphys; d = sys.modules['clphys.runtime.devices']; "
            "assert not d._verdicts and not d._by_id, 'probed at import'")
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))


def test_usable_devices_pass_the_probe(device, fresh_probes):
    st = {s.facts.index: s for s in clphys.runtime.survey()}
    assert st[device.facts.index].usable and st[device.facts.index].reason == ""


def test_the_probe_hides_a_build_log_unless_asked(device, fresh_probes, monkeypatch):
    """NVIDIA's driver logs the probe's build: PyOpenCL's warning about the log
    must not greet every first use (PYOPENCL_COMPILER_OUTPUT=1 still shows it)."""
    real_build = cl.Program.build

    def logging_build(self, *args, **kwargs):
        built = real_build(self, *args, **kwargs)
        warnings.warn("Non-empty compiler output encountered.", cl.CompilerWarning, stacklevel=2)
        return built

    monkeypatch.setattr(cl.Program, "build", logging_build)
    for asked in (False, True):
        if asked:
            monkeypatch.setenv("PYOPENCL_COMPILER_OUTPUT", "1")
        else:
            monkeypatch.delenv("PYOPENCL_COMPILER_OUTPUT", raising=False)
        monkeypatch.setattr(devices_module, "_verdicts", {})
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert any(s.usable for s in clphys.runtime.survey())
        shown = [w for w in seen if issubclass(w.category, cl.CompilerWarning)]
        assert bool(shown) == asked, (asked, [str(w.message) for w in seen])


def test_unknown_cpu_is_reported_and_skipped(unknown_cpu):
    statuses = clphys.runtime.survey(include_simulators=False)
    assert statuses and not any(s.usable for s in statuses)
    for s in statuses:
        assert s.unknown_cpu and "does not know this CPU" in s.reason and "'generic'" in s.reason
    n = len(unknown_cpu)
    clphys.runtime.survey(include_simulators=False)
    assert len(unknown_cpu) == n, "verdicts must be cached per device for the process"
    assert clphys.runtime.test_devices() == [] or os.environ.get("CLPHYS_TEST_DEVICES")
    with pytest.raises(clphys.DeviceError) as err:
        clphys.current_device()
    msg = str(err.value)
    assert "No usable OpenCL device" in msg and "does not know this CPU" in msg
    assert all(f in msg for f in FIX), msg
    assert "Rendered source" not in msg


def test_naming_a_broken_device_says_why_and_lists_working_ones(device, fresh_probes, monkeypatch):
    monkeypatch.setenv("FAKE_UNKNOWN_CPU", device.facts.index)
    monkeypatch.setattr(devices_module, "_try_build", fake_unknown_cpu.fake_try_build)
    for spec in (device.facts.index, device):
        with pytest.raises(clphys.DeviceError) as err:
            clphys.device(spec.cl_device if isinstance(spec, clphys.Device) else spec)
        msg = str(err.value)
        assert msg.startswith(device.facts.index) and "cannot be used" in msg, msg
        assert "does not know this CPU" in msg
        others = [s for s in clphys.runtime.survey(include_simulators=False) if s.usable]
        if others:
            assert "choose a working device" in msg and others[0].line() in msg
        else:
            assert all(f in msg for f in FIX) and "No other usable device" in msg
    monkeypatch.setenv("CLPHYS_DEVICE", device.facts.index)
    with pytest.raises(clphys.DeviceError, match="cannot be used"):
        clphys.current_device()


def test_default_selection_moves_on_to_the_next_candidate(device, fresh_probes, monkeypatch):
    # Candidates: the device under test (made to fail), then a usable one.
    monkeypatch.setenv("FAKE_UNKNOWN_CPU", device.facts.index)
    monkeypatch.setattr(devices_module, "_try_build", fake_unknown_cpu.fake_try_build)
    inv = devices_module._inventory()
    hits = [(p, d, f"{pi}:{di}") for pi, p, di, d in inv]
    broken = [h for h in hits if h[2] == device.facts.index]
    working = [h for h in hits if h[2] != device.facts.index]
    if not working:
        pytest.skip("only one OpenCL device is visible")
    monkeypatch.setattr(devices_module, "default_candidates", lambda: broken + working[:1])
    assert clphys.current_device().facts.index == working[0][2]


def test_other_build_failures_name_the_error(device, fresh_probes, monkeypatch):
    def failing(dev):
        raise RuntimeError("clBuildProgram failed\nerror: the driver ran out of resources")
    monkeypatch.setattr(devices_module, "_try_build", failing)
    with pytest.raises(clphys.DeviceError) as err:
        clphys.device(device.facts.index)
    msg = str(err.value)
    assert "cannot build and run a trivial OpenCL program" in msg and "ran out of resources" in msg
    assert "reinstall that device's OpenCL driver" in msg


def test_cli_prints_the_advice_not_a_traceback(unknown_cpu, capsys):
    assert main(["ising", "--dim", "2", "--size", "1024", "--temperature", "2.269", "--sweeps", "1000"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("clphys ising: error: No usable OpenCL device")
    assert all(f in err for f in FIX) and "Traceback" not in err
    assert main(["info"]) == 1
    out = capsys.readouterr().out
    assert "NOT USABLE: the compiler of this PoCL" in out or "NOT USABLE: the compiler of this OpenCL" in out
    assert "no device selected" in out and FIX[0] in out


def test_info_marks_devices_and_the_selection(device, fresh_probes, capsys, monkeypatch):
    monkeypatch.setenv("CLPHYS_DEVICE", device.facts.index)
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert f"device {device.facts.index}:" in out and "usable" in out
    assert f"selected (CLPHYS_DEVICE / PYOPENCL_CTX / first usable GPU / first usable CPU): " \
           f"{device.facts.index}" in out
    if any(f.vendor == "oclgrind" for f in clphys.devices()):
        assert "[simulator]" in out and "used only when named" in out


def test_specs_never_pick_the_simulator_unless_named(device):
    for spec in (":0", "0", ":cpu", "cpu", device.facts.index.split(":")[0]):
        try:
            dev = clphys.device(spec)
        except clphys.DeviceError:
            continue            # a spec may match nothing usable here; it must not fall to Oclgrind
        assert dev.facts.vendor != "oclgrind", spec
    sims = [f for f in clphys.devices() if f.vendor == "oclgrind"]
    if sims:
        assert clphys.device("oclgrind").facts.vendor == "oclgrind"
        assert clphys.device(sims[0].index).facts.vendor == "oclgrind"    # the full index names it


def test_int_device_says_what_is_accepted():
    with pytest.raises(TypeError, match="spec string such as '1:0'"):
        clphys.device(0)


def test_build_error_without_line_numbers_has_no_empty_source_section(device, monkeypatch):
    render = sys.modules["clphys.runtime.render"]
    import pyopencl as cl

    class FailingProgram:
        def __init__(self, *a, **k):
            pass

        def build(self, options=()):
            raise cl.RuntimeError(fake_unknown_cpu.BUILD_LOG)

    monkeypatch.setattr(render.cl, "Program", FailingProgram)
    monkeypatch.setattr(device, "programs", {})
    with pytest.raises(clphys.BuildError) as err:
        render.build(device, "rng/generate.cl", generator="philox", output="words")
    msg = str(err.value)
    assert "unknown target CPU" in msg and "Rendered source around the error" not in msg
    assert "CLPHYS_KEEP_SOURCE" in msg


def _pytest(args, **env):
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(TESTS), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep), **env)
    full.pop("CLPHYS_TEST_DEVICES", None)
    full.pop("CLPHYS_PORTABILITY_DEVICES", None)
    full.update({k: v for k, v in env.items()})
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "plugin_unknown_cpu", "-p", "no:cacheprovider",
                           *args], capture_output=True, text=True, env=full, cwd=TESTS.parent)


@pytest.mark.slow
def test_suite_without_usable_devices_fails_with_the_reason():
    r = _pytest([str(TESTS / "test_rng.py"), "-k", "bad_input"], FAKE_UNKNOWN_CPU="all")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "clphys test devices: NONE" in out and "clphys skipped device" in out
    assert "does not know this CPU" in out and "no usable OpenCL device to test on" in out
    assert "passed" not in out.splitlines()[-1] and "skipped" not in out.splitlines()[-1]


@pytest.mark.slow
def test_suite_fails_loudly_for_a_named_broken_device(device):
    spec = device.facts.index
    r = _pytest([str(TESTS / "test_rng.py"), "-k", "bad_input"], FAKE_UNKNOWN_CPU=spec,
                CLPHYS_TEST_DEVICES=spec)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and f"test device {spec!r} cannot be used" in out, out


def test_pocl_builds_of_one_source_take_turns_across_processes(device, monkeypatch, tmp_path):
    """PoCL's kernel cache loses a build when processes (MPI ranks) build the same
    source at once: during a PoCL build (render.build and the usability probe) the
    host-wide lock of that source is held, so a second process would wait; other
    runtimes build unlocked. (The locks go to tmp_path: no other process takes them.)"""
    import fcntl
    import hashlib

    import pyopencl as cl
    render = sys.modules["clphys.runtime.render"]
    devices = sys.modules["clphys.runtime.devices"]
    monkeypatch.setattr(render, "_build_lock_folder", lambda: str(tmp_path))

    def held_by_another(source):
        with open(tmp_path / hashlib.sha256(source.encode()).hexdigest()[:2], "a") as other:
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)    # another open file: another holder
            except BlockingIOError:
                return True
            fcntl.flock(other, fcntl.LOCK_UN)
            return False

    with render.one_builder_per_source("pocl", "a source"):
        assert held_by_another("a source")
    assert not held_by_another("a source")                          # released
    with render.one_builder_per_source("intel", "a source"):
        assert not held_by_another("a source")

    held = []

    class ProbingProgram:
        def __init__(self, context, source):
            self.source = source

        def build(self, options=(), cache_dir=None):
            held.append(held_by_another(self.source))
            raise cl.RuntimeError("probe: no program")

    monkeypatch.setattr(render.cl, "Program", ProbingProgram)
    monkeypatch.setattr(render, "source_program", ProbingProgram)
    monkeypatch.setattr(device, "programs", {})
    with pytest.raises(clphys.BuildError, match="probe: no program"):
        render.build(device, "rng/generate.cl", generator="philox", output="words")
    with pytest.raises(cl.RuntimeError, match="probe: no program"):
        devices._try_build(device)        # noqa: SLF001
    assert held == [device.facts.vendor == "pocl"] * 2
