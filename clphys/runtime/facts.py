"""DeviceFacts: what templates and host code may branch on, for a device or a fake one.

A module of its own so that rendering (render.py) needs no device discovery
(devices.py), and devices.py can use render.py without an import circle.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["DeviceFacts", "fake_facts", "with_vendor_flags"]


@dataclass(frozen=True)
class DeviceFacts:
    """What templates may branch on. Frozen and hashable; never a device name.

    ``vendor`` is one of ``nvidia``, ``amd``, ``intel``, ``apple``, ``pocl``,
    ``mesa`` (rusticl, clover: whatever hardware they drive), ``oclgrind``,
    ``other``. ``wg_multiple`` is the preferred work-group size multiple (warp
    or wavefront width). ``cache_id`` identifies the compiler target (platform,
    device, driver) for the program cache.

    The flags after ``index`` say how a device differs from hardware, so that
    code branches on the difference rather than on a name. They are true
    everywhere except on a checking simulator (Oclgrind), whose uninitialised-
    value checker needs these concessions to give no false reports:

    * ``simulator``: a checking tool, hundreds of times slower; never chosen
      unless named.
    * ``binary_cache``: programs may be loaded from PyOpenCL's binary cache
      (the checker instruments only programs built from source), and the
      usability probe may run its kernel (a stray run disturbs the checker).
    * ``queued_launches``: kernels may be queued behind each other without
      waiting (the checker loses writes of queued launches).
    * ``fill_initialises``: a fill (clEnqueueFillBuffer, PyOpenCL's fill
      kernel) counts as a write; otherwise zeros are written from the host.
    * ``reused_buffers``: a memory pool may hand a freed buffer out again (the
      checker mixes up the state of a freed buffer with a later one).
    * ``offset_writes``: a copy into a buffer at an offset keeps what earlier
      writes initialised; otherwise whole buffers are written at once.
    * ``overlap``: copies may overlap kernels (second queue, copy threads,
      streamed uploads) and programs may be built in threads.
    """
    vendor: str
    is_gpu: bool
    fp64: bool
    max_work_group: int
    wg_multiple: int
    local_mem: int
    compute_units: int
    global_mem: int
    max_alloc: int
    cache_id: str
    name: str = ""
    platform: str = ""
    driver: str = ""
    index: str = ""        # "platform:device" indices, usable as a spec
    simulator: bool = False
    binary_cache: bool = True
    queued_launches: bool = True
    fill_initialises: bool = True
    reused_buffers: bool = True
    offset_writes: bool = True
    overlap: bool = True


def with_vendor_flags(facts: DeviceFacts) -> DeviceFacts:
    """`facts` with the difference flags of its vendor: all off on Oclgrind, the
    defaults (hardware) otherwise."""
    if facts.vendor != "oclgrind":
        return facts
    return replace(facts, simulator=True, binary_cache=False, queued_launches=False,
                   fill_initialises=False, reused_buffers=False, offset_writes=False, overlap=False)


def fake_facts(vendor: str, fp64: bool = True) -> DeviceFacts:
    """Facts of a typical device of `vendor`, for rendering without a device.

    Parameters
    ----------
    vendor : str
        ``nvidia``, ``amd``, ``intel``, ``apple``, ``pocl`` or ``oclgrind``.
    fp64 : bool
        Whether the device has double precision.

    Raises
    ------
    ValueError
        For any other vendor.
    """
    table = {  # is_gpu, max_wg, wg_multiple, local_mem, compute units
        "nvidia": (True, 1024, 32, 48 * 1024, 132),
        "amd": (True, 256, 64, 64 * 1024, 104),
        "intel": (True, 512, 16, 64 * 1024, 96),
        "apple": (True, 256, 32, 32 * 1024, 10),
        "pocl": (False, 4096, 8, 512 * 1024, 2),
        "oclgrind": (False, 1024, 1, 32 * 1024, 1),
    }
    if vendor not in table:
        raise ValueError(f"fake_facts: vendor must be one of {sorted(table)}, got {vendor!r}")
    is_gpu, wg, mult, lmem, cus = table[vendor]
    return with_vendor_flags(DeviceFacts(
        vendor=vendor, is_gpu=is_gpu, fp64=fp64, max_work_group=wg, wg_multiple=mult,
        local_mem=lmem, compute_units=cus, global_mem=16 << 30, max_alloc=4 << 30,
        cache_id=f"fake-{vendor}-{int(fp64)}", name=f"fake {vendor}", platform=f"fake {vendor}"))
