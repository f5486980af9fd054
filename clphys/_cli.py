"""What every ``clphys`` subcommand shares: the progress flags, output files
checked before any computation, checkpoint/resume flags, and the exit codes.

Exit codes: 0 done; 1 a device or runtime failure; 2 bad input (argparse's
own usage errors too); 3 a time budget (--max-seconds) ran out before the
estimates could be trusted (they are printed, with the warnings that say
why); 130 interrupted (Ctrl-C), with one line saying what was kept.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys

from .runtime.files import check_output_path
from .runtime.longrun import CHECKPOINT_EVERY

__all__ = ["add_progress", "progress_arg", "add_device", "add_plot", "add_output",
           "add_checkpoint", "check_outputs", "require_matplotlib", "EXIT_BAD_INPUT",
           "EXIT_INTERRUPTED", "EXIT_UNTRUSTED", "allow_mpi", "mpi_world", "is_root", "in_cli_terms",
           "add_json", "print_json", "json_value", "estimate_json", "checkpoint_every"]

EXIT_BAD_INPUT = 2
EXIT_UNTRUSTED = 3
EXIT_INTERRUPTED = 130
CHECKPOINT_EVERY_HELP = (f"seconds between checkpoint writes (default {CHECKPOINT_EVERY:g}); the state "
                         f"is also written at the end and on Ctrl-C. Needs --checkpoint FILE, or "
                         f"--resume FILE, which is then written again")
PLOT_SUFFIXES = (".png", ".pdf", ".svg")


def in_cli_terms(message: str, names: dict) -> str:
    """An API error message in the command's terms: each parameter name of `names`
    (``p.set_defaults(cli_names={"max_lag": "--max-lag", ...})``) replaced by its option
    ("max_lag must be >= 1" -> "--max-lag must be >= 1", "max_lag = 20" -> "--max-lag
    20").  Names like max_lag or tick=None wherever they stand alone; plain words (q,
    periods, gamma) only where the message names the parameter: at its start or after
    "; ", before " must", " =", " needs", " is" or " has"."""
    for api in sorted(names, key=len, reverse=True):
        cli = names[api]
        if "_" in api or "=" in api:
            message = re.sub(rf"(?<![\w\-]){re.escape(api)}(?![\w(\[])", cli, message)
        else:
            message = re.sub(rf"(^|(?<=[;(:,] )|(?<=with )|(?<=of )){re.escape(api)}"
                             rf"(?= (?:=|(?:must|needs|is|has)\b))", cli, message)
    return re.sub(r"(--[\w-]+) = ", r"\1 ", message)


def add_progress(p: argparse.ArgumentParser) -> None:
    """--progress (always show the bar) / --no-progress (never); default: a
    bar on a terminal for runs longer than a couple of seconds."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--progress", dest="progress", action="store_const", const=True, default=None,
                   help="always show the progress bar")
    g.add_argument("--no-progress", dest="progress", action="store_const", const=False,
                   help="never show the progress bar")


def progress_arg(args):
    return getattr(args, "progress", None)


def add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", "-d", default=None,
                   help="device spec, e.g. 'nvidia' or 'portable:cpu' (default: CLPHYS_DEVICE, "
                        "then the first usable GPU, then CPU)")


def add_plot(p: argparse.ArgumentParser, help_text: str = "also draw a plot into FILE") -> None:
    p.add_argument("--plot", metavar="FILE", default=None,
                   help=f"{help_text} (.png, .pdf or .svg; needs matplotlib)")


def add_output(p: argparse.ArgumentParser, help_text: str = "write the result to FILE") -> None:
    p.add_argument("-o", "--output", metavar="FILE", default=None, help=help_text)


def allow_mpi(p: argparse.ArgumentParser) -> None:
    """Mark a command that splits its work over MPI ranks when started by
    mpiexec with several ranks (the others refuse to run N copies of
    themselves). It finds the communicator in ``args.comm`` (None otherwise)."""
    p.set_defaults(mpi=True)


def mpi_world():
    """MPI.COMM_WORLD when this process was started by an MPI launcher with
    several ranks (ImportError with the fix if mpi4py is missing), else None."""
    from .runtime.mpi import launcher_ranks, require_mpi4py
    if launcher_ranks() is None:
        return None
    return require_mpi4py().COMM_WORLD


def is_root(comm) -> bool:
    """Whether this rank prints and writes the outputs (rank 0, or no MPI)."""
    return comm is None or comm.Get_rank() == 0


def add_checkpoint(p: argparse.ArgumentParser) -> None:
    """--checkpoint, --resume and --checkpoint-every: one rule for every command
    (see :func:`checkpoint_every`)."""
    p.add_argument("--checkpoint", metavar="FILE.npz", default=None,
                   help="write the run's state to FILE periodically and on Ctrl-C")
    p.add_argument("--resume", metavar="FILE.npz", default=None,
                   help="continue the run saved in FILE (bit for bit as if never stopped)")
    p.add_argument("--checkpoint-every", type=float, default=None, metavar="SECONDS",
                   help=CHECKPOINT_EVERY_HELP)


def checkpoint_every(args) -> float:
    """The seconds between checkpoint writes: --checkpoint-every (> 0, with a
    file to write: --checkpoint or --resume), else CHECKPOINT_EVERY."""
    every = getattr(args, "checkpoint_every", None)
    if every is None:
        return CHECKPOINT_EVERY
    if not (math.isfinite(every) and every > 0):
        raise ValueError(f"--checkpoint-every must be > 0 seconds, got {every}")
    if not (getattr(args, "checkpoint", None) or getattr(args, "resume", None)):
        raise ValueError("--checkpoint-every needs --checkpoint FILE (or --resume FILE)")
    return float(every)


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="print the result as one JSON object on stdout (values with their errors, "
                        "exact references, device, seed); warnings go to stderr")


def json_value(value):
    """NumPy arrays and numbers as JSON values (NaN and inf as null)."""
    import numpy as np
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        v = float(arr)
        return v if math.isfinite(v) else None
    return [json_value(v) for v in arr]


def estimate_json(est, exact=None) -> dict:
    """An estimate (value, error[, tau_int, n]) and its exact reference as a dict."""
    out = {"value": json_value(est.value), "error": json_value(est.error)}
    for name in ("tau_int", "n"):
        if hasattr(est, name):
            out[name] = json_value(getattr(est, name))
    if exact is not None:
        out["exact"] = exact
    return out


def _plain(value):
    """`value` with NumPy numbers as Python ones and NaN or inf as None (JSON has neither)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):                 # NumPy arrays and scalars
        return _plain(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def print_json(obj: dict) -> None:
    """One JSON object, one line, on stdout (NaN and inf as null)."""
    sys.stdout.write(json.dumps(_plain(obj), allow_nan=False) + "\n")
    sys.stdout.flush()


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ValueError("--plot needs matplotlib: pip install 'clphys[plot]'") from None


def check_outputs(args, output_suffixes=None) -> None:
    """Check --plot, -o/--output and --checkpoint (whichever the command has)
    before any computation: the folder exists and is writable, the suffix
    fits, matplotlib is there for a plot."""
    plot = getattr(args, "plot", None)
    if plot is not None:
        check_output_path(plot, "--plot", PLOT_SUFFIXES)
        require_matplotlib()
    out = getattr(args, "output", None)
    if out is not None and out != "-":
        check_output_path(out, "--output", output_suffixes)
    ckpt = getattr(args, "checkpoint", None)
    if ckpt is not None:
        check_output_path(ckpt, "--checkpoint", (".npz",))
