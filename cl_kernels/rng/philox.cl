## Philox4x32-10 (Salmon et al., SC'11), counter based: four 32-bit words are a
## pure function of a 128-bit counter and a 64-bit key.
## Emits: uint4 ${prefix}philox(uint4 ctr, uint2 key)
## The rounds work on scalars. Each 32x32 -> 64-bit product is one widening
## multiply on GPUs and, unlike mul_hi, stays fast on PoCL (3x in the Ising
## blocks kernel there).
<%def name="philox4x32_10(prefix)">
${philox4x32(prefix, 10)}
</%def>

## The same with another number of rounds: 10 is Philox4x32-10; fewer rounds
## exist only to measure the generator's share of a kernel's time
## (benchmarks/probe_muca2.py), never for results.
<%def name="philox4x32(prefix, rounds)">
inline uint4 ${prefix}philox(uint4 ctr, uint2 key)
{
    uint c0 = ctr.x, c1 = ctr.y, c2 = ctr.z, c3 = ctr.w;
    uint k0 = key.x, k1 = key.y;
% for r in range(rounds):
%   if r:
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
%   endif
    {
        const ulong p0 = (ulong)0xD2511F53u * c0, p1 = (ulong)0xCD9E8D57u * c2;
        c0 = (uint)(p1 >> 32) ^ c1 ^ k0; c1 = (uint)p1; c2 = (uint)(p0 >> 32) ^ c3 ^ k1; c3 = (uint)p0;
    }
% endfor
    return (uint4)(c0, c1, c2, c3);
}
</%def>
