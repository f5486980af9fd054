## Noisy Kuramoto model (clphys.sde.kuramoto):
##     gamma dtheta_i = (omega_i + sum_j K_ij sin(theta_j - theta_i)) dt + sqrt(2 gamma kT) dW_i.
## With s = sin, c = cos: sum_j K_ij sin(theta_j - theta_i) = c_i A_i - s_i B_i,
## A_i = sum_j K_ij s_j, B_i = sum_j K_ij c_j.
##
## coupling = "mean-field": K_ij = K/N, A = (K/N) S, B = (K/N) C from on-device sums
##            S = sum_j s_j, C = sum_j c_j; the update kernels also reduce the new
##            phases' partial sums (kuramoto_sums_finish completes them).
## coupling = "uniform" | "matrix": kuramoto_pairs computes A_i, B_i from tiles of
##            (s_j, c_j) in local memory (computed once per j per step by the update
##            kernels), two FMAs per pair; "matrix" reads K_ij transposed, Kt[j * N + i].
##
## Each update work item moves 4 consecutive oscillators with one Philox block:
## oscillator i takes component i % 4 of the Box-Muller pairs of
## philox((i / 4, step, step >> 32, 2), key), in every kernel variant.
##
## sin and cos, not sincos: Oclgrind's checker cannot follow sincos' private pointer (compilers
## fuse the pair anyway). Pairs live in scalar buffers through vload2/vstore2: Oclgrind
## reports stores of 2-vector literals through vector pointers as uninitialised.
## params: real, coupling, omega_array (omega per oscillator or one scalar), wg (update,
##         sums and pairs work-group size = tile length), wgf (finish work-group size)
<%namespace name="common" file="/common/prelude.cl"/>
<%namespace name="red" file="/common/reduce.cl"/>
<%namespace name="philox" file="/rng/philox.cl"/>
<%namespace name="normal" file="/rng/normal.cl"/>
<%
    if coupling not in ("mean-field", "uniform", "matrix"):
        raise ValueError("kuramoto.cl: coupling must be mean-field, uniform or matrix, got %r" % (coupling,))
    acc = "double" if dev.fp64 else "float"
    # helper names carry the variant (Oclgrind's checker mixes up same-named helpers of
    # different programs)
    P = "kur_%s_%s_%s_%d_%d_%d_" % (real, acc, coupling.replace("-", ""), int(omega_array), wg, wgf)
    mf = coupling == "mean-field"
%>
${common.prelude(real=real)}
typedef ${acc} acc_t;
typedef ${acc}2 acc2_t;
typedef ${real}2 real2_t;
#define KUR_TWO_PI ((real_t)6.283185307179586)

${philox.philox4x32_10(P)}
${normal.uniform_normal(P)}
${red.wg_reduce(P + "wg_", acc + "2", wg, "return a + b;")}
${red.wg_reduce(P + "fin_", acc + "2", wgf, "return a + b;")}

inline float4 ${P}normals(const uint q, const ulong step, const uint2 key)
{
    const uint4 w = ${P}philox((uint4)(q, (uint)step, (uint)(step >> 32), 2u), key);
    return (float4)(${P}box_muller(w.x, w.y), ${P}box_muller(w.z, w.w));
}

inline real_t ${P}wrap(const real_t th) { return th - KUR_TWO_PI * floor(th * (real_t)(1.0 / 6.283185307179586)); }

// Partial (sum sin, sum cos) of theta over a grid-strided share, per work group.
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void kuramoto_sums(__global const real_t *theta, const uint n, __global acc_t *partials)
{
    __local acc2_t scratch[${wg}];
    acc2_t s = (acc2_t)((acc_t)0, (acc_t)0);
    for (uint i = get_global_id(0); i < n; i += get_global_size(0)) {
        const real_t th = theta[i];
        s += (acc2_t)((acc_t)sin(th), (acc_t)cos(th));
    }
    s = ${P}wg_wg_reduce(s, get_local_id(0), scratch);
    if (get_local_id(0) == 0) vstore2(s, get_group_id(0), partials);
}

// One work group: the partials' total into out[0], and into history[slot] if slot >= 0.
__kernel __attribute__((reqd_work_group_size(${wgf}, 1, 1)))
void kuramoto_sums_finish(__global const acc_t *partials, const uint groups, __global acc_t *out,
                          __global acc_t *history, const int slot)
{
    __local acc2_t scratch[${wgf}];
    acc2_t s = (acc2_t)((acc_t)0, (acc_t)0);
    for (uint r = get_local_id(0); r < groups; r += ${wgf}u) s += vload2(r, partials);
    s = ${P}fin_wg_reduce(s, get_local_id(0), scratch);
    if (get_local_id(0) == 0) {
        vstore2(s, 0, out);
        if (slot >= 0) vstore2(s, slot, history);
    }
}

// (sin, cos) of every phase.
__kernel void kuramoto_sincos(__global const real_t *theta, const uint n, __global real_t *sc)
{
    const uint i = get_global_id(0);
    if (i >= n) return;
    const real_t th = theta[i];
    vstore2((real2_t)(sin(th), cos(th)), i, sc);
}

// Slice p = get_global_id(1) of the j range: field[p * n + i] = (sum_j K_ij s_j, sum_j K_ij c_j)
// over j in [p * chunk, min(n, (p + 1) * chunk)), through tiles of ${wg} (s_j, c_j) in local memory.
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void kuramoto_pairs(__global const real_t *sc, __global const real_t *Kt, const uint n,
                    const uint chunk, __global real_t *field)
{
    __local real2_t tile[${wg}];
    const uint i = get_global_id(0), lid = get_local_id(0), p = get_global_id(1);
    const uint j_begin = p * chunk, j_end = min(n, j_begin + chunk);
    real_t a0 = 0, b0 = 0, a1 = 0, b1 = 0;      // two chains each for latency hiding
    for (uint j0 = j_begin; j0 < j_end; j0 += ${wg}u) {
        vstore2(j0 + lid < j_end ? vload2(j0 + lid, sc) : (real2_t)((real_t)0, (real_t)0), lid, (__local real_t *)tile);
        barrier(CLK_LOCAL_MEM_FENCE);
% if coupling == "uniform":
        #pragma unroll 8
        for (uint jj = 0; jj < ${wg}u; jj += 2) {
            const real2_t u = tile[jj], w = tile[jj + 1];
            a0 += u.x; b0 += u.y;
            a1 += w.x; b1 += w.y;
        }
% else:
        const uint m = min((uint)${wg}, j_end - j0);
        if (i < n) {
            __global const real_t *kcol = Kt + (ulong)j0 * n + i;
            uint jj = 0;
            for (; jj + 1 < m; jj += 2) {
                const real_t k0 = kcol[(ulong)jj * n], k1 = kcol[(ulong)(jj + 1) * n];
                a0 = fma(k0, tile[jj].x, a0); b0 = fma(k0, tile[jj].y, b0);
                a1 = fma(k1, tile[jj + 1].x, a1); b1 = fma(k1, tile[jj + 1].y, b1);
            }
            if (jj < m) {
                const real_t k0 = kcol[(ulong)jj * n];
                a0 = fma(k0, tile[jj].x, a0); b0 = fma(k0, tile[jj].y, b0);
            }
        }
% endif
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (i < n) vstore2((real2_t)(a0 + a1, b0 + b1), (ulong)p * n + i, field);
}

<%def name="update_args()">
__global real_t *theta, __global const real_t *omega_arr, const uint n,
                      const real_t omega0, const real_t inv_gamma, const real_t coef, const real_t dt,
                      const real_t amp, const ulong step, const uint k0, const uint k1,
                      __global const acc_t *sums0, __global const acc_t *sums1,
                      __global const real_t *field, const uint n_slices,
                      __global real_t *sc, __global real_t *drift0, __global acc_t *partials\
</%def>
## The body of the update kernels: kind is euler | predict | correct. Oscillators
## 4q .. 4q+3 of q = get_global_id(0).
<%def name="update_body(kind)">
% if mf:
    __local acc2_t scratch[${wg}];
    const real_t S0 = (real_t)sums0[0], C0 = (real_t)sums0[1];
%   if kind == "correct":
    const real_t S1 = (real_t)sums1[0], C1 = (real_t)sums1[1];
%   endif
    acc2_t part = (acc2_t)((acc_t)0, (acc_t)0);
% endif
    const uint q = get_global_id(0);
    const float4 z4 = 4 * q < n ? ${P}normals(q, step, (uint2)(k0, k1)) : (float4)(0.0f);
    const float zs[4] = {z4.x, z4.y, z4.z, z4.w};
    for (uint c = 0; c < 4; ++c) {
        const uint i = 4 * q + c;
        if (i >= n) break;
        const real_t th = theta[i];
% if omega_array:
        const real_t om = omega_arr[i];
% else:
        const real_t om = omega0;
% endif
        const real_t w = amp * (real_t)zs[c];
% if mf:
        const real_t s = sin(th), co = cos(th);
        const real_t a0 = inv_gamma * (om + coef * (co * S0 - s * C0));
% else:
        real2_t f = vload2(i, field);
        for (uint p = 1; p < n_slices; ++p) f += vload2((ulong)p * n + i, field);
%   if kind == "correct":
        const real_t a0 = drift0[i];
%   else:
        const real_t s = sin(th), co = cos(th);
        const real_t a0 = inv_gamma * (om + coef * (co * f.x - s * f.y));
%   endif
% endif
% if kind == "euler":
        const real_t th1 = ${P}wrap(th + a0 * dt + w);
% elif kind == "predict":
        const real_t th1 = th + a0 * dt + w;          // the predictor, not stored
% else:
        const real_t ty = th + a0 * dt + w;           // the same predictor again (same Gaussian)
        const real_t ts = sin(ty), tc = cos(ty);
%   if mf:
        const real_t a1 = inv_gamma * (om + coef * (tc * S1 - ts * C1));
%   else:
        const real_t a1 = inv_gamma * (om + coef * (tc * f.x - ts * f.y));
%   endif
        const real_t th1 = ${P}wrap(th + (real_t)0.5 * dt * (a0 + a1) + w);
% endif
% if kind != "predict":
        theta[i] = th1;
% endif
        const real_t s1 = sin(th1), c1 = cos(th1);
% if mf:
        part += (acc2_t)((acc_t)s1, (acc_t)c1);
% else:
        vstore2((real2_t)(s1, c1), i, sc);
%   if kind == "predict":
        drift0[i] = a0;
%   endif
% endif
    }
% if mf:
    part = ${P}wg_wg_reduce(part, get_local_id(0), scratch);
    if (get_local_id(0) == 0) vstore2(part, get_group_id(0), partials);
% endif
</%def>

// Euler-Maruyama step.
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void kuramoto_euler(${update_args()})
{
${update_body("euler")}
}

// SRK2 predictor: the coupling at the predicted phases needs their (s, c) or sums.
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void kuramoto_predict(${update_args()})
{
${update_body("predict")}
}

// SRK2 corrector, with the same Gaussians as the predictor.
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void kuramoto_correct(${update_args()})
{
${update_body("correct")}
}
