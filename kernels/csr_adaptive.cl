// CSR-Adaptive (paper 003): one work-group per host-built row block.
//
// A block is (row_start, row_end, k_start, k_end) over a run of consecutive rows,
// plus a slot: NONE for a block of whole rows, else the index in `partials` where
// this block's share of one very long row goes (CSR-VectorL).
//  * CSR-Stream (rows >= NUM_ROWS_STREAM, nnz <= NNZ_PER_WG): the products of
//    the block's nonzeros are staged in local memory with coalesced loads, then
//    reduced per row: by one work-item per row (scalar reduction) when the block
//    has more rows than ADAPTIVE_WG / 2, else by a power-of-two group of work-items
//    per row followed by a logarithmic reduction (paper 003, Figure 3; group_sum
//    in prelude.cl: barriers, or warp shuffles).
//  * CSR-Vector (fewer rows): the whole work-group sums each row in turn.
//  * CSR-VectorL (a row longer than NNZ_PER_WG * NNZ_MULTIPLIER, split over
//    several blocks): each block writes its partial sum to `partials[slot]`.
//
// OpenCL 1.2 has no floating-point atomic add. Instead of the paper's
// compare-and-swap loop and flag barrier we use a SECOND PASS:
// `spmv_csr_adaptive_long_rows` sums each long row's partials in a fixed order
// and writes y. This is deterministic (bit-identical y on every call) and leaves
// no state between calls: there are no flags to reset.
//
// Every read is inside [k_start, k_end) or row_ptr[row_start .. row_end]: no
// kernel here reads past the matrix arrays.

#ifndef ADAPTIVE_WG
#define ADAPTIVE_WG 256
#endif
#ifndef NNZ_PER_WG
#define NNZ_PER_WG 1024
#endif
#ifndef NUM_ROWS_STREAM
#define NUM_ROWS_STREAM 1
#endif

__kernel __attribute__((reqd_work_group_size(ADAPTIVE_WG, 1, 1)))
void spmv_csr_adaptive(__global const uint4* restrict blocks,
                       __global const uint* restrict slots,
                       __global const uint* restrict row_ptr,
                       __global const uint* restrict col_idx,
                       __global const value_t* restrict vals,
                       __global const value_t* restrict x,
                       __global value_t* restrict y, __global value_t* restrict partials) {
    __local value_t lds[NNZ_PER_WG];
    __local value_t red[ADAPTIVE_WG];
    SHFL_SCRATCH(ADAPTIVE_WG);
    const uint lid = get_local_id(0);
    const uint4 b = blocks[get_group_id(0)];
    const uint row_start = b.x, row_end = b.y, k_start = b.z, k_end = b.w;
    const uint slot = slots[get_group_id(0)];
    const uint nrows = row_end - row_start;
    const uint nnz = k_end - k_start;

    if (slot == NONE && nrows >= NUM_ROWS_STREAM && nnz <= NNZ_PER_WG) {
        // CSR-Stream.
        for (uint j = lid; j < nnz; j += ADAPTIVE_WG)
            lds[j] = vals[k_start + j] * x[col_idx[k_start + j]];
        barrier(CLK_LOCAL_MEM_FENCE);
        uint tpr = 1;
        while (tpr * 2 * nrows <= ADAPTIVE_WG) tpr *= 2;
        if (tpr == 1) {
            for (uint r = row_start + lid; r < row_end; r += ADAPTIVE_WG) {
                const uint e = row_ptr[r + 1] - k_start;
                value_t s = 0;
                for (uint j = row_ptr[r] - k_start; j < e; ++j) s += lds[j];
                y[r] = s;
            }
        } else {
            const uint lane = lid & (tpr - 1);
            const uint r = row_start + lid / tpr;
            value_t s = 0;
            if (r < row_end) {
                const uint e = row_ptr[r + 1] - k_start;
                for (uint j = row_ptr[r] - k_start + lane; j < e; j += tpr) s += lds[j];
            }
            // tpr is the same for the whole work-group: every work-item calls it.
            s = group_sum(s, tpr, red, shfl_scratch);
            if (lane == 0 && r < row_end) y[r] = s;
        }
    } else {
        // CSR-Vector over each row of the block (usually one), or CSR-VectorL
        // over this block's share [k_start, k_end) of one long row.
        for (uint r = row_start; r < row_end; ++r) {
            const uint s0 = slot == NONE ? row_ptr[r] : k_start;
            const uint e0 = slot == NONE ? row_ptr[r + 1] : k_end;
            value_t s = 0;
            for (uint k = s0 + lid; k < e0; k += ADAPTIVE_WG) s += vals[k] * x[col_idx[k]];
            s = group_sum(s, ADAPTIVE_WG, red, shfl_scratch);
            if (lid == 0) {
                if (slot == NONE) y[r] = s;
                else partials[slot] = s;
            }
            // `red` is reused by the next row.
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
}

// Second pass of CSR-VectorL: y[long_rows[i]] = sum of partials[long_ptr[i] ..
// long_ptr[i + 1]], in order.
__kernel void spmv_csr_adaptive_long_rows(const uint n, __global const uint* restrict long_rows,
                                          __global const uint* restrict long_ptr,
                                          __global const value_t* restrict partials,
                                          __global value_t* restrict y) {
    const uint i = get_global_id(0);
    if (i >= n) return;
    value_t s = 0;
    for (uint p = long_ptr[i]; p < long_ptr[i + 1]; ++p) s += partials[p];
    y[long_rows[i]] = s;
}
