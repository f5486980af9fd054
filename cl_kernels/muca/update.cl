## Multicanonical single-spin-flip Metropolis updates of many walkers at once.
## All walkers propose the flip at the same site (the shared sequence from
## muca_sites), each accepts with its own Philox word w: accept iff
## w <= thr[bin, k], k = neighbours equal to the spin, so the energy moves by
## k - dim bins. Thresholds come from the host (no exp here): a seed gives the
## same walkers and histograms on every device, work-group size and variant.
##
## A launch does steps t0 .. t0 + n - 1; with record (a compile-time choice: the
## thermalisation's launches carry no histogram code or local histogram) each
## step adds the walker's energy bin to histogram slot g * slots / total of its
## global index g (and (bin, |M|/2) to mhist when magnet): jackknife blocks are
## groups of consecutive walkers. With hist="local"
## a work group counts into local rows (its first walker's slot and the next;
## the host ensures slots of >= wg walkers) and adds them to the global
## histogram once at the end of the launch.
##
## params: dim, L, wg (work-group size), lattice ("local": the walker's words are
##   copied to local memory for the launch | "global"), table ("local" | "global"),
##   hist ("global": atomics on the global histogram | "local": a work-group
##   histogram merged once per launch), record (count the steps in the histograms),
##   magnet (track M; with record count (bin, |M|)),
##   wide (64-bit lattice indices: words * W >= 2^32), hist_rows (rows of the local
##   histogram: 1 when every work group's walkers lie in one slot, else 2),
##   trips (count each walker's passages between the ends trip_lo / trip_hi of
##   the energy range: trips[j] = passages << 2 | last end (1 low, 2 high)),
##   sites ("packed": 16-byte descriptors decoded by every item | "direct", lattice
##   "local" only: per step 2 (2D, L <= 32) or 3 uint4 of shift amounts, the flip
##   mask and byte offsets into the local lattices, written by muca_sites_direct
##   for this work-group size; the device table then holds its columns in the
##   order of nd = 2 dim - k, the neighbours that differ from the spin),
##   rounds (Philox rounds: 10; fewer only to measure the
##   generator's share of the time, benchmarks/probe_muca2.py),
##   flow (sites="direct" only: "branch": an accepted flip stores in an if;
##   "select": every step stores and moves the bin through masks, no branch,
##   the four steps of a Philox block one straight run),
##   wpi (walkers per work item: 1, or 2 with flow "select": walkers j and
##   j + wg of a group of 2 wg share the site descriptors and run their chains
##   interleaved),
##   tm (transition-matrix counts: a recorded step counts (bin before the
##   step, k of the proposed flip) at row index bin * (2 dim + 1) + k instead of
##   the bin after it; their sum over k is the energy histogram)
<%namespace name="philox" file="/rng/philox.cl"/>
<%namespace name="mc" file="/muca/common.cl"/>
<%
    flow = context.get("flow", "branch")        # defaults: the kernel before these options
    wpi = context.get("wpi", 1)
    for name, value, allowed in (("lattice", lattice, ("local", "global")),
                                 ("table", table, ("local", "global")),
                                 ("hist", hist, ("local", "global")), ("record", record, (False, True)), ("hist_rows", hist_rows, (1, 2)),
                                 ("sites", sites, ("packed", "direct")), ("tm", tm, (False, True)),
                                 ("flow", flow, ("branch", "select")), ("wpi", wpi, (1, 2))):
        if value not in allowed:
            raise ValueError("muca update.cl: %s must be one of %s, got %r" % (name, allowed, value))
    hmode = hist if record else "none"     # thermalisation: nothing is counted (M is still
    tmc = tm and record                    # tracked with magnet)
    if sites == "direct" and lattice != "local":
        raise ValueError("muca update.cl: sites='direct' needs lattice='local'")
    if flow != "branch" and sites != "direct":
        raise ValueError("muca update.cl: flow=%r needs sites='direct'" % (flow,))
    if wpi != 1 and flow == "branch":
        raise ValueError("muca update.cl: wpi=2 needs flow='select'")
    ws = [""] if wpi == 1 else ["0", "1"]      # walker suffixes of the names
    gw = wg * wpi                              # walkers per work group
    wpr = (L + 31) // 32
    ncol = 2 * dim + 1
    ndesc = 2 if (dim == 2 and wpr == 1) else 3     # uint4 per step with sites="direct"
%>
${mc.geometry(dim, L)}
${philox.philox4x32("mu_", rounds)}
${mc.counters()}
#define MU_HROW ${"MU_NBINS * MU_NCLS" if tmc else "MU_NBINS"}     // histogram entries per slot

% if lattice == "local":
#define LAT(word) lat_l[(word) * ${gw}u + lid]
% else:
#define LAT(word) lattice[(${"size_t" if wide else "uint"})(word) * W + j]
% endif
## sites="direct": the word at byte offset `off` of this item's column of lat_l
% for w in ws:
#define LATB${w}(off) (*(__local uint *)(mine${w} + (off)))
% endfor
% if table == "local":
#define THR(i) thr_l[i]
% else:
#define THR(i) thr[i]
% endif

## The flip at the decoded site (packed descriptors); sets k (neighbours equal
## to the spin), s (the spin), self / bit (the word and bit of the site), r.
<%def name="neighbours()">
% if wpr == 1:
            const uint r = LAT(d.y);
            const uint s = (r >> x) & 1u;
            uint nb = ((r >> xm) & 1u) + ((r >> xp) & 1u)
                    + ((LAT(d.z & 0xFFFFu) >> x) & 1u) + ((LAT(d.z >> 16) >> x) & 1u);
%   if dim == 3:
            nb += ((LAT(d.w & 0xFFFFu) >> x) & 1u) + ((LAT(d.w >> 16) >> x) & 1u);
%   endif
% else:
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
</%def>

## After the flip: the passage counter, then (record) the counts: the bin after
## the step, or with tm `entry` (bin before it, k).
<%def name="after_step(w='')">
%   if trips:
            {   // a passage: the walker reaches the end opposite to the last one it saw
                const uint end = bin${w} <= trip_lo ? 1u : bin${w} >= trip_hi ? 2u : 0u;
                if (end != 0u && end != (tr${w} & 3u))
                    tr${w} = (((tr${w} >> 2) + ((tr${w} & 3u) != 0u)) << 2) | end;
            }
%   endif
% if record:
<%
    entry = "entry" if tmc else "(uint)bin" + w
    # wpi = 2: a walker beyond W (the last group) counts 0 into its partner's row
    count = (lambda a: "atomic_inc(%s)" % a) if wpi == 1 else (lambda a: "atomic_add(%s, act%s)" % (a, w))
%>
            {
%   if hmode == "local":
                ${count("&hist_l[row_l%s + %s]" % (w, entry))};
%   else:
                ${count("&hist[slot_base%s + %s]" % (w, entry))};
%   endif
%   if magnet:
                ${count("&mhist[((size_t)slot%s * MU_NBINS + (uint)bin%s) * MU_NM + (uint)abs(m%s) / 2u]" % (w, w, w))};
%   endif
            }
% endif
</%def>

## flow != "branch": the accepted flip through a mask am (all ones or zero):
## the store is unconditional, the bin and M move by masked amounts.
<%def name="select_accept(acc, c, u0, u1, r, nd, s, w='')">
            const uint am${c} = 0u - (uint)(${acc});
            LATB${w}(${u1}.x) = ${r} ^ (${u0}.w & am${c});
            bin${w} += (int)(am${c} & (uint)(MU_DIM - (int)${nd}));
% if magnet:
            m${w} += (int)(am${c} & (${s} ? 0xFFFFFFFEu : 2u));
% endif
</%def>

## flow "select": the four steps of a whole Philox block (words rnd) from i as
## one straight run, the walkers of the item (wpi) interleaved in each step
## (their lattices are disjoint: all their loads come before their stores).
<%def name="select_block()">
<%
    words = [("r", "u1_%d.x"), ("ym", "u1_%d.y"), ("yp", "u1_%d.z")]
    if dim == 3:
        words += [("zm", "u1_%d.w"), ("zp", "u2_%d.x")]
    if wpr > 1:
        words += [("xmw", "u2_%d.y"), ("xpw", "u2_%d.z")]
    def loads(c, w):
        return ", ".join("%s_%d%s = LATB%s(%s)" % (v, c, w, w, off % c) for v, off in words)
%>
% for c in range(4):
            const uint4 u0_${c} = sites[${ndesc}u * (i + ${c}u)], u1_${c} = sites[${ndesc}u * (i + ${c}u) + 1u];
%   if ndesc == 3:
            const uint4 u2_${c} = sites[${ndesc}u * (i + ${c}u) + 2u];
%   endif
% endfor
% for c in range(4):
%   for w in ws:
            const uint ${loads(c, w)};
%   endfor
<%  xa = ("u1_%d.w" if ndesc == 2 else "u2_%d.w") % c %>
%   for w in ws:
<%  cw = "%d%s" % (c, w) %>
            const uint rx_${cw} = r_${cw} >> u0_${c}.x, s_${cw} = rx_${cw} & 1u;
%     if wpr == 1:
            uint nd_${cw} = ((rx_${cw} ^ (r_${cw} >> u0_${c}.y)) & 1u) + ((rx_${cw} ^ (r_${cw} >> u0_${c}.z)) & 1u)
%     else:
            uint nd_${cw} = ((rx_${cw} ^ (xmw_${cw} >> u0_${c}.y)) & 1u) + ((rx_${cw} ^ (xpw_${cw} >> u0_${c}.z)) & 1u)
%     endif
                    + ((rx_${cw} ^ (ym_${cw} >> ${xa})) & 1u) + ((rx_${cw} ^ (yp_${cw} >> ${xa})) & 1u);
%     if dim == 3:
            nd_${cw} += ((rx_${cw} ^ (zm_${cw} >> ${xa})) & 1u) + ((rx_${cw} ^ (zp_${cw} >> ${xa})) & 1u);
%     endif
            const uint th_${cw} = THR((uint)bin${w} * MU_NCLS + nd_${cw});
%   endfor
%   for w in ws:
<%  cw = "%d%s" % (c, w) %>
%     if tmc:
            const uint entry_${cw} = (uint)bin${w} * MU_NCLS + 2u * MU_DIM - nd_${cw};
%     endif
${select_accept("rnd%s.%s <= th_%s" % (w, "xyzw"[c], cw), "_" + cw, "u0_%d" % c, "u1_%d" % c, "r_" + cw, "nd_" + cw, "s_" + cw, w)}
%   endfor
%   for w in ws:
            {
%     if tmc:
                const uint entry = entry_${c}${w};
%     endif
${after_step(w)}
            }
%   endfor
% endfor
</%def>

## One step with acceptance word `word` at launch step index `idx`.
<%def name="step(word, idx, w='')">
        {
% if sites == "packed":
            const uint4 d = sites[${idx}];
            const uint x = d.x & 1023u, xm = (d.x >> 10) & 1023u, xp = d.x >> 20;
%   if wpr == 1:
            const uint self = d.y, bit = x;
%   else:
            const uint self = d.y * MU_WPR + (x >> 5), bit = x & 31u;
%   endif
${neighbours()}
            const uint acc = (${word}) <= THR((uint)bin * MU_NCLS + k);
            LAT(self) = r ^ (acc << bit);
% else:
            // u0 = (bit of x, of x-1, of x+1, 1 << bit of x), u1 = byte offsets of the
            // words of the site and of its y-1, y+1 neighbours, then (2D, L <= 32) the
            // bit of x again; with u2: u1.w = z-1, u2 = (z+1, word of x-1, word of x+1,
            // bit of x again). nd = neighbours that differ from the spin. (The second
            // copy of x keeps the compiler from rewriting (r >> x) ^ (v >> x) as
            // (r ^ v) >> x, one instruction more per neighbour.)
            const uint4 u0 = sites[${ndesc}u * (${idx})], u1 = sites[${ndesc}u * (${idx}) + 1u];
%   if ndesc == 3:
            const uint4 u2 = sites[${ndesc}u * (${idx}) + 2u];
%   endif
            const uint xa = ${"u1.w" if ndesc == 2 else "u2.w"};
            const uint r = LATB${w}(u1.x), rx = r >> u0.x, s = rx & 1u;
%   if wpr == 1:
            uint nd = ((rx ^ (r >> u0.y)) & 1u) + ((rx ^ (r >> u0.z)) & 1u)
%   else:
            uint nd = ((rx ^ (LATB${w}(u2.y) >> u0.y)) & 1u) + ((rx ^ (LATB${w}(u2.z) >> u0.z)) & 1u)
%   endif
                    + ((rx ^ (LATB${w}(u1.y) >> xa)) & 1u) + ((rx ^ (LATB${w}(u1.z) >> xa)) & 1u);
%   if dim == 3:
            nd += ((rx ^ (LATB${w}(u1.w) >> xa)) & 1u) + ((rx ^ (LATB${w}(u2.x) >> xa)) & 1u);
%   endif
            const uint k = 2u * MU_DIM - nd;
            const bool acc = (${word}) <= THR((uint)bin${w} * MU_NCLS + nd);
% endif
% if tmc:
            const uint entry = (uint)bin${w} * MU_NCLS + k;
% endif
% if sites == "packed":
            bin += acc ? (int)k - MU_DIM : 0;
%   if magnet:
            m += acc ? (s ? -2 : 2) : 0;
%   endif
% else:
%   if flow == "branch":
            if (acc) {
                LATB${w}(u1.x) = r ^ u0.w;
                bin${w} += MU_DIM - (int)nd;
%     if magnet:
                m${w} += s ? -2 : 2;
%     endif
            }
%   else:
${select_accept("acc", "", "u0", "u1", "r", "nd", "s", w)}
%   endif
% endif
${after_step(w)}
        }
</%def>

__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void muca_update(__global uint *lattice, __global int *bins, __global int *mags,
                 __global const uint *thr, __global const uint4 *sites,
                 __global uint *hist, __global uint *mhist, __global uint *trips,
                 const uint n, const uint t_lo, const uint t_hi,
                 const uint k0, const uint k1, const uint W, const uint offset,
                 const uint slots, const uint total, const int trip_lo, const int trip_hi)
{
% if lattice == "local":
    __local uint lat_l[MU_WORDS * ${gw}u];
% endif
% if table == "local":
    __local uint thr_l[MU_NBINS * MU_NCLS];
% endif
% if hmode == "local":
    __local uint hist_l[${hist_rows}u * MU_HROW];
% endif
    const uint lid = get_local_id(0);
    const uint base = (uint)get_group_id(0) * ${gw}u;       // the group's first walker on this device
% for q, w in enumerate(ws):
    const uint j${w} = base + lid${" + %du" % (q * wg) if q else ""};   // walker on this device
    const uint g${w} = offset + j${w};                      // global walker index: its Philox stream
%   if q:
    const uint act${w} = j${w} < W;                          // (j${ws[0]} < W below)
    const uint slot${w} = act${w} ? (uint)(((ulong)g${w} * slots) / total) : slot${ws[0]};
%   else:
%     if wpi > 1:
    const uint act${w} = 1u;
%     endif
    const uint slot${w} = (uint)(((ulong)g${w} * slots) / total);
%   endif
    const uint slot_base${w} = slot${w} * MU_HROW;
%   if sites == "direct":
    __local uchar *const mine${w} = (__local uchar *)(lat_l + lid${" + %du" % (q * wg) if q else ""});
%   endif
% endfor
% if table == "local":
    for (uint q = lid; q < MU_NBINS * MU_NCLS; q += ${wg}u) thr_l[q] = thr[q];
% endif
% if hmode == "local":
    for (uint q = lid; q < ${hist_rows}u * MU_HROW; q += ${wg}u) hist_l[q] = 0u;
    const uint slot0_l = (uint)(((ulong)(offset + base) * slots) / total);   // the group's first slot
%   for w in ws:
    const uint row_l${w} = ${"0u" if hist_rows == 1 else "(slot%s - slot0_l) * MU_HROW" % w};
%   endfor
% endif
% if table == "local" or hmode == "local":
    barrier(CLK_LOCAL_MEM_FENCE);
% endif
    if (j${ws[0]} < W) {
% for q, w in enumerate(ws):
<%  col = "lid" + (" + %du" % (q * wg) if q else "") %>
%   if wpi == 1:
%     if lattice == "local":
        for (uint w = 0; w < MU_WORDS; ++w) LAT(w) = lattice[(size_t)w * W + j];
%     endif
        int bin = bins[j];
%     if magnet:
        int m = mags[j];
%     endif
%     if trips:
        uint tr = trips[j];
%     endif
%   else:
        for (uint w = 0; w < MU_WORDS; ++w)
            lat_l[w * ${gw}u + ${col}] = act${w} ? lattice[(size_t)w * W + j${w}] : 0u;
        int bin${w} = act${w} ? bins[j${w}] : 0;
%     if magnet:
        int m${w} = act${w} ? mags[j${w}] : 0;
%     endif
%     if trips:
        uint tr${w} = act${w} ? trips[j${w}] : 0u;
%     endif
%   endif
% endfor
        const uint2 key = (uint2)(k0, k1);
        ulong t = ((ulong)t_hi << 32) | t_lo;
        uint i = 0;
        while (i < n) {
% for w in ws:
            const uint4 rnd${w} = mu_philox(mu_step_counter(t, g${w}, MU_TAG_ACCEPT), key);
% endfor
            if ((t & 3u) == 0u && i + 4u <= n) {      // a whole Philox block: 4 steps
% if flow == "select":
${select_block()}
% else:
%   for c, comp in enumerate("xyzw"):
${step("rnd." + comp, "i + %du" % c if c else "i")}
%   endfor
% endif
                i += 4u;
                t += 4u;
            } else {                                  // the ragged start or end of a launch
                for (uint c = (uint)(t & 3u); c < 4u && i < n; ++c) {
% for w in ws:
                    const uint word${w} = c == 0u ? rnd${w}.x : c == 1u ? rnd${w}.y : c == 2u ? rnd${w}.z : rnd${w}.w;
${step("word" + w, "i", w)}
% endfor
                    ++i;
                    ++t;
                }
            }
        }
% for q, w in enumerate(ws):
<%  col = "lid" + (" + %du" % (q * wg) if q else "") %>
%   if wpi == 1:
        bins[j] = bin;
%     if magnet:
        mags[j] = m;
%     endif
%     if trips:
        trips[j] = tr;
%     endif
%     if lattice == "local":
        for (uint w = 0; w < MU_WORDS; ++w) lattice[(size_t)w * W + j] = LAT(w);
%     endif
%   else:
        if (act${w}) {
            bins[j${w}] = bin${w};
%     if magnet:
            mags[j${w}] = m${w};
%     endif
%     if trips:
            trips[j${w}] = tr${w};
%     endif
            for (uint w = 0; w < MU_WORDS; ++w) lattice[(size_t)w * W + j${w}] = lat_l[w * ${gw}u + ${col}];
        }
%   endif
% endfor
    }
% if hmode == "local":
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint q = lid; q < ${hist_rows}u * MU_HROW; q += ${wg}u) {
        const uint c = hist_l[q];
        if (c) atomic_add(&hist[slot0_l * MU_HROW + q], c);
    }
% endif
}
