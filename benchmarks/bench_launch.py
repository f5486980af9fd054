#!/usr/bin/env python3
"""Host cost of one kernel launch on the chosen device: a tiny kernel
enqueued many times back to back, through clphys' Kernel wrapper (which
re-sets only changed arguments) and through plain PyOpenCL calls; also the
cost when every launch changes two arguments (as a sweep loop does).

    CLPHYS_DEVICE=nvidia python benchmarks/bench_launch.py
"""

import statistics
import sys
import time

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

import clphys


def per_launch(q, launch, n=2000, repeats=5):
    launch(0)
    q.finish()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(n):
            launch(i)
        t_enq = time.perf_counter() - t0
        q.finish()
        out.append(((time.perf_counter() - t0) / n, t_enq / n))
    return statistics.median(o[0] for o in out), statistics.median(o[1] for o in out)


def main():
    dev = clphys.current_device()
    q = dev.queue
    print(f"# device: {dev.facts.platform} | {dev.name} | driver {dev.facts.driver}")
    prg = dev.build("rng/generate.cl", generator="philox")
    out = cla.empty(q, 1024, np.uint32)
    k = prg.rng_checksum
    raw = cl.Kernel(prg.cl_program, "rng_checksum")
    same = (out.data, np.uint32(1), np.uint32(1), np.uint32(2))
    rows = [
        ("clphys wrapper, same args", per_launch(q, lambda i: k(q, (1024,), (64,), *same))),
        ("clphys wrapper, 2 args change", per_launch(
            q, lambda i: k(q, (1024,), (64,), out.data, np.uint32(1), np.uint32(i), np.uint32(i)))),
        ("pyopencl kernel call", per_launch(q, lambda i: raw(q, (1024,), (64,), *same))),
        ("enqueue_nd_range only", per_launch(
            q, lambda i: cl.enqueue_nd_range_kernel(q, raw, (1024,), (64,)))),
    ]
    print(f"\n{'launch path':<32} {'us/launch (done)':>17} {'us/launch (enqueue)':>20}")
    for name, (done, enq) in rows:
        print(f"{name:<32} {done * 1e6:17.2f} {enq * 1e6:20.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
