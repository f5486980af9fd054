"""``clphys sde ...``: the Josephson junction and the Kuramoto model from the
command line.

    clphys sde josephson --a 4.0:4.4:100 --paths 1024 --periods 2000 --plot v_of_a.png
    clphys sde kuramoto --n 65536 --coupling 4 --noise 1 --plot r.png

Outputs (--plot, -o, --checkpoint), matplotlib and option combinations are
checked before any computation; outputs are written under a temporary name
and renamed, so an interrupted run leaves none. Ctrl-C stops within about a
second (exit 130, one line); with --checkpoint the state is kept and
--resume continues it to the same result, bit for bit.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from .._cli import (
    EXIT_UNTRUSTED,
    add_checkpoint,
    add_device,
    add_json,
    add_output,
    add_plot,
    add_progress,
    allow_mpi,
    check_outputs,
    checkpoint_every,
    json_value,
    print_json,
    progress_arg,
)
from ..runtime.files import atomic_output
from ..runtime.longrun import Checkpoints, Interrupted

SWEPT = ("a", "f", "kT", "gamma")


def parse_values(text: str):
    """'4.2' -> 4.2; 'lo:hi:n' -> n points from lo to hi; 'a,b,c' -> an array."""
    try:
        if ":" in text:
            parts = text.split(":")
            if len(parts) != 3:
                raise ValueError
            lo, hi, n = float(parts[0]), float(parts[1]), int(parts[2])
            if n < 1:
                raise ValueError
            return np.linspace(lo, hi, n)
        if "," in text:
            return np.array([float(v) for v in text.split(",")])
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a number, LOW:HIGH:COUNT or a comma-separated list") from None


def add_parsers(sub):
    p = sub.add_parser("sde", help="stochastic differential equations (Josephson junction, Kuramoto)",
                       description="Ensembles of stochastic differential equations on the device.")
    p.set_defaults(func=lambda args: p.print_help() or 2)
    models = p.add_subparsers(dest="sde_model", metavar="MODEL")

    j = models.add_parser("josephson", help="mean velocity of the driven Josephson junction",
                          description="<<v>> of x'' + gamma x' = -2 pi cos(2 pi x) + a cos(omega t) + f "
                                      "+ sqrt(2 gamma kT) xi. Values: a number, LOW:HIGH:COUNT or a list. "
                                      "Cost: grid points x paths x periods x steps per period time "
                                      "steps (the defaults: 2e8; ~1 s on an H100, ~1 min on PoCL with "
                                      "2 CPU cores). Exit status 3 when paths diverged at some point "
                                      "(its <<v>> is not finite: use more steps per period).")
    j.add_argument("--a", type=parse_values, default=4.2, help="drive amplitude (default 4.2)")
    j.add_argument("--f", type=parse_values, default=0.1, help="bias force (default 0.1)")
    j.add_argument("--kT", type=parse_values, default=0.001, help="temperature (default 0.001)")
    j.add_argument("--gamma", type=parse_values, default=0.9, help="friction (default 0.9)")
    j.add_argument("--omega", type=float, default=4.9, help="drive frequency (default 4.9)")
    j.add_argument("--paths", type=int, default=1024, help="realizations per grid point (default 1024)")
    j.add_argument("--periods", type=int, default=2000, help="drive periods simulated (default 2000)")
    j.add_argument("--transient", type=int, default=None, help="periods discarded (default: a quarter)")
    j.add_argument("--steps-per-period", type=int, default=100, help="time steps per period (default 100)")
    j.add_argument("--bins", type=int, default=100, help="bins of the x mod 1 density (default 100)")
    _common(j)
    add_output(j, "also write the table to FILE at full precision (text)")
    j.set_defaults(func=cmd_josephson, cli_names={
        "n_paths": "--paths", "periods": "--periods", "transient": "--transient",
        "steps_per_period": "--steps-per-period", "density_bins": "--bins", "a": "--a",
        "f": "--f", "kT": "--kT", "gamma": "--gamma", "omega": "--omega", "seed": "--seed",
        "checkpoint_every": "--checkpoint-every"})
    allow_mpi(j)            # the grid points (or paths) split over the ranks

    k = models.add_parser("kuramoto", help="order parameter r(t) of noisy Kuramoto oscillators",
                          description="gamma dtheta_i = (omega + (K/N) sum_j sin(theta_j - theta_i)) dt "
                                      "+ sqrt(2 gamma kT) dW_i. Cost: N x t_end/dt oscillator-steps "
                                      "(the defaults: 1.3e8; ~0.1 s on an H100, ~1 min on PoCL with "
                                      "2 CPU cores).")
    k.add_argument("--n", type=int, default=65536, help="oscillators (default 65536)")
    k.add_argument("--coupling", type=float, default=4.0, help="K (default 4)")
    k.add_argument("--noise", type=float, default=1.0, help="kT, the noise temperature (default 1)")
    k.add_argument("--gamma", type=float, default=1.0, help="friction (default 1)")
    k.add_argument("--omega", type=float, default=0.0, help="natural frequency of all oscillators (default 0)")
    k.add_argument("--dt", type=float, default=0.01, help="time step (default 0.01)")
    k.add_argument("--t-end", type=float, default=20.0, help="time to run to (default 20)")
    k.add_argument("--sample-every", type=int, default=10, help="steps between samples of r (default 10)")
    k.add_argument("--kernel", choices=("auto", "mean-field", "all-pairs"), default="auto",
                   help="mean-field (the order parameter's sums once per step: O(N)) or "
                        "all-pairs (every pair: O(N^2)); auto: mean-field (default)")
    _common(k, rng=False)
    add_output(k, "also write t, r(t), psi(t) to FILE at full precision (text)")
    k.set_defaults(func=cmd_kuramoto, cli_names={
        "n": "--n", "coupling": "--coupling", "kT": "--noise", "gamma": "--gamma",
        "omega": "--omega", "dt": "--dt", "t_end": "--t-end", "sample_every": "--sample-every",
        "seed": "--seed", "checkpoint_every": "--checkpoint-every"})


def _common(p, rng=True):
    p.add_argument("--scheme", choices=("srk2", "euler"), default="srk2",
                   help="time stepper: srk2 (stochastic Runge-Kutta, order 2 in the drift; "
                        "default) or euler (Euler-Maruyama)")
    if rng:
        p.add_argument("--rng", choices=("philox", "xorshift32"), default="philox",
                       help="noise generator: philox (counter based: the same noise on every "
                            "device and number of MPI ranks; default) or xorshift32 (the "
                            "paper's, with Box-Muller)")
        p.add_argument("--fast-math", action="store_true", help="build with -cl-fast-relaxed-math")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="precision of the state (default float32; float64 needs a device "
                        "with fp64)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the noise and the random start, 0 .. 2^64 - 1 (default 0)")
    add_device(p)
    add_plot(p)
    add_progress(p)
    p.add_argument("--quiet", dest="progress", action="store_const", const=False,
                   help=argparse.SUPPRESS)          # the older spelling of --no-progress
    add_checkpoint(p)
    add_json(p)


def _check_first(args):
    """Everything that can be wrong with the command line, before any work."""
    check_outputs(args)
    args.checkpoint_every = checkpoint_every(args)


def _interrupted(exc, args):
    """Say on the exception what an interrupted run kept."""
    exc.kept = Checkpoints(args.checkpoint or args.resume, None).kept()


def _write_text(path, lines, say=print):
    with atomic_output(path) as tmp:
        with open(tmp, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    say(f"wrote {path}")


def cmd_josephson(args) -> int:
    from .junction import josephson
    _check_first(args)
    swept = [n for n in SWEPT if np.ndim(getattr(args, n)) == 1]
    if args.plot and len(swept) > 1:
        raise ValueError(f"--plot needs at most one swept parameter (a LOW:HIGH:COUNT range); "
                         f"{' and '.join('--' + n for n in swept)} are swept")
    try:
        res = josephson(args.a, f=args.f, kT=args.kT, gamma=args.gamma, omega=args.omega,
                        n_paths=args.paths, periods=args.periods, transient=args.transient,
                        steps_per_period=args.steps_per_period, density_bins=args.bins,
                        scheme=args.scheme, rng=args.rng, seed=args.seed, dtype=args.dtype,
                        fast_math=args.fast_math, progress=progress_arg(args), device=args.device,
                        checkpoint=args.checkpoint or args.resume, checkpoint_every=args.checkpoint_every,
                        resume=args.resume, comm=getattr(args, "comm", None))
    except Interrupted as exc:
        _interrupted(exc, args)
        raise
    if res is None:                   # another rank than 0 of a sweep split over ranks
        return 0
    say = (lambda *a, **k: None) if args.json else print
    say("  ".join(f"{n:>10}" for n in swept + ["<<v>>", "error"]))
    rows = []
    for idx in np.ndindex(*res.v.shape):
        vals = [res.grid[n][idx] for n in swept] + [res.v[idx], res.v_err[idx]]
        say("  ".join(f"{x:10.5g}" for x in vals))
        rows.append(" ".join(repr(float(x)) for x in vals))
    if args.output:
        _write_text(args.output, ["# " + " ".join(swept + ["v", "v_err"])] + rows, say)
    if args.plot:
        _plot_josephson(res, swept, args, say)
    if args.json:
        print_json({"command": "sde josephson", "device": _device_name(args), "seed": args.seed,
                    "parameters": {n: json_value(getattr(args, n)) for n in SWEPT + ("omega",)},
                    "swept": swept, "grid": {n: json_value(res.grid[n]) for n in swept},
                    "paths": res.n_paths, "periods": res.periods, "scheme": args.scheme, "rng": args.rng,
                    "dtype": args.dtype, "v": {"value": json_value(res.v), "error": json_value(res.v_err)},
                    "exact": None})
    # paths that diverged leave <<v>> or its error not finite (the run warned which)
    return 0 if np.all(np.isfinite(res.v)) and np.all(np.isfinite(res.v_err)) else EXIT_UNTRUSTED


def _device_name(args):
    from ..runtime import resolve_device
    return resolve_device(args.device).name


def _plot_josephson(res, swept, args, say=print):
    from ..plotting import pyplot
    plt = pyplot()
    rows = 2 if res.density is not None else 1
    fig, axes = plt.subplots(rows, 1, figsize=(6, 3.2 * rows), squeeze=False, sharex=bool(swept))
    ax = axes[0, 0]
    title = (f"gamma={args.gamma}, omega={args.omega}, f={args.f}, kT={args.kT}, "
             f"{res.n_paths} paths, {res.periods} periods")
    if swept:
        x = res.grid[swept[0]]
        ax.errorbar(x, res.v, yerr=res.v_err, fmt=".-", ms=3, lw=0.8)
        ax.axhline(0.0, color="0.6", lw=0.5)
        ax.set_ylabel(r"$\langle\langle v\rangle\rangle$")
        if rows == 2:
            d = axes[1, 0]
            half = 0.5 * (x[-1] - x[0]) / max(len(x) - 1, 1)
            d.imshow(res.density.T, origin="lower", aspect="auto", cmap="magma",
                     extent=(x[0] - half, x[-1] + half, res.edges[0], res.edges[-1]))
            d.set_ylabel("x mod 1 (at t = nT)")
        axes[-1, 0].set_xlabel(swept[0])
    else:
        ax.set_title(f"<<v>> = {float(res.v):.5g} ± {float(res.v_err):.2g}", fontsize=9)
        if res.density is not None:
            mid = 0.5 * (res.edges[1:] + res.edges[:-1])
            ax.plot(mid, res.density)
            ax.set_xlabel("x mod 1 (at t = nT)")
            ax.set_ylabel("density")
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    _save_figure(fig, plt, args.plot, say)


def _save_figure(fig, plt, path, say=print):
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
    say(f"wrote {path}")


def cmd_kuramoto(args) -> int:
    from ..exact import kuramoto_order_parameter
    from ..stats import mean_error
    from .oscillators import kuramoto
    _check_first(args)
    try:
        res = kuramoto(args.n, args.coupling, kT=args.noise, gamma=args.gamma, omega=args.omega,
                       t_end=args.t_end, dt=args.dt, sample_every=args.sample_every, kernel=args.kernel,
                       scheme=args.scheme, seed=args.seed, dtype=args.dtype,
                       progress=progress_arg(args), device=args.device, checkpoint=args.checkpoint or args.resume,
                       checkpoint_every=args.checkpoint_every, resume=args.resume)
    except Interrupted as exc:
        _interrupted(exc, args)
        raise
    late = res.r[len(res.r) // 2:]
    exact = None
    if args.noise > 0:
        # identical oscillators: the frame rotating at omega gives the omega = 0 problem;
        # r depends on K/kT only, whatever gamma
        exact = float(kuramoto_order_parameter(args.coupling, args.noise))
    say = (lambda *a, **k: None) if args.json else print
    say(f"N = {args.n}, K = {args.coupling}, kT = {args.noise}, gamma = {args.gamma}, "
        f"kernel = {res.kernel}")
    for t, r in zip(res.times[::max(1, len(res.times) // 10)], res.r[::max(1, len(res.r) // 10)]):
        say(f"  t = {t:9.4g}   r = {r:.5f}")
    est, trusted = None, False
    if len(late) >= 4 and np.ptp(late) > 0:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est = mean_error(late, method="tau")
        trusted = not caught
        note = "; too few samples for a trusted error: run longer" if caught else ""
        mean = f"{est} (error from tau_int{note})"
    else:
        mean = f"{late.mean():.5f} (too few samples for an error bar: run longer or sample more often)"
    say(f"<r> over the second half: {mean}; N -> inf: {exact if exact is None else round(exact, 5)}")
    if args.json:
        import sys
        if not trusted:
            print("clphys sde kuramoto: warning: too few samples for a trusted error of <r>: run longer",
                  file=sys.stderr)
        print_json({"command": "sde kuramoto", "device": _device_name(args), "seed": args.seed,
                    "n": args.n, "coupling": args.coupling, "kT": args.noise, "gamma": args.gamma,
                    "omega": args.omega, "dt": args.dt, "t_end": args.t_end, "kernel": res.kernel,
                    "scheme": args.scheme, "dtype": args.dtype, "times": json_value(res.times),
                    "r": json_value(res.r),
                    "r_second_half": {"value": json_value(late.mean() if est is None else est.value),
                                      "error": None if est is None else json_value(est.error),
                                      "trusted": trusted,
                                      "exact": exact, "exact_what": "N -> inf self-consistency"}})
    if args.output:
        _write_text(args.output, ["# t r psi"] + [f"{t!r} {r!r} {p!r}" for t, r, p in
                                                   zip(res.times.tolist(), res.r.tolist(), res.psi.tolist())], say)
    if args.plot:
        from ..plotting import pyplot
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot(res.times, res.r, lw=0.8, label="simulation")
        if exact is not None:
            ax.axhline(exact, color="k", ls="--", lw=0.8, label=r"$N\to\infty$")
        ax.set_xlabel("t")
        ax.set_ylabel("r")
        ax.set_ylim(0, 1)
        ax.set_title(f"N={args.n}, K={args.coupling}, kT={args.noise}", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        _save_figure(fig, plt, args.plot, say)
    return 0
