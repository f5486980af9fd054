## Kernels behind clphys.rng: raw words, Box-Muller normals, and a store-free
## XOR checksum per stream (throughput benchmark; checked against the twins).
## params: generator in {"philox", "lcg", "halfbit-lcg", "xorshift32"}
<%namespace name="philox" file="/rng/philox.cl"/>
<%namespace name="lcg" file="/rng/lcg.cl"/>
<%namespace name="xorshift" file="/rng/xorshift.cl"/>
<%namespace name="normal" file="/rng/normal.cl"/>
<%
    if generator not in ("philox", "lcg", "halfbit-lcg", "xorshift32"):
        raise ValueError("generate.cl: unknown generator %r" % (generator,))
%>
${normal.uniform_normal("g_")}

// Pairs of words (2i, 2i+1) -> normals (2i, 2i+1).
__kernel void rng_box_muller(__global const uint *words, __global float *out, const ulong n)
{
    const ulong i = get_global_id(0);
    if (2 * i >= n) return;
    const float2 z = g_box_muller(words[2 * i], words[2 * i + 1]);
    out[2 * i] = z.x;
    if (2 * i + 1 < n) out[2 * i + 1] = z.y;
}

% if generator == "philox":
${philox.philox4x32_10("g_")}

// One Philox block per work item: out[4i..4i+3] = philox(ctr[i], key[i]).
__kernel void rng_philox_blocks(__global const uint4 *ctr, __global const uint2 *key,
                                __global uint *out, const uint n)
{
    const uint i = get_global_id(0);
    if (i >= n) return;
    const uint4 r = g_philox(ctr[i], key[i]);
    out[4 * i] = r.x; out[4 * i + 1] = r.y; out[4 * i + 2] = r.z; out[4 * i + 3] = r.w;
}

// Stream 0: word k is component k % 4 of philox((k / 4, 0, 0, 0), key). This
// launch writes words [4 block0, 4 block0 + n) (a piece of a longer run) to out[0, n).
__kernel void rng_words(__global uint *out, const ulong n, const uint k0, const uint k1,
                        const ulong block0)
{
    const ulong b = get_global_id(0);
    if (4 * b >= n) return;
    const uint4 r = g_philox((uint4)((uint)(block0 + b), 0u, 0u, 0u), (uint2)(k0, k1));
    // Scalar stores (a vector store of a built vector trips Oclgrind's checker).
    out[4 * b] = r.x;
    if (4 * b + 1 < n) out[4 * b + 1] = r.y;
    if (4 * b + 2 < n) out[4 * b + 2] = r.z;
    if (4 * b + 3 < n) out[4 * b + 3] = r.w;
}

// Stream j = work item: XOR of the 4 words of philox((i, j, 0, 0), key), i < blocks.
__kernel void rng_checksum(__global uint *out, const uint blocks, const uint k0, const uint k1)
{
    const uint j = get_global_id(0);
    const uint2 key = (uint2)(k0, k1);
    uint acc = 0u;
    for (uint i = 0; i < blocks; ++i) {
        const uint4 r = g_philox((uint4)(i, j, 0u, 0u), key);
        acc ^= r.x ^ r.y ^ r.z ^ r.w;
    }
    out[j] = acc;
}

% else:
<%
    # Stateful generators: one state per stream j = work item, S = global size.
    # lcg and xorshift32: word k = stream k % S, step k / S.
    # halfbit-lcg: 64 words per round, word ((r*S + j)*64 + 16*s + i) = step i of
    # sub-stream s in round r of state j.
    step = {"lcg": "g_lcg32_next", "xorshift32": "g_xorshift32_next"}.get(generator)
%>
%   if generator == "lcg":
${lcg.lcg32("g_")}
%   elif generator == "xorshift32":
${xorshift.xorshift32("g_")}
%   else:
${lcg.halfbit_lcg("g_")}
// One round of 64 words from state *x; `emit(word, m)` receives word m of the round.
#define HALFBIT_ROUND(x, emit) do { \
    const uint xs_[4] = {g_HALFBIT_XOR_0, g_HALFBIT_XOR_1, g_HALFBIT_XOR_2, g_HALFBIT_XOR_3}; \
    uint y0_ = 0u; \
    for (uint s_ = 0; s_ < 4; ++s_) { \
        uint y_ = *(x) ^ xs_[s_]; \
        for (uint i_ = 0; i_ < 16; ++i_) { const uint w_ = g_halfbit_next(&y_); emit(w_, 16 * s_ + i_); } \
        if (s_ == 0) y0_ = y_; \
    } \
    *(x) = y0_; \
} while (0)
%   endif

// Writes the next n words of the streams to out[0, n) and leaves each stream's
// state in states[j], so a long run is made of pieces of whole steps (n a
// multiple of S, halfbit-lcg of 64 S) with the same words as one launch.
__kernel void rng_words(__global uint *out, const ulong n, __global uint *states)
{
    const uint j = get_global_id(0);
    const ulong S = get_global_size(0);
    uint x = states[j];
%   if generator == "halfbit-lcg":
    for (ulong base = 64 * j; base < n; base += 64 * S) {
#define EMIT(w, m) if (base + (m) < n) out[base + (m)] = (w)
        HALFBIT_ROUND(&x, EMIT);
#undef EMIT
    }
%   else:
    for (ulong k = j; k < n; k += S) out[k] = ${step}(&x);
%   endif
    states[j] = x;
}

// XOR of the first `steps` words (halfbit-lcg: `steps` rounds of 64) of stream j.
__kernel void rng_checksum(__global uint *out, const uint steps, __global const uint *states)
{
    const uint j = get_global_id(0);
    uint x = states[j], acc = 0u;
%   if generator == "halfbit-lcg":
#define EMIT(w, m) acc ^= (w)
    for (uint r = 0; r < steps; ++r) HALFBIT_ROUND(&x, EMIT);
#undef EMIT
%   else:
    for (uint i = 0; i < steps; ++i) acc ^= ${step}(&x);
%   endif
    out[j] = acc;
}
% endif
