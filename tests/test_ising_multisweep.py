"""Multispin with several sweeps per launch (ising_ms_multisweep, temporal
blocking in local memory): the same spins as single launches, bit for bit,
for bands with halos, 3D bands cut in y too, one sweep per launch, and
whole replicas, both decision modes; Oclgrind checks the barriers (races,
uninitialised reads)."""

import numpy as np
import pytest

from clphys.ising import Ensemble2D, Ensemble3D, Ising2D
from clphys.ising import reference as ref
from clphys.ising.backends import multispin_fold
from clphys.ising.multispin import MultispinBackend
from clphys.ising.multispin_plan import LaunchChoice, tuned
from clphys.ising.thresholds import metropolis_thresholds
from clphys.runtime import fake_facts

ENSEMBLE = {2: Ensemble2D, 3: Ensemble3D}


def _thr(dim, temps, J=1.0, h=0.0):
    return np.stack([metropolis_thresholds(dim, T, J, h) for T in temps])


CASES = [((64, 8), 1.0, 0.0, {"sweeps_per_launch": 2}, (8, 0), None),                # whole replica
         ((64, 8), 1.0, 0.0, {}, (8, 0), None),                # default plan: whole, runs of rows
         ((64, 16), 1.0, 0.2, {"sweeps_per_launch": 2, "band": 2}, (2, 4), None),     # halo 4 > band
         ((128, 12), -1.0, 0.0, {"sweeps_per_launch": 2, "band": 4, "spins_per_word": 1}, (4, 4), None),
         ((64, 12), 1.0, 0.0, {"sweeps_per_launch": 1, "band": 3}, (3, 2), None),    # one launch per sweep
         # rows of 3 words (Lx = 192): items of one word (single launches crashed on CPUs)
         ((192, 8), 1.0, 0.1, {"sweeps_per_launch": 1}, None, None),
         ((192, 8), 1.0, 0.0, {"sweeps_per_launch": 2, "band": 4}, (4, 4), None),
         ((16, 4, 8), 1.0, 0.0, {"sweeps_per_launch": 3, "band": 2}, (2, 6), None),
         ((16, 4, 8), 1.0, 0.3, {"sweeps_per_launch": 3}, (8, 0), None),
         ((128, 2, 6), 0.5, -0.2, {"sweeps_per_launch": 2, "band": 3, "lanes": 1}, (3, 4), None),
         # 3D bands cut in y: halos in y and z, in y only, one sweep per launch
         ((128, 8, 6), 1.0, 0.1, {"sweeps_per_launch": 2, "band": (2, 4)}, (2, 4), (4, 4)),
         ((64, 6, 4), 1.0, 0.0, {"sweeps_per_launch": 2, "band": (4, 2), "lanes": 1}, (4, 0), (2, 4)),
         ((16, 16, 4), -1.0, 0.0, {"sweeps_per_launch": 1, "band": (2, 2), "spins_per_word": 1}, (2, 2),
          (2, 2)),
         # folded rows (3D Lx < 64, 4 or 2 rows per word): whole replicas, items of
         # whole planes (lanes 8) or one word (lanes 1), then a band cut in y
         ((16, 16, 4), 1.0, 0.1, {"sweeps_per_launch": 2}, (4, 0), None),
         ((32, 8, 4), 1.0, 0.0, {"sweeps_per_launch": 2, "lanes": 1, "spins_per_word": 1}, (4, 0), None),
         ((32, 8, 6), 1.0, -0.2, {"sweeps_per_launch": 1, "band": (3, 2), "lanes": 1}, (3, 2), (2, 2))]


@pytest.mark.parametrize("shape,J,h,opts,band,yband", CASES)
def test_multisweep_matches_numpy_twin(device, shape, J, h, opts, band, yband):
    """5 sweeps (launches of 1, 2 or 3 sweeps and a shorter last one), then 2
    more: the twin's spins and sums, bit for bit; the one-word mode gives the
    checkerboard algorithm's spins."""
    temps = [1.9, 2.6, 4.6]
    ens = tuned(ENSEMBLE[len(shape)], shape, temps, J=J, h=h, seed=5, device=device, **opts)
    assert (ens._backend.band, ens._backend.yband) == (band, yband)
    start = ens.spins()
    ens.sweep(5)
    ens.sweep(2)
    spw = opts.get("spins_per_word", "auto")
    want = ref.multispin_sweeps(start, _thr(len(shape), temps, J, h), 7, seed=5, spins_per_word=spw)
    got = ens.spins()
    assert np.any(got != start)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.stack(ens.sums()), np.stack(ref.sums(want)))
    if spw == 1:
        np.testing.assert_array_equal(got, ref.checkerboard_sweeps(start, _thr(len(shape), temps, J, h), 7,
                                                                   seed=5))


def test_multisweep_sample_and_checkpoint(device):
    """Measurements between multi-sweep launches and a resumed state continue
    the same chain as single launches."""
    kw = dict(seed=8, device=device)
    a = tuned(Ensemble2D, (64, 16), [2.2, 2.4], sweeps_per_launch=2, band=4, **kw)
    b = tuned(Ensemble2D, (64, 16), [2.2, 2.4], sweeps_per_launch=1, **kw)
    sa, sb = a.sample(3, every=3), b.sample(3, every=3)
    np.testing.assert_array_equal(sa.energy, sb.energy)
    state = a.state()
    a.sweep(3)
    again = Ensemble2D.from_state(state, device=device)
    again.sweep(3)
    np.testing.assert_array_equal(again.spins(), a.spins())
    # a state written when the launch plan was an option loads, and plans its own launches
    older = Ensemble2D.from_state(dict(state, options={"sweeps_per_launch": 2, "band": 4}), device=device)
    np.testing.assert_array_equal(older.sweep(3).spins(), a.spins())


@pytest.mark.slow
@pytest.mark.parametrize("opts", [{"sweeps_per_launch": 2, "band": (2, 4)},
                                  {"sweeps_per_launch": 1, "band": (3, 2), "lanes": 1}])
def test_multisweep_continues_the_replica_numbering(device, opts):
    """Replicas 2, 3 of an ensemble run in 3D tiles cut in y are an ensemble of
    2 with replica_offset 2 (the Philox replica index of a split ensemble)."""
    temps = [3.9, 4.3, 4.5, 5.0]
    whole = tuned(Ensemble3D, (64, 8, 6), temps, seed=6, device=device, **opts)
    part = tuned(Ensemble3D, (64, 8, 6), temps[2:], seed=6, replica_offset=2, device=device, **opts)
    assert part._backend.yband is not None
    start = whole.spins()
    whole.sweep(3)
    part.sweep(3)
    assert np.any(part.spins() != start[2:])
    np.testing.assert_array_equal(part.spins(), whole.spins()[2:])


@pytest.mark.slow
def test_pocl_and_oclgrind_agree(device, oclgrind):
    """The multi-sweep kernel on Oclgrind (barriers: race and uninitialised
    checks), bands with halos and whole replicas, 2D and 3D."""
    cases = [((64, 8), {"sweeps_per_launch": 2, "band": 2}), ((8, 2, 4), {"sweeps_per_launch": 2}),
             ((16, 2, 6), {"sweeps_per_launch": 1 + 1, "band": 2, "spins_per_word": 1}),
             ((64, 6, 4), {"sweeps_per_launch": 2, "band": (2, 2)}),
             ((64, 6, 4), {"sweeps_per_launch": 1, "band": (4, 3), "lanes": 1}),
             ((16, 8, 4), {"sweeps_per_launch": 2}), ((16, 8, 4), {"sweeps_per_launch": 2, "spins_per_word": 1}),
             ((32, 8, 4), {"sweeps_per_launch": 1, "band": (2, 2), "lanes": 1})]
    for shape, opts in cases:
        out = []
        for dev in (device, oclgrind):
            ens = tuned(ENSEMBLE[len(shape)], shape, [2.0, 3.5], seed=9, h=0.1, device=dev, **opts)
            ens.sweep(3)
            out.append(ens.spins())
        np.testing.assert_array_equal(out[0], out[1], err_msg=f"{shape} {opts}")


def test_options_checked(device):
    with pytest.raises(ValueError, match=r"band must be an integer or \(z planes, y rows\)"):
        LaunchChoice(band=(1, 2, 3))
    with pytest.raises(ValueError, match="band must be >= 1"):
        LaunchChoice(band=(2, 0))
    with pytest.raises(ValueError, match=r"band must be an integer \(rows per band\) in 2D"):
        tuned(Ensemble2D, (64, 16), [2.0], sweeps_per_launch=2, band=(2, 2), device=device)
    with pytest.raises(ValueError, match="band must divide 8 and its y rows divide 6"):
        tuned(Ensemble3D, (64, 6, 8), [4.0], sweeps_per_launch=2, band=(2, 4), device=device)
    with pytest.raises(ValueError, match="sweeps_per_launch must be >= 1"):
        tuned(Ensemble2D, 16, [2.0], sweeps_per_launch=0)
    with pytest.raises(ValueError, match="band must divide 16"):
        tuned(Ensemble2D, (64, 16), [2.0], sweeps_per_launch=2, band=3, device=device)
    # rows of 2^21 words: a band with its 8-row halos exceeds any local memory
    with pytest.raises(ValueError, match="fits the .* bytes of local memory"):
        tuned(Ensemble2D, (2**26, 8), [2.0], sweeps_per_launch=4, device=device)
    assert tuned(Ensemble2D, (64, 16), [2.0], sweeps_per_launch=1, device=device)._backend.band is None
    for knob in ({"sweeps_per_launch": 1}, {"band": 4}):     # launch plans are internal (tuned)
        with pytest.raises(TypeError, match="unknown option"):
            Ensemble2D((64, 16), [2.0], algorithm="multispin", device=device, **knob)
    assert not hasattr(Ising2D, "halo_times")       # a split lattice's trace is its backend's


def _gpu_plan(shape, replicas=1):
    """(sweeps per launch, tile) the planner picks on an H100's facts, without a device."""
    be = MultispinBackend.__new__(MultispinBackend)
    be.dim, be.shape, be.R = len(shape), tuple(shape), replicas
    be.N, be.Lz, be.WR = int(np.prod(shape)), shape[-1], max(1, shape[0] // 64)
    be.plane_rows = shape[1] // multispin_fold(shape)
    return be._plan_launches(LaunchChoice(), type("Dev", (), {"facts": fake_facts("nvidia")})())


def test_gpu_plans_fill_the_device_in_3d():
    # 3D L = 128: 64 bands of whole planes would leave half of 132 compute units idle;
    # tiles cut in y fill them (H100: 175 -> 338 flips/ns)
    spl, (T, BH, TY, HY) = _gpu_plan((128, 128, 128))
    assert (spl, TY is not None) == (4, True) and (128 // T) * (128 // TY) >= 128
    # a whole replica in local memory and 2D bands stay as measured
    assert _gpu_plan((32, 32, 32)) == (4, (32, 0, None, 0))
    assert _gpu_plan((512, 512)) == (4, (64, 8, None, 0))
    # ensembles that occupy the device with whole-plane bands keep them
    assert _gpu_plan((128, 128, 128), replicas=16)[1][2] is None
    assert _gpu_plan((64, 64, 64), replicas=64)[1][2] is None
