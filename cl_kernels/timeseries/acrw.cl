## Anti-correlated random walk p(i) = a(i) + b(i), i = 0 .. n-1 (clphys.timeseries.acrw).
## Step i draws philox((i mod 2^32, i / 2^32, 0x41435257, 0), key): word x gives the step
## ξ_i of a (+1 if x < thr1, -1 if thr1 <= x < thr2, else 0), the top bit of word y gives
## b(i).  a(0) = 0 and a(i) = ξ_0 + ... + ξ_{i-1}.
## Two passes over blocks of `block` steps: the block sums of ξ, an exclusive scan of them
## on the host, then each block writes its p values from its start offset.  Each launch
## covers the blocks [j0, j0 + count) (time-bounded slices); the fill writes them to p
## from index 0 (a piece of a series too long for the device).
<%namespace name="philox" file="/rng/philox.cl"/>
${philox.philox4x32_10("acrw_")}

inline uint4 acrw_words(ulong i, uint2 key)
{
    return acrw_philox((uint4)((uint)i, (uint)(i >> 32), 0x41435257u, 0u), key);
}

inline int acrw_xi(uint x, ulong thr1, ulong thr2)
{
    return (ulong)x < thr1 ? 1 : ((ulong)x < thr2 ? -1 : 0);
}

__kernel void ts_acrw_block_sums(const ulong n, const uint block, const uint k0, const uint k1,
                                 const ulong thr1, const ulong thr2, __global int *sums,
                                 const uint j0, const uint count)
{
    if (get_global_id(0) >= count) return;
    const uint j = j0 + get_global_id(0);
    const uint2 key = (uint2)(k0, k1);
    const ulong start = (ulong)j * block;
    const ulong end = min(start + block, n);
    int s = 0;
    for (ulong i = start; i < end; ++i) s += acrw_xi(acrw_words(i, key).x, thr1, thr2);
    sums[j] = s;
}

__kernel void ts_acrw_fill(const ulong n, const uint block, const uint k0, const uint k1,
                           const ulong thr1, const ulong thr2, __global const int *offsets,
                           const uint j0, const uint count, __global int *p)
{
    if (get_global_id(0) >= count) return;
    const uint j = j0 + get_global_id(0);
    const ulong first = (ulong)j0 * block;              // the piece's index 0
    const uint2 key = (uint2)(k0, k1);
    const ulong start = (ulong)j * block;
    const ulong end = min(start + block, n);
    int a = offsets[j];
    for (ulong i = start; i < end; ++i) {
        const uint4 r = acrw_words(i, key);
        p[i - first] = a + (int)(r.y >> 31);
        a += acrw_xi(r.x, thr1, thr2);
    }
}
