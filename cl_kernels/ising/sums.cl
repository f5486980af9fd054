## Per-replica totals from per-replica partial sums, written at a measurement
## index: pair index * R + r of out = sum over j of pair r * parts + j of partial,
## where a pair is two longs (bond sum, magnetization). One work group per
## replica. Any backend may use it for measure_into (clphys/ising/backends.py).
## Pairs are plain longs, not long2: Oclgrind's uninitialised-value checker
## misreads long2 construction.
## params: wg (work-group size, a power of two)
<%namespace name="red" file="/common/reduce.cl"/>
${red.wg_reduce("isf_", "long", wg, "return a + b;")}

__kernel __attribute__((reqd_work_group_size(${wg}, 1, 1)))
void ising_sums_finish(__global const long *partial, const uint parts,
                       __global long *out, const uint index, const uint R)
{
    __local long scratch[${wg}];
    const uint r = get_group_id(0), lid = get_local_id(0);
    long bond = 0, mag = 0;
    for (uint j = lid; j < parts; j += ${wg}u) {
        bond += partial[2 * ((size_t)r * parts + j)];
        mag += partial[2 * ((size_t)r * parts + j) + 1];
    }
    bond = isf_wg_reduce(bond, lid, scratch);
    mag = isf_wg_reduce(mag, lid, scratch);
    if (lid == 0u) {
        out[2 * ((size_t)index * R + r)] = bond;
        out[2 * ((size_t)index * R + r) + 1] = mag;
    }
}
