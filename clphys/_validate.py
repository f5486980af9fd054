"""Argument checks shared by every public function: raise ValueError/TypeError
naming the parameter and what is allowed, before any device work."""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection
from typing import TypeVar

import numpy as np
from numpy.typing import DTypeLike

from ._typing import ArrayLike

T = TypeVar("T")


def integer(name: str, value: object, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def real(name: str, value: object, minimum: float | None = None, maximum: float | None = None, *,
         strict_min: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if minimum is not None and (value <= minimum if strict_min else value < minimum):
        raise ValueError(f"{name} must be {'>' if strict_min else '>='} {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def boolean(name: str, value: object) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def choice(name: str, value: T, allowed: Collection) -> T:
    try:       # an array compares elementwise, an unhashable value may raise: neither is a choice
        ok = bool(value in allowed) and not (isinstance(value, bool) and not any(
            isinstance(a, bool) for a in allowed))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")
    return value


def seed(value: object) -> int:
    return integer("seed", value, 0, 2**64 - 1)


def finite_array(name: str, values: ArrayLike, ndim: int | None = None, dtype: DTypeLike | None = None
                 ) -> np.ndarray:
    """A NumPy copy-free view of `values`; NaN/inf reported with their position."""
    try:
        if np.iscomplexobj(values) or _has_text(values):
            # a cast to float would drop the imaginary parts, or read "4.2" as a number
            raise TypeError
        arr = np.asarray(values, dtype=dtype)
    except (ValueError, TypeError, OverflowError):
        # ragged nesting, strings that are not numbers, objects NumPy cannot convert
        raise TypeError(f"{name} must be real numbers (a number or a rectangular array), "
                        f"got {_short(values)}") from None
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be real numbers, got dtype {arr.dtype}")
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr)
        if bad.any():
            where = np.argwhere(bad)
            first = tuple(int(i) for i in where[0])
            pos = first[0] if len(first) == 1 else first
            raise ValueError(f"{name} has {len(where)} non-finite value(s) (NaN or inf); "
                             f"the first is {arr[first]} at index {pos}")
    return arr


def _has_text(values) -> bool:
    """Whether `values` is a string, or an array-like holding strings (NumPy would read
    "4.2" as 4.2 where numbers are meant)."""
    if isinstance(values, (str, bytes)):
        return True
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError):
        return False                    # ragged: the conversion itself fails
    if arr.dtype.kind in "USa":
        return True
    return arr.dtype.kind == "O" and any(isinstance(v, (str, bytes)) for v in arr.ravel())


def _short(value, limit=80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
