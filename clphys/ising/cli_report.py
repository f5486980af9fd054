"""What ``clphys ising`` and ``clphys binder`` report: the estimates next to
the exact values, the speed, and their text, JSON and plot forms."""

from __future__ import annotations

import math
import warnings

from .._cli import is_root
from ..runtime.files import atomic_output


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


def analyse(s1):
    """({observable: estimate}, drift or None, [warning messages]) of one
    lattice's measured series; no warning means every error can be trusted
    (each series >= 50 tau_int long, no drift between its halves)."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        est = {key: getattr(s1, method)() for key, _, method in ESTIMATES}
        drift = s1.drift() if s1.energy.shape[-1] >= 32 else None
    return est, drift, list(dict.fromkeys(str(w.message) for w in record))


def trust_fraction(est, messages, margin=1.0) -> float:
    """How far the series is towards trustworthy errors, 0 .. 1 (1: every
    estimate >= margin x MIN_TAUS tau_int long and no warning)."""
    from ..stats import MIN_TAUS
    parts = [e.n / (margin * MIN_TAUS * e.tau_int) if e.tau_int > 0 else 0.0 for e in est.values()]
    frac = min([min(1.0, x) if math.isfinite(x) else 0.0 for x in parts] + [1.0])
    return frac if not messages else min(frac, 0.99)


def single_replica(s):
    """The Samples of replica 0 of a run's Samples."""
    return type(s)(float(s.temperature[0]), s.n_spins, s.energy[0], s.magnetization[0], s.n_therm, s.every,
                   bool(s.trapped[0]))


def result(lat, s1, p, total, speed, comm=None, auto=None):
    """Everything `clphys ising` reports, as one dict (printed as text or JSON)."""
    n = s1.energy.shape[-1]
    ref, notes = _references(p, lat.shape)
    est, drift, messages = analyse(s1) if n else ({}, None, [
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


def print_text(r):
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


def print_json(r):
    import sys

    from .._cli import print_json
    for msg in r["warnings"]:
        print(f"clphys ising: warning: {msg}", file=sys.stderr)
    print_json({k: v for k, v in r.items() if not k.startswith("_")})


def sweep_speed(lat, timing, every, comm=None):
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


def halo_line(lat):
    t = lat.ensemble.backend.halo_times
    n = max(1, t["half-sweeps"])
    every = "every half-sweep" if lat.halo == 1 else f"every {lat.halo // 2} sweeps"
    return (f"halo path   rank 0, halos of {lat.halo} slabs exchanged {every}, per half-sweep: "
            f"{1e6 * t['edge wait'] / n:.1f} us waiting for the "
            f"edge slabs, {1e6 * t['exchange'] / n:.1f} us exchanging them (MPI), "
            f"{1e6 * t['halo writes'] / n:.1f} us queueing the halo writes")


def plot_lattice(lat, sweeps, dim, temperature, path, comm=None, quiet=False):
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



def binder_json(scan, args):
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
