// Cooperative merge-path SpMV: the merge of the row ends with the nonzeros
// (n + nnz items, as in merge_path.cl) is cut into tiles of MT_TILE = MT_WG *
// MT_ITEMS items, one tile per work-group of MT_WG work-items.
//
// Pass 1 (spmv_merge_tile), per tile:
//   1. two work-items find the tile's two diagonals on the whole path by binary
//      search over list_ptr: rows i0 .. i1 - 1 end inside the tile, nonzeros
//      k0 .. k1 - 1 (list space) lie in it;
//   2. the work-group loads the tile's row ends and its products
//      vals[k] * x[col_idx[k]] into local memory, neighbouring work-items reading
//      neighbouring words (coalesced);
//   3. each work-item finds its own MT_ITEMS-item share of the tile by a binary
//      search in local memory and walks it: a row that ends inside its share
//      and started there too is written to y at once; the first row it ends may
//      have begun in earlier work-items, so it waits for
//   4. a segmented (by row) inclusive scan of the work-items' open-row partials,
//      log2(MT_WG) steps with barriers, which gives each work-item the carry-in
//      of its first row; the last work-item's scan value is the tile's carry:
//      (row still open at the tile's end, its partial), or NONE.
// Pass 2 (spmv_merge_tile_fixup), over the carries: runs of equal rows are summed
// by the same tiling (MT_ITEMS carries per work-item, a segmented scan per
// work-group) and added to y where the run ends; a run still open at the end of
// a work-group's chunk becomes that chunk's carry for another level of the same
// kernel (the host launches levels until one work-group holds every carry), so a
// row spanning thousands of tiles is summed in a tree, never serially.
//
// Rows are the list `rows` (or base + i), `list_ptr` the prefix sum of their
// lengths (row_ptr itself for the whole matrix), as in merge_path.cl. No atomics:
// every y[r] is written (=) by exactly one work-item of pass 1 and added to (+=)
// by at most one work-item per fix-up level, launches running in order, sums in
// a fixed order, so results are bit-identical from call to call. Nothing relies
// on work-items of a warp running in lockstep: local memory is shared only
// across barriers. Work-groups are exactly MT_WG wide (reqd_work_group_size).

#ifndef MT_WG
#define MT_WG 128
#endif
#ifndef MT_ITEMS
#define MT_ITEMS 8
#endif
#define MT_TILE (MT_WG * MT_ITEMS)

// Start of diagonal d on the whole path: the rows finished before it.
inline uint mt_path_search(ulong d, uint n, uint nnz, __global const uint* restrict list_ptr) {
    uint lo = d > nnz ? (uint)(d - nnz) : 0u;
    uint hi = (uint)min(d, (ulong)n);
    while (lo < hi) {
        const uint mid = lo + (hi - lo) / 2;
        if ((ulong)list_ptr[mid + 1] <= d - mid - 1) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// Start of local diagonal dl inside a tile of nr row ends `ends` (list space)
// and nk nonzeros from k0: the tile's rows finished before it.
inline uint mt_tile_search(uint dl, uint nr, uint nk, uint k0, __local const uint* ends) {
    uint lo = dl > nk ? dl - nk : 0u;
    uint hi = min(dl, nr);
    while (lo < hi) {
        const uint mid = lo + (hi - lo) / 2;
        // mid < dl, so the nonzero index k0 + dl - mid - 1 never underflows.
        if (ends[mid] <= k0 + dl - mid - 1) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// Inclusive scan by row of (srow, sval) over the work-group, rows nondecreasing
// with the local id: afterwards sval[l] is the sum of the values of the
// work-items up to l that carry srow[l] and follow l's last change of row.
// Every work-item calls it; the caller puts a barrier after its stores.
inline void mt_segmented_scan(__local const uint* srow, __local value_t* sval) {
    const uint lid = get_local_id(0);
    for (uint off = 1; off < MT_WG; off <<= 1) {
        value_t v = sval[lid];
        // Rows are monotone, so equal rows at both ends mean equal rows between.
        if (lid >= off && srow[lid - off] == srow[lid]) v += sval[lid - off];
        barrier(CLK_LOCAL_MEM_FENCE);
        sval[lid] = v;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

// The carry-in of row r for work-item lid after the scan: what earlier
// work-items left open on r.
inline value_t mt_carry_in(uint r, __local const uint* srow, __local const value_t* sval) {
    const uint lid = get_local_id(0);
    return (lid > 0 && srow[lid - 1] == r) ? sval[lid - 1] : (value_t)0;
}

// Step 2: the tile's row ends and products into local memory. For a row list the
// matrix position of a nonzero depends on its row, found among the tile's row
// ends (a binary search in local memory); for a range it is a constant shift.
inline void mt_load_tile(uint i0, uint nr, uint k0, uint nk, uint use_list, uint base,
                         __global const uint* restrict rows,
                         __global const uint* restrict list_ptr,
                         __global const uint* restrict row_ptr,
                         __global const uint* restrict col_idx,
                         __global const value_t* restrict vals,
                         __global const value_t* restrict x,
                         __local uint* ends, __local value_t* prod) {
    const uint lid = get_local_id(0);
    for (uint j = lid; j < nr; j += MT_WG) ends[j] = list_ptr[i0 + j + 1];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (use_list) {
        const uint first_start = list_ptr[i0];
        for (uint j = lid; j < nk; j += MT_WG) {
            const uint k = k0 + j;
            uint lo = 0, hi = nr;
            while (lo < hi) {
                const uint mid = lo + (hi - lo) / 2;
                if (ends[mid] <= k) lo = mid + 1; else hi = mid;
            }
            const uint start = lo == 0 ? first_start : ends[lo - 1];
            const uint at = row_ptr[rows[i0 + lo]] + (k - start);
            prod[j] = vals[at] * x[col_idx[at]];
        }
    } else {
        // Unsigned wrap-around is exact here: the sum is a valid index.
        const uint shift = row_ptr[base] - list_ptr[0];
        for (uint j = lid; j < nk; j += MT_WG) {
            const uint at = k0 + j + shift;
            prod[j] = vals[at] * x[col_idx[at]];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

__kernel __attribute__((reqd_work_group_size(MT_WG, 1, 1)))
void spmv_merge_tile(const uint n, const uint nnz, const uint use_list, const uint base,
                     __global const uint* restrict rows,
                     __global const uint* restrict list_ptr,
                     __global const uint* restrict row_ptr,
                     __global const uint* restrict col_idx,
                     __global const value_t* restrict vals,
                     __global const value_t* restrict x,
                     __global value_t* restrict y,
                     __global uint* restrict carry_row,
                     __global value_t* restrict carry_val) {
    __local uint s_ends[MT_TILE];
    __local value_t s_prod[MT_TILE];
    __local uint s_row[MT_WG];
    __local value_t s_val[MT_WG];
    __local uint s_bounds[2];
    const uint lid = get_local_id(0);
    const uint tile = get_group_id(0);
    const ulong total = (ulong)n + nnz;
    const ulong d0 = min((ulong)tile * MT_TILE, total);
    const ulong d1 = min(d0 + MT_TILE, total);
    if (lid < 2) s_bounds[lid] = mt_path_search(lid == 0 ? d0 : d1, n, nnz, list_ptr);
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint i0 = s_bounds[0];
    const uint i1 = s_bounds[1];
    const uint k0 = (uint)(d0 - i0);
    const uint nr = i1 - i0;
    const uint nk = (uint)(d1 - i1) - k0;
    mt_load_tile(i0, nr, k0, nk, use_list, base, rows, list_ptr, row_ptr, col_idx, vals, x,
                 s_ends, s_prod);

    // Step 3: this work-item's share of the tile.
    const uint len = nr + nk;
    const uint dl = min(lid * (uint)MT_ITEMS, len);
    const uint dend = min(dl + (uint)MT_ITEMS, len);
    uint ri = mt_tile_search(dl, nr, nk, k0, s_ends);
    uint kl = dl - ri;
    value_t sum = 0;
    value_t first_sum = 0;
    uint first = NONE;
    for (uint d = dl; d < dend; ++d) {
        if (ri < nr && s_ends[ri] <= k0 + kl) {
            if (first == NONE) {
                first = ri;
                first_sum = sum;
            } else {
                y[row_of(i0 + ri, use_list, base, rows)] = sum;
            }
            sum = 0;
            ++ri;
        } else {
            sum += s_prod[kl];
            ++kl;
        }
    }

    // Step 4: carries between the work-items, then the tile's own.
    s_row[lid] = i0 + ri;
    s_val[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    mt_segmented_scan(s_row, s_val);
    if (first != NONE) {
        y[row_of(i0 + first, use_list, base, rows)] = first_sum + mt_carry_in(i0 + first, s_row, s_val);
    }
    if (lid == MT_WG - 1) {
        // s_row[lid] is i1 here: the last work-item's share ends at the tile's end.
        carry_row[tile] = i1 < n ? i1 : NONE;
        carry_val[tile] = i1 < n ? s_val[lid] : (value_t)0;
    }
}

// One level of the fix-up: carries in_row / in_val [0, count) in chunks of
// MT_TILE per work-group. Every run of equal rows that ends inside a chunk is
// added to y there; with `emit`, each chunk leaves (row, partial) of the run
// open at its end in out_row / out_val [group] for the next level (the last
// chunk's runs all end, so its entry is a harmless (row, 0) or NONE).
__kernel __attribute__((reqd_work_group_size(MT_WG, 1, 1)))
void spmv_merge_tile_fixup(const uint count, const uint use_list, const uint base,
                           __global const uint* restrict rows,
                           __global const uint* restrict in_row,
                           __global const value_t* restrict in_val,
                           __global value_t* restrict y, const uint emit,
                           __global uint* restrict out_row,
                           __global value_t* restrict out_val) {
    __local uint s_row[MT_WG];
    __local value_t s_val[MT_WG];
    const uint lid = get_local_id(0);
    const ulong c0 = (ulong)get_group_id(0) * MT_TILE + (ulong)lid * MT_ITEMS;
    const uint j0 = (uint)min(c0, (ulong)count);
    const uint j1 = (uint)min(c0 + MT_ITEMS, (ulong)count);
    value_t sum = 0;
    value_t first_sum = 0;
    uint first = NONE;
    // The run open at this work-item's end (as i0 + ri in pass 1): after a run
    // ends, the next carry's row, so that the scan never adds a finished run's
    // earlier partials to what follows it.
    uint open = j0 < j1 ? in_row[j0] : NONE;
    for (uint j = j0; j < j1; ++j) {
        const uint r = in_row[j];
        sum += in_val[j];
        const uint next = j + 1 < count ? in_row[j + 1] : NONE;
        if (next != r) {
            // The run of r ends here.
            open = next;
            if (first == NONE) {
                first = r;
                first_sum = sum;
            } else if (r != NONE) {
                y[row_of(r, use_list, base, rows)] += sum;
            }
            sum = 0;
        }
    }
    s_row[lid] = open;
    s_val[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    mt_segmented_scan(s_row, s_val);
    if (first != NONE) {
        y[row_of(first, use_list, base, rows)] += first_sum + mt_carry_in(first, s_row, s_val);
    }
    if (emit && lid == MT_WG - 1) {
        out_row[get_group_id(0)] = s_row[lid];
        out_val[get_group_id(0)] = s_val[lid];
    }
}
