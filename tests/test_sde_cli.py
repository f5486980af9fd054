"""`clphys sde josephson|kuramoto` at tiny sizes, with plots."""

import pytest

from clphys.cli import main


def test_josephson_cli(device, tmp_path, capsys):
    png = tmp_path / "v_of_a.png"
    rc = main(["sde", "josephson", "--a", "4.0:4.4:3", "--paths", "16", "--periods", "4",
               "--steps-per-period", "20", "--bins", "8", "--quiet", "--plot", str(png),
               "--device", device.facts.index])
    out = capsys.readouterr().out
    assert rc == 0 and png.stat().st_size > 1000
    rows = [line.split() for line in out.splitlines() if line.strip() and line.split()[0][0].isdigit()]
    assert [float(r[0]) for r in rows] == pytest.approx([4.0, 4.2, 4.4])
    assert all(len(r) == 3 for r in rows)


def test_josephson_cli_single_point_and_errors(device, tmp_path, capsys):
    png = tmp_path / "density.png"
    assert main(["sde", "josephson", "--paths", "8", "--periods", "2", "--steps-per-period", "10",
                 "--quiet", "--plot", str(png), "--device", device.facts.index]) == 0
    assert png.exists()
    # two swept parameters cannot go into one plot; bad values are refused by argparse
    assert main(["sde", "josephson", "--a", "1,2", "--f", "0,1", "--paths", "4", "--periods", "2",
                 "--steps-per-period", "5", "--quiet", "--plot", str(png),
                 "--device", device.facts.index]) == 2
    assert "at most one swept parameter" in capsys.readouterr().err
    assert main(["sde", "josephson", "--paths", "0", "--device", device.facts.index]) == 2
    with pytest.raises(SystemExit):
        main(["sde", "josephson", "--a", "4:5"])
    assert main(["sde"]) == 2


def test_kuramoto_cli(device, tmp_path, capsys):
    png = tmp_path / "r.png"
    rc = main(["sde", "kuramoto", "--n", "256", "--coupling", "4", "--noise", "1", "--t-end", "2",
               "--dt", "0.05", "--quiet", "--plot", str(png), "--device", device.facts.index])
    out = capsys.readouterr().out
    assert rc == 0 and png.stat().st_size > 1000
    assert "kernel = mean-field" in out and "0.83146" in out
