## Multicanonical walkers, the small kernels: random initial spins, energy and
## magnetization of every walker from its spins, and the shared site sequence.
## Walker-sliced lattice: bit i of lattice[s * G + grp] is walker 32 grp + i at site s.
## params: dim, L
<%namespace name="philox" file="/rng/philox.cl"/>
<%namespace name="mc" file="/muca/common.cl"/>
${mc.geometry(dim, L)}
${philox.philox4x32_10("mu_")}
${mc.counters()}

// Random spins: word (s, grp) is word s % 4 of Philox((s / 4, group0 + grp, 0, INIT)),
// the bits of walkers >= total cleared. One work item per 4 sites of a group.
__kernel void muca_randomize(__global uint *lattice, const uint G, const uint group0, const uint total,
                             const uint k0, const uint k1)
{
    const uint id = get_global_id(0);
    const uint quad = id / G, grp = id - quad * G;
    if (quad >= (MU_N + 3u) / 4u) return;
    const uint gg = group0 + grp;
    // walkers of this word (none in the words that pad the lattice to whole work groups)
    // (signed: clang makes a saturating subtraction of the unsigned form, which Oclgrind lacks)
    const long real = (long)total - 32l * (long)gg;
    const uint mask = real >= 32 ? 0xFFFFFFFFu : real > 0 ? (1u << (uint)real) - 1u : 0u;
    const uint4 r = mu_philox((uint4)(quad, gg, 0u, MU_TAG_INIT), (uint2)(k0, k1));
    const uint v[4] = {r.x, r.y, r.z, r.w};
    for (uint q = 0; q < 4u; ++q) {
        const uint s = 4u * quad + q;
        if (s < MU_N) lattice[(size_t)s * G + grp] = v[q] & mask;
    }
}

// Energy bin (dim N - aligned bonds) / 2 and magnetization of every walker j < W.
__kernel void muca_measure(__global const uint *lattice, __global int *bins, __global int *mags,
                           const uint W, const uint G)
{
    const uint j = get_global_id(0);
    if (j >= W) return;
    __global const uint *col = lattice + (j >> 5);
    const uint lane = j & 31u;
    uint aligned = 0, up = 0;
    for (uint row = 0; row < MU_N / MU_L; ++row) {
        const uint z = row / MU_L, y = row - z * MU_L;
        const uint row_y = z * MU_L + (y + 1u == MU_L ? 0u : y + 1u);
% if dim == 3:
        const uint row_z = (z + 1u == MU_L ? 0u : z + 1u) * MU_L + y;
% endif
        for (uint x = 0; x < MU_L; ++x) {
            const uint s = (col[(size_t)(row * MU_L + x) * G] >> lane) & 1u;
            up += s;
            const uint xr = x + 1u == MU_L ? 0u : x + 1u;
            aligned += s == ((col[(size_t)(row * MU_L + xr) * G] >> lane) & 1u);
            aligned += s == ((col[(size_t)(row_y * MU_L + x) * G] >> lane) & 1u);
% if dim == 3:
            aligned += s == ((col[(size_t)(row_z * MU_L + x) * G] >> lane) & 1u);
% endif
        }
    }
    bins[j] = (int)((MU_DIM * MU_N - aligned) / 2u);
    mags[j] = 2 * (int)up - (int)MU_N;
}

inline uint mu_site(uint word)
{
    return mul_hi(word, MU_N);
}

// Step descriptors of steps t0 .. t0 + n - 1, MU_SPAN words each: the byte offsets
// (site * stride: stride = 4 x the words of one site, in the lattice or in a work
// group's local copy) of the site and of its neighbours x-1, x+1, y-1, y+1 (, z-1,
// z+1); bit 31
// of the first is set when one of these sites was flipped by a step since the start
// of the previous Philox block (the update kernel loads a block's words a block
// ahead and reloads a flagged step's words after the flips before it). Step t goes
// to slot t - 4 floor(t0 / 4); one work item per Philox block.
__kernel void muca_sites(__global uint *desc, const uint t_lo, const uint t_hi, const uint n,
                         const uint k0, const uint k1, const uint stride)
{
    const ulong t0 = ((ulong)t_hi << 32) | t_lo;
    const ulong block = (t0 >> 2) + get_global_id(0);
    if (block > ((t0 + n - 1u) >> 2)) return;
    const uint4 r = mu_philox(mu_step_counter(block << 2, 0u, MU_TAG_SITE), (uint2)(k0, k1));
    const uint4 rp = block ? mu_philox(mu_step_counter((block - 1u) << 2, 0u, MU_TAG_SITE), (uint2)(k0, k1))
                           : (uint4)(0xFFFFFFFFu);
    const uint cur[4] = {mu_site(r.x), mu_site(r.y), mu_site(r.z), mu_site(r.w)};
    const uint none = 0xFFFFFFFFu;
    const uint prev[4] = {block ? mu_site(rp.x) : none, block ? mu_site(rp.y) : none,
                          block ? mu_site(rp.z) : none, block ? mu_site(rp.w) : none};
    for (uint q = 0; q < 4u; ++q) {
        const ulong t = (block << 2) + q;
        if (t < t0 || t >= t0 + n) continue;
        const uint s = cur[q];
        const uint row = s / MU_L, z = row / MU_L;
        const uint x = s - row * MU_L, y = row - z * MU_L;
        const uint xm = x == 0u ? MU_L - 1u : x - 1u, xp = x + 1u == MU_L ? 0u : x + 1u;
        const uint ym = y == 0u ? MU_L - 1u : y - 1u, yp = y + 1u == MU_L ? 0u : y + 1u;
        uint nb[MU_SPAN];
        nb[0] = s;
        nb[1] = row * MU_L + xm;
        nb[2] = row * MU_L + xp;
        nb[3] = (z * MU_L + ym) * MU_L + x;
        nb[4] = (z * MU_L + yp) * MU_L + x;
% if dim == 3:
        const uint zm = z == 0u ? MU_L - 1u : z - 1u, zp = z + 1u == MU_L ? 0u : z + 1u;
        nb[5] = (zm * MU_L + y) * MU_L + x;
        nb[6] = (zp * MU_L + y) * MU_L + x;
% endif
        uint hazard = 0u;
        for (uint a = 0; a < MU_SPAN; ++a) {
            for (uint p = 0; p < 4u; ++p) hazard |= nb[a] == prev[p];
            for (uint p = 0; p < q; ++p) hazard |= nb[a] == cur[p];
        }
        __global uint *out = desc + (size_t)(t - ((t0 >> 2) << 2)) * MU_SPAN;
        for (uint a = 0; a < MU_SPAN; ++a) out[a] = nb[a] * stride;     // (bytes)
        out[0] |= hazard << 31;
    }
}
