"""Multicanonical walkers over MPI ranks (mpiexec from pytest): the weight
iteration and the production equal the same walkers on one device, bit for
bit (histograms summed by Allreduce, Philox streams of global walker indices)."""

import dataclasses

import numpy as np
import pytest

from clphys import muca
from mpi_run import run_mpi

ARGS = dict(L=4, dim=2, walkers=100, seed=3)     # 4 lattice words of 32 walkers
RUN = """
import numpy as np
from mpi4py import MPI
from clphys import muca
comm = MPI.COMM_WORLD
sim = muca.Multicanonical(comm=comm, **ARGS)
h = sim.iterate(kl=1e-3, max_iterations=4, progress=False)
res = sim.produce(blocks=4, magnetization=True, progress=False)   # ends at the error target (Allreduce)
c = res.canonical([2.0, 2.5])
out = {"d_k": h.d_k, "d_c": h.d_c, "visited": h.visited, "width": h.width, "log_w": sim.log_weights,
       "ln_g": res.ln_g, "ln_g_err": res.ln_g_err, "block_histograms": res.block_histograms,
       "moments": res.moments, "steps": [res.therm, res.updates], "passages": [res.therm_passages, res.passages]}
out.update({f"c.{k}": v for k, v in c.__dict__.items() if v is not None})
np.savez(OUT + f".{comm.rank}.npz", **out)
"""


@pytest.mark.parametrize("ranks", [2, 3])
def test_split_walkers_equal_one_device(device, ranks, tmp_path):
    out = str(tmp_path / "muca")
    r = run_mpi(ranks, f"ARGS = {ARGS!r}\nOUT = {out!r}\n" + RUN, device)
    assert r.returncode == 0, r.stderr[-4000:]
    sim = muca.Multicanonical(device=device, **ARGS)
    h = sim.iterate(kl=1e-3, max_iterations=4, progress=False)
    res = sim.produce(blocks=4, magnetization=True, progress=False)   # ends at the error target (Allreduce)
    c = res.canonical([2.0, 2.5])
    want = {"d_k": h.d_k, "d_c": h.d_c, "visited": h.visited, "width": h.width, "log_w": sim.log_weights,
            "ln_g": res.ln_g, "ln_g_err": res.ln_g_err, "block_histograms": res.block_histograms,
            "moments": res.moments, "steps": [res.therm, res.updates],
            "passages": [res.therm_passages, res.passages]}
    want.update({f"c.{f.name}": getattr(c, f.name) for f in dataclasses.fields(c)
                 if getattr(c, f.name) is not None})
    for rank in range(ranks):                  # every rank holds the whole result
        got = dict(np.load(f"{out}.{rank}.npz"))
        assert sorted(got) == sorted(want)
        differ = [k for k in want if not np.array_equal(got[k], want[k], equal_nan=True)]
        assert not differ, f"rank {rank} differs from one device: {differ}"


def test_walkers_that_do_not_split_fail_on_every_rank(device):
    r = run_mpi(3, """
        from mpi4py import MPI
        from clphys import muca
        comm = MPI.COMM_WORLD
        for name, kw in (("few", dict(walkers=40)), ("differ", dict(walkers=80 + comm.rank))):
            try:
                muca.Multicanonical(4, comm=comm, **kw)
            except ValueError as exc:
                say(f"{name} {comm.rank} {exc}")
    """, device, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    for name, text in (("few", "40 walkers cannot be split over 3 MPI ranks: each rank needs at least one "
                               "lattice word of 32 walkers"),
                       ("differ", "multicanonical parameters differ across MPI ranks")):
        mine = [l for l in lines if l.startswith(name + " ")]
        assert sorted(l.split()[1] for l in mine) == ["0", "1", "2"], (name, r.stdout)
        assert all(text in l for l in mine), (name, mine)


def test_a_time_budget_ends_every_rank_at_the_same_step(device):
    """max_seconds over 2 ranks whose clocks differ (rank 1 starts its
    production later): the ranks agree on the slice where the budget ends each
    phase, so both return the same steps, inside the first check."""
    r = run_mpi(2, """
        import time, warnings
        from mpi4py import MPI
        from clphys import muca
        comm = MPI.COMM_WORLD
        sim = muca.Multicanonical(32, walkers=1024, seed=3, comm=comm)
        time.sleep(0.03 * comm.rank)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            res = sim.produce(blocks=8, magnetization=False, max_seconds=0.05, progress=False)
        say(f"steps {comm.rank} {res.therm} {res.updates} {max(64, sim.geom.full_width ** 2 // 4)}")
    """, device, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    steps = sorted(l.split()[1:] for l in r.stdout.splitlines() if l.startswith("steps "))
    assert [s[0] for s in steps] == ["0", "1"], r.stdout
    (_, therm, updates, check), (_, therm1, updates1, _) = [tuple(map(int, s)) for s in steps]
    assert (therm, updates) == (therm1, updates1)
    assert 0 < therm and 0 < updates and therm + updates < check // 2


SYMMETRIC_RUN = """
import numpy as np
from mpi4py import MPI
from clphys import muca
comm = MPI.COMM_WORLD
sim = muca.Multicanonical(comm=comm, symmetric=True, **ARGS)
h = sim.iterate(kl=1e-3, max_iterations=4, progress=False)
res = sim.produce(blocks=4, progress=False)
np.savez(OUT + f".{comm.rank}.npz", width=h.width, log_w=sim.log_weights, ln_g=res.ln_g,
         block_histograms=res.block_histograms, passages=[res.therm_passages, res.passages])
"""


def test_symmetric_split_walkers_equal_one_device(device, tmp_path):
    out = str(tmp_path / "muca")
    r = run_mpi(2, f"ARGS = {ARGS!r}\nOUT = {out!r}\n" + SYMMETRIC_RUN, device)
    assert r.returncode == 0, r.stderr[-4000:]
    sim = muca.Multicanonical(device=device, symmetric=True, **ARGS)
    h = sim.iterate(kl=1e-3, max_iterations=4, progress=False)
    res = sim.produce(blocks=4, progress=False)
    want = {"width": h.width, "log_w": sim.log_weights, "ln_g": res.ln_g,
            "block_histograms": res.block_histograms, "passages": [res.therm_passages, res.passages]}
    for rank in range(2):
        got = dict(np.load(f"{out}.{rank}.npz"))
        differ = [k for k in want if not np.array_equal(got[k], want[k])]
        assert not differ, f"rank {rank} differs from one device: {differ}"


def test_the_default_walkers_count_every_rank(device):
    """walkers=None over 2 ranks: default_walkers for 2 devices, in the
    constructor and in run()'s checks (more blocks than one device's walkers)."""
    r = run_mpi(2, """
        import warnings
        from mpi4py import MPI
        from clphys import muca
        comm = MPI.COMM_WORLD
        sim = muca.Multicanonical(4, comm=comm)
        one, two = (muca.default_walkers(sim.device.facts, sim.geom, n) for n in (1, 2))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            res = muca.run(4, comm=comm, max_iterations=1, blocks=one + 32, max_seconds=0.05, progress=False)
        say(f"walkers {comm.rank} {sim.walkers} {one} {two} {len(res.block_histograms)}")
    """, device, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    got = sorted(l.split()[1:] for l in r.stdout.splitlines() if l.startswith("walkers "))
    assert [g[0] for g in got] == ["0", "1"], r.stdout
    for _, walkers, one, two, blocks in got:
        assert int(walkers) == int(two) == 2 * int(one) and int(blocks) == int(one) + 32
