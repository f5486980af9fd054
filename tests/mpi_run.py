"""Run Python code under ``mpiexec -n N`` from a test (the README's single test
command then runs the MPI tests too). Skips, with the reason, only where
mpi4py or an mpiexec is not installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

__all__ = ["mpiexec", "run_mpi", "run_cli"]


def mpiexec() -> str:
    """The mpiexec beside this Python (the mpich wheel's), else on PATH; skip if none."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("MPI tests need mpi4py and an MPI library: pip install 'clphys[mpi]'")
    here = shutil.which("mpiexec", path=os.path.dirname(sys.executable))
    found = here or shutil.which("mpiexec") or shutil.which("mpirun")
    if not found:
        pytest.skip("MPI tests need an mpiexec (the mpich wheel or a system MPI)")
    return found


# say(text): one line in one write, so lines of different ranks never interleave.
_PREAMBLE = "import os as _os\ndef say(text):\n    _os.write(1, (str(text) + chr(10)).encode())\n"


def run_mpi(n: int, code: str, device=None, timeout: float = 300, env=None) -> subprocess.CompletedProcess:
    """Run `code` (a Python snippet; ``say(text)`` prints a line) on `n` ranks; the device's spec goes in
    CLPHYS_DEVICE. Root may run MPI here (Open MPI refuses it otherwise)."""
    # python -m mpi4py: an uncaught exception on one rank aborts the job instead of leaving
    # the other ranks waiting in a collective
    return _launch(n, ["-m", "mpi4py", "-c", _PREAMBLE + textwrap.dedent(code)], device, timeout, env)


def run_cli(n: int, argv, device=None, timeout: float = 300, env=None) -> subprocess.CompletedProcess:
    """``mpiexec -n N python -m clphys ARGV...``, as a user runs the command."""
    return _launch(n, ["-m", "clphys", *map(str, argv)], device, timeout, env)


def _launch(n, python_args, device, timeout, env):
    full = dict(os.environ, PYTHONUNBUFFERED="1", OMPI_ALLOW_RUN_AS_ROOT="1",
                OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **(env or {}))
    if device is not None:
        full["CLPHYS_DEVICE"] = device.facts.index
    args = [mpiexec(), "-n", str(n), sys.executable, *python_args]
    try:
        return subprocess.run(args, capture_output=True, text=True, env=full, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"mpiexec -n {n} did not finish in {timeout} s (a hang?):\n"
                             f"{(exc.stdout or b'')[-2000:]!r}\n{(exc.stderr or b'')[-2000:]!r}") from None
