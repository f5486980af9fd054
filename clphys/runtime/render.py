"""Render Mako templates from cl_kernels/ and build them once per device.

* ``render(template, facts, **params)`` -> OpenCL C source (no device needed);
* ``build(device, template, options=(), **params)`` -> :class:`Program`, cached
  in memory per device by (cache id, source hash, options) on top of
  PyOpenCL's disk cache of binaries.
* ``CLPHYS_KEEP_SOURCE=DIR`` writes every rendered program to DIR.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyopencl as cl
from mako.lookup import TemplateLookup

from ..errors import BuildError, DeviceError
from .facts import DeviceFacts

if TYPE_CHECKING:
    from .devices import Device

__all__ = ["kernel_dir", "render", "build", "Program", "launched_kernels", "kernels_launched_on",
           "template_names", "source_program", "one_builder_per_source"]


def kernel_dir() -> Path:
    """cl_kernels/: installed as package data clphys/cl_kernels, or at the top
    of a source checkout."""
    installed = Path(__file__).resolve().parent.parent / "cl_kernels"
    if installed.is_dir():
        return installed
    source = Path(__file__).resolve().parents[2] / "cl_kernels"
    if source.is_dir():
        return source
    raise FileNotFoundError(f"clphys kernels not found in {installed} or {source}")


_lookup = None


def _get_lookup() -> TemplateLookup:
    global _lookup
    if _lookup is None:
        _lookup = TemplateLookup(directories=[str(kernel_dir())], strict_undefined=True,
                                 input_encoding="utf-8")
    return _lookup


def template_names() -> list[str]:
    """Every .cl template, as the path relative to cl_kernels/ used by render()."""
    root = kernel_dir()
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.cl"))


def render(template: str, facts: DeviceFacts, **params: object) -> str:
    """The OpenCL C source of `template` (a path relative to cl_kernels/) for
    a device with `facts`; `params` are the template's compile-time parameters."""
    if not isinstance(facts, DeviceFacts):
        raise TypeError(f"render: facts must be DeviceFacts, got {type(facts).__name__}")
    tpl = _get_lookup().get_template("/" + template.lstrip("/"))
    source = tpl.render(dev=facts, **params)
    check_vector_widths(template, source)
    if not facts.fp64:
        check_no_double(template, source)
    return source


_DOUBLE = re.compile(r"\b(?:double\d*|cl_khr_fp64|convert_double\w*|as_double\d*)\b")


def _code(source: str) -> str:
    """`source` without its comments (their line breaks kept)."""
    return re.sub(r"//[^\n]*|/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), source, flags=re.S)


def check_no_double(template: str, source: str) -> None:
    """No `double` (nor cl_khr_fp64) in a program for a device without fp64: such a
    device refuses to build it (Mesa rusticl, most Intel, Apple and mobile GPUs).
    Templates choose float and compensated sums from ``dev.fp64``; this catches one
    that forgot."""
    code = _code(source)
    hit = _DOUBLE.search(code)
    if hit:
        line = code.count("\n", 0, hit.start()) + 1
        raise ValueError(f"{template} rendered {hit.group(0)!r} (line {line}) for a device without "
                         "fp64; its template must choose float or compensated sums from dev.fp64")


# conversions to vectors of 512 bits or more (see check_vector_widths)
_WIDE_CONVERT = re.compile(r"\bconvert_(?:(?:u?long|double)(?:8|16)|(?:u?int|float)16)\w*\s*\(")
# what PoCL's compiler says of a built-in call whose vectors its library passes otherwise
ABI_WARNING = "changes the ABI"


def check_vector_widths(template: str, source: str) -> None:
    """No convert_ call to a vector of 512 bits or more (convert_ulong8): PoCL's built-in
    library can be built for AVX-512 while its compiler targets AVX2 (the pip PoCL's
    LLVM 14 on AMD Zen 4 CPUs), and then built-in calls on such vectors return garbage
    (multispin's Philox lanes gave wrong spins).  Arithmetic on such vectors is no call
    and is fine.  build() also refuses any program whose build log reports such a call
    (ABI_WARNING)."""
    wide = _WIDE_CONVERT.search(_code(source))
    if wide:
        raise ValueError(f"{template} calls {wide.group(0).rstrip('( ')}, a built-in on a vector "
                         "of 512 bits or more, which gives wrong results on some PoCLs; widen and "
                         "narrow lane by lane in vector literals, as ising/common.cl's mulw does")


_launched: set[tuple[str, str, str]] = set()


def launched_kernels() -> set[tuple[str, str]]:
    """(device vendor, kernel name) of every kernel launched in this process
    (for the test suite's Oclgrind coverage check)."""
    return {(vendor, name) for vendor, name, _ in _launched}


def kernels_launched_on(cache_id: str) -> set[str]:
    """Names of the kernels launched in this process on the device whose facts
    have `cache_id` (for the test suite's coverage checks per device)."""
    return {name for _, name, cid in _launched if cid == cache_id}


def _set_scalar(kernel, index, value):
    # PyOpenCL's set_arg spends ~6 us on a NumPy scalar; the raw buffer path
    # that its own generated invokers use takes ~0.1 us.
    setter = getattr(kernel, "_set_arg_buf", None)
    if setter is None:
        kernel.set_arg(index, value)
    else:
        setter(index, value)


def _same_arg(a, b) -> bool:
    # Buffers by identity (the cached reference keeps the old one alive, so an
    # id cannot be reused); NumPy scalars by type and value.
    return a is b or (isinstance(a, np.generic) and type(a) is type(b) and a == b)


class Kernel:
    """A built kernel; calling it launches it like a pyopencl.Kernel.

    Only the arguments that differ from the previous launch of this kernel
    are set again: a launch then costs a few microseconds of host time, which
    is what keeps small lattices and many-launch loops from being host bound.
    """

    __slots__ = ("name", "cl_kernel", "_tag", "_args", "_wait")

    def __init__(self, name: str, cl_kernel: cl.Kernel, vendor: str, cache_id: str = "",
                 queued_launches: bool = True):
        self.name, self.cl_kernel, self._tag = name, cl_kernel, (vendor, name, cache_id)
        self._args: list | None = None
        self._wait = not queued_launches

    def __call__(self, queue: cl.CommandQueue, global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
                 *args: object, wait_for: Sequence[cl.Event] | None = None) -> cl.Event:
        _launched.add(self._tag)
        last = self._args
        if last is None or len(last) != len(args):
            self.cl_kernel.set_args(*args)
            self._args = list(args)
        else:
            for i, a in enumerate(args):
                if not _same_arg(a, last[i]):
                    if isinstance(a, np.generic):
                        _set_scalar(self.cl_kernel, i, a)
                    else:
                        self.cl_kernel.set_arg(i, a)
                    last[i] = a
        event = cl.enqueue_nd_range_kernel(queue, self.cl_kernel, global_size, local_size,
                                           wait_for=wait_for)
        if self._wait:
            # Run each kernel before the next is enqueued: with queued launches
            # Oclgrind's uninitialised-value checker lost writes (false reports).
            event.wait()
        return event

    def work_group_limit(self, device: Device) -> int:
        """The largest work group this kernel can run with on `device` (its
        registers can cap it below the device's maximum)."""
        return int(self.cl_kernel.get_work_group_info(
            cl.kernel_work_group_info.WORK_GROUP_SIZE, device.cl_device))


class Program:
    """A built program; its kernels are attributes (created once each)."""

    def __init__(self, cl_program: cl.Program, source: str, vendor: str = "", cache_id: str = "",
                 queued_launches: bool = True):
        self.cl_program, self.source, self.vendor, self.cache_id = cl_program, source, vendor, cache_id
        self.queued_launches = queued_launches
        self._kernels: dict[str, Kernel] = {}
        self.kernel_names = [k for k in cl_program.get_info(cl.program_info.KERNEL_NAMES).split(";") if k]

    def __getattr__(self, name):
        if name.startswith("_") or name not in self.kernel_names:
            raise AttributeError(f"program has no kernel {name!r}; it has {self.kernel_names}")
        if name not in self._kernels:
            self._kernels[name] = Kernel(name, getattr(self.cl_program, name), self.vendor, self.cache_id,
                                         self.queued_launches)
        return self._kernels[name]

    def instance(self, name: str) -> Kernel:
        """A new Kernel `name` with its own arguments: loops that alternate
        between fixed argument sets (colours, buffer pairs) keep one instance
        per set, so that a launch re-sets only what changes between its own
        launches (setting a buffer argument costs microseconds of host time)."""
        getattr(self, name)                       # the same checks
        return Kernel(name, cl.Kernel(self.cl_program, name), self.vendor, self.cache_id,
                      self.queued_launches)


def _keep_source(template: str, source: str, digest: str):
    keep = os.environ.get("CLPHYS_KEEP_SOURCE")
    if keep:
        os.makedirs(keep, exist_ok=True)
        stem = template.replace("/", "_").removesuffix(".cl")
        Path(keep, f"{stem}-{digest[:12]}.cl").write_text(source)


def _source_excerpt(source: str, log: str, context: int = 4) -> str:
    lines = source.splitlines()
    # clang ("f.cl:3:12: error: ..."), PoCL ("error: f.cl:3:12: ...") and
    # NVIDIA ("<kernel>:3:12: error: ...") all put line:column after a colon.
    numbers = sorted({int(m) for line in log.splitlines() if "error" in line
                      for m in re.findall(r":(\d+):\d+:", line)})
    if not numbers:
        return ""
    out = []
    for n in numbers[:5]:
        lo, hi = max(1, n - context), min(len(lines), n + context)
        out.append("\n".join(f"{'>>' if i == n else '  '}{i:5d}| {lines[i - 1]}"
                             for i in range(lo, hi + 1)))
    return "\n...\n".join(out)


# Rendered sources and their hashes by (cache id, template, repr of the parameters): a
# Mako render costs ~0.1-0.2 ms, paid by every build() lookup of a call otherwise.
_rendered: dict = {}
RENDERED_MAX = 4096


def _rendered_source(facts, template: str, params: dict) -> tuple[str, str]:
    key = None
    if not any(isinstance(v, np.ndarray) for v in params.values()):
        text = repr(sorted(params.items()))     # repr: True and 1, 1 and 1.0 stay apart
        if "..." not in text and " at 0x" not in text:      # whole, and no object ids
            key = (facts.cache_id, template, text)
    hit = _rendered.get(key) if key is not None else None
    if hit is None:
        source = render(template, facts, **params)
        hit = (source, hashlib.sha256(source.encode()).hexdigest())
        if key is not None:
            if len(_rendered) >= RENDERED_MAX:
                _rendered.clear()
            _rendered[key] = hit
    return hit


def _refuse_abi_mismatch(template: str, device, cl_prg: cl.Program) -> None:
    """A program whose build log says a built-in call "changes the ABI" computes garbage
    (see check_vector_widths): an error, not a warning."""
    try:
        log = cl_prg.get_build_info(device.cl_device, cl.program_build_info.LOG) or ""
    except cl.Error:
        return
    if ABI_WARNING in log:
        first = next(ln for ln in log.splitlines() if ABI_WARNING in ln)
        raise BuildError(f"building {template} for {device.name}: the compiler and the built-in "
                         f"library of this OpenCL runtime pass wide vectors differently, so the "
                         f"kernels would compute wrong results ({first.strip()[:300]})")


def source_program(context: cl.Context, source: str) -> cl.Program:
    """A program that PyOpenCL builds from `source` every time, never from its binary
    cache: Oclgrind instruments only programs built from source (one loaded from the
    cache gives false uninitialised-value reports)."""
    # pyopencl.Program caches binaries unless it wraps an already created program
    return cl.Program(cl._cl._Program(context, source))  # noqa: SLF001


@contextlib.contextmanager
def quiet_compiler() -> Iterator[None]:
    """Hide PyOpenCL's CompilerWarning about a successful build's log, unless
    PYOPENCL_COMPILER_OUTPUT is set (then the logs are shown): Intel's CPU
    runtime logs every build ("Compilation started ...") and NVIDIA's driver the
    device probe's, so the warning would follow every first command."""
    with warnings.catch_warnings():
        if not os.environ.get("PYOPENCL_COMPILER_OUTPUT"):
            warnings.simplefilter("ignore", cl.CompilerWarning)
        yield


def _build_lock_folder() -> str:
    """Where the build locks live: 256 files at most (named by the first two hex
    digits of a source's hash; two sources sharing one only wait for each other)."""
    return os.path.join(tempfile.gettempdir(), f"clphys-build-locks-{os.getuid()}")


@contextlib.contextmanager
def one_builder_per_source(vendor: str, source: str) -> Iterator[None]:
    """Hold a host-wide lock named by the source's hash while PoCL (`vendor`
    "pocl") builds it.

    PoCL's disk cache of kernels fails a build (BUILD_PROGRAM_FAILURE, empty
    log) when processes on one host build the same source at once, as the ranks
    of an MPI job do: each replaces the cached program.bc and one finds it
    gone. Builders of one source take turns (the later ones then read the
    cache); other sources mostly build side by side.
    """
    try:
        import fcntl
    except ImportError:         # not POSIX: no lock
        fcntl = None            # type: ignore[assignment]
    if vendor != "pocl" or fcntl is None:
        yield
        return
    digest = hashlib.sha256(source.encode()).hexdigest()
    folder = _build_lock_folder()
    try:
        os.makedirs(folder, exist_ok=True)
        handle = open(os.path.join(folder, digest[:2]), "a")  # noqa: SIM115 (held across the yield)
    except OSError:             # an unwritable temp directory: build unlocked
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build(device: Device, template: str, options: Iterable[str] = (), **params: object) -> Program:
    """Render `template` for `device` and build it, once per (device, source,
    options).
    """
    source, digest = _rendered_source(device.facts, template, params)
    options = tuple(options)
    key = (device.facts.cache_id, digest, options)
    prg = device.programs.get(key)
    if prg is None:
        _keep_source(template, source, digest)
        try:
            if device.facts.binary_cache:
                cl_prg = cl.Program(device.context, source)
            else:
                cl_prg = source_program(device.context, source)
            with quiet_compiler(), one_builder_per_source(device.facts.vendor, source):
                if device.cache_dir and device.facts.binary_cache:
                    cl_prg.build(options=list(options), cache_dir=device.cache_dir)
                else:
                    cl_prg.build(options=list(options))
        except cl.RuntimeError as exc:
            log = str(exc)
            excerpt = _source_excerpt(source, log)
            where = (f"\n\nRendered source around the error:\n{excerpt}" if excerpt else
                     "\n\n(The log names no line of the rendered source; CLPHYS_KEEP_SOURCE=DIR "
                     "writes it to DIR.)")
            raise BuildError(f"building {template} for {device.name} failed "
                             f"(options {list(options)}):\n{log}{where}") from None
        except cl.Error as exc:
            raise DeviceError(f"{device.name}: {exc}") from None
        _refuse_abi_mismatch(template, device, cl_prg)
        prg = device.programs[key] = Program(cl_prg, source, device.facts.vendor, device.facts.cache_id,
                                             device.facts.queued_launches)
    return prg
