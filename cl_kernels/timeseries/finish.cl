## From the pair sums to the estimates and their error bars, on devices with fp64
## (clphys.timeseries._finish has the same formulas in NumPy, used without fp64).
##
## Error bars: the delete-one-block jackknife over the blocks of pair start times that
## pairs.cl sums apart: block k < K of an entry holds t in [k bl, (k + 1) bl), the last
## block up to the end, with (K, bl) = kbl[e] the entry's own (the sums have nblk >= K
## blocks per entry); blocks without values are not counted.  For an estimate θ and θ_k the
## same from every pair but those of block k, err² = (K - 1)/K Σ_k (θ_k - mean θ_k)².
##
## params: kinds  (ts_hurst_finish) the pair functions of the sums, as in pairs.cl
##         form   (ts_acf_finish) "general" | "stationary" (ρ) or "msd" (S_2 from ρ's sums)
##         cross  "blocks": the cross sums are pairs.cl's blocks [e][k][l - 1] (lag0 = 1);
##                "rows": row e of a real array with stride `cstride` (the FFT's output)
##         ytype  "float" | "double": the converted series the prefix sums read
##         wg     work-group size of the scans (a power of two)
##         otype  "double" | "float": the results' type (float for float32 input)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
<%
    otype = context.get("otype", "double")
    kinds = list(context.get("kinds", ["absdiff"]))
    form = context.get("form", "general")
    cross = context.get("cross", "blocks")
    ytype = context.get("ytype", "float")
    wg = context.get("wg", 64)
    if form not in ("general", "stationary", "msd") or cross not in ("blocks", "rows") \
            or ytype not in ("float", "double"):
        raise ValueError("finish.cl: bad form, cross or ytype")
    if wg < 1 or wg & (wg - 1):
        raise ValueError("finish.cl: wg must be a power of two")
    if form == "msd" and cross != "rows":
        raise ValueError("finish.cl: form 'msd' reads the FFT's rows")
    if not dev.fp64:
        raise ValueError("finish.cl needs fp64")
    if otype not in ("float", "double"):
        raise ValueError("finish.cl: otype must be 'float' or 'double'")
%>
typedef ${otype} tf_out_t;

// The pair start times t < n - l in block k: its share of the pairs at lag l.
inline double tf_pairs(const uint k, const uint nblk, const uint bl, const uint n,
                       const uint l)
{
    const long start = (long)k * bl;
    const long end = k + 1 == nblk ? (long)n : min((long)(k + 1) * bl, (long)n);
    return (double)max(0L, min(end, (long)n - (long)l) - start);
}

// Welford's running mean and sum of squared deviations (mean, M2) of the θ_k, the m-th
// being v; tf_jack: the jackknife error from m of them.
inline double2 tf_add(const double2 a, const double v, const uint m)
{
    const double mean = a.x + (v - a.x) / m;
    return (double2)(mean, a.y + (v - a.x) * (v - mean));
}
inline double tf_jack(const double2 a, const uint m)
{
    return m < 2 ? NAN : sqrt((double)(m - 1) / m * a.y);
}

// S from the mean pair term of function p: m = 1 / (the per-lag scale) for "powdiff".
inline double tf_S(const uint p, const double mean, const double m, const double q)
{
% for p, kind in enumerate(kinds):
    if (p == ${p}u) {
%   if kind == "absdiff":
        return mean;
%   elif kind == "sqdiff":
        return sqrt(mean);
%   elif kind == "powdiff" or kind.startswith("ipow"):
        return m > 0.0 ? m * pow(mean, 1.0 / q) : 0.0;
%   else:
        return mean;
%   endif
    }
% endfor
    return NAN;
}

inline double tf_slope(const double s1, const double s0, const uint l)
{
    return s1 > 0.0 && s0 > 0.0 ? (log(s1) - log(s0)) / (log((double)l) - log((double)(l - 1)))
                                : NAN;
}

// One item per (lag l = i + 1, entry e, pair function p):
//   out[0][p][e][i] = S(l), out[1] its error, out[2] = H(l) (NaN at l = 1), out[3] its error.
// blocks[p][e][k][i]: the block sums; ns, exps: the entries' lengths and scale exponents;
// inv[e][i]: the per-lag scales of "powdiff" (their reciprocals are the maxima M(l)).
__kernel void ts_hurst_finish(__global const double *blocks, const uint nentries,
                              const uint nblk, const uint nlags, __global const uint2 *kbl,
                              __global const uint *ns, __global const int *exps,
                              __global const float *qs, __global const float *inv,
                              __global tf_out_t *out)
{
    const uint i = get_global_id(0), e = get_global_id(1), p = get_global_id(2);
    if (i >= nlags) return;
    const uint l = i + 1, n = ns[e], K = kbl[e].x, bl = kbl[e].y;
    const uint np = get_global_size(2);
    const double q = qs[p];
    __global const double *b1 = blocks + (((size_t)p * nentries + e) * nblk) * nlags + i;
    const double m1 = inv[(size_t)e * nlags + i] > 0.0f ? 1.0 / inv[(size_t)e * nlags + i] : 0.0;
    const double m0 = i ? (inv[(size_t)e * nlags + i - 1] > 0.0f
                           ? 1.0 / inv[(size_t)e * nlags + i - 1] : 0.0) : 0.0;
    double t1 = 0.0, t0 = 0.0;
    uint active = 0;
    for (uint k = 0; k < K; ++k) {
        t1 += b1[(size_t)k * nlags];
        if (i) t0 += b1[(size_t)k * nlags - 1];
        if ((long)k * bl < (long)n) ++active;
    }
    const double N1 = (double)(n - l), N0 = (double)(n - l + 1);
    const double S1 = tf_S(p, t1 / N1, m1, q);
    const double S0 = i ? tf_S(p, t0 / N0, m0, q) : 0.0;
    const double H = i ? tf_slope(S1, S0, l) : NAN;
    double2 js = (double2)(0.0), jh = (double2)(0.0);
    for (uint k = 0; k < active; ++k) {
        const double c1 = b1[(size_t)k * nlags], n1 = N1 - tf_pairs(k, K, bl, n, l);
        const double s1 = n1 > 0.0 ? tf_S(p, (t1 - c1) / n1, m1, q) : S1;
        js = tf_add(js, s1, k + 1);
        if (i) {
            const double c0 = b1[(size_t)k * nlags - 1];
            const double n0 = N0 - tf_pairs(k, K, bl, n, l - 1);
            const double s0 = n0 > 0.0 ? tf_S(p, (t0 - c0) / n0, m0, q) : S0;
            jh = tf_add(jh, tf_slope(s1, s0, l), k + 1);
        }
    }
    const size_t plane = (size_t)np * nentries * nlags;
    const size_t at = ((size_t)p * nentries + e) * nlags + i;
    const int x = -exps[e];
    out[at] = ldexp(S1, x);
    out[plane + at] = ldexp(tf_jack(js, active), x);
    out[2 * plane + at] = H;
    out[3 * plane + at] = i ? tf_jack(jh, active) : NAN;
}

## ---- the autocorrelation (and S_2) from the cross sums C(l) = Σ_{t < n - l} y(t) y(t + l)
## of the converted series y, and prefix sums of y, y² from both ends.

typedef double4 tf_sums_t;         // (Σ y, Σ y², Σ yr, Σ yr²), yr(t) = y(n - 1 - t)

// S_2(l) from C(l), the lag-0 sum C0 and the prefix sums h at l (the "msd" form), times 2^x:
// Σ_{t < N} (y(t + l) - y(t))² = Σ_{t < N} y² + Σ_{t >= l} y² - 2 C(l)
inline double tf_msd(const double C, const double C0, const tf_sums_t h, const double N,
                     const int x)
{
    return ldexp(sqrt(max(0.0, (2.0 * C0 - h.s1 - h.s3 - 2.0 * C) / N)), x);
}

// y(t) is at y[hoff + t], y(n - 1 - t) at y[toff - t] (the series' rows, or its two ends
// converted apart for a series worked on in windows).
inline tf_sums_t tf_terms(__global const ${ytype} *y, const ulong hoff, const ulong toff,
                          const uint n, const uint t)
{
    if (t >= n) return (tf_sums_t)(0.0);
    const double a = y[hoff + t], b = y[toff - t];
    return (tf_sums_t)(a, a * a, b, b * b);
}

// tot[e][j] = the sums of the terms t in [j wg, (j + 1) wg), t < nl (the lags' prefixes).
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ts_prefix_partial(__global const ${ytype} *y, __global const ulong *hoff,
                       __global const ulong *toff, __global const uint *ns, const uint nl,
                       __global tf_sums_t *tot)
{
    __local tf_sums_t scratch[${wg}];
    const uint lid = get_local_id(0), j = get_group_id(0), e = get_group_id(1);
    const uint t = j * ${wg}u + lid;
    scratch[lid] = t < nl ? tf_terms(y, hoff[e], toff[e], ns[e], t) : (tf_sums_t)(0.0);
    barrier(CLK_LOCAL_MEM_FENCE);
% for off in [wg >> k for k in range(1, wg.bit_length()) if wg >> k]:
    if (lid < ${off}u) scratch[lid] += scratch[lid + ${off}u];
    barrier(CLK_LOCAL_MEM_FENCE);
% endfor
    if (lid == 0) tot[(size_t)e * get_num_groups(0) + j] = scratch[0];
}

// tot[e][j] -> the exclusive prefix sum over j, one work group per entry.
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ts_prefix_scan(__global tf_sums_t *tot, const uint nchunks)
{
    __local tf_sums_t part[${wg}];
    const uint lid = get_local_id(0);
    __global tf_sums_t *row = tot + (size_t)get_group_id(0) * nchunks;
    const uint per = (nchunks + ${wg - 1}u) / ${wg}u, a = min(nchunks, lid * per),
               b = min(nchunks, a + per);
    tf_sums_t s = (tf_sums_t)(0.0);
    for (uint j = a; j < b; ++j) s += row[j];
    part[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        tf_sums_t run = (tf_sums_t)(0.0);
        for (uint i = 0; i < ${wg}u; ++i) { const tf_sums_t v = part[i]; part[i] = run; run += v; }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    s = part[lid];
    for (uint j = a; j < b; ++j) { const tf_sums_t v = row[j]; row[j] = s; s += v; }
}

// One item per (l, e): the estimate out[e][l] for l < nl and, with blocks, its jackknife
// error err[e][l]; for the "msd" form out = S_2(l) and err = H(l), the local slope.
// pre: ts_prefix_scan's output; mom: per series (one upload) s1 = Σ y, s2 = Σ y² (exact:
// the lag-0 sum, consistent with the prefix sums), then for the jackknife s1k[k], s2k[k]
// the same over block k (nblk of each, of which the entry's K count), (K, bl) = kbl[e].
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ts_acf_finish(__global const ${ytype} *y, __global const ulong *hoff,
                   __global const ulong *toff, __global const uint *ns,
                   const uint nl, __global const tf_sums_t *pre,
                   __global const double *cr, const ulong cstride, const uint nblk,
                   __global const uint2 *kbl, __global const double *mom,
                   __global const int *exps,
                   __global tf_out_t *out, __global tf_out_t *err)
{
    __local tf_sums_t scan[${wg}];
    const uint lid = get_local_id(0), j = get_group_id(0), e = get_group_id(1);
    const uint l = j * ${wg}u + lid, n = ns[e], K = kbl[e].x, bl = kbl[e].y;
    // Σ over t < l of the terms: the chunks before, then an exclusive scan inside this one
    scan[lid] = l < nl ? tf_terms(y, hoff[e], toff[e], n, l) : (tf_sums_t)(0.0);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint d = 1; d < ${wg}u; d <<= 1) {
        const tf_sums_t v = lid >= d ? scan[lid - d] : (tf_sums_t)(0.0);
        barrier(CLK_LOCAL_MEM_FENCE);
        scan[lid] += v;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (l >= nl) return;
    const tf_sums_t h = pre[(size_t)e * get_num_groups(0) + j] + scan[lid]
                        - tf_terms(y, hoff[e], toff[e], n, l);
    __global const double *s1k = mom + (size_t)e * (2 + 2 * nblk) + 2, *s2k = s1k + nblk;
    const double S1 = s1k[-2], C0 = s1k[-1], N = (double)(n - l);
% if cross == "blocks":
    __global const double *c = cr + (size_t)e * nblk * (nl - 1) + l - 1;   // lags 1 ..
    double C = 0.0;
    if (l)
        for (uint k = 0; k < K; ++k) C += c[(size_t)k * (nl - 1)];
    else
        C = C0;
% else:
    const double C = l ? cr[e * cstride + l] : C0;
% endif
    double r;
% if form == "msd":
    r = l ? tf_msd(C, C0, h, N, -exps[e]) : 0.0;
    if (l >= 2) {                    // S_2(l - 1): the prefix sums one term shorter
        const double Cp = cr[e * cstride + l - 1];
        const double Sp = tf_msd(Cp, C0, h - tf_terms(y, hoff[e], toff[e], n, l - 1), N + 1.0,
                                 -exps[e]);
        err[(size_t)e * nl + l] = tf_slope(r, Sp, l);
    } else {
        err[(size_t)e * nl + l] = NAN;
    }
% else:
    const double A = S1 - h.s2, B = S1 - h.s0;     // Σ y(t) over t < N, over t >= l
%   if form == "stationary":
    const double d = S1 / n;
    r = (C - d * (A + B) + N * d * d) / (C0 - n * d * d);
%   else:
    const double ma = A / N, mb = B / N;
    const double va = (C0 - h.s3) / N - ma * ma, vb = (C0 - h.s1) / N - mb * mb;
    // one pair has no variance (what is left of va, vb is rounding)
    r = N > 1.0 && va > 0.0 && vb > 0.0 ? (C / N - ma * mb) / sqrt(va * vb) : NAN;
%   endif
    if (l == 0) r = 1.0;
% endif
    out[(size_t)e * nl + l] = r;
% if cross == "blocks" and form != "msd":
    // jackknife of the ratio of the lag-l and lag-0 sums centred on the mean dm: block k's
    // sums of y over the pairs' two windows taken as its share of the block's Σ y
    const double dm = S1 / n;
    const double Cc = C - dm * (A + B) + N * dm * dm, C0c = C0 - n * dm * dm;
    const double R = (Cc / N) / (C0c / n);
    double2 js = (double2)(0.0);
    uint active = 0;
    for (uint k = 0; k < K && (long)k * bl < (long)n && l; ++k) {
        ++active;
        const double nk = tf_pairs(k, K, bl, n, l), bk = tf_pairs(k, K, bl, n, 0);
        const double sk = s1k[k];
        const double ck = c[(size_t)k * (nl - 1)] - 2.0 * dm * sk * (bk > 0.0 ? nk / bk : 0.0)
                          + nk * dm * dm;
        const double c0k = s2k[k] - 2.0 * dm * sk + bk * dm * dm;
        const double v = N > nk && n > bk ? ((Cc - ck) / (N - nk)) / ((C0c - c0k) / (n - bk)) : R;
        js = tf_add(js, v, active);
    }
    err[(size_t)e * nl + l] = l ? tf_jack(js, active) : 0.0;
% endif
}


// Errors of the FFT path from a batch of K blocks of each series analysed alone: th holds
// the blocks' estimates, rows (e, k) of nlb lags; for l < min(nlb, bs[e])
//     err[e][l] = sqrt(var_k th[e][k][l] (bs[e] - l) / (ns[e] - l))
// (the sample variance over the blocks, scaled from a block's pairs to the series'), NaN
// beyond.  One item per (l < nl, e).
__kernel void ts_block_spread(__global const double *th, const uint K, const uint nlb,
                              __global const uint *bs, __global const uint *ns, const uint nl,
                              __global tf_out_t *err)
{
    const uint l = get_global_id(0), e = get_global_id(1);
    if (l >= nl) return;
    const uint b = bs[e];
    double r = NAN;
    if (l < nlb && l < b && K > 1u) {
        double2 a = (double2)(0.0);
        for (uint k = 0; k < K; ++k) a = tf_add(a, th[((size_t)e * K + k) * nlb + l], k + 1);
        r = sqrt(a.y / (K - 1) * (double)(b - l) / (double)(ns[e] - l));
    }
    err[(size_t)e * nl + l] = r;
}
