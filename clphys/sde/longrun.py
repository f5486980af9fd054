"""The loop of a long SDE run that can be checkpointed and resumed (the
Josephson sweep, the Kuramoto order parameter): the runtime's sliced loop
(:func:`clphys.runtime.run_sliced`) in chunks that end where the run takes
its samples, with the state written every `checkpoint_every` seconds and on
Ctrl-C.

Nothing here is SDE specific but the contract of the object: ``obj.step``
counts completed steps, and ``advance(n, report)`` does exactly n more
(Ctrl-C inside raises :class:`Interrupted` with the object at its last
completed step and the samples taken so far as ``exc.partial``).
"""

from __future__ import annotations

import math
import time

from .. import _validate as check
from ..progress import Progress
from ..runtime.checkpoint import save_checkpoint
from ..runtime.files import check_output_path
from ..runtime.longrun import Interrupted, interrupt_deferred, run_sliced

__all__ = ["checkpointed_run", "check_checkpoint_args"]


def check_checkpoint_args(checkpoint, checkpoint_every):
    """The checkpoint path (or None) and interval, checked before any work."""
    if checkpoint is not None:
        checkpoint = check_output_path(checkpoint, "checkpoint", (".npz",))
    every = check.real("checkpoint_every", checkpoint_every, 0.0)
    return checkpoint, every


def checkpointed_run(obj, total, align, advance, record, save, *, progress=None, label="",
                     checkpoint=None, checkpoint_every=60.0, boundaries=()):
    """Advance `obj` from ``obj.step`` to `total` steps.

    advance(n, report)
        do n steps, never crossing a multiple of `align` or one of
        `boundaries` (the run's samples and phase changes lie there);
        ``report`` is a progress callable for the inner run.
    record(partial)
        keep the samples of an interrupted inner run (``exc.partial``).
    save()
        -> (kind, header, arrays) of the current state for
        :func:`clphys.runtime.checkpoint.save_checkpoint`.

    On Ctrl-C the state is written to `checkpoint` (when given) and
    :class:`Interrupted` is raised with ``kept`` saying so; if the work was
    complete by then, the run simply ends.
    """
    checkpoint, checkpoint_every = check_checkpoint_args(checkpoint, checkpoint_every)
    cuts = sorted(b for b in boundaries if obj.step < b < total)
    bar = Progress(total, progress, label=label)
    bar.update(obj.step)
    base = [obj.step]
    last_save = [time.monotonic()]

    def report(done, _total):
        bar.update(base[0] + done - bar.done)

    def piece(end):
        """Steps up to `end`, cut at the boundaries."""
        while obj.step < end:
            stop = min([end] + [b for b in cuts if b > obj.step])
            base[0] = obj.step
            advance(stop - obj.step, report)

    def write():
        kind, header, arrays = save()
        save_checkpoint(checkpoint, kind, header, arrays)
        last_save[0] = time.monotonic()

    first = obj.step
    aligned = min(total, -(-first // align) * align)
    n_blocks = math.ceil((total - aligned) / align)

    def blocks(i, n):
        piece(min(total, aligned + (i + n) * align))
        if checkpoint and obj.step < total and time.monotonic() - last_save[0] >= checkpoint_every:
            write()

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
            kept = "nothing kept (give a checkpoint file to keep an interrupted run)"
            if checkpoint:
                write()
                kept = f"state written to {checkpoint}; resume from it to continue"
            stop = Interrupted(obj.step, total, "time steps")
            stop.kept = kept
            raise stop from None
