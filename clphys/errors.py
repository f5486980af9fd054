"""Exceptions raised by clphys.

Bad arguments raise plain ``ValueError`` (or ``TypeError``) before any device
work; the classes here are for what goes wrong on or with a device.
"""


class ClphysError(Exception):
    """Base class of clphys' own errors."""


class DeviceError(ClphysError, RuntimeError):
    """No device matches, or an OpenCL call failed on a device."""


class Fp64Error(DeviceError, ValueError):
    """An option that needs double precision (cl_khr_fp64) on a device without it;
    the message names the function, the option, what to use instead and the
    visible devices that have fp64. (A ValueError too: it is about an argument.)"""


class BuildError(ClphysError):
    """An OpenCL program did not compile; the message carries the compiler
    log and the rendered source around the failing line."""
