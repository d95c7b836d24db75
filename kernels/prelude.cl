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
//
// Row-list kernels compute y[r] for the rows r = use_list ? rows[i] : base + i,
// i in [0, n): the whole-matrix case passes use_list = 0 and pays for no list.

#ifdef USE_DOUBLE
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#ifndef VALUE_TYPE
#define VALUE_TYPE float
#endif
#ifndef WG_SIZE
#define WG_SIZE 256
#endif

typedef VALUE_TYPE value_t;

// No-such-row / no-such-slot marker.
#define NONE 0xffffffffu

inline uint row_of(uint i, uint use_list, uint base, __global const uint* rows) {
    return use_list ? rows[i] : base + i;
}
