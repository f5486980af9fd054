"""Time-series analysis on the device: Hurst exponent, autocorrelation, pattern
conformity, and the anti-correlated random walk.  See docs/timeseries.md."""

from .correlation import AutocorrelationResult, HurstResult, autocorrelation, hurst

__all__ = ["hurst", "autocorrelation", "HurstResult", "AutocorrelationResult"]
