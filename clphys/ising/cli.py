"""``clphys ising`` (run one lattice: equilibrium estimates with errors next to
the exact values, and the speed) and ``clphys binder`` (Binder-cumulant scan
with crossing temperatures)."""

from __future__ import annotations

import math
import re
import time
import warnings

import numpy as np

from .._cli import (
    EXIT_UNTRUSTED,
    add_checkpoint,
    add_device,
    add_json,
    add_plot,
    add_progress,
    allow_mpi,
    check_outputs,
    checkpoint_every,
    is_root,
    progress_arg,
)
from ..progress import Progress
from ..runtime import Interrupted, run_sliced
from ..runtime.files import atomic_output
from ..runtime.longrun import Checkpoints, interrupt_deferred
from . import cli_report, cli_run
from .cli_run import ISING_DEFAULTS


def _ints(text, what="--sizes"):
    if not re.fullmatch(r"\s*\d+\s*(,\s*\d+\s*)*", text or ""):
        raise ValueError(f"{what} must be comma-separated positive integers, got {text!r}")
    return [int(v) for v in text.split(",")]


AUTO_MAX_SECONDS = 600.0       # --sweeps auto's budget when --max-seconds is not given
AUTO_FIRST = 256               # measurements of --sweeps auto's first chunk
AUTO_GROWTH = 0.25             # each further chunk: this fraction of the measurements so far
# --sweeps auto stops once every series has been at least AUTO_MARGIN x MIN_TAUS tau_int long,
# with no warning, at every check while the measured part doubled: a run that stops the first
# time its own tau_int estimate allows stops just where that estimate is low, before the series
# has seen its slowest mode (2D at Tc from a random start, seeds 0-4 of L = 32 and 64: stopping
# at the first pass of 1 x MIN_TAUS put C/N up to 10 sigma off; this rule, over 17 runs, 3.3 at most)
AUTO_MARGIN = 2.0


def _sweeps_arg(text):
    """--sweeps: None (not given), 'auto' or an integer."""
    if text is None or text == "auto":
        return text
    if isinstance(text, int) or re.fullmatch(r"\s*-?\d+\s*", str(text)):
        return int(text)
    raise ValueError(f"--sweeps must be an integer or 'auto', got {text!r}")


def cmd_ising(args) -> int:
    t_start = time.perf_counter()
    check_outputs(args)
    every_s = checkpoint_every(args)
    args.sweeps = _sweeps_arg(args.sweeps)
    auto = args.sweeps == "auto"
    if args.max_seconds is not None:
        if not auto:
            raise ValueError("--max-seconds needs --sweeps auto")
        if not (math.isfinite(args.max_seconds) and args.max_seconds > 0):
            raise ValueError(f"--max-seconds must be a positive number, got {args.max_seconds}")
    comm = getattr(args, "comm", None)
    if auto:
        r = _auto(args, t_start, comm)
    else:
        r = _fixed(args, every_s, comm)
    lat = r.pop("_lattice")
    if is_root(comm):
        (cli_report.print_json if args.json else cli_report.print_text)(r)
    if args.plot:
        cli_report.plot_lattice(lat, r["sweeps"], r["dim"], r["temperature"], args.plot, comm,
                                quiet=args.json)
    return EXIT_UNTRUSTED if auto and not r["trusted"] else 0


def _fixed(args, every_s, comm):
    """A run of a given number of sweeps (or resumed from a checkpoint): the result dict."""
    if args.resume:
        lat, run, p = cli_run.load_run(args.resume, args, args.device, comm)
    else:
        p = cli_run.ising_params(args)
        cli_run.check_ising_params(p)
        lat, run = cli_run.new_run(p, args.device, comm)
    queue = lat.device.queue
    path = args.checkpoint or args.resume          # a resumed run keeps saving into its file
    saves = Checkpoints(path, lambda: cli_run.save_run(path, lat, run, p), every_s, comm)
    timing = {"therm": [], "measure": []}

    def slices(phase):
        def step(start, n):
            t0 = time.perf_counter()
            run.step(n)
            queue.finish()
            timing[phase].append((n, time.perf_counter() - t0))
            saves.maybe()
        return step

    with Progress(max(run.total, 1), progress_arg(args), label="ising") as bar:
        bar.update(run.done)
        try:
            with saves:
                for phase, end in (("therm", run.n_therm), ("measure", run.total)):
                    if run.done < end:
                        run_sliced(end - run.done, slices(phase), queue, bar=bar, what="sweeps",
                                   largest=run.largest, comm=comm)
        except Interrupted as exc:
            stop = Interrupted(run.done, run.total, "sweeps")
            stop.kept = exc.kept
            raise stop from None
    saves.write()
    speed = cli_report.sweep_speed(lat, timing, run.every, comm)
    r = cli_report.result(lat, cli_report.single_replica(run.samples()), p, run.total, speed, comm)
    if comm is not None:
        r["halo"] = cli_report.halo_line(lat)
    r["_lattice"] = lat
    return r


def _auto(args, t_start, comm):
    """--sweeps auto: sweep and measure in growing chunks until every estimate
    is trustworthy by the library's own criterion (each series >= MIN_TAUS
    tau_int long, no drift between its halves: no warning) with AUTO_MARGIN
    to spare, and has stayed so while the measured part doubled, or until
    --max-seconds (from the command's start) are spent. The split is that of
    --sweeps N for the N reached (the first fifth thermalises), so the result
    is that run's, bit for bit."""
    from . import Ising2D, Ising3D
    if args.checkpoint or args.resume or args.therm is not None:
        raise ValueError("--sweeps auto takes no --checkpoint, --resume or --therm: it stops by itself "
                         "(within --max-seconds); run the --sweeps N it reports to checkpoint")
    if comm is not None:
        raise ValueError("--sweeps auto runs on one process; give --sweeps N under mpiexec")
    p = cli_run.ising_params(args)
    cli_run.check_ising_params({**p, "sweeps": 0})
    budget = AUTO_MAX_SECONDS if args.max_seconds is None else args.max_seconds
    cls = Ising2D if p["dim"] == 2 else Ising3D
    lat = cls(cli_run.parse_size(p["size"]), p["temperature"], J=p["coupling"], h=p["field"],
              algorithm=p["algorithm"], rng=p["rng"], seed=p["seed"], start=p["start"], device=args.device)
    s1, seconds, trust = _auto_loop(lat, p, t_start + budget, progress_arg(args))
    total = s1.n_therm + s1.every * s1.energy.size
    speed = {"flips_per_ns": lat.n_spins * total / seconds / 1e9, "sweeps": total, "seconds": seconds,
             "what": f"measurements every {s1.every} included", "ranks_text": ""}
    r = cli_report.result(lat, s1, p, total, speed, auto={"seconds": time.perf_counter() - t_start,
                                                          "max_seconds": budget, "trust": trust})
    r["_lattice"] = lat
    return r


def _auto_loop(lat, p, deadline, progress):
    """The chunks of --sweeps auto: (Samples of the measured part, seconds spent
    sweeping and measuring, how far the criterion got, 0 .. 1)."""
    from ..progress import LongRunWarning
    from .lattice import split_run
    from .samples import Samples
    every = p["every"]
    energy, mag = [], []
    seconds, rate, trust, chunk, steps = 0.0, None, 0.0, AUTO_FIRST, 1000
    trusted_since = None           # measurements when the criterion last became true

    def stopped(done, total):
        stop = Interrupted(done, total, "sweeps")
        stop.kept = "nothing written (--sweeps auto keeps no state: --sweeps N with --checkpoint FILE does)"
        return stop
    # Ctrl-C between chunks (while the series are analysed) stops after that chunk too
    with Progress(steps, progress, label="ising: trustworthy errors") as bar, warnings.catch_warnings(), \
            interrupt_deferred() as pending:
        # the budget bounds the run: the CPU long-run estimate would only repeat it
        warnings.simplefilter("ignore", LongRunWarning)
        while True:
            if rate is not None:
                chunk = max(16, min(chunk, int((deadline - time.perf_counter()) * rate / every)))
            c0 = time.perf_counter()
            try:
                s = lat.sample(chunk, every=every, n_therm=0, progress=False)
            except Interrupted as exc:
                made = every * sum(len(e) for e in energy)
                raise stopped(made + exc.done, made + exc.total) from None
            seconds += time.perf_counter() - c0
            rate = chunk * every / max(time.perf_counter() - c0, 1e-9)
            energy.append(s.energy)
            mag.append(s.magnetization)
            e_all, m_all = np.concatenate(energy), np.concatenate(mag)
            n_therm, n_measure = split_run(every * len(e_all), every)
            s1 = Samples(p["temperature"], lat.n_spins, e_all[len(e_all) - n_measure:],
                         m_all[len(m_all) - n_measure:], n_therm=n_therm, every=every)
            est, _drift, messages = cli_report.analyse(s1)
            now = cli_report.trust_fraction(est, messages, AUTO_MARGIN)
            trusted_since = (trusted_since or n_measure) if now >= 1.0 else None
            # the bar: three quarters for the criterion, the last quarter for the doubling
            trust = max(trust, now * (0.5 + 0.5 * min(1.0, n_measure / (2 * (trusted_since or n_measure)))))
            bar.update(int(steps * trust) - bar.done)
            if (trusted_since and n_measure >= 2 * trusted_since) or time.perf_counter() >= deadline:
                return s1, seconds, trust
            chunk = max(AUTO_FIRST, int(AUTO_GROWTH * len(e_all)))
            if pending():               # as if stopped at the start of the next chunk
                made = every * len(e_all)
                raise stopped(made, made + every * chunk)



# ------------------------------------------------------------------ binder
def cmd_binder(args) -> int:
    from ..exact import TC_2D, TC_3D
    from . import binder_scan
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
    if args.json:
        cli_report.binder_json(scan, args)
    else:
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
        if not args.json:
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
    p.add_argument("--sweeps", default=None,
                   help=f"sweeps in all (default {d['sweeps']}), or 'auto': sweep until every error can be "
                        f"trusted (each series >= 2 x 50 tau_int and no drift, while the series doubled), within "
                        f"--max-seconds")
    p.add_argument("--max-seconds", type=float, default=None,
                   help=f"with --sweeps auto: stop after this many seconds (default {AUTO_MAX_SECONDS:g}), "
                        f"trusted or not (then exit status 3)")
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
    add_json(p)
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
    add_json(p)
    p.set_defaults(func=cmd_binder, cli_names={"n_therm": "--therm", "n_measure": "--measure",
                                               "every": "--every", "replicas": "--replicas",
                                               "sizes": "--sizes", "dim": "--dim",
                                               "seed": "--seed"})
    allow_mpi(p)            # the replicas of every size split over the ranks
