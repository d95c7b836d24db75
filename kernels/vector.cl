// Kernel-Vector (paper 000, Algorithm 5): a whole work-group of VECTOR_WG (256)
// work-items per row; strided register sums (coalesced), then group_sum
// (prelude.cl: a local-memory tree with barriers, or warp shuffles).

#ifndef VECTOR_WG
#define VECTOR_WG 256
#endif

__kernel __attribute__((reqd_work_group_size(VECTOR_WG, 1, 1)))
void spmv_vector(const uint n, const uint use_list, const uint base,
                 __global const uint* restrict rows,
                 __global const uint* restrict row_ptr, __global const uint* restrict col_idx,
                 __global const value_t* restrict vals, __global const value_t* restrict x,
                 __global value_t* restrict y) {
    __local value_t red[VECTOR_WG];
    SHFL_SCRATCH(VECTOR_WG);
    const uint lid = get_local_id(0);
    const uint i = get_group_id(0);
    // n work-groups are launched, so i < n always holds.
    const uint r = row_of(i, use_list, base, rows);
    const uint end = row_ptr[r + 1];
    value_t sum = 0;
    for (uint k = row_ptr[r] + lid; k < end; k += VECTOR_WG) sum += vals[k] * x[col_idx[k]];
    sum = group_sum(sum, VECTOR_WG, red, shfl_scratch);
    if (lid == 0) y[r] = sum;
}
