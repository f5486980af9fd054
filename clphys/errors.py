"""Exceptions raised by clphys.

Bad arguments raise plain ``ValueError`` (or ``TypeError``) before any device
work; the classes here are for what goes wrong on or with a device.
"""


class ClphysError(Exception):
    """Base class of clphys' own errors."""


class DeviceError(ClphysError, RuntimeError):
    """No device matches, or an OpenCL call failed on a device."""


class BuildError(ClphysError):
    """An OpenCL program did not compile; the message carries the compiler
    log and the rendered source around the failing line."""
