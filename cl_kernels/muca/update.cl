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
##   "local" only: per step 2 (2D, L <= 32; 1 with popc) or 3 uint4 of shift amounts, the flip
##   mask and byte offsets into the local lattices, written by muca_sites_direct
##   for this work-group size; the device table then holds its columns in the
##   order of nd = 2 dim - k, the neighbours that differ from the spin),
##   rounds (Philox rounds: 10; fewer only to measure the
##   generator's share of the time, benchmarks/probe_muca2.py),
##   tm (transition-matrix counts: a recorded step counts (bin before the
##   step, k of the proposed flip) at row index bin * (2 dim + 1) + k instead of
##   the bin after it; their sum over k is the energy histogram)
##   popc (default True; applies to 2D L = 32 with sites "direct": a row is one
##   word, periodic in x by rotation): one descriptor uint4 per step (the byte
##   offsets of the words of the site and of its y-1, y+1 neighbours, 1 << x;
##   muca_sites_direct with layout = 1) and the differing neighbours counted by
##   one popcount of their four bits put at distinct positions
##
## The step loop (branch mucatherm, docs/muca.md): over whole Philox blocks it
## computes the NEXT block's four words while it does this block's four steps
## (independent work for the scheduler between a step's dependent loads), the
## descriptors through a pointer moved once per block, the block number in 32
## bits with a carry; the ragged start and end of a launch come before and after
## it. Where nothing else needs the bin inside the loop (the thermalisation: not
## record, not trips; sites "direct", table "local") the bin is kept as the byte
## offset of its table row ("binx": the threshold address is one multiply-add
## from nd, the accepted flip moves it by another).
<%namespace name="philox" file="/rng/philox.cl"/>
<%namespace name="mc" file="/muca/common.cl"/>
<%
    for name, value, allowed in (("lattice", lattice, ("local", "global")),
                                 ("table", table, ("local", "global")),
                                 ("hist", hist, ("local", "global")), ("record", record, (False, True)), ("hist_rows", hist_rows, (1, 2)),
                                 ("sites", sites, ("packed", "direct")), ("tm", tm, (False, True))):
        if value not in allowed:
            raise ValueError("muca update.cl: %s must be one of %s, got %r" % (name, allowed, value))
    popc = context.get("popc", True) and dim == 2 and L == 32 and sites == "direct"
    binx = not record and not trips and sites == "direct" and table == "local"
    hmode = hist if record else "none"     # thermalisation: nothing is counted (M is still
    tmc = tm and record                    # tracked with magnet)
    if sites == "direct" and lattice != "local":
        raise ValueError("muca update.cl: sites='direct' needs lattice='local'")
    wpr = (L + 31) // 32
    ncol = 2 * dim + 1
    ndesc = 1 if popc else 2 if (dim == 2 and wpr == 1) else 3     # uint4 per step with sites="direct"
%>
${mc.geometry(dim, L)}
${philox.philox4x32("mu_", rounds)}
${mc.counters()}
#define MU_HROW ${"MU_NBINS * MU_NCLS" if tmc else "MU_NBINS"}     // histogram entries per slot

% if lattice == "local":
#define LAT(word) lat_l[(word) * ${wg}u + lid]
% else:
#define LAT(word) lattice[(${"size_t" if wide else "uint"})(word) * W + j]
% endif
## sites="direct": the word at byte offset `off` of this item's column of lat_l
#define LATB(off) (*(__local uint *)(mine + (off)))
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
<%def name="after_step()">
%   if trips:
            {   // a passage: the walker reaches the end opposite to the last one it saw
                const uint end = bin <= trip_lo ? 1u : bin >= trip_hi ? 2u : 0u;
                if (end != 0u && end != (tr & 3u))
                    tr = (((tr >> 2) + ((tr & 3u) != 0u)) << 2) | end;
            }
%   endif
% if record:
<%  entry = "entry" if tmc else "(uint)bin" %>
            {
%   if hmode == "local":
                atomic_inc(&hist_l[row_l + ${entry}]);
%   else:
                atomic_inc(&hist[slot_base + ${entry}]);
%   endif
%   if magnet:
                atomic_inc(&mhist[((size_t)slot * MU_NBINS + (uint)bin) * MU_NM + (uint)abs(m) / 2u]);
%   endif
            }
% endif
</%def>

## One step with acceptance word `word` at launch step index `idx`.
<%def name="step(word, idx, base='sites')">
        {
% if sites == "packed":
            const uint4 d = ${base}[${idx}];
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
%   if popc:
            // one uint4 per step (muca_sites_direct, layout 1): the byte offsets of the
            // words of the site and of its y-1, y+1 neighbours, 1 << x. nd = popcount of
            // the bits that differ from the spin: x-1 and x of r ^ (r rotated right by
            // one), y-1 moved to x+8, y+1 to x+16
            const uint4 u1 = ${base}[${idx}];
            const uint flip = u1.w, r = LATB(u1.x), s = (r & flip) != 0u;
            const uint nd = popcount(((r ^ rotate(r, 31u)) & (flip | rotate(flip, 31u)))
                                     | rotate((r ^ LATB(u1.y)) & flip, 8u) | rotate((r ^ LATB(u1.z)) & flip, 16u));
%   else:
            // u0 = (bit of x, of x-1, of x+1, 1 << bit of x), u1 = byte offsets of the
            // words of the site and of its y-1, y+1 neighbours, then (2D, L <= 32) the
            // bit of x again; with u2: u1.w = z-1, u2 = (z+1, word of x-1, word of x+1,
            // bit of x again). nd = neighbours that differ from the spin. (The second
            // copy of x keeps the compiler from rewriting (r >> x) ^ (v >> x) as
            // (r ^ v) >> x, one instruction more per neighbour.)
            const uint4 u0 = ${base}[${ndesc}u * (${idx})], u1 = ${base}[${ndesc}u * (${idx}) + 1u];
%     if ndesc == 3:
            const uint4 u2 = ${base}[${ndesc}u * (${idx}) + 2u];
%     endif
            const uint flip = u0.w, xa = ${"u1.w" if ndesc == 2 else "u2.w"};
            const uint r = LATB(u1.x), rx = r >> u0.x, s = rx & 1u;
%     if wpr == 1:
            uint nd = ((rx ^ (r >> u0.y)) & 1u) + ((rx ^ (r >> u0.z)) & 1u)
%     else:
            uint nd = ((rx ^ (LATB(u2.y) >> u0.y)) & 1u) + ((rx ^ (LATB(u2.z) >> u0.z)) & 1u)
%     endif
                    + ((rx ^ (LATB(u1.y) >> xa)) & 1u) + ((rx ^ (LATB(u1.z) >> xa)) & 1u);
%     if dim == 3:
            nd += ((rx ^ (LATB(u1.w) >> xa)) & 1u) + ((rx ^ (LATB(u2.x) >> xa)) & 1u);
%     endif
%   endif
            const uint k = 2u * MU_DIM - nd;
%   if binx:
            // ndd = nd - dim = -(bins moved by the flip): one multiply-add moves tb
            const uint ndd = nd - MU_DIM;
            const bool acc = (${word}) <= *(__local const uint *)(thr_b + (int)(tb + (ndd << 2)));   // >= column 0
%   else:
            const bool acc = (${word}) <= THR((uint)bin * MU_NCLS + nd);
%   endif
% endif
% if tmc:
            const uint entry = (uint)bin * MU_NCLS + k;
% endif
% if sites == "packed":
            bin += acc ? (int)k - MU_DIM : 0;
%   if magnet:
            m += acc ? (s ? -2 : 2) : 0;
%   endif
% else:
            if (acc) {
                LATB(u1.x) = r ^ flip;
%   if binx:
                tb -= ndd * (MU_NCLS * 4u);
%   else:
                bin += MU_DIM - (int)nd;
%   endif
%   if magnet:
                m += s ? -2 : 2;
%   endif
            }
% endif
${after_step()}
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
    __local uint lat_l[MU_WORDS * ${wg}u];
% endif
% if table == "local":
    __local uint thr_l[MU_NBINS * MU_NCLS];
% endif
% if hmode == "local":
    __local uint hist_l[${hist_rows}u * MU_HROW];
% endif
    const uint lid = get_local_id(0);
    const uint base = (uint)get_group_id(0) * ${wg}u;        // the group's first walker on this device
    const uint j = base + lid;                              // walker on this device
    const uint g = offset + j;                              // global walker index: its Philox stream
    const uint slot = (uint)(((ulong)g * slots) / total);
    const uint slot_base = slot * MU_HROW;
% if sites == "direct":
    __local uchar *const mine = (__local uchar *)(lat_l + lid);
% endif
% if table == "local":
    for (uint q = lid; q < MU_NBINS * MU_NCLS; q += ${wg}u) thr_l[q] = thr[q];
% endif
% if hmode == "local":
    for (uint q = lid; q < ${hist_rows}u * MU_HROW; q += ${wg}u) hist_l[q] = 0u;
    const uint slot0_l = (uint)(((ulong)(offset + base) * slots) / total);   // the group's first slot
    const uint row_l = ${"0u" if hist_rows == 1 else "(slot - slot0_l) * MU_HROW"};
% endif
% if table == "local" or hmode == "local":
    barrier(CLK_LOCAL_MEM_FENCE);
% endif
    if (j < W) {
% if lattice == "local":
        for (uint w = 0; w < MU_WORDS; ++w) LAT(w) = lattice[(size_t)w * W + j];
% endif
        int bin = bins[j];
% if magnet:
        int m = mags[j];
% endif
% if trips:
        uint tr = trips[j];
% endif
        const uint2 key = (uint2)(k0, k1);
        ulong t = ((ulong)t_hi << 32) | t_lo;
        uint i = 0;
% if binx:
        __local const uchar *const thr_b = (__local const uchar *)thr_l + MU_DIM * 4u;   // column nd - dim
        uint tb = (uint)bin * (MU_NCLS * 4u);
% endif
        uint4 rnd = mu_philox(mu_step_counter(t, g, MU_TAG_ACCEPT), key);
        if ((t & 3u) != 0u) {                         // the ragged start of a launch
            for (uint c = (uint)(t & 3u); c < 4u && i < n; ++c) {
                const uint word = c == 1u ? rnd.y : c == 2u ? rnd.z : rnd.w;
${step("word", "i")}
                ++i;
                ++t;
            }
            rnd = mu_philox(mu_step_counter(t, g, MU_TAG_ACCEPT), key);
        }
        // whole blocks, the next one's words ahead; sp: this block's descriptors;
        // (blk, bhi): the 64-bit block number t / 4 of the words computed ahead
        __global const uint4 *sp = sites + ${1 if sites == "packed" else ndesc}u * i;
        uint blk = (uint)(t >> 2), bhi = (uint)(t >> 34);
        while (i + 4u <= n) {
            const uint4 cur = rnd;
            ++blk;
            bhi += blk == 0u;
            rnd = mu_philox((uint4)(blk, bhi, g, MU_TAG_ACCEPT), key);
% for c, comp in enumerate("xyzw"):
${step("cur." + comp, "%du" % c, "sp")}
% endfor
            sp += ${4 if sites == "packed" else 4 * ndesc}u;
            i += 4u;
        }
        for (uint c = 0; i < n; ++c) {                // the ragged end (rnd: its block's words)
            const uint word = c == 0u ? rnd.x : c == 1u ? rnd.y : rnd.z;
${step("word", "i")}
            ++i;
        }
% if binx:
        bin = (int)(tb / (MU_NCLS * 4u));
% endif
        bins[j] = bin;
% if magnet:
        mags[j] = m;
% endif
% if trips:
        trips[j] = tr;
% endif
% if lattice == "local":
        for (uint w = 0; w < MU_WORDS; ++w) lattice[(size_t)w * W + j] = LAT(w);
% endif
    }
% if hmode == "local":
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint q = lid; q < ${hist_rows}u * MU_HROW; q += ${wg}u) {
        const uint c = hist_l[q];
        if (c) atomic_add(&hist[slot0_l * MU_HROW + q], c);
    }
% endif
}
