"""From the pair sums to S_q, H and rho with their jackknife errors: finish.cl on
devices with fp64, _finish.py on the host otherwise."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla

from ..progress import Progress
from ..runtime import staging, workspace
from . import _common, _finish, _ingest
from ._pair_plan import CL_OUT, default_pair_shape, needs_maxima, out_dtype, pair_cost, pair_kind
from ._pair_stream import finish_streamed, pair_pass
from ._pair_sums import PairSums, concatenate_on_host, staged


def hurst_direct(dev, b, max_lag, qs, accumulate, tuning, layout, transfer, progress,
                  stream, timeline):
    """(S, S_err, H, H_err), each (n_series, n_q, max_lag), by pair sums."""
    kinds = [pair_kind(q) for q in qs]
    scaled = needs_maxima(kinds)
    # a general q: (hi, lo) pairs, whose differences pairs.cl forms to float32 rounding of
    # themselves (equal values: exactly 0).  The tile-relative values' differences were
    # off by ~1e-7 of the local excursion, which the q-th power of a small q magnifies
    # (prices on a grid of ticks at q = 0.1: a few %, at q = 0.5 4.5e-6; a random walk
    # at q = 0.01: 3e-3)
    layout = layout or ("float2" if scaled else "blocked")
    what = f"hurst of {int(b.lengths.max())} points with max_lag = {max_lag}"
    tuning = tuning or default_pair_shape(dev.facts, max_lag, int(b.lengths.min()), kinds)
    run = PairSums(dev, b, max_lag, 1, layout, len(kinds), accumulate, tuning, what, timeline)
    E, nl = run.E, max_lag
    weight = sum(pair_cost(k) for k in kinds)
    # CPUs: 2^(q log2 x) in a pass of its own (inlined beside other pair functions, the
    # unrolled pair loop did not vectorise: 2x slower on PoCL); GPUs: one pass
    passes = [[i] for i in range(len(kinds))] if "powdiff" in kinds and len(kinds) > 1 \
        and not dev.facts.is_gpu else [list(range(len(kinds)))]
    with staged(dev, run.raw_bytes(), transfer) as st, \
            Progress(run.units * (weight + scaled), progress, label="hurst") as bar:
        sums, exps = pair_pass(run, st, False, kinds, stream, progress)
        inv = np.ones((E, nl), np.float32)
        if scaled:
            top = run.sums(st, ["absmax"], bar=bar)
            M = top.get().reshape(E, nl).astype(np.float64)
            with np.errstate(divide="ignore"):
                inv = np.where(M > 0, 1.0 / M, 0.0).astype(np.float32)

        def pair_sums():
            out = [run.sums(st, [kinds[i] for i in p], qs=[qs[i] for i in p], inv=inv,
                            bar=bar.part(sum(pair_cost(kinds[i]) for i in p)))
                   for p in passes]
            run.timeline.mark("conversion and pair sums")
            return out[0] if len(out) == 1 else concatenate_on_host(dev, out)

        def finish(sums, exps):
            if not run.f64:                         # on the host, from the block sums
                return exps, _common.acc_to_float64(sums.get()).reshape(len(kinds), E, run.K,
                                                                        nl)
            odtype = out_dtype(b)
            prg = dev.build("timeseries/finish.cl", kinds=kinds, otype=CL_OUT[odtype])
            out = workspace.work_array(dev, 4 * len(kinds) * E * nl, odtype)
            fin = 64
            prg.ts_hurst_finish(dev.queue, (-(-nl // fin) * fin, E, len(kinds)), (fin, 1, 1),
                                sums.data, np.uint32(E), np.uint32(run.K), np.uint32(nl),
                                run.inp.small_array(run.blocks_of(run.bls)).data, run.ns_dev.data,
                                run.inp.exps_dev.data,
                                run.inp.small_array(np.asarray(qs, np.float32)).data,
                                run.inp.small_array(inv).data, out.data)
            run.timeline.mark("finish kernels")
            run.read_checks()
            return staging.download(dev, out.data, np.empty((4, len(kinds), E, nl), odtype))

        res = finish_streamed(run, st, False, sums if sums is not None else pair_sums(), exps,
                        finish, pair_sums)
        if run.f64:
            return tuple(res.transpose(0, 2, 1, 3))
        exps, blocks = res
    with np.errstate(divide="ignore"):
        m = np.where(inv > 0, 1.0 / inv.astype(np.float64), 0.0)
    res = np.empty((4, E, len(kinds), nl))
    for e in range(E):
        for i, kind in enumerate(kinds):
            res[:, e, i] = _finish.hurst(blocks[i, e, :run.Ks[e]], int(b.lengths[e]),
                                         int(exps[e]), kind, qs[i], m[e], int(run.bls[e]))
    return tuple(res.astype(out_dtype(b), copy=False))


def acf_direct(dev, b, max_lag, stationary, accumulate, tuning, transfer, progress,
                stream, timeline):
    """(ρ, ρ_err), each (n_series, max_lag + 1), by pair sums."""
    nl = max_lag + 1
    what = f"the autocorrelation of {int(b.lengths.max())} points with max_lag = {max_lag}"
    run = PairSums(dev, b, max_lag, 1, "float", 1, accumulate, tuning, what, timeline)
    E = run.E
    with staged(dev, run.raw_bytes(), transfer) as st:
        sums, exps = pair_pass(run, st, True, ["product"], stream, progress)

        def pair_sums():
            out = run.sums(st, ["product"], progress=progress, label="autocorrelation")
            run.timeline.mark("conversion and pair sums")
            return out

        def finish(sums, exps):
            if len(run.windows) == 1:
                ybuf, hoff = run.y, run.yoff.astype(np.uint64)
                toff = (run.yoff + b.lengths - 1).astype(np.uint64)
            else:
                ybuf, hoff, toff = converted_ends(dev, run, nl)
            if not run.f64:
                s1, s2, s1k, s2k = run.tile_totals()
                cross = _common.acc_to_float64(sums.get()).reshape(E, run.K, max_lag)
                rho = np.empty((E, nl))
                err = np.empty((E, nl))
                heads, tails = np.split(read_rows(dev, ybuf.data, np.float32, np.concatenate(
                    [hoff.astype(np.int64), toff.astype(np.int64) - nl + 1]), nl), 2)
                for e in range(E):
                    K = run.Ks[e]
                    rho[e], err[e] = _finish.acf(cross[e, :K], heads[e], tails[e], s1[e], s2[e],
                                                 s1k[e, :K], s2k[e, :K], int(b.lengths[e]),
                                                 int(run.bls[e]), stationary)
                return rho.astype(out_dtype(b), copy=False), err.astype(out_dtype(b),
                                                                         copy=False)
            return acf_finish_device(dev, run.inp, ybuf, "float", hoff, toff, b.lengths, nl,
                                      sums, 0, run.K, run.blocks_of(run.bls),
                                      run.device_moments(), exps,
                                      "stationary" if stationary else "general",
                                      out_dtype(b), run.timeline,
                                      before_download=run.read_checks)

        return finish_streamed(run, st, True, sums if sums is not None else pair_sums(), exps,
                         finish, pair_sums)


def read_rows(dev, buf, dtype, starts, count: int) -> np.ndarray:
    """buf[s:s + count] (elements of dtype) for each s of `starts`, gathered on the device
    and read back at once (not one blocking read per row): (len(starts), count) float64."""
    idx = (np.asarray(starts, np.int64)[:, None] + np.arange(count)).ravel()
    whole = cla.Array(dev.queue, int(idx.max()) + 1, dtype, data=buf)
    rows = cla.take(whole, cla.to_device(dev.queue, idx))
    return rows.get().reshape(len(starts), count).astype(np.float64)


def converted_ends(dev, run, nl):
    """For a series worked on in windows: its first and last nl values converted like the
    whole (the same bits), side by side in a small buffer: (buffer, hoff, toff)."""
    a = run.b.arrays[0]
    n = a.size
    ends = _ingest.Batch(run.b.name, [a[:nl], a[n - nl:]], single=False)
    inp = _ingest.Input(dev, ends, run.shape.tile, "float", run.f64)
    inp.exps = np.repeat(run.inp.exps, 2)
    inp.exps_dev = inp.small_array(inp.exps)
    y = workspace.work_array(dev, 2 * nl, np.float32)
    with staging.Staged(dev, inp.raw_bytes(), staging.Transfer()) as st:
        inp.load(st)
        inp.convert(y.data, [0, nl], [nl, nl], np.repeat(run.centre, 2))
        dev.queue.finish()
    return y, np.array([0], np.uint64), np.array([2 * nl - 1], np.uint64)


def acf_finish_device(dev, inp, ybuf, ytype, hoff, toff, lengths, nl, cross, cstride, nblk,
                       kbl, moments, exps, form, odtype, timeline, keep=False,
                       before_download=None):
    """ρ and its jackknife error (or S_2 and H for form "msd") on the device (fp64): the
    prefix sums of the series' ends, then the formulas (finish.cl; the cross sums in nblk
    blocks per series, kbl: each series' (blocks, values per block)); downloaded as odtype
    (before_download() is called first: it may enqueue more reads)."""
    queue = dev.queue
    E = len(lengths)
    wg = min(256, _common.pow2_at_most(dev.facts.max_work_group))
    blocks = cstride == 0
    prg = dev.build("timeseries/finish.cl", form=form, cross="blocks" if blocks else "rows",
                    ytype=ytype, wg=wg, otype=CL_OUT[np.dtype(odtype)])
    nch = -(-nl // wg)
    arr = inp.small_array
    hoff_d, toff_d = arr(np.asarray(hoff, np.uint64)), arr(np.asarray(toff, np.uint64))
    ns = arr(np.asarray(lengths, np.uint32))
    tot = workspace.work_array(dev, E * nch * 4, np.float64)
    yb = ybuf.data if isinstance(ybuf, cla.Array) else ybuf
    prg.ts_prefix_partial(queue, (nch * wg, E), (wg, 1), yb, hoff_d.data, toff_d.data, ns.data,
                          np.uint32(nl), tot.data)
    prg.ts_prefix_scan(queue, (E * wg,), (wg,), tot.data, np.uint32(nch))
    out = workspace.work_array(dev, E * nl, odtype)
    err = workspace.work_array(dev, E * nl, odtype)
    prg.ts_acf_finish(queue, (nch * wg, E), (wg, 1), yb, hoff_d.data, toff_d.data, ns.data,
                      np.uint32(nl), tot.data, cross.data if isinstance(cross, cla.Array)
                      else cross, np.uint64(cstride), np.uint32(max(nblk, 1)),
                      arr(np.asarray(kbl, np.uint32)).data,
                      device_or(arr, moments, lambda m: moment_rows_of(m, E)),
                      device_or(arr, exps, lambda x: np.asarray(x, np.int32)), out.data,
                      err.data)
    timeline.mark("finish kernels")
    if keep:                    # the device arrays, for more kernels
        return out, err, prg
    if before_download is not None:
        before_download()
    if blocks or form == "msd":
        return tuple(staging.download_all(dev, [(a.data, np.empty((E, nl), odtype))
                                              for a in (out, err)]))
    return staging.download(dev, out.data, np.empty((E, nl), odtype)), \
        np.full((E, nl), np.nan, odtype)


def device_or(arr, value, host):
    """A kernel argument: a device array's buffer as it is, else arr(host(value))."""
    return value.data if isinstance(value, cla.Array) else arr(host(value)).data


def moment_rows_of(moments, E: int) -> np.ndarray:
    """(s1, s2, s1k, s2k) as finish.cl's one array: per series s1, s2, its block sums of
    y, then of y² (one upload instead of four)."""
    return np.concatenate([np.asarray(m, np.float64).reshape(E, -1) for m in moments], axis=1)
