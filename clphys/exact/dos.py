"""Exact density of states g(E) of the 2D Ising model on an L x L torus.

P. D. Beale, Phys. Rev. Lett. 76, 78 (1996): Kaufman's partition function of
the finite torus is a polynomial in x = exp(-2 beta J) with integer
coefficients, the numbers of states at each energy. With J = 1, E = -sum over
bonds of s_i s_j in [-2N, 2N] (N = L^2) and

    Z x^N = G(x) = sum_E g(E) x^((E + 2N)/2) = H(x^2),
    G(x) = 1/2 D^(N/2) (Z1 + Z2 + Z3 + Z4),  D = x (1 - x^2),

where, with n = m = L, u = 2 cosh 2K coth 2K = (1 + x^2)^2 / D and
tau_l = 2 cos(pi l / n), Kaufman's products over l and 2n - l (equal
factors) pair into

    Z1 = prod_{l odd < n} V_{m/2}(u - tau_l)^2,   Z2 = prod_{l odd < n} (V_{m/2}(u - tau_l)^2 - 4),
    Z3 = C_0 C_n prod_{l even, 0 < l < n} V_{m/2}(u - tau_l)^2,
    Z4 = S_0 S_n prod_{l even, 0 < l < n} (V_{m/2}(u - tau_l)^2 - 4),

V_k the Lucas polynomial (V_k(w + 1/w) = w^k + w^-k, so 2 cosh(m g/2) =
V_{m/2}(2 cosh g)), C = v^(m/2) + v^(-m/2), S = v^(m/2) - v^(-m/2) with
v_0 = e^(gamma_0) = (1 - x)^2 / D (the signed gamma_0 = 2K + ln tanh K) and
v_n = (1 + x)^2 / D.

Beale expanded these products with exact (symbolic) arithmetic. Here the same
polynomial is computed exactly with integer arithmetic modulo primes p = 1
(mod 4M and 2n): in those fields tau_l and the M-th roots of unity exist, so
H is evaluated at the points X_k = zeta^(2k+1) (zeta a primitive 2M-th root,
M >= N a power of two; the set is closed under X -> 1/X, and H(1/X) =
X^-N H(X) halves the work), interpolated by an inverse number-theoretic
transform, and the integers are rebuilt from enough primes by the Chinese
remainder theorem (Garner), with one extra prime as a check. Every result is
then checked exactly: sum g = 2^N, g(E) = g(-E), g(+-2N) = 2 and
g(+-(2N - 4)) = 0.

Cost: about N L / 2 Lucas evaluations per prime and N / 32 primes; L = 32
takes well under a second, L = 64 a few seconds, L = 128 about a minute on
one core (``workers`` spreads the primes over processes).
"""

from __future__ import annotations

import functools
import math
import os

import numpy as np

from .. import _validate

__all__ = ["density_of_states"]

# Products of two residues < 2^32 fit an unsigned 64-bit integer exactly.
_PRIME_BITS = 32


def density_of_states(L: int, *, exact: bool = False, workers: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Exact density of states of the L x L periodic Ising model (J = 1).

    Returns ``(E, ln_g)``: the accessible energies (int64, ascending; every
    E = -2N, -2N + 4, ..., 2N except +-(2N - 4)) and ln g(E) (float64), with
    sum g = 2^(L^2). ``exact=True`` returns g(E) as Python integers (an object
    array) instead of ln g. L: any even L >= 2. ``workers``: processes for
    large L (default: 1 below L = 64, else the number of CPUs).
    """
    L = _validate.integer("L", L, 2, 1024)
    if L % 2:
        raise ValueError(f"L must be even, got {L}")
    if workers is not None:
        workers = _validate.integer("workers", workers, 1)
    counts = _counts(L, workers)
    N = L * L
    keep = np.array([i for i, g in enumerate(counts) if g > 0])
    E = (4 * keep - 2 * N).astype(np.int64)
    if exact:
        g = np.empty(len(keep), dtype=object)
        g[:] = [counts[i] for i in keep]
        return E, g
    return E, np.array([math.log(counts[i]) for i in keep])


@functools.lru_cache(maxsize=8)
def _counts(L, workers=None):
    """g at E = 4 i - 2N for i = 0..N, as a tuple of Python ints, checked."""
    N = L * L
    M = 1 << max(1, (N - 1).bit_length())          # power of two >= N
    modulus = math.lcm(4 * M, 2 * L)
    need = N + 2                                    # bits: every g < 2^N, plus margin
    primes, bits = [], 0
    for p in _primes_one_mod(modulus):
        primes.append(p)
        bits += math.log2(p)
        if bits > need:
            break
    check_prime = next(p for p in _primes_one_mod(modulus) if p not in primes)
    jobs = primes + [check_prime]
    if workers is None:
        workers = 1 if L < 64 else (os.cpu_count() or 1)
    if workers > 1 and len(jobs) > 1:
        import concurrent.futures
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(min(workers, len(jobs)), mp_context=ctx) as pool:
            residues = list(pool.map(_residues, [L] * len(jobs), jobs, [modulus] * len(jobs)))
    else:
        residues = [_residues(L, p, modulus) for p in jobs]
    half = N // 2 + 1                               # g is symmetric: rebuild half
    counts = _crt([r[:half] for r in residues[:-1]], primes)
    counts = counts + counts[:N - half + 1][::-1]
    _check(L, counts, residues, check_prime)
    return tuple(counts)


def _check(L, counts, residues, check_prime):
    N = L * L
    problems = []
    if sum(counts) != 2 ** N:
        problems.append("sum g != 2^N")
    if any(c < 0 for c in counts):
        problems.append("negative count")
    if counts[0] != 2 or counts[N] != 2 or counts[1] != 0 or counts[N - 1] != 0:
        problems.append("g(+-2N) != 2 or g(+-(2N-4)) != 0")
    if any(int(r) != c % check_prime for r, c in zip(residues[-1], counts)):
        problems.append("the check prime disagrees")
    if any(np.any(r != r[::-1]) for r in residues):
        problems.append("g(E) != g(-E)")
    if problems:       # a bug, never a property of the input
        raise RuntimeError(f"exact density of states for L = {L} failed its checks: "
                           + ", ".join(problems))


# ----------------------------------------------------------------- primes
def _is_prime(n):
    """Deterministic Miller-Rabin for n < 3.3e24."""
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    for q in small:
        if n % q == 0:
            return n == q
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in small:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _primes_one_mod(modulus):
    """Primes p = 1 (mod modulus), below 2^32 (largest first), then below 2^50."""
    for top in (2**_PRIME_BITS, 2**50):
        k = (top - 2) // modulus
        while k > 0:
            p = k * modulus + 1
            if p < top // 2:
                break
            if _is_prime(p):
                yield p
            k -= 1


def _factor_small(n):
    out, q = set(), 2
    while q * q <= n:
        while n % q == 0:
            out.add(q)
            n //= q
        q += 1
    if n > 1:
        out.add(n)
    return out


def _element_of_order(p, order):
    """An element of F_p of multiplicative order exactly `order` (order | p - 1)."""
    factors = _factor_small(order)
    for a in range(2, p):
        c = pow(a, (p - 1) // order, p)
        if all(pow(c, order // q, p) != 1 for q in factors):
            return c
    raise RuntimeError(f"no element of order {order} mod {p}")


# ----------------------------------------------------------------- arithmetic mod p
class _Field:
    """Vectorised arithmetic mod p on uint64 arrays of residues in [0, p)."""

    def __init__(self, p):
        self.p = p
        self.big = p >= 2**32       # then products need the float-quotient trick
        self.P = np.uint64(p)
        self.inv_p = 1.0 / p

    def arr(self, values):
        return np.asarray(values, dtype=np.uint64)

    def mul(self, a, b):
        if not self.big:
            return (a * b) % self.P
        # p < 2^50: the float quotient is off by at most 1; wrap-around int64 is exact.
        ai, bi = a.astype(np.int64), np.asarray(b).astype(np.int64)
        q = np.floor(a.astype(np.float64) * np.asarray(b).astype(np.float64) * self.inv_p).astype(np.int64)
        r = ai * bi - q * np.int64(self.p)
        r += (r >> 63) & np.int64(self.p)
        r -= np.int64(self.p)
        r += (r >> 63) & np.int64(self.p)
        return r.astype(np.uint64)

    def add(self, a, b):
        s = a + b
        return np.where(s >= self.P, s - self.P, s)

    def sub(self, a, b):
        return np.where(a >= b, a - b, a + self.P - b)

    def sub_const(self, a, c):
        c = np.uint64(c % self.p)
        return np.where(a >= c, a - c, a + (self.P - c))

    def mul_sub(self, a, b, c):
        """a b - c mod p (c an array or a small constant)."""
        if self.big:
            prod = self.mul(a, b)
            return self.sub(prod, c) if isinstance(c, np.ndarray) else self.sub_const(prod, c)
        out = a * b                                 # < 2^64 - 2^33, room for + p
        out += self.P - (c if isinstance(c, np.ndarray) else np.uint64(c))
        out %= self.P
        return out

    def pow(self, a, e):
        result = np.ones_like(a)
        base = a.copy()
        while e:
            if e & 1:
                result = self.mul(result, base)
            e >>= 1
            if e:
                base = self.mul(base, base)
        return result

    def inv(self, a):
        return self.pow(a, self.p - 2)

    def powers(self, w, n):
        """[w^0, w^1, ..., w^(n-1)] for a scalar w."""
        out = self.arr([1])
        while len(out) < n:
            out = np.concatenate([out, self.mul(out, self.arr(pow(w, len(out), self.p)))])
        return out[:n]

    def prod_columns(self, a):
        """Product over axis 1 (pairwise, so every step is a vector operation)."""
        while a.shape[1] > 1:
            half = a.shape[1] // 2
            merged = self.mul(a[:, :half], a[:, half:2 * half])
            a = merged if a.shape[1] % 2 == 0 else np.concatenate([merged, a[:, -1:]], axis=1)
        return a[:, 0]

    def ntt(self, a, root):
        """A_i = sum_k a_k root^(i k), len(a) a power of two, root of order len(a)."""
        n = len(a)
        bits = n.bit_length() - 1
        rev = np.zeros(n, dtype=np.int64)
        for b in range(bits):
            rev |= ((np.arange(n) >> b) & 1) << (bits - 1 - b)
        a = a[rev].copy()
        m = 1
        while m < n:
            tw = self.powers(pow(root, n // (2 * m), self.p), m)
            blocks = a.reshape(-1, 2 * m)
            u, v = blocks[:, :m], self.mul(blocks[:, m:], tw)
            a = np.concatenate([self.add(u, v), self.sub(u, v)], axis=1).reshape(-1)
            m *= 2
        return a


def _lucas_v(F, t, k):
    """V_k(t) (V_0 = 2, V_1 = t, V_{j+1} = t V_j - V_{j-1}) elementwise, k >= 1:
    a ladder over the bits of k's odd part, then V_2j = V_j^2 - 2."""
    doublings = (k & -k).bit_length() - 1
    odd = k >> doublings
    a, b = t, F.mul_sub(t, t, 2)                   # (V_j, V_j+1) from j = 1
    for bit in bin(odd)[3:]:
        if bit == "0":
            a, b = F.mul_sub(a, a, 2), F.mul_sub(a, b, t)
        else:
            a, b = F.mul_sub(a, b, t), F.mul_sub(b, b, 2)
    for _ in range(doublings):
        a = F.mul_sub(a, a, 2)
    return a


def _residues(L, p, modulus):
    """H's coefficients h_0..h_N (g at E = 4i - 2N) modulo the prime p."""
    F = _Field(p)
    N = L * L
    M = 1 << max(1, (N - 1).bit_length())
    c = _element_of_order(p, modulus)
    xi = pow(c, modulus // (4 * M), p)               # primitive 4M-th root: x_k = xi^(2k+1)
    zeta_n = pow(c, modulus // (2 * L), p)           # primitive 2n-th root: tau_l

    half = M // 2
    x = F.mul(F.powers(pow(xi, 2, p), half), F.arr(xi))
    x2 = F.mul(x, x)
    one = F.arr(np.ones(half, dtype=np.uint64))
    omx, opx = F.sub(one, x), F.add(one, x)
    D = F.mul(x, F.mul(omx, opx))
    invD = F.inv(D)
    onepx2 = F.add(one, x2)
    u = F.mul(F.mul(onepx2, onepx2), invD)

    def tau(l):
        return (pow(zeta_n, l, p) + pow(zeta_n, 2 * L - l, p)) % p

    def lucas_products(ls):
        if not ls:
            return one, one
        t = F.sub(u[:, None], F.arr([tau(l) for l in ls])[None, :])
        v = _lucas_v(F, t, L // 2)
        return F.prod_columns(F.mul(v, v)), F.prod_columns(F.mul_sub(v, v, 4))

    sq_odd, m4_odd = lucas_products(list(range(1, L, 2)))
    sq_even, m4_even = lucas_products(list(range(2, L - 1, 2)))
    k = L // 2
    v0, v0i = F.mul(F.mul(omx, omx), invD), F.mul(F.mul(F.mul(x2, opx), opx), invD)
    vn, vni = F.mul(F.mul(opx, opx), invD), F.mul(F.mul(F.mul(x2, omx), omx), invD)
    a0, b0, an, bn = F.pow(v0, k), F.pow(v0i, k), F.pow(vn, k), F.pow(vni, k)
    z1 = sq_odd
    z2 = m4_odd
    z3 = F.mul(F.mul(F.add(a0, b0), F.add(an, bn)), sq_even)
    z4 = F.mul(F.mul(F.sub(a0, b0), F.sub(an, bn)), m4_even)
    total = F.add(F.add(z1, z2), F.add(z3, z4))
    G = F.mul(F.mul(total, F.pow(D, N // 2)), F.arr((p + 1) // 2))    # the 1/2

    # H(X_k) = G(x_k) for k < M/2; the rest from H(1/X) = X^-N H(X), X_{M-1-k} = 1/X_k.
    X_pow_N = F.pow(x2, N)
    upper = F.mul(G, F.inv(X_pow_N))[::-1]
    H = np.concatenate([G, upper])
    # Known top coefficient h_N = 2 taken out, so M >= N points determine the rest.
    X = np.concatenate([x2, F.inv(x2)[::-1]])
    H = F.sub(H, F.mul(F.arr(2), F.pow(X, N)))
    zeta = pow(xi, 2, p)                             # X_k = zeta^(2k+1), zeta of order 2M
    omega_inv = pow(pow(zeta, 2, p), p - 2, p)
    a = F.ntt(H, omega_inv)                          # M * h_i zeta^i
    scale = F.mul(F.powers(pow(zeta, p - 2, p), M), F.arr(pow(M, p - 2, p)))
    h = F.mul(a, scale)
    out = np.zeros(N + 1, dtype=np.uint64)
    out[:N] = h[:N]
    if np.any(h[N:]):
        raise RuntimeError(f"exact density of states: degree check failed for L = {L} mod {p}")
    out[N] = 2
    return out


def _crt(residues, primes):
    """Integers from their residues (lists of equal-length arrays) by Garner's
    mixed-radix algorithm; each result lies in [0, prod primes)."""
    digits = []
    for j, pj in enumerate(primes):
        F = _Field(pj)
        t = residues[j].copy()
        for i in range(j):
            t = F.mul(F.sub(t, digits[i] % F.P), F.arr(pow(primes[i], pj - 2, pj)))
        digits.append(t)
    out = []
    for col in range(len(residues[0])):
        v = 0
        for j in range(len(primes) - 1, -1, -1):
            v = v * primes[j] + int(digits[j][col])
        out.append(v)
    return out
