## Checkerboard Metropolis, one int8 per spin (+1 / -1, i.e. bytes 0x01 / 0xFF),
## the two colours in separate arrays: byte n of colour c of replica r is at
## (c R + r) HALF + n, n = row S + i the compact index (clphys/ising/backends.py),
## row = z Ly + y. Neighbours of a colour-c site (compact i of row y, z) are in
## the other colour: i in the rows y +- 1 (and z +- 1), i in its own row, and
## i + 1 (row parity (c + y + z) odd) or i - 1 (even) in its own row. A sweep
## reads only the other colour's array and writes its own (no data races).
##
## ising_cb_sweep: one work item per (replica, group of 4 compact sites of the
## colour): 4 words (one Philox call, or 4 steps of its own LCG/xorshift32
## state), any even sides.
## ising_cb_sweep16 (S = Lx/2 a multiple of 16): one work item per 16 compact
## sites of a row (4 groups): vector loads of its own and the other colour's
## neighbour words, neighbour counts of the 16 bytes at once (SWAR), per site a
## table load and a compare, one vector store.
## ising_cb_split / ising_cb_merge: natural layout (R, Lz, Ly, Lx) <-> colours.
## r0: the global index of replica 0 in the Philox counters (a share of an
## ensemble split over MPI ranks; 0 on one device).
## params: dim, Lx, Ly, Lz, rng ("philox" | "lcg" | "xorshift32"), wg (None or the
## work-group size), rwg (work-group size of the sums kernel, a power of two)
<%namespace name="philox" file="/rng/philox.cl"/>
<%namespace name="lcg" file="/rng/lcg.cl"/>
<%namespace name="xorshift" file="/rng/xorshift.cl"/>
<%namespace name="red" file="/common/reduce.cl"/>
<%namespace name="ic" file="/ising/common.cl"/>
<%
    if rng not in ("philox", "lcg", "xorshift32"):
        raise ValueError("checkerboard.cl: rng must be philox, lcg or xorshift32, got %r" % (rng,))
    S = Lx // 2
    ROWS = Ly * Lz
    NEXT = "lcg32" if rng == "lcg" else "xorshift32"
%>
${ic.lattice("CB_", dim, Lx, Ly, Lz)}
% if rng == "philox":
${philox.philox4x32_10("cb_")}
${ic.philox_counter("cb_")}
% elif rng == "lcg":
${lcg.lcg32("cb_")}
% else:
${xorshift.xorshift32("cb_")}
% endif
${red.wg_reduce("cbs_", "long", rwg, "return a + b;")}

// Row, y, z and the other-colour horizontal neighbour ih of compact site n of
// colour c. Remainders as x - q d (Oclgrind cannot check LLVM's div/rem `freeze`).
#define CB_SITE(n, c) \
    const uint row = (n) / CB_S, i = (n) - row * CB_S, z = row / CB_LY, y = row - z * CB_LY; \
    const uint ih = (((c) + y + z) & 1u) ? (i + 1u == CB_S ? 0u : i + 1u) : (i == 0u ? CB_S - 1u : i - 1u); \
    const uint yp = y + 1u == CB_LY ? 0u : y + 1u, ym = y == 0u ? CB_LY - 1u : y - 1u;

// states: (R, 2, G) generator states (unused with Philox).
<% sweep_args = ("__global char *spins, __global const uint *thr, const uint colour, "
                  "const uint R, const uint k0, const uint k1, const uint t_lo, "
                  "const uint t_hi, __global uint *states, const uint r0") %>
% if wg:
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ising_cb_sweep(${sweep_args})
% else:
__kernel void ising_cb_sweep(${sweep_args})
% endif
{
    const size_t t = get_global_id(0);
    if (t >= (size_t)R * CB_G) return;
    const uint r = (uint)(t / CB_G), g = (uint)(t - (size_t)r * CB_G);
% if rng == "philox":
    const uint4 v = cb_philox(cb_counter(g, r0 + r, t_lo, t_hi, colour), (uint2)(k0, k1));
    const uint w[4] = {v.x, v.y, v.z, v.w};
% else:
    const size_t si = ((size_t)r * 2u + colour) * CB_G + g;
    uint st = states[si];
    uint w[4];
    for (uint q = 0; q < 4u; ++q) w[q] = cb_${NEXT}_next(&st);
    states[si] = st;
% endif
    __global char *own = spins + ((size_t)colour * R + r) * CB_HALF;
    __global const char *oth = spins + ((size_t)(1u - colour) * R + r) * CB_HALF;
    __global const uint *th = thr + r * 2u * CB_NCLS;
    for (uint q = 0; q < 4u; ++q) {
        const uint n = 4u * g + q;
        if (n >= CB_HALF) break;
        CB_SITE(n, colour)
        const char me = own[n];
        uint k = (oth[row * CB_S + i] == me) + (oth[row * CB_S + ih] == me)
               + (oth[(z * CB_LY + yp) * CB_S + i] == me) + (oth[(z * CB_LY + ym) * CB_S + i] == me);
% if dim == 3:
        const uint zp = z + 1u == CB_LZ ? 0u : z + 1u, zm = z == 0u ? CB_LZ - 1u : z - 1u;
        k += (oth[(zp * CB_LY + y) * CB_S + i] == me) + (oth[(zm * CB_LY + y) * CB_S + i] == me);
% endif
        if (w[q] <= th[(me < 0 ? CB_NCLS : 0u) + k]) own[n] = -me;
    }
}

% if S % 16 == 0:
<% NCH = S // 16 %>
// One work item per (replica, row, 16 compact sites = 4 Philox groups). Spins
// are bytes 0x01 / 0xFF, so (s ^ n) & 2 is 2 for unlike neighbours: summed per
// byte over the 2 dim neighbour words without carries between bytes; a flip
// is s ^ 0xFE.
% if wg:
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ising_cb_sweep16(${sweep_args})
% else:
__kernel void ising_cb_sweep16(${sweep_args})
% endif
{
    const size_t t = get_global_id(0);
    if (t >= (size_t)R * ${ROWS * NCH}u) return;
    const uint r = (uint)(t / ${ROWS * NCH}u), rem = (uint)(t - (size_t)r * ${ROWS * NCH}u);
    const uint row = rem / ${NCH}u, ch = rem - row * ${NCH}u;
    const uint z = row / CB_LY, y = row - z * CB_LY;
    const uint yp = y + 1u == CB_LY ? 0u : y + 1u, ym = y == 0u ? CB_LY - 1u : y - 1u;
    __global uint *own = (__global uint *)(spins + ((size_t)colour * R + r) * CB_HALF);
    __global const uint *oth = (__global const uint *)(spins + ((size_t)(1u - colour) * R + r) * CB_HALF);
    __global const uint *orow = oth + row * ${S // 4}u;
    uint4 S = vload4(ch, own + row * ${S // 4}u);
    const uint4 O = vload4(ch, orow);
    const uint4 U = vload4(ch, oth + (z * CB_LY + ym) * ${S // 4}u);
    const uint4 D = vload4(ch, oth + (z * CB_LY + yp) * ${S // 4}u);
    // the horizontal neighbours i + 1 (odd rows) or i - 1: the other colour's
    // chunk shifted by one byte (64-bit shifts: LLVM makes funnel shifts of
    // (a << 8) | (b >> 24), which Oclgrind cannot run)
#define CB_SH(hi, lo, n) ((uint)(upsample(hi, lo) >> (n)))
    uint4 H;
    if ((colour + y + z) & 1u) {
        const uint next = orow[ch + 1u == ${NCH}u ? 0u : 4u * ch + 4u];
        H = (uint4)(CB_SH(O.y, O.x, 8), CB_SH(O.z, O.y, 8), CB_SH(O.w, O.z, 8), CB_SH(next, O.w, 8));
    } else {
        const uint prev = orow[ch == 0u ? ${S // 4 - 1}u : 4u * ch - 1u];
        H = (uint4)(CB_SH(O.x, prev, 24), CB_SH(O.y, O.x, 24), CB_SH(O.z, O.y, 24), CB_SH(O.w, O.z, 24));
    }
#undef CB_SH
    const uint4 TWO = (uint4)(0x02020202u);
    uint4 unlike2 = ((S ^ O) & TWO) + ((S ^ H) & TWO) + ((S ^ U) & TWO) + ((S ^ D) & TWO);
% if dim == 3:
    const uint zp = z + 1u == CB_LZ ? 0u : z + 1u, zm = z == 0u ? CB_LZ - 1u : z - 1u;
    unlike2 += ((S ^ vload4(ch, oth + (zm * CB_LY + y) * ${S // 4}u)) & TWO)
             + ((S ^ vload4(ch, oth + (zp * CB_LY + y) * ${S // 4}u)) & TWO);
% endif
    // class a NCLS + k per byte (a = 1 for spin -1, bit 1 of 0xFF; k = 2 dim - unlike)
    const uint4 cls = ((S >> 1) & (uint4)(0x01010101u)) * CB_NCLS + (uint4)(${2 * dim}u * 0x01010101u)
                    - (unlike2 >> 1);
    const uint g = row * ${S // 4}u + 4u * ch;
% if rng == "philox":
    uint w[16];
%   for q in range(4):
    {
        const uint4 v = cb_philox(cb_counter(g + ${q}u, r0 + r, t_lo, t_hi, colour), (uint2)(k0, k1));
        w[${4 * q}] = v.x; w[${4 * q + 1}] = v.y; w[${4 * q + 2}] = v.z; w[${4 * q + 3}] = v.w;
    }
%   endfor
% else:
    uint w[16];
    const size_t si = ((size_t)r * 2u + colour) * CB_G + g;
    for (uint q = 0; q < 4u; ++q) {
        uint st = states[si + q];
        for (uint e = 0; e < 4u; ++e) w[4u * q + e] = cb_${NEXT}_next(&st);
        states[si + q] = st;
    }
% endif
    __global const uint *th = thr + r * 2u * CB_NCLS;
    uint4 flip = (uint4)(0u);
% for m, comp in enumerate("xyzw"):
%   for j in range(4):
    flip.${comp} |= w[${4 * m + j}] <= th[(cls.${comp} >> ${8 * j}) & 0xFFu] ? 0xFEu << ${8 * j} : 0u;
%   endfor
% endfor
    vstore4(S ^ flip, ch, own + row * ${S // 4}u);
}
% endif

// Natural layout (R, Lz, Ly, Lx) <-> colour arrays, one work item per site.
<%def name="split_index()">
    const size_t t = get_global_id(0);
    if (t >= (size_t)R * CB_N) return;
    const uint r = (uint)(t / CB_N), s = (uint)(t - (size_t)r * CB_N);
    const uint row = s / CB_LX, x = s - row * CB_LX, z = row / CB_LY, y = row - z * CB_LY;
    const size_t at = (((x + y + z) & 1u) * (size_t)R + r) * CB_HALF + row * CB_S + x / 2u;
</%def>
__kernel void ising_cb_split(__global const char *nat, __global char *spins, const uint R)
{
${split_index()}
    spins[at] = nat[t];
}

__kernel void ising_cb_merge(__global const char *spins, __global char *nat, const uint R)
{
${split_index()}
    nat[t] = spins[at];
}

// Partial sums per (replica, part), as pairs of longs, over the colour-0
// sites (every bond has exactly one colour-0 end): sum of s_i s_j over their
// bonds, sum of s over both colours. Global size R * parts * rwg.
__kernel __attribute__((reqd_work_group_size(${rwg}, 1, 1)))
void ising_cb_sums(__global const char *spins, __global long *partial, const uint parts, const uint R)
{
    __local long scratch[${rwg}];
    const uint grp = get_group_id(0), lid = get_local_id(0);
    const uint r = grp / parts, j = grp - r * parts;
    __global const char *s0 = spins + (size_t)r * CB_HALF, *oth = spins + ((size_t)R + r) * CB_HALF;
    long bond = 0, mag = 0;
    for (uint n = j * ${rwg}u + lid; n < CB_HALF; n += parts * ${rwg}u) {
        CB_SITE(n, 0u)
        const int me = s0[n];
        int nb = oth[row * CB_S + i] + oth[row * CB_S + ih] + oth[(z * CB_LY + yp) * CB_S + i]
               + oth[(z * CB_LY + ym) * CB_S + i];
% if dim == 3:
        const uint zp = z + 1u == CB_LZ ? 0u : z + 1u, zm = z == 0u ? CB_LZ - 1u : z - 1u;
        nb += oth[(zp * CB_LY + y) * CB_S + i] + oth[(zm * CB_LY + y) * CB_S + i];
% endif
        bond += me * nb;
        mag += me + oth[n];
    }
    bond = cbs_wg_reduce(bond, lid, scratch);
    mag = cbs_wg_reduce(mag, lid, scratch);
    if (lid == 0u) {
        partial[2 * grp] = bond;
        partial[2 * grp + 1] = mag;
    }
}
