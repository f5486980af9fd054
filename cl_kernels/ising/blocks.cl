## The "blocks" (double red-black) 2D Ising Metropolis kernels; see docs/ising_blocks.md.
##
## params: W, H    tile width and height in sites (powers of two, 16..256, W*H/64 items)
##         rng     "halfbit-lcg" or "philox"
##         unroll  0: the site loop written out; n > 0: a C loop with `#pragma unroll n`
##         joint   optional, philox only: None, or (k, F, shift, cells) for joint
##                 decisions (one Philox word per k sites, see below and
##                 cl_kernels/ising/multispin.cl), with `always` and `slots` (class
##                 ids a*5 + k, a = 1 for spin -1; slots in level order)
##
## Storage, one bit per spin (1 = up), tile-major: tile (rep, ty, tx) is the
## contiguous word range [((rep*nty + ty)*ntx + tx)*TW, +TW).  Inside a tile
## the sites are split by colour (x + y) & 1 into two planes; plane p holds, for
## each tile row r, the W/2 sites x = 2i + ((p + r) & 1), i = 0..W/2-1, as a
## row of NWR = max(1, W/64) chunks of BW = min(32, W/2) bits, bit-interleaved:
## site i is bit b = i / NWR of chunk j = i % NWR.  Rows follow each other in
## the tile's bit string: plane-major, then row, chunk, bit, LSB first (a chunk
## is a whole word where BW = 32; narrower rows share words).  Tile origins are
## even, so a site's colour in the tile is its colour in the lattice.
##
## In local memory a plane row is NWR words (chunks), with a halo row above
## (local row 0) and below (row H+1) in both planes, and the halo columns as
## one word per row (hl: x = -1 at bit 0, hr: x = W at bit BW-1).
##
## Work item lid owns plane words q = lid + u*IPG (u < P) of BOTH planes: 32
## sites of each colour, i.e. 64 sites per inner sweep, one half-bit LCG round.
## Consecutive items touch consecutive local words (no bank conflicts) and
## consecutive global words (coalesced loads and stores).
<%namespace name="lcg" file="/rng/lcg.cl"/>
<%namespace name="philox" file="/rng/philox.cl"/>
<%namespace name="red" file="/common/reduce.cl"/>
<%
    sides = (16, 32, 64, 128, 256)
    if W not in sides or H not in sides:
        raise ValueError("blocks.cl: tile sides must be in %r, got %rx%r" % (sides, W, H))
    if rng not in ("halfbit-lcg", "philox"):
        raise ValueError("blocks.cl: rng must be 'halfbit-lcg' or 'philox', got %r" % (rng,))
    if unroll not in (0, 1, 2, 4, 8, 16):
        raise ValueError("blocks.cl: unroll must be 0 (written out) or 1, 2, 4, 8, 16; got %r" % (unroll,))
    HW = W // 2                      # sites of one colour per tile row
    BW = min(32, HW)                 # valid bits per local word
    NWR = max(1, HW // 32)           # local words per plane row
    P = 32 // BW                     # plane words per item and plane
    IPG = W * H // 64                # work items per tile
    TW = W * H // 32                 # global words per tile
    RPW = 32 // HW if HW < 32 else 0 # plane rows per global word (narrow tiles)
    PLANE = (H + 2) * NWR            # local words per plane (with halo rows)
    MASK = "0xFFFFFFFFu" if BW == 32 else "0x%Xu" % ((1 << BW) - 1)
    SWG = 64                         # work-group size of the finishing reduction
    if IPG > dev.max_work_group:
        raise ValueError("blocks.cl: a %dx%d tile needs %d work items, the device allows %d"
                         % (W, H, IPG, dev.max_work_group))
    pf = "ib%dx%d%s_" % (W, H, rng[0])  # helper names carry the variant: Oclgrind mixes up same-named helpers of two programs
    joint = context.get("joint", None)
    if joint is not None:
        GROUP_SPINS, FIELD_BITS, TABLE_SHIFT, TABLE_CELLS = joint
        always, slots = context["always"], context["slots"]
        D = len(slots)
        if rng != "philox" or not D or BW % GROUP_SPINS or FIELD_BITS < GROUP_SPINS or D * FIELD_BITS > 16:
            raise ValueError("blocks.cl: joint = %r needs rng philox, slots and %d-bit words" % (joint, BW))
        GROUPS_PER_WORD = BW // GROUP_SPINS  # groups (one random word each) per plane word
        GROUPS_PER_ACC = FIELD_BITS // GROUP_SPINS  # groups per accumulator
        ACCS_PER_WORD = -(-GROUPS_PER_WORD // GROUPS_PER_ACC)  # accumulators per plane word
        CALLS_PER_WORD = BW // (4 * GROUP_SPINS)  # Philox calls per plane word (0: one call spans 2+ words)
        pf = pf[:-1] + "j%d_" % GROUP_SPINS

    def bmask(classes, u):
        """Bits of plane word u whose class (a, k) is in `classes` (a = 1: spin -1 = dn)."""
        def eqk(k):
            return "(" + " & ".join(("k%d_%d" % (b, u)) if (k >> b) & 1 else ("~k%d_%d" % (b, u))
                                    for b in range(3)) + ")"
        parts = []
        for k in range(5):
            a0, a1 = k in classes, 5 + k in classes
            if a0 and a1:
                parts.append(eqk(k))
            elif a0:
                parts.append("(%s & ~dn_%d)" % (eqk(k), u))
            elif a1:
                parts.append("(%s & dn_%d)" % (eqk(k), u))
        return " | ".join(parts) if parts else "0u"

    def jdecode(x, g, ind):
        """Adds group g's mask, decoded from random word x, to its accumulator."""
        return "%s{ const uint2 e = tb[%s >> %du]; ja%d += (%s < e.x ? e.y : e.y >> 16) << %d; }" % (
            ind, x, TABLE_SHIFT, g // GROUPS_PER_ACC, x, (g % GROUPS_PER_ACC) * GROUP_SPINS)

    def jplanes(lev):
        """The level-lev plane (one bit per site of the plane word) from the accumulators."""
        parts = []
        for a in range(ACCS_PER_WORD):
            acc = "(ja%d >> %d)" % (a, (lev - 1) * FIELD_BITS) if lev > 1 else "ja%d" % a
            part = "(%s & 0x%Xu)" % (acc, (1 << (GROUPS_PER_ACC * GROUP_SPINS)) - 1)
            parts.append(part if a == 0 else "(%s << %d)" % (part, a * GROUPS_PER_ACC * GROUP_SPINS))
        return " | ".join(parts)
%>
% if rng == "philox":
${philox.philox4x32_10(pf)}
% else:
${lcg.halfbit_lcg(pf)}
% endif
${red.wg_reduce(pf + "part_", "long2", IPG, "return a + b;")}
${red.wg_reduce(pf + "fin_", "long2", SWG, "return a + b;")}

#define TW ${TW}u
#define IPG ${IPG}u
#define PLANE ${PLANE}u
#define NWR ${NWR}u
#define BW ${BW}u
#define MASK ${MASK}

// Word j of row `row` (= plane * H + r) of the tile at t, BW bits.
inline uint ${pf}grow(__global const uint *t, uint row, uint j)
{
% if RPW:
    return (t[row / ${RPW}u] >> ((row % ${RPW}u) * ${HW}u)) & MASK;
% else:
    return t[row * NWR + j];
% endif
}

// Tile plus one-site halo into local memory (the caller puts a barrier after).
void ${pf}load(__global const uint *spins, ulong self, ulong up, ulong down, ulong left,
               ulong right, uint lid, __local uint *pl, __local uint *hl, __local uint *hr)
{
    __global const uint *t = spins + self;
    for (uint g = lid; g < TW; g += IPG) {
% if RPW:
        const uint w = t[g];
%   for v in range(RPW):
        {
            const uint row = g * ${RPW}u + ${v}u;
            pl[(row / ${H}u) * PLANE + row % ${H}u + 1u] = (w >> ${v * HW}u) & MASK;
        }
%   endfor
% else:
        const uint row = g / NWR;
        pl[(row / ${H}u) * PLANE + (row % ${H}u + 1u) * NWR + g % NWR] = t[g];
% endif
    }
    for (uint q = lid; q < 2u * NWR; q += IPG) {
        const uint p = q / NWR, j = q % NWR;
        pl[p * PLANE + j] = ${pf}grow(spins + up, p * ${H}u + ${H - 1}u, j);
        pl[p * PLANE + ${H + 1}u * NWR + j] = ${pf}grow(spins + down, p * ${H}u, j);
    }
    // Column x = W-1 of the left tile has colour (r+1)&1, index W/2-1 (the top
    // bit of the last word); column x = 0 of the right tile has colour r&1,
    // index 0 (bit 0 of word 0).  hl keeps it at bit 0, hr at bit BW-1.
    for (uint r = lid; r < ${H}u; r += IPG) {
        hl[r] = (${pf}grow(spins + left, ((r + 1u) & 1u) * ${H}u + r, NWR - 1u) >> (BW - 1u)) & 1u;
        hr[r] = (${pf}grow(spins + right, (r & 1u) * ${H}u + r, 0u) & 1u) << (BW - 1u);
    }
}

// Local memory back into the tile (after a barrier).
void ${pf}store(__global uint *spins, ulong self, uint lid, __local const uint *pl)
{
    __global uint *t = spins + self;
    for (uint g = lid; g < TW; g += IPG) {
% if RPW:
        uint w = 0u;
%   for v in range(RPW):
        {
            const uint row = g * ${RPW}u + ${v}u;
            w |= pl[(row / ${H}u) * PLANE + row % ${H}u + 1u] << ${v * HW}u;
        }
%   endfor
        t[g] = w;
% else:
        const uint row = g / NWR;
        t[g] = pl[(row / ${H}u) * PLANE + (row % ${H}u + 1u) * NWR + g % NWR];
% endif
    }
}

// Neighbours in plane o (the other colour) of the sites of word j in row r of
// plane 1-o: *up, *down, *same (index i) and the returned word of index i-1
// (left neighbours) if off = (colour + r) & 1 is 0, else of index i+1 (right
// neighbours).  Rows are bit-interleaved (index i = b NWR + j), so index i-1
// is word j-1 unshifted, except at j = 0 where it is the last word shifted
// up with the halo bit; no shifts across words (which compilers turn into
// funnel shifts that Oclgrind cannot run).
inline uint ${pf}nbrs(__local const uint *pl, __local const uint *hl, __local const uint *hr,
                      uint o, uint r, uint j, uint off, uint *up, uint *down, uint *same)
{
    __local const uint *row = pl + o * PLANE + (r + 1u) * NWR;
    *same = row[j];
    *up = (row - NWR)[j];
    *down = (row + NWR)[j];
% if NWR > 1:
    const uint left = j > 0u ? row[j - 1u] : ((row[NWR - 1u] << 1) & MASK) | hl[r];
    const uint right = j < NWR - 1u ? row[j + 1u] : (row[0] >> 1) | hr[r];
% else:
    const uint left = ((row[0] << 1) & MASK) | hl[r];
    const uint right = (row[0] >> 1) | hr[r];
% endif
    return off ? right : left;
}

## Work groups form a 3D range (tile column, tile row, replica): no run-time
## division (whose div/rem pairs LLVM rewrites with `freeze`, which Oclgrind lacks).
<%def name="tile_coords()">
    const uint lid = get_local_id(0);
    const uint ty = get_group_id(1), rep = get_group_id(2);
</%def>

<%def name="tile_offsets()">
    const uint txl = (tx + ntx - 1u) % ntx, txr = (tx + 1u) % ntx;
    const uint tyu = (ty + nty - 1u) % nty, tyd = (ty + 1u) % nty;
    const ulong rowbase = (ulong)rep * nty;
    const ulong tile = (rowbase + ty) * ntx + tx;
    const ulong self = tile * TW;
    __local uint pl[2 * PLANE], hl[${H}], hr[${H}];
    ${pf}load(spins, self, ((rowbase + tyu) * ntx + tx) * TW, ((rowbase + tyd) * ntx + tx) * TW,
              ((rowbase + ty) * ntx + txl) * TW, ((rowbase + ty) * ntx + txr) * TW,
              lid, pl, hl, hr);
</%def>

## One colour pass c of the inner sweep over the item's P words.  The 32 sites
## m = 0..31 (word u, bit b = divmod(m, BW)) come in segments of up to 16
## (one half-bit sub-stream); `sites(u, b0, n, m0)` emits a segment's updates.
<%def name="pass_body(c, sites)">
    {
% for u in range(P):
        uint k0_${u}, k1_${u}, k2_${u}, dn_${u}, flips_${u} = 0u;
        {
            const uint q = lid + ${u * IPG}u, r = q / NWR, j = q % NWR;
            uint U, D, S;
            const uint Sh = ${pf}nbrs(pl, hl, hr, ${1 - c}u, r, j, (${c}u + r) & 1u, &U, &D, &S);
            const uint w = own${c}_${u};
            // Aligned neighbours per bit, added bitwise into k2 k1 k0 (0..4).
            const uint aU = ~(w ^ U), aD = ~(w ^ D), aS = ~(w ^ S), aH = ~(w ^ Sh);
            const uint s1 = aU ^ aD, c1 = aU & aD, s2 = aS ^ aH, c2 = aS & aH;
            k0_${u} = s1 ^ s2;
            k1_${u} = c1 ^ c2 ^ (s1 & s2);
            k2_${u} = c1 & c2;
            dn_${u} = ~w;
        }
% endfor
% for m0 in range(0, 32, min(16, BW)):
${sites(m0 // BW, m0 % BW, min(16, BW), m0)}
% endfor
% for u in range(P):
        own${c}_${u} ^= flips_${u};
        {
            const uint q = lid + ${u * IPG}u;
            pl[${c}u * PLANE + (q / NWR + 1u) * NWR + q % NWR] = own${c}_${u};
        }
% endfor
    }
    barrier(CLK_LOCAL_MEM_FENCE);
</%def>

<%def name="sweep_prologue()">
    __local uint thr[16];
    for (uint i = lid; i < 10u; i += IPG) thr[i < 5u ? i : i + 3u] = thresholds[rep * 10u + i];
    barrier(CLK_LOCAL_MEM_FENCE);
% for c in range(2):
%   for u in range(P):
    uint own${c}_${u} = pl[${c}u * PLANE + ((lid + ${u * IPG}u) / NWR + 1u) * NWR + (lid + ${u * IPG}u) % NWR];
%   endfor
% endfor
</%def>

## Metropolis test of site (word u, bit b) with random word `rnd` (expressions).
<%def name="site(u, b, rnd)">
            {
                const uint b_ = ${b}, rnd_ = ${rnd};
                const uint idx = (((dn_${u} >> b_) & 1u) << 3) | (((k2_${u} >> b_) & 1u) << 2)
                               | (((k1_${u} >> b_) & 1u) << 1) | ((k0_${u} >> b_) & 1u);
                flips_${u} |= (uint)(rnd_ <= thr[idx]) << b_;
            }
</%def>

## unroll = 0: every site written out (constant shifts); else a C loop over
## the segment (halfbit) or its groups of 4 sites (philox) with this unroll hint.
<%def name="halfbit_pass(c)">
<%def name="sites(u, b0, n, m0)">
%   if m0 % 16 == 0:
%     if m0 == 16 and c == 0:
        xn = y;
%     endif
        y = x ^ ${pf}HALFBIT_XOR_${2 * c + m0 // 16};
%   endif
%   if unroll:
        #pragma unroll ${unroll}
        for (uint i = 0; i < ${n}u; ++i)
${site(u, "%du + i" % b0, pf + "halfbit_next(&y)")}
%   else:
%     for i in range(n):
${site(u, "%du" % (b0 + i), pf + "halfbit_next(&y)")}
%     endfor
%   endif
</%def>
${pass_body(c, sites)}
</%def>

<%def name="philox_pass(c)">
<%def name="sites(u, b0, n, m0)">
<% ctr = "qrow_%d + %du + %%s, (uint)pass_%d, (uint)(pass_%d >> 32), rep" % (u, b0 // 4, c, c) %>
%   if unroll:
        #pragma unroll ${unroll}
        for (uint g = 0; g < ${n // 4}u; ++g) {
            const uint4 r4 = ${pf}philox((uint4)(${ctr % "g"}), key);
%     for e in range(4):
${site(u, "%du + 4u * g" % (b0 + e), "r4.s%d" % e)}
%     endfor
        }
%   else:
%     for g in range(n // 4):
        {
            const uint4 r4 = ${pf}philox((uint4)(${ctr % ("%du" % g)}), key);
%       for e in range(4):
${site(u, "%du" % (b0 + 4 * g + e), "r4.s%d" % e)}
%       endfor
        }
%     endfor
%   endif
</%def>
${pass_body(c, sites)}
</%def>

## Joint decisions: plane word u's BW sites form BW/k groups of k consecutive
## bits (labels l .. l + k - 1, l a multiple of k); group l/k uses component
## (l/k) % 4 of philox((y Lx/(8k) + l/(4k), n mod 2^32, n / 2^32, rep), key),
## decoded through the replica's alias table into level masks; a site of level
## l flips iff its bit of the level-l plane is set (always-classes always).
<%def name="joint_pass(c)">
    {
% for u in range(P):
        uint k0_${u}, k1_${u}, k2_${u}, dn_${u}, flips_${u};
        {
            const uint q = lid + ${u * IPG}u, r = q / NWR, j = q % NWR;
            uint U, D, S;
            const uint Sh = ${pf}nbrs(pl, hl, hr, ${1 - c}u, r, j, (${c}u + r) & 1u, &U, &D, &S);
            const uint w = own${c}_${u};
            const uint aU = ~(w ^ U), aD = ~(w ^ D), aS = ~(w ^ S), aH = ~(w ^ Sh);
            const uint s1 = aU ^ aD, c1 = aU & aD, s2 = aS ^ aH, c2 = aS & aH;
            k0_${u} = s1 ^ s2;
            k1_${u} = c1 ^ c2 ^ (s1 & s2);
            k2_${u} = c1 & c2;
            dn_${u} = ~w;
        }
        {
            uint ${", ".join("ja%d = 0u" % a for a in range(ACCS_PER_WORD))};
%   if CALLS_PER_WORD:
%     for h in range(CALLS_PER_WORD):
            {
                const uint4 v = ${pf}philox((uint4)(jrow_${u} + ${h}u, (uint)pass_${c}, (uint)(pass_${c} >> 32), rep), key);
%       for e, x in enumerate("xyzw"):
${jdecode("v." + x, 4 * h + e, "                ")}
%       endfor
            }
%     endfor
%   else:
            {
                // this word's groups are components je .. je + ${GROUPS_PER_WORD - 1} of one call
                const uint4 v = ${pf}philox((uint4)(jrow_${u}, (uint)pass_${c}, (uint)(pass_${c} >> 32), rep), key);
%     for g in range(GROUPS_PER_WORD):
                const uint x${g} = je_${u} + ${g}u == 0u ? v.x : je_${u} + ${g}u == 1u ? v.y : je_${u} + ${g}u == 2u ? v.z : v.w;
${jdecode("x%d" % g, g, "                ")}
%     endfor
            }
%   endif
            flips_${u} = (${bmask(always, u)}) & MASK;
%   for lev in range(1, D + 1):
            flips_${u} |= (${bmask(slots[lev - 1], u)}) & (${jplanes(lev)});
%   endfor
        }
% endfor
% for u in range(P):
        own${c}_${u} ^= flips_${u};
        {
            const uint q = lid + ${u * IPG}u;
            pl[${c}u * PLANE + (q / NWR + 1u) * NWR + q % NWR] = own${c}_${u};
        }
% endfor
    }
    barrier(CLK_LOCAL_MEM_FENCE);
</%def>

% if rng == "halfbit-lcg":
// Tiles of one colour, `inner` red/black sweeps each.  One half-bit LCG state
// per work item: round t gives sub-streams 0, 1 to the item's 32 sites of
// colour 0 (site m = 16 s + i) and 2, 3 to its 32 sites of colour 1.
__kernel __attribute__((reqd_work_group_size(${IPG}, 1, 1)))
void ising_blocks_sweep_lcg(__global uint *spins, __global uint *states,
                            __global const uint *thresholds, const uint ntx, const uint nty,
                            const uint colour, const uint inner)
{
${tile_coords()}
    const uint tx = 2u * get_group_id(0) + ((ty + colour) & 1u);
${tile_offsets()}
${sweep_prologue()}
    const ulong sidx = tile * IPG + lid;
    uint x = states[sidx];
    for (uint t = 0; t < inner; ++t) {
        uint y, xn = 0u;
${halfbit_pass(0)}
${halfbit_pass(1)}
        x = xn;
    }
    states[sidx] = x;
    ${pf}store(spins, self, lid, pl);
}
% else:
// Tiles of one colour, `inner` red/black sweeps each.  The word of the site
// with label l (its bit position in the lattice row of its plane: tx W/2 +
// j BW + b) in lattice row y, replica rep, pass n = 2 (t0 + t) + colour of
// the site, is component l % 4 of philox((y Lx/8 + l/4, n mod 2^32, n / 2^32,
// rep), seed key).
__kernel __attribute__((reqd_work_group_size(${IPG}, 1, 1)))
void ising_blocks_sweep_philox(__global uint *spins, __global const uint *thresholds,
                               const uint ntx, const uint nty, const uint colour,
                               const uint inner, const ulong t0, const uint key0, const uint key1)
{
${tile_coords()}
    const uint tx = 2u * get_group_id(0) + ((ty + colour) & 1u);
${tile_offsets()}
% if joint is not None:
    // joint decisions: `thresholds` holds the replica alias tables
    __global const uint2 *tb = (__global const uint2 *)thresholds + rep * ${TABLE_CELLS}u;
    barrier(CLK_LOCAL_MEM_FENCE);           // the tile is loaded
% for c in range(2):
%   for u in range(P):
    uint own${c}_${u} = pl[${c}u * PLANE + ((lid + ${u * IPG}u) / NWR + 1u) * NWR + (lid + ${u * IPG}u) % NWR];
%   endfor
% endfor
    const uint2 key = (uint2)(key0, key1);
    const uint calls = ntx * ${HW}u / ${4 * GROUP_SPINS}u;          // Philox calls per lattice row
% for u in range(P):
    const uint lab_${u} = tx * ${HW}u + ((lid + ${u * IPG}u) % NWR) * BW;   // label of bit 0
    const uint jrow_${u} = (ty * ${H}u + (lid + ${u * IPG}u) / NWR) * calls + lab_${u} / ${4 * GROUP_SPINS}u;
%   if not CALLS_PER_WORD:
    const uint je_${u} = (lab_${u} / ${GROUP_SPINS}u) & 3u;
%   endif
% endfor
    for (uint t = 0; t < inner; ++t) {
        const ulong pass_0 = 2ul * (t0 + t), pass_1 = pass_0 + 1ul;
${joint_pass(0)}
${joint_pass(1)}
    }
% else:
${sweep_prologue()}
    const uint2 key = (uint2)(key0, key1);
    const uint quads = ntx * ${HW // 4}u;
% for u in range(P):
    const uint qrow_${u} = (ty * ${H}u + (lid + ${u * IPG}u) / NWR) * quads
                         + (tx * ${HW}u + ((lid + ${u * IPG}u) % NWR) * BW) / 4u;
% endfor
    for (uint t = 0; t < inner; ++t) {
        const ulong pass_0 = 2ul * (t0 + t), pass_1 = pass_0 + 1ul;
${philox_pass(0)}
${philox_pass(1)}
    }
% endif
    ${pf}store(spins, self, lid, pl);
}
% endif

// Per tile: (sum over the tile's sites of s (s_right + s_down), sum of s).
__kernel __attribute__((reqd_work_group_size(${IPG}, 1, 1)))
void ising_blocks_sums_partial(__global const uint *spins, const uint ntx, const uint nty,
                               __global long *partial)
{
${tile_coords()}
    const uint tx = get_group_id(0);
${tile_offsets()}
    barrier(CLK_LOCAL_MEM_FENCE);
    long2 acc = (long2)(0, 0);
% for c in range(2):
%   for u in range(P):
    {
        const uint q = lid + ${u * IPG}u, r = q / NWR, j = q % NWR;
        const uint w = pl[${c}u * PLANE + (r + 1u) * NWR + j];
        uint U, D, S;
        const uint off = (${c}u + r) & 1u;
        const uint Sh = ${pf}nbrs(pl, hl, hr, ${1 - c}u, r, j, off, &U, &D, &S);
        const uint right = off ? Sh : S;        // x + 1 has index i+1 where the row starts with the other colour
        const int aligned = popcount(~(w ^ right) & MASK) + popcount(~(w ^ D) & MASK);
        acc += (long2)(2 * aligned - 2 * (int)BW, 2 * (int)popcount(w) - (int)BW);
    }
%   endfor
% endfor
    __local long2 scratch[${IPG}];
    acc = ${pf}part_wg_reduce(acc, lid, scratch);
    if (lid == 0u) {
        partial[2ul * tile] = acc.x;
        partial[2ul * tile + 1ul] = acc.y;
    }
}

// Per replica: the sum of its tiles' partials into out[2 (first + rep) + {0, 1}].
__kernel __attribute__((reqd_work_group_size(${SWG}, 1, 1)))
void ising_blocks_sums_finish(__global const long *partial, const uint tiles,
                              __global long *out, const uint first)
{
    const uint lid = get_local_id(0), rep = get_group_id(0);
    long2 acc = (long2)(0, 0);
    for (uint i = lid; i < tiles; i += ${SWG}u) {
        const ulong t = (ulong)rep * tiles + i;
        acc += (long2)(partial[2ul * t], partial[2ul * t + 1ul]);
    }
    __local long2 scratch[${SWG}];
    acc = ${pf}fin_wg_reduce(acc, lid, scratch);
    if (lid == 0u) {
        out[2ul * (first + rep)] = acc.x;
        out[2ul * (first + rep) + 1ul] = acc.y;
    }
}
