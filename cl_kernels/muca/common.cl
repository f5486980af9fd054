## Shared pieces of the multicanonical kernels (conventions in clphys/muca/geometry.py).
##
## geometry(dim, L): #defines of the lattice: MU_L, MU_N (sites), MU_NBINS
##   (energy bins, E = 4 bin - dim N), MU_NM (|M|/2 bins), MU_DIM, MU_SPAN (words
##   per step descriptor: the site and its 2 dim neighbours). Site s = row L + x,
##   row = z L + y; walker-sliced words: bit i of lattice[s * groups + G] is the
##   spin of walker 32 G + i (1 = up).
## counters(): the Philox counters. Every random word is a pure function of
##   (seed, counter); counters use GLOBAL walker indices and the global step t:
##     acceptance of walker g at step t: word t % 4 of (t/4 lo, t/4 hi, g, ACCEPT)
##     site of step t (shared by all walkers): word t % 4 of (t/4 lo, t/4 hi, 0, SITE)
##     initial spins, word of site s and global group G: word s % 4 of (s/4, G, 0, INIT)
<%def name="geometry(dim, L)">
<%
    if dim not in (2, 3):
        raise ValueError("muca: dim must be 2 or 3, got %r" % (dim,))
    if L < 2 or L % 2 or L > (1024 if dim == 2 else 256):
        raise ValueError("muca: L must be even, >= 2 and <= 1024 (2D) / 256 (3D), got %r" % (L,))
    N = L ** dim
%>
#define MU_DIM ${dim}
#define MU_L ${L}u
#define MU_N ${N}u
#define MU_NBINS ${dim * N // 2 + 1}u
#define MU_NM ${N // 2 + 1}u
#define MU_SPAN ${2 * dim + 1}u
</%def>

<%def name="counters()">
#define MU_TAG_ACCEPT 0x6D750001u
#define MU_TAG_SITE 0x6D750002u
#define MU_TAG_INIT 0x6D750003u
inline uint4 mu_step_counter(ulong t, uint g, uint tag)
{
    return (uint4)((uint)(t >> 2), (uint)(t >> 34), g, tag);
}
</%def>
