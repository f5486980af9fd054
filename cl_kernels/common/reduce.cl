## Work-group reductions, reusable through a name prefix, and the reduce_sum kernels.
##
## wg_reduce(prefix, T, wg, combine): emits
##     T ${prefix}combine(T a, T b)        -- `combine` is a statement using a and b
##     T ${prefix}wg_reduce(T x, uint lid, __local T *scratch)
## Every item of the work group must call ${prefix}wg_reduce (it has barriers);
## `wg` is the work-group size, a power of two; scratch holds wg elements.
## All items get the result, and scratch may be reused right after.
<%def name="wg_reduce(prefix, T, wg, combine)">
<%
    if wg < 1 or wg & (wg - 1):
        raise ValueError("wg_reduce: work-group size must be a power of two, got %d" % wg)
%>
inline ${T} ${prefix}combine(${T} a, ${T} b) { ${combine} }

${T} ${prefix}wg_reduce(${T} x, uint lid, __local ${T} *scratch)
{
    scratch[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
% for off in [wg >> k for k in range(1, wg.bit_length()) if wg >> k]:
    if (lid < ${off}u) scratch[lid] = ${prefix}combine(scratch[lid], scratch[lid + ${off}u]);
    barrier(CLK_LOCAL_MEM_FENCE);
% endfor
    const ${T} result = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return result;
}
</%def>

## Compensated float32 addition of (sum, error) pairs: Knuth's TwoSum, then a
## fast renormalisation. Emits float2 ${prefix}add2(float2 a, float2 b).
<%def name="compensated_add(prefix)">
inline float2 ${prefix}add2(float2 a, float2 b)
{
    const float s = a.x + b.x;
    const float bb = s - a.x;
    const float err = (a.x - (s - bb)) + (b.x - bb);
    const float c = a.y + b.y + err;
    const float hi = s + c;
    return (float2)(hi, c - (hi - s));
}
</%def>

## ---- body: reduce_sum kernels (clphys.runtime.reduce_sum) ----
## params: in_t (OpenCL scalar type of the input), acc, wg
<%
    # accumulator type per accumulation mode
    A = {"long": "long", "ulong": "ulong", "double": "double", "compensated": "float2"}[acc]
    if "double" in (acc, in_t) and not dev.fp64:
        raise ValueError("reduce.cl: double needs a device with fp64")
%>
% if acc == "double":
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif
% if acc == "compensated":
${compensated_add("rs_")}
${wg_reduce("rs_" + acc + "_", A, wg, "return rs_add2(a, b);")}
#define RS_ZERO ((float2)(0.0f, 0.0f))
#define RS_LIFT(v) ((float2)((float)(v), 0.0f))
% else:
${wg_reduce("rs_" + acc + "_", A, wg, "return a + b;")}
#define RS_ZERO ((${A})0)
#define RS_LIFT(v) ((${A})(v))
% endif

<%def name="sum_body(lift)">
    __local ${A} scratch[${wg}];
    const uint lid = get_local_id(0);
    ${A} acc = RS_ZERO;
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0))
        acc = rs_${acc}_combine(acc, ${lift}(x[i]));
    acc = rs_${acc}_wg_reduce(acc, lid, scratch);
    if (lid == 0) out[get_group_id(0)] = acc;
</%def>
// Pass 1: each work group sums a grid-strided share of x into one partial.
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void reduce_sum_partial(__global const ${in_t} *x, const ulong n, __global ${A} *out)
{
${sum_body("RS_LIFT")}
}

// Pass 2 (one work group): the partials into out[0].
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void reduce_sum_finish(__global const ${A} *x, const ulong n, __global ${A} *out)
{
${sum_body("")}
}
