"""Every template renders without a device, for fake NVIDIA, AMD and PoCL
facts with fp64 on and off; the result has balanced braces and literal
kernel names."""

import importlib
import itertools
import re
from pathlib import Path

import pytest

from clphys.runtime import fake_facts, render, template_names

# template -> parameter sets covering its variants. Library templates (only
# <%def>s) render to nothing on their own and are exercised through the
# templates that import them.
RENDER_CASES = {
    "common/prelude.cl": [{}],
    "common/reduce.cl": [dict(in_t=t, acc=a, wg=wg) for t, a, wg in
                         [("float", "double", 256), ("float", "compensated", 64),
                          ("int", "long", 128), ("uint", "ulong", 1)]],
    "rng/philox.cl": [{}], "rng/lcg.cl": [{}], "rng/xorshift.cl": [{}], "rng/normal.cl": [{}],
    "rng/generate.cl": [dict(generator=g) for g in ("philox", "lcg", "halfbit-lcg", "xorshift32")],
    "timeseries/acc.cl": [{}],
    "timeseries/pairs.cl": [dict(pairs=p, value=v, acc=a, wg=128, lpi=8, chunk=1024, run=32,
                                 block=256)
                            for p in (["absdiff"], ["sqdiff"], ["powdiff"], ["product"],
                                      ["absdiff", "sqdiff", "powdiff"], ["ipow3"],
                                      ["absdiff", "ipow16"])
                            for v in ("float2", "float", "blocked")
                            for a in ("double", "compensated")]
                           + [dict(pairs=["absmax"], value=v, acc="max", wg=64, lpi=4, chunk=256,
                                   run=32) for v in ("float2", "float")],
    # (acc="double" marks the cases that need fp64; these templates do not read it)
    "timeseries/ingest.cl": [dict(raw=r, f64=False, wg=64, span=512, layout=lay, block=256)
                             for r in ("double", "float", "long", "int")
                             for lay in ("float", "real", "blocked", "float2")]
                            + [dict(raw="double", f64=True, wg=256, span=1024, layout=lay,
                                    block=256, acc="double") for lay in ("float", "blocked")],
    "timeseries/finish.cl": [dict(acc="double", kinds=["absdiff", "powdiff", "ipow3"], form=f, cross=c,
                                  ytype=y, wg=64, otype=o)
                             for f, c in (("general", "blocks"), ("stationary", "rows"),
                                          ("msd", "rows"))
                             for y, o in (("float", "double"), ("double", "float"))],
    "common/fft.cl": [dict(real="float", R=R, r=r, J=J, sign=s)
                      for R, r, J in ((2, 2, 1), (64, 8, 16), (256, 8, 4)) for s in (-1, 1)]
                     + [dict(real="double", R=128, r=8, J=16, sign=-1, acc="double")],
    "timeseries/pattern.cl": [dict(wg=64, tb=128, maxp=20, maxf=20, acc=a, exp=e)
                              for a in ("double", "compensated") for e in ("exp", "native_exp")]
                             + [dict(wg=64, tb=128, maxp=20, maxf=20, acc="double", exp="exp",
                                     slide=4, q_switch=1, branchless_sum=1, sign=s) for s in ("cmp", "scaled")],
    "timeseries/acrw.cl": [{}],
}

# Templates whose parameters come from a domain object (e.g. an SDE model's
# rendered spec) are rendered, over the same fake facts, by the named test file.
RENDERED_IN = {
    "sde/ensemble.cl": "test_sde_model.py",
    "sde/kuramoto.cl": "test_sde_model.py",
    "ising/blocks.cl": "test_ising_blocks.py",
    "timeseries/dfa.cl": "test_timeseries_dfa.py",
    **{f"ising/{name}.cl": "test_ising_kernels.py"
       for name in ("common", "init", "sums", "checkerboard", "multispin")},
    **{f"muca/{name}.cl": "test_muca_kernels.py" for name in ("common", "setup", "update")},
}

FACTS = [fake_facts(v, fp64) for v, fp64 in itertools.product(("nvidia", "amd", "pocl"), (True, False))]


def test_every_template_has_cases():
    missing = sorted(set(template_names()) - set(RENDER_CASES) - set(RENDERED_IN))
    assert not missing, f"add render cases for {missing} to RENDER_CASES"
    here = Path(__file__).parent
    for template, test_file in RENDERED_IN.items():
        assert f'"{template}"' in (here / test_file).read_text(), (template, test_file)


@pytest.mark.parametrize("facts", FACTS, ids=lambda f: f.cache_id)
@pytest.mark.parametrize("template", sorted(RENDER_CASES))
def test_renders(template, facts):
    for params in RENDER_CASES[template]:
        if params.get("acc") == "double" and not facts.fp64:
            with pytest.raises(ValueError, match="fp64"):
                render(template, facts, **params)
            continue
        src = render(template, facts, **params)
        assert src.count("{") == src.count("}"), f"{template} {params}: unbalanced braces"
        assert "${" not in src and "<%" not in src
        for name in re.findall(r"__kernel\s+(?:__attribute__\s*\(\(.*?\)\)\s*)?void\s+(\S+)\s*\(", src, re.S):
            assert re.fullmatch(r"\w+", name), f"kernel name {name!r} is not literal"


def test_no_builtin_on_512_bit_vectors():
    """The pip PoCL on AMD Zen 4 returned garbage from convert_ulong8 (multispin's Philox
    lanes gave wrong spins): render() refuses such conversions, and build() refuses any
    program whose build log says a built-in call changes the ABI."""
    from types import SimpleNamespace

    from clphys.errors import BuildError
    r = importlib.import_module("clphys.runtime.render")
    for bad in ("ulong8 p = convert_ulong8(v);", "x = convert_long16_sat(y);", "convert_double8 (f)",
                "convert_float16(g)"):
        with pytest.raises(ValueError, match="512 bits"):
            r.check_vector_widths("t.cl", bad)
    r.check_vector_widths("t.cl", "ulong4 p = convert_ulong4(v.lo); uint8 w = convert_uint8(q);\n"
                                  "ulong8 a = as_ulong8(b) * (ulong8)(m); uint16 c = as_uint16(a);\n"
                                  "// convert_ulong8(x)\n /* nor\n convert_double8(y) */")
    from clphys.ising.multispin_source import kernel_params
    src = render("ising/multispin.cl", fake_facts("pocl"), **kernel_params(
        dim=2, Lx=16, Ly=4, Lz=1, W=1, lanes=8, wg=None, rwg=64, always=(0, 2, 4, 6, 8),
        slots=((1,), (3,), (5,), (7,), (9,))))
    assert "ms_philox_lanes" in src and "(ulong8)(v.s0, v.s1" in src and "convert_ulong8(" not in src

    log = ("warning: /root/.cache/pocl/uncached/tempfile_CINwkJ.cl:67:23: AVX vector return of "
           "type 'ulong8' (vector of 8 'ulong' values) without 'avx512f' enabled changes the ABI")
    device = SimpleNamespace(cl_device=None, name="pthread-AMD EPYC")
    for text, fails in ((log, True), ("", False), ("warning: unused variable 'x'", False)):
        program = SimpleNamespace(get_build_info=lambda dev, what, text=text: text)
        if fails:
            with pytest.raises(BuildError, match="wrong results.*changes the ABI"):
                r._refuse_abi_mismatch("t.cl", device, program)
        else:
            r._refuse_abi_mismatch("t.cl", device, program)
