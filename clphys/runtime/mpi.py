"""Several processes, one device each, through MPI (mpi4py).

clphys never starts MPI by itself: a distributed object takes an mpi4py
communicator (``comm=``). What is shared by every distributed domain lives here:

* :func:`launcher_ranks` -- (rank, size, local rank) from the launcher's
  environment (mpiexec, mpirun, srun), read without importing MPI, so the
  default device of a rank can be chosen before anything else runs: rank r
  takes the (local rank mod k)-th of the k usable devices the default
  selection considers (``CLPHYS_DEVICE=nvidia`` with 4 ranks on a 4-GPU node:
  one GPU each), or the (local rank mod n)-th of n ``;``-separated specs in
  ``CLPHYS_DEVICE`` (an explicit device per rank).
* :func:`rank_cache_dir` -- each rank's own program cache directory (shared
  caches slow down or break with many ranks).
* :func:`agree` -- check, before any collective that could deadlock, that
  parameters agree on every rank; every rank raises the same ValueError.
* :func:`check_call` -- the same at the start of every collective method
  (sample, sweep, ...): the same method with the same arguments on every
  rank, or a ValueError on every rank instead of a hang.
* :func:`all_ok` -- run a check on every rank and raise on every rank if it
  failed on any (a bad input on one rank is an error everywhere, no hang).
* Before comparing, the ranks meet in a polled barrier: a rank kept waiting
  for ``WAIT_NOTICE_S`` seconds (a rank that skipped the call, or stopped) says
  so on stderr, and Ctrl-C ends the wait (a blocking collective ignores it).
* :func:`split` -- the contiguous share of n items of one rank.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

__all__ = ["launcher_ranks", "local_rank", "rank_cache_dir", "agree", "check_call", "all_ok",
           "split", "require_mpi4py", "comm_size_rank", "digest", "WAIT_NOTICE_S"]

# (rank, size, local rank) variables of Open MPI, MPICH/Hydra (and Intel MPI), PMIx, Slurm.
_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
_LOCAL_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID")


def _env_int(names):
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def launcher_ranks() -> tuple[int, int, int] | None:
    """(rank, size, local rank) when this process was started by an MPI
    launcher with more than one rank, else None."""
    size = _env_int(_SIZE_VARS)
    if not size or size < 2:
        return None
    rank = _env_int(_RANK_VARS) or 0
    local = _env_int(_LOCAL_VARS)
    return rank, size, rank if local is None else local


def local_rank() -> int | None:
    """This process's rank on its node under an MPI launcher, else None."""
    ranks = launcher_ranks()
    return None if ranks is None else ranks[2]


def rank_cache_dir(base: str | None = None) -> str | None:
    """A program cache directory of this rank's own (host name and local rank),
    under an MPI launcher; None otherwise (PyOpenCL's default)."""
    ranks = launcher_ranks()
    if ranks is None:
        return None
    if base is None:
        import platformdirs
        base = os.path.join(platformdirs.user_cache_dir("clphys", "clphys"), "ranks")
    path = os.path.join(base, f"{socket.gethostname()}-{ranks[2]}")
    os.makedirs(path, exist_ok=True)
    return path


def require_mpi4py() -> Any:
    """The mpi4py.MPI module, or an ImportError that says how to get it."""
    try:
        from mpi4py import MPI
    except ImportError:
        raise ImportError("this needs mpi4py and an MPI library: pip install 'clphys[mpi]' "
                          "(mpi4py with MPICH from wheels), or build mpi4py against your cluster's "
                          "MPI: see README 'Several GPUs and nodes'") from None
    return MPI


def comm_size_rank(comm: Any) -> tuple[int, int]:
    """(size, rank) of an mpi4py communicator; TypeError for anything else."""
    if not (hasattr(comm, "Get_size") and hasattr(comm, "Get_rank") and hasattr(comm, "allgather")):
        raise TypeError(f"comm must be an mpi4py communicator (e.g. MPI.COMM_WORLD), got {comm!r}")
    return comm.Get_size(), comm.Get_rank()


def comm_size(comm: Any) -> int:
    """The ranks of an mpi4py communicator, 1 for None (one process)."""
    return 1 if comm is None else comm_size_rank(comm)[0]


def _plain(value):
    """JSON for what json does not know: NumPy scalars and arrays as Python numbers and
    lists (np.int64(100) agrees with 100), anything else by its repr."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    return repr(value)


WAIT_NOTICE_S = 60.0


def _meet(comm: Any, where: str) -> None:
    """Return once every rank has reached `where`. The wait polls a non-blocking
    barrier, sleeping between polls: Ctrl-C stops it, and a rank kept waiting
    WAIT_NOTICE_S seconds says once on stderr where it waits and why it may hang."""
    if not hasattr(comm, "Ibarrier"):
        return
    request = comm.Ibarrier()
    start = time.monotonic()
    noticed = False
    while not request.Test():
        waited = time.monotonic() - start
        if waited > 1e-3:               # the usual case, all ranks there, never sleeps
            time.sleep(min(0.01, waited / 10))
        if not noticed and waited >= WAIT_NOTICE_S:
            noticed = True
            sys.stderr.write(f"clphys: MPI rank {comm.Get_rank()} of {comm.Get_size()} has waited "
                             f"{waited:.0f} s for the other ranks at {where}{_caller()}, and waits on. A rank "
                             "that skipped this call or stopped leaves the job hanging here: every "
                             "rank must make the same clphys calls in the same order.\n")
            sys.stderr.flush()


def _caller() -> str:
    """' (called from FILE, line N)': the innermost frame outside clphys, i.e. the
    user's call that waits; '' if there is none."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for frame in reversed(traceback.extract_stack()):
        if not os.path.abspath(frame.filename).startswith(package + os.sep):
            return f" (called from {frame.filename}, line {frame.lineno})"
    return ""


def agree(comm: Any, what: str = "parameters", **params: object) -> None:
    """ValueError on every rank unless every rank passed the same `params`
    (compared as JSON; call it before the first collective of a job)."""
    mine = json.dumps(params, sort_keys=True, default=_plain)
    _meet(comm, f"the check of {what}")
    everyone = comm.allgather(mine)
    bad = [r for r, p in enumerate(everyone) if p != everyone[0]]
    if bad:
        first = json.loads(everyone[0])
        other = json.loads(everyone[bad[0]])
        diff = sorted(k for k in set(first) | set(other) if first.get(k) != other.get(k))
        raise ValueError(f"{what} differ across MPI ranks (rank 0 vs rank {bad[0]}: "
                         + ", ".join(f"{k} = {first.get(k)!r} vs {other.get(k)!r}" for k in diff)
                         + "); every rank must pass the same values")


def check_call(comm: Any, call: str, **args: object) -> None:
    """At the start of a collective method `call` (e.g. "sample"): ValueError on every
    rank unless every rank is in the same method with the same `args`.  Without it a
    rank in sample(100) and one in sample(200), or one in sweep(), wait for each other
    forever."""
    agree(comm, f"{call}() calls", call=call, **args)


def digest(values: object) -> str:
    """A short fingerprint of an array argument (shape, dtype and bytes), for check_call:
    the ranks compare 16 bytes instead of the array."""
    arr = np.asarray(values)
    h = hashlib.blake2b(digest_size=16)
    h.update(repr((arr.shape, arr.dtype.str)).encode())
    h.update(np.ascontiguousarray(arr).tobytes() if arr.dtype.kind != "O" else repr(arr).encode())
    return h.hexdigest()


def all_ok(comm: Any, check: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Run ``check(*args, **kwargs)`` on every rank; if it raised on any rank,
    raise on every rank (the first failing rank's exception type and message),
    so no rank waits in a collective for one that gave up. Returns the
    check's result on this rank."""
    error = None
    try:
        result = check(*args, **kwargs)
    except (ValueError, TypeError, ImportError, OSError, RuntimeError) as exc:
        error = (type(exc).__name__, str(exc))
    name = getattr(check, "__qualname__", "<check>")
    _meet(comm, "a check of the arguments" if "<" in name else f"the check {name}()")
    errors = comm.allgather(error)
    for rank, err in enumerate(errors):
        if err is not None:
            kind = {"TypeError": TypeError, "ImportError": ImportError, "OSError": OSError}.get(err[0])
            if kind is None:
                from ..errors import DeviceError
                kind = DeviceError if err[0] in ("DeviceError", "RuntimeError") else ValueError
            raise kind(f"rank {rank}: {err[1]}" if len(errors) > 1 else err[1])
    return result


def split(n: int, size: int, rank: int) -> tuple[int, int]:
    """(start, count) of rank's contiguous share of n items over size ranks
    (the first n % size ranks get one more)."""
    base, extra = divmod(int(n), int(size))
    start = rank * base + min(rank, extra)
    return start, base + (rank < extra)
