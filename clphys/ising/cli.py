"""``clphys ising`` (run one lattice: equilibrium estimates with errors next to
the exact values, and the speed) and ``clphys binder`` (Binder-cumulant scan
with crossing temperatures)."""

from __future__ import annotations

import math
import re
import time
import warnings

import numpy as np

from .._cli import (add_checkpoint, add_device, add_plot, add_progress, allow_mpi, check_outputs, is_root,
                    progress_arg)
from ..runtime import mpi
from ..progress import Progress
from ..runtime import Interrupted, run_sliced
from ..runtime.checkpoint import CheckpointError, field, load_checkpoint, save_checkpoint
from ..runtime.files import atomic_output

RUN_KIND = "ising-run"
# `clphys ising` defaults; None on the command line means "not given", so a
# --resume can tell which options the user set
ISING_DEFAULTS = {"dim": 2, "size": "1024", "temperature": 2.269185314213022, "sweeps": 1000,
                  "every": 1, "coupling": 1.0, "field": 0.0, "start": "random", "seed": 0,
                  "algorithm": None, "rng": None, "therm": None}
CHECKPOINT_SECONDS = 60.0


def _ints(text, what="--sizes"):
    if not re.fullmatch(r"\s*\d+\s*(,\s*\d+\s*)*", text or ""):
        raise ValueError(f"{what} must be comma-separated positive integers, got {text!r}")
    return [int(v) for v in text.split(",")]


def _size(text):
    """'64' -> 64; '64x32' or '64,32' -> (64, 32); anything else is refused."""
    if not isinstance(text, str) or not re.fullmatch(r"\d+([x,]\d+){0,2}", text.strip()):
        raise ValueError(f"--size must be one integer L or 2 to 3 integers joined by 'x' or ',' "
                         f"(e.g. 64, 128x64, 8,8,4), got {text!r}")
    vals = [int(v) for v in re.split("[x,]", text.strip())]
    return vals[0] if len(vals) == 1 else tuple(vals)


def _same_size(text, saved):
    def full(t):
        v = _size(str(t))
        return v if isinstance(v, tuple) else (v,) * saved["dim"]
    return full(text) == full(saved["size"])


def _warnings_as_lines(record):
    seen, lines = set(), []
    for w in record:
        msg = str(w.message)
        if msg not in seen:
            seen.add(msg)
            lines.append(f"warning: {msg}")
    return lines


# ------------------------------------------------------------------ ising
def _ising_params(args):
    """The run's parameters: the command line over the defaults."""
    p = {k: getattr(args, k) for k in ISING_DEFAULTS}
    return {k: (ISING_DEFAULTS[k] if v is None else v) for k, v in p.items()}


def _check_ising_params(p):
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


def _new_run(p, device, comm=None):
    from . import Ising2D, Ising3D
    from .lattice import split_run
    from .run import Run
    cls = Ising2D if p["dim"] == 2 else Ising3D
    lat = cls(_size(p["size"]), p["temperature"], J=p["coupling"], h=p["field"], algorithm=p["algorithm"],
              rng=p["rng"], seed=p["seed"], start=p["start"], device=device, comm=comm)
    n_therm, n_measure = split_run(p["sweeps"], p["every"], p["therm"])
    return lat, Run(lat.ensemble, n_therm, n_measure, p["every"])


def _save_run(path, lat, run, p):
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


def _load_run(path, args, device, comm=None):
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
    """_load_run's reading and checks; with comm, no device work: (header,
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
        _check_ising_params(saved)
        _size(saved["size"])
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
    size = _size(saved["size"])
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


def _exact_lines(p, shape):
    """Reference values to print beside the estimates."""
    from ..exact import TC_2D, TC_3D, finite_lattice, onsager_energy, onsager_magnetization
    J, h, T = p["coupling"], p["field"], p["temperature"]
    ref = {"energy": [], "mag": [], "heat": []}
    if p["dim"] == 2 and h == 0 and J > 0:
        if shape[0] == shape[1] and shape[0] % 2 == 0 and shape[0] <= 4096:
            fl = finite_lattice(shape[0], T, J)
            ref["energy"].append(f"exact {fl.energy:.6f} on this torus")
            ref["heat"].append(f"exact {fl.specific_heat:.6f} on this torus")
        ref["energy"].append(f"Onsager {onsager_energy(T, J):.6f} (infinite lattice)")
        ref["mag"].append(f"Onsager {onsager_magnetization(T, J):.6f} (infinite lattice, Tc = {TC_2D * J:.6f})")
    elif p["dim"] == 3 and h == 0 and J > 0:
        ref["mag"].append(f"3D Tc = {TC_3D * J:.6f}")
    return {k: "; ".join(v) for k, v in ref.items()}


def cmd_ising(args) -> int:
    check_outputs(args)
    if args.checkpoint_every is not None and not args.checkpoint_every > 0:
        raise ValueError(f"--checkpoint-every must be > 0 seconds, got {args.checkpoint_every}")
    comm = getattr(args, "comm", None)
    if args.resume:
        lat, run, p = _load_run(args.resume, args, args.device, comm)
    else:
        p = _ising_params(args)
        _check_ising_params(p)
        lat, run = _new_run(p, args.device, comm)
    queue = lat.device.queue
    ckpt = args.checkpoint or args.resume          # a resumed run keeps saving into its file
    every_s = args.checkpoint_every or CHECKPOINT_SECONDS
    timing = {"therm": [], "measure": []}
    last_save = [time.monotonic()]

    def slices(phase):
        def step(start, n):
            t0 = time.perf_counter()
            run.step(n)
            queue.finish()
            timing[phase].append((n, time.perf_counter() - t0))
            due = bool(ckpt) and time.monotonic() - last_save[0] > every_s
            if ckpt and comm is not None:
                due = comm.bcast(due, root=0)        # saving is collective: rank 0's clock decides
            if due:
                _save_run(ckpt, lat, run, p)
                last_save[0] = time.monotonic()
        return step

    with Progress(max(run.total, 1), progress_arg(args), label="ising") as bar:
        bar.update(run.done)
        try:
            for phase, end in (("therm", run.n_therm), ("measure", run.total)):
                if run.done < end:
                    run_sliced(end - run.done, slices(phase), queue, bar=bar, what="sweeps",
                               largest=run.largest, comm=comm)
        except Interrupted:
            exc = Interrupted(run.done, run.total, "sweeps")
            if ckpt:
                _save_run(ckpt, lat, run, p)
                exc.kept = f"state saved in {ckpt}: continue with --resume {ckpt}"
            else:
                exc.kept = "nothing written (--checkpoint FILE keeps the state)"
            raise exc from None
    if ckpt:
        _save_run(ckpt, lat, run, p)
    _print_ising(lat, run.samples(), run, p, timing, comm)
    if args.plot:
        _plot_lattice(lat, p, args.plot, comm)
    return 0


def _print_ising(lat, s, run, p, timing, comm=None):
    shape = "x".join(map(str, lat.shape))
    where = (f"{comm.Get_size()} MPI ranks (rank 0: {lat.device.name}; slabs of "
             f"{'x'.join(map(str, lat.local_shape))})" if comm is not None else lat.device.name)
    print(f"Ising {p['dim']}D {shape}, T = {p['temperature']:g}, J = {p['coupling']:g}, h = {p['field']:g}, "
          f"{lat.algorithm}/{lat.rng}, seed {p['seed']}, {p['start']} start, on {where}")
    n = s.energy.shape[-1]
    print(f"sweeps      {run.total}: {s.n_therm} thermalisation (discarded), then {n} measurements, "
          f"one every {run.every} sweep{'s' if run.every > 1 else ''}")
    if n == 0:
        print("warning: no measurements: the run is too short for any estimate (more --sweeps)")
    else:
        s1 = type(s)(float(s.temperature[0]), s.n_spins, s.energy[0], s.magnetization[0], s.n_therm, s.every,
                     bool(s.trapped[0]))
        ref = _exact_lines(p, lat.shape)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            rows = [("energy/N", s1.mean_energy(), ref["energy"]),
                    ("|M|/N", s1.abs_magnetization(), ref["mag"]),
                    ("C/N", s1.specific_heat(), ref["heat"]),
                    ("chi", s1.susceptibility(), "")]
            drift = s1.drift() if n >= 32 else None
        for name, est, txt in rows:
            print(f"{name:<11} {str(est):<18} {txt}".rstrip())
        e_tau, m_tau = rows[0][1].tau_int, rows[1][1].tau_int
        if math.isfinite(e_tau) and math.isfinite(m_tau):
            print(f"tau_int     energy {e_tau * run.every:.3g} sweeps, |M| {m_tau * run.every:.3g} sweeps: the "
                  f"measured part is {n / max(e_tau, m_tau):.3g} tau_int long (errors need >= 50)")
        if drift is not None and math.isfinite(drift.error):
            print(f"drift       energy/N, second half - first half of the measured part: {drift}")
        lines = _warnings_as_lines(record)
        if lines:
            print("\n".join(lines))
            print(f"warning: the run is too short to be in equilibrium with trustworthy errors at "
                  f"T = {p['temperature']:g}: use more --sweeps (local updates near Tc need ~L^2.2 sweeps "
                  f"to decorrelate)")
    pure = timing["therm"][1:]
    label = "thermalisation sweeps after the first"
    if not sum(k for k, _ in pure):
        pure = (timing["therm"] + timing["measure"])[1:]
        label = f"after the first, measurements every {run.every} included"
    sweeps, secs = sum(k for k, _ in pure), sum(t for _, t in pure)
    if sweeps and secs > 0:
        rate = lat.n_spins * sweeps / secs / 1e9
        ranks = "" if comm is None else f", {rate / comm.Get_size():.3f} per rank on {comm.Get_size()} ranks"
        print(f"speed       {rate:.3f} spin flips/ns{ranks} ({sweeps} sweeps in {secs:.3f} s, {label})")
        if comm is not None:
            t = lat.halo_times
            n = max(1, t["half-sweeps"])
            every = "every half-sweep" if lat.halo == 1 else f"every {lat.halo // 2} sweeps"
            print(f"halo path   rank 0, halos of {lat.halo} slabs exchanged {every}, per half-sweep: "
                  f"{1e6 * t['edge wait'] / n:.1f} us waiting for the "
                  f"edge slabs, {1e6 * t['exchange'] / n:.1f} us exchanging them (MPI), "
                  f"{1e6 * t['halo writes'] / n:.1f} us queueing the halo writes")


def _plot_lattice(lat, p, path, comm=None):
    from ..plotting import pyplot
    s = lat.spins()                      # (gathered: every rank takes part)
    if not is_root(comm):
        return
    plt = pyplot()
    img = s if s.ndim == 2 else s[0]
    fig, ax = plt.subplots(figsize=(6, 6))
    ax.imshow(img, cmap="gray", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_title(f"{p['dim']}D Ising {'x'.join(map(str, lat.shape))}, T = {p['temperature']:g}, "
                 f"{p['sweeps']} sweeps" + (" (z = 0 slice)" if s.ndim == 3 else ""))
    ax.set_axis_off()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=150, bbox_inches="tight")
    plt.close(fig)
    print(f"plot        {path}")


# ------------------------------------------------------------------ binder
def cmd_binder(args) -> int:
    from . import binder_scan
    from ..exact import TC_2D, TC_3D
    check_outputs(args)
    if args.points < 2:
        raise ValueError(f"--points must be >= 2, got {args.points}")
    if not (math.isfinite(args.tmin) and math.isfinite(args.tmax)) or args.tmin >= args.tmax:
        raise ValueError(f"--tmin must be below --tmax, got {args.tmin} and {args.tmax}")
    temps = np.linspace(args.tmin, args.tmax, args.points)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")             # the table lists them
        scan = binder_scan(_ints(args.sizes), temps, dim=args.dim, n_therm=args.therm,
                           n_measure=args.measure, every=args.every, replicas=args.replicas,
                           algorithm=args.algorithm, rng=args.rng, seed=args.seed, device=args.device,
                           progress=progress_arg(args), comm=getattr(args, "comm", None))
    if scan is None:                   # another rank than 0 of a split scan
        return 0
    print(scan)
    if args.plot:
        from ..plotting import pyplot
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(6, 4.5))
        for i, L in enumerate(scan.sizes):
            ax.errorbar(scan.temperatures, scan.binder[i], yerr=scan.binder_err[i], marker="o",
                        ms=3, capsize=2, label=f"L = {L}")
        tc = TC_2D if args.dim == 2 else TC_3D
        ax.axvline(tc, color="k", ls="--", lw=0.8, label=f"Tc = {tc:.4f}")
        low = np.nanmin(scan.binder - scan.binder_err)
        for k, c in enumerate(scan.crossings):
            t = c.temperature
            if c.status == "ok":
                ax.errorbar([t.value], [low], xerr=[t.error], fmt="^", color=f"C{k + len(scan.sizes)}",
                            capsize=3, label=f"crossing L={c.sizes[0]}/{c.sizes[1]}: {t}")
        ax.set_xlabel("T")
        ax.set_ylabel("U4 = 1 - <m^4>/(3<m^2>^2)")
        ax.set_title(f"{args.dim}D Ising Binder cumulant")
        ax.legend(fontsize=8)
        with atomic_output(args.plot) as tmp:
            fig.savefig(tmp, dpi=150, bbox_inches="tight")
        plt.close(fig)
        print(f"plot: {args.plot}")
    return 0


def _common(p, defaults):
    p.add_argument("--dim", type=int, choices=(2, 3), default=defaults.get("dim", 2),
                   help="lattice dimension (default 2)")
    p.add_argument("--algorithm", default=None,
                   help="multispin (default), checkerboard, blocks (where built)")
    p.add_argument("--rng", default=None, help="random generator (default: the algorithm's first)")
    p.add_argument("--seed", type=int, default=defaults.get("seed", 0), help="seed (default 0)")
    add_device(p)
    add_progress(p)


def add_parsers(sub):
    from .binder import DEFAULTS
    p = sub.add_parser("ising", help="run an Ising lattice: equilibrium estimates, exact values, speed",
                       description="Run one Ising lattice: thermalise, measure, print E/N, |M|/N, C/N and "
                                   "chi with errors from the measured part next to the exact values, "
                                   "and the speed in spin flips per ns.")
    nd = {k: None for k in ISING_DEFAULTS}        # None: not given (see --resume)
    d = ISING_DEFAULTS
    p.add_argument("--size", default=None, help=f"L, or Lx and Ly [and Lz] joined by x or , (default {d['size']})")
    p.add_argument("--temperature", "-T", type=float, default=None, help="temperature (default Tc of 2D)")
    p.add_argument("--sweeps", type=int, default=None, help=f"sweeps in all (default {d['sweeps']})")
    p.add_argument("--therm", type=int, default=None,
                   help="of them, thermalisation sweeps before measuring (default: a fifth, i.e. a "
                        "quarter of the measured sweeps)")
    p.add_argument("--every", type=int, default=None, help="sweeps between measurements (default 1)")
    p.add_argument("--coupling", "-J", type=float, default=None, help="J (default 1)")
    p.add_argument("--field", type=float, default=None, help="magnetic field h (default 0)")
    p.add_argument("--start", choices=("random", "up", "down"), default=None, help="start (default random)")
    _common(p, nd)
    add_plot(p, "draw the final lattice into FILE")
    add_checkpoint(p)
    p.add_argument("--checkpoint-every", type=float, default=None, metavar="SECONDS",
                   help=f"seconds between checkpoint writes (default {CHECKPOINT_SECONDS:g})")
    p.set_defaults(func=cmd_ising)
    allow_mpi(p)            # mpiexec -n R clphys ising ...: one lattice split over R ranks

    p = sub.add_parser("binder", help="Binder-cumulant scan over sizes and temperatures",
                       description="U4, chi, C and |m| with jackknife errors over sizes and temperatures, "
                                   "and the U4 crossing temperatures (defaults shared with "
                                   "clphys.ising.binder_scan).")
    p.add_argument("--sizes", default="16,32,64", help="comma-separated sizes (default 16,32,64)")
    p.add_argument("--tmin", type=float, default=2.2,
                   help="lowest temperature of the scan (default 2.2)")
    p.add_argument("--tmax", type=float, default=2.34,
                   help="highest temperature of the scan (default 2.34)")
    p.add_argument("--points", type=int, default=15,
                   help="temperatures from --tmin to --tmax, evenly spaced, at least 2 "
                        "(default 15)")
    p.add_argument("--therm", type=int, default=DEFAULTS["n_therm"],
                   help="thermalisation sweeps (default: as many as are measured, --measure x --every)")
    p.add_argument("--measure", type=int, default=DEFAULTS["n_measure"],
                   help=f"measurements per lattice (default {DEFAULTS['n_measure']})")
    p.add_argument("--every", type=int, default=DEFAULTS["every"],
                   help=f"sweeps between measurements (default {DEFAULTS['every']})")
    p.add_argument("--replicas", type=int, default=DEFAULTS["replicas"],
                   help=f"independent lattices per temperature (default {DEFAULTS['replicas']})")
    _common(p, {})
    add_plot(p, "draw U4 against T into FILE")
    p.set_defaults(func=cmd_binder, cli_names={"n_therm": "--therm", "n_measure": "--measure",
                                               "every": "--every", "replicas": "--replicas",
                                               "sizes": "--sizes", "dim": "--dim",
                                               "seed": "--seed"})
    allow_mpi(p)            # the replicas of every size split over the ranks
