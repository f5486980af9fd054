#!/usr/bin/env python3
"""Host cost of one kernel launch on the chosen device: a tiny kernel
enqueued many times back to back, through clphys' Kernel wrapper (which
re-sets only changed arguments) and through plain PyOpenCL calls; also the
cost when every launch changes two arguments (as a sweep loop does).

    CLPHYS_DEVICE=nvidia python benchmarks/bench_launch.py [--json FILE]

One JSON line per launch path: microseconds per launch until the queue is done
("us_per_launch") and the host's enqueue time alone ("enqueue_us").
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import clphys  # noqa: E402
from _report import Report  # noqa: E402  (this folder is on sys.path when run as a script)


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="also append the JSON lines to this file")
    args = ap.parse_args(argv)
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
    report = Report.for_device(dev, args.json)
    for name, (done, enq) in rows:
        report.add(name, "us_per_launch", round(done * 1e6, 2), enqueue_us=round(enq * 1e6, 2))
    print(f"\n{'launch path':<32} {'us/launch (done)':>17} {'us/launch (enqueue)':>20}")
    for name, (done, enq) in rows:
        print(f"{name:<32} {done * 1e6:17.2f} {enq * 1e6:20.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
