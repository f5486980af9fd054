"""Type names shared by the public signatures."""

from typing import Any

# A number or an array of numbers as NumPy takes it (float, sequence, ndarray).
# Any for the type checker: the functions convert it with np.asarray and rebind
# the parameter's name to the array.
ArrayLike = Any
