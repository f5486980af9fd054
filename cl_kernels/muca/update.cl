## Multicanonical single-spin-flip Metropolis updates of many walkers at once,
## on the walker-sliced lattice (clphys/muca/geometry.py: one word holds one
## site of 32 walkers). All walkers flip at the same site at a step (the shared
## sequence of muca_sites), each accepts with its own Philox word w. A step
## loads the site's word and its 2 dim neighbours' (the same words for the 32
## walkers of a word), counts the neighbours that differ from each spin with a
## bit-sliced adder (a few logic operations for all 32), and each walker then
## decides from the threshold table; the accepted flips of a word are stored
## at once. The decisions are those of protocol.thresholds bit for bit (the
## pair table of protocol.pair_codes), so a seed gives the same walkers and
## histograms on every device, work-group size and variant.
##
## A work item handles K walkers of one word (bits q, q + P, ..., P = 32 / K
## items per word); the P items of a word combine their flips by
## combine = "none" (K = 32: one item per word), "ballot" (NVIDIA: a warp vote;
## the items of a word are lanes of one warp) or "local" (a local-memory OR and
## a work-group barrier per step, any device).
##
## Steps go in Philox blocks of four: the walkers' next block of words is
## computed during this block, and with `ahead` the next block's lattice
## words are loaded during this one. A step whose sites were flipped since
## the start of the previous block (flag in its descriptor, muca_sites) reloads
## its words after the flips before it.
##
## With record (a compile-time choice: the thermalisation's launches carry no
## histogram code) each counted step (see every) adds the walker's energy bin
## to histogram slot g * slots / total of its global index g (and (bin, |M|/2)
## to mhist with magnet); hist="local" counts into work-group rows (its first walker's slot
## and, with hist_rows = 2, the next) added to the global histogram at the end
## of the launch: hist_bits = 32-bit counts, or 16-bit ones two to a word
## (bin b in half b & 1 of word b / 2), also added every hist_flush steps,
## before a count can pass 65535 (the host sets hist_flush from the walkers
## of a work group: wg K counts per counted step at most). window (hist="global", bins, a
## multiple of 4; 0: none): each walker counts into its own window of that many bins
## in local memory (8-bit counts, four to a word), centred on its bin and added to
## the global histogram every window_flush steps and at the end; a step outside
## the window counts in the global histogram at once.
## With ahead, two orderings keep a warp from waiting on loads it issued last: nd_first
## computes every step's nd of a block from its words before the next block's loads
## are issued, and desc_ahead loads the step descriptors a block before the words they
## address (both: the same walkers and histograms).
## every (record; 1, 2 or 4): a walker's bin is counted at the steps t that are
## multiples of `every` only (a walker's bin changes by at most dim per step and
## its histogram's autocorrelation time is far longer, so 1 in 4 steps holds the
## same information; the counting is what the recorded launches pay for).
## trips: each walker's passages between the ends trip_lo / trip_hi
## of the energy range, trips[j] = passages << 2 | last end (1 low, 2 high).
##
## params: dim, L, wg, K (1, 2, 4, 8, 16, 32), combine, table ("local": the
## pair codes in local memory | "global"), hist ("local" | "global"), record,
## magnet, hist_rows (1 | 2), hist_bits (32 | 16), hist_flush, trips, ahead, nd_first,
## desc_ahead, full (every item's walkers below W), layout ("pair" | "row" | "row16")
<%namespace name="philox" file="/rng/philox.cl"/>
<%namespace name="mc" file="/muca/common.cl"/>
<%
    for name, value, allowed in (("K", K, (1, 2, 4, 8, 16, 32)), ("combine", combine, ("none", "ballot", "local")),
                                 ("table", table, ("local", "global")), ("hist", hist, ("local", "global")),
                                 ("record", record, (False, True)), ("hist_rows", hist_rows, (1, 2)),
                                 ("ahead", ahead, (False, True))):
        if value not in allowed:
            raise ValueError("muca update.cl: %s must be one of %s, got %r" % (name, allowed, value))
    if (combine == "none") != (K == 32):
        raise ValueError("muca update.cl: combine='none' goes with K = 32 (one work item per word), got "
                         "combine=%r, K=%r" % (combine, K))
    if combine == "ballot" and (dev.vendor != "nvidia" or wg % 32):
        raise ValueError("muca update.cl: combine='ballot' needs an NVIDIA device and wg a multiple of 32")
    P = 32 // K                      # work items per word
    # two walkers per item on NVIDIA: a word's flips from the two votes by one byte permute
    # (H200, unrecorded / recorded flips/ns: 2D L = 64 at 768 walkers per SM 423 / 366 against
    # 405 / 349 with shifts and masks, L = 128 at 512 317 / 255 against 305 / 239)
    prmt = combine == "ballot" and K == 2
    # NVIDIA: a walker's new bin as an explicit select of bin + d and bin, which the compiler
    # otherwise makes an add of a select of d and 0, one instruction more (H200, flips/ns
    # unrecorded / recorded: 2D L = 128 at 1024 walkers per SM 411 / 306 against 403 / 304,
    # L = 256 384 / 233 against 376 / 233, L = 64 at 768 421 / 375 against 423 / 358; the
    # recorded figures vary by ~2 % between processes)
    selp = combine == "ballot"
    nd_first = bool(context.get("nd_first", False))
    desc_ahead = bool(context.get("desc_ahead", False))
    if (nd_first or desc_ahead) and not ahead:
        raise ValueError("muca update.cl: nd_first and desc_ahead go with ahead")
    hist_bits = context.get("hist_bits", 32)
    hist_flush = context.get("hist_flush", 0)
    if hist_bits not in (32, 16):
        raise ValueError("muca update.cl: hist_bits must be 32 or 16, got %r" % (hist_bits,))
    half = record and hist == "local" and hist_bits == 16     # 16-bit local counts
    every = int(context.get("every", 1))
    if every not in (1, 2, 4):
        raise ValueError("muca update.cl: every must be 1, 2 or 4, got %r" % (every,))
    # a count grows by at most wg K in `every` steps
    if half and not 7 <= hist_flush <= every * (0xFFFF // (wg * K)):
        raise ValueError("muca update.cl: hist_flush must be 7 .. every 65535 / (wg K) = %d steps with 16-bit "
                         "counts, got %r" % (every * (0xFFFF // (wg * K)), hist_flush))
    if wg % P:
        raise ValueError("muca update.cl: wg = %d is not a multiple of the %d work items per word" % (wg, P))
    S = 2 * dim + 1                  # words per step
    hmode = hist if record else "none"
    # runs: a walker's steps in one bin are counted at once, when it leaves the bin
    runs = bool(context.get("runs", False)) and hmode != "none"
    win = int(context.get("window", 0)) if hmode == "global" else 0
    win_flush = int(context.get("window_flush", 0))
    # a window's 8-bit count holds the counted ones of at most window_flush + 6 steps (a block
    # past the flush check and a ragged end of 3)
    if win and (win % 4 or runs or not 4 <= win_flush <= every * 0xFF - 8):
        raise ValueError("muca update.cl: window must be a multiple of 4, without runs, with window_flush "
                         "4 .. 255 every - 8 = %d steps, got window=%r, window_flush=%r, runs=%r"
                         % (every * 0xFF - 8, win, win_flush, runs))
    NW = wg * K                      # walkers of a work group (a window's words are NW apart)
    # 2D: walkers past W count into a spare word after the local rows, not behind a branch
    # (H200, 2D L = 64: recorded 216 -> 267 flips/ns); 3D keeps the branch (L = 16: 253 -> 179)
    spare = hmode == "local" and dim == 2
    # every item's walkers below W (W a multiple of wg K): no walker to leave out anywhere
    full = bool(context.get("full", False))
    # threshold codes: a byte per pair of bins ("pair"), per (bin, nd) ("row"), or 16 bits per (bin, nd)
    # ("row16": the exact thresholds read in 1 of 65536 moves instead of 1 of 256)
    layout = context.get("layout", "pair")
    lattice_mode = context.get("lattice", "global")   # "local": the group's words copied in for the launch
    if lattice_mode not in ("global", "local"):
        raise ValueError("muca update.cl: lattice must be 'global' or 'local', got %r" % (lattice_mode,))
    WPG = wg // P                                   # lattice words of one work group
    if layout not in ("pair", "row", "row16"):
        raise ValueError("muca update.cl: layout must be 'pair', 'row' or 'row16', got %r" % (layout,))
    code_bits = 16 if layout == "row16" else 8
    code_type = "ushort" if layout == "row16" else "uchar"
    sync = {"none": "", "ballot": "MU_WARP_SYNC();", "local": "barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);"}[combine]
    comps = "xyzw"
    # the ragged start and end of a launch: step t counted iff t % every == 0 (whole blocks
    # start at multiples of 4: their step c is counted iff c % every == 0)
    ragged_tally = "1" if every == 1 else "(c & %du) == 0u" % (every - 1)
    def dword(prefix, c, a):
        k = c * S + a
        return "%s%d.%s" % (prefix, k // 4, comps[k % 4])
%>
${mc.geometry(dim, L)}\
${philox.philox4x32_10("mu_")}\
${mc.counters()}
#define MU_CODE_SHIFT 25u
#define MU_CODE_WORDS ((MU_NBINS * ${dim if layout == "pair" else (2 * dim + 1) * code_bits // 8}u + 3u) / 4u)
#define MU_NCLS ${2 * dim + 1}u
// words per row of a local histogram
#define MU_HROW ${"((MU_NBINS + 1u) / 2u)" if half else "MU_NBINS"}

% if combine == "ballot":
// the flips of a word's lanes as one word (PTX: vote over the warp)
inline uint mu_ballot(uint p)
{
    uint r;
    asm volatile("{ .reg .pred q; setp.ne.u32 q, %1, 0; vote.sync.ballot.b32 %0, q, 0xffffffff; }"
                 : "=r"(r) : "r"(p));
    return r;
}
// bytes of a and b picked by s (PTX prmt): the two walkers' votes of a word as its flips
inline uint mu_prmt(uint a, uint b, uint s)
{
    uint r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
    return r;
}
// a if p != 0 else b (PTX selp)
inline int mu_selp(int a, int b, uint p)
{
    int r;
    asm("{ .reg .pred q; setp.ne.u32 q, %3, 0; selp.b32 %0, %1, %2, q; }" : "=r"(r) : "r"(a), "r"(b), "r"(p));
    return r;
}
// the word's stores visible to the warp's later loads (PTX memory model)
#define MU_WARP_SYNC() asm volatile("bar.warp.sync 0xffffffff;" ::: "memory")
% endif
// the word at byte offset o (a descriptor's: site * words per site * 4) from this item's word of site 0
% if lattice_mode == "local":
#define LAT(o) (*(__local uint *)(mine + (o)))
% else:
#define LAT(o) (*(__global uint *)(mine + (o)))
% endif
// A flagged step's words loaded again (rare), out of line: a smaller, faster loop (H200, 2D L =
// 64: 270 / 261 -> 292 / 280 flips/ns; 3D L = 16 within 1 %)
__attribute__((noinline)) uint8 mu_reload(__global const uint *dp, ${"__local" if lattice_mode == "local" else "__global"} uchar *mine)
{
    uint8 r = (uint8)(0u);
% for a in range(S):
    r.s${a} = LAT(${"dp[0] & 0x7FFFFFFFu" if a == 0 else "dp[%d]" % a});
% endfor
    return r;
}
#define MU_COUNT(p) atomic_inc(p)
% if table == "local":
#define CODE(p) ((__local const ${code_type} *)codes_l)[p]
% else:
#define CODE(p) ((__global const ${code_type} *)codes)[p]
% endif

## Neighbour planes of one step from the words w0 (site) and w1.. (neighbours):
## nd = s0 + 2 s1 + 4 s2 counts, per bit, the neighbours that differ from the spin.
<%def name="planes(w)">
            const uint x1 = ${w[0]} ^ ${w[1]}, x2 = ${w[0]} ^ ${w[2]}, x3 = ${w[0]} ^ ${w[3]}, x4 = ${w[0]} ^ ${w[4]};
% if dim == 2:
            const uint pa = x1 ^ x2, pb = x3 ^ x4, c12 = x1 & x2, c34 = x3 & x4;
            const uint s0 = pa ^ pb, k0 = pa & pb;
            const uint s1 = c12 ^ c34 ^ k0, s2 = (c12 & c34) | (k0 & (c12 ^ c34));
% else:
            const uint x5 = ${w[0]} ^ ${w[5]}, x6 = ${w[0]} ^ ${w[6]};
            const uint sa = x1 ^ x2 ^ x3, ca = (x1 & x2) | (x3 & (x1 ^ x2));
            const uint sb = x4 ^ x5 ^ x6, cb = (x4 & x5) | (x6 & (x4 ^ x5));
            const uint s0 = sa ^ sb, k0 = sa & sb;
            const uint s1 = ca ^ cb ^ k0, s2 = (ca & cb) | (k0 & (ca ^ cb));
% endif
</%def>

## One step: words w (names), acceptance word of walker i = word_of(i), store at
## `off`; updates the walkers' state and stores the site's new word.
<%def name="step(w, word_of, off, c=None, tally='1')">
        {
% if c is None:
${planes(w)}
%   if P >= 4:
            const uint nds = ${pack_nds()};
%   endif
% elif P >= 4:
            const uint nds = nds${c};
% else:
            const uint s0 = p0_${c}, s1 = p1_${c}, s2 = p2_${c};
% endif
<%
    # GPU plans (several items per word): every walker's decision first, then the rare
    # exact comparisons, then the votes and flips, so that the walkers' table loads
    # overlap (no branch or vote between them). One item per word (CPUs): one loop, which
    # compiles in half the time of 32 unrolled phases.
    phased = K < 32
    i = "v" if phased else "0"
%>\
            uint flip = 0u;
% if prmt:
            uint votes_[2];
% endif
% if phased:
            uint word_[${K}], idx_[${K}];
            int d_[${K}];
            bool acc_[${K}], tie_[${K}];
% endif
            for (uint v = 0; v < ${K}u; ++v) {
% if not phased:
                uint word_[1], idx_[1];
                int d_[1];
                bool acc_[1], tie_[1];
% endif
                {   // the decision
                const uint word = ${word_of};
% if P >= 4:
                const uint nd = (nds >> (${P}u * v)) & 7u;
% else:
                const uint sh = q + ${P}u * v;
                const uint nd = ((s0 >> sh) & 1u) | (((s1 >> sh) & 1u) << 1) | (((s2 >> sh) & 1u) << 2);
% endif
                const int d = MU_DIM - (int)nd;                 // bins moved by the flip
% if layout == "pair":
                // the pair (lo, lo + |d|) (a walker past W has only down spins: d = dim, lo = 0)
                const uint pidx = (uint)(bin[v] + min(d, 0)) * MU_DIM + max((uint)abs(d), 1u) - 1u;
                const uint code = CODE(pidx);
                // a pair's restricted move: up (lo -> lo + |d|) if code & 1, else down
                const bool restricted = d != 0 && (code & 1u) == (uint)(d > 0);
                const uint wq = word >> MU_CODE_SHIFT, qq = code >> 1;
                acc_[${i}] = !restricted || wq < qq;
                tie_[${i}] = restricted && wq == qq;          // about 1 in 128 restricted moves
                idx_[${i}] = pidx;
% else:
                // the top byte (row16: 16 bits) of thr[bin, k] (columns by nd = 2 dim - k)
                const uint ridx = (uint)bin[v] * MU_NCLS + nd;
                const uint top = CODE(ridx), wq = word >> ${32 - code_bits}u;
                // the same top bits (1 in 256 moves, row16 1 in 65536) need the exact threshold;
                // 8-bit codes: a flip that keeps the energy (d = 0, threshold 2^32 - 1) is
                // accepted without it. 16-bit codes leave that to the rare exact path, which
                // accepts it too: fewer instructions (H200, 2D L = 64, unrecorded: 405 against
                // 387 flips/ns at 768 walkers per SM, 360 against 346 at 512)
% if code_bits == 16:
                acc_[${i}] = wq < top;
                tie_[${i}] = wq == top;
% else:
                acc_[${i}] = wq < top || d == 0;
                tie_[${i}] = wq == top && d != 0;
% endif
                idx_[${i}] = ridx;
% endif
                word_[${i}] = word;
                d_[${i}] = d;
                }
% if phased:
            }
            bool any_tie = false;                               // one branch for the item's walkers
            for (uint v = 0; v < ${K}u; ++v) any_tie |= tie_[v];
            if (any_tie) {
                for (uint v = 0; v < ${K}u; ++v)
                    acc_[v] = tie_[v] ? word_[v] <= ex[idx_[v]] : acc_[v];
            }
            for (uint v = 0; v < ${K}u; ++v) {
% else:
                if (tie_[0]) acc_[0] = word_[0] <= ex[idx_[0]];
% endif
                const uint sh = q + ${P}u * v;
                const int d = d_[${i}];
                const bool acc = acc_[${i}] && real[v];
% if combine == "ballot":
                const uint votes = mu_ballot(acc);
%   if prmt:
                votes_[v] = votes;
%   elif P == 32:
                flip |= votes;
%   else:
                flip |= ((votes >> (lane & ${32 - P}u)) & ${(1 << P) - 1}u) << (${P}u * v);
%   endif
% else:
                flip |= (uint)acc << sh;
% endif
% if selp:
                bin[v] = mu_selp(bin[v] + d, bin[v], (uint)acc);
% else:
                bin[v] += acc ? d : 0;
% endif
% if magnet:
                m[v] += acc ? (((${w[0]} >> sh) & 1u) ? -2 : 2) : 0;
% endif
% if trips:
                {   // a passage: the walker reaches the end opposite to the last one it saw
                    const uint end = bin[v] <= trip_lo ? 1u : bin[v] >= trip_hi ? 2u : 0u;
                    if (end != 0u && end != (tr[v] & 3u))
                        tr[v] = (((tr[v] >> 2) + ((tr[v] & 3u) != 0u)) << 2) | end;
                }
% endif
% if record and tally != "0":
<% counted = "" if spare else "if (real[v]) " %>\
%   if tally != "1":
                if (${tally}) {
%   endif
%   if runs:
                if (bin[v] != run_bin[v]) {
                    ${counted}${count("v", "run_bin[v]", "run_n[v]")}
                    run_bin[v] = bin[v];
                    run_n[v] = 0u;
                }
                ++run_n[v];
%   else:
                ${counted}${count("v", "bin[v]", "1u")}
%   endif
%   if magnet:
                if (real[v]) MU_COUNT(&mhs[(size_t)(mrow[v] + (uint)bin[v]) * MU_NM + (uint)abs(m[v]) / 2u]);
%   endif
%   if tally != "1":
                }
%   endif
% endif
            }
% if prmt:
            flip = mu_prmt(votes_[0], votes_[1], prmt_sel);
% endif
% if combine == "local":
            comb_l[parity * ${wg}u + lid] = flip;
            // (global too: the loads of this step before the store below)
            barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            flip = 0u;
            for (uint r = 0; r < ${P}u; ++r) flip |= comb_l[parity * ${wg}u + lid / ${P}u * ${P}u + r];
            parity ^= 1u;
% endif
            if (writer) LAT(${off}) = ${w[0]} ^ flip;
        }
</%def>

## Loads the S words of one step (descriptor words at dp) into names w.
<%def name="load_step(w, dp)">
            const uint8 rw = mu_reload(${dp}, mine);
            ${"; ".join("%s = rw.s%d" % (w[a], a) for a in range(S))};
</%def>

## n steps of walker v in bin b added to its histogram row (one step: an increment).
<%def name="count(v, b, n)">\
% if win:
## a local atomic whose result is unused does not wait for the word's load, a += does (H200,
## 2D L = 256: 212 -> 218-226 recorded flips/ns); the window is the walker's own: no contention
{ const uint o_ = (uint)(${b} - base[${v}]); if (o_ < ${win}u) atomic_add(&${win_word(v, "o_ >> 2")}, ${n} << ((o_ & 3u) << 3)); else ${row_add(v, b, n)} }\
% elif half:
atomic_add(&hist_l[hrow[${v}] + ((uint)${b} >> 1)], ${n} << (((uint)${b} & 1u) << 4));\
% else:
${row_add(v, b, n)}\
% endif
</%def>

## n steps added to walker v's row of 32-bit counts (local or global) at bin b.
<%def name="row_add(v, b, n)">\
<% h = "&%s[hrow[%s] + (uint)%s]" % ("hist_l" if hmode == "local" else "hs", v, b) %>\
% if n == "1u":
${"atomic_inc" if hmode == "local" else "MU_COUNT"}(${h});\
% else:
atomic_add(${h}, ${n});\
% endif
</%def>

## Every walker's open run added and restarted (before local counts are read).
<%def name="close_runs()">
        for (uint v = 0; v < ${K}u; ++v) {
            if (${"" if spare else "real[v] && "}run_n[v] != 0u) ${count("v", "run_bin[v]", "run_n[v]")}
            run_n[v] = 0u;
        }
</%def>

## Word k of walker v's window (the walkers' words side by side: a warp's lanes in different banks).
<%def name="win_word(v, k)">win_l[(${k}) * ${NW}u + ${v} * ${wg}u + lid]</%def>

## A word c of 32 / bits counts of `bits` bits each (count k in bits k bits and up) added to the global counts at h + k.
<%def name="add_packed(h, c, bits)">
% for k in range(32 // bits):
<% part = "((%s >> %du) & 0x%Xu)" % (c, bits * k, (1 << bits) - 1) %>\
            if (${part}) atomic_add(${h} + ${k}u, ${part});
% endfor
</%def>

## Every walker's window added to the global histogram and zeroed; with `recentre`,
## the window moves to be centred on the walker's bin (inside the energy range).
<%def name="flush_windows(recentre)">
        for (uint v = 0; v < ${K}u; ++v) {
            __global uint *const h = hs + hrow[v] + (uint)base[v];
            for (uint o = 0; o < ${win // 4}u; ++o) {
                const uint c = ${win_word("v", "o")};
                if (c) {
${add_packed("h + 4u * o", "c", 8)}
                    ${win_word("v", "o")} = 0u;
                }
            }
% if recentre:
            base[v] = clamp(bin[v] - ${win // 2}, 0, (int)MU_NBINS - ${win});
% endif
        }
</%def>

## The 16-bit local counts added to the global histogram (and zeroed when `zero`).
<%def name="add_halves(zero)">
    for (uint r = lid; r < ${hist_rows}u * MU_HROW; r += ${wg}u) {
        const uint c = hist_l[r];
        if (c) {
            const uint row = r / MU_HROW, b = 2u * (r - row * MU_HROW);
            __global uint *const h = hs + (slot0_l + row) * MU_NBINS + b;
${add_packed("h", "c", 16)}
% if zero:
            hist_l[r] = 0u;
% endif
        }
    }
</%def>

## The walkers' nd from the planes s0, s1, s2, 3 bits each at bit P v (P >= 4: they do not overlap).
<%def name="pack_nds()">\
<% M = "%su" % hex(sum(1 << (P * v) for v in range(K))) %>\
((s0 >> q) & ${M}) | (((s1 >> q) & ${M}) << 1) | (((s2 >> q) & ${M}) << 2)\
</%def>

## Step c's nd (P >= 4: packed, nds<c>; else its planes p0_<c> ..) from its words w, for nd_first.
<%def name="nd_of(w, c)">
        {
${planes(w)}
% if P >= 4:
            nds${c} = ${pack_nds()};
% else:
            p0_${c} = s0; p1_${c} = s1; p2_${c} = s2;
% endif
        }
</%def>

## A block's S descriptor words (uint4, from slot i0, a multiple of 4, so 16-byte aligned)
## into uint4 names <d>0.. (D: desc_ahead's, declared before).
<%def name="load_desc(i0, d='D')">
            {
                __global const uint4 *const dq = (__global const uint4 *)(desc + (size_t)(${i0}) * MU_SPAN);
%   for k in range(S):
                ${d}${k} = dq[${k}];
%   endfor
            }
</%def>

## The 4 steps' words of the block whose descriptors are in uint4 names <d>0.. into names w,
## offsets offs, flags fl.
<%def name="load_words(w, offs, fl, d='D')">
%   for c in range(4):
%     for a in range(S):
            ${w[c][a]} = LAT(${dword(d, c, a) + (" & 0x7FFFFFFFu" if a == 0 else "")});
%     endfor
            ${offs[c]} = ${dword(d, c, 0)} & 0x7FFFFFFFu;
%   endfor
            ${fl} = ${" | ".join("((%s >> 31) << %d)" % (dword(d, c, 0), c) for c in range(4))};
</%def>

## Loads a whole block's descriptors (from descriptor slot i0) and its 4 steps' words
## into names w, offsets offs, flags fl.
<%def name="load_block(i0, w, offs, fl)">
            uint4 ${", ".join("d%d" % k for k in range(S))};
${load_desc(i0, "d")}
${load_words(w, offs, fl, "d")}
</%def>

## One whole block of 4 steps on the words `cur` (offsets co, reload flags cf); with
## ahead, the next block's words go to `nxt` (no, nf) during it, else to `cur` after it.
<%def name="whole_block(cur, co, cf, nxt, no, nf)">
        {
% if nd_first:
        // every step's nd now: a warp waits for this block's words (loaded a block ago), not
        // for the next block's loads below (H200, 2D L = 128, 512 walkers per SM, with
        // desc_ahead: 305 against 275 flips/ns unrecorded)
% for c in range(4):
        uint ${"nds%d" % c if P >= 4 else "p0_%d, p1_%d, p2_%d" % (c, c, c)};
${nd_of(cur[c], c)}
% endfor
% endif
% if half:
        if (since > ${hist_flush - 7}u) {            // this block and a ragged end of 3 could pass 65535
% if runs:
${close_runs()}
% endif
            barrier(CLK_LOCAL_MEM_FENCE);
${add_halves(True)}
            barrier(CLK_LOCAL_MEM_FENCE);
            since = 0u;
        }
        since += 4u;
% endif
% if win:
        if (since_w >= ${win_flush}u) {
${flush_windows(True)}
            since_w = 0u;
        }
        since_w += 4u;
% endif
        for (uint v = 0; v < ${K}u; ++v) {
            cur0[v] = rnd0[v]; cur1[v] = rnd1[v]; cur2[v] = rnd2[v]; cur3[v] = rnd3[v];
            const uint4 r = mu_philox(mu_step_counter(t + 4u, offset + j0 + ${P}u * v, MU_TAG_ACCEPT), key);
            rnd0[v] = r.x; rnd1[v] = r.y; rnd2[v] = r.z; rnd3[v] = r.w;
        }
% if desc_ahead:
        if (i + 8u <= n) {                            // the next block's words, from descriptors loaded a block ago
${load_words(nxt, no, nf)}
            if (i + 12u <= n) {
${load_desc("i + 8u + doff")}
            }
        }
% elif ahead:
        if (i + 8u <= n) {                            // the next block's words, loaded now
${load_block("i + 4u + doff", nxt, no, nf)}
        }
% endif
% for c in range(4):
        if (${cf} & ${1 << c}u) {                    // a site flipped since these words were loaded
            ${sync}
${load_step(cur[c], "desc + (size_t)(i + %du + doff) * MU_SPAN" % c)}
% if nd_first:
${nd_of(cur[c], c)}
% endif
        }
${step(cur[c], "cur%d[v]" % c, co[c], c if nd_first else None, "0" if c % every else "1")}
% endfor
        ${sync}
        i += 4u;
        t += 4u;
% if not ahead:
        if (i + 4u <= n) {
${load_block("i + doff", cur, co, cf)}
        }
% endif
        }
</%def>

__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void muca_update(__global uint *lattice, __global int *bins, __global int *mags,
                 __global const uchar *codes, __global const uint *exact, __global const uint *desc,
                 __global uint *hist, __global uint *mhist, __global uint *trips,
                 const uint n_arg, const uint t_lo, const uint t_hi,
                 const uint k0, const uint k1, const uint W_arg, const uint offset, const uint slots,
                 const uint total, const int trip_lo_arg, const int trip_hi_arg, const uint G_arg)
{
    // every kernel argument read here, outside divergent code
    const uint n = n_arg, W = W_arg, G = G_arg;
    const int trip_lo = trip_lo_arg, trip_hi = trip_hi_arg;
    __global const uint *const ex = exact;
    __global uint *const hs = hist;
    __global uint *const mhs = mhist;
    (void)trip_lo; (void)trip_hi; (void)hs; (void)mhs;
% if table == "local":
    __local uint codes_l[MU_CODE_WORDS];
% endif
% if lattice_mode == "local":
    __local uint lat_l[MU_N * ${WPG}u];
% endif
% if hmode == "local":
    __local uint hist_l[${hist_rows}u * MU_HROW + 1u];
% endif
% if win:
    __local uint win_l[${win // 4}u * ${NW}u];
% endif
% if combine == "local":
    __local uint comb_l[2u * ${wg}u];
    uint parity = 0u;
% endif
    const uint lid = get_local_id(0);
    const uint gid = (uint)get_group_id(0) * ${wg}u + lid;
    // (the host pads the lattice to whole work groups: every item has its word)
    const uint grp = gid / ${P}u, q = gid - grp * ${P}u;
    const bool writer = q == 0u;
% if combine == "ballot":
    const uint lane = lid & 31u;
% endif
% if prmt:
    // lanes 0-15 hold word A (bits 0-15: the first walkers' votes' low half, 16-31: the
    // second's), lanes 16-31 word B (the high halves)
    const uint prmt_sel = (lane & 16u) ? 0x7632u : 0x5410u;
% endif
    const uint j0 = 32u * grp + q;                   // walker i of this item: j0 + P i
% if lattice_mode == "local":
    const uint word0 = (uint)get_group_id(0) * ${WPG}u;
    for (uint r = lid; r < MU_N * ${WPG}u; r += ${wg}u) {
        const uint site = r / ${WPG}u, w = r - site * ${WPG}u;
        lat_l[r] = lattice[(size_t)site * G + word0 + w];
    }
    __local uchar *const mine = (__local uchar *)(lat_l + lid / ${P}u);
% else:
    __global uchar *const mine = (__global uchar *)(lattice + grp);
% endif
% if table == "local":
    for (uint r = lid; r < MU_CODE_WORDS; r += ${wg}u) codes_l[r] = ((__global const uint *)codes)[r];
% endif
% if hmode == "local":
    for (uint r = lid; r <= ${hist_rows}u * MU_HROW; r += ${wg}u) hist_l[r] = 0u;
    const uint slot0_l = (uint)(((ulong)(offset + (uint)get_group_id(0) * ${wg * K}u) * slots) / total);
% endif
% if table == "local" or hmode == "local" or lattice_mode == "local":
    barrier(CLK_LOCAL_MEM_FENCE);
% endif
    const uint2 key = (uint2)(k0, k1);
    ulong t = ((ulong)t_hi << 32) | t_lo;
    const uint doff = (uint)(t & 3u);                // descriptor slot of step i: i + doff
    bool real[${K}];
    int bin[${K}];
    // the walkers' Philox words: this block's (cur), the next (rnd); scalars per
    // component (Oclgrind 21.10 mis-tracks arrays of uint4)
    uint rnd0[${K}], rnd1[${K}], rnd2[${K}], rnd3[${K}], cur0[${K}], cur1[${K}], cur2[${K}], cur3[${K}];
% if magnet:
    int m[${K}];
% endif
% if trips:
    uint tr[${K}];
% endif
% if record:
    uint hrow[${K}];
%   if runs:
    int run_bin[${K}];
    uint run_n[${K}];
%   endif
%   if win:
    int base[${K}];
%   endif
%   if magnet:
    uint mrow[${K}];
%   endif
% endif
    for (uint v = 0; v < ${K}u; ++v) {
        const uint j = j0 + ${P}u * v, g = offset + j;
        real[v] = ${"true" if full else "j < W"};
        const uint jj = real[v] ? j : 0u;
        bin[v] = real[v] ? bins[jj] : 0;
% if magnet:
        m[v] = real[v] ? mags[jj] : 0;
% endif
% if trips:
        tr[v] = real[v] ? trips[jj] : 0u;
% endif
% if record:
        const uint slot = (uint)(((ulong)g * slots) / total);
%   if hmode == "local":
        // (a walker past W, always in bin 0: the spare word after the rows)
        hrow[v] = real[v] ? ${"0u" if hist_rows == 1 else "(slot - slot0_l) * MU_HROW"} : ${hist_rows}u * MU_HROW;
%   else:
        hrow[v] = slot * MU_NBINS;
%   endif
%   if magnet:
        mrow[v] = slot * MU_NBINS;
%   endif
%   if runs:
        run_bin[v] = bin[v];
        run_n[v] = 0u;
%   endif
%   if win:
        base[v] = clamp(bin[v] - ${win // 2}, 0, (int)MU_NBINS - ${win});
        for (uint o = 0; o < ${win // 4}u; ++o) ${win_word("v", "o")} = 0u;
%   endif
% endif
        const uint4 r = mu_philox(mu_step_counter(t, g, MU_TAG_ACCEPT), key);
        rnd0[v] = r.x; rnd1[v] = r.y; rnd2[v] = r.z; rnd3[v] = r.w;
    }
<% wn = ["w%d" % a for a in range(S)] %>
    uint ${" = 0u, ".join(wn)} = 0u;
    uint i = 0;
    // (the word's component from a uint counter c: Oclgrind 21.10 mis-evaluated t & 3 here)
    for (uint c = doff; c != 0u && c < 4u && i < n; ++c, ++i, ++t) {     // the ragged start of a launch
        __global const uint *const dp = desc + (size_t)(i + doff) * MU_SPAN;
        ${sync}
${load_step(wn, "dp")}
${step(wn, "c == 1u ? rnd1[v] : c == 2u ? rnd2[v] : rnd3[v]", "dp[0] & 0x7FFFFFFFu", tally=ragged_tally)}
    }
    if (doff != 0u) {
        for (uint v = 0; v < ${K}u; ++v) {
            const uint4 r = mu_philox(mu_step_counter(t, offset + j0 + ${P}u * v, MU_TAG_ACCEPT), key);
            rnd0[v] = r.x; rnd1[v] = r.y; rnd2[v] = r.z; rnd3[v] = r.w;
        }
    }
<%
    cw = [["c%d_%d" % (c, a) for a in range(S)] for c in range(4)]
    nw = [["n%d_%d" % (c, a) for a in range(S)] for c in range(4)]
%>
    // whole blocks (load_block)
    uint ${" = 0u, ".join(sum(cw, []))} = 0u;
% if ahead:
    uint ${" = 0u, ".join(sum(nw, []))} = 0u;
% endif
    uint off0 = 0u, off1 = 0u, off2 = 0u, off3 = 0u, flags = 0u;
% if desc_ahead:
    // the descriptors of the block after the one being loaded (H200, 2D L = 128, 512 walkers
    // per SM: 275 against 226 flips/ns unrecorded: the next block's addresses do not wait)
    uint4 ${", ".join("D%d = (uint4)(0u)" % k for k in range(S))};
    if (i + 4u <= n) {
        ${sync}
${load_desc("i + doff")}
${load_words(cw, ["off%d" % c for c in range(4)], "flags")}
        if (i + 8u <= n) {
${load_desc("i + 4u + doff")}
        }
    }
% else:
    if (i + 4u <= n) {
        ${sync}
${load_block("i + doff", cw, ["off%d" % c for c in range(4)], "flags")}
    }
% endif
% if half:
    uint since = i;                                  // recorded steps in the local counts
% endif
% if win:
    uint since_w = i;                                // steps counted in the windows
% endif
<%
    offs, noffs = ["off%d" % c for c in range(4)], ["noff%d" % c for c in range(4)]
    # 2D: two blocks per pass with the word sets swapped, no copies between blocks (H200:
    # +2-6 % at L = 64 and 128 with 135168 walkers, even at 67584). 3D copies instead: its
    # longer blocks, doubled, ran the recorded launches 29 % slower.
    swap = ahead and dim == 2
%>\
% if ahead:
    uint ${" = 0u, ".join(noffs)} = 0u, nflags = 0u;
% endif
    while (i + 4u <= n) {
${whole_block(cw, offs, "flags", nw, noffs, "nflags")}
% if swap:
        if (i + 4u > n) break;
${whole_block(nw, noffs, "nflags", cw, offs, "flags")}
% elif ahead:
%   for c in range(4):
        ${"; ".join("%s = %s" % (cw[c][a], nw[c][a]) for a in range(S))};
%   endfor
        ${"; ".join("%s = %s" % (o, no) for o, no in zip(offs, noffs))}; flags = nflags;
% endif
    }
    for (uint c = 0; i < n; ++c, ++i, ++t) {         // the ragged end (rnd: its block's words)
        __global const uint *const dp = desc + (size_t)(i + doff) * MU_SPAN;
        ${sync}
${load_step(wn, "dp")}
${step(wn, "c == 0u ? rnd0[v] : c == 1u ? rnd1[v] : rnd2[v]", "dp[0] & 0x7FFFFFFFu", tally=ragged_tally)}
    }
% if runs:
${close_runs()}
% endif
% if win:
${flush_windows(False)}
% endif
    for (uint v = 0; v < ${K}u; ++v) {
        if (real[v]) {
            const uint j = j0 + ${P}u * v;
            bins[j] = bin[v];
% if magnet:
            mags[j] = m[v];
% endif
% if trips:
            trips[j] = tr[v];
% endif
        }
    }
% if lattice_mode == "local":
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint r = lid; r < MU_N * ${WPG}u; r += ${wg}u) {
        const uint site = r / ${WPG}u, w = r - site * ${WPG}u;
        lattice[(size_t)site * G + word0 + w] = lat_l[r];
    }
% endif
% if half:
    barrier(CLK_LOCAL_MEM_FENCE);
${add_halves(False)}
% elif hmode == "local":
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint r = lid; r < ${hist_rows}u * MU_NBINS; r += ${wg}u) {
        const uint c = hist_l[r];
        if (c) atomic_add(&hs[slot0_l * MU_NBINS + r], c);
    }
% endif
}
