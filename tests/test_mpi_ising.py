"""Ising over MPI ranks (mpiexec from pytest): one lattice split in slabs (2D
rows, 3D planes; uneven shares on 3 ranks; both multispin modes) equals the
same lattice on one device bit for bit (spins, energies, sampled series);
its checkpoint resumes on another number of ranks and on one device;
ensembles and binder_scan split by replicas equal one device; bad input
fails on every rank without a hang."""

import numpy as np
import pytest

from clphys.ising import Ensemble2D, Ising2D, Ising3D, binder_scan
from mpi_run import run_mpi

LATTICES = [(2, 64, 2.3, 1), (2, 64, 2.3, "auto"), (3, 16, 4.4, 1), (3, 16, 4.4, "auto")]

# run on the ranks: every lattice of LATTICES, 3 sweeps, a sample of 6, then the first one saved
SPLIT = """
import numpy as np
from mpi4py import MPI
from clphys.ising import Ising2D, Ising3D
comm = MPI.COMM_WORLD
out = {}
for i, (dim, L, T, spw) in enumerate(LATTICES):
    lat = (Ising2D if dim == 2 else Ising3D)(L, T, seed=7 + i, spins_per_word=spw, comm=comm)
    lat.sweep(3)
    s = lat.sample(6, every=1, n_therm=0)
    out[f"{i}.spins"], out[f"{i}.e"], out[f"{i}.m"] = lat.spins(), s.energy, s.magnetization
    out[f"{i}.E"] = np.array([lat.energy(), lat.magnetization()])
    assert lat.local_shape[-1] < L and lat.ensemble.backend.halo_times["half-sweeps"] == 2 * 9
    if i == 0:
        lat.save(CKPT)
if comm.rank == 0:
    np.savez(OUT, **out)
"""

RESUME = """
import numpy as np
from mpi4py import MPI
from clphys.ising import Ising2D
comm = MPI.COMM_WORLD
lat = Ising2D.load(CKPT, comm=comm)
lat.sweep(4)
spins = lat.spins()
if comm.rank == 0:
    np.save(OUT, spins)
"""


def _single(i, dim, L, T, spw):
    lat = (Ising2D if dim == 2 else Ising3D)(L, T, seed=7 + i, spins_per_word=spw)
    lat.sweep(3)
    s = lat.sample(6, every=1, n_therm=0)
    return {f"{i}.spins": lat.spins(), f"{i}.e": s.energy, f"{i}.m": s.magnetization,
            f"{i}.E": np.array([lat.energy(), lat.magnetization()])}


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_split_lattice_equals_one_device(device, ranks, tmp_path):
    ckpt, out = tmp_path / "lattice.npz", tmp_path / "out.npz"
    r = run_mpi(ranks, f"LATTICES = {LATTICES!r}\nCKPT = {str(ckpt)!r}\nOUT = {str(out)!r}\n" + SPLIT,
                device)
    assert r.returncode == 0, r.stderr[-4000:]
    got = dict(np.load(out))
    want = {}
    with device:
        for i, args in enumerate(LATTICES):
            want.update(_single(i, *args))
    differ = [k for k in want if not np.array_equal(got[k], want[k])]
    assert not differ, f"differ from one device: {differ}"
    # the gathered checkpoint continues on the other number of ranks and on one device
    r = run_mpi(5 - ranks, f"CKPT = {str(ckpt)!r}\nOUT = {str(tmp_path / 'resumed.npy')!r}\n" + RESUME,
                device)
    assert r.returncode == 0, r.stderr[-4000:]
    one = Ising2D(64, 2.3, seed=7, spins_per_word=1, device=device)
    one.sweep(3)
    one.sample(6, every=1, n_therm=0)
    one.sweep(4)
    assert np.array_equal(np.load(tmp_path / "resumed.npy"), one.spins())
    loaded = Ising2D.load(ckpt, device=device)
    loaded.sweep(4)
    assert np.array_equal(loaded.spins(), one.spins())


# deep halos: (dim, shape, T, spins_per_word, halo, sweep() calls); uneven shares on 3 and 4
# ranks (64 rows: 22, 22, 20; 14 planes: 6, 4, 4 and 4, 4, 4, 2; 16 planes: 6, 6, 4; 30 planes:
# 10 each and 8, 8, 8, 6; 48 planes: 24, 16 or 12 each), cycles of k = halo / 2 sweeps ending
# inside a call and continuing across calls, 1 to 5 sweeps of the next cycle run ahead during
# an exchange (3D shares count as large here: SlabBackend.AHEAD_LARGE), shares of fewer than 2
# halo slabs (the edge slabs overlap), and halo = 1 (an exchange per half-sweep)
DEEP = [(2, 64, 2.3, 1, 2, (3, 2)), (2, 64, 2.3, "auto", 8, (5, 6)), (2, 64, 2.3, 1, 1, (2,)),
        (3, (16, 8, 14), 4.4, 1, 2, (3,)), (3, (16, 8, 16), 4.4, "auto", 4, (3, 2)),
        (3, (16, 8, 30), 4.4, 1, 6, (4, 13)), (3, (16, 8, 48), 4.4, 1, 12, (7, 9))]


def _deep_single(dim, shape, T, spw, calls, device):
    lat = (Ising2D if dim == 2 else Ising3D)(shape, T, seed=11, spins_per_word=spw, device=device)
    lat.sweep(sum(calls))
    return lat.spins(), np.array([lat.energy(), lat.magnetization()])


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_deep_halos_equal_one_device(device, ranks, tmp_path):
    """Halos of h slabs exchanged every h / 2 sweeps (their rows updated
    redundantly with their global Philox counters): the spins, energy and
    magnetization of one device, bit for bit, after sweep() calls that are
    not multiples of the cycle, and after set_spins mid-cycle; exchanges only
    once per cycle."""
    out = tmp_path / "deep.npz"
    r = run_mpi(ranks, f"""
        import numpy as np
        from mpi4py import MPI
        from clphys.ising import Ising2D, Ising3D
        from clphys.ising.slabs import SlabBackend
        SlabBackend.AHEAD_LARGE_SITES = 0
        comm = MPI.COMM_WORLD
        got = {{}}
        for i, (dim, shape, T, spw, halo, calls) in enumerate({DEEP!r}):
            lat = (Ising2D if dim == 2 else Ising3D)(shape, T, seed=11, spins_per_word=spw, comm=comm,
                                                     halo=halo)
            for n in calls:
                lat.sweep(n)
            got[f"{{i}}.spins"], got[f"{{i}}.E"] = lat.spins(), np.array([lat.energy(), lat.magnetization()])
            got[f"{{i}}.exchanges"] = np.array(lat.ensemble.backend.halo_times["exchanges"])
            got[f"{{i}}.ahead"] = np.array(lat.ensemble.backend._ahead)
        # set_spins in the middle of a cycle (halos set too: a new cycle)
        lat = Ising2D(64, 2.3, seed=11, comm=comm, halo=4)
        lat.sweep(3)
        lat.set_spins(np.where(np.random.default_rng(2).random((64, 64)) < 0.5, 1, -1))
        lat.sweep(5)
        got["set.spins"] = lat.spins()
        if comm.rank == 0:
            np.savez({str(out)!r}, **got)
    """, device)
    assert r.returncode == 0, r.stderr[-4000:]
    got = dict(np.load(out))
    for i, (dim, shape, T, spw, halo, calls) in enumerate(DEEP):
        spins, E = _deep_single(dim, shape, T, spw, calls, device)
        assert np.array_equal(got[f"{i}.spins"], spins), (i, halo)
        assert np.array_equal(got[f"{i}.E"], E), (i, halo)
        # one exchange per cycle of halo / 2 sweeps (h = 1: per half-sweep)
        want = 2 * sum(calls) if halo == 1 else sum(calls) // (halo // 2)
        assert int(got[f"{i}.exchanges"]) == want, (i, halo)
    # the last lattice's sweeps ahead: all but one of a cycle's 6, within 2 * ahead < own / 2
    assert int(got[f"{len(DEEP) - 1}.ahead"]) == {2: 5, 3: 3, 4: 2}[ranks]
    one = Ising2D(64, 2.3, seed=11, device=device)
    one.sweep(3)
    one.set_spins(np.where(np.random.default_rng(2).random((64, 64)) < 0.5, 1, -1))
    one.sweep(5)
    assert np.array_equal(got["set.spins"], one.spins())


def test_halo_depth_is_checked():
    from clphys.ising.slabs import check_halo, halo_depth
    assert check_halo(None, 64, 3) is None and check_halo(8, 64, 3) == 8 and check_halo(1, 64, 3) == 1
    for bad, text in ((3, "even number of slabs up to 20"), (22, "up to 20"), (0, ">= 1")):
        with pytest.raises(ValueError, match=text):
            check_halo(bad, 64, 3)
    with pytest.raises(TypeError, match="halo must be an integer"):
        check_halo(2.0, 64, 3)
    with pytest.raises(ValueError, match="cannot be split"):
        check_halo(2, 4, 3)
    # the device's default, on GPUs deeper by dimension within 1/16 of the thinnest
    # share, at most a quarter of it, else 1 (14 planes over 3 ranks: 6, 4, 4; 40 over
    # 2: 20 each)
    assert halo_depth(65536, 2, None, True, 2) == 64 and halo_depth(1024, 2, None, True, 3) == 32
    assert halo_depth(768, 2, None, True, 2) == 24 and halo_depth(256, 2, None, True, 2) == 16
    assert halo_depth(65536, 2, None, False, 2) == 4 and halo_depth(64, 2, None, False, 3) == 4
    assert halo_depth(40, 2, None, True, 2) == 4 and halo_depth(14, 3, None, True, 3) == 1
    assert halo_depth(14, 3, 2, True, 3) == 2 and halo_depth(65536, 2, 8, True, 2) == 8
    with pytest.raises(ValueError, match="needs comm"):
        Ising2D(16, 2.3, halo=2)


def test_split_lattice_kernels_on_oclgrind(oclgrind):
    """Row ranges, global Philox rows and halo writes on Oclgrind (its checks
    log into the file the fixture reads): 2D with short rows, 2 ranks, halos of
    2 rows (valid regions wrapping over the local rows, edges and interior)."""
    r = run_mpi(2, """
        import numpy as np
        from mpi4py import MPI
        from clphys.ising import Ising2D
        lat = Ising2D(16, 2.3, seed=1, comm=MPI.COMM_WORLD, halo=2)
        assert lat.device.facts.vendor == "oclgrind"
        lat.sweep(2)
        say(f"{MPI.COMM_WORLD.rank} {lat.energy()}")
    """, oclgrind, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = sorted(r.stdout.splitlines())
    assert [l.split()[0] for l in lines] == ["0", "1"] and lines[0].split()[1] == lines[1].split()[1]


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_split_ensembles_and_binder_equal_one_device(device, ranks, tmp_path):
    temps = [2.0, 2.2, 2.4, 2.6, 3.0]
    scan = dict(sizes=[8, 16], temperatures=[2.2, 2.3, 2.4], n_measure=32, every=1, replicas=2, seed=4)
    r = run_mpi(ranks, f"""
        import numpy as np, warnings
        from mpi4py import MPI
        from clphys.ising import Ensemble2D, binder_scan
        warnings.simplefilter("ignore")
        comm = MPI.COMM_WORLD
        out = {{}}
        for alg in ("multispin", "checkerboard"):
            ens = Ensemble2D(16, {temps!r}, seed=3, algorithm=alg, comm=comm, gather="all")
            ens.sweep(5)
            s = ens.sample(8, every=1, n_therm=0)
            out[alg + ".spins"], out[alg + ".e"], out[alg + ".m"] = ens.spins(), s.energy, s.magnetization
        scan = binder_scan(comm=comm, **{scan!r})
        if comm.rank == 0:
            out.update(binder=scan.binder, binder_err=scan.binder_err, chi=scan.susceptibility,
                       tau=scan.tau_int, energy=scan.energy)
            np.savez({str(tmp_path / "out.npz")!r}, **out)
        else:
            assert scan is None
    """, device)
    assert r.returncode == 0, r.stderr[-4000:]
    got = dict(np.load(tmp_path / "out.npz"))
    for alg in ("multispin", "checkerboard"):
        ens = Ensemble2D(16, temps, seed=3, algorithm=alg, device=device)
        ens.sweep(5)
        s = ens.sample(8, every=1, n_therm=0)
        assert np.array_equal(got[alg + ".spins"], ens.spins())
        assert np.array_equal(got[alg + ".e"], s.energy) and np.array_equal(got[alg + ".m"], s.magnetization)
    with pytest.warns(Warning):
        one = binder_scan(device=device, **scan)
    for name, value in (("binder", one.binder), ("binder_err", one.binder_err), ("chi", one.susceptibility),
                        ("tau", one.tau_int), ("energy", one.energy)):
        assert np.array_equal(got[name], value, equal_nan=True), name


def test_replica_offset_continues_the_numbering(device):
    """Replicas 3, 4 of an ensemble are an ensemble of 2 with replica_offset 3."""
    temps = [2.1, 2.2, 2.3, 2.4, 2.5]
    whole = Ensemble2D(16, temps, seed=9, device=device)
    part = Ensemble2D(16, temps[3:], seed=9, replica_offset=3, device=device)
    whole.sweep(4)
    part.sweep(4)
    assert np.array_equal(whole.spins()[3:], part.spins())
    with pytest.raises(ValueError, match="cannot continue the replica numbering"):
        Ensemble2D(16, temps, seed=9, algorithm="checkerboard", rng="lcg", replica_offset=1, device=device)


def test_bad_input_fails_on_every_rank(device):
    r = run_mpi(3, """
        from mpi4py import MPI
        from clphys.ising import Ising2D, Ensemble2D
        comm = MPI.COMM_WORLD
        cases = {
            "split": lambda: Ising2D((64, 4), 2.3, comm=comm),
            "differ": lambda: Ising2D(64, 2.3 + 0.1 * (comm.rank == 2), comm=comm),
            "algorithm": lambda: Ising2D(64, 2.3, algorithm="checkerboard", comm=comm),
            "replicas": lambda: Ensemble2D(16, [2.0, 2.5], comm=comm),
            "temperature": lambda: Ising2D(64, -1.0 if comm.rank == 1 else 2.0, comm=comm),
            "halo": lambda: Ising2D(64, 2.3, halo=4 if comm.rank == 1 else 2, comm=comm),
        }
        for name, make in cases.items():
            try:
                make()
            except (ValueError, TypeError) as exc:
                say(f"{name} {comm.rank} {exc}")
        comm.Barrier()
    """, device, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    for name, text in (("split", "cannot be split over 3 MPI ranks"),
                       ("differ", "lattice parameters differ across MPI ranks"),
                       ("algorithm", "runs algorithm 'multispin'"),
                       ("replicas", "2 replicas cannot be split over 3 MPI ranks"),
                       ("temperature", "rank 1: T must be > 0"),
                       ("halo", "lattice parameters differ across MPI ranks")):
        mine = [l for l in lines if l.startswith(name + " ")]
        assert sorted(l.split()[1] for l in mine) == ["0", "1", "2"], (name, r.stdout)
        assert all(text in l for l in mine), (name, mine)


def test_a_rank_without_a_device_fails_everywhere(device):
    r = run_mpi(2, """
        from mpi4py import MPI
        from clphys.ising import Ising2D
        try:
            Ising2D(64, 2.3, comm=MPI.COMM_WORLD)
        except Exception as exc:
            say(f"{MPI.COMM_WORLD.rank} {type(exc).__name__} {exc}")
    """, env={"CLPHYS_DEVICE": f"{device.facts.index};no-such-device-xyz"}, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = sorted(l for l in r.stdout.splitlines() if "Error rank" in l)     # (messages go on)
    assert [l.split()[0] for l in lines] == ["0", "1"], r.stdout
    assert all("DeviceError rank 1:" in l and "no-such-device-xyz" in l for l in lines), lines


def test_mismatched_calls_fail_on_every_rank(device, tmp_path):
    """Every collective method checks that every rank called it with the same arguments:
    sample(10) against sample(20), sweep(2) against sweep(4), sample() against sweep(), ...
    raise ValueError on every rank (before, the ranks waited for each other forever); the
    lattice goes on afterwards as if the calls had not been made."""
    r = run_mpi(2, """
        import numpy as np
        from mpi4py import MPI
        from clphys.ising import Ising2D, Ensemble2D
        comm = MPI.COMM_WORLD
        one = comm.rank == 1
        lat = Ising2D(32, 2.3, seed=5, comm=comm)
        ens = Ensemble2D(16, [2.0, 2.2, 2.4], seed=5, comm=comm)
        spins = np.ones((32, 32), np.int8)
        cases = {
            "sample": lambda: lat.sample(20 if one else 10, n_therm=0),
            "every": lambda: lat.sample(10, every=2 if one else 1, n_therm=0),
            "sweep": lambda: lat.sweep(4 if one else 2),
            "which": lambda: lat.sweep(2) if one else lat.sample(10, n_therm=0),
            "energy": lambda: lat.spins() if one else lat.energy(),
            "set_spins": lambda: lat.set_spins(-spins if one else spins),
            "temperature": lambda: setattr(lat, "temperature", 2.4 if one else 2.3),
            "ensemble": lambda: ens.sample(6 if one else 5, n_therm=0),
            "gather": lambda: ens.spins() if one else ens.sums(),
        }
        for name, call in cases.items():
            try:
                call()
            except ValueError as exc:
                say(f"{name} {comm.rank} {exc}")
        lat.sweep(3)                        # the lattice goes on, on every rank
        s = lat.sample(5, n_therm=0)
        if comm.rank == 0:
            np.save(OUT, lat.spins())
        else:
            lat.spins()
        comm.Barrier()
    """.replace("OUT", repr(str(tmp_path / "spins.npy"))), device, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    for name, text in (("sample", "n_measure = 10 vs 20"), ("every", "every = 1 vs 2"),
                       ("sweep", "n = 2 vs 4"), ("which", "call = 'sample' vs 'sweep'"),
                       ("energy", "call = 'sums' vs 'spins'"), ("set_spins", "spins = "),
                       ("temperature", "T = "), ("ensemble", "n_measure = 5 vs 6"),
                       ("gather", "call = 'sums' vs 'spins'")):
        mine = [l for l in lines if l.startswith(name + " ")]
        assert sorted(l.split()[1] for l in mine) == ["0", "1"], (name, r.stdout)
        assert all("differ across MPI ranks (rank 0 vs rank 1" in l and text in l
                   for l in mine), (name, mine)
    one = Ising2D(32, 2.3, seed=5, device=device)
    one.sweep(3)
    one.sample(5, n_therm=0)
    got = np.load(tmp_path / "spins.npy")
    assert np.array_equal(got, one.spins())
