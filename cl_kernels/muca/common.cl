## Shared pieces of the multicanonical kernels (conventions in clphys/muca/geometry.py).
##
## geometry(dim, L): #defines of the lattice of one walker, bit packed:
##   MU_L, MU_N (spins), MU_ROWS (rows of L spins along x: L^(dim-1)), MU_WPR
##   (32-bit words per row), MU_WORDS (words per walker), MU_NBINS (energy bins,
##   E = 4 bin - dim N), MU_NCLS (2 dim + 1 threshold classes), MU_NM (|M|/2 bins),
##   MU_DIM. Spin (x, row) is bit x % 32 of word row * MU_WPR + x / 32 (1 = up).
## counters(): the Philox counters. Every random word is a pure function of
##   (seed, counter), counters use GLOBAL walker indices and the global step t:
##     acceptance of walker g at step t: word t % 4 of (t/4 lo, t/4 hi, g, ACCEPT)
##     site of step t (shared by all walkers): word t % 4 of (t/4 lo, t/4 hi, 0, SITE)
##     initial spins, word w of walker g: word w % 4 of (w/4, 0, g, INIT)
<%def name="geometry(dim, L)">
<%
    if dim not in (2, 3):
        raise ValueError("muca: dim must be 2 or 3, got %r" % (dim,))
    if L < 2 or L % 2 or L > (1024 if dim == 2 else 256):
        raise ValueError("muca: L must be even, >= 2 and <= 1024 (2D) / 256 (3D), got %r" % (L,))
    N = L ** dim
    rows = L ** (dim - 1)
    wpr = (L + 31) // 32
%>
#define MU_DIM ${dim}
#define MU_L ${L}u
#define MU_N ${N}u
#define MU_ROWS ${rows}u
#define MU_WPR ${wpr}u
#define MU_WORDS ${rows * wpr}u
#define MU_NBINS ${dim * N // 2 + 1}u
#define MU_NCLS ${2 * dim + 1}u
#define MU_NM ${N // 2 + 1}u
// bits of the last word of a row that hold spins
#define MU_LAST_MASK ${"0xFFFFFFFFu" if L % 32 == 0 else "0x%Xu" % ((1 << (L % 32)) - 1)}
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
