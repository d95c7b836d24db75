// Merge path in one launch (merge_one): the merge of row ends and nonzeros cut
// into tiles of MO_TILE items, one work-group per tile, the tile's start
// coordinates (row, nonzero) computed on the host when the plan is prepared
// (`coords`, two uint per tile boundary). No second launch: the rows that cross
// tiles are finished by the last work-group to arrive.
//
// In a tile:
// 1. The row ends of its rows and, for contiguous rows, the products of its
//    nonzeros are staged in local memory with coalesced loads (work-item l
//    takes items l, l + WG_SIZE, ...), column and value before x.
// 2. Each work-item finds its start on the tile's path (a binary search in
//    local memory) and consumes MO_ITEMS items: a row end writes the row's
//    sum, a nonzero adds its product. Its last open row and partial sum go to
//    t_row / t_val.
// 3. The first row a work-item ends may have begun in earlier work-items:
//    that work-item adds their partials (the run of t_row equal to the row
//    just before it, in order). The tile's open row at its end (if any) leaves
//    (row, partial) in carry_row / carry_val.
// 4. Every work-item fences its writes; one atomic increment per tile on
//    `arrived`; the tile that reads ntiles - 1 is the last: it adds each run of
//    equal carries to its row's y (in tile order), and sets `arrived` back to 0
//    for the next call. Deterministic: the same sums in the same order.
//
// Rows are a list or a range as in merge_path.cl (`list_ptr`: prefix sums of
// the rows' lengths, row_ptr itself for the whole matrix).

#ifndef MO_ITEMS
#define MO_ITEMS 8
#endif
#define MO_TILE (WG_SIZE * MO_ITEMS)

// A store fence every other work-group observes: NVIDIA's membar.gl where the
// engine injects PTX, OpenCL's global fence elsewhere.
inline void mo_fence(void) {
#if SPMV_WARP_SHUFFLE && !SPMV_SHUFFLE_EMULATE
    asm volatile("membar.gl;" ::: "memory");
#endif
    mem_fence(CLK_GLOBAL_MEM_FENCE);
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void spmv_merge_one(MERGE_ROWS, CSR_IN, __global const value_t* restrict x,
                    __global value_t* y, const uint ntiles,
                    __global const uint* restrict coords,
                    __global uint* carry_row, __global value_t* carry_val,
                    __global uint* arrived) {
    __local value_t prod[MO_TILE];
    __local uint ends[MO_TILE];
    __local uint t_row[WG_SIZE];
    __local value_t t_val[WG_SIZE];
    __local uint is_last;
    const uint t = get_group_id(0);
    const uint lid = get_local_id(0);
    const uint i0 = coords[2 * t], k0 = coords[2 * t + 1];
    const uint i1 = coords[2 * t + 2], k1 = coords[2 * t + 3];
    const uint nr = i1 - i0;       // rows ending in this tile
    const uint nk = k1 - k0;       // nonzeros in this tile
    // List space -> matrix space for contiguous rows (list_ptr[0] is 0).
    const uint shift0 = use_list ? 0u : row_ptr[base];

    // 1. Staging.
    for (uint q = lid; q < nr; q += WG_SIZE) ends[q] = list_ptr[i0 + 1 + q];
    if (!use_list) {
        for (uint q = lid; q < nk; q += WG_SIZE) {
            const uint k = k0 + q + shift0;
            const uint c = col_idx[k];
            const value_t v = vals[k];
            prod[q] = v * x[c];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // 2. This work-item's share of the tile's path.
    const uint total = nr + nk;
    const uint d = min(lid * (uint)MO_ITEMS, total);
    uint lo = d > nk ? d - nk : 0u;
    uint hi = min(d, nr);
    while (lo < hi) {
        const uint mid = lo + (hi - lo) / 2;
        if (ends[mid] <= k0 + (d - mid - 1)) lo = mid + 1; else hi = mid;
    }
    uint ii = lo;                  // local row
    uint kk = d - lo;              // local nonzero
    const uint dend = min(d + (uint)MO_ITEMS, total);
    uint first = NONE;             // the first row this work-item ends
    value_t first_sum = 0;
    value_t sum = 0;
    uint shift = 0;
    if (use_list && i0 + ii < n) {
        const uint r = row_of(i0 + ii, use_list, base, rows);
        shift = row_ptr[r] - list_ptr[i0 + ii];
    }
    for (uint e = d; e < dend; ++e) {
        if (ii < nr && k0 + kk >= ends[ii]) {
            if (first == NONE) {
                first = ii;
                first_sum = sum;
            } else {
                y[row_of(i0 + ii, use_list, base, rows)] = sum;
            }
            sum = 0;
            ++ii;
            if (use_list && i0 + ii < n) {
                const uint r = row_of(i0 + ii, use_list, base, rows);
                shift = row_ptr[r] - list_ptr[i0 + ii];
            }
        } else {
            if (use_list) {
                const uint k = k0 + kk + shift;
                sum += vals[k] * x[col_idx[k]];
            } else {
                sum += prod[kk];
            }
            ++kk;
        }
    }
    t_row[lid] = ii;
    t_val[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);

    // 3. The first row ended here, with the partials of the work-items before.
    if (first != NONE) {
        value_t s = 0;
        for (uint j = lid; j > 0 && t_row[j - 1] == first; --j) s += t_val[j - 1];
        y[row_of(i0 + first, use_list, base, rows)] = s + first_sum;
    }
    if (lid == 0) {
        if (i1 < n) {
            value_t s = 0;
            for (uint j = WG_SIZE; j > 0 && t_row[j - 1] == nr; --j) s += t_val[j - 1];
            carry_row[t] = i1;
            carry_val[t] = s;
        } else {
            carry_row[t] = NONE;
            carry_val[t] = 0;
        }
    }

    // 4. The last tile to arrive finishes the rows that crossed tiles.
    mo_fence();
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (lid == 0) is_last = atomic_inc(arrived) == ntiles - 1;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!is_last) return;
    mo_fence();
    volatile __global uint* cr = carry_row;
    volatile __global value_t* cv = carry_val;
    volatile __global value_t* yv = y;
    for (uint u = lid; u < ntiles; u += WG_SIZE) {
        const uint r = cr[u];
        if (r == NONE || (u > 0 && cr[u - 1] == r)) continue;
        value_t s = 0;
        for (uint v = u; v < ntiles && cr[v] == r; ++v) s += cv[v];
        const uint row = row_of(r, use_list, base, rows);
        yv[row] = yv[row] + s;
    }
    if (lid == 0) atomic_xchg(arrived, 0u);
}
