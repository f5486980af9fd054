"""The shared long-run pieces: memory check, sliced loop, output files, checkpoints."""

import json
import os
import signal

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
