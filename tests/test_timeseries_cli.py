"""clphys hurst | acf | pc | acrw on small files."""

import numpy as np
import pytest

from clphys.cli import main
from clphys.timeseries import acrw_numpy
from clphys.timeseries.cli import read_column
from clphys.timeseries.reference import (autocorrelation_numpy, hurst_numpy,
                                         pattern_conformity_numpy)


@pytest.fixture
def dev_arg(device):
    return ["--device", device.facts.index]


def table(out):
    return [line.split() for line in out.splitlines() if line and not line.startswith("#")]


def test_acrw_then_hurst_acf_pc(tmp_path, capsys, device, dev_arg):
    series = tmp_path / "series.txt"
    assert main(["acrw", "3000", "--phi", "0.044", "--seed", "1", "-o", str(series),
                 "--device", device.facts.index]) == 0
    p = np.loadtxt(series)
    np.testing.assert_array_equal(p, acrw_numpy(3000, 0.044, seed=1))
    capsys.readouterr()

    png = tmp_path / "h.png"
    assert main(["hurst", str(series), "--max-lag", "6", "--plot", str(png), *dev_arg]) == 0
    rows = table(capsys.readouterr().out)[1:]
    S, H = hurst_numpy(p, 6)
    np.testing.assert_allclose([float(r[1]) for r in rows], S, rtol=1e-7)
    np.testing.assert_allclose([float(r[2]) for r in rows[1:]], H[1:], atol=1e-5)
    assert png.stat().st_size > 1000

    assert main(["acf", str(series), "--diff", "--max-lag", "3", "--plot",
                 str(tmp_path / "a.png"), *dev_arg]) == 0
    rows = table(capsys.readouterr().out)[1:]
    np.testing.assert_allclose([float(r[1]) for r in rows],
                               autocorrelation_numpy(np.diff(p), 3), atol=1e-6)

    assert main(["pc", str(series), "--max-past", "3", "--max-future", "2", "--max-history",
                 "40", "--plot", str(tmp_path / "p.png"), "--no-progress", *dev_arg]) == 0
    rows = table(capsys.readouterr().out)[1:]
    want = pattern_conformity_numpy(p, 3, 2, 100.0, 40).Xi
    got = np.array([[float(v) for v in r[1:]] for r in rows])
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_acrw_to_stdout(capsys, dev_arg):
    assert main(["acrw", "5", "--phi", "0.5", "--seed", "3", *dev_arg]) == 0
    out = capsys.readouterr().out.split()
    assert [int(v) for v in out] == acrw_numpy(5, 0.5, seed=3).tolist()


def test_read_column(tmp_path):
    f = tmp_path / "prices.csv"
    f.write_text("# a comment\nDate,Open,Close\n2024-01-02,1.5,2.5\n2024-01-03,2,3.25\n")
    np.testing.assert_array_equal(read_column(str(f), "Close"), [2.5, 3.25])
    np.testing.assert_array_equal(read_column(str(f), "close"), [2.5, 3.25])
    np.testing.assert_array_equal(read_column(str(f), "1"), [1.5, 2.0])
    np.testing.assert_array_equal(read_column(str(f), -1), [2.5, 3.25])
    with pytest.raises(ValueError, match="choose one with --column"):
        read_column(str(f))
    with pytest.raises(ValueError, match="not among"):
        read_column(str(f), "High")
    g = tmp_path / "plain.txt"
    g.write_text("1 10\n2 20\n\n3 30\n")
    np.testing.assert_array_equal(read_column(str(g), 1), [10, 20, 30])
    with pytest.raises(ValueError, match="no header"):
        read_column(str(g), "x")
    with pytest.raises(ValueError, match="has 2 columns"):
        read_column(str(g), 5)


def test_errors_are_reported(tmp_path, capsys, dev_arg):
    f = tmp_path / "bad.txt"
    f.write_text("1\n2\nnan\n4\n5\n6\n")
    assert main(["hurst", str(f), "--max-lag", "2", *dev_arg]) == 2
    assert "index 2" in capsys.readouterr().err
    f.write_text("1\n2\nabc\n4\n")
    assert main(["acf", str(f), "--max-lag", "1", *dev_arg]) == 2
    assert "bad.txt" in capsys.readouterr().err
    assert main(["pc", str(tmp_path / "missing.txt"), *dev_arg]) == 2
    assert main(["acrw", "10", "--phi", "0.7", *dev_arg]) == 2
    assert "phi must be <= 0.5" in capsys.readouterr().err
