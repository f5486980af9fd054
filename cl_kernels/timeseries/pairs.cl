## Sums over the overlapping pairs of a series, in one pass:
##     sums[i] = sum over t with t + l < n of  f(x(t), x(t + l)),   l = lag0 + i,  i < nlags
## (clphys.timeseries.hurst and autocorrelation).
##
## params: pair   "absdiff" |b - a|, "sqdiff" (b - a)^2, "powdiff" |b - a|^q, "product" a b
##         value  how the series is stored (every tile is read relative to its first
##                element t0, so differences keep float32 accuracy relative to the local
##                excursion whatever the series' offset):
##                "float2": (hi, lo) float pairs of the series, 8 bytes per value;
##                "blocked": 4 bytes per value: float32 values relative to the first value
##                of their block of `block` (a power of two) values, after a table of one
##                (hi, lo) float pair per block (the block's first value minus the
##                series' first); x points at the table, the values start at x + xoff;
##                "float": x is used as it is (no origin)
##         acc    "double" | "compensated" (see acc.cl)
##         wg     work-group size; lpi lags per work item (consecutive, held in a sliding
##                register window); chunk: t values per tile; run: t values summed in
##                float before they are folded into the accumulator (chunk % run == 0)
##         rows   (optional, default 1) rows of the finishing kernel's work group
##
## Work group (b, g) owns the lags lag0 + b*wg*lpi + [0, wg*lpi) and the tiles
## c_begin + g, c_begin + g + G, ... < c_end of chunk values of t.  A tile keeps
## x(t0 .. t0 + chunk) and the shifted span x(t0 + L0 .. t0 + L0 + chunk + wg*lpi) in local
## memory; item i keeps its lpi lags' partial sums in registers.  A launch covers one piece
## [c_begin, c_end) of the tiles, so pieces can start while later parts of the series are
## still being uploaded; partial[g][i] is written by the first piece and added to by the
## next ones (launches on one in-order queue), then reduced over g by ts_pair_finish.
<%namespace name="accns" file="/timeseries/acc.cl"/>
<%
    if pair not in ("absdiff", "sqdiff", "powdiff", "product"):
        raise ValueError("pairs.cl: unknown pair %r" % (pair,))
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

inline float tp_${pair}(float a, float b, float q)
{
% if pair == "absdiff" and dev.is_gpu:
    return fabs(b - a);                 // a free operand modifier on GPUs
% elif pair == "absdiff":
    const float d = b - a;              // CPU vectorisers (PoCL) keep fabs a scalar call
    return d < 0.0f ? -d : d;
% elif pair == "sqdiff":
    const float d = b - a;
    return d * d;
% elif pair == "powdiff":
    return pow(fabs(b - a), q);
% else:
    return a * b;
% endif
}

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
                s${j} += (int)tt < lim${j} ? tp_${pair}(a, w${j}, q) : 0.0f;
%   else:
                s${j} += tp_${pair}(a, w${j}, q);
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
                  const uint nlags, const uint c_begin, const uint c_end, const uint first_piece,
                  const float q, __global ${P}acc_t *partial)
{
    __local float ta[${chunk}];
    __local float tb[${chunk + lg}];
    const uint lid = get_local_id(0);
    const uint L0 = lag0 + get_group_id(0) * ${lg}u;    // first lag of the group
    const uint me = lid * ${lpi}u;                      // this item's lags: L0 + me + j
% for j in J:
    ${P}acc_t acc${j} = ${P}ZERO;
% endfor
    for (uint c = c_begin + get_group_id(1); c < c_end; c += get_num_groups(1)) {
        const uint t0 = c * ${chunk}u;
        TP_ORIGIN
        barrier(CLK_LOCAL_MEM_FENCE);       // the previous tile is no longer read
        for (uint i = lid; i < ${chunk}u; i += ${wg}u)
            ta[i] = t0 + i < n ? TP_VAL(t0 + i) : 0.0f;
        for (uint i = lid; i < ${chunk + lg}u; i += ${wg}u) {
            const uint k = t0 + L0 + i;
            tb[i] = k < n ? TP_VAL(k) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t0 + L0 + ${chunk + lg - 1}u <= n)
${tile(False)}
        else
${tile(True)}
    }
    const uint first = L0 - lag0 + me;
    __global ${P}acc_t *out = partial + (size_t)get_group_id(1) * nlags;
    // every group writes (zeros if it had no tile), so the first piece sets every slot
    if (first_piece) {
% for j in J:
        if (first + ${j}u < nlags) out[first + ${j}u] = acc${j};
% endfor
    } else {
% for j in J:
        if (first + ${j}u < nlags) out[first + ${j}u] = ${P}add(out[first + ${j}u], acc${j});
% endfor
    }
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
