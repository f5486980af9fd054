"""SDE ensembles and Josephson sweeps over MPI ranks (mpiexec from pytest):
bit for bit the single-process results on the same device, whether grid
points or the paths of each grid point are split (2 and 3 ranks, uneven
shares), for statistics, histograms, recorded paths, final states and
checkpoints (also resumed on another number of ranks)."""


import numpy as np
import pytest

from clphys.sde import Ensemble
from clphys.sde.ensemble import shares
from mpi_run import run_mpi

# The runs compared: executed here with comm=None and under mpiexec with MPI.COMM_WORLD.
CASES = """
import numpy as np
from clphys import sde
from clphys.sde import Ensemble, Model

OU = Model(["v"], {"v": "-gamma*v"}, {"v": "sqrt(2*gamma*kT)"}, ["gamma", "kT"], name="ou")
PENDULUM = Model(["x", "v"], {"x": "v", "v": "-gamma*v - sin(x) + a*cos(w*t)"}, {"v": "s"},
                 ["gamma", "s", "a", "w"], name="pendulum")


def flat(prefix, r, out):
    if r is None:
        return
    out[prefix + ".times"] = r.times
    for part in ("mean", "var", "hist", "paths"):
        for k, v in getattr(r, part).items():
            out[f"{prefix}.{part}.{k}"] = v


def cases(comm=None, device=None, resume=None, save=None):
    out = {}
    # 6 grid points: whole grid points per rank (3 + 3, 2 + 2 + 2)
    ens = Ensemble(PENDULUM, 40, {"gamma": 0.5, "s": np.linspace(0.2, 1.2, 6), "a": 0.7, "w": 2.0},
                   0.05, seed=3, initial={"x": ("uniform", -1.0, 1.0), "v": 0.1},
                   work_group_size=16, device=device, comm=comm)
    flat("grid", ens.run(steps=30, sample_every=7, observables=["x", "v*v"],
                         histograms={"x": (16, -3.0, 3.0)}, record_paths=20), out)
    values = ens.values()
    if values is not None:
        out.update({f"grid.values.{k}": v for k, v in values.items()})
    # 2 grid points, xorshift32: whole points on 2 ranks, 7 work groups of paths split on 3
    ens = Ensemble(OU, 100, {"gamma": [0.5, 2.0], "kT": 1.0}, 0.02, rng="xorshift32", seed=9,
                   initial={"v": np.linspace(-1.0, 1.0, 100)}, work_group_size=16, device=device,
                   comm=comm)
    flat("two", ens.run(steps=25, sample_every=5, observables=["v", "v*v"],
                        histograms={"v": (10, -2.0, 2.0)}, record_paths=60), out)
    state = ens.state()
    if state is not None:
        out.update({f"two.state.{k}": getattr(state, k) for k in ("values", "laps", "origin", "time",
                                                                  "xs_state", "xs_spare")})
    if save is not None:
        ens.save(save)
    # one grid point: its paths split in whole work groups
    ens = Ensemble(OU, 90, {"gamma": 1.0, "kT": 0.5}, 0.05, seed=4, work_group_size=8,
                   device=device, comm=comm)
    flat("one", ens.run(steps=12, sample_every=4, record_paths=30), out)
    # a state from a file, continued
    if resume is not None:
        ens = Ensemble.from_state(resume, work_group_size=16, device=device, comm=comm)
        flat("resumed", ens.run(steps=10, sample_every=5, observables=["v"]), out)
    # Josephson sweeps: 3 points over the ranks, and 1 point of 600 paths (3 work groups)
    kw = dict(n_paths=64, periods=6, steps_per_period=16, density_bins=8, device=device, comm=comm)
    j = sde.josephson(a=[4.0, 4.2, 4.4], gather="all", **kw)
    out.update({"j3.v": j.v, "j3.v_err": j.v_err, "j3.density": j.density})
    kw["n_paths"] = 600
    j = sde.josephson(a=4.2, **kw)
    if j is not None:
        out.update({"j1.v": j.v, "j1.v_err": j.v_err, "j1.density": j.density})
    # Kuramoto: a (coupling, kT) grid of whole systems, points split over the ranks
    ks = sde.kuramoto_sweep(128, [1.0, 3.0], kT=[0.5, 1.0, 2.0], t_end=0.3, dt=0.05, sample_every=2,
                            device=device, comm=comm)
    if ks is not None:
        out.update({"ks.r": ks.r, "ks.psi": ks.psi, "ks.times": ks.times})
    return out
"""


def _single(device, resume=None):
    space = {}
    exec(CASES, space)
    return space["cases"](device=device, resume=resume)


@pytest.fixture(scope="module")
def single_runs():
    return {}


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 3])
def test_distributed_ensembles_equal_one_process_bit_for_bit(device, ranks, tmp_path, single_runs):
    # the state of a single-process run to resume on several ranks
    from clphys.sde import Model
    ou = Model(["v"], {"v": "-gamma*v"}, {"v": "sqrt(2*gamma*kT)"}, ["gamma", "kT"], name="ou")
    start = Ensemble(ou, 100, {"gamma": [0.5, 2.0], "kT": 1.0}, 0.02, seed=2, work_group_size=16,
                     device=device)
    start.run(steps=9, observables=[])
    start.save(tmp_path / "start.npz")
    key = device.facts.index
    if key not in single_runs:
        single_runs[key] = _single(device, resume=tmp_path / "start.npz")
    want = single_runs[key]
    r = run_mpi(ranks, CASES + f"""
import hashlib
from mpi4py import MPI
comm = MPI.COMM_WORLD
out = cases(comm, resume={str(tmp_path / "start.npz")!r}, save={str(tmp_path / "saved.npz")!r})
say(f"j3 {{comm.rank}} " + hashlib.sha1(out["j3.v"].tobytes() + out["j3.density"].tobytes()).hexdigest())
if comm.rank == 0:
    np.savez({str(tmp_path / "out.npz")!r}, **out)
""", device)
    assert r.returncode == 0, r.stderr[-4000:]
    got = dict(np.load(tmp_path / "out.npz"))
    assert sorted(got) == sorted(want)
    differ = [k for k in want if got[k].dtype != want[k].dtype or not np.array_equal(got[k], want[k])]
    assert not differ, f"differ from one process: {differ} " + " ".join(f"{got[k].tolist()} {want[k].tolist()}" for k in differ[:2])
    # gather="all": every rank holds the same result
    digests = {line.split()[1]: line.split()[2] for line in r.stdout.splitlines() if line.startswith("j3")}
    assert len(digests) == ranks and len(set(digests.values())) == 1
    # the gathered checkpoint is the single process's state
    saved = Ensemble.load(tmp_path / "saved.npz", device=device).state()
    for k in ("values", "laps", "origin", "time", "xs_state", "xs_spare"):
        assert np.array_equal(getattr(saved, k), want[f"two.state.{k}"]), k


def test_kuramoto_sweep_points_are_single_runs(device):
    """Every point of a sweep is kuramoto() at that point, bit for bit."""
    from clphys.sde import kuramoto, kuramoto_sweep
    kw = dict(t_end=0.2, dt=0.05, sample_every=1, seed=5, device=device)
    sweep = kuramoto_sweep(64, [0.5, 2.0], kT=0.7, **kw)
    assert sweep.r.shape == (2, 5) and sweep.coupling.tolist() == [0.5, 2.0]
    assert np.array_equal(sweep.r[1], kuramoto(64, 2.0, kT=0.7, **kw).r)
    with pytest.raises(ValueError, match="kT must be >= 0"):
        kuramoto_sweep(64, 1.0, kT=[1.0, -1.0], **kw)
    with pytest.raises(TypeError, match="comm must be an mpi4py communicator"):
        kuramoto_sweep(64, 1.0, comm="world", **kw)
    with pytest.raises(TypeError, match="comm must be an mpi4py communicator"):
        Ensemble(__import__("clphys").sde.models.BROWNIAN, 8, {"D": 1.0}, 0.1, comm=object())


def test_shares_cover_the_ensemble():
    """Grid points split where that balances the work, else whole work
    groups of paths; every path belongs to exactly one rank."""
    for n_grid, n_paths, wg, size in [(6, 40, 16, 4), (2, 100, 16, 3), (1, 90, 8, 3), (3, 1000, 64, 2),
                                      (5, 64, 64, 2), (1, 257, 256, 2)]:
        parts = shares(n_grid, n_paths, wg, size)
        owner = np.zeros((n_grid, n_paths), int)
        for s in parts:
            assert s.p0 % wg == 0 and s.n_grid >= 1 and s.n_paths >= 1
            owner[s.g0:s.g0 + s.n_grid, s.p0:s.p0 + s.n_paths] += 1
        assert (owner == 1).all()
    assert all(s.n_paths == 1000 for s in shares(3, 1000, 64, 2)) is False   # 3 points, 2 ranks: paths
    assert [s.n_grid for s in shares(5, 64, 64, 2)] == [3, 2]                  # one group: grid points


def test_an_ensemble_that_does_not_split_fails_on_every_rank(device):
    r = run_mpi(3, """
        from mpi4py import MPI
        from clphys.sde import josephson
        try:
            josephson(a=4.2, n_paths=300, periods=4, comm=MPI.COMM_WORLD)
        except ValueError as exc:
            say(f"error {MPI.COMM_WORLD.rank} {exc}")
        try:
            josephson(a=4.2 + MPI.COMM_WORLD.rank, n_paths=600, periods=4, comm=MPI.COMM_WORLD)
        except ValueError as exc:
            say(f"differ {MPI.COMM_WORLD.rank} {exc}")
        try:
            josephson(a=4.2, n_paths=600, periods=4, checkpoint="x.npz", comm=MPI.COMM_WORLD)
        except ValueError as exc:
            say(f"ckpt {MPI.COMM_WORLD.rank} {exc}")
    """, device, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    for tag, text in (("error", "cannot be split over 3 MPI ranks"),
                      ("differ", "josephson arguments differ across MPI ranks"),
                      ("ckpt", "not supported with comm=")):
        mine = [l for l in lines if l.startswith(tag + " ")]
        assert sorted(l.split()[1] for l in mine) == ["0", "1", "2"], (tag, r.stdout)
        assert all(text in l for l in mine), (tag, mine)


def test_mismatched_calls_fail_on_every_rank(device):
    """run(), values(), state() and save() of a distributed ensemble check that every rank
    made the same call with the same arguments: ValueError on every rank, not a hang."""
    r = run_mpi(2, """
        from mpi4py import MPI
        from clphys.sde import Ensemble, Model
        comm = MPI.COMM_WORLD
        one = comm.rank == 1
        ou = Model(["v"], {"v": "-v"}, {"v": "1"}, [], name="ou")
        ens = Ensemble(ou, 64, {}, 0.01, seed=1, initial={"v": 0.0}, work_group_size=16, comm=comm)
        cases = {
            "steps": lambda: ens.run(steps=20 if one else 10),
            "which": lambda: ens.values() if one else ens.run(steps=10),
            "gather": lambda: ens.state() if one else ens.values(),
            "unwrap": lambda: ens.values(unwrap=one),
        }
        for name, call in cases.items():
            try:
                call()
            except ValueError as exc:
                say(f"{name} {comm.rank} {exc}")
        r = ens.run(steps=5)
        say(f"after {comm.rank} {ens.step}")
    """, device, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    for tag, text in (("steps", "steps = 10 vs 20"), ("which", "call = 'run' vs 'values'"),
                      ("gather", "call = 'values' vs 'state'"), ("unwrap", "unwrap = False vs True")):
        mine = [l for l in lines if l.startswith(tag + " ")]
        assert sorted(l.split()[1] for l in mine) == ["0", "1"], (tag, r.stdout)
        assert all("differ across MPI ranks" in l and text in l for l in mine), (tag, mine)
    assert sorted(l for l in lines if l.startswith("after")) == ["after 0 5", "after 1 5"]


def test_shares_on_oclgrind(oclgrind):
    """The kernels of both splits on Oclgrind (its checks log into the file the
    fixture reads): grid points 1 of 2, and paths 4.. of 7 of one point."""
    r = run_mpi(2, """
        from mpi4py import MPI
        from clphys.sde import Ensemble, models
        comm = MPI.COMM_WORLD
        for grid, paths in (([1.0, 2.0], 5), (1.0, 7)):
            ens = Ensemble(models.BROWNIAN, paths, {"D": grid}, 0.1, initial={"x": ("uniform", 0.0, 1.0)},
                           work_group_size=4, comm=comm, gather="all")
            r = ens.run(steps=3, sample_every=2, histograms={"x": (4, -2.0, 2.0)}, record_paths=5)
            assert "oclgrind" in ens.device.facts.vendor
            say(f"{comm.rank} {ens.share.n_grid} {ens.share.n_paths} {r.mean['x'].shape}")
    """, oclgrind, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(r.stdout.splitlines()) == ["0 1 4 (2,)", "0 1 5 (2, 2)", "1 1 3 (2,)", "1 1 5 (2, 2)"]
