"""The ``clphys`` command. Each domain adds its subcommands in its own
``cli.py`` through ``add_parsers(subparsers)``; this module only dispatches."""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from ._cli import EXIT_BAD_INPUT, EXIT_INTERRUPTED
from .errors import ClphysError
from .runtime.longrun import Interrupted

# Domain modules that contribute subcommands, in help order; missing ones are skipped.
DOMAINS = ("clphys.ising.cli", "clphys.timeseries.cli", "clphys.sde.cli", "clphys.muca.cli")


def cmd_info(args) -> int:
    import pyopencl as cl
    from .runtime import devices as list_devices, nvidia_icd_hint, current_device
    facts = list_devices()
    print(f"clphys {__version__}, pyopencl {cl.VERSION_TEXT}")
    if not facts:
        print("No OpenCL platform is visible. For the CPU: pip install 'clphys[pocl]'")
    platform = None
    for f in facts:
        if f.platform != platform:
            platform = f.platform
            print(f"\nplatform {f.index.split(':')[0]}: {platform}")
        kind = "GPU" if f.is_gpu else ("simulator" if f.vendor == "oclgrind" else "CPU/other")
        print(f"  device {f.index}: {f.name} [{kind}] driver {f.driver}")
        print(f"    vendor={f.vendor} fp64={f.fp64} compute_units={f.compute_units} "
              f"max_work_group={f.max_work_group} wg_multiple={f.wg_multiple}")
        print(f"    local_mem={f.local_mem // 1024} KiB global_mem={f.global_mem / 2**30:.1f} GiB "
              f"max_alloc={f.max_alloc / 2**30:.1f} GiB cache_id={f.cache_id}")
    hint = nvidia_icd_hint(prefix="\n  ")
    if hint:
        print("\nNote: " + hint)
    try:
        dev = current_device()
        print(f"\nselected (CLPHYS_DEVICE / PYOPENCL_CTX / first GPU / first CPU): "
              f"{dev.facts.index} {dev.facts.platform} | {dev.name}")
    except ClphysError as exc:
        print(f"\nno device selected: {exc}")
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="clphys", description="Statistical physics and econophysics on OpenCL devices "
        "(any GPU; CPUs through PoCL). Pick the device with --device or CLPHYS_DEVICE.")
    parser.add_argument("--version", action="version", version=f"clphys {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("info", help="list OpenCL platforms and devices and the one selected")
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
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except Interrupted as exc:
        print(f"clphys {args.command}: {exc}{'; ' + exc.kept if getattr(exc, 'kept', '') else ''}",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print(f"clphys {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `clphys acrw ... | head`: the reader left; say nothing more.
        _silence_stdout()
        return 0
    except (ValueError, TypeError, FileNotFoundError, IsADirectoryError, NotADirectoryError,
            PermissionError) as exc:
        print(f"clphys {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (ClphysError, ImportError, OSError) as exc:
        print(f"clphys {args.command}: error: {exc}", file=sys.stderr)
        return 1


def _silence_stdout():
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
