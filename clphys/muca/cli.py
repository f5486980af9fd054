"""``clphys muca``: iterate multicanonical weights, run the production, print
the density of states against the exact one (2D) and canonical averages."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from .. import _validate
from .._cli import (
    add_checkpoint,
    add_device,
    add_json,
    add_output,
    add_plot,
    add_progress,
    allow_mpi,
    check_outputs,
    checkpoint_every,
    is_root,
)
from ..runtime.files import atomic_output
from ..runtime.longrun import Checkpoints

EXACT_MAX_L = 128              # Beale's exact ln g is computed up to here (about a minute at 128)
SUMMARY_T = {2: (1.5, 2.0, 2.269185, 2.5, 3.0), 3: (3.5, 4.0, 4.5115, 5.0, 6.0)}


def cmd_muca(args) -> int:
    check_outputs(args, (".npz",))
    every_s = checkpoint_every(args)
    _check_args(args)
    comm = getattr(args, "comm", None)
    t_start = time.perf_counter()
    say = (lambda *a, **k: None) if args.json else print
    sim = _start(args, comm, say)
    sim, res = _iterate_and_produce(sim, args, every_s, say)
    exact = _exact(sim, res, say)
    temps, c, ref = _summary(sim, res, say)
    say(f"wall        {time.perf_counter() - t_start:.3f} s in all (build and transfers included)")
    if not is_root(comm):                 # every rank holds the result; rank 0 writes it
        return 0
    if args.output:
        _write_output(args.output, sim, res, exact)
        say(f"output      {args.output}")
    if args.plot:
        _plot(args.plot, sim, res, exact)
        say(f"plot        {args.plot}")
    if args.json:
        _print_json(args, sim, res, exact, temps, c, ref, time.perf_counter() - t_start)
    return 0


def _check_args(args):
    """ValueError for a number out of range or a checkpoint under MPI."""
    for name, value, low in (("--size", args.size, 2), ("--walkers", args.walkers, 1),
                             ("--production-blocks", args.production_blocks, 2),
                             ("--production-updates", args.production_updates, 1),
                             ("--max-iterations", args.max_iterations, 0),
                             ("--production-walkers", args.production_walkers, 2)):
        if value is not None and value < low:
            raise ValueError(f"{name} must be >= {low}, got {value}")
    for name, value in (("--kl", args.kl), ("--target-error", args.target_error),
                        ("--max-seconds", args.max_seconds)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive number, got {value}")
    if args.weights and args.resume:
        raise ValueError("--weights: a resumed run goes on with the weights of its checkpoint; leave one out")
    if args.weights and (args.kl is not None or args.max_iterations is not None):
        raise ValueError("--weights skips the weight iteration: leave out --kl and --max-iterations")
    if args.weights and args.production_walkers is not None:
        raise ValueError("--weights skips the weight iteration: its walkers are the production's "
                         "(--walkers), leave out --production-walkers")
    if getattr(args, "comm", None) is not None and (args.checkpoint or args.resume):
        raise ValueError("--checkpoint and --resume are not supported with walkers split over MPI "
                         "ranks; run on one process to checkpoint")


def _start(args, comm, say):
    """The simulation, new or resumed, once every argument and derived default
    has passed its check; its first line said."""
    from ..runtime import mpi, resolve_device
    from .engine import default_walkers
    from .geometry import Geometry
    from .simulation import Multicanonical, check_walkers
    if args.resume:
        saved = Multicanonical.peek(args.resume)          # checked before any device work
        # a checkpoint of the production holds the production's walkers
        given_walkers = (("--production-walkers", args.production_walkers)
                         if saved["producing"] and args.production_walkers is not None
                         else ("--walkers", args.walkers))
        for name, given, key in (("--size", args.size, "L"), ("--dim", args.dim, "dim"),
                                 ("--seed", args.seed, "seed"), (*given_walkers, "walkers")):
            if given is not None and given != saved[key]:
                raise ValueError(f"{name} {given} does not match the checkpoint {args.resume!r} "
                                 f"({saved[key]}); leave it out or start a new run")
        if args.symmetric and not saved["symmetric"]:
            raise ValueError(f"--symmetric: the checkpoint {args.resume!r} samples the whole energy range; "
                             f"leave it out or start a new run")
        geom, walkers = Geometry.checked(saved["L"], saved["dim"]), saved["walkers"]
        dev = resolve_device(args.device)
    else:
        if args.size is None:
            raise ValueError("--size is required (or --resume FILE)")
        geom = Geometry.checked(args.size, args.dim or 2)
        weights = _load_weights(args.weights, geom) if args.weights else None
        dev = resolve_device(args.device)
        walkers = args.walkers or default_walkers(dev.facts, geom, mpi.comm_size(comm), args.symmetric)
        _cpu_warning(dev, geom, walkers)
    producers = args.production_walkers if args.production_walkers is not None else walkers
    _check_production(producers, geom, args)              # every derived default, before any kernel
    if producers != walkers:                              # the production's walkers fit too
        check_walkers(dev, geom, producers, comm, "--production-walkers")
    if args.resume:
        sim = Multicanonical.load(args.resume, device=args.device)
    else:
        sim = Multicanonical(args.size, dim=args.dim or 2, walkers=args.walkers, seed=args.seed or 0,
                             device=args.device, symmetric=args.symmetric, comm=comm)
        if weights is not None:
            sim.set_log_weights(weights)
    o = sim.options
    wg = f"{o['wg']}" + (f" ({o['wg_recorded']} recording)" if "wg_recorded" in o else "")
    where = sim.device.name if comm is None else f"{comm.Get_size()} MPI ranks (rank 0: {sim.device.name})"
    say(f"muca {sim.geom}{' (E <= 0, ln g mirrored)' if sim.symmetric else ''}, {sim.walkers} walkers, "
        f"seed {sim.seed}, on {where} "
          f"(wg {wg}, lattice {o['lattice']}, table {o['table']}, histogram {o['hist']}"
          f"{' in 16 bits' if o['hist'] == 'local' and o.get('hist_bits') == 16 else ''}, "
          f"{o['per_item']} walker(s) per work item)"
          + (f", resumed from {args.resume}" + (" (in the production)" if sim.producing else "")
             if args.resume else "") + (f", the weights of {args.weights}" if args.weights else ""),
        flush=True)
    return sim


def _load_weights(path, geom):
    """The log weights in `path` (an -o output's log_weights, or a .npy array),
    checked against the lattice before any device work."""
    import os
    if not os.path.isfile(path):
        raise ValueError(f"--weights {path!r} does not exist")
    try:
        data = np.load(path)                      # no pickles: allow_pickle stays False
    except (OSError, EOFError, ValueError):
        raise ValueError(f"--weights {path!r} is not a NumPy .npz or .npy file") from None
    bad = f"--weights {path!r} must hold {geom.nbins} finite numbers (one per energy of {geom})"

    def numbers(x, why):
        try:
            return _validate.finite_array("--weights", x, ndim=1, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(bad + why(x)) from None

    if isinstance(data, np.ndarray):
        w = data
    else:
        with data:
            if "log_weights" not in data:
                raise ValueError(f"--weights {path!r} has no log_weights (use an -o output or a .npy)")
            for key, value in (("dim", geom.dim), ("L", geom.L)):
                if key in data and int(data[key]) != value:
                    raise ValueError(f"--weights {path!r} is for {key} = {int(data[key])}, not {value}")
            w = np.array(data["log_weights"])
            e = np.array(data["energies"]) if "energies" in data else None
        if e is not None and e.shape == w.shape and w.ndim == 1:
            # an output holds them over the energies seen: onto every bin (the
            # empty ones next to the ground states are never entered)
            output = ": its energies or log_weights are not those of an output"
            e, w = numbers(e, lambda _: output), numbers(w, lambda _: output)
            if not (np.all(np.isin(e, geom.energies())) and np.all(np.diff(e) > 0)):
                raise ValueError(bad + output)
            w = np.interp(geom.energies(), e, w)
    w = numbers(w, lambda x: f", got {x.dtype} of shape {x.shape}")
    if w.shape != (geom.nbins,):
        raise ValueError(bad + f", got {w.dtype} of shape {w.shape}")
    return w


def _iterate_and_produce(sim, args, every_s, say):
    """The weight iteration (unless resumed in the production) and the
    production (on a new simulation with --production-walkers), checkpointed
    every every_s seconds: (the simulation that iterated, the production's
    result)."""
    from .result import passage_span
    kl = args.kl if args.kl is not None else (sim.kl if args.resume else 1e-4)
    path = args.checkpoint or args.resume          # a resumed run keeps saving into its file
    saving = [sim]                                 # the simulation a checkpoint holds
    saver = Checkpoints(path, lambda: saving[0].save(path), every_s)
    with saver:
        iterated = sim
        if not sim.producing and not args.weights:   # a resumed production goes on without iterating
            sim.iterate(kl=kl, max_iterations=args.max_iterations, progress=args.progress,
                        callback=saver.maybe)
            saver.write()
            if args.production_walkers is not None:
                sim = saving[0] = sim.for_production(args.production_walkers)
        h = iterated.history
        if len(h):
            it_seconds, it_flips = float(h.seconds.sum()), int(h.flips.sum())
            state = (f"converged, d_k = {h.d_k[-1]:.3g} < {iterated.kl:g}" if iterated.converged
                     else f"NOT converged, d_k = {h.d_k[-1]:.3g} >= {iterated.kl:g}")
            say(f"iterations  {len(h)} ({state}), width {h.width[-1]}/{sim.top}"
                + (f"; the production at {sim.walkers} walkers, from new lattices" if sim is not iterated else ""))
            say(f"time        {it_seconds:.3f} s for {it_flips:.4g} attempted flips: "
                f"{it_flips / max(it_seconds, 1e-12) / 1e9:.3f} flips/ns (iteration phase)", flush=True)
        else:
            say(f"iterations  none: the weights of {args.weights or 'the checkpoint'}", flush=True)
        res = sim.produce(blocks=args.production_blocks, updates=args.production_updates,
                          progress=args.progress, target_error=args.target_error,
                          max_seconds=args.max_seconds)
    say(f"production  {res.blocks} blocks of walkers, {res.updates} recorded flips per walker "
          f"(+{res.therm} thermalisation), {res.seconds:.3f} s, "
          f"{res.flips / max(res.seconds, 1e-12) / 1e9:.3f} flips/ns, d_c = {res.chebyshev:.3f}; "
          f"{res.round_trips:.3g} round trips per walker {passage_span(res.symmetric)} "
          f"({res.therm_passages / 2:.3g} thermalising); largest error of ln g {res.max_error:.3g} "
          f"(target {res.target_error:g}{'' if res.reached else ', NOT reached'})")
    # the result says how the weights were made
    return iterated, dataclasses.replace(res, converged=iterated.converged, iterations=len(iterated.history))


def _summary(sim, res, say):
    """The canonical table at SUMMARY_T said, next to the exact finite-lattice
    values in 2D: (temperatures, canonical estimates, exact values or None)."""
    temps = np.array(SUMMARY_T[sim.dim])
    c = res.canonical(temps)
    ref = None
    if sim.dim == 2:
        from ..exact import finite_lattice
        ref = finite_lattice(sim.L, temps)
    say(f"{'T':>9} {'<E>/N':>22} {'C/N':>22}" + (f" {'exact <E>/N':>12} {'exact C/N':>10}" if ref else ""))
    for i, T in enumerate(temps):
        line = (f"{T:9.4f} {c.energy[i]:13.6f} ± {c.energy_err[i]:.1e} "
                f"{c.specific_heat[i]:13.6f} ± {c.specific_heat_err[i]:.1e}")
        if ref is not None:
            line += f" {ref.energy[i]:12.6f} {ref.specific_heat[i]:10.6f}"
        say(line)
    return temps, c, ref


def _check_production(walkers, geom, args):
    """The production's arguments and defaults against the walker count, with
    the command line's names (before any kernel)."""
    from .simulation import DEFAULT_BLOCKS, production_args
    if args.production_blocks is None and walkers < 2:
        raise ValueError(f"--walkers {walkers}: the production needs at least 2 walkers (its errors come "
                         f"from groups of walkers; default --production-blocks min({DEFAULT_BLOCKS}, walkers))")
    if args.production_blocks is not None and args.production_blocks > walkers:
        raise ValueError(f"--production-blocks must be <= the walkers ({walkers}), got {args.production_blocks}")
    production_args(walkers, geom, args.production_blocks, args.production_updates, None, None,
                    args.target_error, args.max_seconds)


# The weight iteration's attempted flips, measured on an H200 (2D L = 32: 2.9e11 at
# W = 67584, 8.1e10 of them recorded; L = 64: 3.3e12, 1.6e12 recorded): the recorded
# part, which does not grow with the walkers, scales like bins^2.15; on a CPU (few
# walkers) it is nearly all of it. PoCL on this project's 2-core AMD EPYC: ~0.01
# flips/ns per core.
RECORDED_FLIPS_32 = 8.1e10
CPU_FLIPS_PER_NS_PER_CORE = 0.01
CPU_WARN_SECONDS = 60.0


def _cpu_warning(dev, geom, walkers):
    """A line on stderr, up front, when the weight iteration on a CPU will take long."""
    if dev.facts.is_gpu:
        return
    import sys
    flips = RECORDED_FLIPS_32 * (geom.nbins / 1025.0) ** 2.15 + walkers * 30.0 * geom.nbins * geom.nbins / 4
    seconds = flips / (CPU_FLIPS_PER_NS_PER_CORE * 1e9 * max(1, dev.facts.compute_units))
    if seconds > CPU_WARN_SECONDS:
        print(f"warning: on {dev.name} ({dev.facts.compute_units} compute units) the weight iteration of "
              f"{geom} needs about {flips:.1g} attempted flips: about {_duration(seconds)} at "
              f"~{CPU_FLIPS_PER_NS_PER_CORE * dev.facts.compute_units:g} flips/ns (an estimate; "
              f"a GPU (--device) runs 2D L = 32 in about 1.5 s)", file=sys.stderr, flush=True)


def _duration(seconds):
    if seconds < 3600:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"


def _print_json(args, sim, res, exact, temps, c, ref, wall):
    import sys

    from .._cli import json_value, print_json
    h = sim.history
    warns = []
    if len(h) and not sim.converged:
        warns.append(f"the weight iteration did not converge (d_k = {h.d_k[-1]:.3g} >= {sim.kl:g})")
    if not res.reached:
        warns.append(f"the production did not reach the target error {res.target_error:g} of ln g "
                     f"(largest error {res.max_error:.3g})")
    for msg in warns:
        print(f"clphys muca: warning: {msg}", file=sys.stderr)
    out = {"command": "muca", "device": sim.device.name, "seed": sim.seed, "dim": sim.dim, "L": sim.L,
           "walkers": sim.walkers, "iterations": len(h), "converged": bool(sim.converged),
           "d_k": json_value(h.d_k[-1]) if len(h) else None, "kl": sim.kl, "weights": args.weights,
           "production": {"walkers": res.walkers, "blocks": res.blocks, "updates": res.updates,
                          "therm": res.therm, "seconds": res.seconds, "flips_per_ns": res.flips / max(res.seconds, 1e-12) / 1e9,
                          "round_trips": json_value(res.round_trips), "max_error": json_value(res.max_error),
                          "target_error": res.target_error, "reached": bool(res.reached)},
           "energies": json_value(res.energies), "ln_g": {"value": json_value(res.ln_g),
                                                          "error": json_value(res.ln_g_err)},
           "ln_g_exact": None if exact is None else json_value(exact[0]),
           "max_sigmas_from_exact": None if exact is None else json_value(np.nanmax(np.abs(exact[1]))),
           "temperatures": json_value(temps),
           "energy": {"value": json_value(c.energy), "error": json_value(c.energy_err),
                      "exact": None if ref is None else json_value(ref.energy)},
           "specific_heat": {"value": json_value(c.specific_heat), "error": json_value(c.specific_heat_err),
                             "exact": None if ref is None else json_value(ref.specific_heat)},
           "exact_what": "Beale's ln g, Kaufman's finite torus" if ref is not None else None,
           "wall_seconds": wall, "warnings": warns}
    print_json(out)


def _exact(sim, res, say=print):
    """(ln g exact over res.energies, z = deviation / error) for 2D, printed; else None."""
    if sim.dim != 2 or sim.L > EXACT_MAX_L:
        return None
    from ..exact import density_of_states
    E, ln_g = density_of_states(sim.L)
    exact = dict(zip(E.tolist(), ln_g))
    missing = [int(e) for e in E if e not in set(res.energies.tolist())]
    ex = np.array([exact.get(int(e), np.nan) for e in res.energies])
    dev = res.ln_g - ex
    with np.errstate(divide="ignore", invalid="ignore"):
        z = dev / res.ln_g_err
    i = int(np.nanargmax(np.abs(z)))
    say(f"exact       max |ln g - ln g_exact| / error = {abs(z[i]):.2f} (at E = {res.energies[i]}), "
          f"max |ln g - ln g_exact| = {np.nanmax(np.abs(dev)):.3g}, {len(E)} exact energies"
          + (f", {len(missing)} never visited" if missing else ""))
    return ex, z


def _write_output(path, sim, res, exact):
    T = np.linspace(*((1.0, 4.0) if sim.dim == 2 else (3.0, 7.0)), 121)
    c = res.canonical(T)
    arrays = dict(energies=res.energies, ln_g=res.ln_g, ln_g_err=res.ln_g_err, histogram=res.histogram,
                  block_histograms=res.block_histograms, log_weights=res.log_weights,
                  temperatures=T, energy=c.energy, energy_err=c.energy_err,
                  specific_heat=c.specific_heat, specific_heat_err=c.specific_heat_err,
                  history=np.array([[r.iteration, r.width, r.therm, r.updates, r.d_k, r.d_c, r.visited,
                                     r.seconds, r.flips] for r in sim.history]),
                  dim=sim.dim, L=sim.L, walkers=res.walkers, iteration_walkers=sim.walkers, seed=sim.seed,
                  therm=res.therm,
                  updates=res.updates)
    if exact is not None:
        arrays["ln_g_exact"] = exact[0]
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)


def _plot(path, sim, res, exact):
    from ..plotting import pyplot
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    e = res.energies / res.N
    ax = axes[0]
    ax.errorbar(e, res.ln_g, yerr=res.ln_g_err, fmt=".", ms=3, label="multicanonical")
    if exact is not None:
        ax.plot(e, exact[0], "k-", lw=0.8, label="exact (Beale)")
    ax.set_xlabel("E / N")
    ax.set_ylabel("ln g(E)")
    ax.legend()
    ax = axes[1]
    if exact is not None:
        ax.plot(e, exact[1], ".", ms=3)
        ax.axhline(0, color="k", lw=0.6)
        for s in (-3, 3):
            ax.axhline(s, color="gray", ls="--", lw=0.6)
        ax.set_ylabel("(ln g - exact) / error")
    else:
        ax.plot(e, res.ln_g_err, ".", ms=3)
        ax.set_yscale("log")
        ax.set_ylabel("error of ln g")
    ax.set_xlabel("E / N")
    ax = axes[2]
    T = np.linspace(*((1.0, 4.0) if sim.dim == 2 else (3.0, 7.0)), 121)
    c = res.canonical(T)
    ax.fill_between(T, c.specific_heat - c.specific_heat_err, c.specific_heat + c.specific_heat_err,
                    alpha=0.4, label="reweighted")
    ax.plot(T, c.specific_heat, lw=0.8)
    if sim.dim == 2:
        from ..exact import finite_lattice
        ax.plot(T, finite_lattice(sim.L, T).specific_heat, "k--", lw=0.8, label="exact (Kaufman)")
    ax.set_xlabel("T")
    ax.set_ylabel("C / N")
    ax.legend()
    fig.suptitle(f"multicanonical {sim.geom}, {sim.walkers} walkers, "
                 + (f"the production {res.walkers}, " if res.walkers != sim.walkers else "")
                 + (f"{len(sim.history)} iterations" if len(sim.history) else "given weights"))
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
    plt.close(fig)


def add_parsers(sub):
    p = sub.add_parser("muca", help="parallel multicanonical sampling: the density of states "
                                    "and canonical averages at any temperature")
    p.add_argument("--dim", type=int, choices=(2, 3), default=None, help="lattice dimension (default 2)")
    p.add_argument("--size", "-L", type=int, default=None, help="linear size L (even)")
    p.add_argument("--walkers", type=int, default=None,
                   help="parallel walkers in all (default: per compute unit of each GPU 512; for the whole "
                        "range of 2D on one GPU 768 from L = 64, 1024 from L = 128; 64 per core on a CPU; "
                        "docs/muca.md \"Walkers\")")
    p.add_argument("--seed", type=int, default=None, help="random seed (default 0)")
    p.add_argument("--kl", type=float, default=None,
                   help="stop the weight iteration when d_k < KL (default 1e-4, or the checkpoint's)")
    p.add_argument("--max-iterations", type=int, default=None,
                   help="at most this many weight iterations (default: until d_k < KL); the production "
                        "then uses the last weights")
    p.add_argument("--production-blocks", type=int, default=None,
                   help="groups of walkers for the jackknife errors (default: the most from 100 down to 50 "
                        "that each hold a multiple of 1024 walkers, else min(100, walkers))")
    p.add_argument("--production-updates", type=int, default=None,
                   help="recorded flips per walker in the production (default: until the largest error of "
                        "ln g reaches --target-error, after thermalising to half a passage per walker, "
                        "one with --symmetric)")
    p.add_argument("--target-error", type=float, default=None,
                   help="stop the production when the largest jackknife error of ln g is below this "
                        "(default 0.02)")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="stop the production after this many seconds, whatever its error (default: none)")
    p.add_argument("--symmetric", action="store_true",
                   help="sample E <= 0 only and mirror ln g (g(-E) = g(E)): passages about four times "
                        "shorter; no magnetizations")
    p.add_argument("--production-walkers", type=int, default=None, metavar="N",
                   help="produce with this many walkers, on new lattices, with the converged weights "
                        "(the production is one thermalisation per walker, which runs faster with few: "
                        "on an H200 at 2D L = 128, 16896 produced in 32 minutes, the default 135168 "
                        "would take ~37; docs/muca.md \"Production\")")
    p.add_argument("--weights", metavar="FILE", default=None,
                   help="produce with these log weights, without the weight iteration: an -o output "
                        "(.npz, its log_weights) or a .npy with one per energy, -dim N .. dim N in steps of 4")
    add_device(p)
    add_progress(p)
    add_plot(p, "draw ln g(E), its deviation from the exact one and C(T)")
    add_output(p, "write ln g(E), errors, histograms and C(T) to FILE (.npz)")
    add_checkpoint(p)
    add_json(p)
    p.set_defaults(func=cmd_muca)
    allow_mpi(p)            # the walkers split over the ranks
