"""Device selection, program building and caching, the reduction module."""

import dataclasses
import importlib
import re
from pathlib import Path

import numpy as np
import pytest

import clphys
from clphys import BuildError, DeviceError
from clphys.cli import main as cli_main
from clphys.runtime import reduce_sum

# the module, not the function clphys.runtime.devices that shadows its name
devices_module = importlib.import_module("clphys.runtime.devices")
render_module = importlib.import_module("clphys.runtime.render")


def test_devices_lists_facts():
    facts = clphys.devices()
    assert facts, "no OpenCL device visible"
    for f in facts:
        assert isinstance(f, clphys.DeviceFacts)
        assert f.max_work_group >= 1 and f.wg_multiple >= 1 and f.local_mem > 0
        assert f.compute_units >= 1 and f.global_mem > 0 and len(f.cache_id) == 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts[0].fp64 = not facts[0].fp64


def test_spec_by_index_and_substring(device):
    index = device.facts.index
    assert clphys.device(index) is device
    platform_word = device.facts.platform.split()[0]
    assert clphys.device(f"{platform_word.lower()}:{index.split(':')[1]}") is device
    kind = "gpu" if device.facts.is_gpu else "cpu"
    assert clphys.device(f"{index.split(':')[0]}:{kind.upper()}").facts.is_gpu == device.facts.is_gpu


def test_unknown_spec_lists_every_device():
    with pytest.raises(DeviceError) as err:
        clphys.device("no-such-vendor")
    text = str(err.value)
    for f in clphys.devices():
        assert f.name in text and f.index in text


@pytest.mark.parametrize("spec", ["", "1:2:3", 7])
def test_malformed_spec(spec):
    with pytest.raises((ValueError, TypeError)):
        clphys.device(spec)


def test_environment_and_context_manager(monkeypatch, device):
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    monkeypatch.setenv("CLPHYS_DEVICE", device.facts.index)
    assert clphys.current_device() is device
    monkeypatch.setenv("CLPHYS_DEVICE", "no-such-device")
    with pytest.raises(DeviceError, match="CLPHYS_DEVICE"):
        clphys.current_device()
    monkeypatch.delenv("CLPHYS_DEVICE")
    monkeypatch.setenv("PYOPENCL_CTX", device.facts.index)
    assert clphys.current_device() is device
    monkeypatch.delenv("PYOPENCL_CTX")
    with clphys.device(device.facts.index) as d:
        assert d is device and clphys.current_device() is device
        # an explicit device= still wins inside the block
        assert devices_module.resolve_device(device) is device


def test_default_prefers_gpu_then_cpu_and_never_the_simulator(monkeypatch):
    monkeypatch.delenv("CLPHYS_DEVICE", raising=False)
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    chosen = clphys.current_device().facts
    facts = clphys.devices()
    assert chosen.vendor != "oclgrind"
    if any(f.is_gpu for f in facts):
        assert chosen.is_gpu


def test_build_is_cached_and_source_kept(device, tmp_path, monkeypatch):
    monkeypatch.setenv("CLPHYS_KEEP_SOURCE", str(tmp_path))
    a = device.build("rng/generate.cl", generator="xorshift32", options=("-DCLPHYS_TEST_KEEP=1",))
    b = device.build("rng/generate.cl", generator="xorshift32", options=("-DCLPHYS_TEST_KEEP=1",))
    assert a is b
    kept = list(tmp_path.glob("rng_generate-*.cl"))
    assert len(kept) == 1 and "xorshift32_next" in kept[0].read_text()
    with pytest.raises(AttributeError, match="rng_words"):
        _ = a.no_such_kernel


def test_rendered_sources_are_cached_by_parameters(monkeypatch):
    """build() renders a (template, parameters) once; parameters equal in value but not
    in repr (True and 1) render apart."""
    from clphys.runtime import fake_facts
    R = importlib.import_module("clphys.runtime.render")
    calls = []
    real = R.render
    monkeypatch.setattr(R, "render", lambda *a, **k: calls.append(k) or real(*a, **k))
    monkeypatch.setattr(R, "_rendered", {})
    facts = fake_facts("nvidia")
    one = R._rendered_source(facts, "common/reduce.cl", dict(in_t="float", acc="double", wg=64))
    again = R._rendered_source(facts, "common/reduce.cl", dict(wg=64, acc="double", in_t="float"))
    assert one == again and len(calls) == 1
    R._rendered_source(facts, "common/reduce.cl", dict(in_t="float", acc="double", wg=128))
    shape = dict(wg=8, tb=8, maxp=2, maxf=2, acc="double", exp="exp")
    R._rendered_source(facts, "timeseries/pattern.cl", dict(pre=True, **shape))
    R._rendered_source(facts, "timeseries/pattern.cl", dict(pre=1, **shape))
    assert len(calls) == 4
    R._rendered_source(fake_facts("amd"), "common/reduce.cl", dict(in_t="float", acc="double",
                                                                  wg=64))
    assert len(calls) == 5                                      # per device kind


def test_build_error_shows_log_and_source(device, tmp_path, monkeypatch):
    bad = tmp_path / "bad.cl"
    bad.write_text("__kernel void broken(__global int *x)\n{\n    x[0] = undefined_name;\n}\n")
    monkeypatch.setattr(render_module, "kernel_dir", lambda: tmp_path)
    monkeypatch.setattr(render_module, "_lookup", None)
    with pytest.raises(BuildError) as err:
        device.build("bad.cl")
    text = str(err.value)
    assert "undefined_name" in text and ">>" in text and device.name in text


def test_kernel_instances_keep_their_own_arguments(device, tmp_path, monkeypatch):
    """Program.instance: a second Kernel of the same name whose arguments (re-set
    only where they change) do not leak into the first one's launches."""
    import pyopencl as cl
    (tmp_path / "fill.cl").write_text("__kernel void fill(__global uint *x, const uint v)\n"
                                      "{\n    x[get_global_id(0)] = v;\n}\n")
    monkeypatch.setattr(render_module, "kernel_dir", lambda: tmp_path)
    monkeypatch.setattr(render_module, "_lookup", None)
    prg = device.build("fill.cl")
    a, b = prg.instance("fill"), prg.instance("fill")
    assert a is not b and a is not prg.fill
    bufs = [cl.Buffer(device.context, cl.mem_flags.READ_WRITE, 16) for _ in (0, 1)]
    q = device.queue
    a(q, (4,), None, bufs[0], np.uint32(1))
    b(q, (4,), None, bufs[1], np.uint32(2))
    a(q, (4,), None, bufs[0], np.uint32(3))          # only v re-set: still bufs[0]
    b(q, (4,), None, bufs[1], np.uint32(2))          # nothing re-set
    out = [np.empty(4, np.uint32) for _ in (0, 1)]
    for o, buf in zip(out, bufs):
        cl.enqueue_copy(q, o, buf)
    assert out[0].tolist() == [3] * 4 and out[1].tolist() == [2] * 4
    with pytest.raises(AttributeError, match="no kernel 'nope'"):
        prg.instance("nope")


def test_render_needs_device_facts():
    with pytest.raises(TypeError, match="DeviceFacts"):
        clphys.runtime.render("rng/generate.cl", "nvidia", generator="philox")


def test_render_rejects_undefined_names():
    with pytest.raises(NameError):
        clphys.runtime.render("rng/generate.cl", clphys.runtime.fake_facts("pocl"))


@pytest.mark.parametrize("n", [1, 2, 255, 256, 257, 1000, 65537, 300_001])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int32, np.uint32, np.int64])
def test_reduce_sum(device, n, dtype):
    rng = np.random.default_rng(n)
    if np.dtype(dtype).kind == "f":
        x = (rng.standard_normal(n) * 1e3 + 10).astype(dtype)
    else:
        info = np.iinfo(dtype)
        x = rng.integers(max(info.min, -100), min(info.max, 100), n).astype(dtype)
    if dtype == np.float64 and not device.facts.fp64:
        pytest.skip("no fp64")
    got = reduce_sum(x, device=device)
    if np.dtype(dtype).kind == "f":
        ref = float(np.sum(x.astype(np.float64)))
        # fp64 (or compensated) accumulation of float32 data: exact to ~1e-12 relative
        assert got == pytest.approx(ref, rel=1e-11, abs=1e-6)
    else:
        assert got == int(np.sum(x.astype(np.int64)))


def test_reduce_sum_compensated_beats_naive_float(device):
    # 1e6 ones on top of 1e8: plain float32 accumulation loses the ones.
    x = np.concatenate([[1e8], np.ones(1_000_000)]).astype(np.float32)
    assert reduce_sum(x, device=device, accumulate="compensated") == 1e8 + 1e6


def test_reduce_sum_errors(device):
    with pytest.raises(ValueError, match="dtype"):
        reduce_sum(np.array(["a"]), device=device)
    with pytest.raises(ValueError, match="accumulate"):
        reduce_sum(np.ones(3, np.float32), device=device, accumulate="kahan")
    with pytest.raises(ValueError, match="float input"):
        reduce_sum(np.ones(3, np.int32), device=device, accumulate="double")
    assert reduce_sum(np.zeros(0, np.float32), device=device) == 0.0


@pytest.mark.slow
def test_reduce_on_oclgrind(oclgrind):
    for dtype in (np.float32, np.int32):
        x = np.arange(1, 700, dtype=dtype)
        assert reduce_sum(x, device=oclgrind) == 699 * 700 // 2
    assert reduce_sum(np.arange(5, dtype=np.float32), device=oclgrind, accumulate="compensated") == 10


def test_nvidia_icd_hint(monkeypatch, tmp_path):
    lib = tmp_path / "libnvidia-opencl.so.1"
    lib.write_text("")

    class Done:
        stdout = f"\tlibnvidia-opencl.so.1 (libc6,x86-64) => {lib}\n"

    monkeypatch.setattr(devices_module.subprocess, "run", lambda *a, **k: Done())
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    monkeypatch.setenv("OCL_ICD_VENDORS", str(vendors))
    hint = devices_module.nvidia_icd_hint()
    assert str(lib) in hint and "nvidia.icd" in hint and "echo" in hint
    (vendors / "nvidia.icd").write_text(str(lib) + "\n")
    assert devices_module.nvidia_icd_hint() == ""


def test_cli_info(capsys):
    assert cli_main(["info"]) == 0
    out = capsys.readouterr().out
    assert "selected" in out
    for f in clphys.devices():
        assert f.name in out


def test_cli_info_with_bad_selection(capsys, monkeypatch):
    monkeypatch.setenv("CLPHYS_DEVICE", "no-such-device")
    assert cli_main(["info"]) == 1
    assert "no device selected" in capsys.readouterr().out


def test_fake_facts():
    for vendor in ("nvidia", "amd", "pocl"):
        for fp64 in (True, False):
            f = clphys.runtime.fake_facts(vendor, fp64)
            assert f.vendor == vendor and f.fp64 is fp64
    with pytest.raises(ValueError, match="vendor"):
        clphys.runtime.fake_facts("cray")


SIMULATOR_FLAGS = ("binary_cache", "queued_launches", "fill_initialises", "reused_buffers",
                   "offset_writes", "overlap")


def test_oclgrind_differences_are_facts():
    """Oclgrind's concessions are DeviceFacts flags: all off on it, all on elsewhere, and
    no code outside device discovery compares a vendor with its name."""
    from clphys.runtime import fake_facts
    sim = fake_facts("oclgrind")
    assert sim.simulator and not any(getattr(sim, f) for f in SIMULATOR_FLAGS)
    for vendor in ("nvidia", "amd", "intel", "apple", "pocl"):
        f = fake_facts(vendor)
        assert not f.simulator and all(getattr(f, flag) for flag in SIMULATOR_FLAGS), vendor
    for f in clphys.devices():
        assert f.simulator == (f.vendor == "oclgrind")
        assert all(getattr(f, flag) != f.simulator for flag in SIMULATOR_FLAGS), f
    package = Path(clphys.__file__).parent
    named = [f"{p.relative_to(package)}:{i}" for p in package.rglob("*.py")
             if p.parent.name != "runtime" or p.name not in ("devices.py", "facts.py")
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"""vendor\s*[!=]=\s*["']oclgrind|["']oclgrind["']\s*[!=]=""", line)]
    assert not named, f"branch on a DeviceFacts flag, not the name: {named}"


def test_default_prefers_the_faster_cpu_implementation(monkeypatch):
    """With several CPU implementations registered, the default takes PoCL, then
    Intel's runtime, then the rest (rusticl on llvmpipe is ~25x slower), whatever
    order the ICD loader lists them in."""
    import types

    import pyopencl as cl

    devices = importlib.import_module("clphys.runtime.devices")    # the module, not the function

    def hit(platform, vendor):
        p = types.SimpleNamespace(name=platform, vendor=vendor)
        d = types.SimpleNamespace(type=cl.device_type.CPU, vendor=vendor, name=platform)
        return p, d

    listed = [hit("rusticl", "Mesa/X.org"), hit("Intel(R) OpenCL", "Intel(R) Corporation"),
              hit("Portable Computing Language", "The pocl project")]
    monkeypatch.setattr(devices, "_inventory", lambda: [(i, p, 0, d) for i, (p, d) in enumerate(listed)])
    monkeypatch.delenv("CLPHYS_DEVICE", raising=False)
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    names = [p.name for p, _, _ in devices.default_candidates()]
    assert names == ["Portable Computing Language", "Intel(R) OpenCL", "rusticl"]
