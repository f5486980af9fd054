## Pattern conformity (Preis, Paul, Schneider, EPL 82, 68005 (2008)); the exact
## conventions are in clphys.timeseries.pattern_conformity's docstring.
##
## params: wg     work-group size: wg consecutive current times t^ share one Δt⁻ = m
##         tb     lags τ per local-memory tile
##         maxp, maxf   max_past and max_future (they size the unrolled register arrays)
##         acc    "double" | "compensated" (see acc.cl)
##         exp    "exp" | "native_exp": the function for e^{-χQ}
##         fixed_past   (optional, default 0) a fixed Δt⁻ = fixed_past compiled in (one launch per Δt⁻,
##                grid axis 1 of size 1; the windows' loops need no run-time guards);
##                0: Δt⁻ = group id 1 + 1, every Δt⁻ in one launch
##         qform  (optional) "plain" (default) | "mad": Q's terms as multiply-adds, by fma()
##                (correctly rounded: mad()'s rounding is the implementation's, and Intel's
##                CPU runtime 2026.2 rounded it differently in the per-Δt⁻ and the single
##                program, so their sums differed) | "fast": the same and native_recip for
##                the historical range
##         sign   (optional) "sub" (default): sgn of b - K; "cmp": b compared with K (the
##                same decision: b - K rounds to 0 only when b == K, barring flushed
##                subnormals), one instruction less per Δt⁺
##         pre    (optional, default 0) 1: each historical window of a tile (wg + tb - 1
##                positions, shared by the items at lid - k = const) is normalised once per
##                tile into local memory (its minimum, range and (h - min)/range), instead of
##                by every (t^, τ) item that reads it; the sign decisions use the same
##                minimum and range floats (the same bits), Q the stored normalised values
##         slide  (optional, default 0) U > 0, a divisor of tb: each item keeps the
##                maxp + maxf values around p(t^ - τ) in registers and slides them along τ
##                (one local read per τ for them instead of maxp + maxf), unrolled U times;
##                each window position's minimum, range and 1/range come from local memory,
##                computed once per tile as with pre, and Q's terms (h - min) * (1/range)
##                are pre's stored values with qform "plain" (the same bits as pre), one
##                mad with qform "mad" or "fast".  Excludes pre.
##         sign "fma" (slide only): b = fma(h, rc, -(lh rc)) against K = fma(c1, rh, -(lc rh)),
##                one instruction per Δt⁺ less; ties stay exact where the windows share their
##                extremes (the same operations on the same floats) and for ticks while the
##                products of the tile-frame values with the ranges stay below 2^24
##         sign "scaled" (slide only): the continuation values are held as h·rc (one multiply
##                per τ as a value leaves the window) and compared with
##                K = c1·rh − (lc·rh − lh·rc) directly: no instruction per Δt⁺ but the two
##                compares; the same exactness as "fma"
##         sign "local" (slide only): as "scaled", but compared with K = lh·rc + (c1 − lc)·rh
##                (products of values near the tile's origin, not of c1 and lc far from it:
##                near-ties ~as fine as cmp's); the first tile (τ < tb, where the windows
##                can overlap and share elements: the structural ties) runs the cmp form
##         branchless_sum (optional, default 0; slide only) 1: each Δt⁺ sum as mad(1 or 0, w, sum)
##                instead of sum + (w or 0): the same bits (NVIDIA's compiler turns it back
##                into a select and an add); 2: fma() (exact, so it stays a multiply-add)
##         saturated_sum (optional, default 0; slide with cmp, local, scaled) 1: each Δt⁺ sum as
##                fma(sat01((b - K)·sat), w, sum) with sat01 = clamp to [0, 1] and sat = 2^k
##                (kernel argument) so large that every nonzero |b - K|·sat >= 1: the 1 or 0
##                exactly, the same bits as cmp's select and add (2 instructions per sum
##                instead of 3 where the clamp becomes fma.rn.sat); 2: NVIDIA only, the
##                fma.rn.sat by inline PTX
##         reads_first  (optional, default 1; slide only) 0: each step reads its own local values
##                (fewer registers) instead of all U steps' first
##         block_rows   (optional, default 0; needs fixed_past) 1: grid axis 1 runs over the jackknife
##                blocks of current times, so that one launch of one Δt⁻ covers the same
##                columns of every block (enough groups to fill a GPU many times over); t_lo
##                is then the column (unit of wg current times within a block), t_hi unused,
##                block k owns units [k u / K, (k+1) u / K) (u = units, K = nblk) and slots
##                [k nslots, (k+1) nslots)
##         q_switch    (optional, default 0) 1: Q's terms θ = m .. 2 by a switch on m that
##                falls through (one jump per τ instead of maxp - 1 tests; θ descending,
##                so Q's last bits differ from q_switch = 0)
##
## The launch covers t^ in [t_lo, t_hi) with t_lo - 1 a multiple of wg; work group j of it
## owns wg consecutive t^ and adds into slot (slot0 + j) % nslots, so that a slot receives
## the same groups in the same order however the t^ range is split into launches (the
## sums are the same bits).  p holds the series' values [off, w_hi) from p[pos] on (a
## window of a series too long for the device, or all of it): reads outside give 0 and
## are never used.  ts_pc_fold adds the slots into the row of a block of current times
## (in a fixed order) and clears them, when the block is done.
##
## Work item (t^, m), t^ = t_lo + global id 0, m = group id 1 + 1: normalises its current
## window once (registers), then runs over τ = 1 .. min(max_hist, t^ - m) through tiles of
## the series in local memory.  Per τ: the historical window's range, Q, one exp, and for
## every Δt⁺ the sign of the historical continuation against the current last value.  It
## sums w over b > 0 and over b < 0 (sgn·w, |sgn|·w: their difference, sum) in float32
## over one tile, folds them into its own accumulators in
## local memory, and at the end the group adds its sums into partial[slot][m-1][cell] (one
## writer per slot: launches over successive t^ ranges reuse the slots).  cell f-1 holds
## Σ sgn(ω) e^{-χQ}, cell maxf+f-1 holds Σ |sgn(ω)| e^{-χQ}; counts[slot][m-1] = (current
## windows with zero range, historical windows with zero range).
<%namespace name="accns" file="/timeseries/acc.cl"/>
<%
    if wg < 1 or tb < 1 or maxp < 1 or maxf < 1:
        raise ValueError("pattern.cl: wg, tb, maxp, maxf must be >= 1")
    if exp not in ("exp", "native_exp"):
        raise ValueError("pattern.cl: exp must be 'exp' or 'native_exp', got %r" % (exp,))
    fixed_past = context.get("fixed_past", 0)
    qform = context.get("qform", "plain")
    sign = context.get("sign", "sub")
    pre = context.get("pre", 0)
    slide = context.get("slide", 0)
    q_switch = context.get("q_switch", 0) and not fixed_past
    branchless_sum = context.get("branchless_sum", 0)
    reads_first = context.get("reads_first", 1)
    block_rows = context.get("block_rows", 0)
    saturated_sum = context.get("saturated_sum", 0)
    if saturated_sum and (not slide or sign not in ("cmp", "local", "scaled")):
        raise ValueError("pattern.cl: saturated_sum needs slide and sign 'cmp', 'local' or 'scaled'")
    if block_rows and not fixed_past:
        raise ValueError("pattern.cl: block_rows needs fixed_past")
    if not 0 <= fixed_past <= maxp or qform not in ("plain", "mad", "fast") or sign not in ("sub", "cmp", "fma", "scaled", "local"):
        raise ValueError("pattern.cl: need 0 <= fixed_past <= maxp, qform 'plain', 'mad' or 'fast', "
                         "sign 'sub' or 'cmp'")
    if sign == "local" and tb < max(maxp, maxf):
        raise ValueError("pattern.cl: sign 'local' needs tb >= maxp, maxf (the first tile "
                         "holds every τ whose windows overlap or share an element)")
    if slide < 0 or (slide and (tb % slide or pre)) or (sign in ("fma", "scaled", "local") and not slide):
        raise ValueError("pattern.cl: slide must be 0 or a divisor of tb, and excludes pre; "
                         "sign 'fma' or 'scaled' needs slide")
    P = "pc_" + acc[0] + "_"          # helper names carry the accumulator variant
    tile_len = wg + tb + maxp + maxf
    NPOS = wg + tb - 1                # historical window positions of a tile (pre)
    TH = range(1, (fixed_past or maxp) + 1)  # θ

    def guard(t):
        """The run-time test that θ = t is inside the window (none when Δt⁻ is fixed)."""
        return "true" if fixed_past else "m >= %du" % t
    F = range(1, maxf + 1)            # Δt⁺
    M = fixed_past or maxp                  # the longest window
    L = M + maxf                      # values an item slides along τ (slide)

    def q_terms(d, indent, acc=lambda t: "s"):
        """Q's terms θ = 2 .. m into acc(θ) (d(θ): the expression of d_θ), by guards or by
        a switch on m that falls through (q_switch)."""
        pad = " " * indent
        term = lambda t: "{ const float d = %s; %s = fma(d, d, %s); }" % (d(t), acc(t), acc(t))
        if q_switch:
            return "\n".join([pad + "switch (m) {"]
                             + [pad + "case %du: " % t + term(t) for t in reversed(TH[1:])]
                             + [pad + "default: break;", pad + "}"])
        return "\n".join(pad + "if (%s) " % guard(t) + term(t) for t in TH[1:])

    def cell(f, b, K):
        """Δt⁺ = f's two sums: w where b > K, w where b < K (branchless_sum: mad(1 or 0, w, sum),
        the same bits as adding w or nothing; a set-to-1.0 and an FMA per sum on GPUs;
        saturated_sum: the 1 or 0 as the saturated (b - K)·sat, one fma each)."""
        if saturated_sum == 2:            # NVIDIA: fma.rn.sat (clamp may not become it)
            g = lambda v, x, y: ('asm("fma.rn.sat.f32 %%0, %%1, %%2, %%3;" : "=f"(%s) : "f"(%s), '
                                 '"f"(%s), "f"(%s));' % (v, b, x, y))
            return ("{ float gu, gd; %s %s up%d = fma(gu, w, up%d); dn%d = fma(gd, w, dn%d); }"
                    % (g("gu", "sat", "nks"), g("gd", "nsat", "ks"), f, f, f, f))
        if saturated_sum:
            return ("up%d = fma(clamp(fma(%s, sat, nks), 0.0f, 1.0f), w, up%d); "
                    "dn%d = fma(clamp(fma(%s, nsat, ks), 0.0f, 1.0f), w, dn%d);"
                    % (f, b, f, f, b, f))
        if branchless_sum:
            fn = "fma" if branchless_sum == 2 else "mad"
            return ("up%d = %s(%s > %s ? 1.0f : 0.0f, w, up%d); dn%d = %s(%s < %s ? 1.0f : 0.0f, w, dn%d);"
                    % (f, fn, b, K, f, f, fn, b, K, f))
        return "up%d += %s > %s ? w : 0.0f; dn%d += %s < %s ? w : 0.0f;" % (f, b, K, f, b, K)

    def sa(f):
        """sgn of the current continuation Δt⁺ = f (in local memory with slide: registers)."""
        return "lsa[%du + lid]" % ((f - 1) * wg) if slide else "sa%d" % f
%>
// Sign decisions compare two rounded products; a fused multiply-add would round one only.
#pragma OPENCL FP_CONTRACT OFF
${accns.accumulator(P, acc)}

// x - o for (hi, lo) float pairs: float32 accuracy relative to the local difference.
inline float pc_val(float2 x, float2 o) { return (x.x - o.x) + (x.y - o.y); }

#define P(k) p[pos + (k) - off]                    // the series' value k, k in [off, w_hi)

__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ts_pc_sweep(__global const float2 *p, const ulong pos, const uint off, const uint w_hi,
                 const uint n,
                 const uint t_lo, const uint t_hi, const uint slot0, const uint nslots,
                 const uint max_hist, const float chi, const float sat,
                 const uint units, const uint nblk,
                 __global ${P}acc_t *partial, __global ulong *counts)
{
% if slide:
    __local float tile_pad[${tile_len + 1}];
    __local float *tile = tile_pad + 1;            // tile[-1]: the read after the last τ
% else:
    __local float tile[${tile_len}];
% endif
    __local ${P}acc_t lacc[${2 * maxf * wg}];
    __local uint lcnt[${3 * wg}];
% if pre or slide:
    __local float plo[${NPOS}], prg[${NPOS}];      // window minimum and range by position
% endif
% if pre:
    __local float phn[${(fixed_past or maxp) * NPOS}];   // (h_θ - min) / range, θ-major
% elif slide:
    __local float pir[${NPOS}];                    // 1 / range (0 for a zero range)
    __local float lsa[${maxf * wg}];
    if (get_local_id(0) == 0) tile_pad[0] = 0.0f;  // read by the slide past the last τ
% endif
    const uint lid = get_local_id(0);
% if block_rows:
    const uint blk = get_group_id(1);
    const uint unit = (uint)(((ulong)blk * units) / nblk) + t_lo + get_group_id(0);
    if (unit >= (uint)(((ulong)(blk + 1u) * units) / nblk)) return;   // past the block's end
    const uint slot = blk * nslots + (slot0 + get_group_id(0)) % nslots;
    const uint A = 1u + unit * ${wg}u;                 // first t^ of the group
    const uint t_end = n;
% else:
    const uint slot = (slot0 + get_group_id(0)) % nslots;
    const uint A = t_lo + get_group_id(0) * ${wg}u;    // first t^ of the group
    const uint t_end = t_hi;
% endif
% if fixed_past:
    const uint m = ${fixed_past}u;
% else:
    const uint m = get_group_id(1) + 1;
% endif
    const uint th = A + lid;
    const bool active = th < t_end && th >= m;

    // Current window p(t^ - θ), θ = 1 .. m, relative to c1 = p(t^ - 1).
    const float2 o = P(active ? th - 1 : off);
% for t in TH:
    float c${t} = 0.0f;
% endfor
    float lc = 0.0f, hc = 0.0f;
    uint ilo = 1, ihi = 1;                        // θ of the window's minimum and maximum
    if (active) {
% for t in TH[1:]:
        if (${guard(t)}) {
            c${t} = pc_val(P(th - ${t}u), o);
            if (c${t} < lc) { lc = c${t}; ilo = ${t}u; }
            if (c${t} > hc) { hc = c${t}; ihi = ${t}u; }
        }
% endfor
    }
    const float rc = hc - lc;
    const bool ok = active && rc > 0.0f;
    const float rcs = ok ? rc : 1.0f;
% for t in TH:
    c${t} = (c${t} - lc) / rcs;                  // normalised to [0, 1]
% endfor
    // sgn of p̃(t^-1+Δt⁺) - p̃(t^-1); 0 where t^-1+Δt⁺ is past the end
% for f in F:
    ${"" if slide else "const float "}${sa(f)} = (ok && th + ${f - 1}u < n) ? sign(pc_val(P(th + ${f - 1}u), o)) : 0.0f;
% endfor
    const float chim = chi / (float)m;
% if saturated_sum:
    const float nsat = -sat;
% endif
    const uint tau_max = ok ? min(max_hist, th - m) : 0u;
    const uint last = min(A + ${wg}u, t_end) - 1u;  // the group's last t^
    // (Δt⁻ = 1: every window has zero range, no τ to run)
    const uint g_tau = last > m && m > 1u ? min(max_hist, last - m) : 0u;

% for f in F:
    lacc[${f - 1}u * ${wg}u + lid] = ${P}ZERO;
    lacc[${maxf + f - 1}u * ${wg}u + lid] = ${P}ZERO;
% endfor
    uint skip_hist = 0;

    for (uint t0 = 1; t0 <= g_tau; t0 += ${tb}u) {
        // tile[i] = p(base + i) - p(offset): every window of t^ in the group, τ in [t0, t0 + tb)
        const int base = (int)A - (int)t0 - ${tb - 1 + maxp};
        const float2 ot = P(clamp((int)A - (int)t0, (int)off, (int)w_hi - 1));
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint i = lid; i < ${tile_len}u; i += ${wg}u) {
            const int k = base + (int)i;
            tile[i] = (k >= (int)off && k < (int)w_hi) ? pc_val(P(k), ot) : 0.0f;
        }
        // p(t^-1) - p_low and the range of the current window in the tile's frame, so that
        // the same elements give the same floats: ω = 0 exactly where the windows share their
        // extremes and the continuation is p(t^-1) itself (overlapping windows)
        const float lct = ok ? pc_val(P(th - ilo), ot) : 0.0f;
        const float rct = ok ? pc_val(P(th - ihi), ot) - lct : 0.0f;
        const float c1t = ok ? pc_val(P(th - 1u), ot) : 0.0f;
        const float c1lt = c1t - lct;
        barrier(CLK_LOCAL_MEM_FENCE);
% if pre or slide:
        // position j: the historical window tile[j + maxp - θ], θ = 1 .. m
        for (uint j = lid; j < ${NPOS}u; j += ${wg}u) {
            const uint i0 = j + ${maxp}u;
            const float g1 = tile[i0 - 1u];
            float lo = g1, hi = g1;
%   for t in TH[1:]:
            float g${t} = 0.0f;
            if (${guard(t)}) { g${t} = tile[i0 - ${t}u]; lo = min(lo, g${t}); hi = max(hi, g${t}); }
%   endfor
            const float rg = hi - lo;
%   if qform == "fast":
            const float ir = rg > 0.0f ? native_recip(rg) : 0.0f;
%   else:
            const float ir = rg > 0.0f ? 1.0f / rg : 0.0f;
%   endif
            plo[j] = lo;
            prg[j] = rg;
%   if slide:
            pir[j] = ir;
%   else:
%     for t in TH:
            if (${guard(t)}) phn[${(t - 1) * NPOS}u + j] = (g${t} - lo) * ir;
%     endfor
%   endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
% endif
% for f in F:
        float up${f} = 0.0f, dn${f} = 0.0f;       // Σ w over b > 0, over b < 0
% endfor
        const uint kend = tau_max >= t0 ? min(${tb}u, tau_max + 1u - t0) : 0u;
% if slide:
<%  forms = [("if (t0 == 1u) {", "cmp"), ("} else {", "local")] if sign == "local" else [("", sign)] %>
%   for opener, sg in forms:
        ${opener}
        // r_q = tile[i0 - M + q], q = 0 .. L-1, around p(t^ - τ) = tile[i0], τ = t0 + k:
        // h_θ = r_{M-θ}, the continuation Δt⁺ = f is r_{M+f-1}; τ + 1 shifts by one
        // (sign "scaled": the continuation part holds h·rc, scaled as a value crosses over)
        const uint j0 = lid + ${tb - 1}u;
%   for q in range(L):
        float r${q} = tile[j0 + ${maxp - M + q}u]${" * rct" if sg in ("scaled", "local") and q >= M else ""};
%   endfor
        for (uint kb = 0; kb < kend; kb += ${slide}u) {
%   if reads_first:
            // every local read of the U steps first (no step's branches stand between)
%     for u in range(slide):
            const float lh${u} = plo[j0 - kb - ${u}u], rh${u} = prg[j0 - kb - ${u}u], ir${u} = pir[j0 - kb - ${u}u];
            const float nv${u} = tile[(int)(j0 - kb) + ${maxp - M - u - 1}];
%     endfor
%   endif
<%   names = ["r%d" % q for q in range(L)] %>
%   for u in range(slide):
            {
%     if reads_first:
                const float lh = lh${u}, rh = rh${u}, irh = ir${u};
%     else:
                const float lh = plo[j0 - kb - ${u}u], rh = prg[j0 - kb - ${u}u], irh = pir[j0 - kb - ${u}u];
                const float nv${u} = tile[(int)(j0 - kb) + ${maxp - M - u - 1}];
%     endif
                const bool live = kb + ${u}u < kend;
                skip_hist += live && !(rh > 0.0f) ? 1u : 0u;
%     if qform == "plain":
                float s;
                { const float d = c1 - (${names[M - 1]} - lh) * irh; s = d * d; }
${q_terms(lambda t: "c%d - (%s - lh) * irh" % (t, names[M - t]), 16)}
%     else:
                // two partial sums: half the dependent chain
                float s0, s1 = 0.0f;
                { const float d = fma(lh - ${names[M - 1]}, irh, c1); s0 = d * d; }
${q_terms(lambda t: "fma(lh - %s, irh, c%d)" % (names[M - t], t), 16, acc=lambda t: "s%d" % (t % 2))}
                const float s = s0 + s1;
%     endif
                // no branch around the exponential (s is finite: irh = 0 for a zero range)
                const float w = ${exp}(-chim * s) * (live && rh > 0.0f ? 1.0f : 0.0f);
%     if sg == "fma":
                const float K = fma(c1t, rh, -(lct * rh)), nl = -(lh * rct);
%     elif sg == "local":
                // h·rc > lh·rc + (c1 − lc)·rh: the products of values near the tile's origin
                const float K = fma(lh, rct, c1lt * rh);
%     elif sg == "scaled":
                // h·rc > c1·rh − (lc·rh − lh·rc), each product rounded once: where the
                // windows share their extremes both sides are the same products
                const float K = c1t * rh - (lct * rh - lh * rct);
%     else:
                const float K = c1lt * rh;
%     endif
%     if saturated_sum:
                const float ks = K * sat, nks = -ks;     // exact: sat is a power of two
%     endif
%     for f in F:
%       if sg == "fma":
                { const float b = fma(${names[M + f - 1]}, rct, nl); ${cell(f, "b", "K")} }
%       elif sg in ("scaled", "local"):
                { const float b = ${names[M + f - 1]}; ${cell(f, "b", "K")} }
%       elif sg == "cmp":
                { const float b = (${names[M + f - 1]} - lh) * rct; ${cell(f, "b", "K")} }
%       else:
                { const float b = (${names[M + f - 1]} - lh) * rct - K; ${cell(f, "b", "0.0f")} }
%       endif
%     endfor
%     if sg in ("scaled", "local"):
                ${names[M - 1]} *= rct;                  // h_1 becomes the continuation Δt⁺ = 1
%     endif
                ${names[L - 1]} = nv${u};
            }
<%     names = [names[L - 1]] + names[:L - 1] %>
%   endfor
%   if slide % L:
            {
                const float ${", ".join("t%d = %s" % (q, names[q]) for q in range(L))};
                ${" ".join("r%d = t%d;" % (q, q) for q in range(L))}
            }
%   endif
        }
%   endfor
%   if len(forms) > 1:
        }
%   endif
% else:
        for (uint k = 0; k < kend; ++k) {
            const int i0 = (int)th - (int)(t0 + k) - base;     // tile index of p(t^ - τ)
% if pre:
            const uint j = (uint)i0 - ${maxp}u;
            const float lh = plo[j], rh = prg[j];
            if (rh > 0.0f) {
                float s;
                { const float d = c1 - phn[j]; s = d * d; }
${q_terms(lambda t: "c%d - phn[%du + j]" % (t, (t - 1) * NPOS), 16)}
% else:
            const float h1 = tile[i0 - 1];
            float lh = h1, hh = h1;
% for t in TH[1:]:
            float h${t} = 0.0f;
            if (${guard(t)}) { h${t} = tile[i0 - ${t}]; lh = min(lh, h${t}); hh = max(hh, h${t}); }
% endfor
            const float rh = hh - lh;
            if (rh > 0.0f) {
% endif
% if not pre:
% if qform == "fast":
                const float irh = native_recip(rh);
% else:
                const float irh = 1.0f / rh;
% endif
% if qform in ("mad", "fast"):
                float d = fma(lh - h1, irh, c1);
                float s = d * d;
%   for t in TH[1:]:
                if (${guard(t)}) { d = fma(lh - h${t}, irh, c${t}); s = fma(d, d, s); }
%   endfor
% else:
                float d = c1 - (h1 - lh) * irh;
                float s = d * d;
%   for t in TH[1:]:
                if (${guard(t)}) { d = c${t} - (h${t} - lh) * irh; s += d * d; }
%   endfor
% endif
% endif
                const float w = ${exp}(-chim * s);
                const float K = c1lt * rh;
% for f in F:
                {
% if sign == "cmp":
                    const float b = (tile[i0 + ${f - 1}] - lh) * rct;
                    up${f} += b > K ? w : 0.0f;
                    dn${f} += b < K ? w : 0.0f;
% else:
                    const float b = (tile[i0 + ${f - 1}] - lh) * rct - K;
                    up${f} += b > 0.0f ? w : 0.0f;       // two predicated adds: fewer
                    dn${f} += b < 0.0f ? w : 0.0f;       // instructions than sgn and |sgn|
% endif
                }
% endfor
            } else {
                ++skip_hist;
            }
        }
% endif
% for f in F:
        lacc[${f - 1}u * ${wg}u + lid] = ${P}fold(lacc[${f - 1}u * ${wg}u + lid], ${sa(f)} * (up${f} - dn${f}));
        lacc[${maxf + f - 1}u * ${wg}u + lid] = ${P}fold(lacc[${maxf + f - 1}u * ${wg}u + lid], fabs(${sa(f)}) * (up${f} + dn${f}));
% endfor
    }

    lcnt[lid] = active && !ok ? 1u : 0u;
    lcnt[${wg}u + lid] = skip_hist;
    lcnt[${2 * wg}u + lid] = tau_max - skip_hist;
    barrier(CLK_LOCAL_MEM_FENCE);
    const size_t row = (size_t)slot * ${maxp}u + (m - 1);
    for (uint cell = lid; cell < ${2 * maxf}u; cell += ${wg}u) {
        ${P}acc_t s = ${P}ZERO;
        for (uint i = 0; i < ${wg}u; ++i) s = ${P}add(s, lacc[cell * ${wg}u + i]);
        partial[row * ${2 * maxf}u + cell] = ${P}add(partial[row * ${2 * maxf}u + cell], s);
    }
    for (uint k = lid; k < 3u; k += ${wg}u) {
        ulong s = 0;
        for (uint i = 0; i < ${wg}u; ++i) s += lcnt[k * ${wg}u + i];
        counts[row * 3u + k] += s;
    }
}

// rows[r][c] += Σ_slot pool[slot][c] (slots in order), pool[slot][c] = 0, for the ncells
// sums and the ncounts counts (one item per cell); grid axis 1: blocks k of nslots slots
// each into rows r + k.
__kernel void ts_pc_fold(__global ${P}acc_t *pool, __global ulong *cpool, const uint nslots,
                         const uint ncells, const uint ncounts, __global ${P}acc_t *rows,
                         __global ulong *crows, const uint r0)
{
    const uint c = get_global_id(0), r = r0 + get_global_id(1);
    pool += (size_t)get_global_id(1) * nslots * ncells;
    cpool += (size_t)get_global_id(1) * nslots * ncounts;
    __global ${P}acc_t *row = rows + (size_t)r * ncells;
    __global ulong *crow = crows + (size_t)r * ncounts;
    if (c < ncells) {
        ${P}acc_t s = ${P}ZERO;
        for (uint k = 0; k < nslots; ++k) {
            s = ${P}add(s, pool[(size_t)k * ncells + c]);
            pool[(size_t)k * ncells + c] = ${P}ZERO;
        }
        row[c] = ${P}add(row[c], s);
    }
    if (c < ncounts) {
        ulong s = 0;
        for (uint k = 0; k < nslots; ++k) {
            s += cpool[(size_t)k * ncounts + c];
            cpool[(size_t)k * ncounts + c] = 0;
        }
        crow[c] += s;
    }
}
