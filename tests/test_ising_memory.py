"""Memory of Ising runs (issue 10): every entry point adds up what it will
allocate and checks it (clphys.runtime.check_memory) before any device work,
with a message saying what is needed, what the device has and what to
reduce; binder_scan runs in pieces instead. The device limits are faked
(monkeypatched facts), so no test allocates more than a few MiB."""

import dataclasses
import re

import numpy as np
import pyopencl as cl
import pytest

import clphys.ising._device
import clphys.runtime.memory
from clphys.cli import main
from clphys.ising import Ensemble2D, Ising2D, backends, binder_scan
from clphys.ising import lattice as lattice_mod
from clphys.ising.binder import _pieces
from clphys.ising.run import Run
from clphys.ising.thresholds import MAX_CELLS

MiB = 1 << 20


def _limit(monkeypatch, device, global_mem, max_alloc):
    monkeypatch.setattr(device, "facts", dataclasses.replace(device.facts, global_mem=global_mem,
                                                             max_alloc=max_alloc))


def _forbid_device_work(monkeypatch, device):
    def fail(*args, **kwargs):
        raise AssertionError("device work before the memory check")
    backends.available()          # import every backend first: they bind zeroed_buffer at import
    monkeypatch.setattr(device, "build", fail)
    monkeypatch.setattr(cl, "Buffer", fail)
    for module in ("clphys.ising._device", "clphys.ising.lattice", "clphys.ising.multispin",
                   "clphys.ising.checkerboard"):
        monkeypatch.setattr(f"{module}.zeroed_buffer", fail)


def test_issue_example_is_refused_before_device_work(device, monkeypatch):
    """Ensemble2D(1024, np.full(16384, 2.0)) needs 16 GiB for its int8 start
    buffer alone; on a device with 64 MiB (16 MiB per allocation) it is
    refused with the need, the limit and how many replicas fit."""
    _limit(monkeypatch, device, 64 * MiB, 16 * MiB)
    _forbid_device_work(monkeypatch, device)
    with pytest.raises(ValueError) as exc:
        Ensemble2D(1024, np.full(16384, 2.0), device=device)
    msg = str(exc.value)
    assert re.search(r"Ensemble2D of 16384 replicas of 1024x1024 needs 18(\.\d)? GiB", msg), msg
    assert "start (int8, temporary) 16 GiB" in msg and "largest single allocation of 16 MiB" in msg
    assert "use at most 16 replicas per ensemble" in msg
    monkeypatch.setattr(device, "facts", dataclasses.replace(device.facts, max_alloc=512 << 10))
    with pytest.raises(ValueError, match=r"Ensemble2D of 1 replicas of 1024x1024 needs 1\.\d+ MiB.*"
                                         r"use a smaller lattice"):
        Ising2D(1024, 2.0, device=device)            # one replica: a 1 MiB start buffer


@pytest.mark.parametrize("algorithm,rng", [("checkerboard", "lcg"), ("multispin", "philox")])
def test_every_algorithm_counts_its_buffers(device, monkeypatch, algorithm, rng):
    need = lattice_mod.device_need(backends.load(algorithm), device.facts, (64, 64), 10, rng, {})
    assert need["start (int8, temporary)"] == 10 * 4096
    spins = [v for k, v in need.items() if k.startswith("spins")][0]
    assert spins == (10 * 4096 if algorithm == "checkerboard" else 10 * 4096 // 8)
    if rng == "lcg":
        assert need["generator states"] == 4 * 10 * 2 * 512
    fit = lattice_mod.replicas_that_fit(backends.load(algorithm), dataclasses.replace(
        device.facts, global_mem=64 * MiB, max_alloc=1 * MiB), (64, 64), rng, {})
    assert fit == 1 * MiB // 4096        # the int8 start buffer is the largest


def test_spins_and_sample_check_memory(device, monkeypatch):
    ens = Ensemble2D(64, np.full(16, 2.0), device=device)
    _limit(monkeypatch, device, 64 * MiB, 32 << 10)
    with pytest.raises(ValueError, match=r"reading the spins of 16 replicas of 64x64 needs .*int8 copy "
                                         r"of the spins 64 KiB"):
        ens.spins()
    monkeypatch.undo()
    monkeypatch.setattr(clphys.runtime.memory, "host_memory", lambda: 64 * MiB)
    sweeps = ens.sweeps
    with pytest.raises(ValueError, match=r"10000000 measurements of 16 replicas needs 4\.77 GiB of host "
                                         r"memory .*this host has 64 MiB.*every="):
        ens.sample(10_000_000)
    assert ens.sweeps == sweeps                       # refused before the first sweep


def test_binder_plans_pieces_from_the_memory(device):
    """--replicas 8192 at 15 temperatures: what fits the device and 1 GiB of
    host series at once."""
    ms = backends.load("multispin")
    facts = dataclasses.replace(device.facts, global_mem=16 << 30, max_alloc=4 << 30)
    assert _pieces(ms, facts, (64, 64), 15 * 8192, "philox", {}, 6000, 1 << 30) == (1 << 30) // (100 * 6000)
    assert _pieces(ms, facts, (16, 16), 30, "philox", {}, 6000, 1 << 30) == 30
    tiny = dataclasses.replace(device.facts, global_mem=64 * MiB, max_alloc=8 << 10)
    # the largest buffer per replica is the joint decision table (2 KiB) or the
    # measurement buffer (16 x 65 bytes), whichever is larger
    largest = max(8 * MAX_CELLS, 16 * 65)
    assert _pieces(ms, tiny, (16, 16), 30, "philox", {}, 64, 1 << 30) == (8 << 10) // largest


def test_binder_runs_in_pieces_when_the_device_is_small(device, monkeypatch):
    """A scan that does not fit at once runs as several ensembles (other seeds),
    and gives the same physics: every replica distinct, U4 near its
    one-piece value. (The piece size comes from the backends' device_bytes:
    3 replicas per 8 KiB allocation with today's buffers.)"""
    kw = dict(n_measure=64, every=1, n_therm=50, replicas=8, seed=4, device=device)
    whole = binder_scan([8, 16], [2.0, 2.5], **kw)
    assert whole.pieces == (1, 1)
    _limit(monkeypatch, device, 64 * MiB, 8 << 10)
    ms = backends.load("multispin")
    K = [_pieces(ms, device.facts, (L, L), 16, "philox", {}, 64, 1 << 30) for L in (8, 16)]
    assert 1 < min(K) and max(K) < 16
    seen = []
    orig = Run.samples

    def spy(self):
        s = orig(self)
        seen.append(s.energy.copy())
        return s
    monkeypatch.setattr(Run, "samples", spy)
    split = binder_scan([8, 16], [2.0, 2.5], **kw)
    P = tuple(-(-16 // k) for k in K)
    assert split.pieces == P and f"run in {P[0]}/{P[1]} ensembles per size" in str(split)
    series = np.concatenate(seen[:P[0]])
    assert series.shape == (16, 64) and len({row.tobytes() for row in series}) == 16
    np.testing.assert_array_equal(seen[0], whole_first_piece(kw, device, monkeypatch, K[0]))
    diff = np.abs(split.binder - whole.binder) / np.hypot(split.binder_err, whole.binder_err)
    assert np.all(diff < 5)


def whole_first_piece(kw, device, monkeypatch, k):
    """Piece 0 uses the one-piece seed: its replicas equal the first k of an
    unsplit run."""
    monkeypatch.undo()
    ens = Ensemble2D(8, np.repeat([2.0, 2.5], 8), start="up", device=device,
                     seed=(kw["seed"] + 0x9E3779B97F4A7C15) % 2**64)
    return ens.sample(64, n_therm=50).energy[:k]


@pytest.mark.slow
def test_cli_binder_many_replicas_in_pieces(device, monkeypatch, capsys):
    """`clphys binder ... --replicas 8192` failed with INVALID_BUFFER_SIZE; it
    now runs in the pieces that fit (the plan for 8192 is checked above; here
    512 replicas on a device with 16 KiB per allocation)."""
    _limit(monkeypatch, device, 64 * MiB, 16 << 10)
    assert main(["binder", "--sizes", "8,16", "--points", "2", "--tmin", "2.0", "--tmax", "2.5",
                 "--replicas", "512", "--measure", "32", "--every", "1", "--therm", "0",
                 "--device", device.facts.index, "--no-progress"]) == 0
    out = capsys.readouterr().out
    ms = backends.load("multispin")
    per = [_pieces(ms, device.facts, (L, L), 2 * 512, "philox", {}, 32, 1 << 30) for L in (8, 16)]
    pieces = [-(-2 * 512 // k) for k in per]
    assert min(pieces) > 1, "the fake limit must force pieces"
    assert "512 replicas x 32 measurements" in out and f"run in {pieces[0]}/{pieces[1]} ensembles per size" in out
