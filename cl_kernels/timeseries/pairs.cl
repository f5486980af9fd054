## Sums over the overlapping pairs of series, in one pass, for a batch of entries:
##     sums[p][e][k][i] = sum over t in block k of entry e, t < nt[e], t + l < n[e], of
##                        f_p(x(t), x(t + l)),   l = lag0 + i,  i < nlags
## (clphys.timeseries.hurst and autocorrelation); "absmax" takes the maximum instead.
## Block k of entry e holds its tiles [k tpb, (k + 1) tpb), tpb = tpbs[e] (the jackknife
## blocks of the error bars, each entry's own: the same as for the entry alone; `partial`
## and the sums have nblk blocks per entry, those past an entry's last are zero; the host
## adds the blocks for the totals).
##
## params: pairs  the pair functions f_p, evaluated on the same tiles (one accumulator
##                each): "absdiff" |b - a|, "sqdiff" (b - a)^2, "powdiff" (|b - a| s_l)^q_p
##                with a per-lag scale s_l (the kernel's `inv`) and q_p = qs[p] (as
##                2^(q log2 x), see tp_pow01), "ipow<k>" the same for the integer q = k
##                (3 <= k <= 64, by multiplications), "product" a b, "absmax" max |b - a|
##                (alone, with acc "max"); the scales are per entry: inv[e][i]
##         value  how the series is stored (every tile is read relative to its first
##                element t0, so differences keep float32 accuracy relative to the local
##                excursion whatever the series' offset):
##                "float2": (hi, lo) float pairs, 8 bytes per value;
##                "blocked": 4 bytes per value: float32 values relative to the first value
##                of their block of `block` (a power of two) values, and a table `tab` of
##                one (hi, lo) float pair per block (the block's first value minus the
##                series' origin); entries start at multiples of `block`;
##                "float": x is used as it is (no origin)
##         acc    "double" | "compensated" | "max" (see acc.cl)
##         wg     work-group size; lpi lags per work item (consecutive, held in a sliding
##                register window); chunk: t values per tile; run: t values summed in
##                float before they are folded into the accumulator (chunk % run == 0)
##         rows   (optional, default 1) rows of the finishing kernel's work group
##
## Entry e: values x[voff[e] - xbase + t], t < n[e] (xbase: the global position of the
## buffer's first value, nonzero for a window of one series too long for the device);
## nchs[e] tiles, ceil(min(nt, n - lag0) / chunk).
## Work group (b, (e - e_lo) G + g) of G groups per entry (a launch covers the entries
## e_lo .. e_lo + get_num_groups(1) / G - 1 and the lag blocks lb0 + b) owns the lags
## lag0 + (lb0 + b)*wg*lpi + [0, wg*lpi)
## and the tiles c in [c_begin, c_end) of entry e with c % G == g, in increasing order.
## A tile keeps x(t0 .. t0 + chunk) and the shifted span x(t0 + L0 .. t0 + L0 + chunk +
## wg*lpi) in local memory; item i keeps its lpi lags' accumulators in registers, read from
## the slot partial[p][e][k][c % Gs] (Gs = min(G, tpb) columns per block, of gs >= Gs in
## memory) when it starts on block k and written back when it leaves it (partial starts
## zeroed): with G <= tpb the column is the group's own, with G > tpb every tile has a
## slot of its own (a group's tiles lie in different blocks).  So a group folds its tiles in the same order however
## the tile range is split into launches (time-bounded slices, upload segments, windows):
## the sums are the same bits; with G >= tpb they are also the same bits for any such G
## (one tile per slot), and launches over groups of entries or of lag blocks change
## nothing either.
## ts_pair_finish then reduces partial over the gs columns.
<%namespace name="accns" file="/timeseries/acc.cl"/>
<%
    KINDS = ("absdiff", "sqdiff", "powdiff", "product", "absmax")
    PL = list(pairs)
    IPOW = {p: int(p[4:]) for p in PL if p[:4] == "ipow" and p[4:].isdigit()
            and 3 <= int(p[4:]) <= 64}
    if not PL or any(p not in KINDS and p not in IPOW for p in PL):
        raise ValueError("pairs.cl: pairs must be a list of %s, got %r" % (KINDS, PL))
    if ("absmax" in PL) != (acc == "max") or ("absmax" in PL and len(PL) > 1):
        raise ValueError("pairs.cl: pair 'absmax' goes alone and with acc 'max' only")
    if value not in ("float2", "float", "blocked"):
        raise ValueError("pairs.cl: value must be 'float2', 'blocked' or 'float', got %r"
                         % (value,))
    blk = context.get("block", 0)
    if value == "blocked" and (blk < 1 or blk & (blk - 1)):
        raise ValueError("pairs.cl: value='blocked' needs block, a power of two")
    rows = context.get("rows", 1)
    if rows < 1 or rows & (rows - 1):
        raise ValueError("pairs.cl: rows must be a power of two")
    if wg < 1 or lpi < 1 or run < 1 or chunk < run or chunk % run:
        raise ValueError("pairs.cl: need wg, lpi, run >= 1 and chunk a multiple of run")
    lg = wg * lpi
    P = "tp_" + acc[0] + "_"          # helper names carry the accumulator variant
    J = range(lpi)
    NP = range(len(PL))
    lb = blk.bit_length() - 1
    # a general q (and its maxima) on (hi, lo) pairs: the tiles keep the hi and lo parts
    # (ta, tb and tal, tbl: two float arrays, not float2, which crashed Oclgrind's
    # uninitialised-value checker) and each difference is (b - a) + (bl - al), good to
    # float32 rounding of itself (equal values: exactly 0), where the tile-relative
    # values of the other layouts round to the excursion
    EXACT = value == "float2" and any(p in ("powdiff", "absmax") or p in IPOW for p in PL)
    LO = lambda v: f"{v}, {v}l" if EXACT else v        # a tile value: hi, lo or one float
    D = "((b - a) + (bl - al))" if EXACT else "b - a"
%>
${accns.accumulator(P, acc)}

% if EXACT:
typedef float2 tp_in_t;
#define TP_ORIGIN
% elif value == "float2":
typedef float2 tp_in_t;
#define TP_ORIGIN const float2 o = xs[t0];
#define TP_VAL(k) ((xs[k].x - o.x) + (xs[k].y - o.y))
% elif value == "blocked":
typedef float tp_in_t;
// value k = xs[k] + tabs[k / block] (minus the series' origin); relative to t0 it is
// (xs[k] - xs[t0]) + (tabs[k / block] - tabs[t0 / block]), the last term exactly 0 inside
// t0's block.
#define TP_ORIGIN const float2 ob = tabs[t0 >> ${lb}u]; const float od = xs[t0];
#define TP_VAL(k) ((xs[k] - od) + ((tabs[(k) >> ${lb}u].x - ob.x) \
                                   + (tabs[(k) >> ${lb}u].y - ob.y)))
% else:
typedef float tp_in_t;
#define TP_ORIGIN
#define TP_VAL(k) (xs[k])
% endif

% if "powdiff" in PL:
// x^q for 0 <= x <= 1 (a little above by rounding) and q > 0, as 2^(q log2 x) in float
// arithmetic that vectorises (no calls: pow() is a scalar library call on CPUs, ~300x
// slower there): log2 x = e + 2/ln2 atanh((m - 1)/(m + 1)) with x = m 2^e, m in
// [sqrt(1/2), sqrt(2)) (odd series to t^9, |t| <= 0.172), then 2^y = 2^r 2^(y - r) with r
// the nearest integer (Taylor series of e^f to f^7, |f| <= ln2 / 2).  A term's relative
// error is below 2^-22 (1 + |q log2 x|) (docs/timeseries.md); results below 2^-126 are 0:
// with the terms scaled by the lag's maximum the sum is >= 1, so they do not count.
inline float tp_pow01(const float x, const float q)
{
    const int tiny = x < 1.17549435e-38f;                     // subnormal: scaled by 2^24
    const int bits = as_int(tiny ? x * 16777216.0f : x);
    const float m1 = as_float((bits & 0x007fffff) | 0x3f800000);        // [1, 2)
    const int big = m1 > 1.41421356f;
    const float m = big ? 0.5f * m1 : m1;
    const float e = (float)((bits >> 23) - (tiny ? 151 : 127) + big);
    const float t = (m - 1.0f) / (m + 1.0f);
    const float t2 = t * t;
    const float y = q * (e + t * (2.88539008f + t2 * (0.961796694f + t2 * (0.577078016f
                                  + t2 * (0.412198583f + t2 * 0.320598898f)))));
    const float z = y + 0.5f;
    int r = (int)z;                                           // floor(z), without a call
    r -= (float)r > z;
    const float f = (y - (float)r) * 0.693147181f;
    const float p = 1.0f + f * (1.0f + f * (0.5f + f * (0.166666667f + f * (0.0416666667f
                    + f * (0.00833333333f + f * (0.00138888889f + f * 0.000198412698f))))));
    const float scale = r > -127 ? as_float((r + 127) << 23) : 0.0f;
    return x > 0.0f ? p * scale : 0.0f;
}
% endif
% for p, kind in enumerate(PL):
inline float tp_f${p}(${"float a, float al, float b, float bl" if EXACT else "float a, float b"}, float q, float s)
{
%   if kind in ("absdiff", "absmax") and dev.is_gpu:
    return fabs(${D});                 // a free operand modifier on GPUs
%   elif kind in ("absdiff", "absmax"):
    const float d = ${D};              // CPU vectorisers (PoCL) keep fabs a scalar call
    return d < 0.0f ? -d : d;
%   elif kind == "sqdiff":
    const float d = ${D};
    return d * d;
%   elif kind == "powdiff" or kind in IPOW:
    // s = 1 / max |b - a| at this lag: x <= 1, no overflow
%     if dev.is_gpu:
    const float x = fabs(${D}) * s;
%     else:
    const float x = as_float(as_int((${D}) * s) & 0x7fffffff);    // |.| without a call
%     endif
%     if kind == "powdiff":
    return tp_pow01(x, q);
%     else:
<%
        k = IPOW[kind]
        steps = []
        for bit in bin(k)[3:]:
            steps.append("r = r * r;")
            if bit == "1":
                steps.append("r = r * x;")
%>
    float r = x;                        // x^${k}
    ${" ".join(steps)}
    return r;
%     endif
%   else:
    return a * b;
%   endif
}
% endfor
% if acc == "max" and dev.is_gpu:
#define TP_RUN(s, t) s = fmax(s, t)
% elif acc == "max":
#define TP_RUN(s, t) { const float tp_t = (t); s = tp_t > s ? tp_t : s; }   /* no fmax call */
% else:
#define TP_RUN(s, t) s += t
% endif

## One tile: every t of the chunk against the lpi lags of this item.
<%def name="tile(masked)">
    {
% if masked:
        // pair (t0 + tt, lag) counts iff t0 + tt < nt and t0 + tt + lag < n
% for j in J:
        const int lim${j} = min((int)nt - (int)t0, (int)n - (int)(t0 + L0 + me + ${j}u));
% endfor
% endif
% for j in J[:-1]:
        float w${j} = tb[me + ${j}u]${f", w{j}l = tbl[me + {j}u]" if EXACT else ""};
% endfor
        float w${lpi - 1} = 0.0f${f", w{lpi - 1}l = 0.0f" if EXACT else ""};
        for (uint r0 = 0; r0 < ${chunk}u; r0 += ${run}u) {
% for p in NP:
%   for j in J:
            float s${p}_${j} = 0.0f;
%   endfor
% endfor
#pragma unroll
            for (uint k = 0; k < ${run}u; ++k) {
                const uint tt = r0 + k;
                const float a = ta[tt]${", al = tal[tt]" if EXACT else ""};
                w${lpi - 1} = tb[tt + me + ${lpi - 1}u];
% if EXACT:
                w${lpi - 1}l = tbl[tt + me + ${lpi - 1}u];
% endif
% for j in J:
%   for p in NP:
%     if masked:
                TP_RUN(s${p}_${j}, (int)tt < lim${j} ? tp_f${p}(${LO("a")}, ${LO(f"w{j}")}, q${p}, inv${j}) : 0.0f);
%     else:
                TP_RUN(s${p}_${j}, tp_f${p}(${LO("a")}, ${LO(f"w{j}")}, q${p}, inv${j}));
%     endif
%   endfor
% endfor
% for j in J[:-1]:
                w${j} = w${j + 1};
%   if EXACT:
                w${j}l = w${j + 1}l;
%   endif
% endfor
            }
% for p in NP:
%   for j in J:
            acc${p}_${j} = ${P}fold(acc${p}_${j}, s${p}_${j});
%   endfor
% endfor
        }
    }
</%def>

## Move the item's accumulators between registers and partial[p][e][k][g] (`op` "load" or
## "store").
<%def name="slot(op)">
% for p in NP:
%   for j in J:
        if (first + ${j}u < nlags) {
%     if op == "load":
            acc${p}_${j} = partial[slot_${p} + first + ${j}u];
%     else:
            partial[slot_${p} + first + ${j}u] = acc${p}_${j};
%     endif
        }
%   endfor
% endfor
</%def>

__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ts_pair_sums(__global const tp_in_t *x, __global const float2 *tab,
                  __global const ulong *voff, __global const uint *nts, __global const uint *ns,
                  __global const uint *nchs, const uint nentries, const uint e_lo,
                  const uint G, const long xbase,
                  const uint lag0, const uint nlags,
                  const uint c_begin, const uint c_end, const uint nblk,
                  __global const uint *tpbs, const uint gs, const uint lb0,
                  __global const float *qs, __global const float *inv,
                  __global ${P}acc_t *partial)
{
    __local float ta[${chunk}];
    __local float tb[${chunk + lg}];
% if EXACT:
    __local float tal[${chunk}];
    __local float tbl[${chunk + lg}];
% endif
    const uint lid = get_local_id(0);
    const uint L0 = lag0 + (lb0 + get_group_id(0)) * ${lg}u;    // first lag of the group
    const uint me = lid * ${lpi}u;                      // this item's lags: L0 + me + j
    const uint first = L0 - lag0 + me;                  // ... at sums index first + j
    // (no '%' beside the '/': LLVM would pair them with a `freeze`, which Oclgrind lacks)
    const uint gy = get_group_id(1), eg = gy / G, g = gy - eg * G, e = e_lo + eg;
    const uint n = ns[e], nt = nts[e];
    __global const tp_in_t *xs = x + ((long)voff[e] - xbase);
% if value == "blocked":
    __global const float2 *tabs = tab + (((long)voff[e] - xbase) >> ${lb});
% endif
    const uint nch = nchs[e];        // tiles of this entry: the t < nt with t + lag0 < n
    const uint c_stop = min(c_end, nch);
    const uint c_start = c_begin + (g + G - c_begin % G) % G;
    if (c_start >= c_stop) return;                      // no tile here: partial stays
    const uint tpb = tpbs[e];                           // tiles per block of this entry
    const uint Gs = min(G, tpb);                        // its slot columns per block
% for p in NP:
%   if PL[p] == "powdiff":
    const float q${p} = qs[${p}];
%   else:
    const float q${p} = 1.0f;
%   endif
% endfor
% for j in J:
%   if "powdiff" in PL or IPOW:
    const float inv${j} = first + ${j}u < nlags ? inv[(size_t)e * nlags + first + ${j}u] : 0.0f;
%   else:
    const float inv${j} = 1.0f;
%   endif
% endfor
% for p in NP:
%   for j in J:
    ${P}acc_t acc${p}_${j} = ${P}ZERO;
%   endfor
% endfor
    uint kcur = nblk;                                   // the block in the registers
% for p in NP:
    size_t slot_${p} = 0;
% endfor
    for (uint c = c_start; c < c_stop; c += G) {
        const uint k = min(c / tpb, nblk - 1u);
        if (k != kcur) {                    // (with G > tpb every tile starts a block)
            if (kcur < nblk) {
${slot("store")}
            }
% for p in NP:
            slot_${p} = ((((size_t)${p} * nentries + e) * nblk + k) * gs + (c - c / Gs * Gs))
                      * nlags;
% endfor
${slot("load")}
            kcur = k;
        }
        const uint t0 = c * ${chunk}u;
        TP_ORIGIN
        barrier(CLK_LOCAL_MEM_FENCE);       // the previous tile is no longer read
% if EXACT:
        for (uint i = lid; i < ${chunk}u; i += ${wg}u) {
            const float2 v = t0 + i < n ? xs[t0 + i] : (float2)(0.0f);
            ta[i] = v.x;
            tal[i] = v.y;
        }
        for (uint i = lid; i < ${chunk + lg}u; i += ${wg}u) {
            const uint k2 = t0 + L0 + i;
            const float2 v = k2 < n ? xs[k2] : (float2)(0.0f);
            tb[i] = v.x;
            tbl[i] = v.y;
        }
% else:
        for (uint i = lid; i < ${chunk}u; i += ${wg}u)
            ta[i] = t0 + i < n ? TP_VAL(t0 + i) : 0.0f;
        for (uint i = lid; i < ${chunk + lg}u; i += ${wg}u) {
            const uint k2 = t0 + L0 + i;
            tb[i] = k2 < n ? TP_VAL(k2) : 0.0f;
        }
% endif
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t0 + ${chunk}u <= nt && t0 + L0 + ${chunk + lg - 1}u <= n)
${tile(False)}
        else
${tile(True)}
    }
${slot("store")}
}

// out[r][i] = sum over the groups g < G of partial[r][g][i], for the rows r (p, e, k) and
// i < nlags.  Work group (64, rows): row y adds the slots g = y, y + rows, ...; the rows are
// then added in a fixed order in local memory.
__kernel __attribute__((reqd_work_group_size(64, ${rows}, 1)))
void ts_pair_finish(__global const ${P}acc_t *partial, const uint groups,
                    const uint nlags, __global ${P}acc_t *out)
{
    const uint i = get_global_id(0);
    const uint r = get_local_id(1);
    const size_t row = get_global_id(2);
    __global const ${P}acc_t *src = partial + row * groups * nlags;
    ${P}acc_t s = ${P}ZERO;
    if (i < nlags)
        for (uint g = r; g < groups; g += ${rows}u) s = ${P}add(s, src[(size_t)g * nlags + i]);
% if rows > 1:
    __local ${P}acc_t red[${rows}][64];
    const uint l = get_local_id(0);
    red[r][l] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
%   for off in [rows >> k for k in range(1, rows.bit_length()) if rows >> k]:
    if (r < ${off}u) red[r][l] = ${P}add(red[r][l], red[r + ${off}u][l]);
    barrier(CLK_LOCAL_MEM_FENCE);
%   endfor
    if (r == 0 && i < nlags) out[row * nlags + i] = red[0][l];
% else:
    if (i < nlags) out[row * nlags + i] = s;
% endif
}
