// Vector kernels of the device-side solvers (engine/src/solve.rs), built as a
// program of their own after prelude.cl (not part of the SpMV kernel pool a
// model's card hashes). Every reduction is deterministic: each work-group sums
// a fixed strided share with group_sum, and the host adds the partials in
// work-group order.

// Sums s over the work-group into partials[group] (every work-item calls it).
inline void partial_sum(value_t s, __local value_t* red, __local value_t* scr,
                        __global value_t* restrict partials) {
    s = group_sum(s, WG_SIZE, red, scr);
    if (get_local_id(0) == 0) partials[get_group_id(0)] = s;
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void solve_dot(const uint n, __global const value_t* restrict a,
               __global const value_t* restrict b, __global value_t* restrict partials) {
    __local value_t red[WG_SIZE];
    SHFL_SCRATCH(WG_SIZE);
    value_t s = 0;
    for (uint i = get_global_id(0); i < n; i += get_global_size(0)) s += a[i] * b[i];
    partial_sum(s, red, shfl_scratch, partials);
}

// y = x + beta y
__kernel void solve_xpby(const uint n, __global const value_t* restrict x, const value_t beta,
                         __global value_t* restrict y) {
    const uint i = get_global_id(0);
    if (i < n) y[i] = x[i] + beta * y[i];
}

// z = d .* r
__kernel void solve_scale(const uint n, __global const value_t* restrict d,
                          __global const value_t* restrict r, __global value_t* restrict z) {
    const uint i = get_global_id(0);
    if (i < n) z[i] = d[i] * r[i];
}

// r = b - r (r holds A x on entry)
__kernel void solve_residual(const uint n, __global const value_t* restrict b,
                             __global value_t* restrict r) {
    const uint i = get_global_id(0);
    if (i < n) r[i] = b[i] - r[i];
}

// dinv[i] = 1 / A[i][i] (duplicates summed), 0 where the diagonal is 0 or absent.
__kernel void solve_diag_inv(const uint n, CSR_IN, __global value_t* restrict dinv) {
    const uint i = get_global_id(0);
    if (i >= n) return;
    value_t d = 0;
    for (uint k = row_ptr[i]; k < row_ptr[i + 1]; ++k)
        if (col_idx[k] == i) d += vals[k];
    dinv[i] = d != 0 ? 1 / d : 0;
}

// CG's update in one pass: x += alpha p, r -= alpha ap, and the partial sums
// of r . r (as solve_dot: one per work-group, added on the host in order).
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void solve_cg_update(const uint n, const value_t alpha, __global const value_t* restrict p,
                     __global const value_t* restrict ap, __global value_t* restrict x,
                     __global value_t* restrict r, __global value_t* restrict partials) {
    __local value_t red[WG_SIZE];
    SHFL_SCRATCH(WG_SIZE);
    value_t s = 0;
    for (uint i = get_global_id(0); i < n; i += get_global_size(0)) {
        x[i] += alpha * p[i];
        const value_t ri = r[i] - alpha * ap[i];
        r[i] = ri;
        s += ri * ri;
    }
    partial_sum(s, red, shfl_scratch, partials);
}
