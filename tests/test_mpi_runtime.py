"""The MPI runtime (clphys.runtime.mpi): device per rank, per-rank program
caches, parameter agreement and failure sharing before collectives."""

import json

import pytest

from clphys.runtime.mpi import split
from mpi_run import run_mpi


def test_split_covers_every_item_once():
    for n in (0, 1, 7, 64, 1001):
        for size in (1, 2, 3, 8):
            parts = [split(n, size, r) for r in range(size)]
            assert sum(c for _, c in parts) == n
            assert all(parts[r][0] + parts[r][1] == parts[r + 1][0] for r in range(size - 1))
            assert max(c for _, c in parts) - min(c for _, c in parts) <= 1


def test_device_and_cache_per_rank(device):
    r = run_mpi(3, """
        import json, clphys
        from clphys.runtime.mpi import launcher_ranks
        d = clphys.current_device()
        say(json.dumps([launcher_ranks(), d.facts.index, d.cache_dir]))
    """, device)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert sorted(row[0][0] for row in rows) == [0, 1, 2] and {row[0][1] for row in rows} == {3}
    assert {row[1] for row in rows} == {device.facts.index}        # one device named: every rank has it
    assert len({row[2] for row in rows}) == 3                       # three cache directories


def test_explicit_device_list_per_rank(device):
    sims = [f for f in __import__("clphys").devices() if f.vendor == "oclgrind"]
    if not sims:
        pytest.skip("needs a second device (Oclgrind) to tell ranks apart")
    r = run_mpi(2, """
        import clphys
        from clphys.runtime.mpi import launcher_ranks
        say(f"{launcher_ranks()[2]} {clphys.current_device().facts.index}")
    """, env={"CLPHYS_DEVICE": f"{device.facts.index};{sims[0].index}"})
    assert r.returncode == 0, r.stderr
    got = dict(line.split() for line in r.stdout.splitlines())
    assert got == {"0": device.facts.index, "1": sims[0].index}


def test_disagreeing_parameters_fail_on_every_rank_without_a_hang():
    r = run_mpi(3, """
        from mpi4py import MPI
        from clphys.runtime.mpi import agree, all_ok
        comm = MPI.COMM_WORLD
        try:
            agree(comm, "lattice parameters", L=64, T=2.0 + (comm.rank == 2))
        except ValueError as exc:
            say(f"agree {comm.rank} {exc}")
        def check(x):
            if x == 1:
                raise ValueError("L = 12 does not split over 3 ranks")
            return x
        try:
            all_ok(comm, check, comm.rank)
        except ValueError as exc:
            say(f"all_ok {comm.rank} {exc}")
        comm.Barrier()
    """, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert sorted(l.split()[1] for l in lines if l.startswith("agree")) == ["0", "1", "2"]
    assert all("rank 0 vs rank 2: T = 2.0 vs 3.0" in l for l in lines if l.startswith("agree"))
    assert sorted(l.split()[1] for l in lines if l.startswith("all_ok")) == ["0", "1", "2"]
    assert all("rank 1: L = 12 does not split" in l for l in lines if l.startswith("all_ok"))


def test_info_under_mpiexec_lists_every_rank(device):
    r = run_mpi(2, "import sys; from clphys.cli import main; sys.exit(main(['info']))", device)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("devices of the 2 MPI ranks") == 1
    assert "rank 0 of 2" in r.stdout and "rank 1 of 2" in r.stdout


def test_a_rank_kept_waiting_says_where_and_why(monkeypatch, capsys):
    """The ranks meet in a polled barrier before they compare a call's arguments: a
    rank kept waiting WAIT_NOTICE_S says once on stderr where it waits; Ctrl-C stops
    the wait (a blocking collective would ignore it until the others came)."""
    import _thread
    import threading
    import time

    from clphys.runtime import mpi

    class Comm:                     # another rank arrives after `late` seconds
        def __init__(self, late):
            self.late = late

        def Ibarrier(self):
            start = time.monotonic()
            return type("Request", (), {"Test": lambda _: time.monotonic() - start >= self.late})()

        def Get_rank(self):
            return 1

        def Get_size(self):
            return 3

    monkeypatch.setattr(mpi, "WAIT_NOTICE_S", 0.05)
    mpi._meet(Comm(0.3), "energy()")          # noqa: SLF001
    err = capsys.readouterr().err
    assert err.count("clphys: MPI rank 1 of 3 has waited") == 1 and "at energy() (called from " in err
    assert f"{__file__}, line" in err
    assert "every rank must make the same clphys calls" in err
    monkeypatch.setattr(mpi, "WAIT_NOTICE_S", 60.0)
    mpi._meet(Comm(0.0), "energy()")          # noqa: SLF001
    assert capsys.readouterr().err == ""
    threading.Timer(0.2, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        mpi._meet(Comm(float("inf")), "energy()")  # noqa: SLF001


def test_a_late_rank_is_reported_under_mpiexec(device):
    """A rank that reaches energy() late: the one waiting says so on stderr, naming
    the call; both then go on and agree on the energy."""
    r = run_mpi(2, """
        import time
        from mpi4py import MPI
        from clphys.ising import Ising2D
        from clphys.runtime import mpi
        comm = MPI.COMM_WORLD
        lat = Ising2D(16, 2.3, seed=3, comm=comm)
        mpi.WAIT_NOTICE_S = 0.5         # after the constructor: ranks may build at their own pace
        if comm.rank == 1:
            time.sleep(3)
        say(f"E {lat.energy()}")
    """, device, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("has waited") == 1 and "MPI rank 0 of 2" in r.stderr
    assert "sums() calls (called from <string>, line 14)" in r.stderr    # lat.energy(), after the 3-line preamble
    assert len(set(line for line in r.stdout.splitlines() if line.startswith("E "))) == 1
