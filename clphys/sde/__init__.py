"""Stochastic differential equations on the device: ensembles of an SDE
model with additive noise (:class:`Model`, :class:`Ensemble`), the built-in
models (:mod:`clphys.sde.models`), the Josephson junction helper
:func:`josephson` and the noisy Kuramoto model :func:`kuramoto`."""

from . import models
from .ensemble import Ensemble, EnsembleState, RunResult
from .junction import JosephsonResult, josephson
from .model import Model
from .oscillators import Kuramoto, KuramotoResult, KuramotoSweep, kuramoto, kuramoto_sweep

__all__ = ["Model", "Ensemble", "EnsembleState", "RunResult", "models", "josephson",
           "JosephsonResult", "kuramoto", "Kuramoto", "KuramotoResult", "kuramoto_sweep",
           "KuramotoSweep"]
