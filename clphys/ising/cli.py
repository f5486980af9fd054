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
from ..runtime import Interrupted, mpi, run_sliced
from ..runtime.checkpoint import CheckpointError, field, load_checkpoint, save_checkpoint
from ..runtime.files import atomic_output
from ..runtime.longrun import Checkpoints

RUN_KIND = "ising-run"
# `clphys ising` defaults; None on the command line means "not given", so a
# --resume can tell which options the user set
ISING_DEFAULTS = {"dim": 2, "size": "1024", "temperature": 2.269185314213022, "sweeps": 1000,
                  "every": 1, "coupling": 1.0, "field": 0.0, "start": "random", "seed": 0,
                  "algorithm": None, "rng": None, "therm": None}


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
        (_print_json if args.json else _print_text)(r)
    if args.plot:
        _plot_lattice(lat, r["sweeps"], r["dim"], r["temperature"], args.plot, comm, quiet=args.json)
    return EXIT_UNTRUSTED if auto and not r["trusted"] else 0


def _fixed(args, every_s, comm):
    """A run of a given number of sweeps (or resumed from a checkpoint): the result dict."""
    if args.resume:
        lat, run, p = _load_run(args.resume, args, args.device, comm)
    else:
        p = _ising_params(args)
        _check_ising_params(p)
        lat, run = _new_run(p, args.device, comm)
    queue = lat.device.queue
    path = args.checkpoint or args.resume          # a resumed run keeps saving into its file
    saves = Checkpoints(path, lambda: _save_run(path, lat, run, p), every_s, comm)
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
    r = _result(lat, _single(run.samples()), p, run.total, _speed(lat, timing, run.every, comm), comm)
    if comm is not None:
        r["halo"] = _halo_line(lat)
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
    p = _ising_params(args)
    _check_ising_params({**p, "sweeps": 0})
    budget = AUTO_MAX_SECONDS if args.max_seconds is None else args.max_seconds
    cls = Ising2D if p["dim"] == 2 else Ising3D
    lat = cls(_size(p["size"]), p["temperature"], J=p["coupling"], h=p["field"], algorithm=p["algorithm"],
              rng=p["rng"], seed=p["seed"], start=p["start"], device=args.device)
    s1, seconds, trust = _auto_loop(lat, p, t_start + budget, progress_arg(args))
    total = s1.n_therm + s1.every * s1.energy.size
    speed = {"flips_per_ns": lat.n_spins * total / seconds / 1e9, "sweeps": total, "seconds": seconds,
             "what": f"measurements every {s1.every} included", "ranks_text": ""}
    r = _result(lat, s1, p, total, speed, auto={"seconds": time.perf_counter() - t_start,
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
    with Progress(steps, progress, label="ising: trustworthy errors") as bar, warnings.catch_warnings():
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
                stop = Interrupted(made + exc.done, made + exc.total, "sweeps")
                stop.kept = "nothing written (--sweeps auto keeps no state: --sweeps N with --checkpoint FILE does)"
                raise stop from None
            seconds += time.perf_counter() - c0
            rate = chunk * every / max(time.perf_counter() - c0, 1e-9)
            energy.append(s.energy)
            mag.append(s.magnetization)
            e_all, m_all = np.concatenate(energy), np.concatenate(mag)
            n_therm, n_measure = split_run(every * len(e_all), every)
            s1 = Samples(p["temperature"], lat.n_spins, e_all[len(e_all) - n_measure:],
                         m_all[len(m_all) - n_measure:], n_therm=n_therm, every=every)
            est, _drift, messages = _analyse(s1)
            now = _trust(est, messages, AUTO_MARGIN)
            trusted_since = (trusted_since or n_measure) if now >= 1.0 else None
            # the bar: three quarters for the criterion, the last quarter for the doubling
            trust = max(trust, now * (0.5 + 0.5 * min(1.0, n_measure / (2 * (trusted_since or n_measure)))))
            bar.update(int(steps * trust) - bar.done)
            if (trusted_since and n_measure >= 2 * trusted_since) or time.perf_counter() >= deadline:
                return s1, seconds, trust
            chunk = max(AUTO_FIRST, int(AUTO_GROWTH * len(e_all)))


def _ordered_range(p, shape) -> bool:
    """Whether Onsager's spontaneous magnetization is what this torus shows for
    <|M|>/N: below Tc with every side at least 20 correlation lengths (the
    finite-size correction falls off like exp(-L/xi)). Near and above Tc a
    finite lattice's <|M|>/N is far from Onsager's M, and no exact value is
    known for it."""
    from ..exact import TC_2D
    T, J = p["temperature"], p["coupling"]
    if not T < TC_2D * J:
        return False
    K = J / T
    dual = -0.5 * math.log(math.tanh(K))
    xi = 1.0 / (2.0 * (K - dual))            # an upper bound on the correlation length
    return min(shape) >= 20 * xi


def _references(p, shape):
    """{observable: [(value, name, where)]} of the exact values this lattice
    can be compared with (the first, where there is one, is the one to judge
    the estimate by), and {observable: note} where there is none."""
    from ..exact import TC_2D, TC_3D, finite_lattice, onsager_energy, onsager_magnetization
    J, h, T = p["coupling"], p["field"], p["temperature"]
    ref, notes = {"energy": [], "abs_magnetization": [], "specific_heat": []}, {}
    if p["dim"] == 2 and h == 0 and J > 0:
        if shape[0] == shape[1] and shape[0] % 2 == 0 and shape[0] <= 4096:
            fl = finite_lattice(shape[0], T, J)
            ref["energy"].append((float(fl.energy), "exact", "on this torus"))
            ref["specific_heat"].append((float(fl.specific_heat), "exact", "on this torus"))
        ref["energy"].append((float(onsager_energy(T, J)), "Onsager", "(infinite lattice)"))
        if _ordered_range(p, shape):
            ref["abs_magnetization"].append((float(onsager_magnetization(T, J)), "Onsager",
                                             f"(infinite lattice, Tc = {TC_2D * J:.6f}; this torus is "
                                             f">= 20 correlation lengths wide)"))
        else:
            notes["abs_magnetization"] = (f"no exact value for a finite lattice at this T (Onsager's "
                                          f"M = {float(onsager_magnetization(T, J)):.6f} holds for L -> inf; "
                                          f"Tc = {TC_2D * J:.6f})")
    elif p["dim"] == 3 and h == 0 and J > 0:
        notes["abs_magnetization"] = f"3D Tc = {TC_3D * J:.6f}"
    return ref, notes


ESTIMATES = (("energy", "energy/N", "mean_energy"), ("abs_magnetization", "|M|/N", "abs_magnetization"),
             ("specific_heat", "C/N", "specific_heat"), ("susceptibility", "chi", "susceptibility"))


def _analyse(s1):
    """({observable: estimate}, drift or None, [warning messages]) of one
    lattice's measured series; no warning means every error can be trusted
    (each series >= 50 tau_int long, no drift between its halves)."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        est = {key: getattr(s1, method)() for key, _, method in ESTIMATES}
        drift = s1.drift() if s1.energy.shape[-1] >= 32 else None
    return est, drift, list(dict.fromkeys(str(w.message) for w in record))


def _trust(est, messages, margin=1.0) -> float:
    """How far the series is towards trustworthy errors, 0 .. 1 (1: every
    estimate >= margin x MIN_TAUS tau_int long and no warning)."""
    from ..stats import MIN_TAUS
    parts = [e.n / (margin * MIN_TAUS * e.tau_int) if e.tau_int > 0 else 0.0 for e in est.values()]
    frac = min([min(1.0, x) if math.isfinite(x) else 0.0 for x in parts] + [1.0])
    return frac if not messages else min(frac, 0.99)


def _single(s):
    """The Samples of replica 0 of a run's Samples."""
    return type(s)(float(s.temperature[0]), s.n_spins, s.energy[0], s.magnetization[0], s.n_therm, s.every,
                   bool(s.trapped[0]))


def _result(lat, s1, p, total, speed, comm=None, auto=None):
    """Everything `clphys ising` reports, as one dict (printed as text or JSON)."""
    n = s1.energy.shape[-1]
    ref, notes = _references(p, lat.shape)
    est, drift, messages = _analyse(s1) if n else ({}, None, [
        "no measurements: the run is too short for any estimate (more --sweeps)"])
    where = (f"{comm.Get_size()} MPI ranks (rank 0: {lat.device.name}; slabs of "
             f"{'x'.join(map(str, lat.local_shape))})" if comm is not None else lat.device.name)
    out = {"command": "ising", "device": where, "seed": p["seed"], "dim": p["dim"],
           "shape": list(lat.shape), "temperature": p["temperature"], "coupling": p["coupling"],
           "field": p["field"], "start": p["start"], "algorithm": lat.algorithm, "rng": lat.rng,
           "every": s1.every, "sweeps": total, "thermalisation": s1.n_therm, "measurements": n,
           "estimates": {}, "drift": None, "trusted": not messages, "warnings": messages,
           "speed": speed, "auto": auto}
    for key, est_ in est.items():
        refs = ref.get(key, [])
        item = {"value": est_.value, "error": est_.error, "tau_int_sweeps": est_.tau_int * s1.every,
                "exact": [{"value": v, "what": f"{name} {where}"} for v, name, where in refs]}
        if refs and est_.error > 0:
            item["sigmas_from_exact"] = (est_.value - refs[0][0]) / est_.error
        if key in notes:
            item["note"] = notes[key]
        out["estimates"][key] = item
    if drift is not None and math.isfinite(drift.error):
        out["drift"] = {"value": drift.value, "error": drift.error}
    out["_est"], out["_drift"] = est, drift
    return out


def _print_text(r):
    shape = "x".join(map(str, r["shape"]))
    print(f"Ising {r['dim']}D {shape}, T = {r['temperature']:g}, J = {r['coupling']:g}, h = {r['field']:g}, "
          f"{r['algorithm']}/{r['rng']}, seed {r['seed']}, {r['start']} start, on {r['device']}")
    n, every = r["measurements"], r["every"]
    auto = r["auto"]
    how = (f" (--sweeps auto: trustworthy after {auto['seconds']:.1f} s; the same as --sweeps {r['sweeps']})"
           if auto and r["trusted"] else "")
    print(f"sweeps      {r['sweeps']}: {r['thermalisation']} thermalisation (discarded), then {n} measurements, "
          f"one every {every} sweep{'s' if every > 1 else ''}{how}")
    est = r["_est"]
    for key, name, _ in ESTIMATES:
        if key not in est:
            continue
        item = r["estimates"][key]
        txt = "; ".join(f"{x['what'].split(' ', 1)[0]} {x['value']:.6f} {x['what'].split(' ', 1)[1]}"
                        for x in item["exact"])
        if "sigmas_from_exact" in item:
            txt += f"; {item['sigmas_from_exact']:+.1f} sigma"
        if "note" in item:
            txt = "; ".join(filter(None, (txt, item["note"])))
        print(f"{name:<11} {str(est[key]):<18} {txt}".rstrip())
    if est:
        e_tau, m_tau = est["energy"].tau_int, est["abs_magnetization"].tau_int
        if math.isfinite(e_tau) and math.isfinite(m_tau):
            print(f"tau_int     energy {e_tau * every:.3g} sweeps, |M| {m_tau * every:.3g} sweeps: the "
                  f"measured part is {n / max(e_tau, m_tau):.3g} tau_int long (errors need >= 50)")
    drift = r["_drift"]
    if drift is not None and math.isfinite(drift.error):
        print(f"drift       energy/N, second half - first half of the measured part: {drift}")
    for msg in r["warnings"]:
        print(f"warning: {msg}")
    if r["warnings"] and n:
        print(f"warning: the run is too short to be in equilibrium with trustworthy errors at "
              f"T = {r['temperature']:g}: use more --sweeps (local updates near Tc need ~L^2.2 sweeps "
              f"to decorrelate), or --sweeps auto")
    if auto and not r["trusted"]:
        print(f"warning: --max-seconds {auto['max_seconds']:g} ran out after {r['sweeps']} sweeps, before the "
              f"errors could be trusted ({100 * auto['trust']:.0f} % of the way): give more seconds, a smaller "
              f"lattice or a temperature farther from Tc")
    sp = r["speed"]
    if sp:
        print(f"speed       {sp['flips_per_ns']:.3f} spin flips/ns{sp['ranks_text']} ({sp['sweeps']} sweeps in "
              f"{sp['seconds']:.3f} s, {sp['what']})")
    if r.get("halo"):
        print(r["halo"])


def _print_json(r):
    import sys

    from .._cli import print_json
    for msg in r["warnings"]:
        print(f"clphys ising: warning: {msg}", file=sys.stderr)
    print_json({k: v for k, v in r.items() if not k.startswith("_")})


def _speed(lat, timing, every, comm=None):
    """The speed dict: sweeps after the first (with measurements where no pure
    thermalisation slices were timed)."""
    pure = timing["therm"][1:]
    what = "thermalisation sweeps after the first"
    if not sum(k for k, _ in pure):
        pure = (timing["therm"] + timing["measure"])[1:]
        what = f"after the first, measurements every {every} included"
    sweeps, secs = sum(k for k, _ in pure), sum(t for _, t in pure)
    if not (sweeps and secs > 0):
        return None
    rate = lat.n_spins * sweeps / secs / 1e9
    ranks = "" if comm is None else f", {rate / comm.Get_size():.3f} per rank on {comm.Get_size()} ranks"
    return {"flips_per_ns": rate, "sweeps": sweeps, "seconds": secs, "what": what, "ranks_text": ranks}


def _halo_line(lat):
    t = lat.halo_times
    n = max(1, t["half-sweeps"])
    every = "every half-sweep" if lat.halo == 1 else f"every {lat.halo // 2} sweeps"
    return (f"halo path   rank 0, halos of {lat.halo} slabs exchanged {every}, per half-sweep: "
            f"{1e6 * t['edge wait'] / n:.1f} us waiting for the "
            f"edge slabs, {1e6 * t['exchange'] / n:.1f} us exchanging them (MPI), "
            f"{1e6 * t['halo writes'] / n:.1f} us queueing the halo writes")


def _plot_lattice(lat, sweeps, dim, temperature, path, comm=None, quiet=False):
    from ..plotting import pyplot
    s = lat.spins()                      # (gathered: every rank takes part)
    if not is_root(comm):
        return
    plt = pyplot()
    img = s if s.ndim == 2 else s[0]
    fig, ax = plt.subplots(figsize=(6, 6))
    ax.imshow(img, cmap="gray", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_title(f"{dim}D Ising {'x'.join(map(str, lat.shape))}, T = {temperature:g}, "
                 f"{sweeps} sweeps" + (" (z = 0 slice)" if s.ndim == 3 else ""))
    ax.set_axis_off()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=150, bbox_inches="tight")
    plt.close(fig)
    if not quiet:
        print(f"plot        {path}")


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
        _binder_json(scan, args)
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


def _binder_json(scan, args):
    import sys

    from .._cli import json_value, print_json
    from ..exact import TC_2D, TC_3D
    from ..runtime import resolve_device
    for msg in scan.warnings:
        print(f"clphys binder: warning: {msg}", file=sys.stderr)
    out = {"command": "binder", "device": resolve_device(args.device).name, "seed": args.seed,
           "dim": scan.dim, "sizes": list(scan.sizes), "temperatures": json_value(scan.temperatures),
           "thermalisation": scan.n_therm, "measurements": scan.n_measure, "every": scan.every,
           "replicas": scan.replicas, "jackknife_blocks": scan.n_blocks,
           "tau_int_sweeps": json_value(scan.tau_int)}
    for name in ("binder", "susceptibility", "specific_heat", "energy", "abs_magnetization"):
        out[name] = {"value": json_value(getattr(scan, name)), "error": json_value(getattr(scan, name + "_err"))}
    out["crossings"] = [{"sizes": list(c.sizes), "status": c.status, "note": c.note,
                         "temperature": {"value": json_value(c.temperature.value),
                                         "error": json_value(c.temperature.error)}} for c in scan.crossings]
    out["crossing"] = {"value": json_value(scan.crossing.value), "error": json_value(scan.crossing.error),
                       "exact": TC_2D if scan.dim == 2 else TC_3D,
                       "exact_what": "Onsager's Tc" if scan.dim == 2 else "3D Tc (Monte Carlo literature)"}
    out["warnings"] = list(scan.warnings)
    print_json(out)


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
