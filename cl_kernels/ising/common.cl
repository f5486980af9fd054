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

## philox_lanes(prefix, n): Philox4x32-10 on n counters at once, from rng/philox.cl
## (the kernels that import this file call it by this name).
<%namespace name="philox" file="/rng/philox.cl"/>\
<%def name="philox_lanes(prefix, n)">${philox.philox_lanes(prefix, n)}</%def>
