## Marsaglia's xorshift32 with shifts (13, 17, 5); the state must not be 0.
## Emits uint ${prefix}xorshift32_next(uint *state) returning the new state.
<%def name="xorshift32(prefix)">
inline uint ${prefix}xorshift32_next(uint *state)
{
    uint x = *state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *state = x;
    return x;
}
</%def>
