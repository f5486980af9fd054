"""The recorded benchmark figures: every JSON line in benchmarks/results/ has the
fields of benchmarks/_report.py, and the committed RESULTS.md is what
benchmarks/make_results.py makes of them (no device needed)."""

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import _report  # noqa: E402
import make_results  # noqa: E402

RESULTS = sorted((BENCH / "results").glob("*.jsonl"))


def test_there_are_results_for_every_domain():
    assert {p.stem for p in RESULTS} == set(make_results.DOMAINS)


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_every_line_has_the_required_fields(path):
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    assert lines, f"{path.name} is empty"
    for n, line in enumerate(lines, 1):
        rec = json.loads(line)
        assert _report.problems(rec) == [], f"{path.name}:{n}"
        # a committed figure names its device and date; a missing value is a range
        assert rec["device"] and rec["date"], f"{path.name}:{n}"
        assert rec["value"] is not None or len(rec.get("range", ())) == 2, f"{path.name}:{n}"


def test_results_md_is_the_generated_table():
    text = (BENCH / "RESULTS.md").read_text()
    assert text == make_results.render(), "run: python benchmarks/make_results.py"
    # current figures only (superseded records stay out): a table, not a diary
    # (the symmetric multicanonical runs add a row per size, the runs on two GPUs a few, the
    # kernel rates from walkers spread over the range a row per row of random starts, the
    # first run from empty caches a row, a production on other walkers than the iteration's a row,
    # a production that takes several calls a row while it runs)
    assert text.count("\n") <= 375


def test_a_report_writes_lines_that_read_back(tmp_path, capsys):
    out = tmp_path / "x.jsonl"
    report = _report.Report(out, device="Some GPU", driver="1.2", command="python bench.py")
    report.add("w L=8", "flips_per_ns", 1.5, peer={"name": "other code", "value": 0.5}, sweeps=3)
    report.add("w L=8", "seconds", float("nan"), ranks=4)
    recs = _report.read_jsonl(out)
    assert [r["metric"] for r in recs] == ["flips_per_ns", "seconds"]
    assert recs[0]["peer"] == {"name": "other code", "value": 0.5} and recs[0]["sweeps"] == 3
    assert recs[1]["value"] is None and recs[1]["ranks"] == 4       # NaN is not JSON
    assert all(r["command"] == "python bench.py" and r["device"] == "Some GPU" for r in recs)
    assert recs[0]["date"] == recs[1]["date"]                         # one run: one date
    assert capsys.readouterr().out.count("\n") == 2                  # printed as well


def test_the_command_names_its_device_and_its_mpi_launch(monkeypatch):
    for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "PYOPENCL_CTX"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("CLPHYS_DEVICE", "nvidia")
    argv = ["bench.py", "--sizes3d", ""]
    assert _report.command_line(argv) == "CLPHYS_DEVICE=nvidia python bench.py --sizes3d ''"
    monkeypatch.setenv("PMI_SIZE", "2")
    assert _report.command_line(argv) == "CLPHYS_DEVICE=nvidia mpiexec -n 2 python bench.py --sizes3d ''"


@pytest.mark.parametrize("change, message", [
    ({"ranks": 0}, "ranks"), ({"value": "fast"}, "value"), ({"date": "yesterday"}, "ISO"),
    ({"peer": {"value": 1.0}}, "peer"), ({"workload": ""}, "workload")])
def test_bad_records_are_named(change, message):
    rec = {"date": "2026-11-27", "device": "d", "driver": None, "ranks": 1, "workload": "w",
           "metric": "m", "value": 1.0, "unit": None, "command": None}
    assert _report.problems(rec) == []
    assert any(message in p for p in _report.problems({**rec, **change}))
    del rec["unit"]
    assert _report.problems(rec) == ["missing key 'unit'"]


def _write(path, *recs):
    base = {"device": "GPU", "driver": "1", "ranks": 1, "metric": "flips_per_ns", "unit": None,
            "command": "python benchmarks/bench_ising.py"}
    path.write_text("".join(json.dumps({**base, **r}) + "\n" for r in recs))


def test_the_latest_figure_of_a_workload_wins(tmp_path):
    _write(tmp_path / "ising.jsonl",
           {"date": "2026-11-25T09:00:00+00:00", "workload": "L=64", "value": 2.0},
           {"date": "2026-11-24", "workload": "L=64", "value": 1.0},            # older: loses
           {"date": "2026-11-25", "workload": "L=64", "value": 3.0},            # same day, later line
           {"date": "2026-11-25", "workload": "L=128", "value": 7.0, "peer": {"name": "np", "value": 0.1}},
           {"date": "2026-11-26", "workload": "L=64", "value": 4.0, "ranks": 2})  # other rank count
    text = make_results.render(tmp_path)
    rows = [line for line in text.splitlines() if line.startswith("| L=")]
    # L=64 and L=128 of one rank count share a row (fold)
    assert rows == ["| L=64/128 | 1 | 3/7 flips_per_ns | - / np: 0.1 | r1 |",
                    "| L=64 | 2 | 4 flips_per_ns |  | r2 |"]
    assert "- r1: 2026-11-25, driver 1: `python benchmarks/bench_ising.py`" in text


def test_a_newer_device_of_the_same_kind_supersedes(tmp_path):
    """Per kind (GPU, CPU) the latest figure of a workload and metric, under its device:
    an H200's run replaces the H100's figure, not the CPU's; a figure the newer run
    lacks stays under the older device."""
    _write(tmp_path / "ising.jsonl",
           {"date": "2026-11-24", "workload": "L=64", "value": 1.0, "device": "NVIDIA H100 80GB HBM3"},
           {"date": "2026-11-24", "workload": "L=256", "value": 5.0, "device": "NVIDIA H100 80GB HBM3"},
           {"date": "2026-11-24", "workload": "L=64", "value": 0.5, "device": "pthread-AMD EPYC"},
           {"date": "2026-11-26", "workload": "L=64", "value": 2.0, "device": "NVIDIA H200"})
    text = make_results.render(tmp_path)
    sections = {part.split("\n")[0]: part for part in text.split("### ")[1:]}
    assert set(sections) == {"NVIDIA H100 80GB HBM3", "NVIDIA H200", "pthread-AMD EPYC"}
    assert "| L=256 | 5 flips_per_ns | r1 |" in sections["NVIDIA H100 80GB HBM3"]
    assert "L=64" not in sections["NVIDIA H100 80GB HBM3"]
    assert "| L=64 | 2 flips_per_ns | r1 |" in sections["NVIDIA H200"]
    assert "| L=64 | 0.5 flips_per_ns | r1 |" in sections["pthread-AMD EPYC"]
    assert [make_results.device_kind(d) for d in ("NVIDIA H200", "AMD Radeon RX 7900 XTX", "gfx90a",
                                                  "Intel(R) Arc(TM) A770 Graphics", "pthread-AMD EPYC",
                                                  "llvmpipe (LLVM 15.0.7, 256 bits)")] == ["GPU"] * 4 + ["CPU"] * 2


def test_rows_one_word_apart_share_a_line(tmp_path):
    """Rows that differ in one word (a name=value's value, or a plain word) share a line,
    in the order of the values; rows two words apart, of another metric or with extras
    do not."""
    _write(tmp_path / "ising.jsonl",
           {"date": "2026-11-25", "workload": "m 2D L=512 k=1", "value": 3.0},
           {"date": "2026-11-25", "workload": "m 2D L=64 k=1", "value": 1.0},
           {"date": "2026-11-25", "workload": "m 3D L=64 k=1", "value": 9.0},        # another family
           {"date": "2026-11-26", "workload": "m 2D L=2^7 k=1", "value": 2.0},      # another run
           {"date": "2026-11-25", "workload": "m 2D L=64 k=2", "value": 4.0, "metric": "seconds"},
           {"date": "2026-11-25", "workload": "a float32", "value": 5.0},
           {"date": "2026-11-25", "workload": "a float64", "value": 6.0, "gb_per_s": 1.5},
           {"date": "2026-11-25", "workload": "b R=4", "value": 7.0},
           {"date": "2026-11-25", "workload": "b L=4", "value": 8.0})
    rows = [line for line in make_results.render(tmp_path).splitlines() if line.startswith("| ")][1:]
    assert rows == ["| m 2D L=64/2^7/512 k=1 | 1/2/3 flips_per_ns | r1/r2/r1 |",
                    "| m 2D L=64 k=2 | 4 seconds | r1 |",          # its family's rows come together
                    "| m 3D L=64 k=1 | 9 flips_per_ns | r1 |",
                    "| a float32 | 5 flips_per_ns | r1 |",
                    "| a float64 | 6 flips_per_ns (gb_per_s 1.5) | r1 |",
                    "| b R=4 | 7 flips_per_ns | r1 |",
                    "| b L=4 | 8 flips_per_ns | r1 |"]


def test_an_unknown_results_file_is_refused(tmp_path):
    _write(tmp_path / "nonsense.jsonl", {"date": "2026-11-25", "workload": "w", "value": 1.0})
    with pytest.raises(ValueError, match="nonsense"):
        make_results.render(tmp_path)


@pytest.mark.parametrize("value, text", [(3001.5, "3001.5"), (1.602e12, "1.602e12"), (0.002001, "0.002001"),
                                         (376918482.8233183, "3.769e8"), (2e-5, "2e-5"), (121, "121"),
                                         (True, "yes")])
def test_values_are_shown_as_recorded(value, text):
    assert make_results.fmt(value) == text


@pytest.mark.parametrize("fixed, per, smallest, want", [(1.0, 0.01, 10, None), (0.0, 0.002, 2, None),
                                                         (0.3, 1e-6, 32, None), (9.0, 0.01, 10, 10)])
def test_sweep_calibration_separates_a_fixed_cost(monkeypatch, fixed, per, smallest, want):
    """bench_scaling sizes a sweep so that it takes the target time although
    part of that time (set-up) does not grow with the knob."""
    import bench_scaling
    last = {}

    def clock(comm, fn, mine=None):
        fn()
        return fixed + per * last["knob"]

    monkeypatch.setattr(bench_scaling, "_clock", clock)
    knob = bench_scaling._calibrate(None, lambda k, comm: last.update(knob=k), smallest, 5.0)
    if want is None:
        assert abs(fixed + per * knob - 5.0) < 0.01 * 5.0
    else:
        assert knob == want
