"""Subcommands ``clphys hurst | acf | pc | dfa | acrw``.

    clphys acrw 1000000 --phi 0.044 --seed 1 -o series.txt
    clphys acrw 1000000 --phi 0.044 --seed 1 --returns -o returns.txt
    clphys hurst series.txt --max-lag 512 --plot hurst.png
    clphys acf returns.txt --max-lag 20
    clphys acf series.txt --diff --max-lag 20
    clphys pc series.txt --max-history 512 --plot pc.png
    clphys hurst prices.csv --column Close
    clphys dfa prices.csv --column Close --log-returns --plot dfa.png
    clphys dfa returns.txt --mf --json

FILE is a text or CSV file (',', ';', tab or blank separated; '#' comments; an
optional header line of column names), or '-' for standard input.  Output files
and plots are checked before any work and written under a temporary name that
is renamed into place, so Ctrl-C (exit status 130) never leaves a partial file.
"""

from __future__ import annotations

import io
import sys
import warnings

import numpy as np

from .._cli import (
    add_device,
    add_json,
    add_output,
    add_plot,
    add_progress,
    check_outputs,
    json_value,
    print_json,
    progress_arg,
)
from ..runtime.files import atomic_output
from ..runtime.longrun import Interrupted
from .acrw import MAX_N

__all__ = ["add_parsers", "read_column"]

_DELIMITERS = (",", ";", "\t")
WRITE_LINES = 1 << 16           # integers formatted and written at a time


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _data_lines(lines, start):
    """(line number from 1, text) of the lines from `start` on that hold data:
    not blank once a '#' comment is cut off (what np.loadtxt reads)."""
    return [(i + 1, line) for i, line in enumerate(lines[start:], start)
            if line.split("#", 1)[0].strip()]


def _first_bad_line(name, rows, delim, index) -> str:
    """The message for the first data line whose column `index` is not a number."""
    for lineno, line in rows:
        fields = line.split("#", 1)[0].split(delim)
        if index >= len(fields):
            return (f"{name}, line {lineno}: has {len(fields)} column(s), no column {index}: "
                    f"{line!r}")
        text = fields[index].strip().strip('"')
        if not _is_number(text):
            return f"{name}, line {lineno}: {text!r} in column {index} is not a number"
    return ""


def read_column(path: str, column=None) -> np.ndarray:
    """One column of numbers from a text/CSV file as float64.  `column`: a
    0-based index (negative counts from the end) or a header name; may be
    omitted when the file has one column.  Errors (a field that is not a
    number, a missing column, NaN or inf) name the file and its line."""
    name = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8-sig") as fh:
                text = fh.read()
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name} is not a UTF-8 text file ({exc.reason} at byte {exc.start})") \
            from None
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines)
                  if line.strip() and not line.lstrip().startswith("#")), None)
    if first is None:
        raise ValueError(f"{name}: no data")
    delim = next((d for d in _DELIMITERS if d in lines[first]), None)
    fields = [f.strip().strip('"') for f in lines[first].split(delim)]
    header = not all(_is_number(f) for f in fields)
    if column is None:
        if len(fields) > 1:
            names = ", ".join(fields) if header else f"0 .. {len(fields) - 1}"
            raise ValueError(f"{name} has {len(fields)} columns ({names}): choose one with --column")
        index = 0
    elif isinstance(column, int) or str(column).lstrip("-").isdigit():
        index = int(column)
        if not -len(fields) <= index < len(fields):
            raise ValueError(f"--column {index}: {name} has {len(fields)} columns")
        index %= len(fields)
    else:
        if not header:
            raise ValueError(f"--column {column!r}: {name} has no header line; give an index")
        matches = [i for i, f in enumerate(fields) if f == column] or \
                  [i for i, f in enumerate(fields) if f.lower() == str(column).lower()]
        if not matches:
            raise ValueError(f"--column {column!r} is not among {', '.join(fields)}")
        index = matches[0]
    start = first + 1 if header else first
    body = "\n".join(lines[start:])
    try:
        with warnings.catch_warnings():         # "input contained no data": said below
            warnings.simplefilter("ignore", UserWarning)
            data = np.loadtxt(io.StringIO(body), delimiter=delim, usecols=[index], comments="#",
                              ndmin=1, dtype=np.float64)
    except ValueError as exc:
        # the fast reader failed: find the line in Python (only on this path)
        raise ValueError(_first_bad_line(name, _data_lines(lines, start), delim, index)
                         or f"{name}: {exc}") from None
    if data.size == 0:
        raise ValueError(f"{name}: no data lines" + (" after the header" if header else ""))
    bad = ~np.isfinite(data)
    if bad.any():
        row = int(np.argmax(bad))
        lineno, line = _data_lines(lines, start)[row]
        raise ValueError(f"{name}, line {lineno}: {data[row]} is not a finite number: {line!r}")
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


def _save_plot(fig, path, quiet=False):
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=120)
    if not quiet:
        print(f"# plot written to {path}")


def _err(v: float, width: int, fmt: str) -> str:
    return f"{'nan':>{width}}" if np.isnan(v) else f"{v:{width}{fmt}}"


def cmd_hurst(args) -> int:
    from . import hurst
    check_outputs(args)
    p = _load(args)
    r = hurst(p, max_lag=args.max_lag, q=args.q, device=args.device, method=args.method,
              progress=progress_arg(args))
    if args.json:
        _json(args, p.size, q=r.q, method=r.method, lags=r.lags.tolist(),
              S={"value": _json_values(r.S), "error": _json_values(r.S_err)},
              H={"value": _json_values(r.H), "error": _json_values(r.H_err),
                 "exact": 0.5, "exact_what": "a random walk (uncorrelated increments)"})
    else:
        _hurst_text(args, p, r)
    if args.plot:
        _hurst_plot(args, r)
    return 0


def _json(args, n, **values):
    """The one JSON object of a time-series command."""
    print_json({"command": args.command, "file": args.file, "column": args.column, "n": int(n),
                "device": _device_name(args.device), **values})


def _hurst_text(args, p, r):
    _header(args, p.size, _device_name(args.device), f", q = {r.q:g}, {r.method} sums")
    print("# errors: jackknife over 16 blocks of the series (nan: not available)")
    print(f"{'lag':>8} {'S':>16} {'S_err':>10} {'H':>10} {'H_err':>10}")
    for lag, s, se, h, he in zip(r.lags, r.S, r.S_err, r.H, r.H_err):
        print(f"{lag:8d} {s:16.9g} {_err(se, 10, '.3g')} "
              f"{'' if np.isnan(h) else f'{h:10.5f}':>10} {_err(he, 10, '.5f')}")


def _hurst_plot(args, r):
    from ..plotting import pyplot
    plt = pyplot()
    from matplotlib.ticker import ScalarFormatter
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    a1.errorbar(r.lags, r.S, yerr=r.S_err, fmt=".-", ms=3, capsize=2)
    a1.set(xscale="log", yscale="log", xlabel="Δt", ylabel=f"S_{r.q:g}(Δt)",
           title="structure function")
    a2.errorbar(r.lags[1:], r.H[1:], yerr=r.H_err[1:], fmt=".-", ms=3, capsize=2,
                label="H(Δt) ± jackknife error")
    a2.axhline(0.5, color="gray", ls="--", label="random walk, H = 1/2")
    a2.set(xscale="log", xlabel="Δt", ylabel="H(Δt)", title="local Hurst exponent")
    a2.legend()
    for ax in (a1, a2):
        ax.xaxis.set_major_formatter(ScalarFormatter())
    fig.tight_layout()
    _save_plot(fig, args.plot, args.json)


def cmd_acf(args) -> int:
    from . import autocorrelation
    check_outputs(args)
    x = _load(args)
    r = autocorrelation(x, max_lag=args.max_lag, stationary=args.stationary, device=args.device,
                        method=args.method, progress=progress_arg(args))
    assert r.rho_err is not None                # errors=True, the default
    form = "stationary" if r.stationary else "general"
    if args.json:
        _json(args, x.size, differences=bool(args.diff), form=form, method=r.method, lags=r.lags.tolist(),
              rho={"value": _json_values(r.rho), "error": _json_values(r.rho_err), "exact": None})
    else:
        _header(args, x.size, _device_name(args.device),
                f"{' (differences)' if args.diff else ''}, {form} form, {r.method} sums")
        print("# errors: jackknife over 16 blocks of the series (nan: not available)")
        print(f"{'lag':>8} {'rho':>12} {'rho_err':>10}")
        for lag, rho, err in zip(r.lags, r.rho, r.rho_err):
            print(f"{lag:8d} {rho:12.7f} {_err(err, 10, '.2e')}")
    if args.plot:
        from ..plotting import pyplot
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.axhline(0, color="black", lw=0.8)
        band = 2 / np.sqrt(x.size)
        ax.axhspan(-band, band, color="gray", alpha=0.2, label="±2/√T (white noise)")
        ax.errorbar(r.lags[1:], r.rho[1:], yerr=r.rho_err[1:], fmt="o-", ms=3, capsize=2,
                    label="ρ(Δt) ± jackknife error")
        ax.set(xlabel="Δt", ylabel="ρ(Δt)", title=f"autocorrelation ({form} form)")
        ax.legend()
        fig.tight_layout()
        _save_plot(fig, args.plot, args.json)
    return 0


def _tick_arg(text: str):
    """--tick: 'auto', 'none' or a positive number."""
    if text.lower() in ("auto", "none"):
        return "auto" if text.lower() == "auto" else None
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--tick must be 'auto', 'none' or a number, got {text!r}") from None


def cmd_pc(args) -> int:
    from . import pattern_conformity
    check_outputs(args)
    tick = _tick_arg(args.tick)
    p = _load(args)
    r = pattern_conformity(p, max_past=args.max_past, max_future=args.max_future, chi=args.chi,
                           max_history=args.max_history, device=args.device,
                           progress=progress_arg(args), tick=tick)
    if args.json:
        _json(args, p.size, chi=r.chi, max_history=r.max_history, tick=r.tick,
              Xi={"value": _json_values(r.Xi), "error": _json_values(r.Xi_err), "exact": None,
                  "rows": "prediction horizon 1 .. max_future", "columns": "pattern length 1 .. max_past"},
              skipped_current=np.asarray(r.skipped_current).tolist(),
              skipped_history=np.asarray(r.skipped_history).tolist())
    else:
        _pc_text(args, p, r)
    if args.plot:
        _pc_plot(args, r)
    return 0


def _pc_text(args, p, r):
    _header(args, p.size, _device_name(args.device),
            f", chi = {r.chi:g}, max_history = {r.max_history}, "
            f"tick = {'none (real-valued)' if r.tick is None else f'{r.tick:.17g}'}")
    for name, table, fmt in (("Xi", r.Xi, "8.4f"), ("Xi_err", r.Xi_err, "8.1e")):
        print(f"# {name}(Δt+, Δt-): rows Δt+ = 1 .. {table.shape[0]}, columns Δt- = 1 .. "
              f"{table.shape[1]}" + ("; jackknife over 16 blocks of current times"
                                     if name == "Xi_err" else ""))
        print("Δt+\\Δt- " + " ".join(f"{m:8d}" for m in range(1, table.shape[1] + 1)))
        for f, row in enumerate(table, start=1):
            print(f"{f:8d} " + " ".join("     nan" if np.isnan(v) else f"{v:{fmt}}"
                                        for v in row))
    print("# skipped windows of zero range (current t̂, historical (t̂, τ)) per Δt-:")
    print("# " + " ".join(f"{a}/{b}" for a, b in zip(r.skipped_current, r.skipped_history)))


def _pc_plot(args, r):
    from ..plotting import pyplot
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator
    fig, ax = plt.subplots(figsize=(6, 5))
    lim = np.nanmax(np.abs(r.Xi)) if np.any(np.isfinite(r.Xi)) else 1.0
    im = ax.imshow(r.Xi, origin="lower", cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto",
                   extent=(0.5, r.Xi.shape[1] + 0.5, 0.5, r.Xi.shape[0] + 0.5))
    fig.colorbar(im, ax=ax, label="Ξ")
    # cells where |Ξ| is below twice its error are hatched: not distinguishable from 0
    weak = np.abs(r.Xi) < 2 * r.Xi_err
    if weak.any():
        ax.contourf(np.arange(1, r.Xi.shape[1] + 1), np.arange(1, r.Xi.shape[0] + 1),
                    weak.astype(float), levels=[0.5, 1.5], colors="none", hatches=["//"])
    ax.set(xlabel="Δt⁻ (pattern length)", ylabel="Δt⁺ (prediction horizon)",
           title=f"pattern conformity, χ = {r.chi:g} (hatched: |Ξ| < 2 errors)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    _save_plot(fig, args.plot, args.json)


def _numbers(text: str, what: str, kind=float) -> list:
    """A comma-separated list of numbers (--scales, --q)."""
    try:
        return [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--{what} must be comma-separated numbers, got {text!r}") from None


_json_values = json_value


def _dfa_plot(args, r, mf: bool):
    from ..plotting import pyplot
    plt = pyplot()
    fit = (r.scales >= r.fit_range[0]) & (r.scales <= r.fit_range[1])
    ls = np.log(r.scales[fit])
    if not mf:
        fig, ax = plt.subplots(figsize=(6, 4.5))
        ax.errorbar(r.scales, r.F, yerr=r.F_err, fmt="o", ms=4, capsize=2,
                    label="F(s) ± jackknife error")
        c = np.mean(np.log(r.F[fit])) - r.H * ls.mean()
        ax.plot(r.scales[fit], np.exp(c) * r.scales[fit] ** r.H, "-",
                label=f"fit: H = {r.H:.3f} ± {r.H_err:.3f}")
        ax.set(xscale="log", yscale="log", xlabel="segment length s", ylabel="F(s)",
               title=f"DFA-{r.order} ({r.segments} segments)")
        ax.legend()
    else:
        fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(14, 4.2))
        cmap = plt.get_cmap("coolwarm")
        for i in range(r.q.size):
            color = cmap(i / max(1, r.q.size - 1))
            a1.plot(r.scales, r.Fq[i], "o", ms=3, color=color)
            c = np.mean(np.log(r.Fq[i][fit])) - r.h[i] * ls.mean()
            a1.plot(r.scales[fit], np.exp(c) * r.scales[fit] ** r.h[i], "-", lw=0.8, color=color)
        a1.set(xscale="log", yscale="log", xlabel="segment length s", ylabel="F_q(s)",
               title=f"MF-DFA-{r.order}: F_q(s), q = {r.q[0]:g} (blue) .. {r.q[-1]:g} (red)")
        a2.errorbar(r.q, r.h, yerr=r.h_err, fmt="o-", ms=3, capsize=2)
        a2.set(xlabel="q", ylabel="h(q)", title="generalised Hurst exponent")
        a3.errorbar(r.alpha, r.f_alpha, xerr=r.alpha_err, yerr=r.f_alpha_err, fmt="o-", ms=3,
                    capsize=2)
        a3.set(xlabel="α", ylabel="f(α)", title="singularity spectrum")
    fig.tight_layout()
    _save_plot(fig, args.plot, args.json)


def cmd_dfa(args) -> int:
    from .dfa import DEFAULT_Q, DFAResult, MFDFAResult, dfa, mfdfa
    check_outputs(args)
    x = read_column(args.file, args.column)
    what = ""
    if args.log_returns:
        if np.any(x <= 0):
            raise ValueError("--log-returns needs positive prices")
        x, what = np.diff(np.log(x)), " (log returns)"
    elif args.diff:
        x, what = np.diff(x), " (differences)"
    scales = None if args.scales is None else _numbers(args.scales, "scales", int)
    common = dict(scales=scales, overlap=args.overlap, integrate=not args.profile,
                  segments=None if args.overlap else args.segments,
                  fit_range=args.fit, device=args.device, progress=progress_arg(args))
    r: DFAResult | MFDFAResult
    if args.mf:
        q = DEFAULT_Q if args.q is None else _numbers(args.q, "q")
        r = mfdfa(x, q=q, order=2 if args.order is None else args.order, **common)
    else:
        r = dfa(x, order=1 if args.order is None else args.order, **common)
    dev = _device_name(args.device)
    if args.json:
        out = {"command": "dfa", "file": args.file, "column": args.column, "n": int(x.size), "device": dev,
               "order": r.order, "segments": r.segments, "integrate": r.integrate,
               "scales": r.scales.tolist(), "fit_range": list(r.fit_range),
               "zero_segments": r.zero_segments.tolist(),
               "segment_counts": r.segment_counts.tolist()}
        names = (("q", "Fq", "Fq_err", "h", "h_err", "tau", "tau_err", "alpha", "alpha_err",
                  "f_alpha", "f_alpha_err") if args.mf else ("F", "F_err", "H", "H_err"))
        out.update({k: _json_values(getattr(r, k)) for k in names})
        print_json(out)
    else:
        kind = f"MF-DFA-{r.order}" if args.mf else f"DFA-{r.order}"
        profile = "the values as given" if not r.integrate else "cumulative sum of x - mean"
        _header(args, x.size, dev, f"{what}, {kind}, {r.segments} segments, profile: {profile}")
        print("# errors: jackknife over 16 groups of consecutive segments (nan: not available)")
        if isinstance(r, MFDFAResult):          # args.mf
            print(f"# fit over s = {r.fit_range[0]} .. {r.fit_range[1]}; tau = q h - 1, "
                  "alpha = dtau/dq, f = q alpha - tau")
            print(f"{'q':>7} {'h':>9} {'h_err':>8} {'tau':>9} {'tau_err':>8} {'alpha':>9} "
                  f"{'alpha_err':>9} {'f(alpha)':>9} {'f_err':>8}")
            for row in zip(r.q, r.h, r.h_err, r.tau, r.tau_err, r.alpha, r.alpha_err,
                           r.f_alpha, r.f_alpha_err):
                print(f"{row[0]:7.3g} " + " ".join(
                    _err(v, w, ".5f") for v, w in zip(row[1:], (9, 8, 9, 8, 9, 9, 9, 8))))
        else:
            print(f"{'s':>10} {'F':>16} {'F_err':>10} {'segments':>9}")
            for s, F, e, n in zip(r.scales, r.F, r.F_err, r.segment_counts):
                print(f"{s:10d} {F:16.9g} {_err(e, 10, '.3g')} {n:9d}")
            print(f"# H = {r.H:.5f} ± {r.H_err:.5f} (fit over s = {r.fit_range[0]} .. "
                  f"{r.fit_range[1]})")
    if args.plot:
        _dfa_plot(args, r, args.mf)
    return 0


def _write_integers(fh, values: np.ndarray):
    """One integer per line, formatted a block at a time (Ctrl-C is seen between blocks)."""
    for a in range(0, values.size, WRITE_LINES):
        fh.write("\n".join(map(str, values[a:a + WRITE_LINES].tolist())) + "\n")


def cmd_acrw(args) -> int:
    from . import acrw
    check_outputs(args)
    if args.returns and args.n >= MAX_N:
        raise ValueError(f"N must be <= {MAX_N - 1} with --returns, got {args.n}")
    n = args.n + 1 if args.returns else args.n
    try:
        p = acrw(n, args.phi, seed=args.seed, device=args.device, progress=progress_arg(args))
    except Interrupted as exc:
        if args.output:
            exc.kept = f"{args.output} not written"
        raise
    values = np.diff(p) if args.returns else p
    what = "returns p(t+1) - p(t)" if args.returns else "points"
    if args.json:
        _acrw_json(args, values)
    if args.output:
        with atomic_output(args.output) as tmp:
            with open(tmp, "w") as fh:
                _write_integers(fh, values)
        print(f"# {args.n} {what} of the ACRW (phi = {args.phi:g}, seed = {args.seed}) "
              f"written to {args.output}", file=sys.stderr)
    elif not args.json:
        _write_integers(sys.stdout, values)
        sys.stdout.flush()
    return 0


def _acrw_json(args, values):
    """--json: the increments' variance and lag-1 autocorrelation with their
    errors next to the exact ones (and the values themselves without -o)."""
    from ..exact import acrw_increment_autocorrelation, acrw_increment_variance
    from ..stats import mean_error
    steps = values if args.returns else np.diff(values)
    out = {"command": "acrw", "device": _device_name(args.device), "seed": args.seed, "phi": args.phi,
           "n": args.n, "returns": bool(args.returns), "output": args.output}
    if steps.size >= 64:
        x = steps.astype(float)
        var = mean_error((x - x.mean()) ** 2, method="tau")
        d = x - x.mean()
        rho1 = mean_error(d[1:] * d[:-1], method="tau")     # its error leaves the variance's out
        out["increment_variance"] = {"value": var.value, "error": var.error,
                                     "exact": float(acrw_increment_variance(args.phi))}
        out["increment_rho1"] = {"value": rho1.value / var.value, "error": rho1.error / var.value,
                                 "exact": float(acrw_increment_autocorrelation(args.phi, 1))}
    if not args.output:
        out["values"] = values.tolist()
    print_json(out)


def add_parsers(sub) -> None:
    _add_hurst(sub)
    _add_acf(sub)
    _add_pc(sub)
    _add_dfa(sub)
    _add_acrw(sub)


def _series_input(p, what):
    """FILE, --column and the options every series command has."""
    p.add_argument("file", metavar="FILE", help=f"{what}: text/CSV file, '-' for stdin")
    p.add_argument("--column", "-c", default=None,
                   help="column index (0-based) or header name; needed for several columns")
    add_device(p)
    add_plot(p)
    add_progress(p)
    add_json(p)


def _add_hurst(sub) -> None:
    p = sub.add_parser("hurst", help="Hurst exponent H(Δt) of a price series",
                       description="Structure function S_q(Δt) and local Hurst exponent H(Δt).")
    _series_input(p, "prices p(t)")
    p.add_argument("--max-lag", type=int, default=256, help="largest Δt (default 256)")
    p.add_argument("--q", type=float, default=1.0,
                   help="moment order q, 0.01 .. 1000 (default 1)")
    p.add_argument("--method", choices=("auto", "direct", "fft"), default="auto",
                   help="pair sums or FFT (q = 2 only); auto: the cheaper (default)")
    p.set_defaults(func=cmd_hurst, cli_names={"max_lag": "--max-lag", "q": "--q",
                                              "p": "the series", "method": "--method"})


def _add_acf(sub) -> None:
    p = sub.add_parser("acf", help="autocorrelation ρ(Δt) of a series",
                       description="Autocorrelation ρ(Δt), Δt = 0 .. max-lag.")
    _series_input(p, "values x(t), normally price changes (or prices with --diff)")
    p.add_argument("--max-lag", type=int, default=256, help="largest Δt (default 256)")
    p.add_argument("--stationary", action="store_true",
                   help="centre on the whole series' mean (statsmodels' acf) instead of using "
                        "the overlapping windows' moments")
    p.add_argument("--diff", action="store_true", help="analyse x(t+1) - x(t) (prices in FILE)")
    p.add_argument("--method", choices=("auto", "direct", "fft"), default="auto",
                   help="pair sums or FFT; auto: the cheaper (default)")
    p.set_defaults(func=cmd_acf, cli_names={"max_lag": "--max-lag", "x": "the series",
                                            "method": "--method"})


def _add_pc(sub) -> None:
    p = sub.add_parser("pc", help="pattern conformity Ξ(Δt+, Δt-) of a price series",
                       description="Pattern conformity of Preis, Paul and Schneider (2008).")
    _series_input(p, "prices p(t)")
    p.add_argument("--max-past", type=int, default=20, help="longest pattern Δt- (default 20)")
    p.add_argument("--max-future", type=int, default=20, help="longest horizon Δt+ (default 20)")
    p.add_argument("--chi", type=float, default=100.0, help="weight exp(-chi Q) (default 100)")
    p.add_argument("--max-history", type=int, default=16384,
                   help="lags τ searched back (default 16384)")
    p.add_argument("--tick", default="auto",
                   help="price tick: 'auto' (detect the common tick, default), 'none' "
                        "(real-valued prices) or a number such as 0.01")
    p.set_defaults(func=cmd_pc, cli_names={
        "max_past": "--max-past", "max_future": "--max-future", "chi": "--chi",
        "max_history": "--max-history", "p": "the series", "tick=None": "--tick none",
        "tick": "--tick"})


def _add_dfa(sub) -> None:
    p = sub.add_parser("dfa", help="detrended fluctuation analysis (H), or MF-DFA (h(q), f(α))",
                       description="DFA: F(s) and its exponent H; --mf: MF-DFA, h(q) and the "
                                   "singularity spectrum f(α) (Kantelhardt et al. 2002).")
    _series_input(p, "values x(t): increments such as returns (or prices with --log-returns)")
    p.add_argument("--mf", action="store_true", help="multifractal DFA: h(q), tau(q), f(alpha)")
    p.add_argument("--order", type=int, default=None,
                   help="detrending polynomial order 0 .. 4 (default 1; 2 with --mf)")
    p.add_argument("--scales", default=None,
                   help="segment lengths, comma-separated (default: one per octave, 10 .. N/4)")
    p.add_argument("--q", default=None, help="moments for --mf, comma-separated, increasing "
                                             "(default -5, -4.5, .., 5); write --q=-2,0,2 "
                                             "when the first is negative")
    p.add_argument("--segments", choices=("forward", "both"), default="forward",
                   help="forward segments only (default) or also from the end (Kantelhardt)")
    p.add_argument("--overlap", action="store_true", help="sliding windows: every start")
    p.add_argument("--fit", nargs=2, type=float, metavar=("SMIN", "SMAX"), default=None,
                   help="fit the exponents over these scales only (inclusive)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--log-returns", action="store_true",
                   help="analyse ln p(t+1) - ln p(t) of the prices in FILE")
    g.add_argument("--diff", action="store_true", help="analyse x(t+1) - x(t)")
    g.add_argument("--profile", action="store_true",
                   help="FILE holds the profile itself (no cumulative sum)")
    p.set_defaults(func=cmd_dfa)


def _add_acrw(sub) -> None:
    p = sub.add_parser("acrw", help="write an anti-correlated random walk (synthetic prices)",
                       description="p(t) = a(t) + b(t): a steps ±1 with probability phi each, "
                                   "b in {0, 1} fresh each step; one integer per line.")
    p.add_argument("n", type=int, metavar="N", help="number of points (of returns with --returns)")
    p.add_argument("--phi", type=float, default=0.044,
                   help="step probability, 0 .. 1/2 (default 0.044: ρ(1) ≈ -0.425)")
    p.add_argument("--seed", type=int, default=0, help="Philox seed (default 0)")
    p.add_argument("--returns", action="store_true",
                   help="write the N price changes p(t+1) - p(t) instead of the prices")
    add_output(p, "file to write (default: standard output)")
    add_device(p)
    add_progress(p)
    add_json(p)
    p.set_defaults(func=cmd_acrw, cli_names={"n": "N", "phi": "--phi", "seed": "--seed"})
