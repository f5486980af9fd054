## Philox4x32-10 (Salmon et al., SC'11), counter based: four 32-bit words are a
## pure function of a 128-bit counter and a 64-bit key.
## Emits: uint4 ${prefix}philox(uint4 ctr, uint2 key)
## mul_hi and the plain product map to one multiply-high and one multiply-low
## instruction each on GPUs (as in Random123's OpenCL port).
<%def name="philox4x32_10(prefix)">
inline uint4 ${prefix}philox_round(uint4 c, uint2 k)
{
    const uint hi0 = mul_hi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
    const uint hi1 = mul_hi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
    return (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
}

inline uint4 ${prefix}philox(uint4 c, uint2 k)
{
% for r in range(10):
%   if r:
    k += (uint2)(0x9E3779B9u, 0xBB67AE85u);
%   endif
    c = ${prefix}philox_round(c, k);
% endfor
    return c;
}
</%def>
