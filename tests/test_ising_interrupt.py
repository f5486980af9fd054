"""Ctrl-C (a real SIGINT) on long `clphys ising` and `clphys binder` runs:
exit status 130, one line, stopped within ~2 s, nothing half-written; an
interrupted `clphys ising --checkpoint` resumes to the uninterrupted
result bit for bit."""

import re
import sys

import pytest

from cli_subprocess import interrupt_after, start_cli

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child needs POSIX")


def _one_line(stderr, pattern):
    """The run's stderr is the progress bar (\\r-updated) and one final line."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.replace("\r", "\n").splitlines() if line.strip()]
    last = lines[-1]
    assert re.fullmatch(pattern, last), stderr[-500:]
    assert all(line.startswith(("ising [", "binder [")) for line in lines[:-1]), lines[:-1]


def _result(out):
    return "\n".join(line for line in out.splitlines() if not line.startswith("speed"))


@pytest.mark.slow
def test_ctrl_c_on_ising_keeps_a_checkpoint_that_resumes_bit_for_bit(device, tmp_path):
    """A run of 30000 sweeps of 32^2 (~2 s on two cores, and about as long
    on a GPU: launch-bound) is interrupted as soon as its bar shows; the
    checkpoint it leaves resumes to exactly the result of an uninterrupted
    run."""
    ckpt = tmp_path / "run.npz"
    args = ["ising", "--size", "32", "--temperature", "2.5", "--sweeps", "30000", "--seed", "9"]
    run = start_cli(args + ["--checkpoint", ckpt, "--progress"], device, cwd=tmp_path)
    res = interrupt_after(run, "%")
    assert res.returncode == 130, res.stderr
    assert res.stop_seconds < 2.0
    _one_line(res.stderr, r"clphys ising: interrupted after \d+ of 30000 sweeps; state saved in \S*run\.npz: "
                          r"continue with --resume \S*run\.npz")
    assert res.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.npz"]      # no temporary left over
    done = int(re.search(r"interrupted after (\d+)", res.stderr).group(1))
    assert 0 < done < 30000
    resumed = start_cli(["ising", "--resume", ckpt, "--no-progress"], device, cwd=tmp_path).wait(timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    whole = start_cli(args + ["--no-progress"], device, cwd=tmp_path).wait(timeout=300)
    assert whole.returncode == 0, whole.stderr
    assert _result(resumed.stdout) == _result(whole.stdout)
    assert "energy/N" in whole.stdout


def test_ctrl_c_on_ising_without_checkpoint(device, tmp_path):
    run = start_cli(["ising", "--size", "256", "--sweeps", "10000000", "--progress",
                     "--plot", tmp_path / "lattice.png"], device, cwd=tmp_path)
    res = interrupt_after(run, "%", extra_delay=0.2)
    assert res.returncode == 130 and res.stop_seconds < 2.0
    _one_line(res.stderr, r"clphys ising: interrupted after \d+ of 10000000 sweeps; nothing written "
                          r"\(--checkpoint FILE keeps the state\)")
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_on_binder_writes_nothing(device, tmp_path):
    pytest.importorskip("matplotlib")
    run = start_cli(["binder", "--sizes", "16,32,64", "--points", "4", "--measure", "20000",
                     "--replicas", "8", "--progress", "--plot", tmp_path / "u4.png"], device, cwd=tmp_path)
    res = interrupt_after(run, "%", extra_delay=0.3)
    assert res.returncode == 130 and res.stop_seconds < 2.0
    _one_line(res.stderr, r"clphys binder: interrupted after \d+ of \d+ spin updates of the scan; "
                          r"(sizes [\d, ]+ were complete; )?nothing written")
    assert res.stdout == "" and list(tmp_path.iterdir()) == []


_THREAD_MASKS = r"""
import os, re, sys, threading
import clphys

def blocked():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        status = open(f"/proc/self/task/{tid}/status").read()
        out[int(tid)] = bool(int(re.search(r"SigBlk:\s*(\w+)", status).group(1), 16) & 2)
    return out

before = blocked()
clphys.device(sys.argv[1]).queue.finish()
after = blocked()
new = sorted(t for t in after if t not in before)
print(after[threading.get_native_id()], len(new), all(after[t] for t in new))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_runtimes_threads_hold_ctrl_c_back(device):
    """OpenCL runtimes start worker threads with the context, and PoCL's run
    the system linker when a kernel is first launched: a Ctrl-C to the process
    group killed that linker mid-link and PoCL aborted.  The threads the runtime
    starts inherit a mask with SIGINT blocked; the main thread keeps it open."""
    import subprocess
    out = subprocess.run([sys.executable, "-c", _THREAD_MASKS, device.facts.index], capture_output=True,
                         text=True, check=True).stdout.split()
    main_blocked, new, all_blocked = out[0] == "True", int(out[1]), out[2] == "True"
    assert not main_blocked and all_blocked, out
    if device.facts.vendor == "pocl":
        assert new > 0, out
