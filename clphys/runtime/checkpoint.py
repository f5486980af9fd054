"""The one checkpoint format of every resumable object.

A checkpoint is an ``.npz`` holding plain numeric arrays and one JSON header
(array ``__header__``, UTF-8 bytes): format name and version, clphys
version, the object's kind, and whatever the object records (algorithm, RNG,
sizes, counters). It loads with ``allow_pickle=False``, and every field is
validated on load: a missing or mistyped field, an array of another shape or
dtype, a file of another kind or of a newer format version is a
:class:`CheckpointError` that names the field.

    save_checkpoint(path, "ising-ensemble", header, {"spins": s, "counters": c})
    header, arrays = load_checkpoint(path, "ising-ensemble",
                                     {"spins": ("int8", ("replicas", "L", "L")),
                                      "counters": ("uint64", (None,))})

Shapes in a spec may name header fields (resolved after the header is read),
give integers, or ``None`` for any length.
"""

from __future__ import annotations

import json
import numbers
import os
import zipfile

import numpy as np

from .files import atomic_output

__all__ = ["FORMAT", "VERSION", "CheckpointError", "save_checkpoint", "load_checkpoint", "check_arrays",
           "field"]

FORMAT = "clphys-checkpoint"
VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used, and why."""


def _version():
    from .. import __version__
    return __version__


def save_checkpoint(path, kind: str, header: dict, arrays: dict) -> None:
    """Write `arrays` (numeric NumPy arrays) and `header` (JSON-able) to
    `path` atomically (temporary name, then rename)."""
    path = os.fspath(path)
    if not path.endswith(".npz"):
        raise ValueError(f"checkpoint file {path!r} must end in .npz")
    for name, arr in arrays.items():
        a = np.asarray(arr)
        if a.dtype.kind not in "biuf" or name.startswith("__"):
            raise ValueError(f"checkpoint array {name!r} must be numeric, got dtype {a.dtype}")
    full = {"format": FORMAT, "version": VERSION, "clphys": _version(), "kind": kind,
            "arrays": {k: {"dtype": str(np.asarray(v).dtype), "shape": list(np.shape(v))}
                       for k, v in arrays.items()}, **header}
    blob = np.frombuffer(json.dumps(full, sort_keys=True).encode(), dtype=np.uint8)
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, __header__=blob, **{k: np.asarray(v) for k, v in arrays.items()})


def load_checkpoint(path, kind: str, spec: dict | None = None):
    """(header dict, {name: array}) of the checkpoint at `path`, checked to be
    of `kind`, of a format version this clphys reads, and to hold exactly the
    arrays of `spec` ({name: (dtype, shape)}) when given."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path!r} does not exist")
    try:
        with np.load(path, allow_pickle=False) as npz:
            files = {k: npz[k] for k in npz.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as exc:
        raise CheckpointError(f"checkpoint {path!r} is not a complete clphys checkpoint "
                              f"(truncated or not an .npz): {exc}") from None
    if "__header__" not in files:
        raise CheckpointError(f"checkpoint {path!r} has no clphys header")
    try:
        header = json.loads(files.pop("__header__").tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint {path!r}: unreadable header ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path!r} is not a {FORMAT} file")
    version = header.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise CheckpointError(f"checkpoint {path!r} has format version {version!r}; this clphys "
                              f"({_version()}) reads versions up to {VERSION}: upgrade clphys")
    if header.get("kind") != kind:
        raise CheckpointError(f"checkpoint {path!r} holds a {header.get('kind')!r}, not a {kind!r}")
    if spec is not None:
        check_arrays(path, header, files, spec)
    return header, files


def check_arrays(path, header: dict, files: dict, spec: dict) -> None:
    """CheckpointError unless `files` holds exactly the arrays of `spec`
    ({name: (dtype, shape)}, shapes as in :func:`load_checkpoint`). For
    objects whose dtypes depend on the header: load with ``spec=None``, read
    the header, then check."""
    extra = sorted(set(files) - set(spec))
    if extra:
        raise CheckpointError(f"checkpoint {path!r} has unexpected arrays {extra}")
    for name, (dtype, shape) in spec.items():
        if name not in files:
            raise CheckpointError(f"checkpoint {path!r} lacks the array {name!r}")
        arr = files[name]
        if arr.dtype != np.dtype(dtype):
            raise CheckpointError(f"checkpoint {path!r}: array {name!r} has dtype {arr.dtype}, "
                                  f"expected {np.dtype(dtype)}")
        want = tuple(header_dim(header, d, path) for d in shape)
        if len(want) != arr.ndim or any(w is not None and w != s for w, s in zip(want, arr.shape)):
            raise CheckpointError(f"checkpoint {path!r}: array {name!r} has shape {arr.shape}, "
                                  f"expected {tuple('any' if w is None else w for w in want)}")


def header_dim(header, dim, path=""):
    if dim is None or isinstance(dim, int):
        return dim
    return field(header, dim, int, minimum=0, path=path)


def field(header: dict, name: str, types, *, minimum=None, choices=None, path=""):
    """header[name], checked: present, of `types` (int, float, str, bool,
    list), >= `minimum`, in `choices`; CheckpointError naming it otherwise."""
    where = f"checkpoint {path!r}: " if path else "checkpoint: "
    if name not in header:
        raise CheckpointError(f"{where}header lacks the field {name!r}")
    value = header[name]
    types = types if isinstance(types, tuple) else (types,)
    ok = any((t is float and isinstance(value, numbers.Real) and not isinstance(value, bool))
             or (t is int and isinstance(value, int) and not isinstance(value, bool))
             or (t not in (int, float) and isinstance(value, t)) for t in types)
    if not ok:
        raise CheckpointError(f"{where}field {name!r} = {value!r} is not of type "
                              f"{' or '.join(t.__name__ for t in types)}")
    if minimum is not None and value < minimum:
        raise CheckpointError(f"{where}field {name!r} = {value!r} is below {minimum}")
    if choices is not None and value not in choices:
        raise CheckpointError(f"{where}field {name!r} = {value!r} is not one of {list(choices)}")
    return value
