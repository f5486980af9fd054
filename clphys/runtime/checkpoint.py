"""The one checkpoint format of every resumable object.

A checkpoint is an ``.npz`` holding plain numeric arrays and one JSON header
(array ``__header__``, UTF-8 bytes): format name and version, clphys
version, the object's kind, the dtype and shape of every array, whatever the
object records (algorithm, RNG, sizes, counters), and a SHA-256 digest of
the header and of every array (field ``sha256``).

On load, in this order: the file must be a zip of ``.npy`` members of plain
numbers whose sizes match what they declare (a bare ``.npy``, a folder, text,
a pickle, an empty or truncated file are refused before anything is
allocated); the header must be of this format and of a version this clphys
reads; the digests must match (a file changed or damaged after it was
written is refused, naming the array); the arrays must be those the header
lists; then the object checks the meaning of every field. Any failure is a
:class:`CheckpointError` that names the file and what is wrong. Files of
format version 1 (clphys before the digests) have no digests: they are read
with every other check.

    save_checkpoint(path, "ising-ensemble", header, {"spins": s, "counters": c})
    header, arrays = load_checkpoint(path, "ising-ensemble",
                                     {"spins": ("int8", ("replicas", "L", "L")),
                                      "counters": ("uint64", (None,))})

Shapes in a spec may name header fields (resolved after the header is read),
give integers, or ``None`` for any length.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import zipfile
from collections.abc import Collection
from typing import Any

import numpy as np

from .._version import __version__
from .files import atomic_output
from .memory import check_host_memory

__all__ = ["FORMAT", "VERSION", "CheckpointError", "save_checkpoint", "load_checkpoint", "check_arrays",
           "field", "finite_arrays"]

FORMAT = "clphys-checkpoint"
VERSION = 2                   # 2: SHA-256 digests of the header and of every array
DIGESTS = "sha256"            # the header field that holds them
RESERVED = ("format", "version", "clphys", "kind", "arrays", DIGESTS)
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_NPY_MAGIC = b"\x93NUMPY"
_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used, and why."""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _header_text(header: dict) -> str:
    """The canonical JSON of a header without its digests (what its digest covers)."""
    return json.dumps({k: v for k, v in header.items() if k != DIGESTS}, sort_keys=True)


def save_checkpoint(path: str | os.PathLike, kind: str, header: dict, arrays: dict) -> None:
    """Write `arrays` (numeric NumPy arrays) and `header` (JSON-able, finite
    numbers) to `path` atomically (temporary name, then rename), with the
    SHA-256 digests of both."""
    path = os.fspath(path)
    if not path.endswith(".npz"):
        raise ValueError(f"checkpoint file {path!r} must end in .npz")
    clash = sorted(set(header) & set(RESERVED))
    if clash:
        raise ValueError(f"checkpoint header fields {clash} are reserved for the format")
    arrays = {name: np.ascontiguousarray(arr) for name, arr in arrays.items()}
    for name, a in arrays.items():
        if a.dtype.kind not in "biuf" or name.startswith("__"):
            raise ValueError(f"checkpoint array {name!r} must be numeric, got dtype {a.dtype}")
    full = {**header, "format": FORMAT, "version": VERSION, "clphys": __version__, "kind": kind,
            "arrays": {k: {"dtype": str(v.dtype), "shape": list(v.shape)} for k, v in arrays.items()}}
    _write(path, full, arrays)


def _write(path, header: dict, arrays: dict) -> None:
    """`header` (complete but for its digests) and `arrays` to `path`, sealed
    with their digests."""
    try:
        text = json.dumps({k: v for k, v in header.items() if k != DIGESTS}, sort_keys=True,
                          allow_nan=False)
    except ValueError as exc:
        raise ValueError(f"checkpoint header holds a number that is not finite ({exc})") from None
    sealed = {**json.loads(text), DIGESTS: {
        "header": _digest(text.encode()),
        "arrays": {k: _digest(np.ascontiguousarray(v).tobytes()) for k, v in arrays.items()}}}
    blob = np.frombuffer(json.dumps(sealed, sort_keys=True).encode(), dtype=np.uint8)
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, __header__=blob, **arrays)


def load_checkpoint(path: str | os.PathLike, kind: str, spec: dict | None = None) -> tuple[dict, dict]:
    """(header dict, {name: array}) of the checkpoint at `path`, checked to be
    a sound file of `kind` (see the module doc), of a format version this
    clphys reads, and to hold exactly the arrays of `spec` ({name: (dtype,
    shape)}) when given."""
    path = os.fspath(path)
    files = _read_npz(path)
    if "__header__" not in files:
        raise CheckpointError(f"checkpoint {path!r} has no clphys header")
    raw = files.pop("__header__")
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise CheckpointError(f"checkpoint {path!r}: its header is {raw.dtype} {raw.shape}, not bytes")
    try:
        header = json.loads(raw.tobytes().decode("utf-8"), parse_constant=_not_finite, parse_float=_finite)
    except _NotFinite as exc:
        raise CheckpointError(f"checkpoint {path!r}: its header holds the number {exc}, which is not "
                              f"finite (clphys never writes one)") from None
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"checkpoint {path!r}: unreadable header ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path!r} is not a {FORMAT} file")
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CheckpointError(f"checkpoint {path!r} has no valid format version ({version!r})")
    if version > VERSION:
        raise CheckpointError(f"checkpoint {path!r} has format version {version!r}; this clphys "
                              f"({__version__}) reads versions up to {VERSION}: upgrade clphys")
    if version >= 2 or DIGESTS in header:
        _verify_digests(path, header, files)
    _check_listed(path, header, files)
    if header.get("kind") != kind:
        raise CheckpointError(f"checkpoint {path!r} holds a {header.get('kind')!r}, not a {kind!r}")
    if spec is not None:
        check_arrays(path, header, files, spec)
    return header, files


class _NotFinite(ValueError):
    pass


def _not_finite(text):
    raise _NotFinite(text)


def _finite(text):
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def _read_npz(path: str) -> dict:
    """{member name without .npy: array} of the .npz at `path`, every member
    checked to be a plain numeric array whose size matches what it declares
    before it is read; CheckpointError for anything else."""
    if os.path.isdir(path):
        raise CheckpointError(f"checkpoint {path!r} is a folder, not a checkpoint file")
    if not os.path.exists(path):
        raise CheckpointError(f"checkpoint {path!r} does not exist")
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path!r} is not a regular file")
    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
    except OSError as exc:
        raise CheckpointError(f"checkpoint {path!r} cannot be read: {exc}") from None
    if not magic:
        raise CheckpointError(f"checkpoint {path!r} is empty (truncated or not an .npz)")
    if magic.startswith(_NPY_MAGIC):
        raise CheckpointError(f"checkpoint {path!r} is a bare .npy array, not a clphys checkpoint (.npz)")
    if not magic.startswith(_ZIP_MAGIC):
        raise CheckpointError(f"checkpoint {path!r} is not a clphys checkpoint (truncated or not an .npz: "
                              f"no zip signature; text, a pickle or another format)")
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            names = [i.filename for i in infos]
            if len(set(names)) != len(names):
                raise ValueError("a member name appears twice")
            sizes = {}
            for info in infos:
                sizes[info.filename] = _npy_size(zf, info)
            try:
                check_host_memory(sum(sizes.values()), f"checkpoint {path!r}", "")
            except ValueError as exc:
                raise CheckpointError(str(exc)) from None
            return {info.filename[:-4]: _read_member(zf, info) for info in infos}
    except CheckpointError:
        raise
    except Exception as exc:        # any failure to parse the file (it is input, not our state)
        raise CheckpointError(f"checkpoint {path!r} is not a complete clphys checkpoint (truncated or "
                              f"not an .npz; {type(exc).__name__}: {exc})") from None


def _npy_size(zf, info) -> int:
    """Bytes of the array of member `info`, from its .npy header, checked
    against the member's size; ValueError if it is not a plain numeric array."""
    if not info.filename.endswith(".npy"):
        raise ValueError(f"member {info.filename!r} is not an .npy array")
    with zf.open(info) as fh:
        version = np.lib.format.read_magic(fh)
        if version not in _NPY_HEADERS:
            raise ValueError(f"member {info.filename!r} has .npy version {version}")
        shape, _fortran, dtype = _NPY_HEADERS[version](fh)
        start = fh.tell()
    if dtype.hasobject or dtype.fields is not None or dtype.kind not in "biuf":
        raise ValueError(f"array {info.filename[:-4]!r} has dtype {dtype}, not plain numbers")
    nbytes = math.prod(shape) * dtype.itemsize
    if start + nbytes != info.file_size:
        raise ValueError(f"array {info.filename[:-4]!r} declares {shape} {dtype} ({nbytes} bytes) but "
                         f"holds {info.file_size - start}")
    return nbytes


def _read_member(zf, info) -> np.ndarray:
    with zf.open(info) as fh:
        arr = np.lib.format.read_array(fh, allow_pickle=False)
        if fh.read(1):
            raise ValueError(f"array {info.filename[:-4]!r} has trailing bytes")
    return arr


def _verify_digests(path, header: dict, files: dict) -> None:
    where = f"checkpoint {path!r}"
    sums: Any = header.get(DIGESTS)
    ok = (isinstance(sums, dict) and set(sums) == {"header", "arrays"} and isinstance(sums["header"], str)
          and isinstance(sums["arrays"], dict) and all(isinstance(v, str) for v in sums["arrays"].values()))
    if not ok:
        raise CheckpointError(f"{where}: its header has no valid {DIGESTS!r} digests (a format "
                              f"version {header['version']} file must have them): damaged or edited")
    if _digest(_header_text(header).encode()) != sums["header"]:
        raise CheckpointError(f"{where}: the header does not match its SHA-256 digest: the file was "
                              f"changed or damaged after it was written")
    for name in sorted(set(files) | set(sums["arrays"])):
        if name not in files:
            raise CheckpointError(f"{where} lacks the array {name!r}, which it was written with")
        if name not in sums["arrays"]:
            raise CheckpointError(f"{where}: array {name!r} was not in the file when it was written")
        if _digest(np.ascontiguousarray(files[name]).tobytes()) != sums["arrays"][name]:
            raise CheckpointError(f"{where}: array {name!r} does not match its SHA-256 digest: the file "
                                  f"was changed or damaged after it was written")


def _check_listed(path, header: dict, files: dict) -> None:
    """The arrays are exactly those the header lists, of the dtypes and shapes it records."""
    where = f"checkpoint {path!r}"
    listed = header.get("arrays")
    if not isinstance(listed, dict):
        raise CheckpointError(f"{where}: its header does not list its arrays")
    for name in sorted(set(files) | set(listed)):
        if name not in files:
            raise CheckpointError(f"{where} lacks the array {name!r}")
        if name not in listed:
            raise CheckpointError(f"{where} has an array {name!r} its header does not list")
        rec, arr = listed[name], files[name]
        if rec != {"dtype": str(arr.dtype), "shape": list(arr.shape)}:
            raise CheckpointError(f"{where}: array {name!r} is {arr.dtype} {arr.shape}, its header "
                                  f"records {rec!r}")


def finite_arrays(path: str | os.PathLike, files: dict, *names: str) -> None:
    """CheckpointError unless every value of the arrays `names` is finite."""
    for name in names:
        arr = files[name]
        bad = ~np.isfinite(arr)
        if bad.any():
            first = np.unravel_index(int(np.argmax(bad)), arr.shape)
            raise CheckpointError(f"checkpoint {path!r}: array {name!r} holds {int(bad.sum())} values "
                                  f"that are not finite (NaN or inf; the first {arr[first]} at index "
                                  f"{tuple(map(int, first))})")


def check_arrays(path: str | os.PathLike, header: dict, files: dict, spec: dict) -> None:
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


def header_dim(header: dict, dim: int | str | None, path: str | os.PathLike = "") -> int | None:
    if dim is None or isinstance(dim, int):
        return dim
    return field(header, dim, int, minimum=0, path=path)


def field(header: dict, name: str, types: type | tuple[type, ...], *, minimum: float | None = None,
          maximum: float | None = None, choices: Collection | None = None, path: str | os.PathLike = "") -> Any:
    """header[name], checked: present, of `types` (int, float, str, bool,
    list, dict), finite where it is a float, >= `minimum`, <= `maximum`, in
    `choices`; CheckpointError naming it otherwise."""
    where = f"checkpoint {path!r}: " if path else "checkpoint: "
    if not isinstance(header, dict):
        raise CheckpointError(f"{where}the field {name!r} is looked up in a {type(header).__name__}, "
                              f"not a header object")
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
    if isinstance(value, float) and not math.isfinite(value):
        raise CheckpointError(f"{where}field {name!r} = {value!r} is not finite")
    if minimum is not None and value < minimum:
        raise CheckpointError(f"{where}field {name!r} = {value!r} is below {minimum}")
    if maximum is not None and value > maximum:
        raise CheckpointError(f"{where}field {name!r} = {value!r} is above {maximum}")
    if choices is not None and value not in choices:
        raise CheckpointError(f"{where}field {name!r} = {value!r} is not one of {list(choices)}")
    return value
