"""The ``clphys`` command. Each domain adds its subcommands in its own
``cli.py`` through ``add_parsers(subparsers)``; this module only dispatches."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

from . import __version__
from ._cli import EXIT_BAD_INPUT, EXIT_INTERRUPTED, add_json, in_cli_terms
from .errors import ClphysError
from .runtime.longrun import Interrupted

# Domain modules that contribute subcommands, in help order; missing ones are skipped.
DOMAINS = ("clphys.ising.cli", "clphys.timeseries.cli", "clphys.sde.cli", "clphys.muca.cli")


def cmd_info(args) -> int:
    """Every visible device, whether clphys can use it (and why not), and what
    the default selection picks (under mpiexec: every rank's device). Exit 1
    when nothing usable is selected."""
    from .runtime.mpi import launcher_ranks
    if args.json:
        return _info_json()
    ranks = launcher_ranks()
    return _info_one() if ranks is None else _info_under_mpi(ranks)


def _info_json() -> int:
    """`clphys info --json`: the devices and the selection as one JSON object."""
    import pyopencl as cl
    from ._cli import print_json
    from .runtime import current_device, nvidia_icd_hint, survey
    devices = []
    for st in survey():
        f = st.facts
        devices.append({"index": f.index, "platform": f.platform, "name": f.name, "driver": f.driver,
                        "vendor": f.vendor, "is_gpu": bool(f.is_gpu), "simulator": bool(st.is_simulator),
                        "usable": bool(st.usable), "reason": st.reason or None, "fp64": bool(f.fp64),
                        "compute_units": f.compute_units, "max_work_group": f.max_work_group,
                        "wg_multiple": f.wg_multiple, "local_mem": f.local_mem, "global_mem": f.global_mem,
                        "max_alloc": f.max_alloc, "cache_id": f.cache_id})
    out = {"command": "info", "clphys": __version__, "pyopencl": cl.VERSION_TEXT, "devices": devices,
           "selected": None, "error": None, "hint": nvidia_icd_hint(prefix=" ") or None}
    try:
        out["selected"] = current_device().facts.index
    except ClphysError as exc:
        out["error"] = str(exc)
    print_json(out)
    return 0 if out["selected"] is not None else 1


def _info_one() -> int:
    import pyopencl as cl
    from .runtime import current_device, nvidia_icd_hint, survey
    statuses = survey()
    print(f"clphys {__version__}, pyopencl {cl.VERSION_TEXT}")
    if not statuses:
        print("No OpenCL platform is visible. For the CPU: pip install 'clphys[pocl]'")
    platform = None
    for st in statuses:
        f = st.facts
        if f.platform != platform:
            platform = f.platform
            print(f"\nplatform {f.index.split(':')[0]}: {platform}")
        kind = "simulator" if st.is_simulator else ("GPU" if f.is_gpu else "CPU/other")
        verdict = ("usable (a checking tool: used only when named)" if st.usable and st.is_simulator
                   else "usable" if st.usable else f"NOT USABLE: {st.reason}")
        print(f"  device {f.index}: {f.name} [{kind}] driver {f.driver}")
        print(f"    {verdict}")
        print(f"    vendor={f.vendor} fp64={'yes' if f.fp64 else 'no (float32 paths)'} "
              f"compute_units={f.compute_units} "
              f"max_work_group={f.max_work_group} wg_multiple={f.wg_multiple}")
        print(f"    local_mem={f.local_mem // 1024} KiB global_mem={f.global_mem / 2**30:.1f} GiB "
              f"max_alloc={f.max_alloc / 2**30:.1f} GiB cache_id={f.cache_id}")
    hint = nvidia_icd_hint(prefix="\n  ")
    if hint:
        print("\nNote: " + hint)
    try:
        dev = current_device()
        print(f"\nselected (CLPHYS_DEVICE / PYOPENCL_CTX / first usable GPU / first usable CPU): "
              f"{dev.facts.index} {dev.facts.platform} | {dev.name}")
    except ClphysError as exc:
        print(f"\nno device selected: {exc}")
        return 1
    return 0


def _info_under_mpi(ranks) -> int:
    """`clphys info` under mpiexec: rank 0 prints the listing once, then every
    rank's device (gathered through mpi4py; without it, each rank one line)."""
    import io
    import contextlib
    import socket
    rank, size, local = ranks
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        status = _info_one()
    lines = text.getvalue().splitlines()
    selected = next((ln for ln in lines if ln.startswith(("selected", "no device selected"))), "")
    mine = f"rank {rank} of {size} ({socket.gethostname()}, local rank {local}): " + selected.split(": ", 1)[-1]
    try:
        from .runtime.mpi import require_mpi4py
        comm = require_mpi4py().COMM_WORLD
    except ImportError:
        print(mine)
        return status
    everyone = comm.gather((mine, status), root=0)
    if comm.Get_rank() == 0:
        print("\n".join(ln for ln in lines if not ln.startswith("selected")))
        print(f"\ndevices of the {size} MPI ranks (rank r takes the (local rank mod k)-th usable device):")
        for line, _ in everyone:
            print("  " + line)
    return max(st for _, st in everyone) if comm.Get_rank() == 0 else status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="clphys", description="Statistical physics and econophysics on OpenCL devices "
        "(any GPU; CPUs through PoCL). Pick the device with --device or CLPHYS_DEVICE.")
    parser.add_argument("--version", action="version", version=f"clphys {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("info", help="list OpenCL platforms and devices and the one selected",
                       description="Every visible OpenCL platform and device: whether clphys can "
                                   "use it (and why not), the facts its kernels are specialised on "
                                   "(vendor, fp64, work-group sizes, memory), and the device the "
                                   "environment selects (CLPHYS_DEVICE, then PYOPENCL_CTX, then "
                                   "the first usable GPU, then CPU).  Under mpiexec: every rank's "
                                   "device.  Exit status 1 when no usable device is selected.")
    add_json(p)
    p.set_defaults(func=cmd_info)
    for name in DOMAINS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and name.startswith(exc.name):
                continue      # that domain is not part of this build
            raise
        module.add_parsers(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not os.environ.get("PYOPENCL_COMPILER_OUTPUT"):
        # Some runtimes (Intel's CPU runtime) log every build: PyOpenCL's warning about
        # it would follow every command. PYOPENCL_COMPILER_OUTPUT=1 shows the logs.
        import pyopencl as cl
        warnings.filterwarnings("ignore", category=cl.CompilerWarning)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    args.comm = None
    if args.command != "info":
        from .runtime.mpi import launcher_ranks
        ranks = launcher_ranks()
        if ranks is not None:
            if not getattr(args, "mpi", False):
                if ranks[0] == 0:
                    name = " ".join(filter(None, (args.command, getattr(args, "sde_model", None))))
                    print(f"clphys {name}: error: this command does not split its work over MPI ranks "
                          f"({ranks[1]} started); run it without mpiexec", file=sys.stderr)
                return EXIT_BAD_INPUT
            try:
                args.comm = _mpi_world()
            except ImportError as exc:
                print(f"clphys {args.command}: error: started by an MPI launcher with {ranks[1]} ranks, "
                      f"but {exc}", file=sys.stderr)
                return EXIT_BAD_INPUT
    if args.comm is None or args.comm.Get_rank() == 0:
        return _run(args)
    # the other ranks work silently (rank 0 prints and writes); errors only they
    # have still show, and end the job rather than leave rank 0 waiting
    import contextlib
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
        status, message = _run(args, quiet=True)
    if message:
        print(message, file=sys.stderr)
    if status == 1:
        args.comm.Abort(1)
    return status


def _mpi_world():
    from ._cli import mpi_world
    return mpi_world()


def _run(args, quiet=False):
    """The command's exit status; quiet (ranks other than 0), with the error
    line to print only where it is this rank's own (exit status 1: bad input
    and Ctrl-C reach every rank alike, and rank 0 says so)."""
    status, message = _dispatch(args)
    if quiet:
        return status, (message if status == 1 else None)
    if message:
        print(message, file=sys.stderr)
    if status == 1 and args.comm is not None:
        sys.stderr.flush()
        args.comm.Abort(1)          # the other ranks may be waiting for this one
    return status


def _dispatch(args):
    try:
        with warnings.catch_warnings():
            # a warning is one line in the command's name (on a terminal on a line of its
            # own, after a progress bar's)
            warnings.showwarning = lambda message, *_a, **_k: print(
                f"{chr(10) if sys.stderr.isatty() else ''}clphys {_name(args)}: warning: "
                f"{in_cli_terms(str(message), getattr(args, 'cli_names', {}))}",
                file=sys.stderr, flush=True)
            return int(args.func(args) or 0), None
    except Interrupted as exc:
        return EXIT_INTERRUPTED, (f"clphys {_name(args)}: {exc}"
                                  f"{'; ' + exc.kept if getattr(exc, 'kept', '') else ''}")
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED, f"clphys {_name(args)}: interrupted"
    except BrokenPipeError:
        # `clphys acrw ... | head`: the reader left; say nothing more.
        _silence_stdout()
        return 0, None
    except (ValueError, TypeError, FileNotFoundError, IsADirectoryError, NotADirectoryError,
            PermissionError) as exc:
        return EXIT_BAD_INPUT, (f"clphys {_name(args)}: error: "
                                f"{in_cli_terms(str(exc), getattr(args, 'cli_names', {}))}")
    except (ClphysError, ImportError, OSError) as exc:
        return 1, f"clphys {_name(args)}: error: {exc}"
    except Exception as exc:
        if args.comm is None:
            raise
        import traceback
        return 1, f"clphys {args.command}: internal error on MPI rank {args.comm.Get_rank()}:\n" + \
            "".join(traceback.format_exception(exc))


def _name(args) -> str:
    """The command as typed: 'hurst', 'sde josephson', ..."""
    return " ".join(filter(None, (args.command, getattr(args, "sde_model", None))))


def _silence_stdout():
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
