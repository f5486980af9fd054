"""Output files: checked before any computation, written under a temporary
name and renamed into place, so an interrupted or failed run never leaves a
file that looks complete."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence

__all__ = ["check_output_path", "atomic_output"]


def check_output_path(path: str | os.PathLike, what: str = "output file",
                      suffixes: Sequence[str] | None = None) -> str:
    """ValueError unless `path` can be written (its folder exists and is
    writable, it is not a folder, its suffix is one of `suffixes`)."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ValueError(f"{what}: expected a file name, got {path!r}")
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ValueError(f"{what} {path!r} is a folder, not a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"{what} {path!r}: the folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{what} {path!r}: the folder {folder!r} is not writable")
    if suffixes and not path.lower().endswith(tuple(s.lower() for s in suffixes)):
        raise ValueError(f"{what} {path!r} must end in one of {', '.join(suffixes)}")
    return path


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[str]:
    """``with atomic_output("out.npz") as tmp:`` write to `tmp` (same folder,
    same suffix, so savefig and np.savez see the right format); on success it
    is renamed to `path`, on any exception (Ctrl-C included) it is removed."""
    path = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(path))
    stem, suffix = os.path.splitext(name)
    fd, tmp = tempfile.mkstemp(prefix=f".{stem}.", suffix=f".part{suffix}", dir=folder)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())       # mkstemp makes it 0600; give it a new file's mode
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
