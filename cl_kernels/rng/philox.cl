## Philox4x32-10 (Salmon et al., SC'11), counter based: four 32-bit words are a
## pure function of a 128-bit counter and a 64-bit key.
## Emits: uint4 ${prefix}philox(uint4 ctr, uint2 key)
## The 64-bit products give hi and lo in one multiply-wide instruction on GPUs.
<%def name="philox4x32_10(prefix)">
inline uint4 ${prefix}philox_round(uint4 c, uint2 k)
{
    const ulong p0 = (ulong)0xD2511F53u * c.x;
    const ulong p1 = (ulong)0xCD9E8D57u * c.z;
    return (uint4)((uint)(p1 >> 32) ^ c.y ^ k.x, (uint)p1,
                   (uint)(p0 >> 32) ^ c.w ^ k.y, (uint)p0);
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
