## Detrended fluctuation analysis (clphys.timeseries.dfa, mfdfa) for a batch of series.
##
## The profile Y(t) is kept as (hi, lo) float pairs (~2^-48 relative) in rows at yoff[e],
## ylen = len[e]; rows start at multiples of `block`.  Block g (global index: boff[e] +
## t / block) of a row holds `block` values; per full block the channels below, in the
## block's own frame, are computed once (dfa_profile).  A segment's least-squares fit of
## order m needs, in its frame z = (2t - O) 2^-p (O = 2a + s - 1 for the segment [a, a+s),
## so z runs over (2j - (s - 1)) 2^-p, |z| < 1, exactly representable) and relative to a
## reference level r, the channels
##     M_i = sum_t z^i (Y(t) - r)   (i = 0 .. m),   Q = sum_t (Y(t) - r)^2;
## with the orthonormal (Gram) polynomials q_k(z) = sum_i C[k][i] z^i of the s points,
## F^2 = (Q - sum_k (sum_i C[k][i] M_i)^2) / s: the mean squared residual.  Segments of up
## to `block` values are summed directly by one work item; longer ones from the direct
## values at their ends and the blocks in between, each block's channels moved to the
## segment's frame and level exactly (z = alpha + beta z_b: a binomial expansion, O(m^2)
## per block).  Sliding windows (every start) longer than `block` go by runs of `run`
## starts: the part common to the run's windows once, the rest from prefix sums of the
## run's first and last `run` values.  Every sum is in the accumulator type: double, or
## compensated (hi, lo) float pairs without fp64.
##
## params: part   "prep" (the profile and the blocks' channels), "fluct" (ln F^2 of the
##                segments) or "reduce" (the sums per scale, q and jackknife group): three
##                programs, so that each is built for the parameters it depends on only
##         order  m, 0 .. 4 (the detrending polynomial; prep, fluct)
##         acc    "double" | "compensated"
##         block  values per block (a power of two >= 16; prep, fluct)
##         wg     work group of the prep kernels (a power of two dividing block)
##         gwg    work group of the per-segment (fluct) and reduction kernels (a power of two)
##         run    starts per run of sliding windows (a power of two, 2 .. block), the run
##                kernel's work group (fluct)
##         mode   "forward" | "both" (forward, then backward segments aligned with the end)
##                | "sliding" (every start) (fluct, reduce)
##         integrate  True: Y = sum (x - mean x) is built here from x (pairs); False: Y
##                    is x itself (converted by ingest.cl into the Y rows) (prep)
##         groups the jackknife groups K of the reductions (reduce)
##         qb     moments q reduced per pass over the segments (reduce)
<%namespace name="red" file="/common/reduce.cl"/>
<%
    import math
    if part not in ("prep", "fluct", "reduce"):
        raise ValueError("dfa.cl: part must be 'prep', 'fluct' or 'reduce', got %r" % (part,))
    if acc not in ("double", "compensated"):
        raise ValueError("dfa.cl: acc must be 'double' or 'compensated', got %r" % (acc,))
    if acc == "double" and not dev.fp64:
        raise ValueError("dfa.cl: acc='double' on a device without fp64")
    order = context.get("order", 0)         # (the reduce part does not use it)
    if order not in range(5):
        raise ValueError("dfa.cl: order must be 0 .. 4, got %r" % (order,))
    block = context.get("block", 256)
    wg = context.get("wg", 1)
    gwg = context.get("gwg", 1)
    run = context.get("run", 2)
    mode = context.get("mode", "forward")
    integrate = context.get("integrate", False)
    groups = context.get("groups", 1)
    qb = context.get("qb", 1)
    for name, v in (("block", block), ("wg", wg), ("gwg", gwg), ("run", run)):
        if v < 1 or v & (v - 1):
            raise ValueError("dfa.cl: %s must be a power of two, got %r" % (name, v))
    if block < 16 or block % wg or run > block or run < 2:
        raise ValueError("dfa.cl: need block >= 16, wg dividing block, 2 <= run <= block")
    if mode not in ("forward", "both", "sliding"):
        raise ValueError("dfa.cl: unknown mode %r" % (mode,))
    if groups < 1:
        raise ValueError("dfa.cl: groups must be >= 1")
    f64 = acc == "double"
    # the zero-variance floor relative to the segment's mean square (see dfa_finish):
    # well above the one-pass residual's rounding in the accumulator (2^-53 or ~2^-46)
    zero_rel = -40 if f64 else -30
    M1 = order + 1                  # polynomial channels M_0 .. M_m
    CH = order + 2                  # ... and Q
    lb = block.bit_length() - 1
    per = block // wg               # values per item in the block kernels
    # the block frame's power sums Z_i = sum_j ((2j - (block - 1)) / block)^i, exact
    Z = [sum((2 * j - (block - 1)) ** i for j in range(block)) / float(block) ** i
         for i in range(M1)]

    import struct

    def f32(v):
        return struct.unpack("f", struct.pack("f", v))[0]

    def const(v):
        """A constant of the accumulator type, as a literal (a (hi, lo) pair without fp64)."""
        if f64:
            return repr(float(v))
        hi = f32(v)
        return "(float2)(%rf, %rf)" % (hi, f32(v - hi))
%>
% if f64:
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif

// ---- the accumulator: double, or a (hi, lo) float pair (TwoSum / fma products)
% if f64:
typedef double acc_t;
typedef double ell_t;               // ln F^2 and the q-moment terms
typedef double const_t;             // the host's per-scale constants
#define A_ZERO 0.0
inline acc_t A_f(const float x) { return (double)x; }
inline acc_t A_p(const float2 p) { return (double)p.x + (double)p.y; }
inline acc_t A_c(const const_t c) { return c; }
inline acc_t A_l(const long v) { return (double)v; }
inline acc_t A_add(const acc_t a, const acc_t b) { return a + b; }
inline acc_t A_sub(const acc_t a, const acc_t b) { return a - b; }
inline acc_t A_mul(const acc_t a, const acc_t b) { return a * b; }
inline acc_t A_ldexp(const acc_t a, const int e) { return ldexp(a, e); }
inline float2 A_pair(const acc_t a)
{
    const float hi = (float)a;
    return (float2)(hi, (float)(a - (double)hi));
}
inline ell_t A_ell(const acc_t a) { return a; }
inline ell_t A_log(const acc_t a) { return log(a); }
inline int A_le(const acc_t a, const acc_t b) { return a <= b; }
% else:
typedef float2 acc_t;
typedef float ell_t;
typedef float2 const_t;
#define A_ZERO ((float2)(0.0f, 0.0f))
inline acc_t A_f(const float x) { return (float2)(x, 0.0f); }
inline acc_t A_p(const float2 p) { return p; }
inline acc_t A_c(const const_t c) { return c; }
// a long as hi + lo exactly (|v| < 2^48)
inline acc_t A_l(const long v)
{
    const float hi = convert_float_rte(v);
    return (float2)(hi, convert_float_rte(v - convert_long(hi)));
}
inline acc_t A_add(const acc_t a, const acc_t b)
{
    const float s = a.x + b.x;
    const float bb = s - a.x;
    const float err = (a.x - (s - bb)) + (b.x - bb);
    const float c = a.y + b.y + err;
    const float hi = s + c;
    return (float2)(hi, c - (hi - s));
}
inline acc_t A_sub(const acc_t a, const acc_t b) { return A_add(a, -b); }
inline acc_t A_mul(const acc_t a, const acc_t b)
{
    const float p = a.x * b.x;
    const float e = fma(a.x, b.x, -p) + (a.x * b.y + a.y * b.x);
    const float hi = p + e;
    return (float2)(hi, e - (hi - p));
}
inline acc_t A_ldexp(const acc_t a, const int e) { return (float2)(ldexp(a.x, e), ldexp(a.y, e)); }
inline float2 A_pair(const acc_t a) { return a; }
// hi + lo rounded once; as a dot product, as ingest.cl's ti_float (a.x + a.y crashed
// Oclgrind's uninitialised-value checker)
inline ell_t A_ell(const acc_t a) { return dot(a, (float2)(1.0f, 1.0f)); }
inline ell_t A_log(const acc_t a) { return log(a.x) + a.y / a.x; }
inline int A_le(const acc_t a, const acc_t b) { return a.x < b.x || (a.x == b.x && a.y <= b.y); }
% endif

<%def name="reduce_channels(name, size, CH)">
// Sums the channels c[0 .. CH) over the work group (`size` items) in one tree: every item
// gets the totals (scratch: CH x size accumulators; one barrier per level for all).
inline void ${name}(acc_t *c, const uint lid, __local acc_t *scratch)
{
% for i in range(CH):
    scratch[${i * size}u + lid] = c[${i}];
% endfor
    barrier(CLK_LOCAL_MEM_FENCE);
% for off in [size >> k for k in range(1, size.bit_length()) if size >> k]:
    if (lid < ${off}u) {
%   for i in range(CH):
        scratch[${i * size}u + lid] = A_add(scratch[${i * size}u + lid], scratch[${i * size + off}u + lid]);
%   endfor
    }
    barrier(CLK_LOCAL_MEM_FENCE);
% endfor
% for i in range(CH):
    c[${i}] = scratch[${i * size}u];
% endfor
    barrier(CLK_LOCAL_MEM_FENCE);
}
</%def>
#define DFA_CH ${CH}
#define DFA_M1 ${M1}
#define DFA_BLOCK ${block}u
#define DFA_NC ${M1 * M1 + 1}          // constants per scale: C, then 1/s

% if part == "prep":
${red.wg_reduce("dfa_b_", "acc_t", wg, "return A_add(a, b);")}
${reduce_channels("dfa_reduce_wg", wg, CH)}

// The series of global block g: the e with boff[e] <= g < boff[e + 1].
inline uint dfa_series(__global const uint *boff, const uint nseries, const uint g)
{
    uint lo = 0, hi = nseries;
    while (hi - lo > 1) {
        const uint mid = (lo + hi) / 2;
        if (boff[mid] <= g) lo = mid; else hi = mid;
    }
    return lo;
}

% endif
% if part != "reduce":

// Adds z^i y (i = 0 .. m) and y^2 to the channels c.
inline void dfa_put(acc_t *c, const acc_t z, const acc_t y)
{
    acc_t zy = y;
    c[0] = A_add(c[0], y);
% for i in range(1, M1):
    zy = A_mul(zy, z);
    c[${i}] = A_add(c[${i}], zy);
% endfor
    c[${CH - 1}] = A_add(c[${CH - 1}], A_mul(y, y));
}
% endif
% if part == "fluct":
${reduce_channels("dfa_reduce_g", gwg, CH)}
${reduce_channels("dfa_reduce_r", run, CH)}

// Adds block b's channels (mom, block frame, level R_b = Y at the block's first value)
// moved to the frame z = (2t - O) 2^-p and the level r: with t = t_b + j, z = alpha +
// beta z_b (alpha = (2 t_b + block - 1 - O) 2^-p, beta = block 2^-p) and Y - r = w + lam
// (lam = R_b - r), sum z^k (w + lam) = sum_i C(k, i) alpha^(k-i) beta^i (mu_i + lam Z_i).
inline void dfa_put_block(acc_t *c, __global const acc_t *mom, const ulong g, const long tb,
                          const long O, const int p, const acc_t lam)
{
    __global const acc_t *mg = mom + g * DFA_CH;
    acc_t mu[DFA_M1];
% for i in range(M1):
    mu[${i}] = A_add(mg[${i}], A_mul(lam, A_c(${const(Z[i])})));
% endfor
% if M1 > 1:
    const acc_t al = A_ldexp(A_l(2 * tb + (long)DFA_BLOCK - 1 - O), -p);
    const acc_t be = A_ldexp(A_f(1.0f), ${lb} - p);
    acc_t ap[DFA_M1], bp[DFA_M1];
    ap[0] = bp[0] = A_f(1.0f);
%   for i in range(1, M1):
    ap[${i}] = A_mul(ap[${i - 1}], al);
    bp[${i}] = A_mul(bp[${i - 1}], be);
%   endfor
% endif
% for k in range(M1):
    {
        acc_t t = A_ZERO;
%   for i in range(k + 1):
<%
    coef = math.comb(k, i)
    term = "mu[%d]" % i
    if i > 0:
        term = "A_mul(bp[%d], %s)" % (i, term)
    if k - i > 0:
        term = "A_mul(ap[%d], %s)" % (k - i, term)
    if coef != 1:
        term = "A_mul(A_f(%d.0f), %s)" % (coef, term)
%>
        t = A_add(t, ${term});
%   endfor
        c[${k}] = A_add(c[${k}], t);
    }
% endfor
    // Q: sum (w + lam)^2 = Q_b + 2 lam mu_0 + block lam^2
    c[${CH - 1}] = A_add(c[${CH - 1}], A_add(mg[${CH - 1}], A_mul(lam, A_add(
        A_mul(A_f(2.0f), mg[0]), A_mul(lam, A_f((float)DFA_BLOCK))))));
}

// The channels of the values [lo, hi) of a row (Yr: the row, mom + gb: its blocks, nfull
// full blocks) in the frame (O, p) relative to r, shared over the items of a work group
// (item lid of n): the full blocks inside [lo, hi) from their channels, the rest directly.
inline void dfa_range(acc_t *c, __global const float2 *Yr, __global const acc_t *mom,
                      const ulong gb, const uint nfull, const uint lo, const uint hi,
                      const long O, const int p, const acc_t r, const uint lid, const uint n)
{
    uint b0 = (lo + DFA_BLOCK - 1) >> ${lb}u, b1 = min(hi >> ${lb}u, nfull);
    uint d0 = hi, d1 = hi;                  // the direct values: [lo, d0) and [d1, hi)
    if (b1 > b0) { d0 = b0 << ${lb}u; d1 = b1 << ${lb}u; } else { b1 = b0; }
    for (uint t = lo + lid; t < d0; t += n)
        dfa_put(c, A_ldexp(A_l(2 * (long)t - O), -p), A_sub(A_p(Yr[t]), r));
    for (uint t = d1 + lid; t < hi; t += n)
        dfa_put(c, A_ldexp(A_l(2 * (long)t - O), -p), A_sub(A_p(Yr[t]), r));
    for (uint b = b0 + lid; b < b1; b += n) {
        const uint tb = b << ${lb}u;
        dfa_put_block(c, mom, gb + b, (long)tb, O, p, A_sub(A_p(Yr[tb]), r));
    }
}

// ln F^2 of a segment of s values from its channels in its own frame (co: the scale's
// constants C[k][i], k, i < M1, then 1/s) and level r; -INFINITY (zero variance) when F^2
// is at most 2^${zero_rel} of the mean of (Y - r)^2 (what the one-pass residual Q - sum G^2
// resolves in the accumulator) plus 2^-80 of the mean of Y^2 (what the stored profile
// resolves).
inline ell_t dfa_finish(const acc_t *c, __global const const_t *co, const acc_t r)
{
    acc_t rss = c[${CH - 1}];
% for k in range(M1):
    {
        acc_t g = A_ZERO;
%   for i in range(k + 1):
        g = A_add(g, A_mul(A_c(co[${k * M1 + i}]), c[${i}]));
%   endfor
        rss = A_sub(rss, A_mul(g, g));
    }
% endfor
    const acc_t inv = A_c(co[${M1 * M1}]);
    const acc_t f2 = A_mul(rss, inv);
    // mean of (Y - r)^2 = Q / s; mean of Y^2 = r^2 + 2 r M_0 / s + Q / s
    const acc_t q2 = A_mul(inv, c[${CH - 1}]);
    const acc_t y2 = A_add(A_add(A_mul(r, r), q2), A_mul(inv, A_mul(A_f(2.0f), A_mul(r, c[0]))));
    if (A_le(f2, A_add(A_ldexp(q2, ${zero_rel}), A_ldexp(y2, -80))))
        return -INFINITY;
    return A_log(f2);
}
% endif
% if part == "prep":

%   if integrate:
// Per block g: the sum of its values x (pairs) into tot[g].
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void dfa_block_totals(__global const float2 *x, __global const uint *len,
                      __global const ulong *yoff, __global const uint *boff,
                      const uint nseries, __global acc_t *tot)
{
    __local acc_t scratch[${wg}];
    const uint g = get_group_id(0), lid = get_local_id(0);
    const uint e = dfa_series(boff, nseries, g);
    const uint t0 = (g - boff[e]) << ${lb}u, n = len[e];
    acc_t s = A_ZERO;
    for (uint i = lid; i < DFA_BLOCK && t0 + i < n; i += ${wg}u)
        s = A_add(s, A_p(x[yoff[e] + t0 + i]));
    s = dfa_b_wg_reduce(s, lid, scratch);
    if (lid == 0) tot[g] = s;
}

// Per series e (one work group): delta[e] = its mean (invn[e] = 1 / len[e]) and lev[g] =
// the profile before block g: the exclusive prefix sum of tot[g] - (values in g) delta.
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void dfa_levels(__global const acc_t *tot, __global const uint *len, __global const uint *boff,
                __global const const_t *invn, __global acc_t *lev, __global acc_t *delta)
{
    __local acc_t scratch[${wg}];
    const uint e = get_group_id(0), lid = get_local_id(0);
    const uint g0 = boff[e], g1 = boff[e + 1], n = len[e];
    acc_t s = A_ZERO;
    for (uint g = g0 + lid; g < g1; g += ${wg}u) s = A_add(s, tot[g]);
    const acc_t d = A_mul(dfa_b_wg_reduce(s, lid, scratch), A_c(invn[e]));
    acc_t carry = A_ZERO;
    for (uint c0 = g0; c0 < g1; c0 += ${wg}u) {
        const uint g = c0 + lid;
        acc_t v = A_ZERO;
        if (g < g1) {
            const uint nb = min(DFA_BLOCK, n - ((g - g0) << ${lb}u));
            v = A_sub(tot[g], A_mul(A_f((float)nb), d));
        }
        // inclusive scan of v over the items (Hillis-Steele), then exclusive
        scratch[lid] = v;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint off = 1; off < ${wg}u; off <<= 1) {
            const acc_t add = lid >= off ? scratch[lid - off] : A_ZERO;
            barrier(CLK_LOCAL_MEM_FENCE);
            scratch[lid] = A_add(scratch[lid], add);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (g < g1) lev[g] = A_add(carry, A_sub(scratch[lid], v));
        carry = A_add(carry, scratch[${wg - 1}]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) delta[e] = d;
}
%   endif

// Per block g: (integrate) the profile Y(t) = lev[g] + sum_{t_b <= u <= t} (x(u) - delta)
// written as pairs; then, from the stored pairs, the block's channels in its frame z_b =
// (2j - (block - 1)) / block relative to R_b = Y(t_b): mom[g][0 .. m] = sum z_b^i (Y - R_b),
// mom[g][m + 1] = sum (Y - R_b)^2 (a partial last block too; only full ones are used).
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void dfa_profile(__global const float2 *x, __global float2 *Y, __global const uint *len,
                 __global const ulong *yoff, __global const uint *boff, const uint nseries,
                 __global const acc_t *lev, __global const acc_t *delta, __global acc_t *mom)
{
    __local acc_t scratch[${CH * wg}];
    const uint g = get_group_id(0), lid = get_local_id(0);
    const uint e = dfa_series(boff, nseries, g);
    const uint t0 = (g - boff[e]) << ${lb}u, n = len[e];
    const ulong row = yoff[e];
    const uint i0 = t0 + lid * ${per}u;          // this item's values [i0, i0 + per)
%   if integrate:
    const acc_t d = delta[e];
    acc_t run = A_ZERO;
    for (uint i = i0; i < i0 + ${per}u && i < n; ++i) run = A_add(run, A_sub(A_p(x[row + i]), d));
    // exclusive scan of the items' totals
    scratch[lid] = run;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint off = 1; off < ${wg}u; off <<= 1) {
        const acc_t add = lid >= off ? scratch[lid - off] : A_ZERO;
        barrier(CLK_LOCAL_MEM_FENCE);
        scratch[lid] = A_add(scratch[lid], add);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    acc_t y = A_add(lev[g], A_sub(scratch[lid], run));
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint i = i0; i < i0 + ${per}u && i < n; ++i) {
        y = A_add(y, A_sub(A_p(x[row + i]), d));
        vstore2(A_pair(y), row + i, (__global float *)Y);
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
%   endif
    const acc_t R = A_p(Y[row + t0]);
    acc_t c[DFA_CH];
% for i in range(CH):
    c[${i}] = A_ZERO;
% endfor
    for (uint i = i0; i < i0 + ${per}u && i < n; ++i)
        dfa_put(c, A_ldexp(A_l(2 * (long)(i - t0) - (long)(DFA_BLOCK - 1)), -${lb}),
                A_sub(A_p(Y[row + i]), R));
    dfa_reduce_wg(c, lid, scratch);
    if (lid == 0) {
%   for i in range(CH):
        mom[(ulong)g * DFA_CH + ${i}] = c[${i}];
%   endfor
    }
}
% endif
% if part == "fluct":

// The segments (or windows) of scale s of series e: how many, and where segment v starts.
inline uint dfa_count(const uint n, const uint s)
{
% if mode == "sliding":
    return n >= s ? n - s + 1 : 0;
% elif mode == "both":
    return 2 * (n / s);
% else:
    return n / s;
% endif
}

inline uint dfa_start(const uint n, const uint s, const uint v)
{
% if mode == "both":
    // (n - ns s, not n % s: with both a division and a remainder of the same operands
    // LLVM inserts a `freeze` instruction, which Oclgrind does not execute)
    const uint ns = n / s;
    return v < ns ? v * s : n - ns * s + (v - ns) * s;
% elif mode == "sliding":
    return v;
% else:
    return v * s;
% endif
}

// ln F^2 of segment v of scale s (at most `block` values) of series e = group id 1, by one
// work item each: out[obase + e * stride + v].  co + jc DFA_NC: the scale's constants
// (dfa_finish); 2^p >= s.  (The same arguments for the kernels below.)
__kernel void dfa_fluct_items(__global const float2 *Y, __global const uint *len,
                              __global const ulong *yoff, __global const const_t *co,
                              const uint jc, const uint s, const int p, __global ell_t *out,
                              const ulong obase, const uint stride)
{
    const uint v = get_global_id(0), e = get_global_id(1), n = len[e];
    if (v >= dfa_count(n, s)) return;
    const uint a = dfa_start(n, s, v);
    __global const float2 *Yr = Y + yoff[e] + a;
    const acc_t r = A_p(Yr[0]);
    acc_t c[DFA_CH];
% for i in range(CH):
    c[${i}] = A_ZERO;
% endfor
    for (uint j = 0; j < s; ++j)
        dfa_put(c, A_ldexp(A_f((float)(2 * (int)j - (int)(s - 1))), -p), A_sub(A_p(Yr[j]), r));
    out[obase + (ulong)e * stride + v] = dfa_finish(c, co + (ulong)jc * DFA_NC, r);
}

%   if mode != "sliding":
// ln F^2 of segment v = group id 0 of scale s (more than `block` values) of series e =
// group id 1, one work group each.
__kernel __attribute__((reqd_work_group_size(${gwg}, 1, 1)))
void dfa_fluct_groups(__global const float2 *Y, __global const acc_t *mom,
                      __global const uint *len, __global const ulong *yoff,
                      __global const uint *boff, __global const const_t *co, const uint jc,
                      const uint s, const int p, __global ell_t *out, const ulong obase,
                      const uint stride)
{
    __local acc_t scratch[${CH * gwg}];
    const uint v = get_group_id(0), e = get_group_id(1), lid = get_local_id(0), n = len[e];
    // (no early return before the barriers of the reduction, even for the whole group:
    // PoCL then computed wrong sums)
    const int active = v < dfa_count(n, s);
    const uint a = active ? dfa_start(n, s, v) : 0;
    __global const float2 *Yr = Y + yoff[e];
    const acc_t r = A_p(Yr[a]);
    acc_t c[DFA_CH];
%   for i in range(CH):
    c[${i}] = A_ZERO;
%   endfor
    dfa_range(c, Yr, mom, boff[e], n >> ${lb}u, a, active ? a + s : a, 2 * (long)a + s - 1, p,
              r, lid, ${gwg}u);
    dfa_reduce_g(c, lid, scratch);
    if (active && lid == 0) out[obase + (ulong)e * stride + v] = dfa_finish(c, co + (ulong)jc * DFA_NC, r);
}
%   else:
// ln F^2 of the sliding windows of scale s (more than `block` values) of series e = group
// id 1, starting at a0 + j, a0 = `run` x group id 0, item j each.  In the run's frame
// (O = 2 a0 + run + s - 2, 2^pr >= s + run) and level r = Y(a0): window j is the suffix
// [a0 + j, a0 + run) of the head, the middle [a0 + run, a0 + s) (the same for all), and the
// prefix [a0 + s, a0 + s + j) of the tail; its channels then move to its own frame
// (z = beta z_run + alpha, beta = 2^(pr - p), alpha = (run - 1 - 2j) 2^-p).
__kernel __attribute__((reqd_work_group_size(${run}, 1, 1)))
void dfa_fluct_runs(__global const float2 *Y, __global const acc_t *mom,
                    __global const uint *len, __global const ulong *yoff,
                    __global const uint *boff, __global const const_t *co, const uint jc,
                    const uint s, const int p, const int pr, __global ell_t *out,
                    const ulong obase, const uint stride)
{
    __local acc_t head[DFA_CH][${run}], tail[DFA_CH][${run}], scratch[${CH * run}];
    const uint j = get_local_id(0), e = get_group_id(1), n = len[e];
    const uint a0 = get_group_id(0) * ${run}u;
    const int active = a0 + s <= n;                  // (the whole group; no early return)
    __global const float2 *Yr = Y + yoff[e];
    const long O = 2 * (long)a0 + ${run} + s - 2;
    const acc_t r = active ? A_p(Yr[a0]) : A_ZERO;
    acc_t c[DFA_CH];
%   for i in range(CH):
    c[${i}] = A_ZERO;
%   endfor
    // the middle, shared by the run's windows
    if (active)
        dfa_range(c, Yr, mom, boff[e], n >> ${lb}u, a0 + ${run}u, a0 + s, O, pr, r, j, ${run}u);
    dfa_reduce_r(c, j, scratch);
    // the head (stored reversed: its suffix sums become prefix sums) and the tail
    acc_t h[DFA_CH], t[DFA_CH];
%   for i in range(CH):
    h[${i}] = t[${i}] = A_ZERO;
%   endfor
    {
        const uint th = a0 + j, tt = a0 + s + j;
        if (active && th < n) dfa_put(h, A_ldexp(A_l(2 * (long)th - O), -pr), A_sub(A_p(Yr[th]), r));
        if (active && tt < n) dfa_put(t, A_ldexp(A_l(2 * (long)tt - O), -pr), A_sub(A_p(Yr[tt]), r));
    }
%   for i in range(CH):
    head[${i}][${run - 1} - j] = h[${i}];
    tail[${i}][j] = t[${i}];
%   endfor
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint off = 1; off < ${run}u; off <<= 1) {
        acc_t hv[DFA_CH], tv[DFA_CH];
%   for i in range(CH):
        hv[${i}] = j >= off ? head[${i}][j - off] : A_ZERO;
        tv[${i}] = j >= off ? tail[${i}][j - off] : A_ZERO;
%   endfor
        barrier(CLK_LOCAL_MEM_FENCE);
%   for i in range(CH):
        head[${i}][j] = A_add(head[${i}][j], hv[${i}]);
        tail[${i}][j] = A_add(tail[${i}][j], tv[${i}]);
%   endfor
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (a0 + j + s > n) return;                      // (no barrier follows)
    // window j, run frame: head suffix from j, the middle, the tail's first j values
    acc_t m[DFA_CH];
%   for i in range(CH):
    m[${i}] = A_add(A_add(head[${i}][${run - 1} - j], c[${i}]),
                    j > 0 ? tail[${i}][j - 1] : A_ZERO);
%   endfor
%   if M1 > 1:
    // to the window's frame
    {
        const acc_t al = A_ldexp(A_l((long)${run - 1} - 2 * (long)j), -p);
        const acc_t be = A_ldexp(A_f(1.0f), pr - p);
        acc_t ap[DFA_M1], bp[DFA_M1], w[DFA_M1];
        ap[0] = bp[0] = A_f(1.0f);
%     for i in range(1, M1):
        ap[${i}] = A_mul(ap[${i - 1}], al);
        bp[${i}] = A_mul(bp[${i - 1}], be);
%     endfor
%     for k in range(M1):
        w[${k}] = A_ZERO;
%       for i in range(k + 1):
<%
    coef = math.comb(k, i)
    term = "m[%d]" % i
    if i > 0:
        term = "A_mul(bp[%d], %s)" % (i, term)
    if k - i > 0:
        term = "A_mul(ap[%d], %s)" % (k - i, term)
    if coef != 1:
        term = "A_mul(A_f(%d.0f), %s)" % (coef, term)
%>
        w[${k}] = A_add(w[${k}], ${term});
%       endfor
%     endfor
%     for k in range(M1):
        m[${k}] = w[${k}];
%     endfor
    }
%   endif
    out[obase + (ulong)e * stride + a0 + j] = dfa_finish(m, co + (ulong)jc * DFA_NC, r);
}
%   endif
% endif
% if part == "reduce":
// The segments of jackknife group k of scale s of series e: [lo, hi) of each direction
// (.z of them, the second at offset .w).
inline uint4 dfa_group(const uint n, const uint s, const uint k)
{
%   if mode == "sliding":
    const uint d = n >= s ? n - s + 1 : 0;
%   else:
    const uint d = n / s;
%   endif
    const uint lo = (uint)(((ulong)k * d) / ${groups}u);
    const uint hi = (uint)(((ulong)(k + 1) * d) / ${groups}u);
    return (uint4)(lo, hi, ${2 if mode == "both" else 1}u, d);
}

## The work of a work group (a, e, b): the groups k in [a kper, (a + 1) kper) and the scales
## [j0 + b per, min(j0 + (b + 1) per, jend)) of series e (GPUs: one group and one scale each;
## CPUs: all of them, so that a call is one work group per series, not K x E x scales).
<%def name="scales_of_group()">
    const uint e = get_group_id(1), lid = get_local_id(0), n = len[e];
    const uint jlo = j0 + get_group_id(2) * per, jhi = min(jlo + per, jend);
    const uint klo = get_group_id(0) * kper;
    for (uint k = klo; k < klo + kper; ++k)
</%def>

// Per (jackknife group k, series e, scale j): over the group's segments, stats[e][j][k][.. 5]
// = (segments, zero-variance segments, sum ln F^2, max ln F^2, min ln F^2), the last three
// over the others; ell[off[j] + e stride[j] + v] holds ln F^2 (-inf: zero variance).
__kernel __attribute__((reqd_work_group_size(${gwg}, 1, 1)))
void dfa_log_stats(__global const ell_t *ell, __global const uint *len,
                   __global const uint *scales, __global const ulong *off,
                   __global const uint *stride, const uint nscales, const uint j0,
                   const uint jend, const uint per, const uint kper, __global acc_t *stats)
{
    __local acc_t sa[${gwg}];
    __local uint su[${2 * gwg}];
    __local ell_t se[${2 * gwg}];
${scales_of_group()}
    for (uint j = jlo; j < jhi; ++j) {
        const uint4 gr = dfa_group(n, scales[j], k);
        __global const ell_t *row = ell + off[j] + (ulong)e * stride[j];
        uint all = 0, zero = 0;
        acc_t sum = A_ZERO;
        ell_t hi = -INFINITY, lo = INFINITY;
        for (uint dir = 0; dir < gr.z; ++dir)
            for (uint v = gr.x + lid; v < gr.y; v += ${gwg}u) {
                const ell_t l = row[dir * gr.w + v];
                ++all;
                if (isinf(l)) { ++zero; continue; }
%   if f64:
                sum += l;
%   else:
                sum = A_add(sum, A_f(l));
%   endif
                hi = fmax(hi, l);
                lo = fmin(lo, l);
            }
        // the five reductions in one tree
        su[lid] = all;
        su[${gwg}u + lid] = zero;
        sa[lid] = sum;
        se[lid] = hi;
        se[${gwg}u + lid] = lo;
        barrier(CLK_LOCAL_MEM_FENCE);
%   for o in [gwg >> i for i in range(1, gwg.bit_length()) if gwg >> i]:
        if (lid < ${o}u) {
            su[lid] += su[lid + ${o}u];
            su[${gwg}u + lid] += su[${gwg + o}u + lid];
            sa[lid] = A_add(sa[lid], sa[lid + ${o}u]);
            se[lid] = fmax(se[lid], se[lid + ${o}u]);
            se[${gwg}u + lid] = fmin(se[${gwg}u + lid], se[${gwg + o}u + lid]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
%   endfor
        if (lid == 0) {
            __global acc_t *o = stats + (((ulong)e * nscales + j) * ${groups}u + k) * 5;
            o[0] = A_l(su[0]);
            o[1] = A_l(su[${gwg}u]);
            o[2] = sa[0];
%   if f64:
            o[3] = se[0];
            o[4] = se[${gwg}u];
%   else:
            // (vstore2: Oclgrind took a float2 built from a reduced float as uninitialised)
            vstore2((float2)(se[0], 0.0f), 3, (__global float *)o);
            vstore2((float2)(se[${gwg}u], 0.0f), 4, (__global float *)o);
%   endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

// Per (group k, series e, scale j) and each q of qs[0 .. nq): the sum over the group's
// counted segments of expm1(q/2 (ln F^2 - M_q)), into qsum[e][j][k][iq], with M_q
// (mq[e][j][iq], written by group 0) from all groups' stats: the mean of ln F^2, raised
// (q > 0) or lowered (q < 0) as far as needed to keep every term below e^60.  Counted: all
// segments for q > 0 (a zero-variance one adds expm1(-inf) = -1), the others for q < 0;
// q = 0 needs only the stats.  ${qb} moments per pass over the segments, reduced in one tree.
__kernel __attribute__((reqd_work_group_size(${gwg}, 1, 1)))
void dfa_q_sums(__global const ell_t *ell, __global const uint *len,
                __global const uint *scales, __global const ulong *off,
                __global const uint *stride, const uint nscales, const uint j0,
                const uint jend, const uint per, const uint kper,
                __global const acc_t *stats, __global const ell_t *qs, const uint nq,
                __global acc_t *qsum, __global ell_t *mq)
{
    __local acc_t sa[${qb * gwg}];
${scales_of_group()}
    for (uint j = jlo; j < jhi; ++j) {
        const uint4 gr = dfa_group(n, scales[j], k);
        __global const ell_t *row = ell + off[j] + (ulong)e * stride[j];
        __global const acc_t *st = stats + ((ulong)e * nscales + j) * ${groups}u * 5;
        acc_t cnt = A_ZERO, sum = A_ZERO;
        ell_t hi = -INFINITY, lo = INFINITY;
        for (uint g = 0; g < ${groups}u; ++g) {
            cnt = A_add(cnt, A_sub(st[5 * g], st[5 * g + 1]));
            sum = A_add(sum, st[5 * g + 2]);
            hi = fmax(hi, A_ell(st[5 * g + 3]));
            lo = fmin(lo, A_ell(st[5 * g + 4]));
        }
        const int some = A_ell(cnt) > 0;
        const ell_t mean = some ? A_ell(sum) / A_ell(cnt) : 0;
        for (uint q0 = 0; q0 < nq; q0 += ${qb}u) {
            ell_t q[${qb}], M[${qb}];
            acc_t part[${qb}];
            for (uint i = 0; i < ${qb}u; ++i) {
                q[i] = q0 + i < nq ? qs[q0 + i] : 0;
                M[i] = !some || q[i] == 0 ? mean : q[i] > 0 ? fmax(mean, hi - 120 / q[i])
                                                             : fmin(mean, lo - 120 / q[i]);
                part[i] = A_ZERO;
            }
            for (uint dir = 0; dir < gr.z; ++dir)
                for (uint v = gr.x + lid; v < gr.y; v += ${gwg}u) {
                    const ell_t l = row[dir * gr.w + v];
                    const int flat = isinf(l);
                    for (uint i = 0; i < ${qb}u; ++i) {
                        if (q[i] == 0 || (flat && q[i] < 0)) continue;
%   if f64:
                        part[i] += flat ? -1.0 : expm1(0.5 * q[i] * (l - M[i]));
%   else:
                        part[i] = A_add(part[i], A_f(flat ? -1.0f : expm1(0.5f * q[i] * (l - M[i]))));
%   endif
                    }
                }
            for (uint i = 0; i < ${qb}u; ++i) sa[i * ${gwg}u + lid] = part[i];
            barrier(CLK_LOCAL_MEM_FENCE);
%   for o in [gwg >> i for i in range(1, gwg.bit_length()) if gwg >> i]:
            if (lid < ${o}u)
                for (uint i = 0; i < ${qb}u; ++i)
                    sa[i * ${gwg}u + lid] = A_add(sa[i * ${gwg}u + lid], sa[i * ${gwg}u + lid + ${o}u]);
            barrier(CLK_LOCAL_MEM_FENCE);
%   endfor
            if (lid == 0)
                for (uint i = 0; i < ${qb}u && q0 + i < nq; ++i) {
                    qsum[(((ulong)e * nscales + j) * ${groups}u + k) * nq + q0 + i] =
                        sa[i * ${gwg}u];
                    if (k == 0) mq[((ulong)e * nscales + j) * nq + q0 + i] = M[i];
                }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
}
% endif
