"""clphys: statistical physics and econophysics as OpenCL kernels on any
vendor's GPU, and on CPUs through PoCL::

    import clphys
    clphys.devices()                      # what is visible
    with clphys.device("nvidia"):         # default device inside the block
        ...

Domains are subpackages, imported on first use: ``clphys.ising``,
``clphys.timeseries``, ``clphys.sde``, ``clphys.muca``; references in ``clphys.exact`` and
error analysis in ``clphys.stats``.
"""

import importlib

from . import rng
from ._version import __version__
from .errors import BuildError, ClphysError, DeviceError
from .runtime import Device, DeviceFacts, current_device, device, devices

_SUBPACKAGES = ("ising", "timeseries", "sde", "muca", "exact", "stats")

__all__ = ["__version__", "BuildError", "ClphysError", "DeviceError", "Device", "DeviceFacts",
           "current_device", "device", "devices", "rng", *_SUBPACKAGES]


def __getattr__(name):
    # Lazy: `import clphys` stays fast and a domain's import errors stay in that domain.
    if name in _SUBPACKAGES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'clphys' has no attribute {name!r}")
