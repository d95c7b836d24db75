// STREAM-like copy used by the benchmark to measure the device's bandwidth bound:
// b = a over `n` float4 elements (bytes moved = 2 * 16 * n).

__kernel void copy_float4(const uint n, __global const float4* restrict a,
                          __global float4* restrict b) {
    const uint i = get_global_id(0);
    if (i < n) b[i] = a[i];
}
