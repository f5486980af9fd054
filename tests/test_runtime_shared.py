"""The shared long-run pieces: memory check, sliced loop, output files, checkpoints."""

import json
import os
import signal
import warnings

import numpy as np
import pytest

from clphys.runtime import checkpoint as ck
from clphys.runtime.devices import fake_facts
from clphys.runtime.files import atomic_output, check_output_path
from clphys.runtime.longrun import Interrupted, run_sliced
from clphys.runtime.memory import check_memory, items_that_fit

FACTS = fake_facts("nvidia")          # 16 GiB global, 4 GiB per allocation


def test_memory_check_names_the_need_and_the_limit():
    check_memory(FACTS, {"a": 3 << 30, "b": 3 << 30}, "a job")
    with pytest.raises(ValueError, match=r"a job needs 5 GiB .*largest buffer \(a, 5 GiB\).*use fewer"):
        check_memory(FACTS, {"a": 5 << 30, "b": 1}, "a job", "use fewer replicas")
    with pytest.raises(ValueError, match=r"needs 16 GiB.*exceeds the 14.4 GiB of its 16 GiB"):
        check_memory(FACTS, {f"b{i}": 2 << 30 for i in range(8)}, "a job")


def test_items_that_fit_respects_both_limits():
    assert items_that_fit(FACTS, 1 << 20) == 4096                  # max_alloc bound
    assert items_that_fit(FACTS, 8 << 20, largest_per_item=1 << 20) == int(16 * 0.9 * 1024) // 8
    assert items_that_fit(FACTS, 1 << 20, limit=10) == 10


def test_run_sliced_covers_the_work_once_in_order():
    seen = []
    progress = []
    run_sliced(1000, lambda s, n: seen.append((s, n)), None, progress=lambda d, t: progress.append(d),
               largest=64)
    starts = [s for s, _ in seen]
    assert starts == sorted(starts) and seen[0] == (0, 1)
    assert sum(n for _, n in seen) == 1000 and all(n <= 64 for _, n in seen)
    assert all(a + n == b for (a, n), (b, _) in zip(seen, seen[1:]))
    assert progress[-1] == 1000 and progress == sorted(progress)


def test_ctrl_c_stops_at_the_next_slice_with_the_completed_count():
    done = []

    def advance(start, n):
        done.append(n)
        if sum(done) >= 5:
            os.kill(os.getpid(), signal.SIGINT)        # as if the user pressed Ctrl-C now

    with pytest.raises(Interrupted) as exc:
        run_sliced(10**6, advance, None, first=1, largest=1, what="sweeps")
    assert exc.value.done == sum(done) == 5 and exc.value.total == 10**6
    assert "interrupted after 5 of 1000000 sweeps" in str(exc.value)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


class _Clock:
    """A fake time.perf_counter / time.monotonic for the progress estimates."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_time_left_follows_the_recent_rate(monkeypatch):
    """A job whose later units are slower (a costlier second pass): after 50 units in 1 s
    and then 10 units in 10 s, the estimate for the last 40 is ~40 s (the recent rate),
    not the ~7 s of the average rate (a bar said "4.6 s left" with 31 s to go)."""
    import clphys.progress as pr
    clock = _Clock()
    monkeypatch.setattr(pr.time, "perf_counter", clock)
    monkeypatch.setattr(pr.time, "monotonic", clock)
    bar = pr.Progress(100, progress=False)
    for _ in range(50):
        clock.now += 0.02
        bar.update(1)
    assert bar.left() == pytest.approx(1.0, rel=0.05)
    for _ in range(10):
        clock.now += 1.0
        bar.update(1)
    assert bar.left() == pytest.approx(40.0, rel=0.2)
    part = bar.part(5)                  # a pass whose units count 5 each
    part.update(2)
    assert bar.done == 70
    bar.close()


def test_long_cpu_runs_warn_once_with_the_estimate(monkeypatch):
    """Work on a CPU device that will take long warns once, after a second of measured
    slices (a pass's first slice, which may include compiling, is not measured), with the
    estimate; short runs and other devices do not."""
    import clphys.progress as pr
    clock = _Clock()
    monkeypatch.setattr(pr.time, "perf_counter", clock)
    monkeypatch.setattr(pr.time, "monotonic", clock)

    def job(total, per_slice, slices, cpu=True, late_build=None):
        bar = pr.Progress(total, progress=False, label="a job")
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for k in range(slices):
                # each pass's first slice builds its kernels (5 s): not counted
                first = k % 10 == 0
                # PoCL may compile a kernel in a later slice too (a new launch shape)
                seconds = per_slice + 5.0 * first + 2.5 * (k == late_build)
                clock.now += seconds
                bar.update(1)
                pr.observe_slice("some CPU", cpu, seconds, first)
        bar.close()
        return [str(w.message) for w in seen if w.category is pr.LongRunWarning]

    found = job(1000, 0.25, 20)         # 1000 slices of 0.25 s: ~250 s
    assert len(found) == 1 and "a job: about 4 minutes on some CPU" in found[0], found
    found = job(1000, 0.25, 20, late_build=1)
    assert len(found) == 1 and "a job: about 4 minutes on some CPU" in found[0], found
    assert job(100, 0.25, 20) == []     # 25 s
    assert job(100, 0.25, 20, late_build=1) == []
    assert job(1000, 0.25, 20, cpu=False) == []


def test_atomic_output_leaves_nothing_on_failure(tmp_path):
    out = tmp_path / "r.txt"
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(out) as tmp:
            assert tmp.endswith(".txt")
            open(tmp, "w").write("half")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    with atomic_output(out) as tmp:
        open(tmp, "w").write("all")
    assert out.read_text() == "all" and len(list(tmp_path.iterdir())) == 1


def test_output_path_checked_before_work(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        check_output_path(tmp_path / "no" / "x.png")
    with pytest.raises(ValueError, match="is a folder"):
        check_output_path(tmp_path)
    with pytest.raises(ValueError, match=r"\.png"):
        check_output_path(tmp_path / "x.txt", "--plot", suffixes=(".png", ".pdf"))
    assert check_output_path(tmp_path / "x.png", suffixes=(".png",)).endswith("x.png")


SPEC = {"spins": ("int8", ("replicas", "L")), "counter": ("uint64", (None,))}


def _save(path, **changes):
    header = {"replicas": 2, "L": 3, "T": 2.5}
    arrays = {"spins": np.ones((2, 3), np.int8), "counter": np.arange(4, dtype=np.uint64)}
    header.update(changes.pop("header", {}))
    arrays.update(changes)
    ck.save_checkpoint(path, "thing", header, arrays)


def test_checkpoint_round_trip_without_pickle(tmp_path):
    p = tmp_path / "c.npz"
    _save(p)
    header, arrays = ck.load_checkpoint(p, "thing", SPEC)
    assert header["T"] == 2.5 and header["kind"] == "thing" and header["version"] == ck.VERSION
    assert np.array_equal(arrays["counter"], np.arange(4))
    with np.load(p, allow_pickle=False) as npz:      # a plain npz anyone can read
        assert set(npz.files) == {"__header__", "spins", "counter"}


@pytest.mark.parametrize("change, message", [
    ({"spins": np.ones((2, 4), np.int8)}, r"'spins' has shape \(2, 4\), expected \(2, 3\)"),
    ({"spins": np.ones((2, 3), np.int16)}, "'spins' has dtype int16, expected int8"),
    ({"header": {"L": "3"}}, "field 'L' = '3' is not of type int"),
    ({"extra": np.zeros(1)}, r"unexpected arrays \['extra'\]"),
])
def test_checkpoint_reports_what_is_wrong(tmp_path, change, message):
    p = tmp_path / "c.npz"
    _save(p, **change)
    with pytest.raises(ck.CheckpointError, match=message):
        ck.load_checkpoint(p, "thing", SPEC)


def test_checkpoint_rejects_truncated_foreign_and_newer_files(tmp_path):
    p = tmp_path / "c.npz"
    _save(p)
    with pytest.raises(ck.CheckpointError, match="holds a 'thing', not a 'other'"):
        ck.load_checkpoint(p, "other")
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ck.CheckpointError, match="truncated"):
        ck.load_checkpoint(p, "thing", SPEC)
    np.savez(p, spins=np.ones(3))
    with pytest.raises(ck.CheckpointError, match="no clphys header"):
        ck.load_checkpoint(p, "thing")
    header = {"format": ck.FORMAT, "version": ck.VERSION + 1, "kind": "thing"}
    np.savez(p, __header__=np.frombuffer(json.dumps(header).encode(), np.uint8))
    with pytest.raises(ck.CheckpointError, match=f"format version {ck.VERSION + 1}.*upgrade"):
        ck.load_checkpoint(p, "thing")
    with pytest.raises(ck.CheckpointError, match="does not exist"):
        ck.load_checkpoint(tmp_path / "none.npz", "thing")


def test_checkpoint_field_checks():
    h = {"n": 5, "x": 1.5, "rng": "philox", "flag": True}
    assert ck.field(h, "n", int, minimum=0) == 5 and ck.field(h, "x", float) == 1.5
    with pytest.raises(ck.CheckpointError, match="lacks the field 'm'"):
        ck.field(h, "m", int)
    with pytest.raises(ck.CheckpointError, match="below 6"):
        ck.field(h, "n", int, minimum=6)
    with pytest.raises(ck.CheckpointError, match="not one of"):
        ck.field(h, "rng", str, choices=("lcg",))
    with pytest.raises(ck.CheckpointError, match="not of type int"):
        ck.field(h, "flag", int)
