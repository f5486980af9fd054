## Sums over the overlapping pairs of a series, in one pass:
##     sums[i] = sum over t with t + l < n of  f(x(t), x(t + l)),   l = lag0 + i,  i < nlags
## (clphys.timeseries.hurst and autocorrelation).
##
## params: pair   "absdiff" |b - a|, "sqdiff" (b - a)^2, "powdiff" |b - a|^q, "product" a b
##         value  "float2": x holds (hi, lo) float pairs of the series; each tile is read
##                relative to its first element, so differences keep float32 accuracy
##                relative to the local excursion; "float": x is used as it is
##         acc    "double" | "compensated" (see acc.cl)
##         wg     work-group size; lpi lags per work item (consecutive, held in a sliding
##                register window); chunk: t values per tile; run: t values summed in
##                float before they are folded into the accumulator (chunk % run == 0)
##
## Work group (b, g) owns the lags lag0 + b*wg*lpi + [0, wg*lpi) and the tiles g, g + G, ...
## of chunk values of t.  A tile keeps x(t0 .. t0 + chunk) and the shifted span
## x(t0 + L0 .. t0 + L0 + chunk + wg*lpi) in local memory; item i keeps its lpi lags' partial
## sums in registers.  partial[g][i] are reduced over g by ts_pair_finish.
<%namespace name="accns" file="/timeseries/acc.cl"/>
<%
    if pair not in ("absdiff", "sqdiff", "powdiff", "product"):
        raise ValueError("pairs.cl: unknown pair %r" % (pair,))
    if value not in ("float2", "float"):
        raise ValueError("pairs.cl: value must be 'float2' or 'float', got %r" % (value,))
    if wg < 1 or lpi < 1 or run < 1 or chunk < run or chunk % run:
        raise ValueError("pairs.cl: need wg, lpi, run >= 1 and chunk a multiple of run")
    lg = wg * lpi
    P = "tp_" + acc[0] + "_"          # helper names carry the accumulator variant
    J = range(lpi)
%>
${accns.accumulator(P, acc)}

% if value == "float2":
typedef float2 tp_in_t;
#define TP_VAL(v, o) (((v).x - (o).x) + ((v).y - (o).y))
% else:
typedef float tp_in_t;
#define TP_VAL(v, o) (v)
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
void ts_pair_sums(__global const tp_in_t *x, const uint n, const uint lag0, const uint nlags,
                  const uint nchunks, const float q, __global ${P}acc_t *partial)
{
    __local float ta[${chunk}];
    __local float tb[${chunk + lg}];
    const uint lid = get_local_id(0);
    const uint L0 = lag0 + get_group_id(0) * ${lg}u;    // first lag of the group
    const uint me = lid * ${lpi}u;                      // this item's lags: L0 + me + j
% for j in J:
    ${P}acc_t acc${j} = ${P}ZERO;
% endfor
    for (uint c = get_group_id(1); c < nchunks; c += get_num_groups(1)) {
        const uint t0 = c * ${chunk}u;
        const tp_in_t o = x[t0];
        barrier(CLK_LOCAL_MEM_FENCE);       // the previous tile is no longer read
        for (uint i = lid; i < ${chunk}u; i += ${wg}u)
            ta[i] = t0 + i < n ? TP_VAL(x[t0 + i], o) : 0.0f;
        for (uint i = lid; i < ${chunk + lg}u; i += ${wg}u) {
            const uint k = t0 + L0 + i;
            tb[i] = k < n ? TP_VAL(x[k], o) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t0 + L0 + ${chunk + lg - 1}u <= n)
${tile(False)}
        else
${tile(True)}
    }
    const uint first = L0 - lag0 + me;
    __global ${P}acc_t *out = partial + (size_t)get_group_id(1) * nlags;
% for j in J:
    if (first + ${j}u < nlags) out[first + ${j}u] = acc${j};
% endfor
}

// out[i] = sum over the work groups g < groups of partial[g][i], i < nlags.
__kernel void ts_pair_finish(__global const ${P}acc_t *partial, const uint groups,
                             const uint nlags, __global ${P}acc_t *out)
{
    const uint i = get_global_id(0);
    if (i >= nlags) return;
    ${P}acc_t s = ${P}ZERO;
    for (uint g = 0; g < groups; ++g) s = ${P}add(s, partial[(size_t)g * nlags + i]);
    out[i] = s;
}
