## Linear congruential generators of the GPU Ising papers (32-bit state, mod 2^32).
##
## lcg32(prefix): x <- 1664525 x + 1013904223 (Numerical Recipes), one state per
##   work item; emits uint ${prefix}lcg32_next(uint *state) returning the new state.
## halfbit_lcg(prefix): x <- 0xDEECE66D x + 0xB, one 32-bit state serving 64
##   sites through 4 streams: stream k starts from state ^ HALFBIT_XOR[k] and
##   advances 16 times; the state written back is stream 0's last value (stream 0
##   XORs with 0, so it is the state itself, un-XORed).
##   Emits ${prefix}halfbit_next(uint *y) and the constant ${prefix}HALFBIT_XOR_k.
##   The NumPy twins are clphys.rng.lcg32_words / halfbit_lcg_words.
<%def name="lcg32(prefix)">
inline uint ${prefix}lcg32_next(uint *state)
{
    *state = 1664525u * (*state) + 1013904223u;
    return *state;
}
</%def>

<%def name="halfbit_lcg(prefix)">
#define ${prefix}HALFBIT_XOR_0 0x00000000u
#define ${prefix}HALFBIT_XOR_1 0x2545F491u
#define ${prefix}HALFBIT_XOR_2 0x9E3779B9u
#define ${prefix}HALFBIT_XOR_3 0x6A09E667u
inline uint ${prefix}halfbit_next(uint *y)
{
    *y = 0xDEECE66Du * (*y) + 0xBu;
    return *y;
}
</%def>
