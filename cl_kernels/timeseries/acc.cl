## Accumulators for long sums of float terms: float64 where the device has it,
## compensated float32 (TwoSum pairs, ~48-bit significand) where not; "max" keeps
## the largest term instead of the sum (exact in float32).
## accumulator(prefix, acc) with acc in {"double", "compensated", "max"} emits
##     ${prefix}acc_t                          the accumulator type
##     ${prefix}ZERO                           its zero
##     ${prefix}acc_t ${prefix}fold(${prefix}acc_t s, float x)    s + x
##     ${prefix}acc_t ${prefix}add(${prefix}acc_t a, ${prefix}acc_t b)
<%namespace name="red" file="/common/reduce.cl"/>
<%def name="accumulator(prefix, acc)">
<%
    if acc not in ("double", "compensated", "max"):
        raise ValueError("accumulator: acc must be 'double', 'compensated' or 'max', got %r"
                         % (acc,))
    if acc == "double" and not dev.fp64:
        raise ValueError("accumulator: acc='double' on a device without fp64")
%>
% if acc == "double":
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double ${prefix}acc_t;
#define ${prefix}ZERO 0.0
inline double ${prefix}fold(double s, float x) { return s + (double)x; }
inline double ${prefix}add(double a, double b) { return a + b; }
% elif acc == "max" and dev.is_gpu:
typedef float ${prefix}acc_t;
#define ${prefix}ZERO 0.0f
inline float ${prefix}fold(float s, float x) { return fmax(s, x); }
inline float ${prefix}add(float a, float b) { return fmax(a, b); }
% elif acc == "max":
typedef float ${prefix}acc_t;
#define ${prefix}ZERO 0.0f
// (fmax is a library call that CPU vectorisers (PoCL) keep scalar; no NaN reaches here)
inline float ${prefix}fold(float s, float x) { return x > s ? x : s; }
inline float ${prefix}add(float a, float b) { return b > a ? b : a; }
% else:
${red.compensated_add(prefix)}
typedef float2 ${prefix}acc_t;
#define ${prefix}ZERO ((float2)(0.0f, 0.0f))
inline float2 ${prefix}fold(float2 s, float x) { return ${prefix}add2(s, (float2)(x, 0.0f)); }
inline float2 ${prefix}add(float2 a, float2 b) { return ${prefix}add2(a, b); }
% endif
</%def>
