// Y = A X for k vectors at once (SpMM), X (ncols x k) and Y (nrows x k)
// row-major: work-item (r, j) of a group of 2^kp_log2 >= k lanes per row sums
// row r against column j of X. The lanes of a row read the same column index
// and value (one load for all of them) and neighbouring x entries (coalesced),
// so each matrix entry is fetched once for all k products. Built with the
// solver kernels as a program of its own (engine/src/solve.rs).

__kernel void spmm_rowmajor(const uint nrows, const uint k, const uint kp_log2, CSR_XY) {
    const size_t g = get_global_id(0);
    const uint r = (uint)(g >> kp_log2);
    const uint j = (uint)(g & ((1u << kp_log2) - 1));
    if (r >= nrows || j >= k) return;
    value_t s = 0;
    const uint end = row_ptr[r + 1];
    for (uint q = row_ptr[r]; q < end; ++q) s += vals[q] * x[(size_t)col_idx[q] * k + j];
    y[(size_t)r * k + j] = s;
}
