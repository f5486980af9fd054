"""Run ``clphys`` in a subprocess and interrupt it, for the Ctrl-C tests.

    run = start_cli(["ising", "--size", "256", ...], device)
    result = interrupt_after(run, "ising")     # SIGINT once stderr shows the text
    assert result.returncode == 130 and result.stop_seconds < 3

The child runs ``python -m clphys.cli`` with the same interpreter and
environment as the tests (so an installed package and a source checkout both
work), with ``CLPHYS_DEVICE`` set to the device's spec and ``--progress``
semantics left to the caller.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

__all__ = ["start_cli", "interrupt_after", "CliRun", "CliResult"]


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str
    stop_seconds: float      # from SIGINT to exit (nan when no signal was sent)


class CliRun:
    """A running ``clphys`` subprocess whose stdout and stderr are read by threads."""

    def __init__(self, args, device=None, env=None, cwd=None):
        full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        if device is not None:
            full_env["CLPHYS_DEVICE"] = getattr(getattr(device, "facts", None), "index", None) or str(device)
        self.proc = subprocess.Popen([sys.executable, "-m", "clphys.cli", *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=full_env, cwd=cwd)
        self._out, self._err = [], []
        self._threads = [threading.Thread(target=self._pump, args=(s, buf), daemon=True)
                         for s, buf in ((self.proc.stdout, self._out), (self.proc.stderr, self._err))]
        for t in self._threads:
            t.start()

    @staticmethod
    def _pump(stream, buf):
        while True:
            chunk = stream.read(1)
            if not chunk:
                return
            buf.append(chunk)

    @property
    def stderr_so_far(self) -> str:
        return "".join(self._err)

    @property
    def stdout_so_far(self) -> str:
        return "".join(self._out)

    def wait(self, timeout=120) -> CliResult:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"clphys did not finish within {timeout} s; stderr:\n"
                                 + self.stderr_so_far[-2000:]) from None
        for t in self._threads:
            t.join(5)
        return CliResult(self.proc.returncode, self.stdout_so_far, self.stderr_so_far, float("nan"))


def start_cli(args, device=None, env=None, cwd=None) -> CliRun:
    return CliRun(args, device, env, cwd)


def interrupt_after(run: CliRun, text: str, *, where: str = "stderr", timeout: float = 120,
                    extra_delay: float = 0.0, stop_timeout: float = 60) -> CliResult:
    """Send SIGINT once `text` appears in the child's `where` stream (``stderr``
    or ``stdout``), optionally `extra_delay` seconds later; return how it ended
    and how long it took to stop. AssertionError if the text never appears
    (the run finished first or took longer than `timeout`)."""
    start = time.monotonic()
    seen = (lambda: run.stderr_so_far) if where == "stderr" else (lambda: run.stdout_so_far)
    while text not in seen():
        if run.proc.poll() is not None:
            res = run.wait()
            raise AssertionError(f"clphys exited ({res.returncode}) before printing {text!r}:\n"
                                 f"stdout: {res.stdout[-1500:]}\nstderr: {res.stderr[-1500:]}")
        if time.monotonic() - start > timeout:
            run.proc.kill()
            raise AssertionError(f"{text!r} not seen within {timeout} s")
        time.sleep(0.02)
    if extra_delay:
        time.sleep(extra_delay)
    sent = time.monotonic()
    run.proc.send_signal(signal.SIGINT)
    res = run.wait(timeout=stop_timeout)
    res.stop_seconds = time.monotonic() - sent
    return res
