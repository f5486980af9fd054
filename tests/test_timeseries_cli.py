"""clphys hurst | acf | pc | acrw on small files; file errors with their line;
outputs checked first and written atomically; a closed pipe; Ctrl-C in a subprocess."""

import os
import subprocess
import sys

import numpy as np
import pytest

from cli_subprocess import interrupt_after, start_cli
from clphys.cli import build_parser, main
from clphys.timeseries import acrw_numpy, autocorrelation, hurst, pattern_conformity
from clphys.timeseries.cli import read_column
from clphys.timeseries.reference import autocorrelation_numpy, hurst_numpy, pattern_conformity_numpy


@pytest.fixture
def dev_arg(device):
    return ["--device", device.facts.index]


def table(out):
    return [line.split() for line in out.splitlines() if line and not line.startswith("#")]


@pytest.mark.slow
def test_acrw_then_hurst_acf_pc(tmp_path, capsys, device, dev_arg):
    series = tmp_path / "series.txt"
    assert main(["acrw", "3000", "--phi", "0.044", "--seed", "1", "-o", str(series),
                 "--device", device.facts.index]) == 0
    p = np.loadtxt(series)
    np.testing.assert_array_equal(p, acrw_numpy(3000, 0.044, seed=1))
    capsys.readouterr()

    png = tmp_path / "h.png"
    assert main(["hurst", str(series), "--max-lag", "6", "--plot", str(png), *dev_arg]) == 0
    rows = table(capsys.readouterr().out)
    assert rows[0] == ["lag", "S", "S_err", "H", "H_err"]
    rows = rows[1:]
    S, H = hurst_numpy(p, 6)
    np.testing.assert_allclose([float(r[1]) for r in rows], S, rtol=1e-7)
    np.testing.assert_allclose([float(r[3]) for r in rows[1:]], H[1:], atol=1e-5)
    h = hurst(p, 6, device=device)           # the errors printed are the library's
    np.testing.assert_allclose([float(r[2]) for r in rows], h.S_err, rtol=1e-2)
    np.testing.assert_allclose([float(r[4]) for r in rows[1:]], h.H_err[1:], rtol=1e-4)
    assert rows[0][3] == "nan" and png.stat().st_size > 1000

    assert main(["acf", str(series), "--diff", "--max-lag", "3", "--plot",
                 str(tmp_path / "a.png"), *dev_arg]) == 0
    rows = table(capsys.readouterr().out)
    assert rows[0] == ["lag", "rho", "rho_err"]
    rows = rows[1:]
    np.testing.assert_allclose([float(r[1]) for r in rows],
                               autocorrelation_numpy(np.diff(p), 3), atol=1e-6)
    a = autocorrelation(np.diff(p), 3, device=device)
    np.testing.assert_allclose([float(r[2]) for r in rows], a.rho_err, rtol=1e-2)

    assert main(["pc", str(series), "--max-past", "3", "--max-future", "2", "--max-history",
                 "40", "--plot", str(tmp_path / "p.png"), "--no-progress", *dev_arg]) == 0
    rows = table(capsys.readouterr().out)
    want = pattern_conformity_numpy(p, 3, 2, 100.0, 40).Xi
    got = np.array([[float(v) for v in r[1:]] for r in rows[1:3]])
    np.testing.assert_allclose(got, want, atol=1e-4)
    err = np.array([[float(v) for v in r[1:]] for r in rows[4:6]])
    np.testing.assert_allclose(err, pattern_conformity(p, 3, 2, 100.0, 40, device=device,
                                                       progress=False).Xi_err, rtol=0.1)
    assert np.all(np.isnan(err[:, 0])) and np.all(err[:, 1:] > 0)
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
    assert "bad.txt, line 3: nan is not a finite number" in capsys.readouterr().err
    f.write_text("1\n2\nabc\n4\n")
    assert main(["acf", str(f), "--max-lag", "1", *dev_arg]) == 2
    assert "bad.txt, line 3: 'abc' in column 0 is not a number" in capsys.readouterr().err
    assert main(["pc", str(tmp_path / "missing.txt"), *dev_arg]) == 2
    assert main(["acrw", "10", "--phi", "0.7", *dev_arg]) == 2
    assert "phi must be <= 0.5" in capsys.readouterr().err


@pytest.mark.parametrize("text, column, message", [
    ("# prices\n\nDate,Close\n1,2.5\n2,2.75\n# gap\n3,x1\n", "Close",
     r"line 7: 'x1' in column 1 is not a number"),
    ("Date,Close\n1,2.5\n2\n", "1", r"line 3: has 1 column\(s\), no column 1"),
    ("1 2\n3 4 # note\n\n5 inf\n", "1", r"line 4: inf is not a finite number"),
    ("Date;Close\n", "Close", r"no data lines after the header"),
    ("# only a comment\n", None, r"no data"),
])
def test_read_errors_name_file_and_line(tmp_path, text, column, message):
    f = tmp_path / "prices.csv"
    f.write_text(text)
    with pytest.raises(ValueError, match=r"prices\.csv" + (", " if "line " in message else ": ")
                       + message):
        read_column(str(f), column)


def test_non_text_file(tmp_path):
    f = tmp_path / "prices.bin"
    f.write_bytes(b"1\n2\n\xff\xfe\x00\n")
    with pytest.raises(ValueError, match=r"prices\.bin is not a UTF-8 text file"):
        read_column(str(f))


def test_outputs_checked_before_any_work(tmp_path, capsys):
    """A bad --plot or -o is reported before the input is read or a device is opened
    (the device spec here names no device)."""
    f = tmp_path / "p.txt"
    f.write_text("1\n2\n3\n")
    cases = [["hurst", str(f), "--plot", str(tmp_path / "no" / "h.png")],
             ["acf", str(tmp_path / "missing.txt"), "--plot", str(tmp_path / "a.txt")],
             ["pc", str(f), "--plot", str(tmp_path)],
             ["acrw", "10", "-o", str(tmp_path / "no" / "p.txt")]]
    for args in cases:
        assert main([*args, "--device", "no-such-device"]) == 2, args
        err = capsys.readouterr().err
        assert ("--plot" in err or "--output" in err) and "no-such-device" not in err, err
    assert sorted(x.name for x in tmp_path.iterdir()) == ["p.txt"]


def test_one_progress_flag_spelling():
    parser = build_parser()
    for cmd in (["hurst", "f"], ["acf", "f"], ["pc", "f"], ["acrw", "5"]):
        assert parser.parse_args([*cmd, "--progress"]).progress is True
        assert parser.parse_args([*cmd, "--no-progress"]).progress is False
        assert parser.parse_args(cmd).progress is None
        with pytest.raises(SystemExit):
            parser.parse_args([*cmd, "--progress", "--no-progress"])


def test_returns_file_for_acf(tmp_path, capsys, dev_arg):
    """The README's `clphys acrw ... --returns -o returns.txt` then `clphys acf returns.txt`."""
    out = tmp_path / "returns.txt"
    assert main(["acrw", "2000", "--seed", "4", "--returns", "-o", str(out), *dev_arg]) == 0
    x = np.loadtxt(out)
    np.testing.assert_array_equal(x, np.diff(acrw_numpy(2001, 0.044, seed=4)))
    capsys.readouterr()
    assert main(["acf", str(out), "--max-lag", "2", *dev_arg]) == 0
    rows = table(capsys.readouterr().out)[1:]
    np.testing.assert_allclose([float(r[1]) for r in rows], autocorrelation_numpy(x, 2),
                               atol=1e-6)
    assert float(rows[0][2]) == 0 and all(float(r[2]) > 0 for r in rows[1:])


def test_pc_tick_option(tmp_path, capsys, dev_arg):
    """Cent prices: the tick is found (and printed), and the table equals the integer one."""
    k = acrw_numpy(400, 0.044, seed=2)
    f, g = tmp_path / "cents.txt", tmp_path / "ints.txt"
    f.write_text("\n".join(f"{100000 + 0.01 * v:.2f}" for v in k) + "\n")
    g.write_text("\n".join(str(v) for v in k) + "\n")
    args = ["--max-past", "3", "--max-future", "2", "--max-history", "30", *dev_arg]
    assert main(["pc", str(f), *args]) == 0
    cents = capsys.readouterr().out
    assert "tick = 0.01" in cents
    assert main(["pc", str(g), *args]) == 0
    ints = capsys.readouterr().out
    assert "tick = 1," in ints and table(cents) == table(ints)
    assert main(["pc", str(f), "--tick", "0.03", *args]) == 2
    assert "not on the grid of --tick 0.03" in capsys.readouterr().err
    assert main(["pc", str(f), "--tick", "none", *args]) == 0
    assert "tick = none" in capsys.readouterr().out
    assert main(["pc", str(f), "--tick", "cents", *args]) == 2


def test_closed_pipe_exits_quietly(device):
    """`clphys acrw ... | head -n 3`: the reader leaves; clphys exits 0 and says nothing."""
    env = dict(os.environ, CLPHYS_DEVICE=device.facts.index)
    proc = subprocess.Popen([sys.executable, "-m", "clphys.cli", "acrw", "2000000"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = [proc.stdout.readline() for _ in range(3)]
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=120)
    assert [int(v) for v in lines] == acrw_numpy(3, 0.044, seed=0).tolist()
    assert proc.returncode == 0 and err == ""


def _only_message(stderr: str, command: str) -> str:
    """The one line clphys prints on Ctrl-C (after any progress bar)."""
    lines = [line for line in stderr.replace("\r", "\n").splitlines() if line.strip()]
    assert lines and lines[-1].startswith(f"clphys {command}: interrupted"), stderr[-2000:]
    assert "Traceback" not in stderr
    return lines[-1]


def test_ctrl_c_acrw_leaves_no_file(tmp_path, device):
    """A long `clphys acrw -o file`, interrupted while it computes (or writes): status
    130, one line, stopped within seconds, and neither the file nor a temporary left."""
    out = tmp_path / "prices.txt"
    run = start_cli(["acrw", str(300_000_000), "-o", str(out), "--progress"], device)
    res = interrupt_after(run, "acrw [")
    assert res.returncode == 130, res.stderr[-2000:]
    assert res.stop_seconds < 5
    _only_message(res.stderr, "acrw")
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_pattern_conformity(tmp_path, device):
    """A long `clphys pc` (minutes on a CPU, seconds on a GPU) stops within about a
    second of Ctrl-C: status 130, one line saying how much was done, no plot written."""
    n = 2_000_000 if device.facts.is_gpu else 20_000
    f = tmp_path / "prices.txt"
    f.write_text("\n".join(map(str, acrw_numpy(n, 0.044, seed=1).tolist())) + "\n")
    plot = tmp_path / "xi.png"
    run = start_cli(["pc", str(f), "--max-history", "16384", "--progress", "--plot", str(plot)],
                    device)
    res = interrupt_after(run, "pattern conformity [", extra_delay=0.3)
    assert res.returncode == 130, res.stderr[-2000:]
    assert res.stop_seconds < 5
    assert "interrupted after" in _only_message(res.stderr, "pc")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["prices.txt"]
