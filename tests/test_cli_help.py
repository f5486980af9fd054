"""The command line speaks its own language: every option of every command (but the
multicanonical one's, which another change covers) has a --help text, and an error
from the library names the command's options, not the Python parameters."""

import argparse

import pytest

from clphys._cli import in_cli_terms
from clphys.cli import build_parser, main


def _actions(parser, path=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, path + (name,))
        elif not isinstance(action, argparse._HelpAction):
            yield " ".join(path), action


def test_every_option_has_help():
    missing = [f"{cmd} {'/'.join(a.option_strings) or a.dest}" for cmd, a in _actions(build_parser())
               if cmd.split()[:1] != ["muca"] and not a.help]
    assert not missing, missing
    info = build_parser()._subparsers._group_actions[0].choices["info"]
    assert "usable" in info.description


def test_api_names_in_cli_terms():
    names = {"max_lag": "--max-lag", "q": "--q", "p": "the series", "tick=None": "--tick none",
             "tick": "--tick", "periods": "--periods"}
    assert in_cli_terms("max_lag must be >= 1, got 0", names) == "--max-lag must be >= 1, got 0"
    assert in_cli_terms("p needs at least 21 points (max_lag + 1 with max_lag = 20), got 12",
                        names) == ("the series needs at least 21 points (--max-lag + 1 with "
                                   "--max-lag 20), got 12")
    assert in_cli_terms("q must be >= 0.01; a quick check", names) == \
        "--q must be >= 0.01; a quick check"
    assert in_cli_terms("p is not on the grid of tick = 0.01 (pass tick=None for real-valued "
                        "prices)", names) == ("the series is not on the grid of --tick 0.01 "
                                              "(pass --tick none for real-valued prices)")
    # plain words stay words where they are not the parameter
    assert in_cli_terms("up to 7 periods of x", names) == "up to 7 periods of x"


@pytest.mark.parametrize("argv, text", [
    (["acf", "FILE", "--max-lag", "0"], "clphys acf: error: --max-lag must be >= 1, got 0"),
    (["sde", "josephson", "--periods", "1"],
     "clphys sde josephson: error: --periods must be >= 2, got 1"),
    (["sde", "kuramoto", "--noise", "-1"],
     "clphys sde kuramoto: error: --noise must be >= 0.0, got -1.0"),
    (["acrw", "10", "--phi", "0.7"], "clphys acrw: error: --phi must be <= 0.5, got 0.7"),
])
def test_errors_name_the_options(argv, text, tmp_path, capsys):
    """Bad values reach the library and come back in the command's terms (before: 'clphys
    acf: error: max_lag must be >= 1', 'clphys sde: error: periods must be >= 2')."""
    data = tmp_path / "x.txt"
    data.write_text("\n".join(str(v) for v in (1.0, 2.5, 2.0, 3.5, 3.0)) + "\n")
    argv = [str(data) if a == "FILE" else a for a in argv]
    assert main(argv + ["--device", "no-such-device"]) == 2
    assert capsys.readouterr().err.strip() == text
