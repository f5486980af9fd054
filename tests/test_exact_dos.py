"""clphys.exact.density_of_states (Beale's exact 2D density of states): exact
counts against brute-force enumeration, the partition function against
Kaufman's (clphys.exact.finite_lattice), the exact identities, bad input."""

import math

import numpy as np
import pytest

from clphys.exact import density_of_states, dos, finite_lattice


def _brute_force_counts(L):
    """{E: number of states} of the L x L torus by summing all 2^(L^2) states."""
    N = L * L
    states = np.arange(2**N, dtype=np.int64)
    s = [(1 - 2 * ((states >> i) & 1)).astype(np.int8) for i in range(N)]
    bond = np.zeros(2**N, dtype=np.int16)
    for y in range(L):
        for x in range(L):
            bond += s[y * L + x] * s[y * L + (x + 1) % L] + s[y * L + x] * s[((y + 1) % L) * L + x]
    E, counts = np.unique(-bond, return_counts=True)
    return dict(zip(E.tolist(), counts.tolist()))


@pytest.mark.parametrize("L", [2, 4])
def test_counts_equal_enumeration(L):
    E, g = density_of_states(L, exact=True)
    assert dict(zip(E.tolist(), g.tolist())) == _brute_force_counts(L)
    assert all(isinstance(v, int) for v in g)


@pytest.mark.parametrize("L", [6, 8, 10, 12, 16])
def test_partition_function_equals_kaufman(L):
    E, ln_g = density_of_states(L)
    T = np.array([1.0, 1.8, 2.269, 2.6, 4.0, 50.0])
    a = ln_g[None, :] - E[None, :] / T[:, None]
    top = a.max(axis=1)
    ln_z = top + np.log(np.exp(a - top[:, None]).sum(axis=1))
    np.testing.assert_allclose(ln_z, finite_lattice(L, T).log_z, rtol=1e-13)


@pytest.mark.parametrize("L", [6, 14, 32])
def test_exact_identities(L):
    N = L * L
    E, g = density_of_states(L, exact=True)
    assert sum(g) == 2**N
    assert E[0] == -2 * N and E[-1] == 2 * N and g[0] == g[-1] == 2
    assert -2 * N + 4 not in E and 2 * N - 4 not in E           # no state there
    np.testing.assert_array_equal(E, -E[::-1])
    assert list(g) == list(g[::-1])                              # g(E) = g(-E)
    assert g[1] == 2 * N                                         # one flipped spin: E0 + 8
    assert g[2] == 4 * N                                         # a flipped domino: E0 + 12
    E2, ln_g = density_of_states(L)
    np.testing.assert_array_equal(E, E2)
    np.testing.assert_allclose(ln_g, [math.log(v) for v in g], rtol=1e-15)
    steps = np.diff(E)
    assert steps[0] == steps[-1] == 8 and np.all(steps[1:-1] == 4)


def test_a_wrong_residue_is_refused(monkeypatch):
    """One wrong residue modulo one prime (kept symmetric) is caught by the checks."""
    real = dos._residues

    def corrupt(L, p, modulus):
        r = real(L, p, modulus)
        r[3] = (r[3] + 1) % p
        r[-4] = r[3]                      # keep it symmetric, so only the CRT check can see it
        return r

    dos._counts.cache_clear()
    monkeypatch.setattr(dos, "_residues", corrupt)
    with pytest.raises(RuntimeError, match="failed its checks"):
        density_of_states(6)
    dos._counts.cache_clear()


@pytest.mark.parametrize("L,error", [(5, ValueError), (0, ValueError), (1, ValueError),
                                     (2048, ValueError), (4.0, TypeError), ("8", TypeError)])
def test_bad_input(L, error):
    with pytest.raises(error, match="L"):
        density_of_states(L)
