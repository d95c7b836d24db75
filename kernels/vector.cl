// Kernel-Vector (paper 000, Algorithm 5): a whole work-group of VECTOR_WG (256)
// work-items per row; strided register sums (coalesced), then a local-memory tree.

#ifndef VECTOR_WG
#define VECTOR_WG 256
#endif

__kernel __attribute__((reqd_work_group_size(VECTOR_WG, 1, 1)))
void spmv_vector(const uint n, const uint use_list, const uint base,
                 __global const uint* rows,
                 __global const uint* row_ptr, __global const uint* col_idx,
                 __global const value_t* vals, __global const value_t* x,
                 __global value_t* y) {
    __local value_t red[VECTOR_WG];
    const uint lid = get_local_id(0);
    const uint i = get_group_id(0);
    // n work-groups are launched, so i < n always holds.
    const uint r = row_of(i, use_list, base, rows);
    const uint end = row_ptr[r + 1];
    value_t sum = 0;
    for (uint k = row_ptr[r] + lid; k < end; k += VECTOR_WG) sum += vals[k] * x[col_idx[k]];
    red[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint off = VECTOR_WG / 2; off > 0; off >>= 1) {
        if (lid < off) red[lid] += red[lid + off];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) y[r] = red[0];
}
