// Shared prelude of every kernel program (prepended by the engine).
//
// Build options set by the engine:
//   -DVALUE_TYPE=float|double   value type of the matrix and vectors
//   -DUSE_DOUBLE                when VALUE_TYPE is double (enables cl_khr_fp64)
//   -DWG_SIZE=n                 work-group size of the row-list kernels
//   -DVECTOR_WG=n               work-group size of the vector kernel (256)
//   -DADAPTIVE_WG=n             work-group size of CSR-Adaptive
//   -DNNZ_PER_WG=n -DNUM_ROWS_STREAM=n   CSR-Adaptive hyper-parameters
//   -DMP_ITEMS=n                merge-path items (rows + nonzeros) per work-item
//   -DSPMV_WARP_SHUFFLE=1       reductions by NVIDIA warp shuffles (inline PTX);
//                               only on NVIDIA GPUs, work-group sizes multiples of 32
//   -DSPMV_SHUFFLE_EMULATE=1    with SPMV_WARP_SHUFFLE: the shuffle emulated in
//                               local memory with barriers, so the shuffle path's
//                               reduction logic is tested on any device
//
// Row-list kernels compute y[r] for the rows r = use_list ? rows[i] : base + i,
// i in [0, n): the whole-matrix case passes use_list = 0 and pays for no list.
//
// Index arithmetic: row and nonzero indices are uint (the CSR row pointers are
// 32-bit, so nnz < 2^32); global pointers are indexed with them directly, which
// C promotes to the 64-bit address width, so no byte offset is ever formed in
// 32-bit arithmetic. Global ids are size_t and only narrowed after division.

#ifdef USE_DOUBLE
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#ifndef VALUE_TYPE
#define VALUE_TYPE float
#endif
#ifndef WG_SIZE
#define WG_SIZE 256
#endif
#ifndef SPMV_WARP_SHUFFLE
#define SPMV_WARP_SHUFFLE 0
#endif
#ifndef SPMV_SHUFFLE_EMULATE
#define SPMV_SHUFFLE_EMULATE 0
#endif

typedef VALUE_TYPE value_t;

// No-such-row / no-such-slot marker.
#define NONE 0xffffffffu

inline uint row_of(uint i, uint use_list, uint base, __global const uint* restrict rows) {
    return use_list ? rows[i] : base + i;
}

// ---- Group sums --------------------------------------------------------------
//
// group_sum(v, width, red, scr) sums v over each aligned group of `width`
// neighbouring work-items (width a power of two, 2 <= width <= work-group size)
// and returns the sum in the group's first work-item (other work-items get a
// partial). EVERY work-item of the work-group must call it with the same width:
// it holds barriers. `red` has room for one value per work-item; `scr` is the
// shuffle emulation's scratch (SHFL_SCRATCH), unused otherwise. A caller that
// calls it again on the same `red` puts a barrier in between.
//
// Portable path (default): a local-memory tree with a barrier after every step.
// Nothing assumes that the work-items of a warp run in lockstep (they do not
// since NVIDIA Volta).
//
// Shuffle path (SPMV_WARP_SHUFFLE): a group of at most 32 work-items sums by
// `shfl.sync.down.b32` within its warp (no local memory, no barrier; a double is
// shuffled as two 32-bit halves); a wider group sums each warp by shuffles, then
// its first work-item adds the group's width / 32 warp sums from local memory
// after one barrier.

#define WARP_SIZE 32u

#if SPMV_WARP_SHUFFLE && SPMV_SHUFFLE_EMULATE
#define SHFL_SCRATCH(n) __local value_t shfl_scratch[n]
#else
#define SHFL_SCRATCH(n) __local value_t* const shfl_scratch = 0
#endif

#if SPMV_WARP_SHUFFLE

#if SPMV_SHUFFLE_EMULATE
// v of the work-item `delta` lanes down within the aligned segment of `width`
// lanes, or v itself past the segment's end (as shfl.sync.down clamps).
inline value_t shfl_down(value_t v, uint delta, uint width, __local value_t* scr) {
    const uint lid = get_local_id(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    scr[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    return (lid & (width - 1)) + delta < width ? scr[lid + delta] : v;
}
#else
inline uint shfl_down_b32(uint v, uint delta, uint c) {
    uint r;
    asm volatile("shfl.sync.down.b32 %0, %1, %2, %3, %4;"
                 : "=r"(r)
                 : "r"(v), "r"(delta), "r"(c), "r"(0xffffffffu));
    return r;
}

inline value_t shfl_down(value_t v, uint delta, uint width, __local value_t* scr) {
    // c: segment mask (32 - width) in bits 8..12, clamp lane 31 in bits 0..4.
    const uint c = ((WARP_SIZE - width) << 8) | (WARP_SIZE - 1);
#ifdef USE_DOUBLE
    uint2 h = as_uint2(v);
    h.x = shfl_down_b32(h.x, delta, c);
    h.y = shfl_down_b32(h.y, delta, c);
    return as_double(h);
#else
    return as_float(shfl_down_b32(as_uint(v), delta, c));
#endif
}
#endif

inline value_t group_sum(value_t v, const uint width, __local value_t* red,
                         __local value_t* scr) {
    const uint w = min(width, WARP_SIZE);
    for (uint off = w / 2; off > 0; off >>= 1) v += shfl_down(v, off, w, scr);
    if (width <= WARP_SIZE) return v;
    const uint lid = get_local_id(0);
    if ((lid & (WARP_SIZE - 1)) == 0) red[lid / WARP_SIZE] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((lid & (width - 1)) == 0) {
        v = 0;
        for (uint j = 0; j < width / WARP_SIZE; ++j) v += red[lid / WARP_SIZE + j];
    }
    return v;
}

#else

inline value_t group_sum(value_t v, const uint width, __local value_t* red,
                         __local value_t* scr) {
    const uint lid = get_local_id(0);
    const uint lane = lid & (width - 1);
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint off = width / 2; off > 0; off >>= 1) {
        if (lane < off) red[lid] += red[lid + off];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return red[lid];
}

#endif
