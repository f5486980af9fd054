"""Make devices fail their usability probe the way the pip PoCL fails on a CPU
its LLVM does not know ("unknown target CPU 'generic'").

Unit tests monkeypatch ``fake_try_build`` in; a whole pytest run gets it
with ``-p plugin_unknown_cpu`` (tests/ on PYTHONPATH), which installs it
before conftest.py probes the devices. ``FAKE_UNKNOWN_CPU`` chooses the victims: ``all`` (every
non-simulator device, the default), ``;``-separated ``platform:device``
indices, or ``driver:TEXT`` (devices whose driver version contains TEXT).
"""

import os
import sys

import clphys.runtime.devices  # noqa: F401  (the module, not the function of that name)

_devices = sys.modules["clphys.runtime.devices"]
_real_try_build = _devices._try_build

BUILD_LOG = ("clBuildProgram failed: BUILD_PROGRAM_FAILURE - clBuildProgram failed: "
             "BUILD_PROGRAM_FAILURE\n\nBuild on <pyopencl.Device 'pthread-AMD EPYC 9B45 128-Core "
             "Processor' on 'Portable Computing Language'>:\n\n"
             "error: unknown target CPU 'generic'\n"
             "note: valid target CPU values are: nocona, core2, penryn, bonnell, atom, ...\n")


def is_victim(facts) -> bool:
    which = os.environ.get("FAKE_UNKNOWN_CPU", "all").strip()
    if facts.vendor == "oclgrind":
        return False
    if which.startswith("driver:"):
        return which[len("driver:"):] in facts.driver
    return which == "all" or facts.index in [w.strip() for w in which.split(";")]


def fake_try_build(device):
    if is_victim(device.facts):
        raise RuntimeError(BUILD_LOG)
    return _real_try_build(device)


def install():
    _devices._try_build = fake_try_build
