"""`python -m clphys` is the `clphys` command; `--version`; one checkpoint rule
(same flag, default and help text) on every command that checkpoints."""

import argparse
import json
import subprocess
import sys

import pytest

import clphys
from clphys._cli import checkpoint_every
from clphys.cli import build_parser, main
from clphys.runtime.longrun import CHECKPOINT_EVERY


def _run(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)


def _steady(argv, stdout):
    """The output, less what CPU runtimes derive from the host's free memory at
    the moment (their devices' global_mem and max_alloc in `info --json`)."""
    if argv != ["info", "--json"]:
        return stdout
    info = json.loads(stdout)
    for dev in info["devices"]:
        if not dev["is_gpu"]:
            dev.pop("global_mem")
            dev.pop("max_alloc")
    return info


def test_python_m_clphys_is_the_command():
    for argv in (["--version"], ["--help"], ["ising", "--help"], ["info", "--json"]):
        as_module = _run("-m", "clphys", *argv)
        as_cli = _run("-c", "import sys; from clphys.cli import main; sys.exit(main())", *argv)
        assert as_module.returncode == as_cli.returncode
        assert as_module.stdout != "" and _steady(argv, as_module.stdout) == _steady(argv, as_cli.stdout)
    bad = _run("-m", "clphys", "ising", "--sweeps", "-1", "--device", "no-such-device")
    assert bad.returncode == 2 and "clphys ising: error: --sweeps must be >= 0" in bad.stderr


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"clphys {clphys.__version__}"


def _checkpointing():
    def walk(parser, path=()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    if "--checkpoint" in sub._option_string_actions:
                        yield " ".join(path + (name,)), sub
                    yield from walk(sub, path + (name,))
    return dict(walk(build_parser()))


def test_one_checkpoint_rule_everywhere():
    commands = _checkpointing()
    assert set(commands) == {"ising", "muca", "sde josephson", "sde kuramoto"}
    flags = {name: sub._option_string_actions["--checkpoint-every"] for name, sub in commands.items()}
    assert len({(a.default, a.help, a.metavar, a.type) for a in flags.values()}) == 1
    assert f"default {CHECKPOINT_EVERY:g}" in next(iter(flags.values())).help
    ns = argparse.Namespace
    assert checkpoint_every(ns(checkpoint_every=None, checkpoint=None, resume=None)) == CHECKPOINT_EVERY
    assert checkpoint_every(ns(checkpoint_every=5.0, checkpoint=None, resume="r.npz")) == 5.0
    for every, message in ((0.0, "must be > 0"), (float("nan"), "must be > 0"), (5.0, "needs --checkpoint")):
        with pytest.raises(ValueError, match=message):
            checkpoint_every(ns(checkpoint_every=every, checkpoint=None, resume=None))


@pytest.mark.parametrize("command", ["ising", "muca --size 4", "sde josephson", "sde kuramoto"])
def test_checkpoint_every_errors_the_same_before_any_work(command, capsys):
    base = command.split() + ["--device", "no-such-device-anywhere"]
    assert main(base + ["--checkpoint-every", "10"]) == 2
    assert capsys.readouterr().err.endswith(
        "error: --checkpoint-every needs --checkpoint FILE (or --resume FILE)\n")
    assert main(base + ["--checkpoint", "c.npz", "--checkpoint-every", "-1"]) == 2
    assert "error: --checkpoint-every must be > 0 seconds, got -1.0" in capsys.readouterr().err
