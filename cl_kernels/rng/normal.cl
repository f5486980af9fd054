## From 32-bit words to floats, identically on every device.
## Emits:
##   float  ${prefix}u01(uint w)        in [0, 1): top 24 bits * 2^-24 (exact, never 1)
##   float  ${prefix}u01_open0(uint w)  in (0, 1]: (top 24 bits + 1) * 2^-24 (never 0)
##   float2 ${prefix}box_muller(uint a, uint b)  two standard normals; log never sees 0
<%def name="uniform_normal(prefix)">
inline float ${prefix}u01(uint w) { return (float)(w >> 8) * 0x1.0p-24f; }
inline float ${prefix}u01_open0(uint w) { return (float)((w >> 8) + 1u) * 0x1.0p-24f; }
inline float2 ${prefix}box_muller(uint a, uint b)
{
    const float r = sqrt(-2.0f * log(${prefix}u01_open0(a)));
    // sin and cos rather than sincos(x, &c): compilers fuse them anyway, and
    // Oclgrind's uninitialised-value checker cannot follow sincos' pointer.
    const float phi = 6.2831853071795864769f * ${prefix}u01(b);
    return (float2)(r * cos(phi), r * sin(phi));
}
</%def>
