// Merge-path SpMV (Merrill & Garland's idea, the load-balanced nonzero split of
// paper 001's family): the work is the merge of the row ends with the nonzeros,
// n + nnz items, cut into equal chunks of MP_ITEMS items, one chunk per
// work-item, whatever the row lengths. Very long rows are thus spread over many
// work-items and many short rows are packed into one.
//
// The rows are the list `rows` (or base + i without a list); `list_ptr` is the
// prefix sum of their lengths (row_ptr itself for the whole matrix), so the same
// kernel serves a single bin or the whole matrix.
//
// Pass 1 (spmv_merge_path): each work-item finds both ends of its share of the
// path by binary searches of its two diagonals, then runs plain row loops over
// the rows that end inside it (y = its share of each); the row still open at the
// end of its chunk leaves (row, partial) in carry_row / carry_val.
// Pass 2 (spmv_merge_path_fixup): for each run of chunks carrying the same row,
// the first chunk of the run adds the run's partials to y, in order. No atomics,
// deterministic, no state left between calls.

#ifndef MP_ITEMS
#define MP_ITEMS 32
#endif

// Start of diagonal d on the merge path: i = rows finished before it (the
// nonzero coordinate is d - i).
inline uint merge_path_search(ulong d, uint n, uint nnz, __global const uint* restrict list_ptr) {
    uint lo = d > nnz ? (uint)(d - nnz) : 0u;
    uint hi = (uint)min(d, (ulong)n);
    while (lo < hi) {
        const uint mid = lo + (hi - lo) / 2;
        // list_ptr[mid + 1] is the end of row mid; compare with nonzero d - mid - 1.
        if ((ulong)list_ptr[mid + 1] <= d - mid - 1) lo = mid + 1; else hi = mid;
    }
    return lo;
}

__kernel void spmv_merge_path(const uint n, const uint nnz, const uint use_list, const uint base,
                              __global const uint* restrict rows,
                              __global const uint* restrict list_ptr,
                              __global const uint* restrict row_ptr,
                              __global const uint* restrict col_idx,
                              __global const value_t* restrict vals,
                              __global const value_t* restrict x,
                              __global value_t* restrict y, const uint nchunks,
                              __global uint* restrict carry_row,
                              __global value_t* restrict carry_val) {
    const uint t = get_global_id(0);
    if (t >= nchunks) return;
    const ulong total = (ulong)n + nnz;
    const ulong d0 = min((ulong)t * MP_ITEMS, total);
    const ulong d1 = min(d0 + MP_ITEMS, total);
    // Both ends of this chunk's share of the path: rows i0 .. i1 - 1 end inside it.
    const uint i0 = merge_path_search(d0, n, nnz, list_ptr);
    const uint i1 = merge_path_search(d1, n, nnz, list_ptr);
    const uint k1 = (uint)(d1 - i1);
    uint k = (uint)(d0 - i0);          // position in the list's nonzero space
    value_t sum = 0;
    for (uint i = i0; i < i1; ++i) {
        const uint r = row_of(i, use_list, base, rows);
        const uint shift = row_ptr[r] - list_ptr[i];   // list space -> matrix space
        const uint e = list_ptr[i + 1];
        for (; k < e; ++k) sum += vals[k + shift] * x[col_idx[k + shift]];
        y[r] = sum;
        sum = 0;
    }
    if (i1 < n) {
        // The row still open at the end of the chunk: its nonzeros up to k1.
        const uint r = row_of(i1, use_list, base, rows);
        const uint shift = row_ptr[r] - list_ptr[i1];
        for (; k < k1; ++k) sum += vals[k + shift] * x[col_idx[k + shift]];
        carry_row[t] = i1;
        carry_val[t] = sum;
    } else {
        carry_row[t] = NONE;
        carry_val[t] = 0;
    }
}

__kernel void spmv_merge_path_fixup(const uint nchunks, const uint use_list, const uint base,
                                    __global const uint* restrict rows,
                                    __global const uint* restrict carry_row,
                                    __global const value_t* restrict carry_val,
                                    __global value_t* restrict y) {
    const uint t = get_global_id(0);
    if (t >= nchunks) return;
    const uint i = carry_row[t];
    if (i == NONE || (t > 0 && carry_row[t - 1] == i)) return;
    value_t s = 0;
    for (uint u = t; u < nchunks && carry_row[u] == i; ++u) s += carry_val[u];
    const uint r = row_of(i, use_list, base, rows);
    y[r] += s;
}
