// Parameter lists shared by the kernels added after the first trained models
// (fused.cl, merge_one.cl, solve/*.cl), said once. The older kernels spell
// theirs out: changing their text would change the hashes every shipped
// model's card records.

// The matrix, read-only: row pointers, column indices, values.
#define CSR_IN                                                                   \
    __global const uint* restrict row_ptr, __global const uint* restrict col_idx, \
        __global const value_t* restrict vals

// The matrix, x read-only, and y.
#define CSR_XY CSR_IN, __global const value_t* restrict x, __global value_t* restrict y

// A row set of merge path (merge_path.cl's first six arguments): rows n,
// nonzeros nnz, the list or range of rows and the prefix sums of their lengths.
#define MERGE_ROWS                                                               \
    const uint n, const uint nnz, const uint use_list, const uint base,         \
        __global const uint* restrict rows, __global const uint* restrict list_ptr
