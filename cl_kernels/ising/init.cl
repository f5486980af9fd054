## Initial spins in the natural layout (R, Lz, Ly, Lx) int8, for every backend.
## mode 0: random, spin -1 where bit 31 of the site's Philox word for the
## reserved sweep t = 2^63 - 1 is set (counter (g, r, 0xFFFFFFFF, 0xFFFFFFFE + c));
## mode 1: all +1; mode 2: all -1. Replica r and group g count from r0 and g0:
## the global replica and group indices of a share of an ensemble or lattice
## split over MPI ranks (0, 0 on one device).
## params: dim, Lx, Ly, Lz
<%namespace name="philox" file="/rng/philox.cl"/>
<%namespace name="ic" file="/ising/common.cl"/>
${ic.lattice("IN_", dim, Lx, Ly, Lz)}
${philox.philox4x32_10("init_")}
${ic.philox_counter("init_")}

// One item per (replica, colour, group of 4 compact sites).
__kernel void ising_init_spins(__global char *out, const uint R, const uint mode,
                               const uint k0, const uint k1, const uint r0, const uint g0)
{
    const size_t t = get_global_id(0);
    if (t >= (size_t)R * 2u * IN_G) return;
    // t = (2 r + c) G + g; remainders as x - q d (Oclgrind cannot check LLVM's div/rem freeze)
    const uint rc = (uint)(t / IN_G), g = (uint)(t - (size_t)rc * IN_G);
    const uint r = rc >> 1, c = rc & 1u;
    const uint4 v = init_philox(init_counter(g0 + g, r0 + r, 0xFFFFFFFFu, 0x7FFFFFFFu, c), (uint2)(k0, k1));
    const uint w[4] = {v.x, v.y, v.z, v.w};
    __global char *s = out + (size_t)r * IN_N;
    for (uint q = 0; q < 4u; ++q) {
        const uint n = 4u * g + q;
        if (n >= IN_HALF) break;
        const uint row = n / IN_S, z = row / IN_LY, y = row - z * IN_LY;
        const uint x = 2u * (n - row * IN_S) + ((c + y + z) & 1u);
        const char v0 = mode == 0u ? ((w[q] >> 31) ? -1 : 1) : (mode == 1u ? 1 : -1);
        s[(row * IN_LX) + x] = v0;
    }
}
