## Checkerboard Metropolis, one int8 per spin, layout (R, Lz, Ly, Lx).
## One work item per (replica, group of 4 compact sites of the colour): it draws
## 4 words (one Philox call, or 4 steps of its own LCG/xorshift32 state) and
## updates those 4 sites. Conventions in clphys/ising/backends.py.
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

// states: (R, 2, G) generator states (unused with Philox).
<% sweep_args = ("__global char *spins, __global const uint *thr, const uint colour, "
                  "const uint R, const uint k0, const uint k1, const uint t_lo, "
                  "const uint t_hi, __global uint *states") %>
% if wg:
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ising_cb_sweep(${sweep_args})
% else:
__kernel void ising_cb_sweep(${sweep_args})
% endif
{
    const size_t t = get_global_id(0);
    if (t >= (size_t)R * CB_G) return;
    // quotient and remainder as x - q d: Oclgrind cannot check LLVM's div/rem `freeze`
    const uint r = (uint)(t / CB_G), g = (uint)(t - (size_t)r * CB_G);
% if rng == "philox":
    const uint4 v = cb_philox(cb_counter(g, r, t_lo, t_hi, colour), (uint2)(k0, k1));
    const uint w[4] = {v.x, v.y, v.z, v.w};
% else:
    const size_t si = ((size_t)r * 2u + colour) * CB_G + g;
    uint st = states[si];
    uint w[4];
    for (uint q = 0; q < 4u; ++q) w[q] = cb_${"lcg32" if rng == "lcg" else "xorshift32"}_next(&st);
    states[si] = st;
% endif
    __global char *s = spins + (size_t)r * CB_N;
    __global const uint *th = thr + r * 2u * CB_NCLS;
    for (uint q = 0; q < 4u; ++q) {
        const uint n = 4u * g + q;
        if (n >= CB_HALF) break;
        const uint row = n / CB_S, z = row / CB_LY, y = row - z * CB_LY;
        const uint x = 2u * (n - row * CB_S) + ((colour + y + z) & 1u);
        const uint xp = x + 1u == CB_LX ? 0u : x + 1u, xm = x == 0u ? CB_LX - 1u : x - 1u;
        const uint yp = y + 1u == CB_LY ? 0u : y + 1u, ym = y == 0u ? CB_LY - 1u : y - 1u;
        const uint base = z * CB_LY * CB_LX;
        const char me = s[base + y * CB_LX + x];
        uint k = (s[base + y * CB_LX + xp] == me) + (s[base + y * CB_LX + xm] == me)
               + (s[base + yp * CB_LX + x] == me) + (s[base + ym * CB_LX + x] == me);
% if dim == 3:
        const uint zp = z + 1u == CB_LZ ? 0u : z + 1u, zm = z == 0u ? CB_LZ - 1u : z - 1u;
        k += (s[(zp * CB_LY + y) * CB_LX + x] == me) + (s[(zm * CB_LY + y) * CB_LX + x] == me);
% endif
        if (w[q] <= th[(me < 0 ? CB_NCLS : 0u) + k]) s[base + y * CB_LX + x] = -me;
    }
}

// Partial sums per (replica, part), as pairs of longs: sum over bonds s_i s_j,
// sum s_i. Global size R * parts * rwg; group (r, j) strides over the replica's sites.
__kernel __attribute__((reqd_work_group_size(${rwg}, 1, 1)))
void ising_cb_sums(__global const char *spins, __global long *partial, const uint parts)
{
    __local long scratch[${rwg}];
    const uint grp = get_group_id(0), lid = get_local_id(0);
    const uint r = grp / parts, j = grp - r * parts;
    __global const char *s = spins + (size_t)r * CB_N;
    long bond = 0, mag = 0;
    for (uint i = j * ${rwg}u + lid; i < CB_N; i += parts * ${rwg}u) {
        const uint zy = i / CB_LX, x = i - zy * CB_LX, z = zy / CB_LY, y = zy - z * CB_LY;
        const uint xp = x + 1u == CB_LX ? 0u : x + 1u, yp = y + 1u == CB_LY ? 0u : y + 1u;
        const int me = s[i];
        int nb = s[i - x + xp] + s[(z * CB_LY + yp) * CB_LX + x];
% if dim == 3:
        const uint zp = z + 1u == CB_LZ ? 0u : z + 1u;
        nb += s[(zp * CB_LY + y) * CB_LX + x];
% endif
        bond += me * nb;
        mag += me;
    }
    bond = cbs_wg_reduce(bond, lid, scratch);
    mag = cbs_wg_reduce(mag, lid, scratch);
    if (lid == 0u) {
        partial[2 * grp] = bond;
        partial[2 * grp + 1] = mag;
    }
}
