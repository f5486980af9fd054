"""Long SDE runs (issue 10): displacements measured from the initial
positions, slices of completed work (progress, Ctrl-C), linear sample
scheduling with the memory check first, results independent of how a run is
split, and checkpoints (npz + JSON, no pickle) that resume bit for bit and
refuse damaged or foreign files with a named error."""

import dataclasses
import functools
import json
import os
import signal

import numpy as np
import pyopencl as cl
import pytest

import clphys.runtime.longrun
import clphys.sde.ensemble
import clphys.sde.oscillators
from clphys.runtime import Interrupted, run_sliced
from clphys.runtime import checkpoint as ck
from clphys.runtime.checkpoint import CheckpointError
from clphys.runtime.render import Kernel
from clphys.sde import Ensemble, EnsembleState, Kuramoto, Model, josephson, kuramoto, models

JOSEPHSON_P = {"gamma": 0.9, "a": [3.0, 4.2], "omega": 4.9, "f": 0.1, "kT": 0.01}
INIT = {"x": ("uniform", 0, 1), "v": ("uniform", -2, 2)}
DT = 2 * np.pi / 4.9 / 40


@pytest.fixture
def small_slices(monkeypatch):
    """Slices of at most 7 steps (chunks of one block), whatever the device's
    speed: where a test presses Ctrl-C does not depend on timing."""
    for module, largest in ((clphys.sde.ensemble, 7), (clphys.sde.oscillators, 7),
                            (clphys.runtime.longrun, 1)):
        monkeypatch.setattr(module, "run_sliced", functools.partial(run_sliced, largest=largest))


def _ctrl_c_at(step):
    """A progress callable that presses Ctrl-C once `step` units are done."""
    def progress(done, total):
        if done >= step and not progress.sent:
            progress.sent = True
            os.kill(os.getpid(), signal.SIGINT)
    progress.sent = False
    return progress


# ------------------------------------------------------------------ displacement

def test_josephson_transient_zero_is_not_biased_by_the_initial_positions(device):
    """The issue's example (a = f = kT = 0, 20 periods, no transient): x -> 1/2 - x,
    v -> -v maps the model and the initial distribution onto themselves, so
    <<v>> = 0. Measuring from x = 0 instead of x(0) gave <x(0)>/span = 0.0195,
    ~80 sigma off."""
    res = josephson(a=0.0, f=0.0, kT=0.0, periods=20, transient=0, n_paths=4096, seed=1,
                    device=device)
    assert abs(float(res.v)) < 4 * float(res.v_err) + 1e-6, (res.v, res.v_err)
    assert float(res.v_err) < 0.0195 / 20


@pytest.mark.parametrize("pieces", [False, True])
def test_josephson_v_equals_a_run_sampled_every_period(device, pieces, monkeypatch):
    """Without a density josephson samples the displacement once per piece of
    its run (not every period): <<v>> and its error are bit for bit those of
    a run sampled every period (the moments of the last sample), also when
    the run is cut into many pieces."""
    periods, spp, n, transient = 7, 40, 64, 2
    if pieces:
        for module, largest in ((clphys.sde.ensemble, 3), (clphys.runtime.longrun, 1)):
            monkeypatch.setattr(module, "run_sliced", functools.partial(run_sliced, largest=largest))
    res = josephson(a=[3.0, 4.2], kT=0.01, periods=periods, transient=transient, n_paths=n,
                    steps_per_period=spp, seed=5, device=device)
    ens = Ensemble(models.JOSEPHSON, n, dict(JOSEPHSON_P, kT=0.01), DT, seed=5, initial=INIT,
                   device=device)
    ens.run(steps=transient * spp, observables=[])
    ens.set_origin()
    r = ens.run(steps=(periods - transient) * spp, sample_every=spp, observables=["displacement(x)"])
    span = (periods - transient) * spp * DT
    assert r.mean["displacement(x)"].shape[0] == periods - transient
    np.testing.assert_array_equal(res.v, r.mean["displacement(x)"][-1] / span)
    np.testing.assert_array_equal(res.v_err, np.sqrt(r.var["displacement(x)"][-1] / n) / span)


@pytest.mark.parametrize("transient", [0, 2])
def test_josephson_v_is_the_mean_per_path_displacement(device, transient):
    """<<v>> and its error are the mean and standard error of each path's own
    x(t_end) - x(t_0) over the span, as NumPy computes them from the states."""
    periods, spp, n = 6, 40, 64
    res = josephson(a=[3.0, 4.2], kT=0.01, periods=periods, transient=transient, n_paths=n,
                    steps_per_period=spp, seed=5, device=device)
    ens = Ensemble(models.JOSEPHSON, n, dict(JOSEPHSON_P, kT=0.01), DT, seed=5, initial=INIT,
                   device=device)
    if transient:
        ens.run(steps=transient * spp, observables=[])
    x0 = ens.values(unwrap=True)["x"]
    ens.run(steps=(periods - transient) * spp, observables=[])
    d = ens.values(unwrap=True)["x"] - x0
    span = (periods - transient) * spp * DT
    np.testing.assert_allclose(res.v, d.mean(axis=-1) / span, rtol=0, atol=1e-6)
    np.testing.assert_allclose(res.v_err, d.std(axis=-1, ddof=1) / np.sqrt(n) / span, rtol=1e-4)


def test_displacement_observable_counts_from_the_origin(device):
    """displacement(v) = v(now) - v(origin) per path, for periodic variables
    with the laps since; set_origin moves the origin; unwrap(x) stays the
    position (laps from the origin on)."""
    m = Model(["x", "y"], {"x": "c", "y": "c"}, parameters=["c"], periodic={"x": 0.5})
    start = {"x": [[0.1, 0.2, 0.3, 0.4]], "y": [[5.0, 6.0, 7.0, 8.0]]}
    ens = Ensemble(m, 4, {"c": [1.0]}, 0.01, initial=start, device=device)
    r = ens.run(steps=150, observables=["displacement(x)", "displacement(y)", "unwrap(x)"])
    assert r.mean["displacement(x)"][-1] == pytest.approx(1.5, abs=1e-5)
    assert r.mean["displacement(y)"][-1] == pytest.approx(1.5, abs=2e-4)    # float32 y ~ 7
    assert r.var["displacement(x)"][-1] == pytest.approx(0.0, abs=1e-9)
    assert r.mean["unwrap(x)"][-1] == pytest.approx(0.25 + 1.5, abs=1e-5)
    ens.set_origin()
    assert ens.origin_step == 150
    r = ens.run(steps=50, observables=["displacement(x)", "displacement(y)"])
    assert r.mean["displacement(x)"][-1] == pytest.approx(0.5, abs=1e-5)
    assert r.mean["displacement(y)"][-1] == pytest.approx(0.5, abs=2e-4)
    with pytest.raises(ValueError, match=r"displacement\(v\) takes one variable"):
        ens.run(steps=1, observables=["displacement(c)"])
    with pytest.raises(ValueError, match="reserved"):
        Model(["displacement"], {})


# ------------------------------------------------------------------ slices

@pytest.fixture
def launched(monkeypatch):
    """Every kernel launch's event, in order."""
    events = []
    call = Kernel.__call__

    def recording(self, *args, **kwargs):
        ev = call(self, *args, **kwargs)
        events.append((self.name, ev))
        return ev
    monkeypatch.setattr(Kernel, "__call__", recording)
    return events


def _check_progress_is_completed_work(events, steps_of):
    """A progress callable asserting that every launch so far has finished and
    that `done` equals the steps those launches made."""
    seen = []

    def progress(done, total):
        assert all(ev.command_execution_status == cl.command_execution_status.COMPLETE
                   for _, ev in events), "progress reported before the queued work finished"
        assert done == steps_of(), (done, steps_of())
        seen.append(done)
    return progress, seen


def test_ensemble_progress_counts_completed_steps(device, launched, small_slices):
    ens = Ensemble(models.JOSEPHSON, 32, JOSEPHSON_P, DT, initial=INIT, device=device)
    progress, seen = _check_progress_is_completed_work(launched, lambda: ens.step)
    ens.run_plan(ens.plan_run(steps=2000, sample_every=40, observables=["v"]).with_steps_per_launch(16),
                 progress)
    assert seen[-1] == 2000 and seen == sorted(seen) and len(seen) > 1


def test_kuramoto_progress_counts_completed_steps(device, launched, small_slices):
    sim = Kuramoto(256, 2.0, kT=0.5, dt=0.02, device=device)
    progress, seen = _check_progress_is_completed_work(launched, lambda: sim.step)
    sim.run(steps=300, sample_every=7, progress=progress)
    assert seen[-1] == 300 and seen == sorted(seen) and len(seen) > 1


def test_josephson_progress_counts_completed_steps(device, launched, small_slices):
    steps = []
    # the ensemble inside josephson is reached through the events: count steps from progress
    progress, seen = _check_progress_is_completed_work(launched, lambda: steps[-1])

    def counting(done, total):
        steps.append(done)
        progress(done, total)
    josephson(a=4.2, n_paths=16, periods=8, transient=2, steps_per_period=25, density_bins=4,
              progress=counting, device=device)
    assert seen[-1] == 200 and seen == sorted(seen)


def test_ctrl_c_stops_a_run_at_a_consistent_step(device, small_slices):
    """Ctrl-C inside run(): Interrupted at a slice boundary, the ensemble at its
    last completed step, the samples so far in exc.partial; continuing gives
    the uninterrupted state bit for bit."""
    ref = Ensemble(models.JOSEPHSON, 32, JOSEPHSON_P, DT, initial=INIT, seed=2, device=device)
    want = ref.run(steps=400, sample_every=40, observables=["displacement(x)"])
    ens = Ensemble(models.JOSEPHSON, 32, JOSEPHSON_P, DT, initial=INIT, seed=2, device=device)
    with pytest.raises(Interrupted) as exc:
        ens.run(steps=400, sample_every=40, observables=["displacement(x)"], progress=_ctrl_c_at(50))
    k = exc.value.done
    assert 50 <= k < 400 and ens.step == k
    part = exc.value.partial
    assert part.times.size == k // 40
    np.testing.assert_array_equal(part.mean["displacement(x)"], want.mean["displacement(x)"][:k // 40])
    ens.run(steps=400 - k, observables=[])
    assert np.array_equal(ens.values()["x"], ref.values()["x"])


def test_results_do_not_depend_on_the_launch_split(device):
    """t is carried from launch to launch (resynchronised from float64 at
    fixed steps), so steps per launch, slices and separate run() calls give
    the same bits, also across a resync step."""
    out = []
    for spl, pieces in ((None, [300]), (1, [300]), (7, [300]), (None, [13, 1, 150, 136])):
        ens = Ensemble(models.JOSEPHSON, 16, JOSEPHSON_P, DT, initial=INIT, seed=4, device=device)
        st = ens.state()
        ens = Ensemble.from_state(dataclasses.replace(
            st, step=16384 - 100, origin_step=16384 - 100,
            time=ens._exact_time(16384 - 100)), device=device)          # crosses a resync
        for n in pieces:
            plan = ens.plan_run(steps=n, observables=[])
            ens.run_plan(plan if spl is None else plan.with_steps_per_launch(spl))
        out.append(ens.state())
    for s in out[1:]:
        assert np.array_equal(s.values, out[0].values) and np.array_equal(s.laps, out[0].laps)
        assert np.array_equal(s.time, out[0].time)


def test_kuramoto_in_pieces_equals_one_run(device):
    for kernel in ("mean-field", "all-pairs"):
        a = Kuramoto(200, 3.0, kT=0.5, dt=0.02, kernel=kernel, seed=3, device=device)
        b = Kuramoto(200, 3.0, kT=0.5, dt=0.02, kernel=kernel, seed=3, device=device)
        ra = a.run(steps=60, sample_every=10)
        rb = [b.run(steps=n, sample_every=10) for n in (20, 40)]
        assert np.array_equal(a._theta.get(), b._theta.get()), kernel
        np.testing.assert_array_equal(ra.r, np.concatenate([rb[0].r, rb[1].r[1:]]))


def test_sample_every_one_is_scheduled_linearly_and_memory_checked_first(device, launched, monkeypatch):
    ens = Ensemble(models.BROWNIAN, 8, {"D": 1.0}, 0.01, device=device)
    res = ens.run_plan(ens.plan_run(steps=3000, sample_every=1, observables=["x"]).with_steps_per_launch(64))
    assert res.times.shape == (3000,) and res.mean["x"].shape == (3000,)
    assert sum(name == "sde_advance" for name, _ in launched) == 3000
    # 10^15 samples: the memory check answers before any list is built or program made
    monkeypatch.setattr(Ensemble, "_program", lambda *a: pytest.fail("built a program first"))
    with pytest.raises(ValueError, match=r"this run \(1000000000000000 samples .* needs"):
        ens.run(steps=10**15, sample_every=1, observables=["x"])
    k = Kuramoto(8, 1.0, device=device)
    with pytest.raises(ValueError, match=r"1000000000000001 samples\) needs"):
        k.run(steps=10**15, sample_every=1)


# ------------------------------------------------------------------ checkpoints

def _rewrite(path, header_change=None, drop=(), arrays=None, drop_field=None):
    """Rewrite a checkpoint with its header or arrays changed (as a damaged or
    foreign file would be)."""
    with np.load(path, allow_pickle=False) as npz:
        files = {k: npz[k] for k in npz.files}
    header = json.loads(files.pop("__header__").tobytes().decode())
    header.update(header_change or {})
    if drop_field:
        del header[drop_field]
    files.update(arrays or {})
    for k in drop:
        del files[k]
    header["arrays"] = {k: {"dtype": str(v.dtype), "shape": list(v.shape)} for k, v in files.items()}
    ck._write(path, header, files)          # sealed again: the loader's own checks must catch it


@pytest.mark.parametrize("rng", ["philox", "xorshift32"])
def test_ensemble_save_load_resumes_bit_for_bit(device, tmp_path, rng):
    path = tmp_path / "ens.npz"
    ens = Ensemble(models.JOSEPHSON, 24, JOSEPHSON_P, DT, rng=rng, seed=9, initial=INIT, device=device)
    ens.run(steps=31, observables=[])
    ens.set_origin()
    ens.run(steps=17, observables=[])
    ens.save(path)
    with np.load(path, allow_pickle=False) as npz:          # plain numeric arrays and a JSON header
        assert all(npz[k].dtype.kind in "biuf" for k in npz.files)
    again = Ensemble.load(path, model=models.JOSEPHSON, device=device)
    assert again.step == 48 and again.origin_step == 31 and again.grid_shape == (2,)
    a = ens.run(steps=45, sample_every=9, observables=["displacement(x)", "v"])
    b = again.run(steps=45, sample_every=9, observables=["displacement(x)", "v"])
    for k in a.mean:
        np.testing.assert_array_equal(a.mean[k], b.mean[k])
    assert np.array_equal(ens.values()["x"], again.values()["x"])
    assert np.array_equal(Ensemble.from_state(path, device=device).values()["v"],
                          EnsembleState.load(path).values[1].reshape(2, 24))


def test_ensemble_state_refuses_bad_fields_at_once(device):
    st = Ensemble(models.JOSEPHSON, 8, JOSEPHSON_P, DT, device=device).state()
    assert st.model == models.JOSEPHSON and isinstance(st.model_description, dict)
    with pytest.raises(ValueError, match="step must be >= 0"):
        dataclasses.replace(st, step=-5)
    with pytest.raises(ValueError, match=r"values is float32 \(2, 15\).* needs float32 \(2, 16\)"):
        dataclasses.replace(st, values=st.values[:, :-1])          # a truncated state
    with pytest.raises(ValueError, match=r"xs_state is uint32 \(0,\).*needs uint32 \(16,\)"):
        dataclasses.replace(st, rng="xorshift32")
    with pytest.raises(ValueError, match=r"laps is int64"):
        dataclasses.replace(st, laps=st.laps.astype(np.int64))
    with pytest.raises(ValueError, match="origin_step must be <= 0"):
        dataclasses.replace(st, origin_step=3)
    with pytest.raises(TypeError, match="values must be a NumPy array"):
        dataclasses.replace(st, values=st.values.tolist())
    with pytest.raises(ValueError, match="model_description"):
        dataclasses.replace(st, model_description={"variables": ["x"]})
    with pytest.raises(ValueError, match="not a parameter"):
        dataclasses.replace(st, params={**st.params, "b": 1.0})
    with pytest.raises(TypeError, match="EnsembleState or a checkpoint file name"):
        Ensemble.from_state({"step": 1})


@pytest.mark.parametrize("damage, message", [
    (dict(header_change={"n_paths": 7}), r"values is float32 \(2, 16\).*needs float32 \(2, 14\)"),
    (dict(header_change={"n_paths": "8"}), "field 'n_paths' = '8' is not of type int"),
    (dict(header_change={"step": -5}), "field 'step' = -5 is below 0"),
    (dict(header_change={"dtype": "float16"}), "field 'dtype' = 'float16' is not one of"),
    (dict(header_change={"params": {"a": 1}}), "field 'params' = .* is not of type list"),
    (dict(header_change={"params": [[["a"], [1.0]]]}), "params: no value for"),
    (dict(header_change={"model": {"variables": ["x"], "drift": {"x": "y"}}}), "unknown name 'y'"),
    (dict(header_change={"time_resync": 1}), "field 'time_resync'"),
    (dict(drop_field="origin_step"), "header lacks the field 'origin_step'"),
    (dict(drop=("origin",)), "lacks the array 'origin'"),
    (dict(arrays={"values": np.zeros((2, 16), np.float64)}), "'values' has dtype float64, expected float32"),
    (dict(arrays={"laps": np.zeros((1, 12), np.int32)}), r"laps is int32 \(1, 12\)"),
])
def test_ensemble_load_names_what_is_wrong(device, tmp_path, damage, message):
    path = tmp_path / "e.npz"
    Ensemble(models.JOSEPHSON, 8, JOSEPHSON_P, DT, device=device).save(path)
    _rewrite(path, **damage)
    with pytest.raises(CheckpointError, match=message):
        Ensemble.load(path, device=device)


def test_truncated_foreign_and_other_model_files(device, tmp_path):
    path = tmp_path / "e.npz"
    Ensemble(models.JOSEPHSON, 8, JOSEPHSON_P, DT, device=device).save(path)
    with pytest.raises(CheckpointError, match="holds the model"):
        Ensemble.load(path, model=models.BROWNIAN, device=device)
    data = path.read_bytes()
    for cut in (len(data) // 3, len(data) - 10):
        path.write_bytes(data[:cut])
        with pytest.raises(CheckpointError, match="truncated"):
            Ensemble.load(path, device=device)
    Kuramoto(16, 1.0, device=device).save(path)
    with pytest.raises(CheckpointError, match="holds a 'sde-kuramoto', not a 'sde-ensemble'"):
        Ensemble.load(path, device=device)
    with pytest.raises(ValueError, match=r"must end in one of \.npz"):
        Ensemble(models.BROWNIAN, 2, {"D": 1.0}, 0.1, device=device).save(tmp_path / "e.pickle")


def test_kuramoto_save_load_resumes_bit_for_bit(device, tmp_path):
    path = tmp_path / "k.npz"
    rng = np.random.default_rng(0)
    K = rng.uniform(0, 2, (40, 40)) / 40
    om = rng.normal(size=40)
    for coupling, kernel in ((2.0, "mean-field"), (K, "all-pairs")):
        sim = Kuramoto(40, coupling, kT=0.4, gamma=1.3, omega=om, dt=0.03, kernel=kernel, seed=6,
                       work_group_size=8, device=device)
        sim.run(steps=11)
        sim.save(path)
        again = Kuramoto.load(path, device=device)
        ra, rb = sim.run(steps=23, sample_every=5), again.run(steps=23, sample_every=5)
        assert np.array_equal(sim._theta.get(), again._theta.get()), kernel
        np.testing.assert_array_equal(ra.r, rb.r)
        assert again.step == 34 and again.work_group_size == 8
    _rewrite(path, arrays={"theta": np.zeros(39, np.float32)})
    with pytest.raises(CheckpointError, match=r"'theta' has shape \(39,\), expected \(40,\)"):
        Kuramoto.load(path, device=device)
    _rewrite(path, arrays={"theta": np.full(40, np.nan, np.float32)})
    with pytest.raises(CheckpointError, match="not finite"):
        Kuramoto.load(path, device=device)


# ------------------------------------------------------------------ josephson / kuramoto runs

JKW = dict(a=[4.0, 4.2], f=0.1, kT=0.01, n_paths=32, periods=10, transient=3, steps_per_period=40,
           density_bins=8, seed=3)


@pytest.mark.parametrize("rng", ["philox", "xorshift32"])
def test_josephson_resumes_bit_for_bit(device, tmp_path, small_slices, rng):
    """Interrupted in the transient, at its end, mid-period and near the end:
    the resumed result equals the uninterrupted one bit for bit."""
    path = tmp_path / "j.npz"
    kw = dict(JKW, rng=rng, device=device)
    ref = josephson(**kw)
    for stop in (5, 120, 150, 390):
        with pytest.raises(Interrupted) as exc:
            josephson(**kw, progress=_ctrl_c_at(stop), checkpoint=path)
        assert exc.value.done < 400 and "state written to" in exc.value.kept
        res = josephson(**kw, resume=path)
        for k in ("v", "v_err", "density"):
            np.testing.assert_array_equal(getattr(res, k), getattr(ref, k), err_msg=f"{k} {stop}")


def test_periodic_checkpoints_and_resume_checks(device, tmp_path, small_slices):
    path = tmp_path / "j.npz"
    ref = josephson(**JKW, checkpoint=path, checkpoint_every=0.0, device=device)
    with np.load(path) as npz:                       # written during the run, before its end
        assert 0 < json.loads(npz["__header__"].tobytes())["step"] < 400
    res = josephson(**JKW, resume=path, device=device)
    np.testing.assert_array_equal(res.v, ref.v)
    with pytest.raises(CheckpointError, match=r"another run: n_paths is 32 there, 16 here"):
        josephson(**dict(JKW, n_paths=16), resume=path, device=device)
    with pytest.raises(CheckpointError, match=r"another run: params .*; periods is 10 there, 12 here"):
        josephson(**dict(JKW, a=4.1, periods=12), resume=path, device=device)
    with pytest.raises(CheckpointError, match="holds a 'sde-josephson', not a 'sde-kuramoto-run'"):
        kuramoto(16, 1.0, t_end=0.1, resume=path, device=device)
    _rewrite(path, drop=("hist",))
    with pytest.raises(CheckpointError, match="lacks the array 'hist'"):
        josephson(**JKW, resume=path, device=device)


def test_kuramoto_run_resumes_bit_for_bit(device, tmp_path, small_slices):
    path = tmp_path / "k.npz"
    kw = dict(n=256, coupling=3.0, kT=0.5, gamma=1.5, t_end=1.0, dt=0.02, sample_every=7, seed=4,
              device=device)
    ref = kuramoto(**kw)
    for stop in (1, 20, 45):
        with pytest.raises(Interrupted):
            kuramoto(**kw, progress=_ctrl_c_at(stop), checkpoint=path)
        res = kuramoto(**kw, resume=path)
        for k in ("times", "r", "psi", "theta"):
            np.testing.assert_array_equal(getattr(res, k), getattr(ref, k), err_msg=f"{k} {stop}")
    with pytest.raises(CheckpointError, match=r"another run: kT differs \(there 0.5, here 0.6\)"):
        kuramoto(**dict(kw, kT=0.6), resume=path)
    with pytest.raises(CheckpointError, match="another run: initial differs"):
        kuramoto(**dict(kw, initial="sync"), resume=path)
