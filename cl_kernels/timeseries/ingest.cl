## The input of hurst() and autocorrelation() on the device: the caller's values as they
## were uploaded (float64, float32, int64 or int32, one series or a batch of them back to
## back), checked, scaled and converted here, so that the host only copies them once.
##
## params: raw     "double" | "float" | "long" | "int": the caller's dtype; the buffer is
##                 read as the integer type of the same width (its bits), so devices
##                 without fp64 read float64 input too
##         f64     True: arithmetic in double (devices with fp64); False: in (hi, lo)
##                 float pairs, the value v * 2^e as hi + lo to ~2^-48 relative; the
##                 sums accumulate in double, or compensated float (acc.cl) without f64
##         wg      work-group size (a power of two); span: values per block (a multiple)
##         layout  what ts_ingest_convert writes (see there)
##         block   values per offset block of the "blocked" layout (a power of two)
##
## Blocks: series s has ceil(len[s] / span) blocks of `span` values; the blocks of all
## series are numbered back to back (boff[s] = first block of series s, boff[nseries] =
## all), a launch covers the blocks [b_lo, b_lo + groups), one block per work group.
## Every per-block result is written to its own slot (out[block - b_lo] for the checks and
## moments, sums[block] for the conversion), so the host (or a later kernel) adds them in
## a fixed order: the sums do not depend on how the launches were cut.
## A series' values are at x[off[s] + t]; off may be negative for a window of a series
## too long for the device, whose buffer then starts at the window's first value.
<%namespace name="accns" file="/timeseries/acc.cl"/>
<%namespace name="red" file="/common/reduce.cl"/>
<%
    RAW = {"double": "ulong", "float": "uint", "long": "long", "int": "int"}
    if raw not in RAW:
        raise ValueError("ingest.cl: raw must be one of %s, got %r" % (sorted(RAW), raw))
    if f64 and not dev.fp64:
        raise ValueError("ingest.cl: f64=True on a device without fp64")
    if wg < 1 or wg & (wg - 1) or span % wg:
        raise ValueError("ingest.cl: wg must be a power of two dividing span")
    if layout not in ("float", "real", "blocked", "float2"):
        raise ValueError("ingest.cl: unknown layout %r" % (layout,))
    if layout == "blocked" and (block < 1 or block & (block - 1)):
        raise ValueError("ingest.cl: block must be a power of two")
    acc = "double" if f64 else "compensated"
    R = RAW[raw]
    A = "ti_" + acc[0] + "_"
    real = "double" if f64 else "float"
    lb = block.bit_length() - 1
%>
% if f64:
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif
${accns.accumulator(A, acc)}
${red.wg_reduce("ti_k_", "int2", wg, "return (int2)(min(a.x, b.x), max(a.y, b.y));")}
${red.wg_reduce("ti_s_", A + "acc_t", wg, "return " + A + "add(a, b);")}

typedef ${R} ti_raw_t;
% if f64:
typedef double ti_shift_t;        // a per-series value in the scaled units
% else:
typedef float2 ti_shift_t;        // ... as a (hi, lo) float pair
% endif

#define TI_NONE 0x7fffffff        // no bad value in the block
#define TI_ZERO (-4000)           // exponent key of zero: below every finite value's

// The series of block b: the s with boff[s] <= b < boff[s + 1].
inline uint ti_series(__global const uint *boff, const uint nseries, const uint b)
{
    uint lo = 0, hi = nseries;
    while (hi - lo > 1) {
        const uint mid = (lo + hi) / 2;
        if (boff[mid] <= b) lo = mid; else hi = mid;
    }
    return lo;
}

// (finite, k) with k the exponent of frexp(v), v = m 2^k, m in [1/2, 1), from the bits.
inline int2 ti_key(const ti_raw_t r)
{
% if raw == "double":
    const int E = (int)((r >> 52) & 0x7ffUL);
    const ulong m = r & 0xfffffffffffffUL;
    if (E == 0x7ff) return (int2)(0, TI_ZERO);
    return (int2)(1, E ? E - 1022 : (m ? 63 - (int)clz(m) - 1073 : TI_ZERO));
% elif raw == "float":
    const int E = (int)((r >> 23) & 0xffu);
    const uint m = r & 0x7fffffu;
    if (E == 0xff) return (int2)(0, TI_ZERO);
    return (int2)(1, E ? E - 126 : (m ? 31 - (int)clz(m) - 148 : TI_ZERO));
% elif raw == "long":
    const ulong a = abs(r);
    return (int2)(1, a ? 64 - (int)clz(a) : TI_ZERO);
% else:
    const uint a = abs(r);
    return (int2)(1, a ? 32 - (int)clz(a) : TI_ZERO);
% endif
}

% if f64:
// v * 2^e in double (exact unless it falls below the double range).
inline double ti_value(const ti_raw_t r, const int e)
{
%   if raw == "double":
    return ldexp(as_double(r), e);
%   elif raw == "float":
    return ldexp((double)as_float(r), e);
%   else:
    return ldexp((double)r, e);
%   endif
}
inline double ti_sub(const double a, const double b) { return a - b; }
inline float ti_float(const double a) { return (float)a; }
inline double ti_real(const double a) { return a; }
inline float2 ti_pair(const double a)
{
    const float hi = (float)a;
    return (float2)(hi, (float)(a - (double)hi));
}
% else:
// |m| 2^x as a (hi, lo) float pair: hi = m rounded to 24 bits, lo the rest rounded.
inline float2 ti_split(const ulong m, const int x)
{
    const float hi = convert_float_rte(m);
    const float lo = convert_float_rte((long)(m - convert_ulong(hi)));
    return (float2)(ldexp(hi, x), ldexp(lo, x));
}
// v * 2^e as a (hi, lo) float pair, from the bits: no fp64 arithmetic anywhere.
inline float2 ti_value(const ti_raw_t r, const int e)
{
%   if raw == "double":
    const int E = (int)((r >> 52) & 0x7ffUL);
    ulong m = r & 0xfffffffffffffUL;
    if (E) m |= 0x10000000000000UL;
    const float2 p = ti_split(m, (E ? E - 1075 : -1074) + e);
    return (r >> 63) ? -p : p;
%   elif raw == "float":
    return (float2)(ldexp(as_float(r), e), 0.0f);
%   else:
    const float2 p = ti_split((ulong)abs(r), e);
    return r < 0 ? -p : p;
%   endif
}
// a - b for pairs, to ~2^-48 of the larger: TwoSum of the high parts, then the rest.
inline float2 ti_sub(const float2 a, const float2 b)
{
    const float s = a.x - b.x;
    const float bb = s - a.x;
    const float err = (a.x - (s - bb)) + (-b.x - bb);
    const float t = err + (a.y - b.y);
    const float hi = s + t;
    return (float2)(hi, t - (hi - s));
}
// hi + lo rounded once; as a dot product: a.x + a.y crashes Oclgrind's uninitialised-value
// checker here (the same bits: the products by 1 are exact)
inline float ti_float(const float2 a) { return dot(a, (float2)(1.0f, 1.0f)); }
// v² as an exact (hi, lo) pair (Dekker's product, with fma)
inline float2 ti_square(const float v)
{
    const float hi = v * v;
    return (float2)(hi, fma(v, v, -hi));
}
inline float ti_real(const float2 a) { return ti_float(a); }
inline float2 ti_pair(const float2 a) { return a; }
% endif

// Per block: the first non-finite value's index in the block (TI_NONE if none) and the
// largest frexp exponent of its values (TI_ZERO if all are zero), at out[b - out_lo].
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ts_ingest_check(__global const ti_raw_t *x, __global const long *off,
                     __global const uint *len, __global const uint *boff, const uint nseries,
                     const uint b_lo, const uint out_lo, __global int2 *out)
{
    __local int2 scratch[${wg}];
    const uint b = b_lo + get_group_id(0), lid = get_local_id(0);
    const uint s = ti_series(boff, nseries, b);
    const uint t0 = (b - boff[s]) * ${span}u, n = len[s];
    int2 r = (int2)(TI_NONE, TI_ZERO);
    for (uint i = lid; i < ${span}u && t0 + i < n; i += ${wg}u) {
        const int2 k = ti_key(x[off[s] + (long)(t0 + i)]);
        r = (int2)(k.x ? r.x : min(r.x, (int)i), max(r.y, k.y));
    }
    r = ti_k_wg_reduce(r, lid, scratch);
    if (lid == 0) out[b - out_lo] = r;
}

// Per series s in [s_lo, s_hi), one work group each, from the checks of its blocks
// (ts_ingest_check, out_lo 0): the first non-finite value's index in the series (TI_NONE
// if none) to bad[s], the exponent e that brings max |v| into [1/2, 1) (0 for all zeros)
// to exps[s] and its first value scaled, v(0) 2^e, to first[s]: what the host computes
// from the checks read back, for a series or batch streamed without a wait for the host
// (the same values).  (One work item per series took ~1 ms for the 2^15 blocks of a
// series of 2^24 values on an H200.)
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ts_ingest_scale(__global const ti_raw_t *x, __global const long *off,
                     __global const uint *boff, const uint s_lo, const uint s_hi,
                     __global const int2 *checks, __global int *bad,
                     __global int *exps, __global ti_shift_t *first)
{
    __local int2 scratch[${wg}];
    const uint s = s_lo + get_group_id(0), lid = get_local_id(0);
    if (s >= s_hi) return;                  // (the whole group)
    const uint b0 = boff[s], b1 = boff[s + 1];
    int2 k = (int2)(TI_NONE, TI_ZERO);      // (the first block with a bad value, max key)
    for (uint b = b0 + lid; b < b1; b += ${wg}u) {
        const int2 r = checks[b];
        if (r.x != TI_NONE) k.x = min(k.x, (int)(b - b0));
        k.y = max(k.y, r.y);
    }
    k = ti_k_wg_reduce(k, lid, scratch);
    if (lid == 0) {
        const int e = k.y == TI_ZERO ? 0 : -k.y;
        bad[s] = k.x == TI_NONE ? TI_NONE : k.x * (int)${span}u + checks[b0 + k.x].x;
        exps[s] = e;
        first[s] = ti_value(x[off[s]], e);
    }
}

// Per block: the sums of d and d^2, d = v 2^e - shift[s] (shift: the series' first value,
// scaled), for the mean and variance of the series, to out[2 (b - out_lo)], out[.. + 1].
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ts_ingest_moments(__global const ti_raw_t *x, __global const long *off,
                       __global const uint *len, __global const uint *boff, const uint nseries,
                       const uint b_lo, const uint out_lo, __global const int *exps,
                       __global const ti_shift_t *shift, __global ${A}acc_t *out)
{
    __local ${A}acc_t scratch[${wg}];
    const uint b = b_lo + get_group_id(0), lid = get_local_id(0);
    const uint s = ti_series(boff, nseries, b);
    const uint t0 = (b - boff[s]) * ${span}u, n = len[s];
    const int e = exps[s];
    ${A}acc_t s1 = ${A}ZERO, s2 = ${A}ZERO;
    for (uint i = lid; i < ${span}u && t0 + i < n; i += ${wg}u) {
        const ${real} d = ti_real(ti_sub(ti_value(x[off[s] + (long)(t0 + i)], e), shift[s]));
% if f64:
        s1 += d;
        s2 += d * d;
% else:
        s1 = ${A}fold(s1, d);
        s2 = ${A}fold(s2, d * d);
% endif
    }
    s1 = ti_s_wg_reduce(s1, lid, scratch);
    s2 = ti_s_wg_reduce(s2, lid, scratch);
    if (lid == 0) { out[2 * (b - out_lo)] = s1; out[2 * (b - out_lo) + 1] = s2; }
}
% if f64:

// Per series s in [s_lo, s_hi), from its blocks' moments (out_lo 0): the sums (Σ d, Σ d²)
// to stats[2 s], stats[2 s + 1] and the centre, shift + the mean rounded to a power of two
// near the spread (so that data on a binary grid stays on it), as _ingest.centres (one
// operation per statement: no contraction into an fma).
__kernel void ts_ingest_centre(__global const double *mom, __global const uint *len,
                               __global const uint *boff, const uint s_lo, const uint s_hi,
                               __global const double *shift, __global double *centre,
                               __global double *stats)
{
    const uint s = s_lo + get_global_id(0);
    if (s >= s_hi) return;
    double s1 = 0.0, s2 = 0.0;
    for (uint b = boff[s]; b < boff[s + 1]; ++b) { s1 += mom[2 * b]; s2 += mom[2 * b + 1]; }
    stats[2 * s] = s1;                  // (a double2 store trips Oclgrind's checker)
    stats[2 * s + 1] = s2;
    const double n = (double)len[s];
    const double mean = s1 / n;
    const double sq = mean * mean;
    const double var = s2 / n - sq;
    const double sd = sqrt(fmax(var, 0.0));
    // 2^(frexp exponent - 1) = 2^ilogb (frexp's pointer argument trips Oclgrind)
    const double step = sd > 0.0 && isfinite(sd) ? ldexp(1.0, ilogb(sd)) : 1.0;
    const double m = rint(mean / step) * step;
    centre[s] = isfinite(mean) ? shift[s] + m : shift[s];
}

// finish.cl's `mom` row of each series e: s1, s2, s1k[nblk], s2k[nblk] (its converted
// values' Σ y, Σ y², then the same per jackknife block: K blocks of tpb of its tiles, the
// last one to its end, the others 0; (K, tpb) = ktpb[e], the series' own), from the
// conversion's per-tile sums (tiles boff[e] .. boff[e + 1]).  Work group (k, e): block k's tiles, strided over the items and added
// by a fixed tree (one item per block was ~2 ms for the 16384 tiles of a series of 2^24
// on the H100); then ts_ingest_row_totals adds the blocks in order.
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ts_ingest_block_totals(__global const double *tiles, __global const uint *boff,
                            const uint nblk, __global const uint2 *ktpb, __global double *mom)
{
    __local ${A}acc_t scratch[${wg}];
    const uint k = get_group_id(0), e = get_group_id(1), lid = get_local_id(0);
    __global double *row = mom + (size_t)e * (2 + 2 * nblk);
    const uint b0 = boff[e], b1 = boff[e + 1], K = ktpb[e].x, tpb = ktpb[e].y;
    const uint lo = k < K ? min(b0 + k * tpb, b1) : b1;
    const uint hi = k + 1 == K ? b1 : min(lo + tpb, b1);
    double k1 = 0.0, k2 = 0.0;
    for (uint b = lo + lid; b < hi; b += ${wg}u) { k1 += tiles[2 * b]; k2 += tiles[2 * b + 1]; }
    k1 = ti_s_wg_reduce(k1, lid, scratch);
    k2 = ti_s_wg_reduce(k2, lid, scratch);
    if (lid == 0) { row[2 + k] = k1; row[2 + nblk + k] = k2; }
}

__kernel void ts_ingest_row_totals(__global double *mom, const uint nseries, const uint nblk)
{
    const uint e = get_global_id(0);
    if (e >= nseries) return;
    __global double *row = mom + (size_t)e * (2 + 2 * nblk);
    double s1 = 0.0, s2 = 0.0;
    for (uint k = 0; k < nblk; ++k) { s1 += row[2 + k]; s2 += row[2 + nblk + k]; }
    row[0] = s1;
    row[1] = s2;
}
% endif

## ts_ingest_convert: block b of series s covers the output positions [t0, t0 + span) of
## the series' row, which starts at y + yoff[s] and has ylen[s] positions (>= len[s]).
## layout "float": y[t] = float(v(t) 2^e - c[s]) (c: the series' centre), and per block
##   the sums of the y written and of their squares, sums[2 b], sums[2 b + 1];
## "real": the same in real_t (double with f64), zeros at t >= len[s] (FFT rows), and the
##   sums;
## "blocked": y[t] = float((v(t) - v(t0')) 2^e), t0' = t rounded down to a multiple of
##   `block`, and tab[(yoff[s] + t) / block] = (hi, lo) pair of (v(t0') 2^e - c[s]) (c: the
##   scaled first value); yoff[s] is a multiple of block;
## "float2": y[t] = (hi, lo) pair of v(t) 2^e - c[s].
<%
    ytype = {"float": "float", "real": real, "blocked": "float", "float2": "float2"}[layout]
%>
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ts_ingest_convert(__global const ti_raw_t *x, __global const long *off,
                       __global const uint *len, __global const uint *boff, const uint nseries,
                       const uint b_lo, __global const int *exps,
                       __global const ti_shift_t *centre, __global ${ytype} *y,
                       __global const ulong *yoff, __global const uint *ylen,
                       const long ybase, __global float2 *tab, __global ${A}acc_t *sums)
{
% if layout in ("float", "real"):
    __local ${A}acc_t scratch[${wg}];
% endif
    const uint b = b_lo + get_group_id(0), lid = get_local_id(0);
    const uint s = ti_series(boff, nseries, b);
    const uint t0 = (b - boff[s]) * ${span}u, n = len[s], m = ylen[s];
    const int e = exps[s];
    const ti_shift_t c = centre[s];
    __global const ti_raw_t *xs = x + off[s];
    const long row = (long)yoff[s] - ybase;        // y (and tab) hold positions from ybase
% if layout in ("float", "real"):
    ${A}acc_t sum = ${A}ZERO, sum2 = ${A}ZERO;
% endif
    for (uint i = lid; i < ${span}u && t0 + i < m; i += ${wg}u) {
        const uint t = t0 + i;
% if layout == "float":
        const float v = ti_float(ti_sub(ti_value(xs[t], e), c));
        y[row + t] = v;
        sum = ${A}fold(sum, v);
%   if f64:
        sum2 += (double)v * v;          // exact: the squares of floats fit a double
%   else:
        sum2 = ${A}add(sum2, ti_square(v));
%   endif
% elif layout == "real":
        const ${real} v = t < n ? ti_real(ti_sub(ti_value(xs[t], e), c)) : 0;
        y[row + t] = v;
%   if f64:
        sum += v;
        sum2 += v * v;
%   else:
        sum = ${A}fold(sum, v);
        sum2 = ${A}add(sum2, ti_square(v));
%   endif
% elif layout == "blocked":
        const uint tb = t & ~${block - 1}u;
        const ${"double" if f64 else "float2"} vb = ti_value(xs[tb], e);
        y[row + t] = ti_float(ti_sub(ti_value(xs[t], e), vb));
        // vstore2: Oclgrind misreads a float2 built from fp64 conversions as uninitialised
        if (t == tb) vstore2(ti_pair(ti_sub(vb, c)), (row + t) >> ${lb}u, (__global float *)tab);
% else:
        vstore2(ti_pair(ti_sub(ti_value(xs[t], e), c)), row + t, (__global float *)y);
% endif
    }
% if layout in ("float", "real"):
    sum = ti_s_wg_reduce(sum, lid, scratch);
    sum2 = ti_s_wg_reduce(sum2, lid, scratch);
    if (lid == 0) { sums[2 * b] = sum; sums[2 * b + 1] = sum2; }
% endif
}
