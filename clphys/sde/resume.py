"""Checks that a Kuramoto run checkpoint resumes the run it was written by, and
the tags that let MPI ranks agree on their arguments."""

from __future__ import annotations

import os

import numpy as np

from .. import _validate as check
from ..runtime.checkpoint import CheckpointError


def run_tag(value):
    """A number or a string as is, an array by its hash (for agreement across ranks)."""
    if isinstance(value, (str, int, float)):
        return repr(value)
    import hashlib
    return "sha1:" + hashlib.sha1(np.ascontiguousarray(value, dtype=float).tobytes()).hexdigest()


def initial_tag(initial):
    """What a checkpoint records of `initial`: the name, or a hash of the array."""
    if isinstance(initial, str):
        return initial
    import hashlib
    values = np.ascontiguousarray(check.finite_array("initial", initial, dtype=float))
    return "sha1:" + hashlib.sha1(values.tobytes()).hexdigest()


def _same(a, b) -> bool:
    """Equal values of equal shapes (numbers or arrays)."""
    try:
        return np.shape(a) == np.shape(b) and bool(np.all(np.asarray(a) == np.asarray(b)))
    except (TypeError, ValueError):
        return False


def _check_samples(where, samples, M, dt):
    """CheckpointError unless the recorded samples are those of a run: times
    k M dt, 0 <= r <= 1 (to rounding), -pi <= psi <= pi."""
    times, r, psi = samples["times"], samples["r"], samples["psi"]
    for name, ok in (("times", np.isclose(times, np.arange(times.size) * M * dt, rtol=1e-9, atol=0.0)),
                     ("r", (r >= 0.0) & (r <= 1.0 + 1e-5)), ("psi", np.abs(psi) <= np.pi)):
        if not ok.all():
            i = int(np.argmin(ok))
            raise CheckpointError(f"{where}: array {name!r} holds {float(samples[name][i])!r} at sample {i}, which "
                                  f"a run sampled every {M} steps of dt = {dt} cannot have")


def check_resumed(path, header, files, samples, args, steps, M, device, kuramoto_class):
    """The Kuramoto system of a run checkpoint, checked (before any device
    work) to be the run `args` (kuramoto's arguments) describe, with its
    samples so far. kuramoto_class: clphys.sde.Kuramoto (passed in: its module
    imports this one)."""
    where = f"checkpoint {os.fspath(path)!r}"
    for k, v in samples.items():
        if v is None:
            raise CheckpointError(f"{where} lacks the array {k!r}")
        if v.dtype != np.float64 or v.ndim != 1:
            raise CheckpointError(f"{where}: array {k!r} is {v.dtype} {v.shape}, expected float64 (k,)")
    saved, step = kuramoto_class.checkpoint_arguments(header, files, path)
    coupling = (args["coupling"] if isinstance(args["coupling"], (str, bool))
                else check.finite_array("coupling", args["coupling"], dtype=float))
    kernel = args["kernel"]
    if kernel == "auto":
        kernel = "mean-field" if np.ndim(coupling) == 0 else "all-pairs"
    run = header.get("run") if isinstance(header.get("run"), dict) else {}
    here = {**{k: args[k] for k in ("n", "kT", "gamma", "dt", "scheme", "seed", "dtype")},
            "coupling": coupling, "omega": check.finite_array("omega", args["omega"], dtype=float),
            "kernel": kernel, "t_end": float(args["t_end"]), "sample_every": M,
            "initial": initial_tag(args["initial"])}
    there = {**saved, **{k: run.get(k) for k in ("t_end", "sample_every", "initial")}}
    diff = [k + (f" differs (there {there[k]!r}, here {v!r})" if isinstance(v, (int, float, str))
                 else " differs")
            for k, v in here.items() if not _same(v, there[k])]
    if diff:
        raise CheckpointError(f"{where} is of another run: {'; '.join(diff)}")
    if step >= steps:
        raise CheckpointError(f"{where} is of a finished run (step {step} of {steps})")
    n_samples = 1 + step // M
    if any(v.shape != (n_samples,) for v in samples.values()):
        raise CheckpointError(f"{where}: {len(samples['r'])} samples recorded at step {step}, "
                              f"expected {n_samples}")
    _check_samples(where, samples, M, saved["dt"])
    return kuramoto_class.from_checkpoint_parts(header, files, path, device=device)
