"""Metropolis acceptance as integer thresholds, computed on the host.

Every Ising kernel accepts a proposed flip of spin s when a raw 32-bit random
word w satisfies ``w <= thr[a, k]`` with

* a = 0 if s = +1 and 1 if s = -1,
* k = the number of the 2*dim neighbours equal to s (0..2*dim),
* dE = 2 J (2k - 2 dim) + 2 h s the energy change of the flip,
* thr = ceil(p 2^32) - 1 clamped to [0, 2^32 - 1], p = min(1, exp(-dE / T)).

So p = 1 is accepted always (thr = 2^32 - 1) and any other p is realised to
within 2^-32. No exp runs on the device, and a given word gives the same
decision on every device.
"""

from __future__ import annotations

import numpy as np

from .. import _validate


def metropolis_thresholds(dim: int, T: float, J: float = 1.0, h: float = 0.0) -> np.ndarray:
    """uint32 table thr[a, k] of shape (2, 2*dim + 1); see the module doc."""
    dim = _validate.choice("dim", dim, (2, 3))
    T = _validate.real("T", T, minimum=0.0, strict_min=True)
    J = _validate.real("J", J)
    h = _validate.real("h", h)
    k = np.arange(2 * dim + 1)
    s = np.array([[1.0], [-1.0]])
    dE = 2.0 * J * (2.0 * k - 2.0 * dim) + 2.0 * h * s
    with np.errstate(over="ignore"):
        p = np.minimum(1.0, np.exp(-dE / T))
    thr = np.ceil(p * 2.0**32) - 1.0
    return np.clip(thr, 0, 2**32 - 1).astype(np.uint32)
