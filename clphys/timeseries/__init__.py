"""Time-series analysis on the device: Hurst exponent, autocorrelation, pattern
conformity, and the anti-correlated random walk.  See docs/timeseries.md."""

from .acrw import acrw, acrw_numpy
from .correlation import (AutocorrelationResult, HurstResult, LongMemoryWarning,
                          autocorrelation, hurst)
from .pattern import PatternConformity, pattern_conformity

__all__ = ["hurst", "autocorrelation", "pattern_conformity", "acrw", "acrw_numpy", "HurstResult",
           "AutocorrelationResult", "PatternConformity", "LongMemoryWarning"]
