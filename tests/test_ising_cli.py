"""`clphys ising` and `clphys binder` through clphys.cli.main: equilibrium
estimates with errors next to the exact values, warnings when a run is too
short, the speed line, shared defaults, consistent flags, outputs checked
before any computation."""

import re
import sys

import pytest

from clphys.cli import build_parser, main
from clphys.exact import finite_lattice, onsager_magnetization
from clphys.ising import binder_scan
from clphys.ising.binder import DEFAULTS
from clphys.stats import Estimate

NOWHERE = "no-such-device-anywhere"        # a run that reached the device would fail with exit 1


def _spec(device):
    return device.facts.index


def _value(out, name):
    """(value, error) printed on the line of `name`, e.g. 'energy/N  -1.95070(33)'."""
    m = re.search(rf"^{re.escape(name)}\s+(-?[\d.]+)\((\d+)\)", out, re.M)
    assert m, (name, out)
    v, digits = m.group(1), m.group(2)
    dec = len(v.split(".")[1]) if "." in v else 0
    return float(v), int(digits) * 10.0**-dec


def test_ising_prints_equilibrium_estimates_next_to_exact_values(device, capsys):
    """L = 64 at T = 1.5 from an ordered start: E/N, |M|/N and C/N from the
    measured part agree with the exact torus values / Onsager within 4 sigma,
    and nothing is flagged."""
    assert main(["ising", "--size", "64", "--temperature", "1.5", "--sweeps", "2000", "--start", "up",
                 "--device", _spec(device)]) == 0
    out = capsys.readouterr().out
    exact = finite_lattice(64, 1.5)
    e, de = _value(out, "energy/N")
    m, dm = _value(out, "|M|/N")
    c, dc = _value(out, "C/N")
    assert abs(e - exact.energy) < 4 * de and de < 1e-3
    assert abs(m - onsager_magnetization(1.5)) < 4 * dm + 1e-5
    assert abs(c - exact.specific_heat) < 4 * dc
    assert "sweeps      2000: 400 thermalisation (discarded), then 1600 measurements, one every 1 sweep" in out
    assert re.search(r"exact -1\.95\d+ on this torus; Onsager -1\.95\d+ \(infinite lattice\)", out)
    assert re.search(r"tau_int     energy \S+ sweeps, \|M\| \S+ sweeps: the measured part is \S+ tau_int long",
                     out)
    assert "warning" not in out
    assert re.search(r"speed\s+\S+ spin flips/ns \(\d+ sweeps in \S+ s, thermalisation sweeps after the first\)",
                     out)


def test_ising_says_when_the_run_is_too_short(device, capsys):
    """The README's situation at a size that runs in a moment: a random start
    at Tc measured for a few hundred sweeps is not in equilibrium."""
    assert main(["ising", "--size", "128", "--temperature", "2.269", "--sweeps", "500",
                 "--device", _spec(device)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"warning: .*too short for its error to be trusted", out)
    assert "warning: the run is too short to be in equilibrium" in out
    assert re.search(r"^energy/N\s+-1\.\d+\(\d+\)", out, re.M)        # still a value with its error


def test_ising_3d_checkerboard_plot_and_every(device, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "lattice.png"
    assert main(["ising", "--dim", "3", "--size", "8x8x4", "--temperature", "4.5", "--sweeps", "50",
                 "--every", "3", "--algorithm", "checkerboard", "--rng", "lcg", "--seed", "3",
                 "--device", _spec(device), "--plot", str(png), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "Ising 3D 8x8x4" in out and "checkerboard/lcg" in out and "3D Tc" in out
    assert "50: 11 thermalisation (discarded), then 13 measurements, one every 3 sweeps" in out
    assert "13 measurements are too few to estimate tau_int" in out
    assert png.stat().st_size > 1000 and sorted(p.name for p in tmp_path.iterdir()) == ["lattice.png"]


def test_readme_command_still_works(device, capsys):
    """`clphys ising --dim 2 --size 1024 --temperature 2.269 --sweeps 1000`
    (the README's first command) runs, says it is not in equilibrium, and
    keeps its speed line."""
    assert main(["ising", "--dim", "2", "--size", "1024", "--temperature", "2.269", "--sweeps", "1000",
                 "--device", _spec(device)]) == 0
    out = capsys.readouterr().out
    assert "1000: 200 thermalisation (discarded), then 800 measurements" in out
    assert "warning: the run is too short to be in equilibrium" in out
    assert re.search(r"speed\s+\S+ spin flips/ns \(199 sweeps", out)


@pytest.mark.parametrize("args,message", [
    (["--size", "64x"], "--size must be one integer L or 2 to 3 integers"),
    (["--size", "x64"], "--size must be"),
    (["--size", "64,,64"], "--size must be"),
    (["--size", "13"], "allowed sizes"),
    (["--temperature", "-1"], "--temperature must be finite and > 0"),
    (["--temperature", "nan"], "--temperature must be finite and > 0"),
    (["--sweeps", "-3"], "--sweeps must be >= 0"),
    (["--every", "0"], "--every must be >= 1"),
    (["--therm", "2000", "--sweeps", "100"], r"--therm must be between 0 and --sweeps \(100\)"),
    (["--field", "inf"], "--field must be finite"),
    (["--checkpoint", "x.txt"], r"--checkpoint 'x.txt' must end in one of \.npz"),
    (["--checkpoint-every", "0"], "--checkpoint-every must be > 0"),
    (["--plot", "/no/such/folder/x.png"], "does not exist"),
    (["--plot", "x.jpg"], r"must end in one of \.png, \.pdf, \.svg"),
])
def test_ising_bad_input_exits_2_before_any_device_work(capsys, args, message):
    assert main(["ising", "--device", NOWHERE] + args) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and "Traceback" not in err, err


def test_outputs_and_matplotlib_checked_before_computing(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)          # as if not installed
    for cmd in (["ising"], ["binder"]):
        assert main(cmd + ["--device", NOWHERE, "--plot", str(tmp_path / "p.png")]) == 2
        assert "--plot needs matplotlib" in capsys.readouterr().err


def test_one_progress_flag_spelling():
    parser = build_parser()
    for cmd in ("ising", "binder"):
        assert parser.parse_args([cmd, "--progress"]).progress is True
        assert parser.parse_args([cmd, "--no-progress"]).progress is False
        assert parser.parse_args([cmd]).progress is None
        with pytest.raises(SystemExit):
            parser.parse_args([cmd, "--progress", "--no-progress"])


def test_binder_shares_the_api_defaults():
    import inspect
    sig = inspect.signature(binder_scan).parameters
    args = build_parser().parse_args(["binder"])
    assert (args.measure, args.every, args.replicas, args.therm) == (
        sig["n_measure"].default, sig["every"].default, sig["replicas"].default, sig["n_therm"].default)
    assert (args.measure, args.every, args.replicas, args.therm) == (
        DEFAULTS["n_measure"], DEFAULTS["every"], DEFAULTS["replicas"], DEFAULTS["n_therm"])


def test_binder_command(device, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "binder.png"
    assert main(["binder", "--sizes", "8,16", "--tmin", "2.1", "--tmax", "2.45", "--points", "4",
                 "--therm", "100", "--measure", "64", "--replicas", "2", "--seed", "1",
                 "--device", _spec(device), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "Binder scan, 2D, sizes 8, 16" in out and "U4 crossing L=8/16" in out
    assert len([line for line in out.splitlines() if re.match(r"\s+(8|16)\s+2\.", line)]) == 8
    # every number in the table comes with its error
    for line in out.splitlines():
        if re.match(r"\s+(8|16)\s+2\.", line):
            assert len(re.findall(r"-?\d+\.?\d*\(\d+\)", line)) == 4, line
    assert re.search(r"warning: .*too short", out) and "jackknife blocks" in out
    assert png.stat().st_size > 1000
    assert main(["binder", "--tmin", "2.3", "--tmax", "2.2", "--device", NOWHERE]) == 2
    assert "--tmin must be below --tmax" in capsys.readouterr().err
    for bad, msg in ((["--sizes", "16,x"], "--sizes must be comma-separated positive integers"),
                     (["--points", "1"], "--points must be >= 2"),
                     (["--measure", "10"], "--measure must be >= 32"),
                     (["--replicas", "0"], "replicas must be >= 1")):
        assert main(["binder", "--device", NOWHERE] + bad) == 2
        assert msg in capsys.readouterr().err


def test_estimate_string_never_hides_the_error():
    assert str(Estimate(1.5, float("nan"))) == "1.5 ± nan"
    assert "±" in str(Estimate(1.5, 0.0))
