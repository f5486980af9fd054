"""Time-series analysis on the device: Hurst exponent, autocorrelation, pattern
conformity, detrended fluctuation analysis (DFA, MF-DFA), and the anti-correlated random
walk.  See docs/timeseries.md."""

from .acrw import acrw, acrw_numpy
from .correlation import (
    AutocorrelationResult,
    HurstResult,
    LongMemoryWarning,
    autocorrelation,
    hurst,
)
from .dfa import DFAResult, MFDFAResult, ZeroVarianceWarning, dfa, mfdfa
from .pattern import PatternConformity, pattern_conformity

__all__ = ["hurst", "autocorrelation", "pattern_conformity", "acrw", "acrw_numpy", "HurstResult",
           "AutocorrelationResult", "PatternConformity", "LongMemoryWarning", "dfa", "mfdfa",
           "DFAResult", "MFDFAResult", "ZeroVarianceWarning"]
