"""`clphys muca` through clphys.cli.main, and Ctrl-C with --checkpoint and
--resume in a subprocess (the resumed run ends with the bits of an
uninterrupted one)."""

import re

import numpy as np
import pytest

from clphys.cli import main
from clphys.exact import density_of_states
from cli_subprocess import interrupt_after, start_cli


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
    (["--size", "4", "-o", "result.txt"], "must end in one of .npz"),
    (["--resume", "none.npz"], "does not exist"),
])
def test_muca_command_bad_input(device, capsys, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    assert main(["muca", *args, "--device", _spec(device)]) == 2
    assert message in capsys.readouterr().err


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
    assert f"state saved to {ck}; continue with --resume {ck}" in res.stderr
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
