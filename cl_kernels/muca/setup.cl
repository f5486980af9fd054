## Multicanonical walkers, the small kernels: random initial spins, energy and
## magnetization of every walker from its spins, and the shared site sequence.
## Lattice layout: word w of walker j (device-local index) at lattice[w * W + j].
## params: dim, L
<%namespace name="philox" file="/rng/philox.cl"/>
<%namespace name="mc" file="/muca/common.cl"/>
${mc.geometry(dim, L)}
${philox.philox4x32_10("mu_")}
${mc.counters()}

// Random spins: every word is a raw Philox word (each spin up with probability 1/2).
__kernel void muca_randomize(__global uint *lattice, const uint W, const uint offset,
                             const uint k0, const uint k1)
{
    const uint j = get_global_id(0);
    if (j >= W) return;
    const uint g = offset + j;
    for (uint w = 0; w < MU_WORDS; w += 4u) {
        const uint4 r = mu_philox((uint4)(w >> 2, 0u, g, MU_TAG_INIT), (uint2)(k0, k1));
        const uint v[4] = {r.x, r.y, r.z, r.w};
        for (uint q = 0; q < 4u && w + q < MU_WORDS; ++q) {
            const uint word = w + q;
            const uint mask = (word - word / MU_WPR * MU_WPR == MU_WPR - 1u) ? MU_LAST_MASK : 0xFFFFFFFFu;
            lattice[(size_t)word * W + j] = v[q] & mask;
        }
    }
}

inline uint mu_spin(__global const uint *lattice, uint W, uint j, uint row, uint x)
{
    return (lattice[(size_t)(row * MU_WPR + (x >> 5)) * W + j] >> (x & 31u)) & 1u;
}

// Energy bin (dim N - aligned bonds) / 2 and magnetization of every walker.
__kernel void muca_measure(__global const uint *lattice, __global int *bins, __global int *mags,
                           const uint W)
{
    const uint j = get_global_id(0);
    if (j >= W) return;
    uint aligned = 0, up = 0;
    for (uint row = 0; row < MU_ROWS; ++row) {
        const uint z = row / MU_L, y = row - z * MU_L;
        const uint row_y = z * MU_L + (y + 1u == MU_L ? 0u : y + 1u);
% if dim == 3:
        const uint row_z = (z + 1u == MU_L ? 0u : z + 1u) * MU_L + y;
% endif
        for (uint x = 0; x < MU_L; ++x) {
            const uint s = mu_spin(lattice, W, j, row, x);
            up += s;
            aligned += (s == mu_spin(lattice, W, j, row, x + 1u == MU_L ? 0u : x + 1u));
            aligned += (s == mu_spin(lattice, W, j, row_y, x));
% if dim == 3:
            aligned += (s == mu_spin(lattice, W, j, row_z, x));
% endif
        }
    }
    bins[j] = (int)((MU_DIM * MU_N - aligned) / 2u);
    mags[j] = 2 * (int)up - (int)MU_N;
}

// Site descriptors of steps t0 .. t0 + n - 1 (one work item per Philox block):
//   .x = x | (x-1) << 10 | (x+1) << 20   (periodic x coordinates)
//   .y = row of the site (row = z L + y)
//   .z = row of y-1 | row of y+1 << 16,  .w = row of z-1 | row of z+1 << 16 (3D; 0 in 2D)
__kernel void muca_sites(__global uint4 *sites, const uint t_lo, const uint t_hi, const uint n,
                         const uint k0, const uint k1)
{
    const ulong t0 = ((ulong)t_hi << 32) | t_lo;
    const ulong block = (t0 >> 2) + get_global_id(0);
    if (block > ((t0 + n - 1u) >> 2)) return;
    const uint4 r = mu_philox(mu_step_counter(block << 2, 0u, MU_TAG_SITE), (uint2)(k0, k1));
    const uint v[4] = {r.x, r.y, r.z, r.w};
    for (uint q = 0; q < 4u; ++q) {
        const ulong t = (block << 2) + q;
        if (t < t0 || t >= t0 + n) continue;
        const uint s = mul_hi(v[q], MU_N);
        // remainders as x - q d: Oclgrind cannot check LLVM's div/rem `freeze`
        const uint row = s / MU_L, z = row / MU_L;
        const uint x = s - row * MU_L, y = row - z * MU_L;
        const uint xm = x == 0u ? MU_L - 1u : x - 1u, xp = x + 1u == MU_L ? 0u : x + 1u;
        const uint ym = y == 0u ? MU_L - 1u : y - 1u, yp = y + 1u == MU_L ? 0u : y + 1u;
% if dim == 3:
        const uint zm = z == 0u ? MU_L - 1u : z - 1u, zp = z + 1u == MU_L ? 0u : z + 1u;
        const uint w = (zm * MU_L + y) | ((zp * MU_L + y) << 16);
% else:
        const uint w = 0u;
% endif
        // vstore4: Oclgrind mis-tracks a (uint4)(...) built from a poison vector
        vstore4((uint4)(x | (xm << 10) | (xp << 20), row, (z * MU_L + ym) | ((z * MU_L + yp) << 16), w),
                (size_t)(t - t0), (__global uint *)sites);
    }
}

// The same sites as direct descriptors for update.cl's sites="direct" (lattice
// in local memory, `stride` = work-group size): per step `ndesc` uint4,
//   u0 = (x % 32, (x-1) % 32, (x+1) % 32, 1 << x % 32)   (bits within their words)
//   u1 = byte offsets (word * stride * 4) of the site's word and of the same x in
//        the rows y-1, y+1, then (3D) z-1 or (2D, one word per row) x % 32 again;
//   u2 = (z+1, the words of x-1 and x+1, x % 32)   (ndesc = 2 in 2D with one word
//        per row: no u2; else 3). layout = 1 (update.cl's popc, 2D L = 32): one
//   uint4 per step instead, (the byte offsets of u1, 1 << x).
<% ndesc = 2 if (dim == 2 and (L + 31) // 32 == 1) else 3 %>
__kernel void muca_sites_direct(__global uint4 *sites, const uint t_lo, const uint t_hi, const uint n,
                                const uint k0, const uint k1, const uint stride, const uint layout)
{
    const ulong t0 = ((ulong)t_hi << 32) | t_lo;
    const ulong block = (t0 >> 2) + get_global_id(0);
    if (block > ((t0 + n - 1u) >> 2)) return;
    const uint4 r = mu_philox(mu_step_counter(block << 2, 0u, MU_TAG_SITE), (uint2)(k0, k1));
    const uint v[4] = {r.x, r.y, r.z, r.w};
    const uint unit = stride * 4u;                  // bytes from one word to the next
    for (uint q = 0; q < 4u; ++q) {
        const ulong t = (block << 2) + q;
        if (t < t0 || t >= t0 + n) continue;
        const uint s = mul_hi(v[q], MU_N);
        const uint row = s / MU_L, z = row / MU_L;
        const uint x = s - row * MU_L, y = row - z * MU_L;
        const uint xm = x == 0u ? MU_L - 1u : x - 1u, xp = x + 1u == MU_L ? 0u : x + 1u;
        const uint ym = y == 0u ? MU_L - 1u : y - 1u, yp = y + 1u == MU_L ? 0u : y + 1u;
        const uint xw = x >> 5;
        __global uint *out = (__global uint *)sites + (size_t)(t - t0) * (layout ? 4u : ${4 * ndesc}u);
        const uint bit = 1u << (x & 31u);
        if (layout) {
            vstore4((uint4)((row * MU_WPR + xw) * unit, ((z * MU_L + ym) * MU_WPR + xw) * unit,
                            ((z * MU_L + yp) * MU_WPR + xw) * unit, bit), 0, out);
            continue;
        }
        vstore4((uint4)(x & 31u, xm & 31u, xp & 31u, bit), 0, out);
% if dim == 3:
        const uint zm = z == 0u ? MU_L - 1u : z - 1u, zp = z + 1u == MU_L ? 0u : z + 1u;
        const uint zm_word = ((zm * MU_L + y) * MU_WPR + xw) * unit, zp_word = ((zp * MU_L + y) * MU_WPR + xw) * unit;
% else:
        const uint zm_word = x & 31u, zp_word = 0u;      // (u1.w: x again)
% endif
        vstore4((uint4)((row * MU_WPR + xw) * unit, ((z * MU_L + ym) * MU_WPR + xw) * unit,
                        ((z * MU_L + yp) * MU_WPR + xw) * unit, zm_word), 1, out);
% if ndesc == 3:
        vstore4((uint4)(zp_word, (row * MU_WPR + (xm >> 5)) * unit, (row * MU_WPR + (xp >> 5)) * unit, x & 31u),
                2, out);
% else:
        (void)zp_word;
% endif
    }
}
