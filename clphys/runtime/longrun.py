"""The long-run loop every domain uses: work in slices bounded in time.

Device work is queued a slice at a time and the queue is finished after each
slice, so a progress bar counts completed work (not queued work) and Ctrl-C
is acted on at the next slice boundary, within about `target_seconds`.

Ctrl-C inside :func:`run_sliced` is deferred to the end of the running slice
and then raised as :class:`Interrupted` (a ``KeyboardInterrupt``) that says
how many units were completed, so the caller can keep an exact partial
result or write a checkpoint. A second Ctrl-C interrupts at once.
"""

from __future__ import annotations

import signal
import threading
import time

import pyopencl as cl

from ..progress import Progress, observe_slice

__all__ = ["Interrupted", "run_sliced", "interrupt_deferred"]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C at a slice boundary: `done` of `total` units are complete."""

    def __init__(self, done: int, total: int, what: str = ""):
        super().__init__(f"interrupted after {done} of {total} {what}".rstrip())
        self.done, self.total, self.what = int(done), int(total), what


class _Deferral:
    """SIGINT sets a flag instead of raising (main thread only; nested uses share it)."""

    depth = 0
    flag = False
    previous = None

    @classmethod
    def enter(cls):
        if threading.current_thread() is not threading.main_thread():
            return False
        if cls.depth == 0:
            if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
                return False      # somebody else handles SIGINT: leave it to them
            cls.flag = False
            cls.previous = signal.signal(signal.SIGINT, cls._handler)
        cls.depth += 1
        return True

    @classmethod
    def leave(cls):
        cls.depth -= 1
        if cls.depth == 0:
            signal.signal(signal.SIGINT, cls.previous)

    @classmethod
    def _handler(cls, signum, frame):
        if cls.flag:              # second Ctrl-C: stop now
            raise KeyboardInterrupt
        cls.flag = True


class interrupt_deferred:
    """``with interrupt_deferred() as pending:`` -- ``pending()`` is True once
    Ctrl-C was pressed inside the block. For loops that are not slices of one
    run (e.g. a scan over several runs) but want to stop between items."""

    def __enter__(self):
        self._active = _Deferral.enter()
        return lambda: self._active and _Deferral.flag

    def __exit__(self, *exc):
        if self._active:
            _Deferral.leave()
        return False


def run_sliced(total: int, advance, queue, *, progress=None, label: str = "", what: str = "",
               target_seconds: float = 0.25, first: int = 1, largest: int | None = None,
               bar: Progress | None = None, comm=None) -> int:
    """Do `total` units of work: ``advance(start, n)`` enqueues units
    [start, start + n); after each call the queue is finished.

    The slice size starts at `first` units and is doubled or halved so a slice
    takes about `target_seconds`; `largest` caps it (e.g. a buffer's capacity).
    `progress` is as everywhere (None, bool or a callable(done, total)); pass
    `bar` instead to count into an enclosing :class:`Progress`. Returns
    `total`; raises :class:`Interrupted` with the completed count on Ctrl-C.

    comm (an mpi4py communicator, for work whose slices talk to other ranks):
    every rank takes the same slices (sized by the slowest rank's time) and
    Ctrl-C on any rank stops every rank after the same slice, so no rank is
    left waiting for one that stopped.

    Work on a CPU device (not Oclgrind) that will take long says so once, about a
    second in: see :class:`clphys.progress.LongRunWarning`.
    """
    total = int(total)
    size = max(1, int(first))
    if comm is not None:
        size = comm.bcast(size, root=0)       # the same slices on every rank
    cap = max(1, int(largest)) if largest is not None else None
    done = 0
    own = bar is None
    meter = Progress(total, progress, label=label) if own else bar
    on_cpu = queue is not None and int(queue.device.type) == cl.device_type.CPU
    device_name = queue.device.name.strip() if on_cpu else ""
    with interrupt_deferred() as pending:
        try:
            while done < total:
                n = min(size, total - done) if cap is None else min(size, cap, total - done)
                t0 = time.perf_counter()
                advance(done, n)
                if queue is not None:
                    queue.finish()
                elapsed = time.perf_counter() - t0
                done += n
                meter.update(n)
                observe_slice(device_name, on_cpu, elapsed, done == n)
                stop = pending()
                if comm is not None:
                    views = comm.allgather((elapsed, bool(stop)))
                    elapsed, stop = max(v[0] for v in views), any(v[1] for v in views)
                if stop:
                    raise Interrupted(done, total, what)
                if elapsed < 0.5 * target_seconds and n == size:
                    size *= 2
                elif elapsed > 2 * target_seconds and size > 1:
                    size = max(1, int(size * target_seconds / elapsed))
        finally:
            if own:
                meter.close()
    return total
