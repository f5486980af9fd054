"""Progress reporting for long runs.

``progress`` arguments accept None (a bar on stderr only when it is a terminal
and the run is long), True/False, or a callable ``f(done, total)``.

A run that will take long on a CPU device says so once, early (after about a
second of measured work), with the estimate: :class:`LongRunWarning`, whatever
``progress`` is.  :func:`clphys.runtime.run_sliced` reports every slice of
device work and its seconds to the outermost open :class:`Progress` (the whole
job's), which makes the estimate from them.
"""

from __future__ import annotations

import sys
import time
import warnings

__all__ = ["LongRunWarning", "Progress", "check_progress", "observe_slice"]

# A CPU run whose estimate exceeds this many seconds warns (after WARN_AFTER seconds)
LONG_RUN_SECONDS = 60.0
WARN_AFTER = 1.0


class LongRunWarning(UserWarning):
    """A run that will take long on this (CPU) device, with the estimate."""


def check_progress(progress: object, name: str = "progress") -> object:
    """TypeError unless `progress` is None, True/False or a callable f(done, total):
    for public functions to call before any work."""
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise TypeError(f"{name} must be None, True, False or a callable f(done, total), "
                        f"got {progress!r}")
    return progress


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"


class Progress:
    """Counts `total` units of a job; a bar on stderr, a callable or nothing.

    The time left is estimated from the rate of the recent past (the last quarter of
    the time so far, at least 3 s), so a job whose later units are slower (a second,
    costlier pass) is not promised the first units' speed for long; :meth:`part`
    counts a costlier pass's units with a weight."""

    _open: list = []                     # the Progress objects not closed, outermost first

    def __init__(self, total: int, progress: object = None, label: str = "", min_seconds: float = 2.0):
        self.total, self.label, self.done = max(int(total), 1), label, 0
        self._callback = progress if callable(progress) else None
        self._bar = progress is True or (progress is None and sys.stderr.isatty())
        self._start = time.perf_counter()
        self._last = 0.0
        self._min = 0.0 if progress is True else min_seconds
        self._shown = False
        self._history = [(0.0, 0)]       # (seconds, done) of recent updates
        self._measured = (0.0, 0)        # seconds and number of the slices measured
        self._unit_seconds = float("inf")  # the fastest measured slice's seconds per unit
        self._seen = 0                   # units done at the last slice reported
        self._judged = False             # the long-run check was made
        self.updated = time.monotonic()    # time.monotonic() of the last update()
        Progress._open.append(self)

    def update(self, n: int = 1) -> None:
        self.done = min(self.done + n, self.total)
        self.updated = time.monotonic()
        now = time.perf_counter() - self._start
        hist = self._history
        hist.append((now, self.done))
        window = max(3.0, 0.25 * now)
        while len(hist) > 2 and now - hist[1][0] >= window:
            hist.pop(0)
        if self._callback is not None:
            self._callback(self.done, self.total)
        if self._bar:
            if now >= self._min and (now - self._last > 0.2 or self.done == self.total):
                self._last, self._shown = now, True
                frac = self.done / self.total
                bar = "#" * int(30 * frac)
                left = self.left()
                left_text = f"{left:6.1f}s" if left < 120 else f"{_duration(left):>7}"
                sys.stderr.write(f"\r{self.label} [{bar:<30}] {100 * frac:5.1f}% "
                                 f"{now:6.1f}s elapsed, {left_text} left")
                sys.stderr.flush()

    def left(self) -> float:
        """Seconds left at the recent rate (0 before any unit is done)."""
        (t0, d0), (t1, d1) = self._history[0], self._history[-1]
        if d1 <= d0 or t1 <= t0:
            return 0.0
        return (self.total - self.done) * (t1 - t0) / (d1 - d0)

    def part(self, weight: int) -> "_Part":
        """A view that counts each unit as `weight` units of this one (a pass whose units
        cost `weight` times as much)."""
        return _Part(self, weight)

    def judge(self, device_name: str, seconds: float, first: bool) -> None:
        """After a slice of work on a CPU device that took `seconds` (`first`: the first
        of its pass, which may include building the kernels: not measured): once WARN_AFTER
        seconds of at least two slices are measured, LongRunWarning if the job's estimate
        exceeds LONG_RUN_SECONDS.

        The estimate takes the fastest slice's time per unit: a later slice can still
        include compiling (PoCL compiles a kernel for each new launch shape when it first
        runs), and a small slice pays the launches' overhead; neither makes work faster."""
        units, self._seen = self.done - self._seen, self.done
        if self._judged or self.done >= self.total:
            return
        if not first and units > 0:
            self._measured = (self._measured[0] + seconds, self._measured[1] + 1)
            self._unit_seconds = min(self._unit_seconds, seconds / units)
        spent, slices = self._measured
        if spent < WARN_AFTER or slices < 2:
            return
        self._judged = True
        now = time.perf_counter() - self._start
        total = now + (self.total - self.done) * self._unit_seconds
        if total > LONG_RUN_SECONDS:
            what = self.label or "this run"
            warnings.warn(f"{what}: about {_duration(total)} on {device_name} (a CPU device; "
                          f"estimated after {now:.0f} s, {100 * self.done / self.total:.1f} % "
                          f"done); a GPU does such work 10-100x faster.  Ctrl-C stops it "
                          f"within about a second", LongRunWarning, stacklevel=4)

    @classmethod
    def job(cls, within: float = 30.0) -> Progress | None:
        """The outermost open Progress that counted in the last `within` seconds (one
        left open by a caller is passed over)."""
        now = time.monotonic()
        return next((p for p in cls._open if now - p.updated < within), None)

    def close(self) -> None:
        if self in Progress._open:
            Progress._open.remove(self)
        if self._shown:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self._shown = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class _Part:
    """Progress.part(): units of a costlier pass, counted with a weight."""

    def __init__(self, whole: Progress, weight: int):
        self.whole, self.weight = whole, int(weight)

    def update(self, n: int = 1) -> None:
        self.whole.update(n * self.weight)

    def close(self) -> None:
        pass


def observe_slice(device_name: str, is_cpu: bool, seconds: float, first: bool) -> None:
    """After a slice of device work that took `seconds` (`first`: the first of a pass):
    the job (the outermost open Progress still counting: one left open by a caller is
    passed over) judges whether it is a long CPU run."""
    if is_cpu:
        job = Progress.job()
        if job is not None:
            job.judge(device_name, seconds, first)
