"""`--json` on every command: one JSON object on stdout (nothing else there),
values with their errors, the exact reference where there is one, the device
and the seed; warnings on stderr. Tiny runs, one per command."""

import json
import math

import numpy as np
import pytest

from clphys.cli import build_parser, main
from clphys.exact import (TC_2D, acrw_increment_autocorrelation, acrw_increment_variance,
                          finite_lattice, kuramoto_order_parameter)


def _one_object(capsys):
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == 1, captured.out          # one object, nothing else on stdout
    return json.loads(lines[0]), captured.err


def _commands(parser, path=()):
    import argparse
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                    yield path + (name,), sub
                yield from _commands(sub, path + (name,))


def test_every_command_has_json():
    missing = [" ".join(cmd) for cmd, sub in _commands(build_parser())
               if "--json" not in sub._option_string_actions]
    assert not missing, missing


def test_info_json(capsys):
    rc = main(["info", "--json"])
    out, _ = _one_object(capsys)
    assert out["command"] == "info" and out["devices"]
    assert (rc == 0) == (out["selected"] is not None)
    assert {"index", "name", "usable", "fp64"} <= set(out["devices"][0])


def test_ising_json(device, capsys):
    assert main(["ising", "--size", "32", "--temperature", "3.0", "--sweeps", "auto", "--seed", "4",
                 "--json", "--no-progress", "--device", device.facts.index]) == 0
    out, err = _one_object(capsys)
    assert out["seed"] == 4 and out["device"] == device.name and out["trusted"] and not out["warnings"]
    e = out["estimates"]["energy"]
    exact = finite_lattice(32, 3.0)
    assert e["exact"][0] == {"value": pytest.approx(float(exact.energy)), "what": "exact on this torus"}
    assert abs(e["value"] - exact.energy) < 4 * e["error"]
    assert abs(e["sigmas_from_exact"]) < 4
    c = out["estimates"]["specific_heat"]
    assert abs(c["value"] - exact.specific_heat) < 4 * c["error"]
    assert out["estimates"]["abs_magnetization"]["exact"] == []          # none on a finite lattice above Tc
    assert out["speed"]["flips_per_ns"] > 0 and out["auto"]["max_seconds"] == 600
    assert err == ""


def test_ising_json_warnings_go_to_stderr(device, capsys):
    assert main(["ising", "--size", "64", "--temperature", "2.269", "--sweeps", "200", "--json",
                 "--no-progress", "--device", device.facts.index]) == 0
    out, err = _one_object(capsys)
    assert not out["trusted"] and out["warnings"]
    assert "clphys ising: warning:" in err and "too short" in err


def test_binder_json(device, capsys):
    assert main(["binder", "--sizes", "8,16", "--tmin", "2.1", "--tmax", "2.45", "--points", "4",
                 "--therm", "100", "--measure", "64", "--replicas", "2", "--seed", "1", "--json",
                 "--device", device.facts.index]) == 0
    out, err = _one_object(capsys)
    assert out["sizes"] == [8, 16] and out["seed"] == 1 and len(out["temperatures"]) == 4
    assert np.shape(out["binder"]["value"]) == (2, 4) == np.shape(out["binder"]["error"])
    assert out["crossing"]["exact"] == pytest.approx(TC_2D)
    assert "warning" in err                 # 64 measurements: too short, said on stderr


def test_muca_json(device, capsys):
    assert main(["muca", "--size", "4", "--walkers", "64", "--kl", "1e-3", "--production-updates", "300",
                 "--seed", "2", "--json", "--device", device.facts.index]) == 0
    out, _ = _one_object(capsys)
    assert out["L"] == 4 and out["seed"] == 2 and out["walkers"] == 64
    assert len(out["ln_g"]["value"]) == len(out["ln_g"]["error"]) == len(out["energies"])
    assert len(out["ln_g_exact"]) == len(out["energies"])
    e, de, ex = (np.array(out["energy"][k], dtype=float) for k in ("value", "error", "exact"))
    assert ex == pytest.approx(finite_lattice(4, out["temperatures"]).energy)
    assert np.all(np.abs(e - ex) < 5 * de + 1e-9)


def test_josephson_json(device, capsys):
    assert main(["sde", "josephson", "--a", "4.0:4.4:3", "--paths", "16", "--periods", "4",
                 "--steps-per-period", "20", "--no-progress", "--seed", "3", "--json",
                 "--device", device.facts.index]) == 0
    out, _ = _one_object(capsys)
    assert out["swept"] == ["a"] and out["grid"]["a"] == pytest.approx([4.0, 4.2, 4.4])
    assert len(out["v"]["value"]) == len(out["v"]["error"]) == 3 and out["seed"] == 3
    assert all(e > 0 for e in out["v"]["error"])


def test_kuramoto_json(device, capsys):
    assert main(["sde", "kuramoto", "--n", "256", "--coupling", "4", "--noise", "1", "--t-end", "2",
                 "--dt", "0.05", "--no-progress", "--json", "--device", device.facts.index]) == 0
    out, _ = _one_object(capsys)
    r = out["r_second_half"]
    assert r["exact"] == pytest.approx(float(kuramoto_order_parameter(4, 1)))
    assert len(out["r"]) == len(out["times"]) and 0 < r["value"] < 1


@pytest.fixture
def prices(tmp_path):
    rng = np.random.default_rng(5)
    path = tmp_path / "prices.txt"
    np.savetxt(path, 100 + np.cumsum(rng.normal(size=4096)), fmt="%.9f")
    return path


@pytest.mark.parametrize("argv, key", [
    (["hurst", "FILE", "--max-lag", "16"], "H"),
    (["acf", "FILE", "--diff", "--max-lag", "5"], "rho"),
    (["pc", "FILE", "--max-past", "3", "--max-future", "2", "--max-history", "64"], "Xi"),
    (["dfa", "FILE", "--diff"], "H"),
])
def test_timeseries_json(device, capsys, prices, argv, key):
    argv = [str(prices) if a == "FILE" else a for a in argv]
    assert main(argv + ["--json", "--device", device.facts.index]) == 0
    out, _ = _one_object(capsys)
    assert out["command"] == argv[0] and out["n"] in (4096, 4095) and out["device"] == device.name
    value = out[key]["value"] if isinstance(out[key], dict) else out[key]
    error = out[key]["error"] if isinstance(out[key], dict) else out[key + "_err"]
    assert np.shape(value) == np.shape(error)
    if argv[0] == "hurst":                    # a random walk: H = 1/2
        h = np.array(out["H"]["value"][4:], dtype=float)
        dh = np.array(out["H"]["error"][4:], dtype=float)
        assert np.all(np.abs(h - 0.5) < 5 * dh)


def test_acrw_json(device, capsys, tmp_path):
    phi = 0.044
    path = tmp_path / "r.txt"
    assert main(["acrw", "200000", "--phi", str(phi), "--seed", "1", "--returns", "-o", str(path), "--json",
                 "--device", device.facts.index]) == 0
    out, _ = _one_object(capsys)
    assert path.exists() and "values" not in out and out["seed"] == 1
    for name, exact in (("increment_variance", acrw_increment_variance(phi)),
                        ("increment_rho1", float(acrw_increment_autocorrelation(phi, 1)))):
        v = out[name]
        assert v["exact"] == pytest.approx(exact) and abs(v["value"] - exact) < 4 * v["error"], (name, v)
    assert main(["acrw", "100", "--seed", "1", "--json", "--device", device.facts.index]) == 0
    out, _ = _one_object(capsys)
    assert len(out["values"]) == 100 and not math.isnan(out["values"][0])


def test_json_has_null_where_a_number_is_not_defined(device, capsys):
    """20 measurements: tau_int cannot be estimated; JSON has no NaN, so it is null."""
    assert main(["ising", "--size", "32", "--sweeps", "25", "--json", "--device", device.facts.index]) == 0
    captured = capsys.readouterr()
    assert "NaN" not in captured.out
    out = json.loads(captured.out)
    assert out["estimates"]["energy"]["tau_int_sweeps"] is None and out["warnings"]
