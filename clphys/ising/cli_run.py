"""``clphys ising``'s run in a checkpoint file: its parameters from the
command line, a new lattice and run, and their saving and resuming (with
every check a loaded file must pass)."""

from __future__ import annotations

import math
import re

import numpy as np

from .._cli import is_root
from ..runtime import mpi
from ..runtime.checkpoint import CheckpointError, field, load_checkpoint, save_checkpoint

RUN_KIND = "ising-run"
# `clphys ising` defaults; None on the command line means "not given", so a
# --resume can tell which options the user set
ISING_DEFAULTS = {"dim": 2, "size": "1024", "temperature": 2.269185314213022, "sweeps": 1000,
                  "every": 1, "coupling": 1.0, "field": 0.0, "start": "random", "seed": 0,
                  "algorithm": None, "rng": None, "therm": None}


def parse_size(text):
    """'64' -> 64; '64x32' or '64,32' -> (64, 32); anything else is refused."""
    if not isinstance(text, str) or not re.fullmatch(r"\d+([x,]\d+){0,2}", text.strip()):
        raise ValueError(f"--size must be one integer L or 2 to 3 integers joined by 'x' or ',' "
                         f"(e.g. 64, 128x64, 8,8,4), got {text!r}")
    vals = [int(v) for v in re.split("[x,]", text.strip())]
    return vals[0] if len(vals) == 1 else tuple(vals)


def _same_size(text, saved):
    def full(t):
        v = parse_size(str(t))
        return v if isinstance(v, tuple) else (v,) * saved["dim"]
    return full(text) == full(saved["size"])


# ------------------------------------------------------------------ ising
def ising_params(args):
    """The run's parameters: the command line over the defaults."""
    p = {k: getattr(args, k) for k in ISING_DEFAULTS}
    return {k: (ISING_DEFAULTS[k] if v is None else v) for k, v in p.items()}


def check_ising_params(p):
    for name in ("sweeps", "every", "seed"):
        if isinstance(p[name], bool) or not isinstance(p[name], int):
            raise ValueError(f"--{name} must be an integer")
    if p["sweeps"] < 0:
        raise ValueError(f"--sweeps must be >= 0, got {p['sweeps']}")
    if p["every"] < 1:
        raise ValueError(f"--every must be >= 1, got {p['every']}")
    if p["therm"] is not None and not 0 <= p["therm"] <= p["sweeps"]:
        raise ValueError(f"--therm must be between 0 and --sweeps ({p['sweeps']}), got {p['therm']}")
    if not math.isfinite(p["temperature"]) or p["temperature"] <= 0:
        raise ValueError(f"--temperature must be finite and > 0, got {p['temperature']}")
    for name in ("coupling", "field"):
        if not math.isfinite(p[name]):
            raise ValueError(f"--{name} must be finite, got {p[name]}")


def new_run(p, device, comm=None):
    from . import Ising2D, Ising3D
    from .lattice import split_run
    from .run import Run
    cls = Ising2D if p["dim"] == 2 else Ising3D
    lat = cls(parse_size(p["size"]), p["temperature"], J=p["coupling"], h=p["field"], algorithm=p["algorithm"],
              rng=p["rng"], seed=p["seed"], start=p["start"], device=device, comm=comm)
    n_therm, n_measure = split_run(p["sweeps"], p["every"], p["therm"])
    return lat, Run(lat.ensemble, n_therm, n_measure, p["every"])


def save_run(path, lat, run, p):
    """Collective for a lattice split over ranks: the whole lattice and the
    measurements summed over the ranks, written by rank 0."""
    header, arrays = lat.ensemble.checkpoint()
    header["run"] = {**{k: (list(v) if isinstance(v, tuple) else v) for k, v in p.items()},
                     "n_therm": run.n_therm, "n_measure": run.n_measure, "done": run.done,
                     "therm_before": run.therm_before}
    arrays["measurements"] = run.measurements()
    comm = lat.ensemble.slab_comm
    if comm is None:
        return save_checkpoint(path, RUN_KIND, header, arrays)
    mpi.all_ok(comm, lambda: is_root(comm) and save_checkpoint(path, RUN_KIND, header, arrays))


def load_run(path, args, device, comm=None):
    """(lattice, run, params) from a --resume file; the options given on the
    command line must agree with it. With comm (every rank reads the file)
    the lattice is split over the ranks."""
    if comm is None:
        return _read_run(path, args, device, None)
    header, arrays, saved, counts = mpi.all_ok(comm, _read_run, path, args, device, comm)
    return _split_run(path, header, arrays, saved, counts, device, comm)


def _split_run(path, header, arrays, saved, counts, device, comm):
    from . import Ising2D, Ising3D
    from .run import Run
    n_therm, n_measure, done, therm_before = counts
    cls = Ising2D if saved["dim"] == 2 else Ising3D
    lat = cls.split_from_checkpoint(header, arrays, path, device, comm)
    # the file holds the sums over every rank; they are added up again at the end
    meas = arrays["measurements"] if is_root(comm) else np.zeros_like(arrays["measurements"])
    run = Run(lat.ensemble, n_therm, n_measure, saved["every"], done=done, measured=meas,
              therm_before=therm_before)
    return lat, run, saved


def _read_run(path, args, device, comm):
    """load_run's reading and checks; with comm, no device work: (header,
    arrays, params, (n_therm, n_measure, done, therm_before))."""
    from . import Ising2D, Ising3D
    from .lattice import STARTS
    from .run import Run
    header, arrays = load_checkpoint(path, RUN_KIND)
    run_h = field(header, "run", dict, path=path)
    saved = {}
    for k in ISING_DEFAULTS:
        if k not in run_h:
            raise CheckpointError(f"checkpoint {path!r}: the run header lacks {k!r}")
        saved[k] = run_h[k]
    for k in ISING_DEFAULTS:
        given = getattr(args, k)
        if given is not None and given != saved[k] and not (k == "size" and _same_size(given, saved)):
            raise ValueError(f"--{k} {given} differs from the run in {path} ({saved[k]}); leave it out "
                             f"to continue that run")
    if saved["dim"] not in (2, 3) or isinstance(saved["dim"], bool):
        raise CheckpointError(f"checkpoint {path!r}: the run's dim {saved['dim']!r} is not 2 or 3")
    try:
        check_ising_params(saved)
        parse_size(saved["size"])
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {path!r}: {exc}") from None
    temps = arrays.get("temperatures")
    lattice = {"dim": header.get("dim"), "coupling": header.get("J"), "field": header.get("h"),
               "seed": header.get("seed"),
               "temperature": float(temps[0]) if isinstance(temps, np.ndarray) and temps.shape == (1,) else None}
    differ = [f"{k} {saved[k]!r} (the lattice's {v!r})" for k, v in lattice.items() if saved[k] != v]
    differ += [f"{k} {saved[k]!r} (the lattice's {header.get(k)!r})" for k in ("algorithm", "rng")
               if saved[k] is not None and saved[k] != header.get(k)]
    if saved["start"] not in STARTS:
        differ.append(f"start {saved['start']!r} (one of {', '.join(STARTS)})")
    if differ:
        raise CheckpointError(f"checkpoint {path!r}: the run header does not describe its lattice: "
                              + ", ".join(differ))
    n_therm = field(run_h, "n_therm", int, minimum=0, path=path)
    n_measure = field(run_h, "n_measure", int, minimum=0, path=path)
    done = field(run_h, "done", int, minimum=0, path=path)
    therm_before = field(run_h, "therm_before", int, minimum=0, path=path)
    if n_therm + n_measure * saved["every"] != saved["sweeps"] or done > saved["sweeps"]:
        raise CheckpointError(f"checkpoint {path!r}: the run header is inconsistent (therm {n_therm}, "
                              f"{n_measure} measurements every {saved['every']}, {done} of "
                              f"{saved['sweeps']} sweeps done)")
    measured = max(0, done - n_therm) // saved["every"]
    if "measurements" not in arrays:
        raise CheckpointError(f"checkpoint {path!r} lacks the array 'measurements'")
    meas = arrays["measurements"]
    if meas.dtype != np.int64 or meas.shape != (measured, 1, 2):
        raise CheckpointError(f"checkpoint {path!r}: array 'measurements' has dtype {meas.dtype} and shape "
                              f"{meas.shape}, expected int64 {(measured, 1, 2)}")
    size = parse_size(saved["size"])
    shape = size if isinstance(size, tuple) else (size,) * saved["dim"]
    if list(shape) != header.get("shape"):
        raise CheckpointError(f"checkpoint {path!r}: the run's size {saved['size']!r} is not the lattice's "
                              f"shape {header.get('shape')!r}")
    _check_measurements(path, meas, saved["dim"], math.prod(shape))
    if comm is not None:
        return header, arrays, saved, (n_therm, n_measure, done, therm_before)
    cls = Ising2D if saved["dim"] == 2 else Ising3D
    lat = cls.from_checkpoint(header, arrays, path, device, extra=("measurements",))
    run = Run(lat.ensemble, n_therm, n_measure, saved["every"], done=done, measured=meas,
              therm_before=therm_before)
    return lat, run, saved


def _check_measurements(path, meas, dim, n_spins):
    """CheckpointError unless every stored (bond sum, magnetization) is one a
    lattice of n_spins can have: |bond sum| <= dim N, |M| <= N, M = N mod 2."""
    bond, mag = meas[..., 0], meas[..., 1]
    bad = (np.abs(bond) > dim * n_spins) | (np.abs(mag) > n_spins) | ((mag - n_spins) % 2 != 0)
    if bad.any():
        i = int(np.argmax(bad.reshape(-1)))
        raise CheckpointError(f"checkpoint {path!r}: measurement {i} (bond sum {bond.reshape(-1)[i]}, "
                              f"magnetization {mag.reshape(-1)[i]}) is impossible on {n_spins} spins")
