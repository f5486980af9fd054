## Sums over the overlapping pairs of a series, in one pass:
##     sums[i] = sum over t with t + l < n of  f(x(t), x(t + l)),   l = lag0 + i,  i < nlags
## (clphys.timeseries.hurst and autocorrelation); "absmax" takes the maximum instead.
##
## params: pair   "absdiff" |b - a|, "sqdiff" (b - a)^2, "powdiff" (|b - a| s_l)^q with a
##                per-lag scale s_l (the kernel's `inv` argument), "product" a b,
##                "absmax" max |b - a| (with acc "max")
##         value  how the series is stored (every tile is read relative to its first
##                element t0, so differences keep float32 accuracy relative to the local
##                excursion whatever the series' offset):
##                "float2": (hi, lo) float pairs of the series, 8 bytes per value;
##                "blocked": 4 bytes per value: float32 values relative to the first value
##                of their block of `block` (a power of two) values, after a table of one
##                (hi, lo) float pair per block (the block's first value minus the
##                series' first); x points at the table, the values start at x + xoff;
##                "float": x is used as it is (no origin)
##         acc    "double" | "compensated" | "max" (see acc.cl)
##         wg     work-group size; lpi lags per work item (consecutive, held in a sliding
##                register window); chunk: t values per tile; run: t values summed in
##                float before they are folded into the accumulator (chunk % run == 0)
##         rows   (optional, default 1) rows of the finishing kernel's work group
##
## Work group (b, g) of G = get_num_groups(1) owns the lags lag0 + b*wg*lpi + [0, wg*lpi)
## and the tiles c in [c_begin, c_end) with (c + c_shift) % G == g, in increasing order.
## A tile keeps x(t0 .. t0 + chunk) and the shifted span x(t0 + L0 .. t0 + L0 + chunk +
## wg*lpi) in local memory; item i keeps its lpi lags' accumulators in registers.
## The accumulators start from partial[g][i] (zero in the `fresh` launch) and are written
## back, so a group folds its tiles in the same order however the tile range is split
## into launches (time-bounded slices, upload segments, windows of a series too long for
## the device whose tile c_shift is global tile 0 of the window): the sums are the same
## bits.  ts_pair_finish then reduces partial over g.
<%namespace name="accns" file="/timeseries/acc.cl"/>
<%
    if pair not in ("absdiff", "sqdiff", "powdiff", "product", "absmax"):
        raise ValueError("pairs.cl: unknown pair %r" % (pair,))
    if (pair == "absmax") != (acc == "max"):
        raise ValueError("pairs.cl: pair 'absmax' goes with acc 'max' and only with it")
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
%>
${accns.accumulator(P, acc)}

% if value == "float2":
typedef float2 tp_in_t;
#define TP_ORIGIN const float2 o = x[t0];
#define TP_VAL(k) ((x[k].x - o.x) + (x[k].y - o.y))
% elif value == "blocked":
typedef float tp_in_t;
// value k = xv[k] + table[k / block] (minus the series' first value); relative to t0 it is
// (xv[k] - xv[t0]) + (table[k / block] - table[t0 / block]), the last term exactly 0 inside
// t0's block.
#define TP_ORIGIN __global const float2 *tab = (__global const float2 *)x; \
                  __global const float *xv = x + xoff; \
                  const float2 ob = tab[t0 >> ${blk.bit_length() - 1}u]; const float od = xv[t0];
#define TP_VAL(k) ((xv[k] - od) + ((tab[(k) >> ${blk.bit_length() - 1}u].x - ob.x) \
                                   + (tab[(k) >> ${blk.bit_length() - 1}u].y - ob.y)))
% else:
typedef float tp_in_t;
#define TP_ORIGIN
#define TP_VAL(k) (x[k])
% endif

inline float tp_${pair}(float a, float b, float q, float s)
{
% if pair in ("absdiff", "absmax") and dev.is_gpu:
    return fabs(b - a);                 // a free operand modifier on GPUs
% elif pair in ("absdiff", "absmax"):
    const float d = b - a;              // CPU vectorisers (PoCL) keep fabs a scalar call
    return d < 0.0f ? -d : d;
% elif pair == "sqdiff":
    const float d = b - a;
    return d * d;
% elif pair == "powdiff":
    return pow(fabs(b - a) * s, q);     // s = 1 / max |b - a| at this lag: no overflow
% else:
    return a * b;
% endif
}
% if pair == "absmax":
#define TP_RUN(s, t) s = fmax(s, t)
% else:
#define TP_RUN(s, t) s += t
% endif

## One tile: every t of the chunk against the lpi lags of this item.
<%def name="tile(masked)">
    {
% if masked:
        // pair (t0 + tt, lag) is inside the series iff tt < n - t0 - lag
% for j in J:
        const int lim${j} = (int)n - (int)(t0 + L0 + me + ${j}u);
% endfor
% endif
% for j in J[:-1]:
        float w${j} = tb[me + ${j}u];
% endfor
        float w${lpi - 1} = 0.0f;
        for (uint r0 = 0; r0 < ${chunk}u; r0 += ${run}u) {
% for j in J:
            float s${j} = 0.0f;
% endfor
#pragma unroll
            for (uint k = 0; k < ${run}u; ++k) {
                const uint tt = r0 + k;
                const float a = ta[tt];
                w${lpi - 1} = tb[tt + me + ${lpi - 1}u];
% for j in J:
%   if masked:
                TP_RUN(s${j}, (int)tt < lim${j} ? tp_${pair}(a, w${j}, q, inv${j}) : 0.0f);
%   else:
                TP_RUN(s${j}, tp_${pair}(a, w${j}, q, inv${j}));
%   endif
% endfor
% for j in J[:-1]:
                w${j} = w${j + 1};
% endfor
            }
% for j in J:
            acc${j} = ${P}fold(acc${j}, s${j});
% endfor
        }
    }
</%def>

__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ts_pair_sums(__global const tp_in_t *x, const uint xoff, const uint n, const uint lag0,
                  const uint nlags, const uint c_begin, const uint c_end, const uint c_shift,
                  const uint fresh, const float q, const float scale,
                  __global const float *inv, __global ${P}acc_t *partial)
{
    __local float ta[${chunk}];
    __local float tb[${chunk + lg}];
    const uint lid = get_local_id(0);
    const uint L0 = lag0 + get_group_id(0) * ${lg}u;    // first lag of the group
    const uint me = lid * ${lpi}u;                      // this item's lags: L0 + me + j
    const uint first = L0 - lag0 + me;                  // ... at sums index first + j
    const uint G = get_num_groups(1), g = get_group_id(1);
    const uint c_start = c_begin + (g + G - (c_begin + c_shift) % G) % G;
    if (!fresh && c_start >= c_end) return;            // no tile here: partial[g] stays
    __global ${P}acc_t *out = partial + (size_t)g * nlags;
% for j in J:
    ${P}acc_t acc${j} = ${P}ZERO;
    if (!fresh && first + ${j}u < nlags) acc${j} = out[first + ${j}u];
% if pair == "powdiff":
    const float inv${j} = first + ${j}u < nlags ? inv[first + ${j}u] : 0.0f;
% else:
    const float inv${j} = 1.0f;
% endif
% endfor
    for (uint c = c_start; c < c_end; c += G) {
        const uint t0 = c * ${chunk}u;
        TP_ORIGIN
        barrier(CLK_LOCAL_MEM_FENCE);       // the previous tile is no longer read
        // scale: a power of two (exact) that brings the series to unit size
        for (uint i = lid; i < ${chunk}u; i += ${wg}u)
            ta[i] = t0 + i < n ? TP_VAL(t0 + i) * scale : 0.0f;
        for (uint i = lid; i < ${chunk + lg}u; i += ${wg}u) {
            const uint k = t0 + L0 + i;
            tb[i] = k < n ? TP_VAL(k) * scale : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t0 + L0 + ${chunk + lg - 1}u <= n)
${tile(False)}
        else
${tile(True)}
    }
% for j in J:
    if (first + ${j}u < nlags) out[first + ${j}u] = acc${j};
% endfor
}

// out[i] = sum over the work groups g < groups of partial[g][i], i < nlags.  Work group
// (64, rows): row r adds the slots g = r, r + rows, ...; the rows are then added in a
// fixed order in local memory.
__kernel __attribute__((reqd_work_group_size(64, ${rows}, 1)))
void ts_pair_finish(__global const ${P}acc_t *partial, const uint groups,
                    const uint nlags, __global ${P}acc_t *out)
{
    const uint i = get_global_id(0);
    const uint r = get_local_id(1);
    ${P}acc_t s = ${P}ZERO;
    if (i < nlags)
        for (uint g = r; g < groups; g += ${rows}u) s = ${P}add(s, partial[(size_t)g * nlags + i]);
% if rows > 1:
    __local ${P}acc_t red[${rows}][64];
    const uint l = get_local_id(0);
    red[r][l] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
%   for off in [rows >> k for k in range(1, rows.bit_length()) if rows >> k]:
    if (r < ${off}u) red[r][l] = ${P}add(red[r][l], red[r + ${off}u][l]);
    barrier(CLK_LOCAL_MEM_FENCE);
%   endfor
    if (r == 0 && i < nlags) out[i] = red[0][l];
% else:
    if (i < nlags) out[i] = s;
% endif
}
