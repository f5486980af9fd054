"""The one memory check every entry point runs before device work.

An entry point adds up the buffers it will allocate ({name: bytes}) and calls
:func:`check_memory`; where a result can be produced in pieces it asks
:func:`items_that_fit` how large a piece may be instead of refusing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .devices import Device
    from .facts import DeviceFacts

__all__ = ["check_memory", "check_host_memory", "items_that_fit", "format_bytes"]

# Leave room for the driver, program binaries and the small buffers nobody
# counts: plan with at most this fraction of the device's global memory.
USABLE_FRACTION = 0.9


def format_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def _facts_of(dev: Device | DeviceFacts) -> DeviceFacts:
    return dev.facts if hasattr(dev, "facts") else dev


def check_memory(dev: Device | DeviceFacts, buffers: Mapping[str, int], what: str, reduce: str = "") -> None:
    """ValueError unless every buffer fits one allocation of `dev` and all of
    them together fit its global memory.

    `what` names the job ("a 65536^2 lattice"), `reduce` says what the user can
    make smaller ("use fewer replicas or split the run"). `dev` is a
    :class:`clphys.Device` or its :class:`DeviceFacts`.
    """
    facts = _facts_of(dev)
    sizes = {k: int(v) for k, v in buffers.items()}
    if any(v < 0 for v in sizes.values()):
        raise ValueError(f"check_memory: negative buffer size in {sizes}")
    if not sizes:
        return
    total = sum(sizes.values())
    big = max(sizes, key=lambda name: sizes[name])
    usable = int(facts.global_mem * USABLE_FRACTION)
    if sizes[big] <= facts.max_alloc and total <= usable:
        return
    parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in sorted(sizes.items(), key=lambda kv: -kv[1])
                      if v >= 2**20) or ", ".join(f"{k} {format_bytes(v)}" for k, v in sizes.items())
    why = (f"its largest buffer ({big}, {format_bytes(sizes[big])}) exceeds the largest single "
           f"allocation of {format_bytes(facts.max_alloc)}" if sizes[big] > facts.max_alloc else
           f"that exceeds the {format_bytes(usable)} of its {format_bytes(facts.global_mem)} global "
           f"memory that clphys plans with")
    raise ValueError(f"{what} needs {format_bytes(total)} on {facts.name or 'the device'} ({parts}); "
                     f"{why}. {reduce or 'Reduce the size of the run or split it.'}".rstrip())


def items_that_fit(dev: Device | DeviceFacts, bytes_per_item: int, fixed_bytes: int = 0, *,
                   largest_per_item: int | None = None, limit: int | None = None) -> int:
    """How many items fit at once: `bytes_per_item` summed over all buffers,
    `largest_per_item` the share of the largest single buffer (default all of
    it), `fixed_bytes` what the job needs regardless. At least 0; at most
    `limit` when given."""
    facts = _facts_of(dev)
    if bytes_per_item <= 0:
        raise ValueError("items_that_fit: bytes_per_item must be positive")
    largest = largest_per_item or bytes_per_item
    room = int(facts.global_mem * USABLE_FRACTION) - int(fixed_bytes)
    n = max(0, min(room // bytes_per_item, facts.max_alloc // largest))
    return n if limit is None else min(n, int(limit))


def host_memory() -> int | None:
    """Bytes of host memory and swap (Linux MemTotal + SwapTotal), or None if
    unknown. The total, not what is free now: some hosts grow their memory as
    it is used, and the OS may free caches."""
    total = {}
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "SwapTotal"):
                    total[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return sum(total.values()) if "MemTotal" in total else None


def check_host_memory(nbytes: int, what: str, reduce: str = "") -> None:
    """ValueError if a result of `nbytes` cannot fit the host's memory
    (checked where the OS says; skipped where it does not)."""
    have = host_memory()
    if have is not None and int(nbytes) > have:
        raise ValueError(f"{what} needs {format_bytes(nbytes)} of host memory for its result; "
                         f"this host has {format_bytes(have)} (memory and swap). "
                         f"{reduce or 'Reduce the size of the run or split it.'}".rstrip())
