"""The device side of dfa() and mfdfa(): the plan (sizes, layout, memory, the kernels'
constants) and the run over cl_kernels/timeseries/dfa.cl, from the caller's values to the
per-(scale, q, jackknife group) sums that _dfa_finish turns into F_q(s) and the exponents.

The values go through the time series' ingest (_ingest.Input: the upload, the finiteness
and scale checks, the conversion to (hi, lo) float pairs of v 2^e - v(0) 2^e); the profile
is built once on the device, then each scale is one launch over its segments and the
reductions one launch over all scales (sliding windows: per scale, their ln F^2 reuse one
buffer).
"""

from __future__ import annotations

import math
import time
from fractions import Fraction
from typing import Any

import numpy as np
import pyopencl as cl

from ..runtime import check_memory, run_sliced, staging, workspace
from . import _common, _ingest
from ._dfa_finish import JACK_GROUPS

BLOCK = 256             # values per block of the profile (dfa.cl)
RUN = 64                # sliding windows: starts per run (the run kernel's work group)
Q_BATCH = 8             # moments q reduced per pass over the segments
INGEST_SPAN = 4096      # values per block of the input checks (_ingest.Input)
STAGING_SLACK = 9 / 8   # staging buffers are rounded up by at most 1/8 (runtime.staging.capacity)
# The first time-bounded slice of scales covers about this many value visits (then
# run_sliced doubles or halves it): a few ms on a CPU, well under a ms on a GPU.
FIRST_SLICE_VISITS = {True: 1 << 33, False: 1 << 25}      # by DeviceFacts.is_gpu


def gram_coefficients(s: int, order: int, p: int) -> np.ndarray:
    """C[k][i] (order + 1 square, lower triangular): the orthonormal polynomials of the s
    points z_j = (2j - (s - 1)) 2^-p, q_k(z) = sum_i C[k][i] z^i, from the three-term
    recurrence of the discrete Chebyshev (Gram) polynomials in x = j - (s - 1)/2:
    p_(k+1) = x p_k - beta_k p_(k-1), beta_k = k^2 (s^2 - k^2) / (4 (4k^2 - 1)), with
    |p_k|^2 = s beta_1 .. beta_k (exact rationals, rounded once)."""
    m1 = order + 1
    polys = [[Fraction(1)], [Fraction(0), Fraction(1)]]
    norms = [Fraction(s), Fraction(s * (s * s - 1), 12)]
    for k in range(1, order):
        beta = Fraction(k * k * (s * s - k * k), 4 * (4 * k * k - 1))
        nxt = [Fraction(0)] + polys[k]
        for i, c in enumerate(polys[k - 1]):
            nxt[i] -= beta * c
        polys.append(nxt)
        norms.append(norms[k] * Fraction((k + 1) ** 2 * (s * s - (k + 1) ** 2),
                                         4 * (4 * (k + 1) ** 2 - 1)))
    C = np.zeros((m1, m1))
    for k in range(m1):
        inv = 1.0 / math.sqrt(norms[k])
        for i, c in enumerate(polys[k]):
            C[k, i] = math.ldexp(float(c), (p - 1) * i) * inv      # x = z 2^(p-1)
    return C


def frame_exponent(n: int) -> int:
    """p with 2^p >= n (so that |z| < 1 over n points)."""
    return max(0, (int(n) - 1).bit_length())


class DFAPlan:
    """dfa.cl over a batch of series: `scales` (int array, each >= order + 2 and at most
    the shortest length), `mode` "forward" | "both" | "sliding", `qs` (the moments, a
    tuple of floats), `integrate` (the profile is the cumulative sum of x - mean, else x).
    `accumulate` forces "double" or "compensated" (tests)."""

    def __init__(self, dev, b: _ingest.Batch, scales, order: int, mode: str, qs, integrate: bool,
                 accumulate=None, what: str = "DFA"):
        self.dev, self.b, self.order, self.mode = dev, b, int(order), mode
        self.scales = np.asarray(scales, dtype=np.int64)
        self.qs = tuple(float(q) for q in qs)
        self.integrate = bool(integrate)
        self.acc = _common.accumulator(dev, accumulate)
        self.f64 = self.acc == "double"
        facts = dev.facts
        # work groups: their channel reductions keep (order + 2) accumulators per item in
        # local memory; at most a quarter of it
        room = _common.pow2_at_most(max(1, facts.local_mem // (4 * 8 * (self.order + 2))))
        top = min(_common.pow2_at_most(facts.max_work_group), room)
        self.wg = min(BLOCK, top)
        # (PoCL runs a work group as a loop over its items: every level of a reduction tree
        # costs a pass; on CPUs small groups for the segments, none for the reductions)
        self.gwg = min(256 if facts.is_gpu else 32, top)
        self.run = min(RUN, top // 4 if top >= 8 else top)
        # the reductions: Q_BATCH moments per pass (their tree: Q_BATCH x rwg accumulators);
        # on CPUs one item per series for all its groups and scales (a work group of 256
        # per group, series and scale cost PoCL 3-5 s for 64 series of 2^12, 64 items 1-2 s)
        self.qb = min(Q_BATCH, _common.pow2_at_least(len(self.qs)))
        lim = _common.pow2_at_most(max(1, facts.local_mem // (4 * 8 * self.qb)))
        self.rwg = min(256, _common.pow2_at_most(facts.max_work_group), lim) \
            if facts.is_gpu else 1
        # (rusticl 22.3.6 on llvmpipe, LLVM 15, leaves a loop over scales or groups after
        # its first pass when the inner loop's bound is the same for the whole work group:
        # every scale after the first came back NaN; there, one of each per work group)
        one_each = facts.is_gpu or facts.vendor == "mesa"
        self.scales_per_group = 1 if one_each else len(self.scales)
        # (CPUs: jackknife groups per work group such that there are still ~4 per core)
        self.groups_per_item = 1 if one_each else _common.pow2_at_most(
            max(1, min(JACK_GROUPS, JACK_GROUPS * len(b) // (4 * facts.compute_units))))
        self.E = E = len(b)
        n = b.lengths
        self.nblocks = -(-n // BLOCK)
        self.boff = np.concatenate([[0], np.cumsum(self.nblocks)]).astype(np.uint32)
        self.yoff = (self.boff[:-1].astype(np.int64) * BLOCK).astype(np.uint64)
        self.ny = int(self.boff[-1]) * BLOCK
        self.counts = np.array([int(self._count(n, int(s)).max()) for s in self.scales],
                               dtype=np.int64)
        sliding = mode == "sliding"
        self.ell_dtype = np.dtype(np.float64 if self.f64 else np.float32)
        per = E * self.counts
        self.stride = self.counts.astype(np.uint32)
        self.off = np.zeros(len(self.scales), np.uint64) if sliding else \
            np.concatenate([[0], np.cumsum(per)[:-1]]).astype(np.uint64)
        self.ell_len = int(per.max() if sliding else per.sum())
        acc = 8
        nsc, nq, K = len(self.scales), len(self.qs), JACK_GROUPS
        self.buffers = {
            "series (as given)": math.ceil(STAGING_SLACK * int(n.sum()) * b.dtype.itemsize),
            "profile": 8 * self.ny,
            "series (converted)": 8 * self.ny if self.integrate else 0,
            "block channels": int(self.boff[-1]) * (self.order + 2) * acc,
            "block sums": 2 * int(self.boff[-1]) * acc if self.integrate else 0,
            "ln F^2 of the segments": self.ell_len * self.ell_dtype.itemsize,
            "sums": E * nsc * K * (5 + nq) * acc + E * nsc * nq * 8}
        self.what = what

    def _count(self, n, s):
        if self.mode == "sliding":
            return np.maximum(n - s + 1, 0)
        return (2 if self.mode == "both" else 1) * (n // s)

    def check_memory(self):
        check_memory(self.dev, self.buffers, self.what,
                     "Use fewer series at once, fewer scales, or overlap=False.")

    def fits(self) -> bool:
        """Whether the buffers fit the device (check_memory would pass)."""
        try:
            self.check_memory()
        except ValueError:
            return False
        return True

    # -- the kernels' constants

    def constants(self) -> np.ndarray:
        """Per scale: C (order + 1 square, row-major) then 1/s, as the kernels' const_t."""
        rows = []
        for s in self.scales:
            C = gram_coefficients(int(s), self.order, frame_exponent(int(s)))
            rows.append(np.concatenate([C.ravel(), [1.0 / float(s)]]))
        return self._const(np.array(rows))

    def _const(self, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)
        if self.f64:
            return values
        hi = values.astype(np.float32)
        return np.stack([hi, (values - hi).astype(np.float32)], axis=-1)

    def _acc_array(self, shape):
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if self.f64:
            return workspace.work_array(self.dev, shape, np.float64)
        return workspace.work_array(self.dev, shape + (2,), np.float32)

    def _acc_host(self, arr) -> np.ndarray:
        a = arr.get() if hasattr(arr, "get") else arr
        if self.f64:
            return a.astype(np.float64)
        return a[..., 0].astype(np.float64) + a[..., 1].astype(np.float64)

    def program(self, part: str):
        """dfa.cl's part "prep", "fluct" or "reduce", built for what it depends on."""
        params: dict[str, dict[str, Any]] = {
            "prep": dict(order=self.order, block=BLOCK, wg=self.wg, integrate=self.integrate),
            "fluct": dict(order=self.order, block=BLOCK, gwg=self.gwg, run=self.run,
                          mode=self.mode),
            "reduce": dict(gwg=self.rwg, mode=self.mode, groups=JACK_GROUPS, qb=self.qb)}
        return self.dev.build("timeseries/dfa.cl", part=part, acc=self.acc, **params[part])

    # -- the run

    def run_all(self, progress=None, transfer=None, label="dfa", marks=None):
        """Upload, check, profile, the segments of every scale and the reductions.  Returns
        (stats (E, nsc, K, 5), qsum (E, nsc, K, nq), mq (E, nsc, nq), exps (E,)) as
        float64 NumPy arrays (stats: segments, zero-variance ones, sum, max and min of
        ln F^2; see dfa.cl).  `marks` (the benchmark's): a list that gets (phase,
        time.perf_counter()) after each phase, the queue finished there."""
        dev, b, E = self.dev, self.b, self.E
        queue = dev.queue

        def mark(name):
            if marks is not None:
                queue.finish()
                marks.append((name, time.perf_counter()))

        prg = self.program("prep")
        arr = lambda host: workspace.device_array(dev, np.ascontiguousarray(host),  # noqa: E731
                                                blocking=False).data
        inp = _ingest.Input(dev, b, INGEST_SPAN, "float2", self.f64)
        nbytes = inp.raw_bytes()
        with staging.Staged(dev, nbytes, transfer or staging.default(dev, nbytes)) as st:
            inp.load(st)
            exps = inp.scales(inp.check())          # ValueError at the first NaN or inf
            mark("upload and check")
            shift = np.ldexp(b.first_values(), exps)
            lengths = b.lengths.astype(np.uint32)
            d_len, d_yoff, d_boff = arr(lengths), arr(self.yoff), arr(self.boff)
            nb = int(self.boff[-1])
            Y = workspace.work_array(dev, 2 * self.ny, np.float32)
            mom = self._acc_array((nb, self.order + 2))
            dummy = self._acc_array(1)
            if self.integrate:
                X = workspace.work_array(dev, 2 * self.ny, np.float32)
                inp.convert(X.data, self.yoff, lengths, shift)
                tot, lev, delta = self._acc_array(nb), self._acc_array(nb), self._acc_array(E)
                prg.dfa_block_totals(queue, (nb * self.wg,), (self.wg,), X.data, d_len, d_yoff,
                                     d_boff, np.uint32(E), tot.data)
                invn = self._const(1.0 / b.lengths.astype(np.float64))
                prg.dfa_levels(queue, (E * self.wg,), (self.wg,), tot.data, d_len, d_boff,
                               arr(invn), lev.data, delta.data)
                xin, lv, dl = X.data, lev.data, delta.data
            else:
                inp.convert(Y.data, self.yoff, lengths, shift)
                xin, lv, dl = Y.data, dummy.data, dummy.data
            prg.dfa_profile(queue, (nb * self.wg,), (self.wg,), xin, Y.data, d_len, d_yoff,
                            d_boff, np.uint32(E), lv, dl, mom.data)
            mark("conversion and profile")
            sums = self._scales(Y, mom, d_len, d_yoff, d_boff, arr, progress, label, mark)
        return sums + (np.asarray(exps, dtype=np.int64),)

    def _scales(self, Y, mom, d_len, d_yoff, d_boff, arr, progress, label, mark):
        dev, E, queue = self.dev, self.E, self.dev.queue
        prg, red = self.program("fluct"), self.program("reduce")
        nsc, nq, K = len(self.scales), len(self.qs), JACK_GROUPS
        co = arr(self.constants())
        ell = workspace.work_array(dev, max(1, self.ell_len), self.ell_dtype)
        stats = self._acc_array((E, nsc, K, 5))
        qsum = self._acc_array((E, nsc, K, nq))
        mq = workspace.work_array(dev, (E, nsc, nq), self.ell_dtype)
        d_sc, d_off, d_stride = (arr(self.scales.astype(np.uint32)), arr(self.off),
                                 arr(self.stride))
        d_qs = arr(np.asarray(self.qs, dtype=self.ell_dtype))
        sliding = self.mode == "sliding"
        lw = min(64, self.gwg)

        def reduce(j0, count):
            per = min(count, self.scales_per_group)
            kper = self.groups_per_item
            grid = (K // kper * self.rwg, E, -(-count // per))
            args = (ell.data, d_len, d_sc, d_off, d_stride, np.uint32(nsc), np.uint32(j0),
                    np.uint32(j0 + count), np.uint32(per), np.uint32(kper))
            red.dfa_log_stats(queue, grid, (self.rwg, 1, 1), *args, stats.data)
            red.dfa_q_sums(queue, grid, (self.rwg, 1, 1), *args, stats.data, d_qs,
                           np.uint32(nq), qsum.data, mq.data)

        def advance(start, count):
            for j in range(start, start + count):
                s, cnt = int(self.scales[j]), int(self.counts[j])
                if cnt == 0:
                    continue
                p = np.int32(frame_exponent(s))
                base = np.uint64(0 if sliding else self.off[j])
                if s <= BLOCK:
                    prg.dfa_fluct_items(queue, (-(-cnt // lw) * lw, E), (lw, 1), Y.data, d_len,
                                        d_yoff, co, np.uint32(j), np.uint32(s), p, ell.data,
                                        base, np.uint32(cnt))
                elif sliding:
                    pr = np.int32(frame_exponent(s + self.run))
                    prg.dfa_fluct_runs(queue, (-(-cnt // self.run) * self.run, E), (self.run, 1),
                                       Y.data, mom.data, d_len, d_yoff, d_boff, co,
                                       np.uint32(j), np.uint32(s), p, pr, ell.data, base,
                                       np.uint32(cnt))
                else:
                    prg.dfa_fluct_groups(queue, (cnt * self.gwg, E), (self.gwg, 1), Y.data,
                                         mom.data, d_len, d_yoff, d_boff, co, np.uint32(j),
                                         np.uint32(s), p, ell.data, base, np.uint32(cnt))
                if sliding:
                    reduce(j, 1)

        visits = [E * int(self.b.lengths.max()) * (min(int(s), BLOCK) if sliding else 1)
                  for s in self.scales]
        budget = FIRST_SLICE_VISITS[dev.facts.is_gpu]
        first = max(1, int(np.searchsorted(np.cumsum(visits), budget, side="right")))
        run_sliced(nsc, advance, queue, progress=progress, label=label,
                   what="scales of the fluctuation function", first=first)
        mark("segments' fits")
        if not sliding:
            reduce(0, nsc)
        out = [np.empty(a.shape, a.dtype) for a in (stats, qsum, mq)]
        events = [cl.enqueue_copy(queue, h, d.data, is_blocking=False)
                  for h, d in zip(out, (stats, qsum, mq))]
        cl.wait_for_events(events)
        mark("reductions and download")
        return (self._acc_host(out[0]), self._acc_host(out[1]), out[2].astype(np.float64))

