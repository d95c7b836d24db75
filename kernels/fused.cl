// One launch for every row-mapped bin of a plan (serial, subvector-X, vector):
// work-group g reads its descriptor, built on the host when the plan is
// prepared (engine/src/fused.rs), and computes y for its rows with X lanes per
// row, X chosen per descriptor: X = 1 is Kernel-Serial's mapping, 2 .. WG_SIZE / 2
// Kernel-SubvectorX's, WG_SIZE Kernel-Vector's (one row per work-group).
//
// desc[2g]     position of the work-group's first row in `rows`
// desc[2g + 1] (rows of the work-group << 8) | log2(X), at most WG_SIZE / X rows
//
// X is the same for every work-item of a work-group, so group_sum's barriers
// are reached by all of them (prelude.cl's rule), whatever the neighbours do.

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void spmv_fused(__global const uint* restrict desc, __global const uint* restrict rows, CSR_XY) {
    __local value_t red[WG_SIZE];
    SHFL_SCRATCH(WG_SIZE);
    const uint g = get_group_id(0);
    const uint first = desc[2 * g];
    const uint n = desc[2 * g + 1] >> 8;
    const uint shift = desc[2 * g + 1] & 0xffu;
    const uint width = 1u << shift;
    const uint lid = get_local_id(0);
    const uint i = lid >> shift;
    const uint lane = lid & (width - 1);
    value_t sum = 0;
    uint r = 0;
    if (i < n) {
        r = rows[first + i];
        const uint end = row_ptr[r + 1];
        for (uint k = row_ptr[r] + lane; k < end; k += width) sum += vals[k] * x[col_idx[k]];
    }
    // One group_sum per width, each with a constant width as the subvector
    // kernels have (the compilers unroll its steps); the branch taken is the
    // same for the whole work-group.
    switch (shift) {
    case 0: break;
#define FUSED_SUM(S) case S: sum = group_sum(sum, 1u << S, red, shfl_scratch); break;
    FUSED_SUM(1) FUSED_SUM(2) FUSED_SUM(3) FUSED_SUM(4) FUSED_SUM(5) FUSED_SUM(6)
    FUSED_SUM(7) FUSED_SUM(8) FUSED_SUM(9) FUSED_SUM(10)
#undef FUSED_SUM
    }
    if (i < n && lane == 0) y[r] = sum;
}
