## Shared pieces of the Ising kernels (see clphys/ising/backends.py for the
## conventions: colours, compact index, Philox counter mapping).
##
## lattice(prefix, dim, Lx, Ly, Lz): #defines ${prefix}LX, LY, LZ, N (sites per
##   replica), S (compact sites per row and colour = Lx/2), HALF (sites per colour),
##   G (Philox groups of 4 per colour), NCLS (2*dim+1 threshold classes).
<%def name="lattice(prefix, dim, Lx, Ly, Lz)">
<%
    if dim not in (2, 3):
        raise ValueError("dim must be 2 or 3, got %r" % (dim,))
    if dim == 2 and Lz != 1:
        raise ValueError("Lz must be 1 in 2D")
    for side in (Lx, Ly) + ((Lz,) if dim == 3 else ()):
        if side < 2 or side % 2:
            raise ValueError("lattice sides must be even and >= 2, got %r" % ((Lx, Ly, Lz),))
%>
#define ${prefix}LX ${Lx}u
#define ${prefix}LY ${Ly}u
#define ${prefix}LZ ${Lz}u
#define ${prefix}N ${Lx * Ly * Lz}u
#define ${prefix}S ${Lx // 2}u
#define ${prefix}HALF ${Lx * Ly * Lz // 2}u
#define ${prefix}G ${(Lx * Ly * Lz // 2 + 3) // 4}u
#define ${prefix}NCLS ${2 * dim + 1}u
</%def>

## philox_counter(prefix): uint4 ${prefix}counter(uint g, uint r, uint t_lo, uint t_hi, uint c)
## = (g, r, t_lo, 2 t_hi + c): the counter of Philox group g (compact sites
## 4g..4g+3) of colour c in sweep t = t_hi 2^32 + t_lo of replica r.
<%def name="philox_counter(prefix)">
inline uint4 ${prefix}counter(uint g, uint r, uint t_lo, uint t_hi, uint c)
{
    return (uint4)(g, r, t_lo, 2u * t_hi + c);
}
</%def>

## philox_lanes(prefix, n): Philox4x32-10 on n counters at once (n = 2, 4, 8)
## whose words 1..3 are shared: counter j is (c0.s_j, c1, c2, c3). Emits
## void ${prefix}philox_lanes(uint${n} c0, uint c1, uint c2, uint c3, uint2 k,
##                            uint${n} *x, uint${n} *y, uint${n} *z, uint${n} *w)
## giving component 0..3 of every counter in x, y, z, w; bit-identical to
## philox4x32_10 in rng/philox.cl. The lanes are SIMD on CPUs (PoCL does not
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
    const ulong p1 = (ulong)0xCD9E8D57u * c2;
    uint${n} a = (uint${n})((uint)(p1 >> 32) ^ c1 ^ k.x), b = (uint${n})(uint)p1, c, d;
    ${prefix}mulw(0xD2511F53u, c0, &c, &d);
    c ^= (uint${n})(c3 ^ k.y);
% for r in range(1, 10):
    k += (uint2)(0x9E3779B9u, 0xBB67AE85u);
    {
        uint${n} h1, l1, h0, l0;
        ${prefix}mulw(0xCD9E8D57u, c, &h1, &l1);
        ${prefix}mulw(0xD2511F53u, a, &h0, &l0);
        a = h1 ^ b ^ (uint${n})k.x;
        b = l1;
        c = h0 ^ d ^ (uint${n})k.y;
        d = l0;
    }
% endfor
    *x = a; *y = b; *z = c; *w = d;
}
</%def>
