## Multi-spin coded Metropolis: one bit per spin (1 = spin -1), 32 spins per uint.
## The two colours live in separate arrays; word w of row `row` (row = z*Ly + y)
## of replica r holds compact sites i = 32 w .. 32 w + 31 (bit b = site 32 w + b)
## at index (r * ROWS + row) * WR + w. Rows shorter than 32 sites (Lx < 64) use
## the low S bits of one word. Neighbours of a colour-c site in the other colour:
## the same bit of the same word in rows y +- 1 (and z +- 1), the same bit of the
## same word in the own row, and the site i + 1 (row parity p = (c + y + z) % 2
## odd) or i - 1 (p even): the own-row word shifted by one bit.
##
## Aligned-neighbour counts k are bit-sliced (full adders over the 2*dim
## neighbour words), so one pass of bitwise logic serves 32 spins. Threshold
## classes (a, k) are grouped on the host: `always` lists the classes accepted
## with certainty (threshold 2^32 - 1 in every replica), `slots` the groups of
## classes that share a threshold column; a spin's slot index comes from bit
## planes and picks its threshold with a few selects, then one compare per spin.
## Philox groups of 4 sites (see clphys/ising/backends.py) are exactly 4
## consecutive bits of a word, so the 4 words of every call are used.
##
## Two sweep designs (same words, same spins):
## * lanes = 4 / 8 (CPUs): W consecutive words of a row per work item, Philox
##   on `lanes` counters at once (SIMD on CPUs);
## * lanes = 1 (GPUs): scalar Philox calls, each word's 8 calls and 32 decisions
##   straight-line code; a work item walks W rows down one word column (the
##   other colour's rows y - 1, y stay in registers), consecutive items take
##   consecutive words (coalesced). On an H100 every instruction of this
##   kernel costs about the same (2 cycles per warp, whatever its pipe), and
##   Philox4x32-10 is about 39 instructions per call (~10 per spin): the
##   count per word is what matters (docs/ising.md, Speed).
##
## Joint decisions (param `joint`, docs/ising.md "Several spins per random
## word"): one Philox word decides the k spins of a group (bits gk..gk+k-1 of a
## word) through the replica's alias table (clphys/ising/thresholds.py): the
## word's cell entry e = tb[word >> shift] gives the thermometer mask
## e.y (word < e.x) or e.y >> 16 (its alias), bit (l-1) F + j set when spin j's
## region is >= level l. Slots come in level order (slot l-1 = level l, largest
## probability first), so spin j of level l flips iff that bit is set. Masks of
## F / k consecutive groups are added into one accumulator (shifted by k bits
## each; the alias bits above bit 15 never reach the fields, D F <= 16), then
## each level's plane is cut out of the accumulators. The Philox call h of word
## index wi = row * WR + w has counter (wi * CALLS_PER_WORD + h, r, t_lo, 2 t_hi + c),
## CALLS_PER_WORD = ceil(groups per word / 4), component j -> group 4h + j.
##
## params: those of clphys.ising.multispin_source.kernel_params, which checks
## them and computes the values derived from them (S, WR, FOLDED_LY, NBITS, CALLS_PER_WORD, the
## multi-sweep tile, ...); this template only writes the code.
<%namespace name="philox" file="/rng/philox.cl"/>
<%namespace name="red" file="/common/reduce.cl"/>
<%namespace name="ic" file="/ising/common.cl"/>
<%
    def goff(q):
        """Counter offset of Philox group q of a word from that of its group 0."""
        return (q // QS) * FOLDED_LY * QS + q % QS if NATURAL_COUNTERS else q

    def up_fix(x, first):
        """The word x of the row above, rotated where the row is the first of its
        plane (C condition `first`): there the rows above a word's sub-rows are
        the sub-rows below them in the plane's last word."""
        return x if FOLD == 1 else "MS_ROTUP_IF(%s, %s)" % (x, first)

    def dn_fix(x, last):
        return x if FOLD == 1 else "MS_ROTDN_IF(%s, %s)" % (x, last)
    # Philox vector width of the lanes 4/8 design: joint words need only
    # W * CALLS_PER_WORD calls per item, so fewer lanes than `lanes` where that is less
    VL = lanes
    if joint is not None and lanes > 1:
        VL = min(lanes, max(2, 1 << ((W * CALLS_PER_WORD).bit_length() - 1)))

    def joint_decode(x, g, ind):
        """Adds the mask of group g, decoded from random word x, to its accumulator
        (+ rather than |: the fields never overlap, and it can be one multiply-add)."""
        return "%s{ const uint2 e = tb[%s >> %du]; ja%d += (%s < e.x ? e.y : e.y >> 16) << %d; }" % (
            ind, x, TABLE_SHIFT, g // GROUPS_PER_ACC, x, (g % GROUPS_PER_ACC) * GROUP_SPINS)

    def joint_flip(ind):
        """flip |= the spins whose level-l bit is set, per level l (slot l - 1)."""
        out = []
        for lev in range(1, D + 1):
            parts = []
            for a in range(ACCS_PER_WORD):
                acc = "(ja%d >> %d)" % (a, (lev - 1) * FIELD_BITS) if lev > 1 else "ja%d" % a
                part = "(%s & 0x%Xu)" % (acc, (1 << (GROUPS_PER_ACC * GROUP_SPINS)) - 1)
                parts.append(part if a == 0 else "(%s << %d)" % (part, a * GROUPS_PER_ACC * GROUP_SPINS))
            out.append("flip |= (%s) & (%s);" % (mask_of(slots[lev - 1]), " | ".join(parts)))
        return "\n".join(ind + line for line in out)

    def accept_code(mode, ind):
        """C statements of the lanes = 1 accept step of one word (g0, r, key, c3,
        th<i> in scope): the 8 (NBITS / 4) Philox calls and per-spin decisions,
        ending in `flip |= ...`. mode: select | compare."""
        out = []
        if mode == "joint":
            out.append("uint %s;" % ", ".join("ja%d = 0u" % a for a in range(ACCS_PER_WORD)))
            for h in range(CALLS_PER_WORD):
                out.append("{")
                out.append("    const uint4 v = ms_philox((uint4)(g0 + %du, rg, t_lo, c3), key);" % h)
                for j, x in enumerate(("v.x", "v.y", "v.z", "v.w")):
                    if 4 * h + j < GROUPS_PER_WORD:
                        out.append(joint_decode(x, 4 * h + j, "    "))
                out.append("}")
            out.extend(joint_flip("").split("\n"))
            return "\n".join(ind + line for line in out)
        if mode == "select":
            for b in range(NP):
                out.append("const uint P%d = %s;" % (b, mask_of(sum((tuple(slots[i]) for i in range(D) if (i >> b) & 1), ()))))
            out.append("uint acc = 0u;")
        else:
            out.append("uint %s;" % ", ".join("B%d = 0u" % i for i in range(D)))
        for q in range(NBITS // 4):
            out.append("{")
            out.append("    const uint4 v = ms_philox((uint4)(g0 + %du, rg, t_lo, c3), key);" % goff(q))
            for j, x in enumerate(("v.x", "v.y", "v.z", "v.w")):
                bit = "0x%08Xu" % (1 << (4 * q + j))
                if mode == "select":
                    out.append("    acc |= %s <= %s ? %s : 0u;" % (x, sel1(NP - 1, 0, 4 * q + j), bit))
                else:
                    for i in range(D):
                        out.append("    B%d |= %s <= th%d ? %s : 0u;" % (i, x, i, bit))
            out.append("}")
        if mode == "select":
            out.append("flip |= acc;")
        else:
            out.append("flip |= %s;" % " | ".join("((%s) & B%d)" % (mask_of(slots[i]), i) for i in range(D)))
        return "\n".join(ind + line for line in out)

    def sel1(b, base, bit):
        """Scalar threshold of the spin at bit `bit`, from slot-index planes P0..P{b}."""
        if b < 0:
            return "th%d" % base
        lo = sel1(b - 1, base, bit)
        if base + (1 << b) >= D:
            return lo
        hi = sel1(b - 1, base + (1 << b), bit)
        return "((P%d & 0x%08Xu) ? %s : %s)" % (b, 1 << bit, hi, lo)

    def eqk(k):
        terms = [("K%d" % b) if (k >> b) & 1 else ("~K%d" % b) for b in range(3)]
        return "(" + " & ".join(terms) + ")"

    def mask_of(classes):
        """Bitwise expression of the spins whose class is in `classes`."""
        classes = set(classes)
        parts = []
        for k in range(NCLS):
            a0, a1 = k in classes, NCLS + k in classes
            if a0 and a1:
                parts.append(eqk(k))
            elif a0:
                parts.append("(%s & ~s)" % eqk(k))
            elif a1:
                parts.append("(%s & s)" % eqk(k))
        return " | ".join(parts) if parts else "0u"

    def select(b, base, j):
        """Per-lane threshold (uint8) of component j from slot-index planes P0..P{b}
        (lane q reads bit 4q + j), restricted to slots base.."""
        if b < 0:
            return "(uint%d)th%d" % (lanes, base)
        lo = select(b - 1, base, j)
        if base + (1 << b) >= D:
            return lo
        hi = select(b - 1, base + (1 << b), j)
        return "select(%s, %s, P%dv << (MSB - %du))" % (lo, hi, b, j)
%>
${ic.lattice("MS_", dim, Lx, FOLDED_LY, Lz)}
${philox.philox4x32_10("ms_")}
% if lanes > 1:
${ic.philox_lanes("ms_", VL)}
// lane q <-> Philox group q of a batch = bits 4q..4q+3 (batch-relative)
#define LANE ((uint${VL})(${", ".join("%du" % q for q in range(VL))}))
#define BIT ((uint${lanes})(${", ".join("1u << %d" % (4 * q) for q in range(lanes))}))
#define MSB ((uint${lanes})(${", ".join("%du" % (31 - 4 * q) for q in range(lanes))}))
% endif
${red.wg_reduce("mss_", "long", rwg, "return a + b;")}
#define MS_WR ${WR}u
#define MS_ROWS ${ROWS}u
#define MS_WPR ${ROWS * WR}u
#define MS_VALID ${"0x%08Xu" % VALID}

% if FOLD > 1:

// x, or where c holds, x rotated by a sub-row (up_fix, dn_fix: the rows above /
// below a folded word's sub-rows across the seam). With 32-bit words a 64-bit
// shift by a selected amount: Oclgrind mis-runs a select of a rotated word
// (seen in ising_ms_multisweep with tiles cut in y), and LLVM makes funnel
// shifts of (x << n) | (x >> (32 - n)), which Oclgrind cannot run.
%   if NBITS == 32:
#define MS_ROTUP_IF(x, c) ((uint)(upsample((x), (x)) >> ((c) ? ${32 - S}u : 32u)))
#define MS_ROTDN_IF(x, c) ((uint)(upsample((x), (x)) >> ((c) ? ${S}u : 0u)))
%   else:
#define MS_ROTUP_IF(x, c) ((c) ? ((((x) << ${S}) & MS_VALID) | ((x) >> ${NBITS - S})) : (x))
#define MS_ROTDN_IF(x, c) ((c) ? (((x) >> ${S}) | (((x) << ${NBITS - S}) & MS_VALID)) : (x))
%   endif
% endif
// The other-colour neighbour at compact site i + 1 (odd) or i - 1 (even parity)
// of every bit of word c; cm / cp are the row's previous / next words.
inline uint ms_horizontal(uint c, uint cm, uint cp, uint odd)
{
% if FOLD > 1:
    // within each sub-row of ${S} bits
    return odd ? (((c >> 1) & ${"0x%08Xu" % (VALID & ~(LOWS << (S - 1)))}) | ((c & ${"0x%08Xu" % LOWS}) << ${S - 1}))
               : (((c << 1) & ${"0x%08Xu" % (VALID & ~LOWS)}) | ((c & ${"0x%08Xu" % (LOWS << (S - 1))}) >> ${S - 1}));
% elif PARTIAL:
    return odd ? ((c >> 1) | ((c & 1u) << ${NBITS - 1}))
               : (((c << 1) & MS_VALID) | (c >> ${NBITS - 1}));
% else:
    // 64-bit shifts rather than (c >> 1) | (cp << 31): LLVM makes funnel shifts of
    // the latter, which Oclgrind cannot run
    return odd ? (uint)((upsample(cp, c)) >> 1) : (uint)(upsample(c, cm) >> 31);
% endif
}

// Aligned-neighbour count planes K0..K2 of the bits of s.
#define MS_COUNT(s, n0, n1, n2, n3, n4, n5) \
% if dim == 2:
    const uint a0 = ~((s) ^ (n0)), a1 = ~((s) ^ (n1)), a2 = ~((s) ^ (n2)), a3 = ~((s) ^ (n3)); \
    const uint h0 = a0 ^ a1, c0 = a0 & a1, h1 = a2 ^ a3, c1 = a2 & a3; \
    const uint K0 = h0 ^ h1, c2 = h0 & h1; \
    const uint K1 = c0 ^ c1 ^ c2, K2 = c0 & c1;
% else:
    const uint a0 = ~((s) ^ (n0)), a1 = ~((s) ^ (n1)), a2 = ~((s) ^ (n2)); \
    const uint a3 = ~((s) ^ (n3)), a4 = ~((s) ^ (n4)), a5 = ~((s) ^ (n5)); \
    const uint h0 = a0 ^ a1 ^ a2, c0 = (a0 & a1) | (a2 & (a0 ^ a1)); \
    const uint h1 = a3 ^ a4 ^ a5, c1 = (a3 & a4) | (a5 & (a3 ^ a4)); \
    const uint K0 = h0 ^ h1, c2 = h0 & h1; \
    const uint K1 = c0 ^ c1 ^ c2, K2 = (c0 & c1) | (c2 & (c0 ^ c1));
% endif

## The lanes 4/8 update of the run of W words w0 .. w0 + W - 1 of row `row`
## (z Ly + y) of replica r: own, oc, up, dn, fr, bk are pointers (global or
## local) to the starts of that row in the own colour and of the rows y, y - 1,
## y + 1, z - 1, z + 1 in the other colour. In scope: w0, row, odd, r, colour,
## t_lo, t_hi, key, rg (the replica's global index), gshift (the Philox counter
## of local row 0), and tb (joint) or th0.. (one word per spin).
<%def name="lanes_run(own, oc, up, dn, fr, bk)">
<% ld = (lambda p: "%s[w0]" % p) if W == 1 else (lambda p: "vload%d(0, %s + w0)" % (W, p)) %>
    const uint${vec} s_v = ${ld(own)};
    const uint${vec} c_v = ${ld(oc)};
% if PLANES:
    // ${PP} whole planes z .. z + ${PP - 1}: fr / bk point at the planes z - 1 and
    // z + ${PP}; the other neighbour rows and words are the run's own other-colour words
% elif ROWS_RUN:
    // ${RR} whole rows: up / dn point at the rows y - 1 and y + ${RR}; the other
    // neighbour rows and words are the run's own other-colour words
%   for j in range(WR):
    const uint u_first${j} = ${up_fix("%s[%d]" % (up, j), "y == 0u")}, d_last${j} = ${dn_fix("%s[%d]" % (dn, j), "y + %du == MS_LY" % RR)};
%   endfor
% else:
    const uint${vec} u_v = ${up_fix(ld(up), "y == 0u")};
    const uint${vec} d_v = ${dn_fix(ld(dn), "y + 1u == MS_LY")};
% endif
% if dim == 3 and not PLANES:
    const uint${vec} f_v = ${ld(fr)};
    const uint${vec} b_v = ${ld(bk)};
% endif
% if not PARTIAL and not ROWS_RUN:
    const uint prev = oc[w0 == 0u ? MS_WR - 1u : w0 - 1u];
    const uint next = oc[w0 + ${W}u == MS_WR ? 0u : w0 + ${W}u];
% endif
% if joint is not None:
    // the run's ${W * CALLS_PER_WORD} Philox calls, ${VL} at a time: lane q of batch b is
    // call b * ${VL} + q, i.e. call h of word w0 + (b * ${VL} + q) / ${CALLS_PER_WORD}
<%   NB = -(-(W * CALLS_PER_WORD) // VL) %>
%   for b in range(NB):
    uint${VL} jx${b}, jy${b}, jz${b}, jw${b};
    ms_philox_lanes((uint${VL})((row * MS_WR + w0) * ${CALLS_PER_WORD}u + gshift + ${b * VL}u) + LANE, rg, t_lo,
                    t_hi * 2u + colour, key, &jx${b}, &jy${b}, &jz${b}, &jw${b});
%   endfor
% endif
    uint${vec} out_v;
<%
    comp = (lambda v, k: v) if W == 1 else (lambda v, k: "%s.s%s" % (v, "01234567"[k]))
%>
% for k in range(W):
    {
        const uint s = ${comp("s_v", k)};
        const uint c = ${comp("c_v", k)};
%   if ROWS_RUN:
<%
        rk, wk = divmod(k, WR)
        pk, yk = divmod(rk, FOLDED_LY)    # plane and row of a PLANES run (pk 0 otherwise)
        rotup = (lambda x: up_fix(x, "true"))
        rotdn = (lambda x: dn_fix(x, "true"))
        if PLANES:
            u = comp("c_v", k - WR) if yk else rotup(comp("c_v", k + (FOLDED_LY - 1) * WR))
            d = comp("c_v", k + WR) if yk < FOLDED_LY - 1 else rotdn(comp("c_v", k - (FOLDED_LY - 1) * WR))
            f = comp("c_v", k - FOLDED_LY * WR) if pk else "%s[%d]" % (fr, rk * WR + wk)
            bb = comp("c_v", k + FOLDED_LY * WR) if pk < PP - 1 else "%s[%d]" % (bk, yk * WR + wk)
        else:
            u = "u_first%d" % wk if rk == 0 else comp("c_v", k - WR)
            d = "d_last%d" % wk if rk == RR - 1 else comp("c_v", k + WR)
            f, bb = (comp("f_v", k), comp("b_v", k)) if dim == 3 else ("0u", "0u")
%>
        const uint oddk = odd ^ ${(yk + pk) % 2}u;
%     if PARTIAL:
        const uint hn = ms_horizontal(c, 0u, 0u, oddk);
%     else:
        const uint hn = ms_horizontal(c, ${comp("c_v", rk * WR + (wk - 1) % WR)}, ${comp("c_v", rk * WR + (wk + 1) % WR)}, oddk);
%     endif
        MS_COUNT(s, c, hn, ${u}, ${d}, ${f}, ${bb})
%   else:
%     if PARTIAL:
        const uint hn = ms_horizontal(c, 0u, 0u, odd);
%     else:
        const uint hn = ms_horizontal(c, ${"prev" if k == 0 else comp("c_v", k - 1)}, ${"next" if k == W - 1 else comp("c_v", k + 1)}, odd);
%     endif
        MS_COUNT(s, c, hn, ${comp("u_v", k)}, ${comp("d_v", k)}, ${comp("f_v", k) if dim == 3 else "0u"}, ${comp("b_v", k) if dim == 3 else "0u"})
%   endif
        uint flip = ${mask_of(always)};
%   if D and joint is not None:
        uint ${", ".join("ja%d = 0u" % a for a in range(ACCS_PER_WORD))};
%     for h in range(CALLS_PER_WORD):
<%      b, q = divmod(k * CALLS_PER_WORD + h, VL) %>
%       for j, x in enumerate("xyzw"):
%         if 4 * h + j < GROUPS_PER_WORD:
${joint_decode("j%s%d.s%d" % (x, b, q), 4 * h + j, "        ")}
%         endif
%       endfor
%     endfor
${joint_flip("        ")}
%   elif D:
%     for b in range(NP):
        uint P${b} = ${mask_of(sum((tuple(slots[i]) for i in range(D) if (i >> b) & 1), ()))};
%     endfor
        // Lane q of Philox batch h is group g0 + ${lanes}h + q = bits 4q..4q+3 of
        // the batch's ${4 * lanes} bits; component j is bit 4q + j. Lane shifts
        // move that bit to the MSB (select) or pick it (accept bits).
        const uint g0 = gshift + ${"(row + z * %du + %du) * %du" % (Ly - FOLDED_LY, k + (k // FOLDED_LY) * (Ly - FOLDED_LY), QS) if NATURAL_COUNTERS else "(row + %du) * (MS_S / 4u)" % k if PARTIAL else "row * (MS_S / 4u) + (w0 + %du) * 8u" % k};
        uint acc = 0u;
%     for h in range(8 // lanes):
%       if 4 * lanes * h < NBITS:
        {
            uint${lanes} vx, vy, vz, vw;
            ms_philox_lanes(${"(uint%d)(g0) + (uint%d)(%s)" % (lanes, lanes, ", ".join("%du" % goff(lanes * h + q) for q in range(lanes))) if NATURAL_COUNTERS else "(uint%d)(g0 + %du) + LANE" % (lanes, lanes * h)}, rg, t_lo, t_hi * 2u + colour, key,
                            &vx, &vy, &vz, &vw);
%         for b in range(NP):
            const uint${lanes} P${b}v = (uint${lanes})(P${b} >> ${4 * lanes * h});
%         endfor
            const uint${lanes} accv = (as_uint${lanes}(vx <= ${select(NP - 1, 0, 0)}) & (BIT << 0))
                                    | (as_uint${lanes}(vy <= ${select(NP - 1, 0, 1)}) & (BIT << 1))
                                    | (as_uint${lanes}(vz <= ${select(NP - 1, 0, 2)}) & (BIT << 2))
                                    | (as_uint${lanes}(vw <= ${select(NP - 1, 0, 3)}) & (BIT << 3));
%         if lanes == 8:
            const uint4 acc4 = accv.lo | accv.hi;
            const uint2 acc2 = acc4.lo | acc4.hi;
%         else:
            const uint2 acc2 = accv.lo | accv.hi;
%         endif
            acc |= (acc2.x | acc2.y) << ${4 * lanes * h};
        }
%       endif
%     endfor
        flip |= acc;
%   endif
        ${comp("out_v", k)} = s ^ (flip & MS_VALID);
    }
% endfor
% if W == 1:
    ${own}[w0] = out_v;
% else:
    vstore${W}(out_v, 0, ${own} + w0);
% endif
</%def>

// One half-sweep of colour `colour`: own = its words, other = the other colour's.
// thr: (R, ${D}) per-slot thresholds. One work item per run of ${W} words of a row.
// Several ranks (clphys.ising.slabs and split ensembles): r0 is the global index
// of replica 0; the launch updates n_rows rows of every replica from row_begin on,
// wrapping to row 0 at row_wrap (so one launch does both edges of a slab share;
// items past them return). Philox counters are those of the global row: local row
// r is global row (gfirst + r) mod grows, except rows from gsplit on (a slab
// share's lower halo, after its upper one), which lie MS_ROWS rows earlier.
// One device: 0, 0, ROWS, ROWS, 0, ROWS, ROWS. A work item's rows never straddle
// gsplit or the global wrap (the host aligns them), so gshift is per item.
<% sweep_args = ("__global uint *own, __global const uint *other, __global const uint *thr, "
                  "const uint colour, const uint R, const uint k0, const uint k1, "
                  "const uint t_lo, const uint t_hi, const uint r0, const uint row_begin, "
                  "const uint n_rows, const uint row_wrap, const uint gfirst, const uint gsplit, "
                  "const uint grows") %>
## replica `rep`'s thresholds: the joint-decision table tb, or one threshold th<i> per class
<%def name="thresholds(rep)">
% if joint is not None:
    __global const uint2 *tb = (__global const uint2 *)thr + ${rep} * ${TABLE_CELLS}u;
% else:
%   for i in range(D):
    const uint th${i} = thr[${rep} * ${D}u + ${i}u];
%   endfor
% endif
</%def>
## gshift: the counter of local row 0 were the item's rows' global rows linear in local rows
<%def name="global_shift(row)">
    const uint gx = ${row} + gfirst + (${row} >= gsplit ? grows - MS_ROWS % grows : 0u);
    const uint gshift = (gx - (gx / grows) * grows - ${row}) * MS_WR * ${CALLS_PER_WORD}u;
</%def>
% if wg:
__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ising_ms_sweep(${sweep_args})
% else:
__kernel void ising_ms_sweep(${sweep_args})
% endif
% if lanes == 1:
{
    // Work item t: word w = t % WR of the ${W} rows row0 .. row0 + ${W - 1} (one z
    // plane) of replica r. Consecutive work items take consecutive words of a
    // row (coalesced); each walks down its rows keeping the other colour's
    // words of rows y - 1 and y in registers. Per row: one word, whose 8 Philox
    // calls and 32 accept decisions are straight-line code.
    // Remainders as x - q d (Oclgrind cannot check the `freeze` of LLVM's div/rem pairing).
    const uint t = get_global_id(0), BPR = MS_ROWS / ${W}u;
    if (t >= R * BPR * MS_WR)
        return;
    const uint q1 = t / MS_WR, w = t - q1 * MS_WR;
    const uint r = q1 / BPR, rel = (q1 - r * BPR) * ${W}u, rg = r0 + r;
    if (rel >= n_rows)
        return;
    const uint row0 = row_begin + rel - (row_begin + rel >= row_wrap ? row_wrap : 0u);
    const uint z = row0 / MS_LY, y0 = row0 - z * MS_LY;
${global_shift("row0")}    __global uint *me = own + (r * MS_ROWS + row0) * MS_WR + w;
    __global const uint *pl = other + (r * MS_ROWS + z * MS_LY) * MS_WR + w;
%   if dim == 3:
    const uint zp = z + 1u == MS_LZ ? 0u : z + 1u, zm = z == 0u ? MS_LZ - 1u : z - 1u;
    __global const uint *pf = other + (r * MS_ROWS + zm * MS_LY) * MS_WR + w;
    __global const uint *pb = other + (r * MS_ROWS + zp * MS_LY) * MS_WR + w;
%   endif
%   if not PARTIAL:
    __global const uint *pm = pl + (w == 0u ? (int)MS_WR - 1 : -1);
    __global const uint *pp = pl + (w + 1u == MS_WR ? 1 - (int)MS_WR : 1);
%   endif
    // first Philox counter of the word (CALLS_PER_WORD calls per word)
% if NATURAL_COUNTERS:
    uint g0 = (row0 + z * ${Ly - FOLDED_LY}u) * ${QS}u + gshift;
% else:
    uint g0 = (row0 * MS_WR + w) * ${CALLS_PER_WORD}u + gshift;
% endif
${thresholds("r")}
    const uint2 key = (uint2)(k0, k1);
    const uint c3 = t_hi * 2u + colour;
    uint u = ${up_fix("pl[(y0 == 0u ? MS_LY - 1u : y0 - 1u) * MS_WR]", "y0 == 0u")}, c = pl[y0 * MS_WR];
    uint odd = (colour + y0 + z) & 1u;
    #pragma unroll 1
    for (uint k = 0; k < ${W}u; ++k) {
        const uint y = y0 + k, yd = y + 1u == MS_LY ? 0u : y + 1u;
        const uint s = me[k * MS_WR], d = ${dn_fix("pl[yd * MS_WR]", "yd == 0u")};
%   if dim == 3:
        const uint f = pf[y * MS_WR], b = pb[y * MS_WR];
%   endif
%   if PARTIAL:
        const uint hn = ms_horizontal(c, 0u, 0u, odd);
%   else:
        const uint hn = ms_horizontal(c, pm[y * MS_WR], pp[y * MS_WR], odd);
%   endif
        MS_COUNT(s, c, hn, u, d, ${"f" if dim == 3 else "0u"}, ${"b" if dim == 3 else "0u"})
        uint flip = ${mask_of(always)};
%   if D and joint is not None:
        // joint: one random word per group of ${GROUP_SPINS} spins, decoded by a table
        // lookup into level masks (see the header)
${accept_code("joint", "        ")}
%   elif D:
        // Philox group q = bits 4q..4q+3: one call, its 4 words kept in
        // registers; per spin one threshold (select: picked by the slot-index
        // planes P; compare: one packed mask per slot) and one compare.
${accept_code(accept, "        ")}
%   endif
        me[k * MS_WR] = s ^ (flip & MS_VALID);
        u = c;
        c = d;
        odd ^= 1u;
        g0 += ${"%du" % QS if NATURAL_COUNTERS else "MS_WR * %du" % CALLS_PER_WORD};
    }
}
% else:
{
    const size_t t = get_global_id(0);
    // runs per row, per replica; remainders as x - q d (Oclgrind cannot check
    // the `freeze` of LLVM's div/rem pairing)
% if ROWS_RUN:
    // whole rows row .. row + ${RR - 1} (${"%d whole z planes" % PP if PLANES else "one z plane"})
    const uint IPR = MS_ROWS / ${RR}u;
    if (t >= (size_t)R * IPR) return;
    const uint r = (uint)(t / IPR), rel = (uint)(t - (size_t)r * IPR) * ${RR}u, w0 = 0u;
    if (rel >= n_rows) return;
    const uint row = row_begin + rel - (row_begin + rel >= row_wrap ? row_wrap : 0u);
    const uint z = row / MS_LY, y = row - z * MS_LY;
${global_shift("row")}    const uint yp = y + ${RR}u == MS_LY ? 0u : y + ${RR}u, ym = y == 0u ? MS_LY - 1u : y - 1u;
% else:
    const uint RPR = MS_WR / ${W}u, IPR = MS_ROWS * RPR;
    if (t >= (size_t)R * IPR) return;
    const uint r = (uint)(t / IPR), rem = (uint)(t - (size_t)r * IPR);
    const uint rel = rem / RPR, w0 = (rem - rel * RPR) * ${W}u;
    if (rel >= n_rows) return;
    const uint row = row_begin + rel - (row_begin + rel >= row_wrap ? row_wrap : 0u);
    const uint z = row / MS_LY, y = row - z * MS_LY;
${global_shift("row")}    const uint yp = y + 1u == MS_LY ? 0u : y + 1u, ym = y == 0u ? MS_LY - 1u : y - 1u;
% endif
    const uint odd = (colour + y + z) & 1u, rg = r0 + r;
    const size_t rbase = (size_t)r * MS_ROWS;
    __global uint *me = own + (rbase + row) * MS_WR;
    __global const uint *oc = other + (rbase + row) * MS_WR;
    __global const uint *up = other + (rbase + z * MS_LY + ym) * MS_WR;
    __global const uint *dn = other + (rbase + z * MS_LY + yp) * MS_WR;
% if dim == 3:
    const uint zp = z + ${PP}u == MS_LZ ? 0u : z + ${PP}u, zm = z == 0u ? MS_LZ - 1u : z - 1u;
    __global const uint *fr = other + (rbase + zm * MS_LY + y) * MS_WR;
    __global const uint *bk = other + (rbase + zp * MS_LY + y) * MS_WR;
% endif
    const uint2 key = (uint2)(k0, k1);
${thresholds("(size_t)r")}
${lanes_run("me", "oc", "up", "dn", "fr", "bk")}
}
% endif

// Partial sums per (replica, part) over colour-0 words, as pairs of longs: bond
// sum (every bond has exactly one colour-0 end), magnetization of both colours;
// over the first n_words words of each colour (all: MS_ROWS * MS_WR; a slab of a
// lattice split over ranks: its own rows, the halo rows after them).
__kernel __attribute__((reqd_work_group_size(${rwg}, 1, 1)))
void ising_ms_sums(__global const uint *s0, __global const uint *s1, __global long *partial,
                   const uint parts, const uint n_words)
{
    __local long scratch[${rwg}];
    const uint grp = get_group_id(0), lid = get_local_id(0);
    const uint r = grp / parts, j = grp - r * parts;
    const size_t rbase = (size_t)r * MS_ROWS;
    long bond = 0, mag = 0;
    for (uint i = j * ${rwg}u + lid; i < n_words; i += parts * ${rwg}u) {
        const uint row = i / MS_WR, w = i - row * MS_WR;
        const uint z = row / MS_LY, y = row - z * MS_LY;
        const uint yp = y + 1u == MS_LY ? 0u : y + 1u, ym = y == 0u ? MS_LY - 1u : y - 1u;
        __global const uint *oc = s1 + (rbase + row) * MS_WR;
        const uint s = s0[(rbase + row) * MS_WR + w], c = oc[w];
        const uint hn = ms_horizontal(c, oc[w == 0u ? MS_WR - 1u : w - 1u],
                                      oc[w + 1u == MS_WR ? 0u : w + 1u], (y + z) & 1u);
        uint unlike = popcount(s ^ c) + popcount((s ^ hn) & MS_VALID)
                    + popcount(s ^ ${up_fix("s1[(rbase + z * MS_LY + ym) * MS_WR + w]", "y == 0u")})
                    + popcount(s ^ ${dn_fix("s1[(rbase + z * MS_LY + yp) * MS_WR + w]", "yp == 0u")});
% if dim == 3:
        const uint zp = z + 1u == MS_LZ ? 0u : z + 1u, zm = z == 0u ? MS_LZ - 1u : z - 1u;
        unlike += popcount(s ^ s1[(rbase + zm * MS_LY + y) * MS_WR + w])
                + popcount(s ^ s1[(rbase + zp * MS_LY + y) * MS_WR + w]);
% endif
        bond += ${2 * dim * NBITS} - 2 * (long)unlike;
        mag += ${2 * NBITS} - 2 * (long)(popcount(s) + popcount(c));
    }
    bond = mss_wg_reduce(bond, lid, scratch);
    mag = mss_wg_reduce(mag, lid, scratch);
    if (lid == 0u) {
        partial[2 * grp] = bond;
        partial[2 * grp + 1] = mag;
    }
}

## Work item t of pack/unpack: colour c, word idx of that colour, and `row_start`,
## the offset in the natural layout of the first site of that word.
<%def name="pack_index()">
    const size_t t = get_global_id(0);
    if (t >= (size_t)2u * R * MS_ROWS * MS_WR) return;
    const size_t total = (size_t)R * MS_ROWS * MS_WR;
    const uint c = t >= total;
    const size_t idx = t - c * total;
    const uint r = (uint)(idx / (MS_ROWS * MS_WR));
    const uint rw = (uint)(idx - (size_t)r * (MS_ROWS * MS_WR)), row = rw / MS_WR, w = rw - row * MS_WR;
    const uint z = row / MS_LY, odd = (c + (row - z * MS_LY) + z) & 1u;
% if FOLD > 1:
    // sub-row j of a folded word: natural row z Ly + y + j ${FOLDED_LY}
    const size_t row_start = (size_t)r * ${Lx * Ly * Lz}u + (size_t)(row + z * ${Ly - FOLDED_LY}u) * MS_LX + odd;
% else:
    const size_t row_start = (size_t)r * MS_N + (size_t)row * MS_LX + odd;
% endif
</%def>
// Natural int8 layout (R, Lz, Ly, Lx) <-> the two colour arrays; one item per word.
__kernel void ising_ms_pack(__global const char *nat, __global uint *s0, __global uint *s1,
                            const uint R)
{
${pack_index()}
    __global const char *src = nat + row_start;
    uint word = 0u;
    for (uint b = 0; b < ${NBITS}u; ++b)
        word |= (uint)(src[${"2u * (32u * w + b)" if FOLD == 1 else "(b / %du) * %du + 2u * (b %% %du)" % (S, FOLDED_LY * Lx, S)}] < 0) << b;
    (c ? s1 : s0)[idx] = word;
}

__kernel void ising_ms_unpack(__global const uint *s0, __global const uint *s1,
                              __global char *nat, const uint R)
{
${pack_index()}
    __global char *dst = nat + row_start;
    const uint word = (c ? s1 : s0)[idx];
    for (uint b = 0; b < ${NBITS}u; ++b)
        dst[${"2u * (32u * w + b)" if FOLD == 1 else "(b / %du) * %du + 2u * (b %% %du)" % (S, FOLDED_LY * Lx, S)}] = (word >> b) & 1u ? -1 : 1;
}

% if stats:
<%
    def posmask(j):
        return "0x%08Xu" % sum(1 << b for b in range(j, NBITS, GK))
%>
// DIAGNOSTIC (tests): the sweep's decision code on random words. Item i of
// replica r = get_global_id(1) draws `iters` sets of one spin word and 2 dim
// neighbour words (Philox counters (i, it, 0xFFFFFFFF, 0xFFFFFFFC + call)),
// decides them with the replica's table and decision counters
// ((i * iters + it) * CALLS_PER_WORD + h, r, 0, 0), and counts accepts and proposals per
// class (a * NCLS + k), then per (level l, position j in its group), then
// accepted pairs at positions j, j + 1 of one group with the same level:
// counts[(r * items + i) * ${NCNT} + ...] =
// [A_cls, P_cls] * ${NCL}, then [A, P, B (pairs accepted), Q (pairs)] * ${D} levels * ${GK} positions.
__kernel void ising_ms_accept_stats(__global const uint *thr, const uint k0, const uint k1,
                                    const uint iters, __global uint *counts)
{
    const uint i = get_global_id(0), r = get_global_id(1), items = get_global_size(0);
    const uint2 key = (uint2)(k0, k1);
    const uint t_lo = 0u, c3 = 0u, rg = r;
${thresholds("r")}
    uint cnt[${NCNT}];
    for (uint c = 0; c < ${NCNT}u; ++c)
        cnt[c] = 0u;
    for (uint it = 0; it < iters; ++it) {
        const uint4 a = ms_philox((uint4)(i, it, 0xFFFFFFFFu, 0xFFFFFFFCu), key);
        const uint4 b = ms_philox((uint4)(i, it, 0xFFFFFFFFu, 0xFFFFFFFDu), key);
        const uint s = a.x;
        MS_COUNT(s, a.y, a.z, a.w, b.x, b.y, b.z)
        uint flip = ${mask_of(always)};
        const uint g0 = (i * iters + it) * ${CALLS_PER_WORD}u;
%   if D:
${accept_code("joint" if joint is not None else "select", "        ")}
%   endif
        flip &= MS_VALID;
%   for cl in range(NCL):
        {
            const uint m = (${mask_of((cl,))}) & MS_VALID;
            cnt[${2 * cl}] += popcount(m & flip);
            cnt[${2 * cl + 1}] += popcount(m);
        }
%   endfor
%   for lev in range(1, D + 1):
        {
            const uint lm = (${mask_of(slots[lev - 1])}) & MS_VALID;
%     for j in range(GK):
<%      base = 2 * NCL + 4 * ((lev - 1) * GK + j) %>
            cnt[${base}] += popcount(lm & ${posmask(j)} & flip);
            cnt[${base + 1}] += popcount(lm & ${posmask(j)});
%       if j + 1 < GK:
            {
                const uint pair = lm & ${posmask(j)} & (lm >> 1);
                cnt[${base + 2}] += popcount(pair & flip & (flip >> 1));
                cnt[${base + 3}] += popcount(pair);
            }
%       endif
%     endfor
        }
%   endfor
    }
    for (uint c = 0; c < ${NCNT}u; ++c)
        counts[(r * items + i) * ${NCNT}u + c] = cnt[c];
}
% endif

% if band:

// Several half-sweeps per launch (temporal blocking), same words and spins as
// nhalf launches of ising_ms_sweep. Work group g = (replica r, band b${", y tile by" if NBY > 1 else ""}) holds
// slabs b * ${BT} - ${BH} .. b * ${BT} + ${BT + BH - 1} (periodic; a slab is ${"a z plane" if dim == 3 else "a row"}${", rows by * %d - %d .. by * %d + %d of it" % (TY, HY, TY, TY + HY - 1) if NBY > 1 else ""}; ${SW} words per
// colour) of both colours in local memory. Half-sweep j updates colour j % 2 of
% if BH or HY:
// the local slabs (and rows) whose neighbours are still exact: the halo shrinks
// by one slab (row) per half-sweep, so nhalf <= ${2 * min(h for h in (BH, HY) if h)} leaves the band exact.
% else:
// every slab (the whole replica, periodic), so any nhalf leaves it exact.
% endif
// The band goes to out0/out1 (the other buffer pair: other bands read their
// halos from in0/in1 during the launch). Sweep numbers start at
// t_hi0 2^32 + t_lo0 with colour 0.
__kernel __attribute__((reqd_work_group_size(${mwg}, 1, 1)))
void ising_ms_multisweep(__global const uint *in0, __global const uint *in1, __global uint *out0,
                         __global uint *out1, __global const uint *thr, const uint R, const uint k0,
                         const uint k1, const uint t_lo0, const uint t_hi0, const uint nhalf,
                         const uint r0)
{
    __local uint sm[${2 * HS * SW}];
    const uint lid = get_local_id(0), grp = get_group_id(0);
    const uint rb = grp / ${NBY}u, by = grp - rb * ${NBY}u;
    const uint r = rb / ${NBANDS}u, bnd = rb - r * ${NBANDS}u, rg = r0 + r, gshift = 0u;
    if (r >= R)
        return;
    // remainders as x - q d (Oclgrind cannot check the `freeze` of LLVM's div/rem pairing)
#define MS_MOD(x, m) ((x) - ((x) / (m)) * (m))
#define MS_SLAB(s) MS_MOD(bnd * ${BT}u + (s) + ${OFF}u, ${LOUT}u)
% if dim == 3:
#define MS_YROW(s) MS_MOD(by * ${TY}u + (s) + ${OFFY}u, MS_LY)
#define MS_GROW(sl, sy) (MS_SLAB(sl) * MS_LY + MS_YROW(sy))
% else:
#define MS_GROW(sl, sy) MS_SLAB(sl)
% endif
    for (uint i = lid; i < ${2 * HS * SW}u; i += ${mwg}u) {
        const uint c = i / ${HS * SW}u, rest = i - c * ${HS * SW}u, sl = rest / ${SW}u;
        const uint sw = rest - sl * ${SW}u, sy = sw / MS_WR, w = sw - sy * MS_WR;
        sm[i] = (c ? in1 : in0)[(r * MS_ROWS + MS_GROW(sl, sy)) * MS_WR + w];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint2 key = (uint2)(k0, k1);
${thresholds("r")}
    const ulong t0 = ((ulong)t_hi0 << 32) | t_lo0;
    for (uint j = 0; j < nhalf; ++j) {
        const uint colour = j & 1u;
        const ulong tj = t0 + (j >> 1);
        const uint t_lo = (uint)tj, t_hi = (uint)(tj >> 32), c3 = 2u * t_hi + colour;
        __local uint *own = sm + colour * ${HS * SW}u;
        __local const uint *oth = sm + (1u - colour) * ${HS * SW}u;
        // the slabs lo .. and rows ylo .. ylo + ny - 1 of each that are updated
        const uint lo = ${"j + 1u" if BH else "0u"}, ylo = ${"j + 1u" if HY else "0u"};
        const uint ny = ${"%du - 2u * j" % (HSY - 2) if HY else "%du" % HSY}, nyw = ny * MS_WR;
        const uint n = ${"(%du - 2u * j)" % (HS - 2) if BH else "%du" % HS} * nyw;
%   if lanes > 1:
        // runs of ${W} words of a row${" (%d whole rows)" % RR if ROWS_RUN else ""}, the lanes 4/8 update (SIMD Philox lanes on CPUs)
        for (uint i = lid * ${W}u; i < n; i += ${mwg * W}u) {
            const uint q = i / nyw, iw = i - q * nyw, qy = iw / MS_WR;
            const uint sl = lo + q, sy = ylo + qy, w0 = iw - qy * MS_WR;
%   else:
        for (uint i = lid; i < n; i += ${mwg}u) {
            const uint q = i / nyw, iw = i - q * nyw, qy = iw / MS_WR;
            const uint sl = lo + q, sy = ylo + qy, w = iw - qy * MS_WR;
%   endif
            const uint slm = ${"sl - 1u" if BH else "sl == 0u ? %du : sl - 1u" % (HS - 1)};
            const uint slp = ${"sl + 1u" if BH else "sl + %du == %du ? 0u : sl + %du" % (PP, HS, PP)};
%   if dim == 3:
            const uint z = MS_SLAB(sl), y = MS_YROW(sy);
            const uint sym = ${"sy - 1u" if HY else "sy == 0u ? %du : sy - 1u" % (HSY - 1)};
            ## lanes_run takes the row after its run of RR rows as `dn`
            const uint syp = ${"sy + 1u" if HY else "0u" if PLANES else "sy + %du == %du ? 0u : sy + %du" % (RR, HSY, RR)};
            // this row, the rows y -+ 1 of its slab and the row y of the slabs z -+ 1
            const uint me_at = sl * ${SW}u + sy * MS_WR;
            const uint up_at = sl * ${SW}u + sym * MS_WR, dn_at = sl * ${SW}u + syp * MS_WR;
            const uint fr_at = slm * ${SW}u + sy * MS_WR, bk_at = slp * ${SW}u + sy * MS_WR;
%   else:
            const uint z = 0u, y = MS_SLAB(sl);
%     if RR > 1:
            const uint me_at = sl * ${SW}u, up_at = slm * ${SW}u;
            const uint dn_at = (sl + ${RR}u == ${HS}u ? 0u : sl + ${RR}u) * ${SW}u;
%     else:
            const uint me_at = sl * ${SW}u, up_at = slm * ${SW}u, dn_at = slp * ${SW}u;
%     endif
%   endif
            const uint odd = (colour + y + z) & 1u;
%   if lanes > 1:
            const uint row = z * MS_LY + y;
            __local uint *me = own + me_at;
            __local const uint *oc = oth + me_at, *up = oth + up_at, *dn = oth + dn_at;
%     if dim == 3:
            __local const uint *fr = oth + fr_at, *bk = oth + bk_at;
%     endif
${lanes_run("me", "oc", "up", "dn", "fr", "bk")}
%   else:
            const uint s = own[me_at + w], c = oth[me_at + w];
            const uint u = ${up_fix("oth[up_at + w]", "y == 0u")}, d = ${dn_fix("oth[dn_at + w]", "y + 1u == MS_LY")};
%     if dim == 3:
            const uint f = oth[fr_at + w], b = oth[bk_at + w];
%     endif
%     if PARTIAL:
            const uint hn = ms_horizontal(c, 0u, 0u, odd);
%     else:
            const uint hn = ms_horizontal(c, oth[me_at + (w == 0u ? MS_WR - 1u : w - 1u)],
                                          oth[me_at + (w + 1u == MS_WR ? 0u : w + 1u)], odd);
%     endif
            MS_COUNT(s, c, hn, u, d, ${"f" if dim == 3 else "0u"}, ${"b" if dim == 3 else "0u"})
            uint flip = ${mask_of(always)};
            const uint g0 = ${"(z * %du + y) * %du" % (Ly, QS) if NATURAL_COUNTERS else "((z * MS_LY + y) * MS_WR + w) * %du" % CALLS_PER_WORD};
%     if D:
${accept_code("joint" if joint is not None else accept, "            ")}
%     endif
            own[me_at + w] = s ^ (flip & MS_VALID);
%   endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (uint i = lid; i < ${2 * BT * TY * WR}u; i += ${mwg}u) {
        const uint c = i / ${BT * TY * WR}u, rest = i - c * ${BT * TY * WR}u, q = rest / ${TY * WR}u;
        const uint qw = rest - q * ${TY * WR}u, qy = qw / MS_WR, w = qw - qy * MS_WR;
        const uint sl = ${BH}u + q, sy = ${HY}u + qy;
        (c ? out1 : out0)[(r * MS_ROWS + MS_GROW(sl, sy)) * MS_WR + w] = sm[(c * ${HS}u + sl) * ${SW}u + sy * MS_WR + w];
    }
#undef MS_MOD
#undef MS_SLAB
#undef MS_GROW
% if dim == 3:
#undef MS_YROW
% endif
}
% endif
