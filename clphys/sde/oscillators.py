"""The noisy Kuramoto model on the device:

    gamma dtheta_i = (omega_i + sum_j K_ij sin(theta_j - theta_i)) dt + sqrt(2 gamma kT) dW_i,

with the order parameter r e^{i psi} = (1/N) sum_j e^{i theta_j}.

Kernels (cl_kernels/sde/kuramoto.cl):

* ``"mean-field"`` for constant coupling K_ij = K/N: the coupling is
  K r sin(psi - theta_i), from on-device sums of sin and cos of the phases
  (O(N) per step);
* ``"all-pairs"`` for a coupling matrix K_ij (or K/N computed pair by pair):
  tiles of (sin theta_j, cos theta_j) in local memory, two FMAs per pair
  (O(N^2) per step).

Every step depends on all phases of the previous one, so each stage is a
launch: SRK2 (Heun with the same Gaussian in both stages) needs the
coupling twice per step. Oscillator i at step n uses component i % 4 of the
Box-Muller pairs of philox((i // 4, n, n >> 32, 2), key(seed)) in every
kernel, so mean-field and all-pairs runs with one seed see the same noise.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .. import _validate as check
from ..rng import seed_key
from ..runtime import checkpoint as ckpt
from ..runtime import fp64_missing, resolve_device, zeros
from ..runtime import work_group_size as _wg_size
from ..runtime.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from ..runtime.files import check_output_path
from ..runtime.longrun import (
    CHECKPOINT_EVERY,
    Interrupted,
    check_checkpoint_args,
    checkpointed_run,
    run_sliced,
)
from ..runtime.memory import check_memory
from .plan import DTYPES, SCHEMES, check_fits, steps_to
from .resume import check_resumed, initial_tag, run_tag

__all__ = ["Kuramoto", "KuramotoResult", "kuramoto", "kuramoto_sweep", "KuramotoSweep", "KERNELS"]

KERNELS = ("auto", "mean-field", "all-pairs")
CHECKPOINT_KIND = "sde-kuramoto"
RUN_CHECKPOINT_KIND = "sde-kuramoto-run"


@dataclass(frozen=True)
class KuramotoResult:
    """times (n_samples,), order parameter r and phase psi at those times
    (the first sample is the start of the run), final phases theta (N,) in
    [0, 2 pi)."""
    times: np.ndarray
    r: np.ndarray
    psi: np.ndarray
    kernel: str
    _theta: Any = field(repr=False, compare=False)   # device copy of the final phases

    @property
    def theta(self) -> np.ndarray:
        """Final phases in [0, 2 pi)."""
        # Downloaded only when asked for: a run of a few steps at N = 2^24
        # would otherwise spend most of its time copying phases to the host.
        return np.mod(self._theta.get().astype(np.float64), 2 * np.pi)


class Kuramoto:
    """N coupled phase oscillators with noise (module doc).

    coupling
        K (a real number: K_ij = K/N) or an (N, N) matrix K_ij.
    kT, gamma
        noise temperature (>= 0) and friction (> 0). Dividing by gamma gives
        coupling K/gamma and phase diffusion constant D = kT/gamma, so the
        stationary state depends on K/kT only (gamma sets the time scale):
        :func:`clphys.exact.kuramoto_order_parameter` takes (K, kT).
    omega
        natural frequencies: a real number or an (N,) array.
    kernel
        ``"auto"`` (mean-field for a scalar K, all-pairs for a matrix),
        ``"mean-field"`` or ``"all-pairs"``.
    initial
        ``"uniform"`` (independent uniform phases from `seed`), ``"sync"``
        (all zero) or an (N,) array.
    work_group_size, slices
        tuning: oscillators per work group (the all-pairs tile length) and
        the number of slices the all-pairs j range is split into.
    """

    def __init__(self, n, coupling, *, kT=1.0, gamma=1.0, omega=0.0, dt=0.01, kernel="auto",
                 scheme="srk2", seed=0, dtype="float32", initial="uniform", work_group_size=None,
                 slices=None, device=None):
        K, om, initial = self._check_physics(n, coupling, kT, gamma, omega, dt, kernel, scheme, seed, dtype,
                                             initial)
        self._plan(device, work_group_size, slices, K, om)
        self._allocate(K, om, initial)

    def _check_physics(self, n, coupling, kT, gamma, omega, dt, kernel, scheme, seed, dtype, initial):
        """Every argument but the device's, checked: (K, omega, initial) as arrays."""
        self.n = n = check.integer("n", n, 1, 2**31 - 1)
        K = (None if isinstance(coupling, (bool, str))
             else check.finite_array("coupling", coupling, dtype=float))
        if K is None or K.ndim not in (0, 2) or (K.ndim == 2 and K.shape != (n, n)):
            raise ValueError(f"coupling must be a real number K (K_ij = K/N) or an ({n}, {n}) "
                             f"matrix, got {coupling!r}" if K is None or K.ndim != 2 else
                             f"coupling matrix must have shape ({n}, {n}), got {K.shape}")
        self.kT = check.real("kT", kT, 0.0)
        self.gamma = check.real("gamma", gamma, 0.0, strict_min=True)
        om = check.finite_array("omega", omega, dtype=float)
        if om.ndim not in (0, 1) or (om.ndim == 1 and om.shape != (n,)):
            raise ValueError(f"omega must be a real number or an array of shape ({n},), got shape {om.shape}")
        self.dt = check.real("dt", dt, 0.0, strict_min=True)
        kernel = check.choice("kernel", kernel, KERNELS)
        if kernel == "auto":
            kernel = "mean-field" if K.ndim == 0 else "all-pairs"
        if kernel == "mean-field" and K.ndim == 2:
            raise ValueError("kernel='mean-field' needs a constant coupling K (a number); "
                             "use kernel='all-pairs' for a matrix")
        self.kernel = kernel
        self.scheme = check.choice("scheme", scheme, SCHEMES)
        self.seed = check.seed(seed)
        self.dtype = check.choice("dtype", dtype, DTYPES)
        if isinstance(initial, str):
            check.choice("initial", initial, ("uniform", "sync"))
        else:
            initial = check.finite_array("initial", initial, dtype=float)
            if initial.shape != (n,):
                raise ValueError(f"initial must be 'uniform', 'sync' or an array of shape ({n},), "
                                 f"got shape {initial.shape}")
        return K, om, initial

    def _plan(self, device, work_group_size, slices, K, om):
        """The device, work-group size and slices, and the memory check."""
        n = self.n
        self.device = dev = resolve_device(device)
        if self.dtype == "float64" and not dev.facts.fp64:
            raise fp64_missing(dev, "sde.Kuramoto: dtype='float64'", "dtype='float32'")
        if slices is not None:
            slices = check.integer("slices", slices, 1)
        if work_group_size is None:
            wg = work_group_size_default(dev.facts, n)
            # the default follows the slices the user chose: a slice is at least one group of j
            while slices is not None and wg > 2 and -(-n // wg) < slices:
                wg //= 2
        else:
            wg = check.integer("work_group_size", work_group_size, 2, dev.facts.max_work_group)
            if wg & (wg - 1):
                raise ValueError(f"work_group_size must be a power of two, got {wg}")
        self.work_group_size = wg
        groups = -(-n // wg)
        if slices is None:
            # enough slices of the j range to give a GPU ~4 groups per compute unit,
            # but never more slices than there are groups of j
            want = -(-4 * dev.facts.compute_units // groups) if dev.facts.is_gpu else 1
            slices = min(1 << max(0, min(16, want) - 1).bit_length(), groups)
        if slices > groups:
            raise ValueError(f"slices must be <= {groups}, the groups of j that N = {n} makes with "
                             f"work_group_size {wg}{' (the smallest)' if work_group_size is None else ''}; "
                             f"got {slices}")
        self.slices = slices

        real = np.dtype(self.dtype)
        self._real = real
        for name, value in (("coupling", K), ("kT", self.kT), ("gamma", self.gamma), ("omega", om),
                            ("dt", self.dt), ("K/N", K / n), ("1/gamma", 1.0 / self.gamma),
                            ("sqrt(2 kT dt/gamma)", math.sqrt(2.0 * self.kT * self.dt / self.gamma))):
            check_fits(name, value, real)
        if real.type(self.dt) == 0:
            raise ValueError(f"dt = {self.dt!r} is 0 in {self.dtype}; use dtype='float64'")
        self._acc = np.dtype(np.float64 if dev.facts.fp64 else np.float32)   # (S, C) pairs: shape (k, 2)
        pairs = self.kernel == "all-pairs"
        self._coupling = "mean-field" if not pairs else ("uniform" if K.ndim == 0 else "matrix")
        rs = real.itemsize
        need = {"theta": n * rs, "omega": n * rs if om.ndim else 0}
        if pairs:
            need.update({"sin_cos": 2 * n * rs, "field": 2 * self.slices * n * rs, "drift": n * rs})
            if K.ndim == 2:
                need["K"] = n * n * rs
        check_memory(dev, need, f"a Kuramoto system of N = {n}",
                     "Use fewer oscillators (or a scalar K instead of a matrix).")
        self._need = need
        self._K_host = None if K.ndim == 0 else K
        self._omega_host = om
        self._slice = 1

    def _allocate(self, K, om, initial):
        """Build the kernels, upload the phases and parameters, and make the first sums."""
        n, dev, wg, real = self.n, self.device, self.work_group_size, self._real
        pairs = self.kernel == "all-pairs"
        q = dev.queue
        self._prg = dev.build("sde/kuramoto.cl", options=self._options(), real=self._cl_real,
                              coupling=self._coupling, omega_array=bool(om.ndim), wg=wg,
                              wgf=_wg_size(dev.facts, 256))
        if isinstance(initial, str):
            th = (np.zeros(n) if initial == "sync" else
                  np.random.default_rng(self.seed).uniform(0.0, 2 * np.pi, n))
        else:
            th = np.mod(initial, 2 * np.pi)
        self._theta = cla.to_device(q, th.astype(real))
        self._omega = cla.to_device(q, om.astype(real)) if om.ndim else zeros(dev, 1, real)
        self._omega0 = real.type(0.0 if om.ndim else float(om))
        self._K = float(K) if K.ndim == 0 else None
        self._coef = real.type(self._K / n if K.ndim == 0 else 1.0)
        self._Kt = (cla.to_device(q, np.ascontiguousarray(K.T, dtype=real)) if K.ndim == 2
                    else zeros(dev, 1, real))
        self._n_upd = _ceil_div(_ceil_div(n, 4), wg)        # update work groups
        self._n_sum = min(-(-n // wg), 4 * wg)              # kuramoto_sums work groups
        self._partials = zeros(dev, (max(self._n_upd, self._n_sum), 2), self._acc)
        self._sums0 = zeros(dev, (1, 2), self._acc)
        self._sums1 = zeros(dev, (1, 2), self._acc)
        self._sc = zeros(dev, 2 * n if pairs else 1, real)
        self._field = zeros(dev, 2 * self.slices * n if pairs else 1, real)
        self._drift = zeros(dev, n if pairs else 1, real)
        self._step = 0
        self._wgf = _wg_size(dev.facts, 256)
        k0, k1 = seed_key(self.seed)
        self._c = {"n": np.uint32(n), "n_sum": np.uint32(self._n_sum), "n_upd": np.uint32(self._n_upd),
                   "inv_gamma": real.type(1.0 / self.gamma), "dt": real.type(self.dt),
                   "amp": real.type(math.sqrt(2.0 * self.kT * self.dt / self.gamma)),
                   "k0": np.uint32(k0), "k1": np.uint32(k1), "slices": np.uint32(self.slices),
                   "chunk": np.uint32(_ceil_div(_ceil_div(n, self.slices), wg) * wg)}
        self._sums_of_theta(self._sums0, None, -1)
        if pairs:
            self._prg.kuramoto_sincos(q, (n,), None, self._theta.data, np.uint32(n), self._sc.data)

    @property
    def _cl_real(self):
        return "double" if self.dtype == "float64" else "float"

    def _options(self):
        return [] if self.dtype == "float64" else ["-cl-single-precision-constant"]

    @property
    def step(self) -> int:
        return self._step

    @property
    def t(self) -> float:
        return self._step * self.dt

    @property
    def theta(self) -> np.ndarray:
        """Current phases in [0, 2 pi)."""
        return np.mod(self._theta.get().astype(np.float64), 2 * np.pi)

    def phases_on_device(self) -> cla.Array:
        """A device copy of the current phases (for a KuramotoResult)."""
        return self._theta.copy()

    def _launch(self, name, gsize, lsize, *args):
        getattr(self._prg, name)(self.device.queue, gsize, lsize, *args)

    def _sums_of_theta(self, out, history, slot):
        wg = self.work_group_size
        self._launch("kuramoto_sums", (self._n_sum * wg,), (wg,), self._theta.data, self._c["n"],
                     self._partials.data)
        self._finish(self._c["n_sum"], out, history, slot)

    def _finish(self, groups, out, history, slot):
        wgf = self._wgf
        hist = history if history is not None else out
        self._launch("kuramoto_sums_finish", (wgf,), (wgf,), self._partials.data, groups, out.data,
                     hist.data, np.int32(slot))

    def _update(self, kind):
        c, wg = self._c, self.work_group_size
        self._launch("kuramoto_" + kind, (self._n_upd * wg,), (wg,), self._theta.data,
                     self._omega.data, c["n"], self._omega0, c["inv_gamma"], self._coef, c["dt"],
                     c["amp"], np.uint64(self._step), c["k0"], c["k1"], self._sums0.data,
                     self._sums1.data, self._field.data, c["slices"], self._sc.data,
                     self._drift.data, self._partials.data)

    def _pairs(self):
        wg, n = self.work_group_size, self.n
        self._launch("kuramoto_pairs", (-(-n // wg) * wg, self.slices), (wg, 1), self._sc.data,
                     self._Kt.data, self._c["n"], self._c["chunk"], self._field.data)

    def _one_step(self, history, slot):
        mf = self.kernel == "mean-field"
        if mf:
            if self.scheme == "euler":
                self._update("euler")
            else:
                self._update("predict")
                self._finish(self._c["n_upd"], self._sums1, None, -1)
                self._update("correct")
            self._finish(self._c["n_upd"], self._sums0, history, slot)
        else:
            self._pairs()
            if self.scheme == "euler":
                self._update("euler")
            else:
                self._update("predict")
                self._pairs()
                self._update("correct")
            if slot >= 0:
                self._sums_of_theta(self._sums0, history, slot)
        self._step += 1

    def order_parameter(self) -> tuple[float, float]:
        """(r, psi) of the current phases (the mean-field sums the next step
        uses, so reading them changes nothing)."""
        if self.kernel != "mean-field":
            self._sums_of_theta(self._sums0, None, -1)
        S, C = self._sums0.get().astype(np.float64).ravel() / self.n
        return float(np.hypot(S, C)), float(np.arctan2(S, C))

    def run(self, t_end: float | None = None, *, steps: int | None = None, sample_every: int = 1,
            progress: bool | Callable | None = None) -> KuramotoResult:
        """Advance to time `t_end` (or by `steps` steps), recording r and psi
        at the start and every `sample_every` steps (and at the end).

        Steps are queued in slices of about a quarter second with the queue
        finished between them: `progress` counts completed steps, and Ctrl-C
        raises :class:`clphys.runtime.Interrupted` within about a second,
        with the system at its last completed step and the samples so far
        as ``exc.partial``. Running in several calls gives the same phases,
        bit for bit, as one call."""
        if (t_end is None) == (steps is None):
            raise ValueError("give exactly one of t_end (the time to run to) and steps")
        if steps is None:
            steps = steps_to(t_end, self.t, self.dt)
        steps = check.integer("steps", steps, 1, 2**63 - 1 - self._step)
        M = min(check.integer("sample_every", sample_every, 1), steps)     # same samples; int64-safe
        n_marks = steps // M + (steps % M != 0)
        check_memory(self.device, {**self._need, "history": (n_marks + 1) * 2 * self._acc.itemsize},
                     f"this run of N = {self.n} ({n_marks + 1} samples)",
                     "Record fewer samples (a larger sample_every).")
        history = zeros(self.device, (n_marks + 1, 2), self._acc)
        if self.kernel == "mean-field":
            # the sums of the current phases are already there (and the next step
            # uses them: recomputing them in another order would change its bits)
            cl.enqueue_copy(self.device.queue, history.data, self._sums0.data,
                            byte_count=2 * self._acc.itemsize)
        else:
            self._sums_of_theta(self._sums0, history, 0)
        start = self._step

        def advance(done, n):
            self._slice = n
            for s in range(done + 1, done + n + 1):
                self._one_step(history, s // M if s % M == 0 else (n_marks if s == steps else -1))

        def result():
            done = self._step - start
            k = n_marks if done == steps else done // M
            marks = np.minimum(np.arange(k + 1, dtype=np.int64) * M, steps)
            h = history.get()[:k + 1].astype(np.float64) / self.n
            if not np.isfinite(h).all():
                warnings.warn(f"kuramoto: the order parameter is not finite from sample "
                              f"{int(np.argmin(np.isfinite(h).all(axis=1)))} on: the phases ran off to inf "
                              f"or NaN (a smaller dt)", RuntimeWarning, stacklevel=3)
            return KuramotoResult((start + marks) * self.dt, np.hypot(h[:, 0], h[:, 1]),
                                  np.arctan2(h[:, 0], h[:, 1]), self.kernel, self._theta.copy())

        try:
            run_sliced(steps, advance, self.device.queue, progress=progress, label="kuramoto",
                       what="time steps", first=self._slice)
        except Interrupted as exc:
            exc.partial = result()
            raise
        return result()

    # ------------------------------------------------------------ checkpoints
    def save(self, path) -> None:
        """Write the system to `path` (.npz with a JSON header, atomically);
        :meth:`load` continues it bit for bit."""
        check_output_path(path, "checkpoint", (".npz",))
        save_checkpoint(path, CHECKPOINT_KIND, *self.checkpoint_parts())

    def checkpoint_parts(self) -> tuple[dict, dict]:
        """(header, arrays) of everything that determines the future."""
        header = {"n": self.n, "coupling": "matrix" if self._K is None else self._K,
                  "kT": self.kT, "gamma": self.gamma,
                  "omega": "array" if self._omega_host.ndim else float(self._omega_host),
                  "dt": self.dt, "kernel": self.kernel, "scheme": self.scheme, "seed": self.seed,
                  "dtype": self.dtype, "work_group_size": self.work_group_size, "slices": self.slices,
                  "step": self._step, "algorithm": f"kuramoto {self.kernel} {self.scheme}",
                  "RNG": "philox"}
        arrays = {"theta": self._theta.get(), "sums": self._sums0.get().astype(np.float64).ravel(),
                  "K": self._K_host if self._K_host is not None else np.zeros((0, 0)),
                  "omega": self._omega_host if self._omega_host.ndim else np.zeros(0)}
        return header, arrays

    @classmethod
    def load(cls, path: str | os.PathLike, *, device: Any = None) -> Kuramoto:
        """The system saved by :meth:`save` at `path`; CheckpointError (a
        ValueError) naming whatever is missing, malformed or inconsistent."""
        header, files = load_checkpoint(path, CHECKPOINT_KIND)
        return cls.from_checkpoint_parts(header, files, path, device=device)

    @staticmethod
    def checkpoint_arguments(header: dict, files: dict, path: str | os.PathLike = "") -> tuple[dict, int]:
        """(constructor keyword arguments, step) of a loaded checkpoint, every
        field checked; no device work."""
        f = lambda *a, **k: ckpt.field(header, *a, path=path, **k)      # noqa: E731
        n = f("n", int, minimum=1)
        dtype = f("dtype", str, choices=DTYPES)
        coupling = f("coupling", (float, str))
        omega = f("omega", (float, str))
        if isinstance(coupling, str) and coupling != "matrix":
            raise CheckpointError(f"checkpoint {path!r}: field 'coupling' = {coupling!r} is not a number "
                                  "or 'matrix'")
        if isinstance(omega, str) and omega != "array":
            raise CheckpointError(f"checkpoint {path!r}: field 'omega' = {omega!r} is not a number or 'array'")
        kn = n if coupling == "matrix" else 0
        ckpt.check_arrays(path, header, files, {
            "theta": (dtype, (n,)), "sums": (np.float64, (2,)), "K": (np.float64, (kn, kn)),
            "omega": (np.float64, (n if omega == "array" else 0,))})
        if not np.isfinite(files["theta"]).all() or not np.isfinite(files["sums"]).all():
            raise CheckpointError(f"checkpoint {path!r}: the phases or their sums are not finite")
        kernel = f("kernel", str, choices=KERNELS[1:])
        if kernel == "mean-field":
            # the next step's coupling is made from these sums: they must be the phases' own
            th = files["theta"].astype(np.float64)
            mine = np.array([np.sin(th).sum(), np.cos(th).sum()])
            if not np.all(np.abs(files["sums"] - mine) <= 1e-4 * n):
                raise CheckpointError(f"checkpoint {path!r}: array 'sums' = {files['sums'].tolist()} is not "
                                      f"the sums of sin and cos of the phases, {mine.tolist()}")
        kwargs = dict(n=n, coupling=files["K"] if coupling == "matrix" else coupling, kT=f("kT", float),
                      gamma=f("gamma", float), omega=files["omega"] if omega == "array" else omega,
                      dt=f("dt", float), kernel=kernel,
                      scheme=f("scheme", str, choices=SCHEMES), seed=f("seed", int, minimum=0),
                      dtype=dtype, work_group_size=f("work_group_size", int, minimum=2),
                      slices=f("slices", int, minimum=1))
        return kwargs, f("step", int, minimum=0)

    @classmethod
    def from_checkpoint_parts(cls, header: dict, files: dict, path: str | os.PathLike = "", *, device: Any = None) -> Kuramoto:
        """The system of a loaded checkpoint (header, arrays), continuing bit for bit."""
        kwargs, step = cls.checkpoint_arguments(header, files, path)
        try:
            sim = cls(**kwargs, initial="sync", device=device)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"checkpoint {path!r}: {exc}") from None
        q, n = sim.device.queue, sim.n
        cl.enqueue_copy(q, sim._theta.data, np.ascontiguousarray(files["theta"]))
        cl.enqueue_copy(q, sim._sums0.data, files["sums"].astype(sim._acc).reshape(1, 2))
        if sim.kernel == "all-pairs":
            sim._prg.kuramoto_sincos(q, (n,), None, sim._theta.data, np.uint32(n), sim._sc.data)
        sim._step = step
        q.finish()
        return sim


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def work_group_size_default(facts: Any, n: int) -> int:
    """Oscillators per work group: up to 256, a power of two, at least 2."""
    return max(2, _wg_size(facts, min(256, 1 << max(1, (int(n) - 1).bit_length()))))


def kuramoto(n, coupling, *, kT=1.0, gamma=1.0, omega=0.0, t_end=10.0, dt=0.01, sample_every=10,
             kernel="auto", scheme="srk2", seed=0, dtype="float32", initial="uniform",
             progress=None, device=None, checkpoint=None, checkpoint_every=CHECKPOINT_EVERY,
             resume=None) -> KuramotoResult:
    """Run N noisy Kuramoto oscillators from t = 0 to t_end and return the
    order parameter r(t) and phase psi(t) (every `sample_every` steps) and
    the final phases. See :class:`Kuramoto` for the arguments.

    With `checkpoint` (an .npz path) the run is written there every
    `checkpoint_every` seconds and on Ctrl-C; ``resume=path`` continues it
    (the other arguments must describe the same run) with the same result,
    bit for bit, as a run never stopped.

    Example: ``kuramoto(65536, 4.0, kT=1.0).r[-1]`` is close to the N -> inf
    value clphys.exact.kuramoto_order_parameter(4, 1) = 0.8315 (identical
    oscillators; r depends on K/kT only, whatever gamma)."""
    checkpoint, checkpoint_every = check_checkpoint_args(checkpoint, checkpoint_every)
    dt = check.real("dt", dt, 0.0, strict_min=True)
    steps = steps_to(t_end, 0.0, dt)
    M = min(check.integer("sample_every", sample_every, 1), steps)
    if resume is not None:
        header, files = load_checkpoint(resume, RUN_CHECKPOINT_KIND)
        samples = {k: files.pop(k, None) for k in ("times", "r", "psi")}
        args = dict(n=n, coupling=coupling, kT=kT, gamma=gamma, omega=omega, dt=dt, kernel=kernel,
                    scheme=scheme, seed=seed, dtype=dtype, t_end=t_end, initial=initial)
        sim = check_resumed(resume, header, files, samples, args, steps, M, device,
                            Kuramoto)
    else:
        sim = Kuramoto(n, coupling, kT=kT, gamma=gamma, omega=omega, dt=dt, kernel=kernel,
                       scheme=scheme, seed=seed, dtype=dtype, initial=initial, device=device)
        r0, psi0 = sim.order_parameter()
        samples = {"times": np.zeros(1), "r": np.array([r0]), "psi": np.array([psi0])}
    run = {"t_end": float(t_end), "sample_every": M, "initial": initial_tag(initial)}

    def record(res):
        for k, v in (("times", res.times), ("r", res.r), ("psi", res.psi)):
            samples[k] = np.concatenate([samples[k], v[1:]])    # v[0]: the start, already there

    def advance(k, report):
        record(sim.run(steps=k, sample_every=M, progress=report))

    def save():
        header, arrays = sim.checkpoint_parts()
        header["run"] = run
        return RUN_CHECKPOINT_KIND, header, {**arrays, **samples}

    checkpointed_run(sim, steps, M, advance, record, save, progress=progress, label="kuramoto",
                     checkpoint=checkpoint, checkpoint_every=checkpoint_every)
    return KuramotoResult(samples["times"], samples["r"], samples["psi"], sim.kernel, sim.phases_on_device())


@dataclass(frozen=True)
class KuramotoSweep:
    """A Kuramoto run at every point of a (coupling, kT) grid: coupling, kT of
    shape grid_shape (coupling-major), sample times (n_samples,), r and psi of
    shape (*grid_shape, n_samples)."""
    coupling: np.ndarray
    kT: np.ndarray
    times: np.ndarray
    r: np.ndarray
    psi: np.ndarray
    kernel: str


def kuramoto_sweep(n, coupling, kT=1.0, *, gamma=1.0, omega=0.0, t_end=10.0, dt=0.01,
                   sample_every=10, kernel="auto", scheme="srk2", seed=0, dtype="float32",
                   initial="uniform", progress=None, device=None, comm=None,
                   gather="root") -> KuramotoSweep | None:
    """:func:`kuramoto` at every point of the grid of `coupling` (numbers K)
    and `kT` (numbers or 1-D arrays each): every point is the run
    ``kuramoto(n, K, kT=kT, seed=seed, ...)``, bit for bit (the same noise at
    every point: common random numbers make r(K) smooth).

    comm (an mpi4py communicator): a collective call; the points are split
    over the ranks (a rank may get none) and the result is returned on rank
    0, and on every rank with ``gather="all"``; other ranks get None. A
    single system is not split over ranks: each step needs the sums over all
    oscillators of the step before, so it would wait for a collective twice
    per step; run one system per device instead."""
    def grid():
        """The (coupling, kT) grid, checked; and its shape (one axis per swept argument)."""
        values = []
        for name, value in (("coupling", coupling), ("kT", kT)):
            arr = check.finite_array(name, value, dtype=float)
            if arr.ndim > 1 or arr.size == 0:
                raise ValueError(f"{name} must be a number or a non-empty 1-D array, got shape {arr.shape}")
            values.append(arr)
        if np.any(values[1] < 0):
            raise ValueError(f"kT must be >= 0, got {values[1].min()}")
        check.choice("gather", gather, ("root", "all"))
        shape = tuple(a.size for a in values if a.ndim)
        return np.meshgrid(*values, indexing="ij"), shape

    size, rank = (1, 0)
    if comm is not None:
        from ..runtime import mpi
        size, rank = mpi.comm_size_rank(comm)
        (Kg, Tg), shape = mpi.all_ok(comm, grid)
        mpi.agree(comm, "kuramoto_sweep arguments", coupling=Kg.ravel().tolist(), kT=Tg.ravel().tolist(),
                  n=repr(n), gamma=repr(gamma), omega=run_tag(omega), t_end=repr(t_end), dt=repr(dt),
                  sample_every=repr(sample_every), kernel=repr(kernel), scheme=repr(scheme),
                  seed=repr(seed), dtype=repr(dtype), initial=run_tag(initial), gather=gather)
        if rank:
            progress = False
    else:
        (Kg, Tg), shape = grid()
    from ..runtime.mpi import split
    first, count = split(Kg.size, size, rank)

    def mine():
        out = []
        for i in range(first, first + count):
            res = kuramoto(n, float(Kg.flat[i]), kT=float(Tg.flat[i]), gamma=gamma, omega=omega,
                           t_end=t_end, dt=dt, sample_every=sample_every, kernel=kernel,
                           scheme=scheme, seed=seed, dtype=dtype, initial=initial,
                           progress=progress, device=device)
            out.append((res.times, res.r, res.psi, res.kernel))
        return out

    runs = mine() if comm is None else mpi.all_ok(comm, mine)   # one rank failing fails all
    if comm is not None:
        got = comm.gather(runs, root=0)
        runs = None if got is None else [r for part in got for r in part]
        if gather == "all":
            runs = comm.bcast(runs, root=0)
        if runs is None:
            return None
    times = runs[0][0]
    r = np.stack([x[1] for x in runs]).reshape(shape + (-1,))
    psi = np.stack([x[2] for x in runs]).reshape(shape + (-1,))
    return KuramotoSweep(Kg.reshape(shape), Tg.reshape(shape), times, r, psi, runs[0][3])
