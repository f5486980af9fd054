## Ensembles of an SDE model with additive noise (clphys.sde.Ensemble).
##
## One work item per realization (path). Work groups never straddle grid
## points: group q serves grid point q / groups_per_grid, paths
## (q % groups_per_grid) * WG + lid; items past n_paths only join reductions.
##
## params:
##   real       "float" | "double" (real_t)
##   model      Model.render_spec(real): vars, drift, forcing, noise, n_sources, periodic, has_period
##   gparams    parameters read per grid point from gpar[k * n_grid + g]
##   sparams    parameters passed as kernel scalars sde_p_<name>
##   scheme     "srk2" (Heun, same Gaussian in both stages) | "euler"
##   rng        "philox" | "xorshift32"
##   wg, wgf    work-group sizes of sde_advance and sde_moments (powers of two)
##   obs        rendered observable expressions (unwrap(v) -> sde_uw_<v index>,
##              displacement(v) -> sde_dp_<v index>)
##   hist       [(rendered expression, bins)]
##   disp       indices of the variables whose displacement the observables use
##
## Several ranks (clphys.sde.Ensemble(comm=...)): a rank holds grid points g0 .. of the
## whole grid and paths p0 .. of each of them. The Philox path index is the global one,
## (g0 + g) * rng_paths + p0 + p (rng_paths: the paths per grid point of the whole
## ensemble), so a path's noise does not depend on the split; partials of sample slots
## are kept apart (pbase) when the moments are combined across ranks at the end.
##
## Time: sde_tin[g] is the time (modulo the drive period) at the start of the launch,
## sde_tout[g] receives it at the end (work item 0 of the grid point), so t follows one
## float recurrence whatever the launch split; the host rewrites sde_tin from float64 at
## fixed absolute steps (clphys.sde.ensemble.TIME_RESYNC) so rounding cannot accumulate.
##   tag        hash of the program variant: helper and type names carry it, since Oclgrind's
##              checker mixes up same-named helpers of different programs
<%namespace name="common" file="/common/prelude.cl"/>
<%namespace name="red" file="/common/reduce.cl"/>
<%namespace name="philox" file="/rng/philox.cl"/>
<%namespace name="normal" file="/rng/normal.cl"/>
<%namespace name="xorshift" file="/rng/xorshift.cl"/>
<%
    if scheme not in ("srk2", "euler"):
        raise ValueError("ensemble.cl: scheme must be 'srk2' or 'euler', got %r" % (scheme,))
    if rng not in ("philox", "xorshift32"):
        raise ValueError("ensemble.cl: rng must be 'philox' or 'xorshift32', got %r" % (rng,))
    acc = "double" if dev.fp64 else "float"
    nv = len(model["vars"])
    ns = model["n_sources"]
    P = "sde_%s_" % tag                 # helper prefix: carries the variant
    MOM = "sde_mom_%s" % tag
    per = dict(model["periodic"])
    hist_off, total_bins = [], 0
    for _e, b in hist:
        hist_off.append(total_bins)
        total_bins += b
%>
${common.prelude(real=real)}
typedef ${acc} acc_t;
typedef struct { acc_t n, mean, m2; } ${MOM};

${philox.philox4x32_10(P)}
${normal.uniform_normal(P)}
% if rng == "xorshift32":
${xorshift.xorshift32(P)}
% endif

## The forcings at time `tv` into `dst`<k>.
<%def name="forcing_block(dst, tv)">
% if model["forcing"]:
        {
            const real_t t = ${tv};
%   for k, (name, e) in enumerate(model["forcing"]):
            ${dst}${k} = (real_t)${e};
%   endfor
        }
% endif
</%def>

## Chan et al.'s pairwise update of (count, mean, sum of squared deviations):
## no cancellation even when the mean is large against the spread.
<%
    chan = ("const acc_t n = a.n + b.n; if (n == (acc_t)0) return a; "
            "const acc_t d = b.mean - a.mean; const acc_t f = b.n / n; "
            "%s r; r.n = n; r.mean = a.mean + d * f; r.m2 = a.m2 + b.m2 + d * d * a.n * f; "
            "return r;" % MOM)
%>
${red.wg_reduce(P + "adv_", MOM, wg, chan)}
${red.wg_reduce(P + "fin_", MOM, wgf, chan)}

## The drift of every variable at the state held in registers `src`<v>, time `tv`,
## forcings `fv`<k>, into `dst`<v>; user names live only inside the block.
<%def name="drift_block(src, dst, tv, fv)">
        {
% for k, v in enumerate(model["vars"]):
            const real_t ${v} = ${src}${k};
% endfor
% for k, (name, e) in enumerate(model["forcing"]):
            const real_t ${name} = ${fv}${k};
% endfor
            const real_t t = ${tv};
% for k, d in enumerate(model["drift"]):
            ${dst}${k} = (real_t)${d};
% endfor
        }
</%def>

// Draws one standard normal, index sde_j of this path's sequence.
% if rng == "philox":
// Gaussian j is component j % 4 of the Box-Muller pairs of philox((path, j / 4, 0), key).
// The block is rotated so that .x is the next Gaussian (Oclgrind miscomputes a ?: chain
// picking a component).
#define SDE_DRAW(out) do { \
    const ulong sde_b_ = sde_j >> 2; \
    if (sde_b_ != sde_blk) { \
        const uint4 sde_w_ = ${P}philox((uint4)((uint)sde_ri, (uint)sde_b_, (uint)(sde_b_ >> 32), 0u), sde_key); \
        sde_buf = (float4)(${P}box_muller(sde_w_.x, sde_w_.y), ${P}box_muller(sde_w_.z, sde_w_.w)); \
        sde_blk = sde_b_; \
        for (uint sde_r_ = (uint)sde_j & 3u; sde_r_; --sde_r_) sde_buf = sde_buf.yzwx; \
    } \
    out = (real_t)sde_buf.x; \
    sde_buf = sde_buf.yzwx; \
    ++sde_j; \
} while (0)
% else:
// Gaussians 2m and 2m+1 are the Box-Muller pair of words 2m, 2m+1 of the path's xorshift32.
#define SDE_DRAW(out) do { \
    if ((sde_j & 1) == 0) { \
        const uint sde_w1_ = ${P}xorshift32_next(&sde_xs); \
        const uint sde_w2_ = ${P}xorshift32_next(&sde_xs); \
        const float2 sde_z_ = ${P}box_muller(sde_w1_, sde_w2_); \
        out = (real_t)sde_z_.x; \
        sde_spare = sde_z_.y; \
    } else { \
        out = (real_t)sde_spare; \
    } \
    ++sde_j; \
} while (0)
% endif

__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void sde_advance(__global real_t *sde_state, __global int *sde_laps,
                 __global const real_t *sde_origin,
                 __global uint *sde_xs_state, __global float *sde_xs_spare,
                 __global const real_t *sde_gpar, __global const real_t *sde_tin,
                 __global real_t *sde_tout, __global const real_t *sde_period,
                 const uint sde_n_paths, const uint sde_n_grid, const uint sde_groups_per_grid,
                 const real_t sde_dt, const uint sde_n_steps, const ulong sde_j0,
                 const uint sde_k0, const uint sde_k1,
% for name in sparams:
                 const real_t sde_p_${name},
% endfor
                 const ulong sde_g0, const ulong sde_p0, const ulong sde_rng_paths,
                 const int sde_observe, __global ${MOM} *sde_partials, const ulong sde_pbase,
                 __global uint *sde_hist, __global const real_t *sde_hist_range,
                 __global real_t *sde_rec, const uint sde_n_record, const uint sde_rec_slot)
{
% if obs:
    __local ${MOM} sde_scratch[${wg}];
% endif
% if hist:
    __local uint sde_lh[${total_bins}];
% endif
    const uint sde_lid = get_local_id(0);
    const uint sde_grp = get_group_id(0);
    const uint sde_g = sde_grp / sde_groups_per_grid;
    // (the remainder written out: Oclgrind cannot check the 'freeze' LLVM adds to / % pairs)
    const uint sde_p = (sde_grp - sde_g * sde_groups_per_grid) * ${wg}u + sde_lid;
    const int sde_active = sde_p < sde_n_paths;
    const ulong sde_n_total = (ulong)sde_n_grid * sde_n_paths;
    const ulong sde_i = (ulong)sde_g * sde_n_paths + sde_p;
    const ulong sde_ri = (sde_g0 + sde_g) * sde_rng_paths + sde_p0 + sde_p;   // global path index

% for k, name in enumerate(gparams):
    const real_t ${name} = sde_gpar[${k}ul * sde_n_grid + sde_g];
% endfor
% for name in sparams:
    const real_t ${name} = sde_p_${name};
% endfor
% for k in range(nv):
    real_t sde_x${k} = sde_active ? sde_state[${k}ul * sde_n_total + sde_i] : (real_t)0;
% endfor
% for k, (vi, L) in enumerate(model["periodic"]):
    int sde_lap${vi} = sde_active ? sde_laps[${k}ul * sde_n_total + sde_i] : 0;
% endfor
    // time at the start of this launch (modulo the drive period) and the period, per grid point
    real_t sde_t = sde_tin[sde_g];
% if model["has_period"]:
    const real_t sde_T = sde_period[sde_g];
% endif

    if (sde_active && sde_n_steps > 0u) {
        const real_t sde_sqdt = sqrt(sde_dt);
% for k, (vi, si, e) in enumerate(model["noise"]):
        const real_t sde_b${k} = sde_sqdt * (real_t)${e};
% endfor
        ulong sde_j = sde_j0;
% if rng == "philox":
        const uint2 sde_key = (uint2)(sde_k0, sde_k1);
        ulong sde_blk = ~(ulong)0;
        float4 sde_buf = (float4)(0.0f);
% else:
        uint sde_xs = sde_xs_state[sde_i];
        float sde_spare = sde_xs_spare[sde_i];
% endif
        // forcings are evaluated once per time: at t1 for the corrector, then carried to the next step
% for k in range(len(model["forcing"])):
        real_t sde_f${k}, sde_g${k};
% endfor
${forcing_block("sde_f", "sde_t")}
        for (uint sde_n = 0; sde_n < sde_n_steps; ++sde_n) {
% for s in range(ns):
            real_t sde_z${s};
            SDE_DRAW(sde_z${s});
% endfor
% for k in range(nv):
<%      terms = [f"sde_b{e} * sde_z{si}" for e, (vi, si, _x) in enumerate(model["noise"]) if vi == k] %>
            const real_t sde_w${k} = ${" + ".join(terms) if terms else "(real_t)0"};
% endfor
% for k in range(nv):
            real_t sde_a${k};
% endfor
${drift_block("sde_x", "sde_a", "sde_t", "sde_f")}
            real_t sde_t1 = sde_t + sde_dt;
% if model["has_period"]:
            if (sde_t1 >= sde_T) sde_t1 -= sde_T;
% endif
${forcing_block("sde_g", "sde_t1")}
% if scheme == "euler":
%   for k in range(nv):
            sde_x${k} += sde_a${k} * sde_dt + sde_w${k};
%   endfor
% else:
%   for k in range(nv):
            const real_t sde_y${k} = sde_x${k} + sde_a${k} * sde_dt + sde_w${k};
            real_t sde_c${k};
%   endfor
${drift_block("sde_y", "sde_c", "sde_t1", "sde_g")}
%   for k in range(nv):
            sde_x${k} += (real_t)0.5 * sde_dt * (sde_a${k} + sde_c${k}) + sde_w${k};
%   endfor
% endif
            sde_t = sde_t1;
% for k in range(len(model["forcing"])):
            sde_f${k} = sde_g${k};
% endfor
% for vi, L in model["periodic"]:
            {   // keep x in [0, L), count the laps
                const real_t sde_q = floor(sde_x${vi} * (real_t)${repr(1.0 / L)});
                sde_x${vi} -= sde_q * (real_t)${repr(L)};
                sde_lap${vi} += (int)sde_q;
            }
% endfor
        }
% for k in range(nv):
        sde_state[${k}ul * sde_n_total + sde_i] = sde_x${k};
% endfor
% for k, (vi, L) in enumerate(model["periodic"]):
        sde_laps[${k}ul * sde_n_total + sde_i] = sde_lap${vi};
% endfor
% if rng == "xorshift32":
        sde_xs_state[sde_i] = sde_xs;
        sde_xs_spare[sde_i] = sde_spare;
% endif
        if (sde_p == 0u) sde_tout[sde_g] = sde_t;    // every path of g has the same t
    }

    // The observing part runs in every launch and only its writes depend on
    // sde_observe: PoCL 3.1 miscompiled the barriers of the reductions below inside
    // a branch on a kernel argument (a later kernel with both observables and
    // histograms then counted stray values).
    {
%   for k in range(len(obs)):
        acc_t sde_o${k} = (acc_t)0;
%   endfor
%   for k in range(len(hist)):
        acc_t sde_h${k} = (acc_t)0;
%   endfor
        if (sde_active) {
%   for k, v in enumerate(model["vars"]):
            const real_t ${v} = sde_x${k};
%   endfor
            const real_t t = sde_t;
%   for k, (name, e) in enumerate(model["forcing"]):
            const real_t ${name} = (real_t)${e};
%   endfor
%   for vi, L in model["periodic"]:
            const acc_t sde_uw_${vi} = (acc_t)sde_lap${vi} * (acc_t)${repr(L)} + (acc_t)sde_x${vi};
%   endfor
%   for vi in disp:
<%      laps = " + (acc_t)sde_lap%d * (acc_t)%r" % (vi, per[vi]) if vi in per else "" %>
            // position now minus position at the origin (laps count from the origin)
            const acc_t sde_dp_${vi} = ((acc_t)sde_x${vi} - (acc_t)sde_origin[${vi}ul * sde_n_total + sde_i])${laps};
%   endfor
%   for k, e in enumerate(obs):
            sde_o${k} = (acc_t)${e};
%   endfor
%   for k, (e, b) in enumerate(hist):
            sde_h${k} = (acc_t)${e};
%   endfor
            if (sde_observe && sde_p < sde_n_record) {
                __global real_t *sde_r = sde_rec + (((ulong)sde_rec_slot * sde_n_grid + sde_g)
                                                    * sde_n_record + sde_p) * ${nv}u;
%   for k in range(nv):
%     if k in per:
                sde_r[${k}] = (real_t)sde_uw_${k};
%     else:
                sde_r[${k}] = sde_x${k};
%     endif
%   endfor
            }
        }
%   if obs:
%     for k in range(len(obs)):
        {
            ${MOM} sde_m;
            sde_m.n = sde_active ? (acc_t)1 : (acc_t)0;
            sde_m.mean = sde_o${k};
            sde_m.m2 = (acc_t)0;
            sde_m = ${P}adv_wg_reduce(sde_m, sde_lid, sde_scratch);
            if (sde_observe && sde_lid == 0) sde_partials[sde_pbase + (ulong)sde_grp * ${len(obs)}u + ${k}u] = sde_m;
        }
%     endfor
%   endif
%   if hist:
        // Histograms: counts in local memory, then one global atomic per nonzero bin.
        for (uint sde_b = sde_lid; sde_b < ${total_bins}u; sde_b += ${wg}u) sde_lh[sde_b] = 0u;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (sde_active) {
%     for k, (e, b) in enumerate(hist):
            {
                const acc_t sde_lo = (acc_t)sde_hist_range[${2 * k}], sde_hi = (acc_t)sde_hist_range[${2 * k + 1}];
                const acc_t sde_u = (sde_h${k} - sde_lo) / (sde_hi - sde_lo) * (acc_t)${b};
                if (sde_u >= (acc_t)0 && sde_u < (acc_t)${b})
                    atomic_inc(&sde_lh[${hist_off[k]}u + min((uint)sde_u, ${b - 1}u)]);
            }
%     endfor
        }
        barrier(CLK_LOCAL_MEM_FENCE);
%     for k, (e, b) in enumerate(hist):
        for (uint sde_b = sde_lid; sde_b < ${b}u; sde_b += ${wg}u) {
            const uint sde_c = sde_lh[${hist_off[k]}u + sde_b];
            if (sde_observe && sde_c) atomic_add(&sde_hist[(ulong)${hist_off[k]}u * sde_n_grid + (ulong)sde_g * ${b}u + sde_b], sde_c);
        }
%     endfor
%   endif
    }
}

// Per grid point and observable: combine the work groups' partial moments
// into the mean and the unbiased variance, stored at sample `slot`.
__kernel __attribute__((reqd_work_group_size(${wgf}, 1, 1)))
void sde_moments(__global const ${MOM} *partials, const uint groups_per_grid, const uint n_obs,
                 const uint n_grid, const uint slot, __global acc_t *out)
{
    __local ${MOM} scratch[${wgf}];
    const uint lid = get_local_id(0);
    const uint q = get_group_id(0);          // = g * n_obs + k
    const uint g = q / n_obs;
    const uint k = q - g * n_obs;             // not q % n_obs: see sde_advance
    ${MOM} m;
    m.n = (acc_t)0;
    m.mean = (acc_t)0;
    m.m2 = (acc_t)0;
    for (uint r = lid; r < groups_per_grid; r += ${wgf}u)
        m = ${P}fin_combine(m, partials[((ulong)g * groups_per_grid + r) * n_obs + k]);
    m = ${P}fin_wg_reduce(m, lid, scratch);
    if (lid == 0) {
        __global acc_t *o = out + (((ulong)slot * n_grid + g) * n_obs + k) * 2;
        o[0] = m.mean;
        o[1] = m.n > (acc_t)1 ? m.m2 / (m.n - (acc_t)1) : (acc_t)0;
    }
}

// Variable `var` of every path uniform in [lo, hi): dst[off + i] from word 0 of
// philox((gi, var, gi >> 32, 1), key), gi the global path index of local path i
// (n_local paths per grid point here, from grid point g0 and path p0 of an
// ensemble of rng_paths paths per grid point).
__kernel void sde_init_uniform(__global real_t *dst, const ulong off, const ulong n, const real_t lo,
                               const real_t hi, const uint var, const uint k0, const uint k1,
                               const ulong g0, const ulong p0, const ulong n_local,
                               const ulong rng_paths)
{
    const ulong i = get_global_id(0);
    if (i >= n) return;
    const ulong g = i / n_local;
    const ulong gi = (g0 + g) * rng_paths + p0 + (i - g * n_local);
    const uint4 w = ${P}philox((uint4)((uint)gi, var, (uint)(gi >> 32), 1u), (uint2)(k0, k1));
    dst[off + i] = lo + (hi - lo) * (real_t)${P}u01(w.x);
}
