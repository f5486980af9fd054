"""`clphys muca` through clphys.cli.main, and Ctrl-C with --checkpoint and
--resume in a subprocess, in the weight iteration and in the production (the
resumed run ends with the bits of an uninterrupted one); every derived default
checked before the first kernel, with the command line's names; help texts;
the CPU-time warning."""

import re
from types import SimpleNamespace

import numpy as np
import pytest

from cli_subprocess import interrupt_after, start_cli
from clphys.cli import main
from clphys.exact import density_of_states


def _spec(device):
    return device.facts.index


def test_muca_command_2d(device, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "dos.npz", tmp_path / "dos.png"
    assert main(["muca", "--size", "4", "--walkers", "128", "--production-blocks", "16", "--seed", "1",
                 "--device", _spec(device), "-o", str(out), "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "muca 2D L = 4, 128 walkers, seed 1" in text
    assert re.search(r"iterations\s+\d+ \(converged, d_k = \S+ < 0.0001\), width 16/16", text)
    assert re.search(r"time\s+\S+ s for \S+ attempted flips: \S+ flips/ns \(iteration phase\)", text)
    z = float(re.search(r"max \|ln g - ln g_exact\| / error = (\S+)", text).group(1))
    assert z < 4.0
    assert len(re.findall(r"^\s+\d\.\d{4}\s+-?\d", text, re.M)) == 5        # the canonical table
    with np.load(out) as r:
        E, ln_g = density_of_states(4)
        np.testing.assert_array_equal(r["energies"], E)
        np.testing.assert_array_equal(r["ln_g_exact"], ln_g)
        assert r["histogram"].sum() == 128 * r["updates"]                   # no lost counts
        np.testing.assert_array_equal(r["block_histograms"].sum(axis=0), r["histogram"])
        assert r["specific_heat"].shape == r["temperatures"].shape == (121,)
        assert r["history"].shape[1] == 9
    assert png.stat().st_size > 10_000


def test_muca_command_symmetric(device, capsys, tmp_path):
    out = tmp_path / "dos.npz"
    assert main(["muca", "--size", "4", "--walkers", "128", "--production-blocks", "16", "--seed", "1",
                 "--symmetric", "--device", _spec(device), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "muca 2D L = 4 (E <= 0, ln g mirrored), 128 walkers, seed 1" in text
    assert "round trips per walker between the ground state and E = 0" in text
    assert re.search(r"iterations\s+\d+ \(converged, d_k = \S+ < 0.0001\), width \d+/8", text)
    assert float(re.search(r"max \|ln g - ln g_exact\| / error = (\S+)", text).group(1)) < 4.0
    with np.load(out) as r:
        np.testing.assert_array_equal(r["energies"], density_of_states(4)[0])
        np.testing.assert_array_equal(r["ln_g"], r["ln_g"][::-1])


@pytest.mark.slow
def test_muca_command_3d(device, capsys):
    assert main(["muca", "--dim", "3", "--size", "2", "--walkers", "64", "--production-blocks", "8",
                 "--device", _spec(device)]) == 0
    text = capsys.readouterr().out
    assert "muca 3D L = 2" in text and "exact" not in text and "production" in text


@pytest.mark.parametrize("args,message", [
    (["--size", "5"], "L must be even"), ([], "--size is required"),
    (["--size", "4", "--walkers", "0"], "--walkers must be >= 1"),
    (["--size", "4", "--kl", "-1"], "--kl must be a positive number"),
    (["--size", "4", "--production-blocks", "1"], "--production-blocks must be >= 2"),
    (["--size", "4", "--walkers", "64", "--production-blocks", "100"],
     "--production-blocks must be <= the walkers (64), got 100"),
    (["--size", "4", "--walkers", "1"], "--walkers 1: the production needs at least 2 walkers"),
    (["--size", "4", "--target-error", "0"], "--target-error must be a positive number"),
    (["--size", "4", "--max-seconds", "-3"], "--max-seconds must be a positive number"),
    (["--size", "4", "-o", "result.txt"], "must end in one of .npz"),
    (["--resume", "none.npz"], "does not exist"),
    (["--size", "4", "--weights", "none.npz"], "--weights 'none.npz' does not exist"),
    (["--size", "4", "--weights", "w.npy", "--kl", "1e-3"], "--weights skips the weight iteration"),
    (["--resume", "ck.npz", "--weights", "w.npy"], "--weights: a resumed run goes on with the weights"),
    (["--size", "4", "--production-walkers", "1"], "--production-walkers must be >= 2"),
    (["--size", "4", "--walkers", "64", "--production-walkers", "32", "--production-blocks", "50"],
     "--production-blocks must be <= the walkers (32), got 50"),
    (["--size", "4", "--weights", "w.npy", "--production-walkers", "64"], "leave out --production-walkers"),
    (["--size", "256", "--production-walkers", "2100000"], "use fewer walkers"),
])
def test_muca_command_bad_input(device, capsys, tmp_path, monkeypatch, args, message):
    """Refused with exit 2 and the flag's name, before any walker is built."""
    from clphys.muca import simulation

    def never(*a, **k):
        raise AssertionError("Multicanonical built before the arguments were checked")
    monkeypatch.setattr(simulation.Multicanonical, "__init__", never)
    monkeypatch.chdir(tmp_path)
    assert main(["muca", *args, "--device", _spec(device)]) == 2
    assert message in capsys.readouterr().err


def test_muca_command_produces_with_given_weights(device, capsys, tmp_path):
    """--weights: no iteration; the production samples with the weights given
    (Beale's -ln g as .npy, or an -o output's) and agrees with Beale."""
    E, ln_g = density_of_states(4)
    bins = np.arange(-32, 33, 4)
    w = tmp_path / "beale.npy"
    np.save(w, np.interp(bins, E, -ln_g))
    out, again = tmp_path / "out.npz", tmp_path / "again.npz"
    common = ["--size", "4", "--walkers", "256", "--production-blocks", "32", "--device", _spec(device)]
    assert main(["muca", *common, "--weights", str(w), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"iterations  none: the weights of {w}" in text and "iteration phase" not in text
    assert float(re.search(r"max \|ln g - ln g_exact\| / error = (\S+)", text).group(1)) < 4.0
    with np.load(out) as r:
        np.testing.assert_allclose(r["log_weights"] - r["log_weights"][0], -(ln_g - ln_g[0]), atol=1e-12)
        assert r["history"].shape == (0,)
    assert main(["muca", *common, "--seed", "1", "--weights", str(out), "-o", str(again)]) == 0
    with np.load(out) as r, np.load(again) as r2:
        np.testing.assert_array_equal(r2["log_weights"], r["log_weights"])


@pytest.mark.parametrize("stop", [[], ["--max-iterations", "3"]])
def test_muca_command_produces_with_other_walkers(device, capsys, tmp_path, stop):
    """--production-walkers: the iteration at --walkers, then the production
    at the other count on new lattices, with the weights the production of the
    iterating walkers would have used (the last histogram applied where the
    iteration stopped early): the bits of the same steps through the API."""
    from clphys.muca import Multicanonical
    out = tmp_path / "out.npz"
    assert main(["muca", "--size", "4", "--walkers", "256", "--seed", "3", "--production-walkers", "96",
                 "--production-blocks", "12", *stop, "--device", _spec(device), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "muca 2D L = 4, 256 walkers, seed 3" in text and "; the production at 96 walkers, from new" in text
    sim = Multicanonical(4, walkers=256, seed=3, device=device)
    sim.iterate(max_iterations=int(stop[1]) if stop else None)
    prod = Multicanonical(4, walkers=96, seed=3, device=device)
    prod.set_log_weights(sim.production_weights())
    res = prod.produce(blocks=12)
    with np.load(out) as r:
        assert (int(r["walkers"]), int(r["iteration_walkers"])) == (96, 256)
        assert r["history"].shape == (len(sim.history), 9)
        assert r["histogram"].sum() == 96 * r["updates"]
        for key in ("energies", "ln_g", "ln_g_err", "log_weights", "block_histograms"):
            np.testing.assert_array_equal(r[key], getattr(res, key))
    if stop:        # the iterating walkers' own production starts from the same weights
        whole = Multicanonical(4, walkers=256, seed=3, device=device)
        whole.iterate(max_iterations=3)
        assert not whole.converged
        with pytest.warns(RuntimeWarning, match="above the target"):
            short = whole.produce(blocks=12, updates=10)
        np.testing.assert_array_equal(short.log_weights, res.log_weights)
    else:
        assert float(re.search(r"max \|ln g - ln g_exact\| / error = (\S+)", text).group(1)) < 4.0


def test_muca_command_refuses_weights_that_do_not_fit(device, capsys, tmp_path, monkeypatch):
    """--weights of another lattice, of the wrong length or not NumPy's:
    exit 2 with the reason, before any walker is built."""
    from clphys.muca import simulation
    np.savez(tmp_path / "l6.npz", log_weights=np.zeros(37), energies=np.arange(-72, 73, 4), L=6, dim=2)
    np.save(tmp_path / "short.npy", np.zeros(5))
    np.save(tmp_path / "nan.npy", np.full(17, np.nan))
    (tmp_path / "text.npy").write_text("not numbers")
    np.save(tmp_path / "words.npy", np.array(["a"] * 17))
    np.savez(tmp_path / "odd.npz", log_weights=np.zeros(15), energies=np.arange(15) * 3)

    def never(*a, **k):
        raise AssertionError("Multicanonical built before --weights was checked")
    monkeypatch.setattr(simulation.Multicanonical, "__init__", never)
    for name, message in (("l6.npz", "is for L = 6, not 4"),
                          ("short.npy", "must hold 17 finite numbers (one per energy of 2D L = 4), got float64 "
                                        "of shape (5,)"),
                          ("nan.npy", "must hold 17 finite numbers"),
                          ("text.npy", "is not a NumPy .npz or .npy file"),
                          ("words.npy", "got <U1 of shape (17,)"),
                          ("odd.npz", "its energies or log_weights are not those of an output")):
        assert main(["muca", "--size", "4", "--weights", str(tmp_path / name), "--device", _spec(device)]) == 2
        assert message in capsys.readouterr().err, name


def test_default_production_blocks_follow_walkers(device, capsys):
    """64 walkers: the production's 64 default blocks (min(100, walkers)) run."""
    assert main(["muca", "--size", "4", "--walkers", "64", "--kl", "1e-3", "--production-updates", "300",
                 "--device", _spec(device)]) == 0
    assert "production  64 blocks of walkers" in capsys.readouterr().out


def test_every_option_has_help():
    from clphys.cli import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["muca"]
    missing = [a.option_strings for a in sub._actions if a.option_strings and not a.help]
    assert not missing, missing


def test_cpu_time_warning_up_front(device, capsys, monkeypatch):
    """A long weight iteration on a CPU is announced before it starts, with the
    estimate (2D L = 32 on 2 cores: about an hour)."""
    from clphys.muca import cli as muca_cli
    from clphys.muca import simulation
    from clphys.muca.geometry import Geometry

    class Stop(Exception):
        pass

    def stop(*a, **k):
        raise Stop
    monkeypatch.setattr(simulation.Multicanonical, "__init__", stop)
    if not device.facts.is_gpu:
        with pytest.raises(Stop):
            main(["muca", "--size", "32", "--device", _spec(device)])
        err = capsys.readouterr().err
        assert re.search(r"warning: on .* the weight iteration of 2D L = 32 needs about \S+ attempted "
                         r"flips: about [\d.]+ (minutes|hours)", err), err
    fake = SimpleNamespace(facts=SimpleNamespace(is_gpu=False, compute_units=2), name="a CPU")
    muca_cli._cpu_warning(fake, Geometry(2, 32), 128)
    assert "about 1.1 hours" in capsys.readouterr().err           # 8.2e10 flips at 0.02 flips/ns
    muca_cli._cpu_warning(fake, Geometry(2, 8), 128)                # seconds: no warning
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_ctrl_c_checkpoint_and_resume(device, tmp_path, capsys):
    common = ["--size", "4", "--walkers", "256", "--seed", "2", "--kl", "1e-3",
              "--production-blocks", "8", "--production-updates", "200000"]
    ref = tmp_path / "ref.npz"
    assert main(["muca", *common, "--device", _spec(device), "-o", str(ref)]) == 0
    capsys.readouterr()
    ck, out = tmp_path / "ck.npz", tmp_path / "out.npz"
    run = start_cli(["muca", *common, "--progress", "--checkpoint", str(ck), "-o", str(out)], device,
                    cwd=tmp_path)
    res = interrupt_after(run, "muca iteration 2")
    assert res.returncode == 130, res.stderr[-2000:]
    assert res.stop_seconds < 3.0
    assert f"state saved in {ck}: continue with --resume {ck}" in res.stderr
    assert ck.exists() and not out.exists()
    # a checkpoint of another size is refused before any work
    assert main(["muca", "--resume", str(ck), "--size", "6", "--device", _spec(device)]) == 2
    assert "--size 6 does not match the checkpoint" in capsys.readouterr().err
    done = start_cli(["muca", "--resume", str(ck), "--production-blocks", "8",
                      "--production-updates", "200000", "-o", str(out)], device, cwd=tmp_path).wait()
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resumed from" in done.stdout
    with np.load(ref) as a, np.load(out) as b:
        for key in ("energies", "ln_g", "ln_g_err", "block_histograms", "log_weights"):
            np.testing.assert_array_equal(a[key], b[key])
        np.testing.assert_array_equal(a["history"][:, [0, 1, 2, 3, 4, 5, 6, 8]],
                                      b["history"][:, [0, 1, 2, 3, 4, 5, 6, 8]])


@pytest.mark.parametrize("walkers", [["--walkers", "256"], ["--walkers", "128", "--production-walkers", "256"]])
def test_ctrl_c_in_the_production_and_resume(device, tmp_path, capsys, walkers):
    """Ctrl-C while the production runs writes the checkpoint; --resume
    continues the production (no iteration) to the bits of an uninterrupted
    run. With --production-walkers the checkpoint holds the production's
    walkers, and the same command line with --resume goes on."""
    common = ["--size", "4", *walkers, "--seed", "2", "--kl", "1e-3",
              "--production-blocks", "8", "--production-updates", "600000"]
    ref = tmp_path / "ref.npz"
    assert main(["muca", *common, "--device", _spec(device), "-o", str(ref)]) == 0
    capsys.readouterr()
    ck, out = tmp_path / "ck.npz", tmp_path / "out.npz"
    run = start_cli(["muca", *common, "--progress", "--checkpoint", str(ck), "-o", str(out)], device,
                    cwd=tmp_path)
    res = interrupt_after(run, "muca production")
    assert res.returncode == 130, res.stderr[-2000:]
    assert f"state saved in {ck}: continue with --resume {ck}" in res.stderr
    assert "muca iteration" not in res.stderr.split("muca production")[-1]
    again = common if "--production-walkers" in walkers else common[-4:]
    done = start_cli(["muca", *again, "--resume", str(ck), "-o", str(out)], device, cwd=tmp_path).wait()
    assert done.returncode == 0, done.stderr[-2000:]
    assert "256 walkers" in done.stdout and "(in the production)" in done.stdout
    assert "muca iteration" not in done.stderr
    with np.load(ref) as a, np.load(out) as b:
        assert int(b["walkers"]) == 256
        for key in ("energies", "ln_g", "ln_g_err", "block_histograms", "log_weights"):
            np.testing.assert_array_equal(a[key], b[key])
