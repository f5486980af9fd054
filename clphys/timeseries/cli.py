"""Subcommands ``clphys hurst | acf | pc | acrw``.

    clphys acrw 1000000 --phi 0.044 --seed 1 -o series.txt
    clphys hurst series.txt --max-lag 512 --plot hurst.png
    clphys acf series.txt --diff --max-lag 20
    clphys pc series.txt --max-history 4096 --plot pc.png
    clphys hurst prices.csv --column Close

FILE is a text or CSV file (',', ';', tab or blank separated; '#' comments; an
optional header line of column names), or '-' for standard input.
"""

from __future__ import annotations

import io
import sys

import numpy as np

__all__ = ["add_parsers", "read_column"]

_DELIMITERS = (",", ";", "\t")


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def read_column(path: str, column=None) -> np.ndarray:
    """One column of numbers from a text/CSV file as float64.  `column`: a
    0-based index (negative counts from the end) or a header name; may be
    omitted when the file has one column."""
    if path == "-":
        text = sys.stdin.read()
    else:
        with open(path, encoding="utf-8-sig") as fh:
            text = fh.read()
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines)
                  if line.strip() and not line.lstrip().startswith("#")), None)
    if first is None:
        raise ValueError(f"{path}: no data")
    delim = next((d for d in _DELIMITERS if d in lines[first]), None)
    fields = [f.strip().strip('"') for f in lines[first].split(delim)]
    header = not all(_is_number(f) for f in fields)
    if column is None:
        if len(fields) > 1:
            names = ", ".join(fields) if header else f"0 .. {len(fields) - 1}"
            raise ValueError(f"{path} has {len(fields)} columns ({names}): choose one with --column")
        index = 0
    elif isinstance(column, int) or str(column).lstrip("-").isdigit():
        index = int(column)
        if not -len(fields) <= index < len(fields):
            raise ValueError(f"--column {index}: {path} has {len(fields)} columns")
        index %= len(fields)
    else:
        if not header:
            raise ValueError(f"--column {column!r}: {path} has no header line; give an index")
        matches = [i for i, f in enumerate(fields) if f == column] or \
                  [i for i, f in enumerate(fields) if f.lower() == str(column).lower()]
        if not matches:
            raise ValueError(f"--column {column!r} is not among {', '.join(fields)}")
        index = matches[0]
    body = "\n".join(lines[first + 1:] if header else lines[first:])
    try:
        data = np.loadtxt(io.StringIO(body), delimiter=delim, usecols=[index], comments="#",
                          ndmin=1, dtype=np.float64)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return data


def _load(args) -> np.ndarray:
    values = read_column(args.file, args.column)
    if getattr(args, "diff", False):
        values = np.diff(values)
    return values


def _header(args, n, dev_name, extra=""):
    print(f"# {args.file}: T = {n}{extra}, device: {dev_name}")


def _device_name(spec):
    from ..runtime import resolve_device
    return resolve_device(spec).name


def cmd_hurst(args) -> int:
    from . import hurst
    p = _load(args)
    r = hurst(p, max_lag=args.max_lag, q=args.q, device=args.device)
    _header(args, p.size, _device_name(args.device), f", q = {r.q:g}")
    print(f"{'lag':>8} {'S':>16} {'H':>10}")
    for lag, s, h in zip(r.lags, r.S, r.H):
        print(f"{lag:8d} {s:16.9g} {'' if np.isnan(h) else f'{h:10.5f}'}")
    if args.plot:
        from ..plotting import pyplot
        plt = pyplot()
        from matplotlib.ticker import ScalarFormatter
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
        a1.loglog(r.lags, r.S, ".-")
        a1.set(xlabel="Δt", ylabel=f"S_{r.q:g}(Δt)", title="structure function")
        a2.semilogx(r.lags[1:], r.H[1:], ".-", label="H(Δt)")
        a2.axhline(0.5, color="gray", ls="--", label="random walk, H = 1/2")
        a2.set(xlabel="Δt", ylabel="H(Δt)", title="local Hurst exponent")
        a2.legend()
        for ax in (a1, a2):
            ax.xaxis.set_major_formatter(ScalarFormatter())
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"# plot written to {args.plot}")
    return 0


def cmd_acf(args) -> int:
    from . import autocorrelation
    x = _load(args)
    r = autocorrelation(x, max_lag=args.max_lag, stationary=args.stationary, device=args.device)
    form = "stationary" if r.stationary else "general"
    _header(args, x.size, _device_name(args.device),
            f"{' (differences)' if args.diff else ''}, {form} form")
    print(f"{'lag':>8} {'rho':>12}")
    for lag, rho in zip(r.lags, r.rho):
        print(f"{lag:8d} {rho:12.7f}")
    if args.plot:
        from ..plotting import pyplot
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.axhline(0, color="black", lw=0.8)
        band = 2 / np.sqrt(x.size)
        ax.axhspan(-band, band, color="gray", alpha=0.2, label="±2/√T (white noise)")
        ax.plot(r.lags[1:], r.rho[1:], "o-", ms=3, label="ρ(Δt)")
        ax.set(xlabel="Δt", ylabel="ρ(Δt)", title=f"autocorrelation ({form} form)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"# plot written to {args.plot}")
    return 0


def cmd_pc(args) -> int:
    from . import pattern_conformity
    p = _load(args)
    r = pattern_conformity(p, max_past=args.max_past, max_future=args.max_future, chi=args.chi,
                           max_history=args.max_history, device=args.device,
                           progress=False if args.no_progress else None)
    _header(args, p.size, _device_name(args.device),
            f", chi = {r.chi:g}, max_history = {r.max_history}")
    print("# Xi(Δt+, Δt-): rows Δt+ = 1 ..", r.Xi.shape[0], ", columns Δt- = 1 ..", r.Xi.shape[1])
    print("Δt+\\Δt- " + " ".join(f"{m:8d}" for m in range(1, r.Xi.shape[1] + 1)))
    for f, row in enumerate(r.Xi, start=1):
        print(f"{f:8d} " + " ".join("     nan" if np.isnan(v) else f"{v:8.4f}" for v in row))
    print("# skipped windows of zero range (current t̂, historical (t̂, τ)) per Δt-:")
    print("# " + " ".join(f"{a}/{b}" for a, b in zip(r.skipped_current, r.skipped_history)))
    if args.plot:
        from ..plotting import pyplot
        plt = pyplot()
        from matplotlib.ticker import MaxNLocator
        fig, ax = plt.subplots(figsize=(6, 5))
        lim = np.nanmax(np.abs(r.Xi)) if np.any(np.isfinite(r.Xi)) else 1.0
        im = ax.imshow(r.Xi, origin="lower", cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto",
                       extent=(0.5, r.Xi.shape[1] + 0.5, 0.5, r.Xi.shape[0] + 0.5))
        fig.colorbar(im, ax=ax, label="Ξ")
        ax.set(xlabel="Δt⁻ (pattern length)", ylabel="Δt⁺ (prediction horizon)",
               title=f"pattern conformity, χ = {r.chi:g}")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"# plot written to {args.plot}")
    return 0


def cmd_acrw(args) -> int:
    from . import acrw
    p = acrw(args.n, args.phi, seed=args.seed, device=args.device)
    if args.output:
        np.savetxt(args.output, p, fmt="%d")
        print(f"# {args.n} points of the ACRW (phi = {args.phi:g}, seed = {args.seed}) "
              f"written to {args.output}", file=sys.stderr)
    else:
        np.savetxt(sys.stdout, p, fmt="%d")
    return 0


def add_parsers(sub) -> None:
    def common(p, what):
        p.add_argument("file", metavar="FILE", help=f"{what}: text/CSV file, '-' for stdin")
        p.add_argument("--column", "-c", default=None,
                       help="column index (0-based) or header name; needed for several columns")
        p.add_argument("--device", "-d", default=None,
                       help="OpenCL device spec, e.g. 'nvidia' or '1:0' (default: CLPHYS_DEVICE, "
                            "else the first GPU, else the CPU)")
        p.add_argument("--plot", metavar="PNG", default=None, help="also draw a plot into PNG")

    p = sub.add_parser("hurst", help="Hurst exponent H(Δt) of a price series",
                       description="Structure function S_q(Δt) and local Hurst exponent H(Δt).")
    common(p, "prices p(t)")
    p.add_argument("--max-lag", type=int, default=256, help="largest Δt (default 256)")
    p.add_argument("--q", type=float, default=1.0, help="moment order q > 0 (default 1)")
    p.set_defaults(func=cmd_hurst)

    p = sub.add_parser("acf", help="autocorrelation ρ(Δt) of a series",
                       description="Autocorrelation ρ(Δt), Δt = 0 .. max-lag.")
    common(p, "values x(t), normally price changes (or prices with --diff)")
    p.add_argument("--max-lag", type=int, default=256, help="largest Δt (default 256)")
    p.add_argument("--stationary", action="store_true",
                   help="use whole-series moments instead of the overlapping windows'")
    p.add_argument("--diff", action="store_true", help="analyse x(t+1) - x(t) (prices in FILE)")
    p.set_defaults(func=cmd_acf)

    p = sub.add_parser("pc", help="pattern conformity Ξ(Δt+, Δt-) of a price series",
                       description="Pattern conformity of Preis, Paul and Schneider (2008).")
    common(p, "prices p(t)")
    p.add_argument("--max-past", type=int, default=20, help="longest pattern Δt- (default 20)")
    p.add_argument("--max-future", type=int, default=20, help="longest horizon Δt+ (default 20)")
    p.add_argument("--chi", type=float, default=100.0, help="weight exp(-chi Q) (default 100)")
    p.add_argument("--max-history", type=int, default=16384,
                   help="lags τ searched back (default 16384)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_pc)

    p = sub.add_parser("acrw", help="write an anti-correlated random walk (synthetic prices)",
                       description="p(t) = a(t) + b(t): a steps ±1 with probability phi each, "
                                   "b in {0, 1} fresh each step; one integer per line.")
    p.add_argument("n", type=int, metavar="N", help="number of points")
    p.add_argument("--phi", type=float, default=0.044,
                   help="step probability, 0 .. 1/2 (default 0.044: ρ(1) ≈ -0.425)")
    p.add_argument("--seed", type=int, default=0, help="Philox seed (default 0)")
    p.add_argument("--output", "-o", default=None, help="file to write (default: stdout)")
    p.add_argument("--device", "-d", default=None, help="OpenCL device spec")
    p.set_defaults(func=cmd_acrw)
