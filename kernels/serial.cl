// Kernel-Serial (paper 000, Algorithm 3): one work-item per row.

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void spmv_serial(const uint n, const uint use_list, const uint base,
                 __global const uint* restrict rows,
                 __global const uint* restrict row_ptr, __global const uint* restrict col_idx,
                 __global const value_t* restrict vals, __global const value_t* restrict x,
                 __global value_t* restrict y) {
    const uint i = get_global_id(0);
    if (i >= n) return;
    const uint r = row_of(i, use_list, base, rows);
    const uint end = row_ptr[r + 1];
    value_t sum = 0;
    for (uint k = row_ptr[r]; k < end; ++k) sum += vals[k] * x[col_idx[k]];
    y[r] = sum;
}
