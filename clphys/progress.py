"""Progress reporting for long runs.

``progress`` arguments accept None (a bar on stderr only when it is a terminal
and the run is long), True/False, or a callable ``f(done, total)``.
"""

from __future__ import annotations

import sys
import time


def check_progress(progress, name: str = "progress"):
    """TypeError unless `progress` is None, True/False or a callable f(done, total):
    for public functions to call before any work."""
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise TypeError(f"{name} must be None, True, False or a callable f(done, total), "
                        f"got {progress!r}")
    return progress


class Progress:
    def __init__(self, total: int, progress=None, label: str = "", min_seconds: float = 2.0):
        self.total, self.label, self.done = max(int(total), 1), label, 0
        self._callback = progress if callable(progress) else None
        self._bar = progress is True or (progress is None and sys.stderr.isatty())
        self._start = time.perf_counter()
        self._last = 0.0
        self._min = 0.0 if progress is True else min_seconds
        self._shown = False

    def update(self, n: int = 1):
        self.done = min(self.done + n, self.total)
        if self._callback is not None:
            self._callback(self.done, self.total)
        if self._bar:
            now = time.perf_counter() - self._start
            if now >= self._min and (now - self._last > 0.2 or self.done == self.total):
                self._last, self._shown = now, True
                frac = self.done / self.total
                eta = now / frac - now if frac > 0 else 0.0
                bar = "#" * int(30 * frac)
                sys.stderr.write(f"\r{self.label} [{bar:<30}] {100 * frac:5.1f}% "
                                 f"{now:6.1f}s elapsed, {eta:6.1f}s left")
                sys.stderr.flush()

    def close(self):
        if self._shown:
            sys.stderr.write("\n")
            sys.stderr.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
