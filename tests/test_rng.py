"""Random numbers: Random123 known answers, bit-exact device/NumPy twins,
statistical sanity, and input checks."""

import sys

import numpy as np
import pytest

from clphys import rng

# Random123 kat_vectors, philox4x32_10: (counter, key, expected output).
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
    ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
    ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
     (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)),
]


def _kat_arrays():
    ctr = np.array([c for c, _, _ in KAT], dtype=np.uint32)
    key = np.array([k for _, k, _ in KAT], dtype=np.uint32)
    out = np.array([o for _, _, o in KAT], dtype=np.uint32)
    return ctr, key, out


def test_philox_known_answers(device):
    ctr, key, out = _kat_arrays()
    np.testing.assert_array_equal(rng.philox(ctr, key, device=device), out)
    np.testing.assert_array_equal(rng.philox_numpy(ctr, key), out)


def test_philox_broadcast_key(device):
    ctr = np.arange(40, dtype=np.uint32).reshape(10, 4)
    got = rng.philox(ctr, np.array([5, 7], dtype=np.uint32), device=device)
    np.testing.assert_array_equal(got, rng.philox_numpy(ctr, (5, 7)))


@pytest.mark.parametrize("generator", rng.GENERATORS)
def test_words_bit_exact(device, generator):
    # lengths that are not multiples of 4, of the stream count, or of 64
    for n, streams in [(1, 1), (4099, 64), (10_007, 33)]:
        got = rng.words(n, seed=11, generator=generator, streams=streams, device=device)
        np.testing.assert_array_equal(got, rng.words_numpy(n, 11, generator, streams))


@pytest.mark.parametrize("generator", rng.GENERATORS)
def test_checksum_bit_exact(device, generator):
    got = rng.checksum(50, 7, seed=3, generator=generator, device=device)
    np.testing.assert_array_equal(got, rng.checksum_numpy(50, 7, seed=3, generator=generator))


def test_lcg_paper_seeding():
    # x_{0,0} = 1, x_{0,j+1} = 16807 x_{0,j} mod 2^32; first output 1664525*1 + 1013904223
    seeds = rng.chained_seeds(4)
    np.testing.assert_array_equal(seeds, [1, 16807, 16807**2 % 2**32, 16807**3 % 2**32])
    w = rng.words_numpy(4, 0, "lcg", streams=4)
    np.testing.assert_array_equal(w, (1664525 * seeds.astype(np.uint64) + 1013904223) % 2**32)


def test_halfbit_lcg_structure():
    """64 words per state per round; sub-stream s starts from state ^ XOR[s];
    the state written back is sub-stream 0's 16th value (un-XORed)."""
    state = np.array([12345], dtype=np.uint32)
    w = rng.words_numpy(128, 0, "halfbit-lcg", streams=1)
    # replicate with plain Python integers
    x, out = 1, []                      # seed 0, stream 0 -> chained seed 1
    for _ in range(2):
        nxt = None
        for s, xor in enumerate(rng.HALFBIT_XOR):
            y = x ^ int(xor)
            for _ in range(16):
                y = (0xDEECE66D * y + 0xB) % 2**32
                out.append(y)
            if s == 0:
                nxt = y
        x = nxt
    np.testing.assert_array_equal(w, np.array(out, dtype=np.uint32))
    assert state.dtype == np.uint32


@pytest.mark.parametrize("generator", rng.GENERATORS)
def test_uniform_and_normal_match_twins(device, generator):
    u = rng.uniform(1001, seed=5, generator=generator, streams=16, device=device)
    np.testing.assert_array_equal(u, rng.uniform_numpy(1001, 5, generator, 16))
    assert u.dtype == np.float32 and u.min() >= 0 and u.max() < 1
    z = rng.normal(1001, seed=5, generator=generator, streams=16, device=device)
    ref = rng.normal_numpy(1001, 5, generator, 16)
    assert z.dtype == np.float32 and np.all(np.isfinite(z))
    np.testing.assert_allclose(z, ref, rtol=2e-6, atol=2e-6)


def test_uniform_extremes_never_one_normal_never_log0():
    w = np.array([0, 0xFF, 0xFFFFFFFF, 0xFFFFFF00], dtype=np.uint32)
    u = rng.uniform_from_words(w)
    assert u.max() < 1.0 and u[0] == 0.0
    z = rng.normal_from_words(np.array([0, 0, 0xFFFFFFFF, 0xFFFFFFFF], dtype=np.uint32), 4)
    assert np.all(np.isfinite(z))


def test_extreme_words_on_device(device):
    """Box-Muller on the device with the extreme words (0 and 2^32-1)."""
    import pyopencl.array as cla
    prg = device.build("rng/generate.cl", generator="philox")
    words = cla.to_device(device.queue, np.array([0, 0, 0xFFFFFFFF, 0xFFFFFFFF], dtype=np.uint32))
    out = cla.empty(device.queue, 4, np.float32)
    prg.rng_box_muller(device.queue, (2,), None, words.data, out.data, np.uint64(4))
    z = out.get()
    assert np.all(np.isfinite(z))
    assert abs(z[0]) == pytest.approx(np.sqrt(-2 * np.log(2.0**-24)), rel=1e-5)


@pytest.mark.parametrize("generator", rng.GENERATORS)
def test_statistics(device, generator):
    """Fixed seed, n = 2^20: each check is a ~4-5 sigma bound."""
    n = 1 << 20
    u = rng.uniform(n, seed=2024, generator=generator, device=device).astype(np.float64)
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 5 * np.sqrt(1 / 180 / n)
    counts = np.bincount((u * 256).astype(int), minlength=256)
    chi2 = ((counts - n / 256) ** 2 / (n / 256)).sum()
    assert chi2 < 255 + 5 * np.sqrt(2 * 255)          # chi^2 with 255 dof
    c = u - u.mean()
    lag1 = (c[:-1] * c[1:]).mean() / c.var()
    assert abs(lag1) < 5 / np.sqrt(n)
    z = rng.normal(n, seed=2024, generator=generator, device=device).astype(np.float64)
    assert abs(z.mean()) < 5 / np.sqrt(n)
    assert abs(z.var() - 1) < 5 * np.sqrt(2 / n)
    kurt = (z ** 4).mean() / z.var() ** 2
    assert abs(kurt - 3) < 5 * np.sqrt(96 / n)


def test_rng_kernels_on_oclgrind(oclgrind):
    ctr, key, out = _kat_arrays()
    np.testing.assert_array_equal(rng.philox(ctr, key, device=oclgrind), out)
    for g in rng.GENERATORS:
        np.testing.assert_array_equal(rng.words(300, 1, g, streams=4, device=oclgrind),
                                      rng.words_numpy(300, 1, g, 4))
        np.testing.assert_array_equal(rng.checksum(8, 3, 1, g, device=oclgrind),
                                      rng.checksum_numpy(8, 3, 1, g))
        assert np.all(np.isfinite(rng.normal(7, 1, g, streams=4, device=oclgrind)))


def test_bad_input(device):
    ctr, key, _ = _kat_arrays()
    with pytest.raises(ValueError, match="counters"):
        rng.philox(ctr[:, :3], key, device=device)
    with pytest.raises(ValueError, match="counters"):
        rng.philox(ctr.astype(np.float32), key, device=device)
    with pytest.raises(ValueError, match="counters"):
        rng.philox(np.full((1, 4), -1), (0, 0), device=device)
    with pytest.raises(ValueError, match="keys"):
        rng.philox(ctr, key[:2], device=device)
    with pytest.raises(ValueError, match="keys"):
        rng.philox(ctr, np.zeros((3, 3), np.uint32), device=device)
    with pytest.raises(ValueError, match="n must be >= 0"):
        rng.uniform(-1, device=device)
    with pytest.raises(TypeError, match="n must be an integer"):
        rng.normal(2.5, device=device)
    with pytest.raises(ValueError, match="generator must be one of"):
        rng.uniform(4, generator="mersenne", device=device)
    with pytest.raises(ValueError, match="seed"):
        rng.uniform(4, seed=-3, device=device)
    assert rng.uniform(0, device=device).shape == (0,)


def _small_device(monkeypatch, device, max_alloc, global_mem=None):
    """Make `device` look small (its facts only: nothing is allocated)."""
    import dataclasses
    small = dataclasses.replace(device.facts, max_alloc=max_alloc,
                                global_mem=global_mem or 4 * max_alloc)
    monkeypatch.setattr(device, "facts", small)


@pytest.mark.parametrize("generator", rng.GENERATORS)
def test_runs_longer_than_the_device_come_in_pieces(device, monkeypatch, generator):
    """The same words, uniforms and normals when the device holds only a few
    thousand words at once (pieces of whole steps of every stream)."""
    n, streams = 20003, 8
    ref_w = rng.words(n, 3, generator, streams, device=device)
    ref_u = rng.uniform(n, 3, generator, streams, device=device)
    ref_z = rng.normal(n, 3, generator, streams, device=device)
    counters = np.arange(4 * 999, dtype=np.uint32).reshape(-1, 4)
    ref_p = rng.philox(counters, np.array([5, 6], np.uint32), device=device)
    _small_device(monkeypatch, device, max_alloc=16 * 1024)      # 4096 words per piece
    np.testing.assert_array_equal(rng.words(n, 3, generator, streams, device=device), ref_w)
    np.testing.assert_array_equal(ref_w, rng.words_numpy(n, 3, generator, streams))
    np.testing.assert_array_equal(rng.uniform(n, 3, generator, streams, device=device), ref_u)
    np.testing.assert_array_equal(rng.normal(n, 3, generator, streams, device=device), ref_z)
    np.testing.assert_array_equal(rng.philox(counters, np.array([5, 6], np.uint32), device=device), ref_p)


def test_sizes_beyond_memory_are_refused_before_device_work(device, monkeypatch):
    _small_device(monkeypatch, device, max_alloc=1024)
    with pytest.raises(ValueError, match=r"needs .* Use fewer streams"):
        rng.words(10, 1, "halfbit-lcg", streams=64, device=device)       # one round is 16 KiB
    with pytest.raises(ValueError, match="Use fewer streams"):
        rng.checksum(2**20, 1, device=device)
    monkeypatch.setattr(sys.modules["clphys.runtime.memory"], "host_memory", lambda: 2**20)
    with pytest.raises(ValueError, match=r"rng.uniform\(1000000\) needs 3.81 MiB of host memory for its result; this host has 1 MiB"):
        rng.uniform(10**6, device=device)
