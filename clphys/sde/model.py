"""A stochastic differential equation with additive noise, described by data:

    dX_v = a_v(X, t; p) dt + sum_s b_{v,s}(p) dW_s

for state variables v, drift expressions a_v in OpenCL C, independent Wiener
processes W_s (noise sources) and noise strengths b_{v,s} that depend on the
parameters p only (additive noise).  The ensemble kernels are generated from
it; see :class:`clphys.sde.Ensemble`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

import numpy as np

from . import expr as _expr

__all__ = ["Model"]


class Model:
    """A declarative SDE model (additive noise), rendered into an OpenCL kernel.

    Parameters
    ----------
    variables : list of str
        Names of the state variables, e.g. ``["x", "v"]``.
    drift : dict
        ``{variable: expression}`` in OpenCL C of the variables, parameters, ``t``,
        built-ins and constants (``M_PI_F``...); missing variables have zero drift.
    noise : dict, optional
        ``{variable: strength}`` (a Wiener process of its own) or
        ``{variable: {source: strength}}`` (shared sources); strengths are
        expressions of the parameters only.
    parameters : list of str
        Names of the parameters (an :class:`Ensemble` gives each a scalar or a sweep).
    periodic : dict or list, optional
        ``{variable: period}`` (a list: period 1): kept in [0, period) with laps
        counted, for ``unwrap(x)`` and ``displacement(x)`` in observables.
    forcing : dict, optional
        ``{name: expression}`` of the parameters and ``t``, evaluated once per step.
    drive_period : str, optional
        Expression of the parameters: the period of the time dependence (time is kept modulo it).
    name : str, optional
        A label for generated sources (``CLPHYS_KEEP_SOURCE``).

    Examples
    --------
    >>> Model(variables=["x", "v"],                                 # doctest: +SKIP
    ...       drift={"x": "v", "v": "-gamma*v - 2*M_PI_F*cos(2*M_PI_F*x) + a*cos(omega*t) + f"},
    ...       noise={"v": "sqrt(2*gamma*kT)"}, parameters=["gamma", "a", "omega", "f", "kT"],
    ...       periodic={"x": 1.0}, drive_period="2*M_PI/omega")
    """

    def __init__(self, variables, drift, noise=None, parameters=(), periodic=None,
                 drive_period=None, forcing=None, name="model"):
        self._check_names(variables, parameters, name)
        pknown = {p: "parameter" for p in self.parameters}
        known = self._check_forcing(forcing, pknown)
        self._check_drift(drift, known)
        self._check_noise(noise, pknown)
        self._check_periodic(periodic)
        self.drive_period = None if drive_period is None else _expr.as_text("drive_period", drive_period)
        self._period_toks = None if drive_period is None else _expr.check(
            "drive_period", drive_period, pknown, allow_t=False)

    def _check_names(self, variables, parameters, name):
        """Variables, parameters (distinct names) and the model's name."""
        if isinstance(variables, str) or not hasattr(variables, "__iter__"):
            raise TypeError(f"variables must be a list of names, got {variables!r}")
        self.variables = tuple(_expr.check_name("variable", v) for v in variables)
        if not self.variables:
            raise ValueError("variables must name at least one state variable")
        if isinstance(parameters, str) or not hasattr(parameters, "__iter__"):
            raise TypeError(f"parameters must be a list of names, got {parameters!r}")
        self.parameters = tuple(_expr.check_name("parameter", p) for p in parameters)
        for what, names in (("variables", self.variables), ("parameters", self.parameters)):
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"{what} contain duplicates: {', '.join(dup)}")
        both = sorted(set(self.variables) & set(self.parameters))
        if both:
            raise ValueError(f"names used as both variable and parameter: {', '.join(both)}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        self.name = name

    def _check_forcing(self, forcing, pknown) -> dict:
        """The forcing terms; returns {name: kind} of every name the drift may use."""
        forcing = {} if forcing is None else forcing
        if not isinstance(forcing, Mapping):
            raise TypeError(f"forcing must be a mapping {{name: expression}}, got {type(forcing).__name__}")
        self.forcing = {}
        for fname, text in forcing.items():
            _expr.check_name("forcing", fname)
            if fname in self.variables or fname in self.parameters:
                raise ValueError(f"forcing name {fname!r} is already a variable or parameter")
            self.forcing[fname] = _expr.as_text(f"forcing {fname!r}", text)
        self._forcing_toks = tuple(_expr.check(f"forcing {k!r}", v, pknown)
                                   for k, v in self.forcing.items())
        known = {v: "variable" for v in self.variables}
        known.update({p: "parameter" for p in self.parameters})
        known.update({f: "forcing" for f in self.forcing})
        return known

    def _check_drift(self, drift, known):
        """The drift of every variable (0 where missing)."""
        if not isinstance(drift, Mapping):
            raise TypeError(f"drift must be a mapping {{variable: expression}}, got {type(drift).__name__}")
        self._check_keys("drift", drift)
        self.drift = tuple(_expr.as_text(f"drift of {v!r}", drift.get(v, "0")) for v in self.variables)
        self._drift_toks = tuple(_expr.check(f"drift of {v!r}", d, known)
                                 for v, d in zip(self.variables, self.drift))

    def _check_noise(self, noise, pknown):
        """The noise strengths and sources (additive: of the parameters only)."""
        noise = {} if noise is None else noise
        if not isinstance(noise, Mapping):
            raise TypeError(f"noise must be a mapping {{variable: strength}}, got {type(noise).__name__}")
        self._check_keys("noise", noise)
        sources, entries = [], []
        self.noise = {}
        for v in self.variables:
            if v not in noise:
                continue
            spec = noise[v]
            spec = dict(spec) if isinstance(spec, Mapping) else {v: spec}
            self.noise[v] = {}
            for src, strength in spec.items():
                _expr.check_name("noise source", src)
                where = f"noise of {v!r} (source {src!r})"
                self.noise[v][src] = _expr.as_text(where, strength)
                toks = _expr.tokenize(where, strength)
                for kind, tok in toks:
                    if kind == "name" and (tok in self.variables or tok == "t"):
                        raise ValueError(f"{where}: noise must be additive: its strength may depend "
                                         f"on parameters only, not on {tok!r}")
                toks = _expr.check(where, strength, pknown, allow_t=False)
                if src not in sources:
                    sources.append(src)
                entries.append((self.variables.index(v), sources.index(src), toks))
        self.noise_sources = tuple(sources)
        self._noise = tuple(entries)

    def _check_periodic(self, periodic):
        """The periods of the periodic variables."""
        if periodic is None:
            periodic = {}
        elif not isinstance(periodic, Mapping):
            if isinstance(periodic, str):
                periodic = [periodic]
            periodic = {v: 1.0 for v in periodic}
        self._check_keys("periodic", periodic)
        per = {}
        for v, L in periodic.items():
            if isinstance(L, bool) or not isinstance(L, (int, float)) or not math.isfinite(L) or L <= 0:
                raise ValueError(f"periodic[{v!r}] must be a finite period > 0, got {L!r}")
            per[v] = float(L)
        self.periodic = {v: per[v] for v in self.variables if v in per}

    def _check_keys(self, what, mapping):
        bad = [k for k in mapping if k not in self.variables]
        if bad:
            raise ValueError(f"{what} names unknown variable(s) {', '.join(map(repr, bad))}; "
                             f"variables are {', '.join(self.variables)}")

    # ---------------------------------------------------------------- as data
    def describe(self) -> dict:
        """The model as plain data (JSON-able): ``Model(**m.describe())``
        rebuilds it. Checkpoints store this instead of the object."""
        return {"variables": list(self.variables), "parameters": list(self.parameters),
                "drift": dict(zip(self.variables, self.drift)),
                "noise": {v: dict(src) for v, src in self.noise.items()},
                "periodic": dict(self.periodic), "forcing": dict(self.forcing),
                "drive_period": self.drive_period, "name": self.name}

    @classmethod
    def from_description(cls, description: dict) -> Model:
        """The model :meth:`describe` gave; ValueError/TypeError naming what
        is wrong with a malformed description."""
        if not isinstance(description, Mapping):
            raise TypeError(f"a model description must be a mapping, got {type(description).__name__}")
        allowed = {"variables", "parameters", "drift", "noise", "periodic", "forcing",
                   "drive_period", "name"}
        unknown = sorted(set(description) - allowed)
        missing = sorted({"variables", "drift"} - set(description))
        if unknown or missing:
            raise ValueError("model description: " + "; ".join(
                ([f"unknown keys {unknown}"] if unknown else [])
                + ([f"missing keys {missing}"] if missing else [])))
        return cls(**description)

    # ---------------------------------------------------------------- helpers
    def _key(self):
        return (self.variables, self.drift, self.parameters, tuple(self.forcing.items()),
                tuple((vi, si, " ".join(t for _, t in toks)) for vi, si, toks in self._noise),
                self.noise_sources, tuple(self.periodic.items()), self.drive_period)

    def __eq__(self, other):
        return isinstance(other, Model) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return (f"Model(name={self.name!r}, variables={list(self.variables)}, "
                f"parameters={list(self.parameters)}, noise sources={list(self.noise_sources)}, "
                f"periodic={self.periodic}, drive_period={self.drive_period!r})")

    @property
    def tag(self) -> str:
        """A short hash of the model: part of helper names in the kernels."""
        return hashlib.sha1(repr(self._key()).encode()).hexdigest()[:8]

    def check_observable(self, text: str) -> list:
        """Tokens of an observable expression (variables, parameters, t,
        unwrap(periodic variable), displacement(variable))."""
        known = {v: "variable" for v in self.variables}
        known.update({p: "parameter" for p in self.parameters})
        known.update({f: "forcing" for f in self.forcing})
        return _expr.check(f"observable {text!r}", text, known, unwrap=tuple(self.periodic),
                           displacement=self.variables)

    def drive_periods(self, values: dict) -> np.ndarray | None:
        """The drive period for parameter values (NumPy arrays broadcast
        together), or None when the model has none."""
        if self._period_toks is None:
            return None
        return _expr.host_eval("drive_period", self._period_toks, values)

    def render_spec(self, real: str) -> dict:
        """What the kernel templates need: the rendered drift and noise."""
        return {
            "vars": list(self.variables),
            "drift": [_expr.render(t, real) for t in self._drift_toks],
            "forcing": [(k, _expr.render(t, real)) for k, t in zip(self.forcing, self._forcing_toks)],
            "noise": [(vi, si, _expr.render(t, real)) for vi, si, t in self._noise],
            "n_sources": len(self.noise_sources),
            "periodic": [(self.variables.index(v), L) for v, L in self.periodic.items()],
            "has_period": self.drive_period is not None,
        }
