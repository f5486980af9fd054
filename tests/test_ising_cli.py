"""`clphys ising` and `clphys binder` through clphys.cli.main."""

import re

import pytest

from clphys.cli import main


def _spec(device):
    return device.facts.index


def test_ising_command(device, capsys):
    assert main(["ising", "--size", "64", "--temperature", "1.5", "--sweeps", "30", "--start", "up",
                 "--device", _spec(device)]) == 0
    out = capsys.readouterr().out
    e = float(re.search(r"energy/N\s+(\S+)", out).group(1))
    m = float(re.search(r"\|M\|/N\s+(\S+)", out).group(1))
    assert -2.0 <= e < -1.9 and 0.95 < m <= 1.0            # ordered phase at T = 1.5
    assert re.search(r"speed\s+\S+ spin flips/ns", out)
    assert "Onsager" in out and "exact" in out


def test_ising_command_3d_checkerboard_and_plot(device, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "lattice.png"
    assert main(["ising", "--dim", "3", "--size", "8,8,4", "--temperature", "4.5", "--sweeps", "5",
                 "--algorithm", "checkerboard", "--rng", "lcg", "--seed", "3",
                 "--device", _spec(device), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "Ising 3D 8x8x4" in out and "checkerboard/lcg" in out and "3D Tc" in out
    assert png.stat().st_size > 1000


def test_ising_command_errors(device, capsys):
    assert main(["ising", "--size", "12", "--device", _spec(device)]) == 2
    assert "allowed sizes" in capsys.readouterr().err
    assert main(["ising", "--size", "64", "--temperature", "-1", "--device", _spec(device)]) == 2
    assert "T must be > 0" in capsys.readouterr().err
    assert main(["ising", "--sweeps", "-3", "--device", _spec(device)]) == 2
    assert "--sweeps must be >= 0" in capsys.readouterr().err


def test_binder_command(device, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "binder.png"
    assert main(["binder", "--sizes", "8,16", "--tmin", "2.1", "--tmax", "2.45", "--points", "4",
                 "--therm", "100", "--measure", "64", "--replicas", "2", "--seed", "1",
                 "--device", _spec(device), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "Binder scan, 2D, sizes 8, 16" in out and "U4 crossing L=8/16" in out
    assert len([l for l in out.splitlines() if re.match(r"\s+(8|16)\s+2\.", l)]) == 8
    assert png.stat().st_size > 1000
    assert main(["binder", "--tmin", "2.3", "--tmax", "2.2", "--device", _spec(device)]) == 2
    assert "--tmin must be below --tmax" in capsys.readouterr().err
