"""The time-series entries through their internal plans, with choices forced that the
public signatures do not offer (accumulate="compensated" on an fp64 device, a pair or
pattern code shape, an upload path, streaming).  MARKS collects the timeline marks of the
calls made through hurst_with() and acf_with()."""

from clphys.timeseries import correlation, pattern
from clphys.timeseries.dfa import plan_dfa, plan_mfdfa
from clphys.timeseries.dfa import run_plan as run_fluctuations

MARKS: list[tuple[str, float]] = []


def hurst_with(*args, **plan):
    """hurst(*args) with plan_hurst's keyword choices (accumulate=, pair_shape=, ...)."""
    res, timeline = correlation.run_plan(correlation.plan_hurst(*args, **plan))
    MARKS.extend(timeline.marks)
    return res


def acf_with(*args, **plan):
    """autocorrelation(*args) with plan_autocorrelation's keyword choices."""
    res, timeline = correlation.run_plan(correlation.plan_autocorrelation(*args, **plan))
    MARKS.extend(timeline.marks)
    return res


def traced(fn):
    """(fn(), the names of the timeline marks of its calls through the plans)."""
    MARKS.clear()
    res = fn()
    return res, [name for name, _ in MARKS]


def pc_with(*args, **plan):
    """pattern_conformity(*args) with plan_pattern_conformity's choices (shape=, ...)."""
    return pattern.run_plan(pattern.plan_pattern_conformity(*args, **plan))


def dfa_with(*args, **plan):
    """dfa(*args) with plan_dfa's choices (accumulate=)."""
    return run_fluctuations(plan_dfa(*args, **plan))


def mfdfa_with(*args, **plan):
    """mfdfa(*args) with plan_mfdfa's choices (accumulate=)."""
    return run_fluctuations(plan_mfdfa(*args, **plan))
