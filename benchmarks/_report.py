"""The benchmarks' record: one JSON object per figure, printed as it comes in and
appended to ``--json FILE``; committed GPU figures live in ``benchmarks/results/``.

Every object has these keys (a value may be null only in figures copied from an
older record that lacked it):

    date      ISO 8601 (UTC, seconds) when the run started (one value per run)
    device    the device's model name as OpenCL reports it ("NVIDIA H100 80GB HBM3")
    driver    the device's driver version
    ranks     MPI ranks (one device each) the figure was measured on
    workload  what was run, sizes included ("multispin 2D L=16384 spins_per_word=auto")
    metric    what was measured ("flips_per_ns", "seconds", "speedup")
    value     the number (a bool for a correctness check)
    unit      the unit where the metric's name does not say it, else null
    command   the command line as run, with the CLPHYS_DEVICE it ran under

and optionally ``peer`` (another code's figure for the same workload in the same
run: ``{"name": "cuIsingModel", "value": 1403.0}``, more keys allowed) and any
extra fields a benchmark wants to keep (``platform``, ``sweeps``, ``options``).

    report = Report.for_device(dev, args.json)
    report.add("multispin 2D L=16384", "flips_per_ns", 512.3, sweeps=200)
    report.add("acf n=2^24", "ms", 4.96, peer={"name": "torch 2.5", "value": 9.54})
    report.print_summary()
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from datetime import datetime, timezone

REQUIRED = ("date", "device", "driver", "ranks", "workload", "metric", "value", "unit", "command")
# environment variables that choose the device: part of the command as run
DEVICE_VARIABLES = ("CLPHYS_DEVICE", "PYOPENCL_CTX")


def now() -> str:
    """The current time, ISO 8601 in UTC to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def command_line(argv=None) -> str:
    """The command as run, to paste into a shell: the device variables set,
    ``mpiexec -n R`` under an MPI launcher of R > 1 ranks (the ranks inherit
    the variables), ``python`` and the arguments."""
    from clphys.runtime.mpi import launcher_ranks
    argv = sys.argv if argv is None else argv
    ranks = launcher_ranks()
    launch = [] if ranks is None else ["mpiexec", "-n", str(ranks[1])]
    env = [f"{k}={shlex.quote(os.environ[k])}" for k in DEVICE_VARIABLES if os.environ.get(k)]
    return " ".join([*env, *launch, "python", *map(shlex.quote, argv)])


def problems(rec) -> list[str]:
    """What is wrong with one record (empty if nothing): missing keys, types."""
    if not isinstance(rec, dict):
        return [f"not a JSON object: {rec!r}"]
    out = [f"missing key {k!r}" for k in REQUIRED if k not in rec]
    for k in ("workload", "metric"):
        if not isinstance(rec.get(k), str) or not rec.get(k):
            out.append(f"{k} must be a non-empty string, got {rec.get(k)!r}")
    value = rec.get("value")
    if not (value is None or isinstance(value, (bool, int, float))):
        out.append(f"value must be a number, a bool or null, got {value!r}")
    ranks = rec.get("ranks")
    if not (ranks is None or (isinstance(ranks, int) and not isinstance(ranks, bool) and ranks >= 1)):
        out.append(f"ranks must be an integer >= 1 or null, got {ranks!r}")
    for k in ("date", "device", "driver", "unit", "command"):
        if not (rec.get(k) is None or isinstance(rec.get(k), str)):
            out.append(f"{k} must be a string or null, got {rec.get(k)!r}")
    if isinstance(rec.get("date"), str):
        try:
            datetime.fromisoformat(rec["date"])
        except ValueError:
            out.append(f"date is not ISO 8601: {rec['date']!r}")
    peer = rec.get("peer")
    if peer is not None and not (isinstance(peer, dict) and isinstance(peer.get("name"), str)
                                 and "value" in peer):
        out.append(f"peer must be an object with 'name' and 'value', got {peer!r}")
    return out


def read_jsonl(path) -> list[dict]:
    """The records of a JSON-lines file (blank lines skipped); ValueError naming
    the file and line for one that does not parse or lacks a required field."""
    out = []
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not JSON ({exc})") from None
            bad = problems(rec)
            if bad:
                raise ValueError(f"{path}:{n}: " + "; ".join(bad))
            out.append(rec)
    return out


def _plain(value):
    """NumPy scalars to Python numbers; NaN and infinities to null (JSON has none)."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class Report:
    """Figures of one benchmark run: device, driver and command fixed, one
    record per ``add``.

    Parameters
    ----------
    json_path : str or None
        Append each record to this file as a JSON line (None: print only).
    device, driver : str
        The device's model name and driver version.
    ranks : int
        MPI ranks of the figures, unless ``add`` says otherwise.
    command : str, optional
        The command as run (default: this process's, see `command_line`).
    **common
        Extra fields written into every record (``platform``).
    """

    def __init__(self, json_path=None, *, device, driver, ranks=1, command=None, **common):
        self.common = {"date": now(), "device": device, "driver": driver, "ranks": ranks,
                       "command": command or command_line(), **common}
        self.rows: list[tuple[str, str, object]] = []
        self.records: list[dict] = []
        self.json_path = json_path

    @classmethod
    def for_device(cls, dev, json_path=None, ranks=1, **common):
        """The report of a run on `dev` (a ``clphys.device()``)."""
        f = dev.facts
        return cls(json_path, device=f.name or dev.name, driver=f.driver, ranks=ranks,
                   platform=f.platform, **common)

    def add(self, workload, metric, value, *, unit=None, peer=None, **extra) -> dict:
        """Record one figure; `extra` may override the common fields (``ranks``,
        ``device``) for this record. Returns the record."""
        c = self.common
        rec = {"date": c["date"], "device": c["device"], "driver": c["driver"], "ranks": c["ranks"],
               "workload": workload, "metric": metric, "value": _plain(value), "unit": unit,
               "command": c["command"], **{k: v for k, v in c.items() if k not in REQUIRED}}
        if peer is not None:
            rec["peer"] = {k: _plain(v) for k, v in peer.items()}
        rec.update({k: _plain(v) for k, v in extra.items()})
        line = json.dumps(rec)
        print(line, flush=True)
        if self.json_path:
            with open(self.json_path, "a") as fh:
                fh.write(line + "\n")
        self.records.append(rec)
        self.rows.append((workload, metric, value))
        return rec

    def print_summary(self, metric_width=30):
        """The table a script prints last: one row per figure, in the order added."""
        print("\n# summary")
        width = max((len(w) for w, _, _ in self.rows), default=10)
        for workload, metric, value in self.rows:
            v = f"{value:.4g}" if isinstance(value, float) else str(value)
            print(f"{workload:<{width}}  {metric:<{metric_width}} {v}")
