"""The long-run driver every domain and every ``clphys`` command uses: work in
slices bounded in time, with checkpoints.

Device work is queued a slice at a time and the queue is finished after each
slice, so a progress bar counts completed work (not queued work) and Ctrl-C
is acted on at the next slice boundary, within about `target_seconds`.

Ctrl-C inside :func:`run_sliced` is deferred to the end of the running slice
and then raised as :class:`Interrupted` (a ``KeyboardInterrupt``) that says
how many units were completed, so the caller can keep an exact partial
result or write a checkpoint. A second Ctrl-C interrupts at once.

Checkpoints of a long run follow one rule everywhere (:class:`Checkpoints`):
the state is written every `CHECKPOINT_EVERY` seconds (``--checkpoint-every``
on the command line), at the end and on Ctrl-C; :func:`checkpointed_run`
drives an object that advances in steps through it.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from typing import Any

import pyopencl as cl

from .. import _validate as check
from ..progress import Progress, observe_slice
from .checkpoint import save_checkpoint
from .files import check_output_path

__all__ = ["Interrupted", "run_sliced", "interrupt_deferred", "CHECKPOINT_EVERY", "Checkpoints",
           "checkpointed_run", "check_checkpoint_args"]

# seconds between the periodic checkpoint writes of every long run (one default everywhere)
CHECKPOINT_EVERY = 60.0


class Interrupted(KeyboardInterrupt):
    """Ctrl-C at a slice boundary: `done` of `total` units are complete."""

    # set by whoever catches it on the way up, where they have them
    partial: Any          # the result so far
    local: Any            # this rank's record so far (sde ensembles)

    def __init__(self, done: int, total: int, what: str = ""):
        super().__init__(f"interrupted after {done} of {total} {what}".rstrip())
        self.done, self.total, self.what = int(done), int(total), what
        self.kept = ""            # what was kept, in words (set by whoever kept it)


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
               bar: Progress | None = None, comm=None, until=None) -> int:
    """Do `total` units of work: ``advance(start, n)`` enqueues units
    [start, start + n); after each call the queue is finished.
    `until`: a callable asked after every slice; when it returns True the
    work stops there (a time budget).

    The slice size starts at `first` units and is doubled or halved so a slice
    takes about `target_seconds`; `largest` caps it (e.g. a buffer's capacity).
    `progress` is as everywhere (None, bool or a callable(done, total)); pass
    `bar` instead to count into an enclosing :class:`Progress`. Returns the
    units done (`total` unless `until` ended the work); raises
    :class:`Interrupted` with the completed count on Ctrl-C.

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
    meter = Progress(total, progress, label=label) if bar is None else bar
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
                halt = until is not None and bool(until())
                if comm is not None:             # every rank stops after the same slice
                    views = comm.allgather((elapsed, bool(stop), halt))
                    elapsed, stop = max(v[0] for v in views), any(v[1] for v in views)
                    halt = any(v[2] for v in views)
                if stop:
                    raise Interrupted(done, total, what)
                if halt:
                    break
                if elapsed < 0.5 * target_seconds and n == size:
                    size *= 2
                elif elapsed > 2 * target_seconds and size > 1:
                    size = max(1, int(size * target_seconds / elapsed))
        finally:
            if own:
                meter.close()
    return done


class Checkpoints:
    """The periodic checkpoints of one long run: ``write()`` stores the state
    (a callable doing the write), :meth:`maybe` does so when `every` seconds
    have passed since the last write.

    Used as a context manager, :class:`Interrupted` (Ctrl-C at a slice
    boundary) inside the block writes the state once more and sets ``kept``
    on the exception, the line the command prints (with
    no path: that nothing was kept). With `comm` (saving is collective) rank
    0's clock decides for every rank.
    """

    def __init__(self, path, write, every: float = CHECKPOINT_EVERY, comm=None):
        self.path, self._write, self.every, self.comm = path, write, float(every), comm
        self.last = time.monotonic()

    def due(self) -> bool:
        due = bool(self.path) and time.monotonic() - self.last >= self.every
        if self.path and self.comm is not None:
            due = self.comm.bcast(due, root=0)
        return due

    def write(self):
        if self.path:
            self._write()
            self.last = time.monotonic()

    def maybe(self, *_ignored):
        """Write when due (any arguments, e.g. a callback's, are ignored)."""
        if self.due():
            self.write()

    def kept(self) -> str:
        """What an interrupted run keeps, in one line."""
        if self.path:
            return f"state saved in {self.path}: continue with --resume {self.path}"
        return "nothing written (--checkpoint FILE keeps the state)"

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        # only a stop at a slice boundary leaves a consistent state; a second Ctrl-C
        # (a bare KeyboardInterrupt) may come in the middle of a slice
        if kind is not None and issubclass(kind, Interrupted) and exc is not None:
            self.write()
            exc.kept = self.kept()
        return False


def check_checkpoint_args(checkpoint, checkpoint_every):
    """The checkpoint path (or None) and interval (seconds, >= 0), checked
    before any work."""
    if checkpoint is not None:
        checkpoint = check_output_path(checkpoint, "checkpoint", (".npz",))
    every = check.real("checkpoint_every", checkpoint_every, 0.0)
    return checkpoint, every


def checkpointed_run(obj, total, align, advance, record, save, *, progress=None, label="",
                     checkpoint=None, checkpoint_every=CHECKPOINT_EVERY, boundaries=()):
    """Advance `obj` from ``obj.step`` to `total` steps, with checkpoints.

    Parameters
    ----------
    obj
        Counts completed steps in ``obj.step``.
    total, align : int
        The step to reach; chunks end at multiples of `align` (and at
        `boundaries`), where the run takes its samples and changes phase.
    advance : callable
        ``advance(n, report)`` does n steps, never crossing a chunk end;
        ``report`` is a progress callable for the inner run. Ctrl-C inside
        raises :class:`Interrupted` at the last completed step, with the
        samples taken so far as ``exc.partial``.
    record : callable
        ``record(partial)`` keeps the samples of an interrupted inner run.
    save : callable
        ``save() -> (kind, header, arrays)`` of the current state, for
        :func:`clphys.runtime.checkpoint.save_checkpoint`.
    progress, label
        As everywhere (:class:`clphys.progress.Progress`).
    checkpoint, checkpoint_every
        The file written every `checkpoint_every` seconds and on Ctrl-C.

    Raises
    ------
    Interrupted
        On Ctrl-C before the end, with ``kept`` saying what was written.
    """
    checkpoint, checkpoint_every = check_checkpoint_args(checkpoint, checkpoint_every)
    cuts = sorted(b for b in boundaries if obj.step < b < total)
    bar = Progress(total, progress, label=label)
    bar.update(obj.step)
    base = [obj.step]
    saves = Checkpoints(checkpoint, lambda: save_checkpoint(checkpoint, *save()), checkpoint_every)

    def report(done, _total):
        bar.update(base[0] + done - bar.done)

    def piece(end):
        """Steps up to `end`, cut at the boundaries."""
        while obj.step < end:
            stop = min([end] + [b for b in cuts if b > obj.step])
            base[0] = obj.step
            advance(stop - obj.step, report)

    first = obj.step
    aligned = min(total, -(-first // align) * align)
    n_blocks = math.ceil((total - aligned) / align)

    def blocks(i, n):
        piece(min(total, aligned + (i + n) * align))
        if obj.step < total:
            saves.maybe()

    with interrupt_deferred(), bar:
        try:
            piece(aligned)                       # a resumed run first completes its block
            if n_blocks:
                run_sliced(n_blocks, blocks, None, progress=False,
                           target_seconds=max(0.25, checkpoint_every / 2) if checkpoint else 30.0)
        except Interrupted as exc:
            partial = getattr(exc, "partial", None)
            if partial is not None:
                record(partial)
            if obj.step >= total:
                return
            saves.write()
            stop = Interrupted(obj.step, total, "time steps")
            stop.kept = (f"state written to {checkpoint}; resume from it to continue" if checkpoint else
                         "nothing kept (give a checkpoint file to keep an interrupted run)")
            raise stop from None
