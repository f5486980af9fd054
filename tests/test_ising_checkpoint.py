"""Ising checkpoints a user can store (issue 10): save/load through the one
checkpoint format (npz + JSON header, no pickle), every field validated on
load, resume bit for bit; `clphys ising --checkpoint/--resume` (in process;
the real-SIGINT version is in tests/test_ising_interrupt.py)."""

import json
import os
import re
import signal

import numpy as np
import pytest

import clphys.progress
from clphys.cli import main
from clphys.ising import Ensemble2D, Ensemble3D, Ising2D, Ising3D, backends
from clphys.ising import cli_run as ising_run
from clphys.runtime import checkpoint as ck
from clphys.runtime.checkpoint import CheckpointError

COMBOS = [(a, r) for a in backends.available() for r in backends.load(a).rngs if 2 in backends.load(a).dims]


def _shape(algorithm):
    for shape in ((64, 4), (64, 64)):
        try:
            backends.load(algorithm).check_shape(shape)
            return shape
        except ValueError:
            pass


def _rewrite(path, header=None, arrays=None, drop=()):
    """Change a checkpoint file in place (header fields, arrays, or drop some)
    and seal it again, as a buggy writer would: what the loader's own checks
    of every field must catch."""
    with np.load(path, allow_pickle=False) as npz:
        files = {k: npz[k] for k in npz.files}
    h = json.loads(files.pop("__header__").tobytes().decode())
    h.update(header or {})
    files.update(arrays or {})
    for k in drop:
        (h if k in h else files).pop(k)
    h["arrays"] = {k: {"dtype": str(v.dtype), "shape": list(v.shape)} for k, v in files.items()}
    ck._write(path, h, files)


@pytest.mark.parametrize("algorithm,rng", COMBOS)
def test_save_load_continues_bit_for_bit(device, tmp_path, algorithm, rng):
    ens = Ensemble2D(_shape(algorithm), [2.1, 2.9], J=0.9, h=0.1, algorithm=algorithm, rng=rng, seed=21,
                     device=device)
    ens.sweep(3)
    path = tmp_path / "ens.npz"
    ens.save(path)
    ens.sweep(4)
    want = ens.sample(20, n_therm=0)
    back = Ensemble2D.load(path, device=device)
    assert (back.algorithm, back.rng, back.seed, back.J, back.h) == (algorithm, rng, 21, 0.9, 0.1)
    assert back.settled == 3 and back.sweeps == 3
    np.testing.assert_array_equal(back.temperatures, [2.1, 2.9])
    back.sweep(4)
    got = back.sample(20, n_therm=0)
    np.testing.assert_array_equal(got.energy, want.energy)
    np.testing.assert_array_equal(back.spins(), ens.spins())
    with np.load(path, allow_pickle=False) as npz:            # plain arrays, no pickle
        assert "spins" in npz.files and npz["spins"].dtype == np.uint8
        assert all(npz[k].dtype.kind in "biuf" for k in npz.files)


def test_single_lattices_and_3d(device, tmp_path):
    lat = Ising3D((8, 4, 6), 4.4, seed=3, device=device)
    lat.sweep(5)
    lat.save(tmp_path / "a.npz")
    lat.sweep(3)
    back = Ising3D.load(tmp_path / "a.npz", device=device)
    back.sweep(3)
    np.testing.assert_array_equal(back.spins(), lat.spins())
    assert back.temperature == 4.4 and back.shape == (8, 4, 6)
    with pytest.raises(CheckpointError, match="holds a 3D lattice, not a 2D one"):
        Ising2D.load(tmp_path / "a.npz", device=device)
    Ensemble2D(64, [2.0, 2.5], device=device).save(tmp_path / "e.npz")
    with pytest.raises(CheckpointError, match="holds an ensemble of 2 replicas; use Ensemble2D.load"):
        Ising2D.load(tmp_path / "e.npz", device=device)
    with pytest.raises(CheckpointError, match="holds a 2D lattice, not a 3D one"):
        Ensemble3D.load(tmp_path / "e.npz", device=device)
    with pytest.raises(ValueError, match=r"must end in one of \.npz"):
        lat.save(tmp_path / "a.pickle")


@pytest.fixture
def saved(device, tmp_path):
    """A checkerboard/lcg ensemble (it has generator-state arrays) on disk."""
    ens = Ensemble2D((8, 6), [2.0, 3.0], algorithm="checkerboard", rng="lcg", seed=4, device=device)
    ens.sweep(2)
    path = tmp_path / "c.npz"
    ens.save(path)
    return path


@pytest.mark.parametrize("change,message", [
    (dict(header={"J": "1.0"}), r"field 'J' = '1.0' is not of type float"),
    (dict(header={"seed": -3}), r"field 'seed' = -3 is below 0"),
    (dict(header={"shape": [16, 6]}), r"array 'spins' has shape \(2, 6\), expected \(2, 12\) \(a file from "
                                      r"another lattice size"),
    (dict(header={"replicas": 3}), r"array 'spins' has shape \(2, 6\), expected \(3, 6\)"),
    (dict(header={"algorithm": "wolff"}), r"field 'algorithm' = 'wolff' is not one of"),
    (dict(header={"algorithm": "multispin"}), r"algorithm 'multispin' accepts rng 'philox'; got 'lcg'"),
    (dict(header={"rng": "philox"}), r"generator state has unexpected \['rng_states'\]"),
    (dict(header={"backend": {"sweeps": -5}}), r"state\['sweeps'\] must be >= 0, got -5"),
    (dict(header={"options": {"tile": 64}}), r"unknown option\(s\) tile"),
    (dict(arrays={"spins": np.zeros((2, 6), np.int8)}), r"array 'spins' has dtype int8, expected uint8"),
    (dict(arrays={"temperatures": np.array([2.0, np.nan])}), r"temperatures has 1 non-finite value"),
    (dict(arrays={"temperatures": np.array([2.0, 3.0, 4.0])}), r"'temperatures' has shape \(3,\), expected"),
    (dict(arrays={"backend.rng_states": np.zeros((2, 2, 5), np.uint32)}),
     r"'backend.rng_states' has shape \(2, 2, 5\), expected \(2, 2, 6\)"),
    (dict(arrays={"extra": np.zeros(1)}), r"unexpected arrays \['extra'\]"),
    (dict(drop=("seed",)), r"header lacks the field 'seed'"),
    (dict(drop=("spins",)), r"lacks the array 'spins'"),
    (dict(header={"version": 99}), r"format version 99; this clphys .* reads versions up to 2: upgrade"),
    (dict(header={"kind": "sde-ensemble"}), r"holds a 'sde-ensemble', not a 'ising-ensemble'"),
])
def test_load_says_exactly_what_is_wrong(saved, device, change, message):
    _rewrite(saved, **change)
    with pytest.raises(CheckpointError, match=message):
        Ensemble2D.load(saved, device=device)


def test_truncated_and_foreign_files(saved, device, tmp_path):
    data = saved.read_bytes()
    for cut in (len(data) // 2, 100, 0):
        saved.write_bytes(data[:cut])
        with pytest.raises(CheckpointError, match="truncated or not an .npz"):
            Ensemble2D.load(saved, device=device)
    other = tmp_path / "plain.npz"
    np.savez(other, spins=np.ones(3))
    with pytest.raises(CheckpointError, match="no clphys header"):
        Ensemble2D.load(other, device=device)
    with pytest.raises(CheckpointError, match="does not exist"):
        Ising2D.load(tmp_path / "none.npz", device=device)


# ------------------------------------------------------------------ CLI
RUN = ["ising", "--size", "64", "--temperature", "2.4", "--sweeps", "3000", "--seed", "5", "--no-progress"]


def _result(out):
    """The printed result without the speed line (timing differs)."""
    return "\n".join(line for line in out.splitlines() if not line.startswith("speed"))


def test_cli_resume_is_bit_for_bit(device, tmp_path, capsys, monkeypatch):
    dev = ["--device", device.facts.index]
    assert main(RUN + dev) == 0
    want = _result(capsys.readouterr().out)
    ckpt = str(tmp_path / "run.npz")
    orig = clphys.progress.Progress.update

    def interrupt_midway(self, n=1):          # Ctrl-C once 1000 sweeps are done
        orig(self, n)
        if self.label == "ising" and self.done >= 1000:
            os.kill(os.getpid(), signal.SIGINT)
    monkeypatch.setattr(clphys.progress.Progress, "update", interrupt_midway)
    assert main(RUN + dev + ["--checkpoint", ckpt]) == 130
    err = capsys.readouterr().err
    assert re.fullmatch(r"clphys ising: interrupted after \d+ of 3000 sweeps; state saved in \S+run\.npz: "
                        r"continue with --resume \S+run\.npz\n", err), err
    monkeypatch.undo()
    assert main(["ising", "--resume", ckpt, "--no-progress"] + dev) == 0
    assert _result(capsys.readouterr().out) == want
    # a finished run's checkpoint prints the same result again, without sweeping
    assert main(["ising", "--resume", ckpt, "--no-progress"] + dev) == 0
    assert _result(capsys.readouterr().out) == want


def test_cli_checkpoint_is_periodic(device, tmp_path, capsys, monkeypatch):
    saves = []
    orig = ising_run.save_run
    monkeypatch.setattr(ising_run, "save_run", lambda *a: saves.append(a[2].done) or orig(*a))
    assert main(RUN + ["--device", device.facts.index, "--checkpoint", str(tmp_path / "p.npz"),
                       "--checkpoint-every", "0.001"]) == 0
    assert len(saves) > 3 and saves == sorted(saves) and saves[-1] == 3000
    capsys.readouterr()


def test_cli_resume_refuses_other_options_and_bad_files(device, tmp_path, capsys):
    ckpt = tmp_path / "r.npz"
    dev = ["--device", device.facts.index]
    assert main(["ising", "--size", "32", "--sweeps", "40", "--checkpoint", str(ckpt)] + dev) == 0
    capsys.readouterr()
    assert main(["ising", "--resume", str(ckpt), "--size", "64"] + dev) == 2
    assert "--size 64 differs from the run in" in capsys.readouterr().err
    assert main(["ising", "--resume", str(ckpt), "--size", "32x32", "--sweeps", "40"] + dev) == 0
    capsys.readouterr()
    _rewrite(ckpt, header={"run": {"sweeps": 40}})
    assert main(["ising", "--resume", str(ckpt)] + dev) == 2
    assert "the run header lacks 'dim'" in capsys.readouterr().err
    ckpt.write_bytes(ckpt.read_bytes()[:200])
    assert main(["ising", "--resume", str(ckpt)] + dev) == 2
    assert "truncated" in capsys.readouterr().err
    assert main(["ising", "--resume", str(tmp_path / "none.npz")] + dev) == 2
    assert "does not exist" in capsys.readouterr().err
