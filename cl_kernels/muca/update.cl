## Multicanonical single-spin-flip Metropolis updates of many walkers at once.
## All walkers propose the flip at the same site (the shared sequence from
## muca_sites), each accepts with its own Philox word w: accept iff
## w <= thr[bin, k], k = neighbours equal to the spin, so the energy moves by
## k - dim bins. Thresholds come from the host (no exp here): a seed gives the
## same walkers and histograms on every device, work-group size and variant.
##
## A launch does steps t0 .. t0 + n - 1; the first n_skip are not recorded
## (thermalisation), each later one adds the walker's energy bin to histogram
## slot g * slots / total of its global index g (and (bin, |M|/2) to mhist when
## magnet): jackknife blocks are groups of consecutive walkers. With hist="local"
## a work group counts into local rows (its first walker's slot and the next;
## the host ensures slots of >= wg * wpi walkers) and adds them to the global
## histogram once at the end of the launch.
##
## params: dim, L, wg (work-group size), lattice ("local": the walker's words are
##   copied to local memory for the launch | "global"), table ("local" | "global"),
##   hist ("global": atomics on the global histogram | "local": a work-group
##   histogram merged once per launch), magnet (track M and record (bin, |M|)),
##   wide (64-bit lattice indices: words * W >= 2^32), hist_rows (rows of the local
##   histogram: 1 when every work group's walkers lie in one slot, else 2),
##   trips (count each walker's passages between the ends trip_lo / trip_hi of
##   the energy range: trips[j] = passages << 2 | last end (1 low, 2 high)),
##   nbr ("shift": neighbour bits extracted one by one | "popc": the neighbours
##   that differ from the spin counted by popcount of masked words),
##   classes ("all": thr has 2 dim + 1 columns, k = 0 .. 2 dim | "skip": the
##   column k = dim (always accepted: same weight) is left out, 2 dim columns),
##   wpi (walkers per work item: 1 | 2, lattice="local" only; a group holds the
##   consecutive walkers base .. base + wg wpi - 1, item lid walkers base + lid
##   and base + wg + lid), rounds (Philox rounds: 10; fewer only to measure the
##   generator's share of the time, benchmarks/probe_muca2.py),
##   tm (transition-matrix counts: a recorded step counts (bin before the
##   step, k of the proposed flip) at row index bin * (2 dim + 1) + k instead of
##   the bin after it; their sum over k is the energy histogram)
<%namespace name="philox" file="/rng/philox.cl"/>
<%namespace name="mc" file="/muca/common.cl"/>
<%
    for name, value, allowed in (("lattice", lattice, ("local", "global")),
                                 ("table", table, ("local", "global")),
                                 ("hist", hist, ("local", "global")), ("hist_rows", hist_rows, (1, 2)),
                                 ("nbr", nbr, ("shift", "popc")), ("classes", classes, ("all", "skip")),
                                 ("wpi", wpi, (1, 2)), ("tm", tm, (False, True))):
        if value not in allowed:
            raise ValueError("muca update.cl: %s must be one of %s, got %r" % (name, allowed, value))
    if wpi > 1 and lattice != "local":
        raise ValueError("muca update.cl: wpi > 1 needs lattice='local'")
    wpr = (L + 31) // 32
    ncol = 2 * dim + 1 if classes == "all" else 2 * dim
    span = wg * wpi                 # walkers per work group
    walkers = range(wpi)
%>
${mc.geometry(dim, L)}
${philox.philox4x32("mu_", rounds)}
${mc.counters()}
#define MU_NCOL ${ncol}u
#define MU_HROW ${"MU_NBINS * MU_NCLS" if tm else "MU_NBINS"}     // histogram entries per slot

% if lattice == "local":
#define LAT(q, word) lat_l[(word) * ${span}u + ${wg}u * (q) + lid]
% else:
#define LAT(q, word) lattice[(${"size_t" if wide else "uint"})(word) * W + j0]
% endif
% if table == "local":
#define THR(i) thr_l[i]
% else:
#define THR(i) thr[i]
% endif

## Walker q's flip at the decoded site; sets k (neighbours equal to the spin),
## s (the spin), self / bit (the word and bit of the site) and r (the word).
<%def name="neighbours(q)">
% if nbr == "shift":
%   if wpr == 1:
            const uint r${q} = LAT(${q}, d.y);
            const uint s${q} = (r${q} >> x) & 1u;
            uint nb${q} = ((r${q} >> xm) & 1u) + ((r${q} >> xp) & 1u)
                    + ((LAT(${q}, d.z & 0xFFFFu) >> x) & 1u) + ((LAT(${q}, d.z >> 16) >> x) & 1u);
%     if dim == 3:
            nb${q} += ((LAT(${q}, d.w & 0xFFFFu) >> x) & 1u) + ((LAT(${q}, d.w >> 16) >> x) & 1u);
%     endif
%   else:
            const uint r${q} = LAT(${q}, self);
            const uint s${q} = (r${q} >> bit) & 1u;
            uint nb${q} = ((LAT(${q}, d.y * MU_WPR + (xm >> 5)) >> (xm & 31u)) & 1u)
                    + ((LAT(${q}, d.y * MU_WPR + (xp >> 5)) >> (xp & 31u)) & 1u)
                    + ((LAT(${q}, (d.z & 0xFFFFu) * MU_WPR + (x >> 5)) >> bit) & 1u)
                    + ((LAT(${q}, (d.z >> 16) * MU_WPR + (x >> 5)) >> bit) & 1u);
%     if dim == 3:
            nb${q} += ((LAT(${q}, (d.w & 0xFFFFu) * MU_WPR + (x >> 5)) >> bit) & 1u)
                + ((LAT(${q}, (d.w >> 16) * MU_WPR + (x >> 5)) >> bit) & 1u);
%     endif
%   endif
            const uint k${q} = s${q} ? nb${q} : 2u * MU_DIM - nb${q};
% else:
            // sm: the spin as a mask (0 or ~0); popcount of (neighbour word ^ sm)
            // under the neighbour's bit counts the neighbours that differ
            const uint r${q} = LAT(${q}, self);
            const uint s${q} = (r${q} >> bit) & 1u, sm${q} = 0u - s${q};
%   if wpr == 1 and L > 2:
            uint nd${q} = popcount((r${q} ^ sm${q}) & mlr)
%   elif wpr == 1:
            uint nd${q} = 2u * ((r${q} ^ sm${q}) >> xm & 1u)      // L = 2: x - 1 = x + 1
%   else:
            uint nd${q} = popcount((LAT(${q}, d.y * MU_WPR + (xm >> 5)) ^ sm${q}) & mxm)
                     + popcount((LAT(${q}, d.y * MU_WPR + (xp >> 5)) ^ sm${q}) & mxp)
%   endif
                     + popcount((LAT(${q}, (d.z & 0xFFFFu) * MU_WPR + (x >> 5)) ^ sm${q}) & mx)
                     + popcount((LAT(${q}, (d.z >> 16) * MU_WPR + (x >> 5)) ^ sm${q}) & mx);
%   if dim == 3:
            nd${q} += popcount((LAT(${q}, (d.w & 0xFFFFu) * MU_WPR + (x >> 5)) ^ sm${q}) & mx)
                    + popcount((LAT(${q}, (d.w >> 16) * MU_WPR + (x >> 5)) ^ sm${q}) & mx);
%   endif
            const uint k${q} = 2u * MU_DIM - nd${q};
% endif
</%def>

## One step with acceptance word word(q) of walker q at launch step index `idx`.
<%def name="step(words, idx)">
        {
            const uint4 d = sites[${idx}];
            const uint x = d.x & 1023u, xm = (d.x >> 10) & 1023u, xp = d.x >> 20;
% if wpr == 1:
            const uint self = d.y, bit = x;
% else:
            const uint self = d.y * MU_WPR + (x >> 5), bit = x & 31u;
% endif
% if nbr == "popc":
            const uint mx = 1u << bit;
%   if wpr == 1:
            const uint mlr = (1u << xm) | (1u << xp);      // (L = 2: one bit)
%   else:
            const uint mxm = 1u << (xm & 31u), mxp = 1u << (xp & 31u);
%   endif
% endif
% for q in walkers:
${neighbours(q)}
%   if classes == "all":
            const uint acc${q} = (${words[q]}) <= THR((uint)bin${q} * MU_NCOL + k${q});
%   else:
            const uint acc${q} = k${q} == MU_DIM
                || (${words[q]}) <= THR((uint)bin${q} * MU_NCOL + k${q} - (k${q} > MU_DIM));
%   endif
            LAT(${q}, self) = r${q} ^ (acc${q} << bit);
%   if tm:
            const uint entry${q} = (uint)bin${q} * MU_NCLS + k${q};
%   endif
            bin${q} += acc${q} ? (int)k${q} - MU_DIM : 0;
%   if magnet:
            m${q} += acc${q} ? (s${q} ? -2 : 2) : 0;
%   endif
%   if trips:
            {   // a passage: the walker reaches the end opposite to the last one it saw
                const uint end = bin${q} <= trip_lo ? 1u : bin${q} >= trip_hi ? 2u : 0u;
                if (end != 0u && end != (tr${q} & 3u))
                    tr${q} = (((tr${q} >> 2) + ((tr${q} & 3u) != 0u)) << 2) | end;
            }
%   endif
% endfor
            if (${idx} >= n_skip) {
% for q in walkers:
<%
    live = "" if q == 0 else "if (live%d) " % q
    entry = "entry%d" % q if tm else "(uint)bin%d" % q
%>
%   if hist == "local":
                ${live}atomic_inc(&hist_l[row_l${q} + ${entry}]);
%   else:
                ${live}atomic_inc(&hist[slot_base${q} + ${entry}]);
%   endif
%   if magnet:
                ${live}atomic_inc(&mhist[((size_t)slot${q} * MU_NBINS + (uint)bin${q}) * MU_NM + (uint)abs(m${q}) / 2u]);
%   endif
% endfor
            }
        }
</%def>

__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void muca_update(__global uint *lattice, __global int *bins, __global int *mags,
                 __global const uint *thr, __global const uint4 *sites,
                 __global uint *hist, __global uint *mhist, __global uint *trips,
                 const uint n, const uint n_skip, const uint t_lo, const uint t_hi,
                 const uint k0, const uint k1, const uint W, const uint offset,
                 const uint slots, const uint total, const int trip_lo, const int trip_hi)
{
% if lattice == "local":
    __local uint lat_l[MU_WORDS * ${span}u];
% endif
% if table == "local":
    __local uint thr_l[MU_NBINS * MU_NCOL];
% endif
% if hist == "local":
    __local uint hist_l[${hist_rows}u * MU_HROW];
% endif
    const uint lid = get_local_id(0);
    const uint base = (uint)get_group_id(0) * ${span}u;       // the group's first walker on this device
% for q in walkers:
    const uint j${q} = base + ${wg}u * ${q}u + lid;          // walker on this device
    const uint g${q} = offset + j${q};                       // global walker index: its Philox stream
    const uint slot${q} = (uint)(((ulong)g${q} * slots) / total);
    const uint slot_base${q} = slot${q} * MU_HROW;
% endfor
% if table == "local":
    for (uint q = lid; q < MU_NBINS * MU_NCOL; q += ${wg}u) thr_l[q] = thr[q];
% endif
% if hist == "local":
    for (uint q = lid; q < ${hist_rows}u * MU_HROW; q += ${wg}u) hist_l[q] = 0u;
    const uint slot0_l = (uint)(((ulong)(offset + base) * slots) / total);   // the group's first slot
%   for q in walkers:
    const uint row_l${q} = ${"0u" if hist_rows == 1 else "(slot%d - slot0_l) * MU_HROW" % q};
%   endfor
% endif
% if table == "local" or hist == "local":
    barrier(CLK_LOCAL_MEM_FENCE);
% endif
    if (j0 < W) {
% for q in walkers:
%   if q:
        const bool live${q} = j${q} < W;
%   endif
%   if lattice == "local":
        ${"" if q == 0 else "if (live%d) " % q}for (uint w = 0; w < MU_WORDS; ++w) LAT(${q}, w) = lattice[(size_t)w * W + j${q}];
%     if q:
        else for (uint w = 0; w < MU_WORDS; ++w) LAT(${q}, w) = 0u;      // a spare walker: never recorded
%     endif
%   endif
        int bin${q} = ${"bins[j%d]" % q if q == 0 else "live%d ? bins[j%d] : 0" % (q, q)};
%   if magnet:
        int m${q} = ${"mags[j%d]" % q if q == 0 else "live%d ? mags[j%d] : 0" % (q, q)};
%   endif
%   if trips:
        uint tr${q} = ${"trips[j%d]" % q if q == 0 else "live%d ? trips[j%d] : 0u" % (q, q)};
%   endif
% endfor
        const uint2 key = (uint2)(k0, k1);
        ulong t = ((ulong)t_hi << 32) | t_lo;
        uint i = 0;
        while (i < n) {
% for q in walkers:
            const uint4 rnd${q} = mu_philox(mu_step_counter(t, g${q}, MU_TAG_ACCEPT), key);
% endfor
            if ((t & 3u) == 0u && i + 4u <= n) {      // a whole Philox block: 4 steps
% for c, comp in enumerate("xyzw"):
${step(["rnd%d.%s" % (q, comp) for q in walkers], "i + %du" % c if c else "i")}
% endfor
                i += 4u;
                t += 4u;
            } else {                                  // the ragged start or end of a launch
                for (uint c = (uint)(t & 3u); c < 4u && i < n; ++c) {
% for q in walkers:
                    const uint word${q} = c == 0u ? rnd${q}.x : c == 1u ? rnd${q}.y : c == 2u ? rnd${q}.z : rnd${q}.w;
% endfor
${step(["word%d" % q for q in walkers], "i")}
                    ++i;
                    ++t;
                }
            }
        }
% for q in walkers:
<%   guard = "" if q == 0 else "if (live%d) " % q %>
        ${guard}{
            bins[j${q}] = bin${q};
%   if magnet:
            mags[j${q}] = m${q};
%   endif
%   if trips:
            trips[j${q}] = tr${q};
%   endif
%   if lattice == "local":
            for (uint w = 0; w < MU_WORDS; ++w) lattice[(size_t)w * W + j${q}] = LAT(${q}, w);
%   endif
        }
% endfor
    }
% if hist == "local":
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint q = lid; q < ${hist_rows}u * MU_HROW; q += ${wg}u) {
        const uint c = hist_l[q];
        if (c) atomic_add(&hist[slot0_l * MU_HROW + q], c);
    }
% endif
}
