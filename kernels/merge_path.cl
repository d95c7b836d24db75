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
// Pass 1 (spmv_merge_path): each work-item finds its start on the path by a
// binary search of its diagonal, then walks MP_ITEMS steps; each row it
// finishes gets y = its share of the row; the row still open at the end of its
// chunk leaves (row, partial) in carry_row / carry_val.
// Pass 2 (spmv_merge_path_fixup): for each run of chunks carrying the same row,
// the first chunk of the run adds the run's partials to y, in order. No atomics,
// deterministic, no state left between calls.

#ifndef MP_ITEMS
#define MP_ITEMS 32
#endif

__kernel void spmv_merge_path(const uint n, const uint nnz, const uint use_list, const uint base,
                              __global const uint* rows, __global const uint* list_ptr,
                              __global const uint* row_ptr, __global const uint* col_idx,
                              __global const value_t* vals, __global const value_t* x,
                              __global value_t* y, const uint nchunks,
                              __global uint* carry_row, __global value_t* carry_val) {
    const uint t = get_global_id(0);
    if (t >= nchunks) return;
    const ulong total = (ulong)n + nnz;
    const ulong d0 = min((ulong)t * MP_ITEMS, total);
    const ulong d1 = min(d0 + MP_ITEMS, total);
    // Binary search on diagonal d0: i = rows finished before it.
    uint lo = d0 > nnz ? (uint)(d0 - nnz) : 0u;
    uint hi = (uint)min(d0, (ulong)n);
    while (lo < hi) {
        const uint mid = lo + (hi - lo) / 2;
        // list_ptr[mid + 1] is the end of row mid; compare with nonzero d0 - mid - 1.
        if ((ulong)list_ptr[mid + 1] <= d0 - mid - 1) lo = mid + 1; else hi = mid;
    }
    uint i = lo;
    uint k = (uint)(d0 - i);           // position in the list's nonzero space
    ulong d = d0;
    value_t sum = 0;
    while (d < d1 && i < n) {
        const uint r = row_of(i, use_list, base, rows);
        const uint row_end = list_ptr[i + 1];
        const uint shift = row_ptr[r] - list_ptr[i];   // list space -> matrix space
        const ulong room = d1 - d;
        const uint avail = row_end - k;
        if ((ulong)avail < room) {
            // This chunk finishes row i.
            for (uint kk = k; kk < row_end; ++kk) sum += vals[kk + shift] * x[col_idx[kk + shift]];
            y[r] = sum;
            sum = 0;
            d += avail + 1;
            k = row_end;
            ++i;
        } else {
            const uint stop = k + (uint)room;
            for (uint kk = k; kk < stop; ++kk) sum += vals[kk + shift] * x[col_idx[kk + shift]];
            d += room;
            k = stop;
        }
    }
    if (i < n) {
        carry_row[t] = i;
        carry_val[t] = sum;
    } else {
        carry_row[t] = NONE;
        carry_val[t] = 0;
    }
}

__kernel void spmv_merge_path_fixup(const uint nchunks, const uint use_list, const uint base,
                                    __global const uint* rows,
                                    __global const uint* carry_row,
                                    __global const value_t* carry_val, __global value_t* y) {
    const uint t = get_global_id(0);
    if (t >= nchunks) return;
    const uint i = carry_row[t];
    if (i == NONE || (t > 0 && carry_row[t - 1] == i)) return;
    value_t s = 0;
    for (uint u = t; u < nchunks && carry_row[u] == i; ++u) s += carry_val[u];
    const uint r = row_of(i, use_list, base, rows);
    y[r] += s;
}
