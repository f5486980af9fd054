"""clphys dfa: the table, --mf, --json and --plot on small files, the input options, and bad
input (exit status 2 with the reason)."""

import json

import numpy as np
import pytest

from clphys.cli import main
from clphys.timeseries import dfa, mfdfa


@pytest.fixture
def dev_arg(device):
    return ["--device", device.facts.index]


@pytest.fixture
def prices(tmp_path):
    rng = np.random.default_rng(9)
    p = 100 * np.exp(np.cumsum(0.01 * rng.standard_normal(2000)))
    path = tmp_path / "prices.csv"
    np.savetxt(path, np.stack([np.arange(p.size), p], axis=1), delimiter=",",
               header="day,Close", comments="", fmt=["%d", "%.10f"])
    return path, np.loadtxt(path, delimiter=",", skiprows=1)[:, 1]


def rows(out):
    return [line.split() for line in out.splitlines() if line and not line.startswith("#")]


def test_dfa_table_and_plot(prices, tmp_path, capsys, device, dev_arg):
    path, p = prices
    png = tmp_path / "dfa.png"
    assert main(["dfa", str(path), "--column", "Close", "--log-returns", "--plot", str(png),
                 *dev_arg]) == 0
    out = capsys.readouterr().out
    r = dfa(np.diff(np.log(p)), device=device)
    table = rows(out)
    assert table[0] == ["s", "F", "F_err", "segments"]
    np.testing.assert_allclose([float(t[1]) for t in table[1:]], r.F, rtol=1e-8)
    np.testing.assert_array_equal([int(t[0]) for t in table[1:]], r.scales)
    assert f"# H = {r.H:.5f} ± {r.H_err:.5f}" in out
    assert png.stat().st_size > 1000


def test_mf_json(prices, capsys, device, dev_arg):
    path, p = prices
    assert main(["dfa", str(path), "-c", "1", "--log-returns", "--mf", "--q=-2,0,2",
                 "--order", "1", "--segments", "both", "--json", *dev_arg]) == 0
    got = json.loads(capsys.readouterr().out)
    m = mfdfa(np.diff(np.log(p)), q=[-2.0, 0.0, 2.0], order=1, segments="both", device=device)
    assert got["q"] == [-2.0, 0.0, 2.0] and got["order"] == 1 and got["segments"] == "both"
    np.testing.assert_allclose(got["h"], m.h, rtol=1e-12)
    np.testing.assert_allclose(got["f_alpha_err"], m.f_alpha_err, rtol=1e-12)
    np.testing.assert_allclose(got["Fq"], m.Fq, rtol=1e-12)
    assert got["fit_range"] == list(m.fit_range)


def test_mf_table_plot_and_options(prices, tmp_path, capsys, device, dev_arg):
    path, p = prices
    png = tmp_path / "mf.svg"
    assert main(["dfa", str(path), "-c", "Close", "--diff", "--mf", "--scales", "10,30,100,300",
                 "--fit", "10", "100", "--plot", str(png), *dev_arg]) == 0
    out = capsys.readouterr().out
    m = mfdfa(np.diff(p), scales=[10, 30, 100, 300], fit_range=(10, 100), device=device)
    table = rows(out)
    assert table[0][:3] == ["q", "h", "h_err"] and len(table) == 22
    np.testing.assert_allclose([float(t[1]) for t in table[1:]], m.h, atol=1e-5)
    assert "fit over s = 10 .. 100" in out and png.stat().st_size > 1000
    # --profile (the values are the profile) and --overlap
    assert main(["dfa", str(path), "-c", "Close", "--profile", "--overlap", "--json",
                 *dev_arg]) == 0
    got = json.loads(capsys.readouterr().out)
    r = dfa(p, integrate=False, overlap=True, device=device)
    assert got["segments"] == "sliding" and got["integrate"] is False
    np.testing.assert_allclose(got["F"], r.F, rtol=1e-12)


@pytest.mark.parametrize("args,match", [
    (["--order", "7"], "order"),
    (["--scales", "10,a"], "--scales"),
    (["--scales", "40,20"], "strictly increasing"),
    (["--mf", "--q", "2,1"], "increasing"),
    (["--fit", "11", "19"], "fit_range"),
])
def test_bad_input(prices, capsys, device, dev_arg, args, match):
    path, _ = prices
    assert main(["dfa", str(path), "-c", "Close", *args, *dev_arg]) == 2
    assert match in capsys.readouterr().err


def test_negative_prices_refused(tmp_path, capsys, dev_arg):
    path = tmp_path / "p.txt"
    np.savetxt(path, np.r_[1.0, -1.0, np.ones(200)])
    assert main(["dfa", str(path), "--log-returns", *dev_arg]) == 2
    assert "positive prices" in capsys.readouterr().err
