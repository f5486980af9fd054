"""`clphys sde josephson|kuramoto`: tiny runs with plots, option and output
checks before any work, and Ctrl-C / --checkpoint / --resume through real
SIGINTs in subprocesses."""

import os
import re
import sys
import time

import numpy as np
import pytest

from cli_subprocess import interrupt_after, start_cli
from clphys.cli import main


def test_josephson_cli(device, tmp_path, capsys):
    png = tmp_path / "v_of_a.png"
    rc = main(["sde", "josephson", "--a", "4.0:4.4:3", "--paths", "16", "--periods", "4",
               "--steps-per-period", "20", "--bins", "8", "--no-progress", "--plot", str(png),
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


def test_josephson_cli_says_when_paths_diverged(device, capsys):
    # a friction this large makes the explicit scheme blow up at the first steps
    rc = main(["sde", "josephson", "--gamma", "0.9,1e23", "--paths", "4", "--periods", "2",
               "--steps-per-period", "5", "--quiet", "--device", device.facts.index])
    captured = capsys.readouterr()
    assert rc == 3, captured.err
    assert "paths diverged" in captured.err
    assert main(["sde", "josephson", "--gamma", "0.9", "--paths", "4", "--periods", "2",
                 "--steps-per-period", "5", "--quiet", "--device", device.facts.index]) == 0


def test_kuramoto_cli(device, tmp_path, capsys):
    png = tmp_path / "r.png"
    rc = main(["sde", "kuramoto", "--n", "256", "--coupling", "4", "--noise", "1", "--t-end", "2",
               "--dt", "0.05", "--quiet", "--plot", str(png), "--device", device.facts.index])
    out = capsys.readouterr().out
    assert rc == 0 and png.stat().st_size > 1000
    assert "kernel = mean-field" in out and "0.83146" in out


# ------------------------------------------------------------------ checked before any work

@pytest.fixture
def no_computation(monkeypatch):
    """Fail the test if an ensemble or oscillator system is made."""
    from clphys.sde import ensemble, oscillators
    for cls in (ensemble.Ensemble, oscillators.Kuramoto):
        monkeypatch.setattr(cls, "__init__", lambda *a, **k: pytest.fail("computation started"))


JOSEPHSON_TINY = ["sde", "josephson", "--paths", "4", "--periods", "2", "--steps-per-period", "5"]
KURAMOTO_TINY = ["sde", "kuramoto", "--n", "8", "--t-end", "0.1", "--dt", "0.05"]


@pytest.mark.parametrize("base", [JOSEPHSON_TINY, KURAMOTO_TINY], ids=["josephson", "kuramoto"])
@pytest.mark.parametrize("extra, message", [
    (["--plot", "{tmp}/no/such/folder/p.png"], "--plot .* the folder .* does not exist"),
    (["--plot", "{tmp}/p.txt"], r"--plot .* must end in one of \.png, \.pdf, \.svg"),
    (["--plot", "{tmp}"], "is a folder"),
    (["-o", "{tmp}/no/out.txt"], "--output .* does not exist"),
    (["--checkpoint", "{tmp}/c.txt"], r"--checkpoint .* must end in one of \.npz"),
    (["--checkpoint-every", "5"], "--checkpoint-every needs --checkpoint"),
    (["--checkpoint", "{tmp}/c.npz", "--checkpoint-every", "-1"], "--checkpoint-every must be > 0"),
    (["--resume", "{tmp}/missing.npz"], "missing.npz' does not exist"),
])
def test_outputs_and_options_are_checked_before_work(no_computation, tmp_path, capsys, base, extra, message):
    args = base + [a.format(tmp=tmp_path) for a in extra]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_josephson_combinations_and_matplotlib_checked_before_work(no_computation, tmp_path, capsys,
                                                                   monkeypatch):
    png = str(tmp_path / "p.png")
    assert main(JOSEPHSON_TINY + ["--a", "1,2", "--gamma", "0.5:1:3", "--plot", png]) == 2
    assert "--plot needs at most one swept parameter" in capsys.readouterr().err
    assert main(JOSEPHSON_TINY + ["--transient", "2"]) == 2
    assert "transient must be <= 1" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "matplotlib", None)          # as if it were not installed
    for base in (JOSEPHSON_TINY, KURAMOTO_TINY):
        assert main(base + ["--plot", png]) == 2
        assert "--plot needs matplotlib: pip install 'clphys[plot]'" in capsys.readouterr().err
    assert not os.listdir(tmp_path)


def test_outputs_written_at_full_precision(device, tmp_path, capsys):
    out = tmp_path / "v.txt"
    args = JOSEPHSON_TINY + ["--a", "4.0,4.2", "--no-progress", "-o", str(out), "--device", device.facts.index]
    assert main(args) == 0
    from clphys.sde import josephson
    ref = josephson([4.0, 4.2], n_paths=4, periods=2, steps_per_period=5, device=device)
    rows = np.loadtxt(out)
    assert rows[:, 1].tolist() == ref.v.tolist() and rows[:, 2].tolist() == ref.v_err.tolist()
    assert (out.stat().st_mode & 0o777) != 0o600        # a normal file's mode, not mkstemp's


# ------------------------------------------------------------------ Ctrl-C in a subprocess

def _stderr_lines(err):
    """stderr without the progress bar's frames and the long-run warning (a CPU run of
    hours says so after about a second of measured work)."""
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    return [line for line in lines if not line.startswith(("josephson [", "kuramoto ["))
            and ": warning: " not in line]


# Runs that take far longer than the test on any device (2e12 path-steps; 2.6e13 oscillator-steps)
LONG = {"josephson": ["sde", "josephson", "--a", "4.0:4.4:3", "--paths", "65536", "--periods", "100000"],
        "kuramoto": ["sde", "kuramoto", "--n", "262144", "--t-end", "1000000", "--sample-every", "1000"]}


@pytest.mark.parametrize("model", sorted(LONG))
def test_ctrl_c_stops_a_long_run_within_seconds(device, tmp_path, model):
    """SIGINT once the progress bar shows: exit 130 with one line, within 3 s
    (slices of ~0.25 s), the state checkpointed, and no plot or table that
    looks complete (nor temporary files)."""
    args = LONG[model] + ["--progress", "--plot", "p.png", "-o", "out.txt", "--checkpoint", "ck.npz"]
    res = interrupt_after(start_cli(args, device, cwd=tmp_path), f"{model} [", timeout=180)
    assert res.returncode == 130, res.stderr[-2000:]
    lines = _stderr_lines(res.stderr)
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert re.match(r"clphys sde (josephson|kuramoto): interrupted after \d+ of \d+ time steps; state saved in ck.npz: "
                    r"continue with --resume ck.npz$", lines[0]), lines[0]
    assert res.stop_seconds < 3.0, res.stop_seconds
    assert sorted(os.listdir(tmp_path)) == ["ck.npz"]
    assert res.stdout == ""


def _size_for(seconds, run, size, cap):
    """A size for which run(size) takes about `seconds` on this device:
    grown until a run takes 0.3 s (fixed costs stop dominating), then scaled.
    Only the test's size depends on the time, never its verdict (Ctrl-C lands
    ~0.2 s into a run of ~`seconds`)."""
    run(size)                                   # warm-up: compile
    while True:
        t0 = time.perf_counter()
        run(size)
        elapsed = time.perf_counter() - t0
        if elapsed >= 0.3 or size >= cap:
            return int(min(cap, max(size, size * seconds / elapsed)))
        size *= 4


@pytest.mark.slow
def test_josephson_resume_after_sigint_is_bit_for_bit(device, tmp_path):
    """A run sized to take ~1.5 s here (so Ctrl-C lands inside it),
    interrupted by SIGINT in a subprocess and resumed in another, prints the
    uninterrupted result bit for bit."""
    from clphys.sde import josephson
    kw = dict(a=[4.0, 4.2], n_paths=64, steps_per_period=40, density_bins=8, seed=2, device=device)
    periods = _size_for(1.5, lambda p: josephson(periods=p, **kw), 16, 10**7)
    ref = josephson(periods=periods, **kw)
    args = ["sde", "josephson", "--a", "4.0,4.2", "--paths", "64", "--periods", str(periods),
            "--steps-per-period", "40", "--bins", "8", "--seed", "2", "--checkpoint", "ck.npz"]
    first = interrupt_after(start_cli(args + ["--progress", "-o", "out.txt"], device, cwd=tmp_path),
                            "josephson [", timeout=180)
    assert first.returncode == 130 and not (tmp_path / "out.txt").exists(), first.stderr[-1500:]
    second = start_cli(args + ["--no-progress", "--resume", "ck.npz", "-o", "out.txt"], device,
                       cwd=tmp_path).wait(timeout=300)
    assert second.returncode == 0, second.stderr[-1500:]
    rows = np.loadtxt(tmp_path / "out.txt")
    assert rows[:, 0].tolist() == [4.0, 4.2]
    assert rows[:, 1].tolist() == ref.v.tolist() and rows[:, 2].tolist() == ref.v_err.tolist()


def test_kuramoto_resume_after_sigint_is_bit_for_bit(device, tmp_path):
    from clphys.sde import kuramoto
    kw = dict(kT=1.0, dt=0.01, sample_every=10, seed=3, device=device)
    t_end = float(_size_for(1.5, lambda t: kuramoto(4096, 4.0, t_end=float(t), **kw), 1, 10**6))
    ref = kuramoto(4096, 4.0, t_end=t_end, **kw)
    args = ["sde", "kuramoto", "--n", "4096", "--t-end", repr(t_end), "--seed", "3", "--checkpoint", "ck.npz"]
    first = interrupt_after(start_cli(args + ["--progress", "-o", "out.txt"], device, cwd=tmp_path),
                            "kuramoto [", timeout=180)
    assert first.returncode == 130 and not (tmp_path / "out.txt").exists(), first.stderr[-1500:]
    second = start_cli(args + ["--no-progress", "--resume", "ck.npz", "-o", "out.txt"], device,
                       cwd=tmp_path).wait(timeout=300)
    assert second.returncode == 0, second.stderr[-1500:]
    rows = np.loadtxt(tmp_path / "out.txt")
    for col, want in zip(rows.T, (ref.times, ref.r, ref.psi)):
        assert col.tolist() == want.tolist()
