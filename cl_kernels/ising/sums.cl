## Per-replica totals from per-replica partial sums, written at a measurement
## index: out[index * R + r] = sum_j partial[r * parts + j] (cl_long2: x = bond
## sum, y = magnetization). One work group per replica. Any backend may use it
## for measure_into (see clphys/ising/backends.py).
## params: wg (work-group size, a power of two)
<%namespace name="red" file="/common/reduce.cl"/>
${red.wg_reduce("isf_", "long2", wg, "return a + b;")}

__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ising_sums_finish(__global const long2 *partial, const uint parts,
                       __global long2 *out, const uint index, const uint R)
{
    __local long2 scratch[${wg}];
    const uint r = get_group_id(0), lid = get_local_id(0);
    long2 acc = (long2)(0, 0);
    for (uint j = lid; j < parts; j += ${wg}u)
        acc += partial[(size_t)r * parts + j];
    acc = isf_wg_reduce(acc, lid, scratch);
    if (lid == 0u) out[(size_t)index * R + r] = acc;
}
