"""Matplotlib, imported only when a plot is asked for."""

from typing import Any


def pyplot() -> Any:
    """matplotlib.pyplot with a non-interactive backend, or a clear error."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plots need matplotlib: pip install 'clphys[plot]'") from None
    return plt
