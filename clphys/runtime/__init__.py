"""Device selection, template rendering, program building and shared kernels."""

from .devices import (
    Device,
    DeviceSpec,
    DeviceStatus,
    current_device,
    device,
    devices,
    fp64_missing,
    nvidia_icd_hint,
    resolve_device,
    survey,
    test_devices,
)
from .facts import DeviceFacts, fake_facts
from .longrun import Interrupted, run_sliced
from .memory import check_host_memory, check_memory, items_that_fit
from .reduce import reduce_sum, work_group_size
from .render import Program, build, kernel_dir, launched_kernels, render, template_names
from .workspace import zeros

__all__ = ["Device", "DeviceSpec", "DeviceFacts", "DeviceStatus", "survey", "current_device", "device", "devices",
           "fake_facts", "fp64_missing", "nvidia_icd_hint", "resolve_device", "test_devices",
           "reduce_sum", "work_group_size", "zeros", "check_memory", "check_host_memory",
           "items_that_fit", "Interrupted", "run_sliced", "Program", "build", "kernel_dir",
           "launched_kernels", "render", "template_names"]
