#!/usr/bin/env python3
"""Random-number throughput on one device, in 32-bit words per second.

    CLPHYS_DEVICE=nvidia python benchmarks/bench_rng.py [--quick] [--json FILE]

"generate": the store-free checksum kernel (each stream XORs its words), so
the figure is the generator's own speed, not memory bandwidth. "store": the
words written to a device buffer (bounded by memory bandwidth, 4 bytes a word).
Each variant is checked bit for bit against the NumPy twin at a small size
first. Prints one JSON line per figure and a table last.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyopencl.array as cla

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import clphys  # noqa: E402
from _report import Report  # noqa: E402  (this folder is on sys.path when run as a script)
from clphys import rng  # noqa: E402


def timed(queue, launch, repeats):
    launch()                       # warm-up: compilation, first touch
    queue.finish()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        launch()
        queue.finish()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (CPU)")
    ap.add_argument("--json", help="also append the JSON lines to this file")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    dev = clphys.current_device()
    q = dev.queue
    name = f"{dev.facts.platform} | {dev.name} | driver {dev.facts.driver}"
    print(f"# device: {name}", flush=True)

    # correctness against the twins before timing anything
    for g in rng.GENERATORS:
        ok = np.array_equal(rng.checksum(257, 5, seed=9, generator=g, device=dev),
                            rng.checksum_numpy(257, 5, seed=9, generator=g))
        ok &= np.array_equal(rng.words(10_001, seed=9, generator=g, streams=97, device=dev),
                             rng.words_numpy(10_001, 9, g, 97))
        print(f"# check {g}: {'ok' if ok else 'MISMATCH'}", flush=True)
        if not ok:
            return 1

    if args.quick:
        stream_opts, target_words = [dev.facts.compute_units * 256], 2**26
    else:
        stream_opts, target_words = [2**16, 2**18, 2**20, 2**22], 2**34
    rows = []
    for g in rng.GENERATORS:
        per_step = rng.words_per_step(g)
        for streams in stream_opts:
            steps = max(1, target_words // (streams * per_step))
            prg = dev.build("rng/generate.cl", generator=g)
            out = cla.empty(q, streams, np.uint32)
            if g == "philox":
                k0, k1 = rng.seed_key(1)
                launch = lambda prg=prg, streams=streams, out=out, steps=steps, k0=k0, k1=k1: prg.rng_checksum(
                    q, (streams,), None, out.data, np.uint32(steps), np.uint32(k0), np.uint32(k1))
            else:
                states = cla.to_device(q, rng.chained_seeds(streams, 1))
                launch = lambda prg=prg, streams=streams, out=out, steps=steps, states=states: prg.rng_checksum(
                    q, (streams,), None, out.data, np.uint32(steps), states.data)
            t = timed(q, launch, args.repeats)
            rows.append((g, "generate", streams, streams * steps * per_step / t))
        # stored words: n words into one buffer
        n = 2**22 if args.quick else 2**30
        prg = dev.build("rng/generate.cl", generator=g)
        buf = cla.empty(q, n, np.uint32)
        if g == "philox":
            k0, k1 = rng.seed_key(1)
            launch = lambda prg=prg, n=n, buf=buf, k0=k0, k1=k1: prg.rng_words(
                q, (n // 4,), None, buf.data, np.uint64(n), np.uint32(k0), np.uint32(k1), np.uint64(0))
            streams = n // 4
        else:
            streams = stream_opts[-1]
            states = cla.to_device(q, rng.chained_seeds(streams, 1))
            launch = lambda prg=prg, streams=streams, buf=buf, n=n, states=states: prg.rng_words(
                q, (streams,), None, buf.data, np.uint64(n), states.data)
        t = timed(q, launch, args.repeats)
        rows.append((g, "store", streams, n / t))

    report = Report.for_device(dev, args.json)
    for g, kind, streams, rate in rows:
        report.add(f"{g} {kind} streams={streams}", "words/s", rate)
    print(f"\n{'generator':<12} {'kind':<9} {'streams':>9} {'words/s':>12}")
    for g, kind, streams, rate in rows:
        print(f"{g:<12} {kind:<9} {streams:>9} {rate:12.3e}")
    best = max(r for g, k, s, r in rows if g == "philox" and k == "generate")
    print(f"\nPhilox4x32-10 best: {best:.3e} words/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
