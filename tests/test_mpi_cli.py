"""The commands under mpiexec (tests/mpi_run.run_cli: ``mpiexec -n 2 python -m
clphys ...``): the split commands print once (rank 0), the same estimates as
one process; the speed line gives total and per-rank flips/ns; a checkpoint
of a split run resumes on another number of ranks; commands that do not split
their work, and bad input, exit 2 with one message."""

import re

import pytest

from mpi_run import run_cli


def _single(argv, device, capsys):
    from clphys.cli import main
    assert main([*map(str, argv), "--device", device.facts.index]) == 0
    return capsys.readouterr().out


def _estimates(out):
    """The lines with results (not the device, timing or file lines)."""
    skip = ("Ising", "speed", "halo path", "time ", "production", "wall", "muca ")
    return [l for l in out.splitlines() if l.strip() and not l.startswith(skip)]


def test_ising_runs_split_and_prints_once(device, capsys, tmp_path):
    argv = ["ising", "--dim", "2", "--size", "64", "--temperature", "2.269", "--sweeps", "60", "--seed", "3"]
    r = run_cli(2, argv + ["--checkpoint", tmp_path / "run.npz"], device)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("Ising 2D 64x64") == 1 and "on 2 MPI ranks" in r.stdout
    assert re.search(r"speed +[0-9.]+ spin flips/ns, [0-9.]+ per rank on 2 ranks", r.stdout)
    assert "halo path" in r.stdout
    single = _single(argv, device, capsys)
    assert _estimates(r.stdout) == _estimates(single)
    # the finished run's checkpoint, continued on 3 ranks, reports the same run
    r3 = run_cli(3, ["ising", "--resume", tmp_path / "run.npz"], device)
    assert r3.returncode == 0, r3.stderr[-3000:]
    assert _estimates(r3.stdout) == _estimates(single)


@pytest.mark.slow
def test_split_commands_print_once_and_equal_one_process(device, capsys):
    for argv in (["binder", "--sizes", "8,16", "--points", "3", "--measure", "32", "--replicas", "2",
                  "--every", "1", "--no-progress"],
                 ["sde", "josephson", "--a", "4.0:4.4:3", "--paths", "64", "--periods", "4",
                  "--steps-per-period", "10", "--bins", "4"],
                 ["muca", "--size", "4", "--walkers", "64", "--max-iterations", "3", "--production-blocks",
                  "2", "--production-updates", "20", "--seed", "1"],
                 ["muca", "--size", "4", "--walkers", "64", "--production-walkers", "96", "--max-iterations",
                  "3", "--production-blocks", "2", "--production-updates", "20", "--seed", "1"]):
        r = run_cli(2, argv, device)
        assert r.returncode == 0, (argv, r.stderr[-3000:])
        single = _single(argv, device, capsys)
        mine = _estimates(r.stdout)
        assert mine and mine == _estimates(single), argv
        head = mine[0]
        assert r.stdout.count(head) == 1, argv        # printed by rank 0 only


def test_unsplit_commands_and_bad_input_exit_2_once(device):
    r = run_cli(2, ["sde", "kuramoto", "--n", "64", "--t-end", "0.1"], device)
    assert r.returncode == 2
    assert r.stderr.count("clphys sde kuramoto: error: this command does not split its work over MPI") == 1
    r = run_cli(3, ["ising", "--size", "64x4", "--sweeps", "10"], device)
    assert r.returncode == 2
    assert r.stderr.count("cannot be split over 3 MPI ranks") == 1, r.stderr
    r = run_cli(2, ["muca", "--size", "4", "--checkpoint", "x.npz"], device)
    assert r.returncode == 2 and r.stderr.count("not supported with walkers split over MPI") == 1
    r = run_cli(3, ["muca", "--size", "4", "--walkers", "128", "--production-walkers", "64"], device)
    assert r.returncode == 2 and r.stderr.count("--production-walkers 64 cannot be split over 3 MPI ranks") == 1


def test_ctrl_c_stops_every_rank_and_keeps_the_state(device, tmp_path):
    """SIGINT to mpiexec (which forwards it): every rank stops after the same
    slice, rank 0 writes the checkpoint, exit 130 with one message."""
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    from clphys.runtime.checkpoint import load_checkpoint
    from mpi_run import mpiexec
    ckpt = tmp_path / "run.npz"
    env = dict(os.environ, PYTHONUNBUFFERED="1", CLPHYS_DEVICE=device.facts.index)
    proc = subprocess.Popen([mpiexec(), "-n", "2", sys.executable, "-m", "clphys", "ising", "--size", "128",
                             "--sweeps", "10000000", "--progress", "--checkpoint", ckpt],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    err = []
    threading.Thread(target=lambda: err.extend(iter(lambda: proc.stderr.read(1), "")), daemon=True).start()
    t0 = time.monotonic()
    while "elapsed" not in "".join(err) and time.monotonic() - t0 < 120 and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("mpiexec did not stop within 60 s of Ctrl-C: " + "".join(err)[-2000:]) from None
    time.sleep(0.2)
    text = "".join(err)
    assert proc.returncode == 130, text[-2000:]
    done = re.findall(r"interrupted after (\d+) of 10000000 sweeps; state saved in", text)
    assert len(done) == 1, text[-2000:]
    header, arrays = load_checkpoint(ckpt, "ising-run")     # the whole lattice, at the sweep it says
    assert header["run"]["done"] == header["backend"]["sweeps"] == int(done[0]) > 0
    assert arrays["spins"].shape == (1, 128 * 128 // 8)
