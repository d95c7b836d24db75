// Kernel-SubvectorX (paper 000, Algorithm 4): X neighbouring work-items per row
// (X = 2, 4, ..., 128, one kernel entry per X so the width is a compile-time
// constant), WG_SIZE / X rows per work-group.
//
// Each lane sums the row's nonzeros lane, lane + X, ... (consecutive lanes read
// consecutive nonzeros: coalesced on a GPU) in a register, then the X partial
// sums are reduced by group_sum (prelude.cl: a local-memory tree with barriers,
// or warp shuffles). This keeps the paper's thread mapping; the paper's
// local-memory staging of `factor * X` products per round is replaced by
// register accumulation, which gives the same sum with fewer barriers.

inline void subvector_body(const uint X, __local value_t* red, __local value_t* scr,
                           const uint n, const uint use_list, const uint base,
                           __global const uint* restrict rows,
                           __global const uint* restrict row_ptr,
                           __global const uint* restrict col_idx,
                           __global const value_t* restrict vals,
                           __global const value_t* restrict x,
                           __global value_t* restrict y) {
    const uint lane = get_local_id(0) & (X - 1);
    const uint i = get_global_id(0) / X;
    value_t sum = 0;
    uint r = 0;
    if (i < n) {
        r = row_of(i, use_list, base, rows);
        const uint end = row_ptr[r + 1];
        for (uint k = row_ptr[r] + lane; k < end; k += X) sum += vals[k] * x[col_idx[k]];
    }
    sum = group_sum(sum, X, red, scr);
    if (i < n && lane == 0) y[r] = sum;
}

#define SUBVECTOR_KERNEL(X)                                                              \
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))                            \
void spmv_subvector##X(const uint n, const uint use_list, const uint base,               \
                       __global const uint* restrict rows,                               \
                       __global const uint* restrict row_ptr,                            \
                       __global const uint* restrict col_idx,                            \
                       __global const value_t* restrict vals,                            \
                       __global const value_t* restrict x,                               \
                       __global value_t* restrict y) {                                   \
    __local value_t red[WG_SIZE];                                                        \
    SHFL_SCRATCH(WG_SIZE);                                                               \
    subvector_body(X, red, shfl_scratch, n, use_list, base, rows, row_ptr, col_idx,      \
                   vals, x, y);                                                          \
}

SUBVECTOR_KERNEL(2)
SUBVECTOR_KERNEL(4)
SUBVECTOR_KERNEL(8)
SUBVECTOR_KERNEL(16)
SUBVECTOR_KERNEL(32)
SUBVECTOR_KERNEL(64)
SUBVECTOR_KERNEL(128)
