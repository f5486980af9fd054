## Philox4x32-10 (Salmon et al., SC'11), counter based: four 32-bit words are a
## pure function of a 128-bit counter and a 64-bit key.
## Emits: uint4 ${prefix}philox(uint4 ctr, uint2 key)
## The rounds work on scalars: mul_hi and the plain product map to one
## multiply-high and one multiply-low instruction on GPUs (as in Random123's
## OpenCL port), and scalar code keeps Oclgrind's uninitialised-value checker
## exact (it loses track through chains of vector inserts).
<%def name="philox4x32_10(prefix)">
inline uint4 ${prefix}philox(uint4 ctr, uint2 key)
{
    uint c0 = ctr.x, c1 = ctr.y, c2 = ctr.z, c3 = ctr.w;
    uint k0 = key.x, k1 = key.y;
% for r in range(10):
%   if r:
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
%   endif
    {
        const uint hi0 = mul_hi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const uint hi1 = mul_hi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
    }
% endfor
    return (uint4)(c0, c1, c2, c3);
}
</%def>
