"""The README's first command, run as written (a subprocess, like a user): it
prints an answer the library trusts -- no warning -- next to the exact values
of the lattice it ran, and its speed. The wall time is printed, not asserted.
`--sweeps auto` is the same run as the `--sweeps N` it reports."""

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from clphys.cli import main
from clphys.exact import finite_lattice, onsager_magnetization

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_first_command() -> list:
    """The arguments of the first `clphys ...` command of the README's quick start."""
    text = README.read_text()
    block = re.search(r"## Quick start.*?```bash\n(.*?)```", text, re.S).group(1)
    line = block.splitlines()[0]
    command = line[line.index("clphys "):]
    return shlex.split(command)[1:]


def _value(out, name):
    """(value, error) printed on the line of `name`, e.g. 'energy/N  -1.95070(33)'."""
    m = re.search(rf"^{re.escape(name)}\s+(-?[\d.]+)\((\d+)\)", out, re.M)
    assert m, (name, out)
    v, digits = m.group(1), m.group(2)
    dec = len(v.split(".")[1]) if "." in v else 0
    return float(v), int(digits) * 10.0**-dec


def _option(args, name):
    return args[args.index(name) + 1]


def test_readme_first_command_is_a_trusted_result(device):
    args = readme_first_command()
    assert args[0] == "ising" and _option(args, "--sweeps") == "auto"
    env_device = device.facts.index
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "clphys", *args], capture_output=True, text=True,
                         env={**__import__("os").environ, "CLPHYS_DEVICE": env_device}, timeout=600)
    wall = time.perf_counter() - t0
    print(f"\nREADME first command on {device.name}: {wall:.1f} s wall: clphys {' '.join(args)}")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "warning" not in (out + res.stderr).lower(), out + res.stderr
    L, T = int(_option(args, "--size")), float(_option(args, "--temperature"))
    exact = finite_lattice(L, T)
    e, de = _value(out, "energy/N")
    m, dm = _value(out, "|M|/N")
    c, dc = _value(out, "C/N")
    # the estimates agree with this torus's exact values (and |M|, deep in the ordered
    # phase on a lattice many correlation lengths wide, with Onsager's M) within 4 sigma
    assert abs(e - exact.energy) < 4 * de
    assert abs(c - exact.specific_heat) < 4 * dc
    assert abs(m - onsager_magnetization(T)) < 4 * dm
    assert re.search(r"^energy/N .*exact -?[\d.]+ on this torus", out, re.M)
    assert re.search(r"^speed\s+[\d.]+ spin flips/ns", out, re.M)
    assert re.search(r"--sweeps auto: trustworthy after [\d.]+ s; the same as --sweeps \d+", out)


def test_sweeps_auto_is_the_run_of_the_sweeps_it_reports(device, capsys):
    """Away from Tc the auto run stops on its own, without a warning, and a
    fixed --sweeps of the count it reports prints the same estimates."""
    base = ["ising", "--size", "32", "--temperature", "3.0", "--seed", "2", "--no-progress",
            "--device", device.facts.index]
    assert main(base + ["--sweeps", "auto", "--max-seconds", "120"]) == 0
    auto = capsys.readouterr().out
    assert "warning" not in auto
    n = int(re.search(r"the same as --sweeps (\d+)", auto).group(1))
    assert main(base + ["--sweeps", str(n)]) == 0
    fixed = capsys.readouterr().out

    def estimates(out):
        return [line for line in out.splitlines() if line.split()[0] in ("energy/N", "|M|/N", "C/N", "chi",
                                                                         "tau_int", "drift")]
    assert estimates(auto) == estimates(fixed) and len(estimates(auto)) == 6
    e, de = _value(auto, "energy/N")
    assert abs(e - finite_lattice(32, 3.0).energy) < 4 * de
    # above Tc a finite lattice's |M|/N has no exact value: none is claimed
    assert re.search(r"^\|M\|/N .*no exact value for a finite lattice", auto, re.M)


def test_sweeps_auto_out_of_time_says_so_with_exit_3(device, capsys):
    """A budget far too small for Tc: the estimates are printed with the warnings
    and the exit status is 3. L = 256: tau_int near Tc is thousands of sweeps
    there, so no CPU device gets 50 tau_int in 0.5 s (at L = 64 a fast 2-core
    host reached 22 of the 50, and one CI run there exited 0)."""
    rc = main(["ising", "--size", "256", "--temperature", "2.269", "--sweeps", "auto", "--max-seconds",
               "0.5", "--no-progress", "--device", device.facts.index])
    out = capsys.readouterr().out
    assert rc == 3
    assert re.search(r"warning: --max-seconds 0\.5 ran out after \d+ sweeps, before the errors could be "
                     r"trusted", out), out
    assert re.search(r"^energy/N\s+-1\.\d+\(\d+\)", out, re.M)


def test_sweeps_auto_bad_combinations_exit_2(capsys):
    for extra, message in ((["--sweeps", "auto", "--checkpoint", "c.npz"], "--sweeps auto takes no"),
                           (["--sweeps", "100", "--max-seconds", "5"], "--max-seconds needs --sweeps auto"),
                           (["--sweeps", "auto", "--max-seconds", "0"], "--max-seconds must be a positive"),
                           (["--sweeps", "many"], "--sweeps must be an integer or 'auto'")):
        assert main(["ising", "--device", "no-such-device-anywhere"] + extra) == 2
        assert message in capsys.readouterr().err


def test_ctrl_c_on_sweeps_auto(device, tmp_path):
    """Ctrl-C stops an auto run within about a second: exit 130 and one line
    counting the sweeps made, nothing written."""
    from cli_subprocess import interrupt_after, start_cli
    run = start_cli(["ising", "--size", "128", "--temperature", "2.269", "--sweeps", "auto", "--progress",
                     "--plot", tmp_path / "lattice.png"], device, cwd=tmp_path)
    res = interrupt_after(run, "%", extra_delay=0.5)
    assert res.returncode == 130 and res.stop_seconds < 2.0, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"clphys ising: interrupted after \d+ of \d+ sweeps; nothing written \(--sweeps auto "
                        r"keeps no state: --sweeps N with --checkpoint FILE does\)", last), last
    assert res.stdout == "" and list(tmp_path.iterdir()) == []


def test_ctrl_c_while_auto_analyses_a_chunk(device, monkeypatch):
    """Ctrl-C while --sweeps auto analyses its series between chunks stops there
    with the count made (it used to escape as a bare "interrupted")."""
    import os
    import signal

    import pytest

    from clphys.ising import Ising2D
    from clphys.ising import cli as ising_cli
    from clphys.runtime import Interrupted
    real = ising_cli.cli_report.analyse

    def analyse_then_ctrl_c(samples):
        os.kill(os.getpid(), signal.SIGINT)        # as if the user pressed Ctrl-C now
        return real(samples)
    monkeypatch.setattr(ising_cli.cli_report, "analyse", analyse_then_ctrl_c)
    lat = Ising2D(16, 2.269, seed=1, device=device)
    with pytest.raises(Interrupted) as exc:
        ising_cli._auto_loop(lat, {"every": 1, "temperature": 2.269}, time.perf_counter() + 600, False)
    made = ising_cli.AUTO_FIRST
    then = max(ising_cli.AUTO_FIRST, int(ising_cli.AUTO_GROWTH * made))
    assert str(exc.value) == f"interrupted after {made} of {made + then} sweeps"
    assert exc.value.kept.startswith("nothing written")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
