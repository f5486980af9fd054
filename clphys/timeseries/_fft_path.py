"""The FFT path of autocorrelation() and of hurst() for q = 2: the sums of every lag
at once from the transform of the zero-padded series, with the spread of 16 blocks
for the errors."""

from __future__ import annotations

import math

import numpy as np

from ..runtime import check_memory, fp64_missing, run_sliced, staging, workspace
from ..runtime.memory import USABLE_FRACTION
from . import _common, _fft, _finish, _ingest
from ._pair_finish import acf_finish_device, read_rows
from ._pair_plan import STAGING_SLACK, TooLarge, held_bytes, out_dtype, release_cached
from ._pair_sums import staged


def hurst_fft(dev, b, max_lag, nq, accumulate, transfer, progress, errors, timeline):
    """(S, S_err, H, H_err), each (n_series, nq, max_lag) (errors None without errors),
    of S_2 by FFT."""
    S, H, S_err, H_err = fft_run(dev, b, max_lag, "msd", accumulate, transfer, progress,
                                  "hurst", errors, timeline)
    # views for one q (a copy of each array, 128 MB for all lags of 2^24 values, cost
    # more in page faults than the FFT)
    return tuple(None if a is None else a[:, None, 1:] if nq == 1 else
                 np.repeat(a[:, None, 1:], nq, axis=1) for a in (S, S_err, H, H_err))


FFT_SPAN = 4096               # values per block of the ingest kernels on the FFT path


FFT_BLOCKS = 16              # blocks per series for the FFT path's error bars


class FFTRows:
    """Rows of zero-padded converted series (Input `inp`, one row of L reals each) on the
    device, and the launches of their autocorrelation transforms (`steps`); `res` holds
    the circular autocorrelation sums once they ran."""

    def __init__(self, dev, inp, nrows: int, L: int, real: str, centre):
        rdtype = np.float64 if real == "double" else np.float32
        self.dev, self.L, self.nrows, self.rdtype = dev, L, nrows, rdtype
        self.fft = fft = _fft.FFT(dev, L // 2, nrows, real)
        self.A = workspace.work_array(dev, nrows * L, rdtype)
        B = workspace.work_array(dev, nrows * L, rdtype)
        C = workspace.work_array(dev, nrows * L, rdtype)
        self.nb = -(-L // FFT_SPAN)
        self.sums = workspace.work_array(dev, 2 * nrows * self.nb, inp.acc)
        self.yoff = np.arange(nrows, dtype=np.uint64) * L
        inp.convert(self.A.data, self.yoff, np.full(nrows, L), centre, sums=self.sums.data)
        forward, out = fft.launches(self.A.data, B.data, C.data, -1)
        inverse, self.res = fft.launches(out, B.data, C.data, +1)
        self.steps = forward + [lambda: fft.power(out)] + inverse
        self._keep = (B, C)

    def moments(self):
        """(Σ y, Σ y²) per row."""
        t = _common.acc_to_float64(self.sums.get()).reshape(self.nrows, self.nb, 2).sum(axis=1)
        return t[:, 0], t[:, 1]

    def finish(self, inp, lengths, nl, exps, form, odtype, timeline):
        """acf_finish_device on these rows, the results kept on the device."""
        s1, s2 = self.moments()
        toff = self.yoff + np.asarray(lengths, np.uint64) - 1
        return acf_finish_device(self.dev, inp, self.A, "double", self.yoff, toff, lengths, nl,
                                  self.res, self.L, 1, np.tile([1, self.L], (len(lengths), 1)),
                                  (s1, s2, s1, s2), exps, form, odtype, timeline, keep=True)


def fft_run(dev, b, max_lag, form, accumulate, transfer, progress, label, errors, timeline):
    """ρ (form "general"/"stationary") or S_2 ("msd") at lags 0 .. max_lag of every
    series of the batch from the FFT of its zero-padded rows.  Returns (ρ, ρ_err) or, for
    "msd", (S_2, H, S_err, H_err), each (n_series, max_lag + 1).  The errors come from 16
    blocks of each series transformed alongside (with fp64; else NaN): see block_errors."""
    nl = max_lag + 1
    E = len(b)
    f64 = _common.accumulator(dev, accumulate) == "double"
    if form == "msd" and not f64:
        raise fp64_missing(dev, "hurst: method='fft' (S_2 from the autocorrelation sums)",
                           "method='direct'")
    real = "double" if f64 else "float"
    rsize = 8 if f64 else 4
    L = _fft.fft_length(int(b.lengths.max()), max_lag)
    K = FFT_BLOCKS
    bs = b.lengths // K                                  # values per block
    with_err = errors and f64 and int(bs.min()) >= 2
    nlb = min(nl, int(bs.min()))                        # the blocks' lags: l < nlb
    Lb = _fft.fft_length(int(bs.max()), nlb - 1) if with_err else 0
    _check_memory(dev, b, L, Lb, nl, rsize, label)
    inp = _ingest.Input(dev, b, FFT_SPAN, "real", f64)
    queue = dev.queue
    odtype = out_dtype(b)
    with staged(dev, int(b.lengths.sum()) * b.dtype.itemsize, transfer) as st:
        inp.load(st)
        exps = inp.scales(inp.check())
        timeline.mark("upload and check")
        shift = np.ldexp(b.first_values(), exps)
        sums = inp.moments(shift)
        timeline.mark("mean and spread")
        if form != "msd":
            flat = np.add.reduceat(sums[:, 1], inp.boff[:-1].astype(np.int64)) == 0
            if flat.any():
                raise ValueError(f"{b.label(int(np.argmax(flat)))} is constant: its "
                                 "autocorrelation is undefined")
        centre = inp.centres(sums, shift)
        rows = FFTRows(dev, inp, E, L, real, centre)
        steps = rows.steps
        if with_err:
            binp = block_input(dev, inp, b, bs, K, exps)
            brows = FFTRows(dev, binp, E * K, Lb, real, np.repeat(centre, K))
            steps = steps + brows.steps

        def advance(start, count):
            for k in range(start, start + count):
                steps[k]()

        run_sliced(len(steps), advance, queue, progress=progress, label=label,
                   what="FFT passes")
        timeline.mark("conversion and FFT")
        if f64:
            out, second, prg = rows.finish(inp, b.lengths, nl, exps, form, odtype, timeline)
            # only what is returned comes back (ρ's second array is the direct path's
            # error slot: NaN here, never downloaded)
            arrays = [out, second] if form == "msd" else [out]
            if with_err:
                bout, bsecond, _ = brows.finish(binp, np.repeat(bs, K), nlb,
                                                np.repeat(exps, K), form, np.float64,
                                                timeline)
                spread = [bout] + ([bsecond] if form == "msd" else [])
                arrays = arrays + [
                    block_errors(dev, prg, th, K, nlb, bs, b.lengths, nl, odtype)
                    for th in spread]
            res = staging.download_all(dev, [(a.data, np.empty((E, nl), odtype)) for a in arrays])
            # no errors: NaN (errors=False: None, no array of the results' size)
            nan = np.full((E, nl), np.nan, odtype) if errors else None
            if form == "msd":
                return tuple(res + [nan, nan][:4 - len(res)])
            return res[0], (res[1] if with_err else nan)
        vals = _acf_on_host(dev, rows, b.lengths, nl, form == "stationary")
    return vals.astype(odtype, copy=False), np.full((E, nl), np.nan, odtype) if errors else None


def _check_memory(dev, b, L, Lb, nl, rsize, label):
    """The FFT path's buffers against the device (rows of L values, block rows of Lb):
    TooLarge for a batch that does not fit (it is then split), ValueError for one series;
    what earlier calls left for reuse goes first if needed."""
    E, K = len(b), FFT_BLOCKS
    what = f"{label} of {int(b.lengths.max())} points by FFT ({L} values per row)"
    buffers = {"series (as given)": math.ceil(STAGING_SLACK * int(b.lengths.sum())
                                              * b.dtype.itemsize),
               "FFT rows": E * L * rsize, "FFT work": E * L * rsize, "FFT work 2": E * L * rsize,
               "block rows": 3 * E * K * Lb * rsize,
               "results": 6 * E * nl * 8 + 4 * 8 * E * (K + 1) * (-(-nl // 64) + 1),
               "block sums": 2 * 8 * E * (K + 1) * (-(-L // FFT_SPAN))}
    if sum(buffers.values()) + held_bytes(dev) > dev.facts.global_mem * USABLE_FRACTION:
        release_cached(dev)
    try:
        check_memory(dev, buffers, what, "Use method='direct', errors=False, or fewer series "
                                         "at once.")
    except ValueError:
        if E > 1:
            raise TooLarge() from None
        raise


def _acf_on_host(dev, rows, lengths, nl, stationary) -> np.ndarray:
    """ρ of each row from its transform's sums, finished on the host (no fp64)."""
    E, L = rows.nrows, rows.L
    s1, s2 = rows.moments()
    vals = np.empty((E, nl))
    starts = np.arange(E, dtype=np.int64) * L
    heads, tails = np.split(read_rows(dev, rows.A.data, rows.rdtype, np.concatenate(
        [starts, starts + lengths - nl]), nl), 2)
    cs = read_rows(dev, rows.res, rows.rdtype, starts, nl)
    for e in range(E):
        n = int(lengths[e])
        vals[e], _ = _finish.acf(cs[e][None, 1:], heads[e], tails[e], s1[e], s2[e],
                                 s1[e:e + 1], s2[e:e + 1], n, n, stationary)
    return vals


def block_input(dev, inp, b, bs, K, exps):
    """An Input over K blocks of bs[e] values of each series, reading the values already
    uploaded for `inp` (the same scale; the caller gives the same centre)."""
    views = [b.arrays[e][k * int(bs[e]):(k + 1) * int(bs[e])] for e in range(len(b))
             for k in range(K)]
    binp = _ingest.Input(dev, _ingest.Batch(b.name, views, single=False), FFT_SPAN, "real",
                         inp.f64)
    binp.x, binp.window = inp.x, None
    binp.off_dev = binp.small_array(np.array([int(inp.raw_off[e]) + k * int(bs[e])
                                      for e in range(len(b)) for k in range(K)], np.int64))
    binp.exps = np.repeat(exps, K).astype(np.int32)
    binp.exps_dev = binp.small_array(binp.exps)
    return binp


def block_errors(dev, prg, th, K, nlb, bs, lengths, nl, odtype):
    """The FFT path's errors from the blocks' estimates th (rows (e, k) of nlb lags):
    err(l) = sqrt(var_k θ_k(l) (b - l)/(T - l)) for l < b, NaN beyond (finish.cl)."""
    E = len(lengths)
    err = workspace.work_array(dev, E * nl, odtype)
    prg.ts_block_spread(dev.queue, (-(-nl // 64) * 64, E), (64, 1), th.data, np.uint32(K),
                        np.uint32(nlb), workspace.device_array(dev, bs.astype(np.uint32), False).data,
                        workspace.device_array(dev, np.asarray(lengths, np.uint32), False).data,
                        np.uint32(nl), err.data)
    return err
