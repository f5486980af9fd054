"""GPUs we cannot reach here (AMD: wavefront 64, 64 KiB local memory; Intel:
sub-group 16, no fp64; Apple-like: no fp64, 32 KiB local memory), as
``gpu_persona`` devices: PoCL's context wearing their facts (conftest.PERSONAS).

Every portability case but muca.run (see GPU_PLAN_ON) runs on each persona:
the templates render for the persona's facts, PoCL's compiler builds them,
and the kernels run with the work-group sizes, local-memory
layouts and GPU code paths (is_gpu) chosen for that GPU. The integer codes
must give the checked-in bits, the floating-point ones agree with PoCL's own
fp64 results. What this cannot show: the GPU compilers' own bugs, sub-group
and wavefront scheduling, real local-memory limits (PoCL has more) and speed.
"""

import functools

import pytest

import clphys
from clphys.runtime import render, template_names
from conftest import PERSONAS, persona
from portability_cases import BITS, CLOSE, digest, expected_hash, load_hashes, results
from test_portability import _compare
from test_templates import RENDER_CASES


def test_personas_have_the_facts_we_claim():
    amd, intel, apple = (persona(n).facts for n in ("amd-gpu", "intel-gpu", "apple-gpu"))
    assert amd.wg_multiple == 64 and amd.local_mem == 64 << 10 and amd.fp64 and amd.is_gpu
    assert intel.wg_multiple == 16 and not intel.fp64 and intel.is_gpu
    assert apple.local_mem == 32 << 10 and not apple.fp64 and apple.is_gpu
    assert set(PERSONAS) == {"amd-gpu", "intel-gpu", "apple-gpu"}


# muca.run takes the multicanonical GPU plan (a barrier per step in unrolled blocks of
# steps, 16-bit histogram flushes): on PoCL its programs take minutes each to compile and
# its launches run slowly, over 20 minutes on CI's two cores for one persona. It runs on
# no persona; the personas run muca.global and muca.local (the same update kernel with
# other work-group plans), and the GPU plan is checked against the twin on the H200.
GPU_PLAN_ON: dict[str, tuple[str, ...]] = {"muca.run": ()}


@pytest.mark.parametrize("persona_name,name", [(p, n) for n in sorted(BITS) for p in sorted(PERSONAS)
                                               if p in GPU_PLAN_ON.get(n, PERSONAS)])
def test_same_bits_on_gpu_personas(persona_name, name):
    gpu_persona = persona(persona_name)
    got = digest(results(name, gpu_persona))
    assert got == expected_hash(name, load_hashes()["hashes"]), (name, gpu_persona.name)


@functools.lru_cache(maxsize=None)
def _pocl_results(name, base_index):
    return results(name, clphys.device(base_index))


@pytest.mark.parametrize("name", sorted(CLOSE))
def test_gpu_personas_agree_with_pocl(gpu_persona, name):
    case = CLOSE[name]
    if case.fp64 and not gpu_persona.facts.fp64:
        with pytest.raises(ValueError, match="fp64"):
            results(name, gpu_persona)
        return
    got = results(name, gpu_persona)
    _compare(name, got, _pocl_results(name, gpu_persona.facts.index), gpu_persona)


@pytest.mark.parametrize("template", sorted(RENDER_CASES))
def test_library_templates_build_for_gpu_personas(gpu_persona, template):
    """Every parameter set of test_templates.py renders for each persona, and
    the first one with kernels builds with PoCL's compiler (the variants the
    domains choose for the persona are built and run by the cases above)."""
    import pyopencl as cl
    sources = []
    for params in RENDER_CASES[template]:
        try:
            sources.append(render(template, gpu_persona.facts, **params))
        except ValueError as exc:          # acc="double" cases on the personas without fp64
            assert "fp64" in str(exc) and not gpu_persona.facts.fp64, exc
    with_kernels = [src for src in sources if "__kernel" in src]
    if with_kernels:
        cl.Program(gpu_persona.context, with_kernels[0]).build()


def test_every_template_is_covered():
    assert set(template_names()) >= set(RENDER_CASES)
