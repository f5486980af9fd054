"""``clphys ising`` (run one lattice, print energy, |M| and speed) and
``clphys binder`` (Binder-cumulant scan with crossing temperatures)."""

from __future__ import annotations

import math
import time

import numpy as np

from ..progress import Progress


def _ints(text):
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from None


def _size(text):
    vals = _ints(text.replace("x", ","))
    return vals[0] if len(vals) == 1 else tuple(vals)


def cmd_ising(args) -> int:
    from . import Ising2D, Ising3D
    from ..exact import TC_2D, TC_3D, finite_lattice, onsager_energy, onsager_magnetization
    cls = Ising2D if args.dim == 2 else Ising3D
    if args.sweeps < 0:
        raise ValueError(f"--sweeps must be >= 0, got {args.sweeps}")
    size = _size(args.size)
    lat = cls(size, args.temperature, J=args.coupling, h=args.field, algorithm=args.algorithm,
              rng=args.rng, seed=args.seed, start=args.start, device=args.device)
    q = lat.device.queue
    n = args.sweeps
    chunks = min(n, 50) if n else 0
    bar_sweeps, elapsed = 0, 0.0
    lat.sweep(min(n, 1))             # first launch: build and warm up, not timed
    q.finish()
    done = min(n, 1)
    with Progress(max(n - done, 1), args.progress or None, label="ising") as bar:
        for c in range(chunks):
            todo = (n - 1) * (c + 1) // chunks - (n - 1) * c // chunks if n > 1 else 0
            t0 = time.perf_counter()
            lat.sweep(todo)
            q.finish()
            elapsed += time.perf_counter() - t0
            bar_sweeps += todo
            bar.update(todo)
    e, m = lat.energy(), lat.magnetization()
    shape = "x".join(map(str, lat.shape))
    print(f"Ising {args.dim}D {shape}, T = {args.temperature:g}, J = {args.coupling:g}, "
          f"h = {args.field:g}, {lat.algorithm}/{lat.rng}, seed {args.seed}, on {lat.device.name}")
    print(f"sweeps      {n}")
    print(f"energy/N    {e:.6f}")
    print(f"|M|/N       {abs(m):.6f}")
    if args.dim == 2 and args.field == 0 and args.coupling > 0:
        Tr = args.temperature / args.coupling
        print(f"Onsager     e = {onsager_energy(args.temperature, args.coupling):.6f}, "
              f"m = {onsager_magnetization(args.temperature, args.coupling):.6f} (infinite lattice, "
              f"Tc = {TC_2D * args.coupling:.6f})")
        if lat.shape[0] == lat.shape[1] and lat.shape[0] % 2 == 0 and lat.shape[0] <= 4096 and Tr > 0:
            print(f"exact       e = {finite_lattice(lat.shape[0], args.temperature, args.coupling).energy:.6f} "
                  f"(finite {shape} torus, equilibrium)")
    elif args.dim == 3 and args.field == 0 and args.coupling > 0:
        print(f"3D Tc       {TC_3D * args.coupling:.6f}")
    if bar_sweeps and elapsed > 0:
        print(f"speed       {lat.n_spins * bar_sweeps / elapsed / 1e9:.3f} spin flips/ns "
              f"({bar_sweeps} sweeps in {elapsed:.3f} s, excluding the first)")
    if args.plot:
        from ..plotting import pyplot
        plt = pyplot()
        s = lat.spins()
        img = s if s.ndim == 2 else s[0]
        fig, ax = plt.subplots(figsize=(6, 6))
        ax.imshow(img, cmap="gray", vmin=-1, vmax=1, interpolation="nearest")
        ax.set_title(f"{args.dim}D Ising {shape}, T = {args.temperature:g}, {n} sweeps"
                     + (" (z = 0 slice)" if s.ndim == 3 else ""))
        ax.set_axis_off()
        fig.savefig(args.plot, dpi=150, bbox_inches="tight")
        plt.close(fig)
        print(f"plot        {args.plot}")
    return 0


def cmd_binder(args) -> int:
    from . import binder_scan
    from ..exact import TC_2D, TC_3D
    if args.points < 2:
        raise ValueError(f"--points must be >= 2, got {args.points}")
    if not (math.isfinite(args.tmin) and math.isfinite(args.tmax)) or args.tmin >= args.tmax:
        raise ValueError(f"--tmin must be below --tmax, got {args.tmin} and {args.tmax}")
    temps = np.linspace(args.tmin, args.tmax, args.points)
    scan = binder_scan(_ints(args.sizes), temps, dim=args.dim, n_therm=args.therm,
                       n_measure=args.measure, every=args.every, replicas=args.replicas,
                       algorithm=args.algorithm, rng=args.rng, seed=args.seed, device=args.device,
                       progress=args.progress or None)
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
            if math.isfinite(t.value):
                ax.errorbar([t.value], [low], xerr=[t.error], fmt="^", color=f"C{k + len(scan.sizes)}",
                            capsize=3, label=f"crossing L={c.sizes[0]}/{c.sizes[1]}: {t}")
        ax.set_xlabel("T")
        ax.set_ylabel("U4 = 1 - <m^4>/(3<m^2>^2)")
        ax.set_title(f"{args.dim}D Ising Binder cumulant")
        ax.legend(fontsize=8)
        fig.savefig(args.plot, dpi=150, bbox_inches="tight")
        plt.close(fig)
        print(f"plot: {args.plot}")
    return 0


def _common(p):
    p.add_argument("--dim", type=int, choices=(2, 3), default=2, help="lattice dimension (default 2)")
    p.add_argument("--algorithm", default=None,
                   help="multispin (default), checkerboard, blocks (where built)")
    p.add_argument("--rng", default=None, help="random generator (default: the algorithm's first)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="device spec, e.g. 'nvidia' or 'portable'")
    p.add_argument("--progress", action="store_true", help="always show the progress bar")
    p.add_argument("--plot", metavar="FILE", default=None, help="write a PNG (needs matplotlib)")


def add_parsers(sub):
    p = sub.add_parser("ising", help="run an Ising lattice: energy, |M| and spin flips per ns")
    p.add_argument("--size", default="1024", help="L, or Lx,Ly[,Lz] (default 1024)")
    p.add_argument("--temperature", "-T", type=float, default=2.269185314213022)
    p.add_argument("--sweeps", type=int, default=1000)
    p.add_argument("--coupling", "-J", type=float, default=1.0)
    p.add_argument("--field", type=float, default=0.0, help="magnetic field h")
    p.add_argument("--start", choices=("random", "up", "down"), default="random")
    _common(p)
    p.set_defaults(func=cmd_ising)

    p = sub.add_parser("binder", help="Binder-cumulant scan over sizes and temperatures")
    p.add_argument("--sizes", default="16,32,64", help="comma-separated sizes (default 16,32,64)")
    p.add_argument("--tmin", type=float, default=2.2)
    p.add_argument("--tmax", type=float, default=2.34)
    p.add_argument("--points", type=int, default=15)
    p.add_argument("--therm", type=int, default=2000, help="thermalisation sweeps")
    p.add_argument("--measure", type=int, default=4000, help="measurements per lattice")
    p.add_argument("--every", type=int, default=2, help="sweeps between measurements")
    p.add_argument("--replicas", type=int, default=4, help="independent lattices per temperature")
    _common(p)
    p.set_defaults(func=cmd_binder)
