"""Registry of Ising kernel designs ("backends") and the interface they share.

``algorithm=`` names a backend. The registry maps each name to (module, class),
imported lazily, so a backend whose module is absent or fails to import only
disables that algorithm (:func:`available` lists the ones that load).

Conventions every backend follows
=================================

Lattice conventions. ``shape`` is (Lx, Ly) or (Lx, Ly, Lz); spin arrays are
int8 +-1 with layout (R, Ly, Lx) or (R, Lz, Ly, Lx) (R replicas, C order), so
site (x, y, z) of replica r is ``spins[r, z, y, x]``. Periodic boundaries.
The colour of a site is (x + y + z) % 2; a full sweep updates colour 0, then
colour 1. Within a colour, sites are numbered by the *compact index*
``n = (z * Ly + y) * (Lx // 2) + i`` where ``x = 2 i + ((colour + y + z) % 2)``.

Metropolis rule. A proposed flip of spin s is accepted when its random word w
(uint32) satisfies ``w <= thr[r, a, k]`` with a = 0 for s = +1 and 1 for s = -1,
k = number of the 2*dim neighbours equal to s, and ``thr`` the uint32 table of
:func:`clphys.ising.thresholds.metropolis_thresholds` (per replica r).

Philox counter mapping (rng="philox"). With key (k0, k1) = clphys.rng.seed_key(seed),
the word of compact site n of colour c in sweep t (0-based, counted per
ensemble) of replica r is component ``n % 4`` of ::

    philox4x32_10(ctr = (n // 4, r, t mod 2^32, 2 * (t div 2^32) + c), key)

so one Philox call serves the 4 consecutive same-colour sites n = 4g..4g+3.
Sweep number t = 2^63 - 1 is reserved for the random start (word bit 31 set
means spin -1), see cl_kernels/ising/init.cl. Every backend that updates colour
0 then colour 1 with this mapping produces the same spins, bit for bit.

The interface itself (attributes, methods, the optional capabilities as
explicit flags) is :class:`clphys.ising._backend.IsingBackend`;
:class:`clphys.ising._backend.BackendDefaults` holds the shared defaults.
"""

from __future__ import annotations

import importlib

REGISTRY = {
    "multispin": ("clphys.ising.multispin", "MultispinBackend"),
    "checkerboard": ("clphys.ising.checkerboard", "CheckerboardBackend"),
    "blocks": ("clphys.ising.blocks", "BlocksBackend"),
}
DEFAULT_ALGORITHM = "multispin"
# Algorithms that update colour 0 then colour 1 of the whole lattice with the
# Philox mapping above: their spins equal clphys.ising.reference's, bit for bit.
PLAIN_ORDER = ("multispin", "checkerboard")
KNOWN_RNGS = ("philox", "lcg", "xorshift32", "halfbit-lcg")

_cache: dict[str, object] = {}


def load(name: str):
    """The backend class of algorithm `name`; ValueError if unknown or not
    importable (with the reason)."""
    if name not in REGISTRY:
        raise ValueError(f"algorithm must be one of {', '.join(map(repr, REGISTRY))}; got {name!r}")
    if name not in _cache:
        module, cls = REGISTRY[name]
        try:
            _cache[name] = getattr(importlib.import_module(module), cls)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"algorithm {name!r} is not available in this build: {exc}") from None
    return _cache[name]


def available() -> list[str]:
    """Names of the algorithms whose backend imports, in registry order."""
    out = []
    for name in REGISTRY:
        try:
            load(name)
        except ValueError:
            continue
        out.append(name)
    return out


def check_rng(backend, rng):
    """The rng name to use with `backend` (its default when rng is None)."""
    if rng is None:
        return backend.rngs[0]
    if rng not in KNOWN_RNGS:
        raise ValueError(f"rng must be one of {', '.join(map(repr, KNOWN_RNGS))}; got {rng!r}")
    if rng not in backend.rngs:
        raise ValueError(f"algorithm {backend.algorithm!r} accepts rng "
                         f"{' or '.join(map(repr, backend.rngs))}; got {rng!r}")
    return rng


def multispin_fold(shape) -> int:
    """Rows of a colour that share one 32-bit word in the multispin layout
    (cl_kernels/ising/multispin.cl, "Folded rows"): in 3D, where Lx/2 divides
    32, k = 32 / (Lx/2) rows y, y + Ly/k, ... (the largest power-of-two k up to
    that with Ly/k even, so the rows of a word have one parity); else 1."""
    S = shape[0] // 2
    if len(shape) != 3 or S >= 32 or 32 % S:
        return 1
    k = 32 // S
    while k > 1 and shape[1] % (2 * k):
        k //= 2
    return k
