## Philox4x32-10 (Salmon et al., SC'11), counter based: four 32-bit words are a
## pure function of a 128-bit counter and a 64-bit key; 10 rounds, its authors'
## margin (7 is the fewest that pass BigCrush).
## Emits: uint4 ${prefix}philox(uint4 ctr, uint2 key)
## The rounds work on scalars. Each 32x32 -> 64-bit product is one widening
## multiply on GPUs and, unlike mul_hi, stays fast on PoCL (3x in the Ising
## blocks kernel there). Every Philox in clphys is rendered from this file.
## The multipliers and the Weyl key increments, shared by both forms:
<%! M0, M1, W0, W1 = "0xD2511F53u", "0xCD9E8D57u", "0x9E3779B9u", "0xBB67AE85u" %>\
<%def name="philox4x32_10(prefix)">

inline uint4 ${prefix}philox(uint4 ctr, uint2 key)
{
    uint c0 = ctr.x, c1 = ctr.y, c2 = ctr.z, c3 = ctr.w;
    uint k0 = key.x, k1 = key.y;
% for r in range(10):
%   if r:
    k0 += ${W0}; k1 += ${W1};
%   endif
    {
        const ulong p0 = (ulong)${M0} * c0, p1 = (ulong)${M1} * c2;
        c0 = (uint)(p1 >> 32) ^ c1 ^ k0; c1 = (uint)p1; c2 = (uint)(p0 >> 32) ^ c3 ^ k1; c3 = (uint)p0;
    }
% endfor
    return (uint4)(c0, c1, c2, c3);
}

</%def>
##
## philox_lanes(prefix, n): Philox4x32-10 on n counters at once (n = 2, 4, 8)
## whose words 1..3 are shared: counter j is (c0.s_j, c1, c2, c3). Emits
## void ${prefix}philox_lanes(uint${n} c0, uint c1, uint c2, uint c3, uint2 k,
##                            uint${n} *x, uint${n} *y, uint${n} *z, uint${n} *w)
## giving component 0..3 of every counter in x, y, z, w; bit-identical to
## philox4x32_10 above. The lanes are SIMD on CPUs (PoCL does not
## vectorise the scalar form across work items) and independent chains on GPUs.
<%def name="philox_lanes(prefix, n)">
// hi and lo words of the 32 x 32 -> 64-bit products m * v of every lane: one
// multiply-wide per lane on GPUs, and 4x faster than mul_hi + mul on PoCL
// (vpmuludq). Widened and narrowed lane by lane in vector literals, not by
// convert_ calls: PoCL's built-in library may be built for AVX-512 while its
// compiler targets AVX2 (the pip PoCL's LLVM 14 on AMD Zen 4), and then a
// built-in call on a 512-bit vector (convert_ulong8) returns garbage. (as_
// casts and swizzles instead crash Oclgrind 21.10.)
<% lanes = ["s%x" % j for j in range(n)] %>
inline void ${prefix}mulw(uint m, uint${n} v, uint${n} *hi, uint${n} *lo)
{
    const ulong${n} p = (ulong${n})(${", ".join("v." + q for q in lanes)}) * (ulong${n})(m);
    *hi = (uint${n})(${", ".join("(uint)(p.%s >> 32)" % q for q in lanes)});
    *lo = (uint${n})(${", ".join("(uint)p." + q for q in lanes)});
}

inline void ${prefix}philox_lanes(uint${n} c0, uint c1, uint c2, uint c3, uint2 k,
                                  uint${n} *x, uint${n} *y, uint${n} *z, uint${n} *w)
{
    // round 1: words 1..3 are the same in every lane
    const ulong p1 = (ulong)${M1} * c2;
    uint${n} a = (uint${n})((uint)(p1 >> 32) ^ c1 ^ k.x), b = (uint${n})(uint)p1, c, d;
    ${prefix}mulw(${M0}, c0, &c, &d);
    c ^= (uint${n})(c3 ^ k.y);
% for r in range(1, 10):
    k += (uint2)(${W0}, ${W1});
    {
        uint${n} h1, l1, h0, l0;
        ${prefix}mulw(${M1}, c, &h1, &l1);
        ${prefix}mulw(${M0}, a, &h0, &l0);
        a = h1 ^ b ^ (uint${n})k.x;
        b = l1;
        c = h0 ^ d ^ (uint${n})k.y;
        d = l0;
    }
% endfor
    *x = a; *y = b; *z = c; *w = d;
}
</%def>\
