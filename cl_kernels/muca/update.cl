## Multicanonical single-spin-flip Metropolis updates of many walkers at once.
## One work item per walker; all walkers propose the flip at the same site (the
## shared sequence from muca_sites), each accepts with its own Philox word w:
## accept iff w <= thr[bin * MU_NCLS + k], k = neighbours equal to the spin, so
## the energy moves by k - dim bins. Thresholds come from the host (no exp here):
## a seed gives the same walkers and histograms on every device and work-group size.
##
## A launch does steps t0 .. t0 + n - 1; the first n_skip are not recorded
## (thermalisation), each later one adds the walker's energy bin to histogram
## slot g * slots / total of its global index g (and (bin, |M|/2) to mhist when
## magnet): jackknife blocks are groups of consecutive walkers. With hist="local"
## a work group counts into two local rows (its first walker's slot and the
## next; the host ensures slots of >= wg walkers) and adds them to the global
## histogram once at the end of the launch.
##
## params: dim, L, wg (work-group size), lattice ("local": the walker's words are
##   copied to local memory for the launch | "global"), table ("local" | "global"),
##   hist ("global": atomics on the global histogram | "local": a work-group
##   histogram merged once per launch), magnet (track M and record (bin, |M|)),
##   wide (64-bit lattice indices: words * W >= 2^32), hist_rows (rows of the local
##   histogram: 1 with one slot, else 2)
<%namespace name="philox" file="/rng/philox.cl"/>
<%namespace name="mc" file="/muca/common.cl"/>
<%
    for name, value, allowed in (("lattice", lattice, ("local", "global")),
                                 ("table", table, ("local", "global")),
                                 ("hist", hist, ("local", "global")), ("hist_rows", hist_rows, (1, 2))):
        if value not in allowed:
            raise ValueError("muca update.cl: %s must be one of %s, got %r" % (name, allowed, value))
    wpr = (L + 31) // 32
%>
${mc.geometry(dim, L)}
${philox.philox4x32_10("mu_")}
${mc.counters()}

% if lattice == "local":
#define LAT(word) lat_l[(word) * ${wg}u + lid]
% else:
#define LAT(word) lattice[(${"size_t" if wide else "uint"})(word) * W + j]
% endif
% if table == "local":
#define THR(i) thr_l[i]
% else:
#define THR(i) thr[i]
% endif

## One step with acceptance word `word` at launch step index `idx`.
<%def name="step(word, idx)">
        {
            const uint4 d = sites[${idx}];
            const uint x = d.x & 1023u, xm = (d.x >> 10) & 1023u, xp = d.x >> 20;
% if wpr == 1:
            const uint r = LAT(d.y);
            const uint s = (r >> x) & 1u;
            uint nb = ((r >> xm) & 1u) + ((r >> xp) & 1u)
                    + ((LAT(d.z & 0xFFFFu) >> x) & 1u) + ((LAT(d.z >> 16) >> x) & 1u);
%   if dim == 3:
            nb += ((LAT(d.w & 0xFFFFu) >> x) & 1u) + ((LAT(d.w >> 16) >> x) & 1u);
%   endif
            const uint self = d.y, bit = x;
% else:
            const uint self = d.y * MU_WPR + (x >> 5), bit = x & 31u;
            const uint r = LAT(self);
            const uint s = (r >> bit) & 1u;
            uint nb = ((LAT(d.y * MU_WPR + (xm >> 5)) >> (xm & 31u)) & 1u)
                    + ((LAT(d.y * MU_WPR + (xp >> 5)) >> (xp & 31u)) & 1u)
                    + ((LAT((d.z & 0xFFFFu) * MU_WPR + (x >> 5)) >> bit) & 1u)
                    + ((LAT((d.z >> 16) * MU_WPR + (x >> 5)) >> bit) & 1u);
%   if dim == 3:
            nb += ((LAT((d.w & 0xFFFFu) * MU_WPR + (x >> 5)) >> bit) & 1u)
                + ((LAT((d.w >> 16) * MU_WPR + (x >> 5)) >> bit) & 1u);
%   endif
% endif
            const uint k = s ? nb : 2u * MU_DIM - nb;
            const uint acc = (${word}) <= THR((uint)bin * MU_NCLS + k);
            LAT(self) = r ^ (acc << bit);
            bin += acc ? (int)k - MU_DIM : 0;
% if magnet:
            m += acc ? (s ? -2 : 2) : 0;
% endif
            if (${idx} >= n_skip) {
% if hist == "local":
                atomic_inc(&hist_l[row_l + (uint)bin]);
% else:
                atomic_inc(&hist[slot_base + (uint)bin]);
% endif
% if magnet:
                atomic_inc(&mhist[((size_t)slot_base + (uint)bin) * MU_NM + (uint)abs(m) / 2u]);
% endif
            }
        }
</%def>

__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void muca_update(__global uint *lattice, __global int *bins, __global int *mags,
                 __global const uint *thr, __global const uint4 *sites,
                 __global uint *hist, __global uint *mhist,
                 const uint n, const uint n_skip, const uint t_lo, const uint t_hi,
                 const uint k0, const uint k1, const uint W, const uint offset,
                 const uint slots, const uint total)
{
% if lattice == "local":
    __local uint lat_l[MU_WORDS * ${wg}u];
% endif
% if table == "local":
    __local uint thr_l[MU_NBINS * MU_NCLS];
% endif
% if hist == "local":
    __local uint hist_l[${hist_rows}u * MU_NBINS];
% endif
    const uint lid = get_local_id(0);
    const uint j = get_global_id(0);          // walker on this device
    const uint g = offset + j;                // global walker index: its Philox stream
    const uint slot = (uint)(((ulong)g * slots) / total);
    const uint slot_base = slot * MU_NBINS;
% if table == "local":
    for (uint q = lid; q < MU_NBINS * MU_NCLS; q += ${wg}u) thr_l[q] = thr[q];
% endif
% if hist == "local":
    for (uint q = lid; q < ${hist_rows}u * MU_NBINS; q += ${wg}u) hist_l[q] = 0u;
%   if hist_rows == 1:
    const uint slot0 = 0u, row_l = 0u;
%   else:
    const uint g0 = offset + (uint)get_group_id(0) * ${wg}u;      // the group's first walker
    const uint slot0 = (uint)(((ulong)g0 * slots) / total);
    const uint row_l = (slot - slot0) * MU_NBINS;
%   endif
% endif
% if table == "local" or hist == "local":
    barrier(CLK_LOCAL_MEM_FENCE);
% endif
    if (j < W) {
% if lattice == "local":
        for (uint w = 0; w < MU_WORDS; ++w) lat_l[w * ${wg}u + lid] = lattice[(size_t)w * W + j];
% endif
        int bin = bins[j];
% if magnet:
        int m = mags[j];
% endif
        const uint2 key = (uint2)(k0, k1);
        ulong t = ((ulong)t_hi << 32) | t_lo;
        uint i = 0;
        while (i < n) {
            const uint4 rnd = mu_philox(mu_step_counter(t, g, MU_TAG_ACCEPT), key);
            if ((t & 3u) == 0u && i + 4u <= n) {      // a whole Philox block: 4 steps
${step("rnd.x", "i")}
${step("rnd.y", "i + 1u")}
${step("rnd.z", "i + 2u")}
${step("rnd.w", "i + 3u")}
                i += 4u;
                t += 4u;
            } else {                                  // the ragged start or end of a launch
                for (uint q = (uint)(t & 3u); q < 4u && i < n; ++q) {
                    const uint word = q == 0u ? rnd.x : q == 1u ? rnd.y : q == 2u ? rnd.z : rnd.w;
${step("word", "i")}
                    ++i;
                    ++t;
                }
            }
        }
        bins[j] = bin;
% if magnet:
        mags[j] = m;
% endif
% if lattice == "local":
        for (uint w = 0; w < MU_WORDS; ++w) lattice[(size_t)w * W + j] = lat_l[w * ${wg}u + lid];
% endif
    }
% if hist == "local":
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint q = lid; q < ${hist_rows}u * MU_NBINS; q += ${wg}u) {
        const uint c = hist_l[q];
        if (c) atomic_add(&hist[slot0 * MU_NBINS + q], c);
    }
% endif
}
