"""Forms of the 32 x 32 -> 64-bit products in multispin's 8-lane Philox (the CPU design,
cl_kernels/ising/common.cl), on every CPU OpenCL device: each form's words against the
NumPy twin, its build log's ABI warning, and its time (64 x 10 rounds of 8 lanes per work
item, 4096 items, best of 7; a form whose build log warns is not run).  The Philox rounds
are the library's (common.cl's philox_lanes); only the body of its mulw is swapped.
"convert8" was the form before 2026-11-27: on the pip PoCL on AMD Zen 4 its kernels (AVX2)
and its built-in library (AVX-512) pass ulong8 differently, and its words are wrong;
"literal" is the form in use (benchmarks/RESULTS.md).

    python benchmarks/probe_philox_lanes.py
"""
import re
import time

import numpy as np
import pyopencl as cl
from mako.template import Template

from clphys.rng import philox_numpy
from clphys.runtime.render import _get_lookup

# the body of mulw(uint m, uint8 v, uint8 *hi, uint8 *lo) in each form ("literal": the
# template's own, left as rendered)
MULW = {
    "convert8": """
    const ulong8 p = convert_ulong8(v) * (ulong8)(m);
    *hi = convert_uint8(p >> 32); *lo = convert_uint8(p);""",
    "convert4": """
    const ulong4 p = convert_ulong4(v.lo) * (ulong4)(m), q = convert_ulong4(v.hi) * (ulong4)(m);
    *hi = (uint8)(convert_uint4(p >> 32), convert_uint4(q >> 32));
    *lo = (uint8)(convert_uint4(p), convert_uint4(q));""",
    "literal": None,
    "as_cast": """
    const uint16 w = as_uint16(as_ulong8((uint16)(v.s0, 0u, v.s1, 0u, v.s2, 0u, v.s3, 0u,
                               v.s4, 0u, v.s5, 0u, v.s6, 0u, v.s7, 0u)) * (ulong8)(m));
    *hi = w.odd; *lo = w.even;""",
}

# multispin's Philox lanes as the library renders them (8 lanes, prefix p_)
LANES = Template('<%namespace name="ic" file="/ising/common.cl"/>${ic.philox_lanes("p_", 8)}',
                 lookup=_get_lookup(), strict_undefined=True).render()
MULW_BODY = re.compile(r"(inline void p_mulw\(uint m, uint8 v, uint8 \*hi, uint8 \*lo\)\n\{).*?(\n\}\n)",
                       re.S)
assert MULW_BODY.search(LANES), "ising/common.cl no longer emits p_mulw as expected"

KERNELS = """
__kernel void words(__global uint *out, const uint k0, const uint k1)
{   // counters (8 g + lane, 5, 7, 9): the four words of each, for the NumPy twin
    const uint g = get_global_id(0);
    uint8 x, y, z, w;
    p_philox_lanes((uint8)(8u * g) + (uint8)(0u, 1u, 2u, 3u, 4u, 5u, 6u, 7u), 5u, 7u, 9u,
                   (uint2)(k0, k1), &x, &y, &z, &w);
    vstore8(x, 4 * g, out); vstore8(y, 4 * g + 1, out); vstore8(z, 4 * g + 2, out); vstore8(w, 4 * g + 3, out);
}

__kernel void timed(__global uint *out, const uint n, const uint k0, const uint k1)
{
    const uint g = get_global_id(0);
    uint8 acc = (uint8)0, x, y, z, w;
    for (uint i = 0; i < n; ++i) {
        p_philox_lanes((uint8)(8u * g + i) + (uint8)(0u, 1u, 2u, 3u, 4u, 5u, 6u, 7u), i, 7u, 9u,
                       (uint2)(k0, k1), &x, &y, &z, &w);
        acc ^= x ^ y ^ z ^ w;
    }
    vstore8(acc, g, out);
}
"""


def source(form: str) -> str:
    body = MULW[form]
    lanes = LANES if body is None else MULW_BODY.sub(lambda m: m.group(1) + body + m.group(2), LANES)
    return lanes + KERNELS


N, STEPS, KEY = 4096, 64, (0x12345, 0xABCDE)
lanes = np.arange(8 * 64, dtype=np.uint32)
counters = np.stack([lanes, np.full_like(lanes, 5), np.full_like(lanes, 7), np.full_like(lanes, 9)], 1)
want = philox_numpy(counters, np.tile(np.array(KEY, np.uint32), (lanes.size, 1)))
print("device | form | words vs NumPy | ABI warning | ms")
for platform in cl.get_platforms():
    if "oclgrind" in platform.name.lower():         # a checker, not a CPU runtime
        continue
    for device in platform.get_devices(device_type=cl.device_type.CPU):
        ctx = cl.Context([device])
        queue = cl.CommandQueue(ctx)
        for form in MULW:
            prg = cl.Program(ctx, source(form)).build()
            if "changes the ABI" in (prg.get_build_info(device, cl.program_build_info.LOG) or ""):
                # its calls may clobber what the kernel keeps in registers (it hung here once)
                print(f"{device.name} | {form} | not run | yes | -", flush=True)
                continue
            buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, N * 32)
            prg.words(queue, (64,), None, buf, *np.array(KEY, np.uint32))
            got = np.empty((64, 4, 8), np.uint32)
            cl.enqueue_copy(queue, got, buf)
            ok = np.array_equal(got.transpose(0, 2, 1).reshape(-1, 4), want)
            timed = cl.Kernel(prg, "timed")
            times = []
            for _ in range(8):
                t = time.perf_counter()
                timed(queue, (N,), None, buf, np.uint32(STEPS), *np.array(KEY, np.uint32))
                queue.finish()
                times.append(time.perf_counter() - t)
            print(f"{device.name} | {form} | {'ok' if ok else 'WRONG'} | no | "
                  f"{1e3 * min(times[1:]):.2f}", flush=True)
