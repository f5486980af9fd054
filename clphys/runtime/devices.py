"""Device discovery, selection and the per-device context, queue and program cache.

Selection rules (README "Choosing a device"):

* ``device=`` argument of a public function: a spec string, a :class:`Device`
  or a ``pyopencl.Device``;
* otherwise the innermost ``with clphys.device(...)`` block;
* otherwise ``CLPHYS_DEVICE``, then ``PYOPENCL_CTX``;
* otherwise the first GPU, then the first CPU.

A spec is PyOpenCL's ``platform:device`` syntax. Each part is an index or a
case-insensitive substring; the device part also matches the device type
(``cpu``, ``gpu``, ``accelerator``). A single part that names no platform is
tried against device names (``CLPHYS_DEVICE=H100``). The Oclgrind simulator
is never picked unless its platform is named (it is a checking tool, hundreds
of times slower): ``CLPHYS_DEVICE=oclgrind``.

A device is *usable* if it builds and runs a trivial program. The probe runs
lazily, the first time a device is considered (never at import), and its
verdict is cached per device for the process. The default selection skips
unusable devices; naming one (a spec that matches only unusable devices, or
``device=`` with one) raises a :class:`DeviceError` that says what is wrong
and how to fix it. The common case is the PoCL bundled with pyopencl's wheels,
whose LLVM does not know CPUs newer than itself ("unknown target CPU").
"""

from __future__ import annotations

import contextlib
import contextvars
import glob
import hashlib
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Union

import pyopencl as cl

from ..errors import DeviceError, Fp64Error
from .facts import DeviceFacts, fake_facts, with_vendor_flags
from .mpi import local_rank, rank_cache_dir
from .render import Program, build, one_builder_per_source, quiet_compiler, source_program

__all__ = ["DeviceFacts", "Device", "DeviceSpec", "DeviceStatus", "devices", "device", "current_device",
           "resolve_device", "survey", "test_devices", "default_candidates", "nvidia_icd_hint",
           "fake_facts", "pocl_fix", "fp64_missing"]

SIMULATOR_PLATFORMS = ("oclgrind",)


def _vendor(platform: cl.Platform, dev: cl.Device) -> str:
    text = f"{platform.name} {platform.vendor} {dev.vendor}".lower()
    for key, names in (("oclgrind", ("oclgrind",)), ("pocl", ("portable computing", "pocl")),
                       ("mesa", ("rusticl", "clover", "mesa")), ("nvidia", ("nvidia",)), ("amd", ("advanced micro", "amd")),
                       ("intel", ("intel",)), ("apple", ("apple",))):
        if any(n in text for n in names):
            return key
    return "other"


def _is_simulator(platform: cl.Platform) -> bool:
    return any(s in platform.name.lower() for s in SIMULATOR_PLATFORMS)


def _is_gpu(platform: cl.Platform, dev: cl.Device) -> bool:
    # Oclgrind reports every type bit at once; it is not a GPU.
    return not _is_simulator(platform) and bool(dev.type & cl.device_type.GPU)


def _is_cpu(platform: cl.Platform, dev: cl.Device) -> bool:
    return not _is_simulator(platform) and bool(dev.type & cl.device_type.CPU)


def _wg_multiple(dev: cl.Device, ctx: cl.Context | None) -> int:
    # Vendor queries only where the extension is advertised (asking otherwise is
    # an API error that Oclgrind's checker reports).
    for ext, attr in (("cl_nv_device_attribute_query", "warp_size_nv"),
                      ("cl_amd_device_attribute_query", "wavefront_width_amd")):
        if ext in dev.extensions:
            try:
                return int(getattr(dev, attr))
            except (cl.Error, AttributeError):
                pass
    if _is_simulator(dev.platform):
        return 1
    try:
        ctx = ctx or cl.Context([dev])
        source = "__kernel void probe(__global int *x) { x[0] = 0; }"
        with quiet_compiler(), one_builder_per_source(_vendor(platform=dev.platform, dev=dev), source):
            prg = cl.Program(ctx, source).build()
        return int(prg.probe.get_work_group_info(
            cl.kernel_work_group_info.PREFERRED_WORK_GROUP_SIZE_MULTIPLE, dev))
    except cl.Error:
        return 1


def _facts(platform: cl.Platform, dev: cl.Device, index: str, ctx=None) -> DeviceFacts:
    fp64 = "cl_khr_fp64" in dev.extensions or bool(getattr(dev, "double_fp_config", 0))
    ident = f"{platform.name}|{platform.version}|{dev.name}|{dev.driver_version}|{dev.version}"
    return with_vendor_flags(DeviceFacts(
        vendor=_vendor(platform, dev), is_gpu=_is_gpu(platform, dev), fp64=fp64,
        max_work_group=int(dev.max_work_group_size), wg_multiple=_wg_multiple(dev, ctx),
        local_mem=int(dev.local_mem_size), compute_units=int(dev.max_compute_units),
        global_mem=int(dev.global_mem_size), max_alloc=int(dev.max_mem_alloc_size),
        cache_id=hashlib.sha256(ident.encode()).hexdigest()[:16],
        name=dev.name.strip(), platform=platform.name.strip(),
        driver=str(dev.driver_version).strip(), index=index))


@contextlib.contextmanager
def _sigint_held_back():
    """SIGINT blocked in this thread for the block's duration.

    OpenCL runtimes start their worker threads when their platform or context is
    created; a thread inherits its creator's signal mask, and so does a process it
    spawns.  PoCL's workers run the system linker when a kernel is first launched:
    with SIGINT blocked there, Ctrl-C (sent to the whole process group) no longer
    kills that linker mid-link, which PoCL answers with abort(); the interrupt
    reaches Python's handler in the main thread as usual."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _platforms():
    try:
        with _sigint_held_back():
            return cl.get_platforms()
    except cl.Error:       # the ICD loader found no platform at all
        return []


def _inventory():
    """[(platform index, platform, device index, device)] for everything visible."""
    out = []
    for pi, p in enumerate(_platforms()):
        try:
            devs = p.get_devices()
        except cl.Error:
            devs = []
        out.extend((pi, p, di, d) for di, d in enumerate(devs))
    return out


def _type_name(platform: cl.Platform, dev: cl.Device) -> str:
    # Oclgrind sets every type bit at once ("ALL | CPU | GPU | ..."): say what it is.
    if _is_simulator(platform):
        return "simulator"
    for bit, name in ((cl.device_type.GPU, "GPU"), (cl.device_type.CPU, "CPU"),
                      (cl.device_type.ACCELERATOR, "accelerator")):
        if dev.type & bit:
            return name
    return "other"


def _describe_inventory(inv) -> str:
    if not inv:
        return "  (no OpenCL platform is visible)" + nvidia_icd_hint(prefix="\n  ")
    lines = [f"  {pi}:{di}  {p.name.strip()} | {d.name.strip()} [{_type_name(p, d)}]"
             for pi, p, di, d in inv]
    return "\n".join(lines)


def _match(part: str, index: int, *names: str) -> bool:
    part = part.strip()
    if part.isdigit():
        return int(part) == index
    return any(part.lower() in n.lower() for n in names)


def _select(spec: object) -> list:
    """[(platform, device, index)] of every device `spec` names, in inventory
    order; DeviceError if none. A simulator is included only where the spec
    names it: its platform by name, or the full ``platform:device`` index."""
    if not isinstance(spec, str):
        raise TypeError(f"device spec must be a string, got {type(spec).__name__}")
    inv = _inventory()
    parts = spec.split(":")
    if len(parts) > 2 or not spec.strip():
        raise ValueError(f"device spec {spec!r}: expected 'platform', 'platform:device' "
                         "or ':device' (each an index or a name substring)")
    pspec, dspec = parts[0].strip(), (parts[1].strip() if len(parts) == 2 else "")
    full_index = pspec.isdigit() and dspec.isdigit()

    def named_simulator(p, pi):
        return full_index or (pspec and not pspec.isdigit() and _match(pspec, pi, p.name, p.vendor))

    hits = [(p, d, f"{pi}:{di}") for pi, p, di, d in inv
            if (not pspec or _match(pspec, pi, p.name, p.vendor))
            and (not dspec or _match(dspec, di, d.name, _type_name(p, d)))
            and (not _is_simulator(p) or named_simulator(p, pi))]
    if not hits and pspec and not dspec and not pspec.isdigit():
        # One part that names no platform: a device name or type (H100, gpu).
        hits = [(p, d, f"{pi}:{di}") for pi, p, di, d in inv
                if not _is_simulator(p) and _match(pspec, di, d.name, _type_name(p, d))]
    if not hits:
        raise DeviceError(f"no OpenCL device matches {spec!r} (the Oclgrind simulator is used only "
                          f"when named: 'oclgrind' or its full index). Visible devices "
                          f"(platform:device):\n{_describe_inventory(inv)}")
    return hits


# --- usability: can the device build and run a trivial program? ---------------

_PROBE_SOURCE = "__kernel void clphys_probe(__global int *x) { x[get_global_id(0)] = 42; }"


def _try_build(device: "Device") -> None:
    """Build and run a trivial program on `device`; raise on any failure.
    (The tests replace this function to simulate a device that cannot build.)"""
    import numpy as np
    if not device.facts.binary_cache:
        # A checking simulator: built like render.build builds for it (from source),
        # not run: anything else disturbs its uninitialised-value checker for the
        # kernels checked later (false reports).
        with quiet_compiler():
            source_program(device.context, _PROBE_SOURCE).build()
        return
    with quiet_compiler(), one_builder_per_source(device.facts.vendor, _PROBE_SOURCE):
        prg = cl.Program(device.context, _PROBE_SOURCE).build()
    buf = cl.Buffer(device.context, cl.mem_flags.WRITE_ONLY, 4)
    prg.clphys_probe(device.queue, (1,), None, buf)
    out = np.zeros(1, np.int32)
    cl.enqueue_copy(device.queue, out, buf)
    if out[0] != 42:
        raise RuntimeError("the probe kernel ran but did not write its result")


def _sudo() -> str:
    return "" if os.geteuid() == 0 or not shutil.which("sudo") else "sudo "


def pocl_fix() -> str:
    """The one command that gives a CPU device when the bundled PoCL cannot."""
    return (f"install your distribution's PoCL, which knows newer CPUs: "
            f"`{_sudo()}apt-get install pocl-opencl-icd` (Debian, Ubuntu) or "
            f"`conda install -c conda-forge pocl`")



def _diagnose(exc: BaseException, facts: DeviceFacts) -> tuple[str, bool]:
    """(one-sentence reason, whether it is the unknown-CPU case) from a probe failure."""
    log = str(exc)
    cpu = re.search(r"unknown target CPU '([^']*)'", log) or re.search(
        r"'([^']*)' is not a recogni[sz]ed processor", log)
    if cpu:
        who = f"this PoCL ({facts.driver})" if facts.vendor == "pocl" else "this OpenCL runtime"
        return (f"the compiler of {who} does not know this CPU: it is older than the processor "
                f"and asked its LLVM for target CPU '{cpu.group(1)}'", True)
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    first = next((ln for ln in lines if "error" in ln.lower()), lines[0] if lines else type(exc).__name__)
    return f"it cannot build and run a trivial OpenCL program ({first[:200]})", False


@dataclass(frozen=True)
class DeviceStatus:
    """A visible device, whether clphys can use it, and why not."""
    facts: DeviceFacts
    usable: bool
    reason: str = ""            # one sentence when not usable
    unknown_cpu: bool = False   # the bundled-PoCL-on-a-new-CPU case (fixed by the distribution's PoCL)

    @property
    def is_simulator(self) -> bool:
        return self.facts.simulator

    def line(self) -> str:
        f = self.facts
        return f"{f.index} {f.platform} | {f.name}"


def _status(platform, cl_device, index) -> DeviceStatus:
    """Open and probe a device once per process (cached on its identity)."""
    key = cl_device.int_ptr
    if key not in _verdicts:
        try:
            dev = _device_for(platform, cl_device, index)
        except DeviceError as exc:
            _verdicts[key] = DeviceStatus(_facts(platform, cl_device, index), False, str(exc))
            return _verdicts[key]
        try:
            _try_build(dev)
            _verdicts[key] = DeviceStatus(dev.facts, True)
        except Exception as exc:      # any failure makes the device unusable, with its reason
            reason, unknown_cpu = _diagnose(exc, dev.facts)
            _verdicts[key] = DeviceStatus(dev.facts, False, reason, unknown_cpu)
    return _verdicts[key]


_verdicts: dict[int, DeviceStatus] = {}


def _unusable_error(statuses: list[DeviceStatus], asked: str) -> DeviceError:
    """The one DeviceError for "what you asked for cannot run here": what is
    wrong with each device, the fix, and the devices that do work."""
    others = [s for s in survey(include_simulators=False) if s.usable]
    lines = [f"No usable OpenCL device for the {asked}."] if asked.startswith("default") else []
    for s in statuses:
        lines.append(f"{s.line()} (driver {s.facts.driver}) cannot be used: {s.reason}.")
    fixes = []
    if any(s.unknown_cpu for s in statuses) and not any(not o.facts.is_gpu for o in others):
        fixes.append(pocl_fix())
    elif statuses:
        fixes.append("update or reinstall that device's OpenCL driver")
    if others:
        fixes.append("choose a working device with CLPHYS_DEVICE or --device: "
                     + "; ".join(s.line() for s in others))
    elif not statuses:
        fixes.append("install an OpenCL driver: for the CPU, pip install 'clphys[pocl]'"
                     + nvidia_icd_hint(prefix=" "))
    lines.append("Fix: " + "; or ".join(fixes) + "."
                 + ("" if others or not statuses else " No other usable device is visible."))
    return DeviceError("\n".join(lines))


def _first_usable(hits, asked: str):
    statuses = []
    for p, d, index in hits:
        st = _status(p, d, index)
        if st.usable:
            return _device_for(p, d, index)
        statuses.append(st)
    raise _unusable_error(statuses, asked)


def _env_spec():
    """(variable, spec) of the environment's device choice, or (None, None). A
    ``;``-separated list in CLPHYS_DEVICE names one device per rank: rank r
    of an MPI launch takes item (local rank mod n)."""
    for var in ("CLPHYS_DEVICE", "PYOPENCL_CTX"):
        spec = os.environ.get(var, "").strip()
        if spec:
            specs = [s.strip() for s in spec.split(";") if s.strip()]
            if len(specs) > 1:
                spec = specs[(local_rank() or 0) % len(specs)]
            return var, spec
    return None, None


def default_candidates() -> list:
    """[(platform, device, index)] the default selection considers, in order:
    the devices `CLPHYS_DEVICE` / `PYOPENCL_CTX` name, else every GPU, else
    every CPU, PoCL then Intel's runtime then others (simulators only where
    named). Not probed."""
    var, spec = _env_spec()
    if spec:
        try:
            return _select(spec)
        except (DeviceError, ValueError) as exc:
            raise DeviceError(f"{var}={spec!r}: {exc}") from None
    inv = [(p, d, f"{pi}:{di}") for pi, p, di, d in _inventory()]
    gpus = [h for h in inv if _is_gpu(h[0], h[1])]
    cpus = [h for h in inv if _is_cpu(h[0], h[1])]
    # Several CPU implementations of one processor: the fastest first, whatever the
    # loader's order (on a 2-core EPYC, 1024^2 Ising: PoCL 0.93, Intel 0.18, rusticl
    # on llvmpipe 0.038 flips/ns, launches 29 us, 19 us and 0.6 ms).
    cpu_order = {"pocl": 0, "intel": 1}
    cpus.sort(key=lambda h: cpu_order.get(_vendor(h[0], h[1]), 2))
    return gpus + cpus


_chosen: dict = {}   # (environment's choice, local rank) -> (_verdicts then, the device)


def _default_choice():
    var, spec = _env_spec()
    local = local_rank()
    # Remembered with the verdicts it was chosen by (the tests start from fresh ones):
    # finding it again lists and matches every device, ~0.15 ms on every public call.
    verdicts, dev = _chosen.get((var, spec, local), (None, None))
    status = _verdicts.get(dev.cl_device.int_ptr) if verdicts is _verdicts else None
    if status is not None and status.usable:
        return dev
    dev = _find_default(var, spec, local)
    _chosen[(var, spec, local)] = (_verdicts, dev)
    return dev


def _find_default(var, spec, local):
    asked = f"{var}={spec!r}" if spec else "default selection (first usable GPU, then CPU)"
    hits = default_candidates()
    if not hits:
        raise DeviceError("no OpenCL GPU or CPU device found. Visible devices:\n"
                          + _describe_inventory(_inventory())
                          + "\nInstall PoCL for the CPU: pip install 'clphys[pocl]'")
    if local is None:
        return _first_usable(hits, asked)
    # Under an MPI launcher: rank r takes the (local rank mod k)-th of the k
    # usable candidates (GPUs where there are any), one device per rank.
    statuses = [(h, _status(*h)) for h in hits]
    usable = [h for h, st in statuses if st.usable]
    pool = [h for h in usable if _is_gpu(h[0], h[1])] or usable
    if not pool:
        raise _unusable_error([st for _, st in statuses], asked)
    return _device_for(*pool[local % len(pool)])
class Device:
    """One OpenCL device with its own context, in-order queue and program cache.

    Obtain it with :func:`clphys.device`; a ``with`` block makes it the default.
    Devices are shared: asking twice for the same device gives the same object.
    """

    def __init__(self, platform: cl.Platform, cl_device: cl.Device, index: str):
        self.platform = platform
        self.cl_device = cl_device
        with _sigint_held_back():                # the runtime's threads: see there
            self.context = cl.Context([cl_device])
            self.queue = cl.CommandQueue(self.context)
        self.facts = _facts(platform, cl_device, index, self.context)
        self.programs: dict[tuple, Program] = {}    # (cache id, source hash, options), see render.py
        self.cache_dir = rank_cache_dir()   # each MPI rank its own binary cache; else PyOpenCL's
        self._tokens: list[contextvars.Token] = []

    @property
    def name(self) -> str:
        return self.facts.name

    def build(self, template: str, options: Iterable[str] = (), **params: object) -> Program:
        """Render `template` for this device with `params`, build it once, return
        the program (kernels as attributes)."""
        return build(self, template, options=options, **params)

    def __enter__(self):
        self._tokens.append(_current.set(self))
        return self

    def __exit__(self, *exc):
        _current.reset(self._tokens.pop())
        return False

    def __repr__(self):
        return f"<clphys.Device {self.facts.index} {self.facts.platform} | {self.name}>"


# What a public function's ``device=`` takes (see device()).
DeviceSpec = Union[Device, cl.Device, str, None]

_current: contextvars.ContextVar[Device | None] = contextvars.ContextVar("clphys_device", default=None)
_by_id: dict[int, Device] = {}


def _device_for(platform, cl_device, index) -> Device:
    key = cl_device.int_ptr
    if key not in _by_id:
        try:
            _by_id[key] = Device(platform, cl_device, index)
        except cl.Error as exc:
            raise DeviceError(f"cannot open {cl_device.name.strip()}: {exc}") from None
    return _by_id[key]


def device(spec: DeviceSpec = None) -> Device:
    """The usable device named by `spec` (see module doc); ``None`` applies the
    defaults. Among several matches the first usable one is taken; if none is
    usable, a DeviceError says why and how to fix it.

    Use as ``with clphys.device("nvidia"):`` to make it the default inside the
    block, or keep the returned object and pass it as ``device=``.
    """
    if isinstance(spec, Device):
        return spec
    if isinstance(spec, cl.Device):
        return _first_usable([(spec.platform, spec, "")], f"device={spec.name.strip()!r}")
    if spec is None:
        return _default_choice()
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        raise TypeError(f"device={spec!r}: pass a spec string such as '1:0' (platform:device indices, "
                        f"as `clphys info` lists them), 'nvidia', 'portable:cpu' or 'H100', a "
                        f"clphys.Device or a pyopencl.Device")
    return _first_usable(_select(spec), f"device {spec!r}")


def resolve_device(dev: DeviceSpec = None) -> Device:
    """What every public function calls on its ``device=`` argument."""
    current = _current.get()
    if dev is None and current is not None:
        return current
    return device(dev)


def current_device() -> Device:
    """The device a public function would use now with ``device=None``."""
    return resolve_device(None)


def devices(include_simulators: bool = True) -> list[DeviceFacts]:
    """Facts of every visible device (opens no context except to probe the
    preferred work-group multiple where the driver does not report it)."""
    return [_facts(p, d, f"{pi}:{di}") for pi, p, di, d in _inventory()
            if include_simulators or not _is_simulator(p)]


def survey(include_simulators: bool = True) -> list[DeviceStatus]:
    """Every visible device with its usability verdict (probes each once)."""
    return [_status(p, d, f"{pi}:{di}") for pi, p, di, d in _inventory()
            if include_simulators or not _is_simulator(p)]


def test_devices() -> list[str]:
    """Specs of the devices the test suite runs on: ``CLPHYS_TEST_DEVICES``
    (``;``-separated specs, used as given: an unusable one fails its tests),
    or every usable visible device except simulators."""
    env = os.environ.get("CLPHYS_TEST_DEVICES", "").strip()
    if env:
        return [s.strip() for s in env.split(";") if s.strip()]
    return [s.facts.index for s in survey(include_simulators=False) if s.usable]


def fp64_missing(device: "Device", what: str, instead: str) -> Fp64Error:
    """The error for `what` (function and option, e.g. "hurst: method='fft'") on
    `device`, which lacks fp64: it names `instead` and the visible devices with fp64."""
    have = [f"{pi}:{di} {p.name.strip()} | {d.name.strip()}" for pi, p, di, d in _inventory()
            if not _is_simulator(p) and "cl_khr_fp64" in d.extensions]
    where = ("; or a device with fp64: " + "; ".join(have)) if have else \
        " (no visible device has fp64: PoCL gives one on the CPU, pip install 'clphys[pocl]')"
    return Fp64Error(f"{what} needs fp64 (double precision, cl_khr_fp64), which {device.name} lacks; "
                     f"use {instead}{where}")


_NVIDIA_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                    "/usr/lib", "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib")


def nvidia_icd_hint(prefix: str = "") -> str:
    """If NVIDIA's OpenCL driver library is installed but no ICD file names it,
    the one-line fix; else an empty string."""
    lib = None
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if "libnvidia-opencl.so.1" in line and "=>" in line:
                lib = line.split("=>")[-1].strip()
                break
    except (OSError, subprocess.SubprocessError):
        pass
    if lib is None:      # not in ld's cache: the usual driver directories (no deep search)
        found = [p for d in _NVIDIA_LIB_DIRS for p in glob.glob(os.path.join(d, "libnvidia-opencl.so.1"))]
        lib = found[0] if found else None
    if lib is None:
        return ""
    vendor_dir = os.environ.get("OCL_ICD_VENDORS", "/etc/OpenCL/vendors")
    for icd in glob.glob(os.path.join(vendor_dir, "*.icd")):
        try:
            if "nvidia" in open(icd).read().lower():
                return ""
        except OSError:
            pass
    sudo = _sudo()
    return (f"{prefix}NVIDIA's OpenCL driver {lib} is installed but no ICD file in {vendor_dir} "
            f"names it. Fix:{prefix}  {sudo}mkdir -p {vendor_dir} && echo {lib} | "
            f"{sudo}tee {vendor_dir}/nvidia.icd")
