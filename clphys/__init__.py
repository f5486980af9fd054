"""clphys: statistical physics and econophysics as OpenCL kernels on any
vendor's GPU, and on CPUs through PoCL.

    import clphys
    clphys.devices()                      # what is visible
    with clphys.device("nvidia"):         # default device inside the block
        ...
"""

__version__ = "0.1.0"

from .errors import BuildError, ClphysError, DeviceError
from .runtime import Device, DeviceFacts, current_device, device, devices
from . import rng

__all__ = ["__version__", "BuildError", "ClphysError", "DeviceError", "Device", "DeviceFacts",
           "current_device", "device", "devices", "rng"]
