/* How many back-to-back kernel enqueues per second an OpenCL queue takes: an
 * empty-ish kernel (one write per work-item) enqueued N times then one
 * clFinish, wall time / N, on queues with and without profiling and with and
 * without an event per enqueue. Tells whether our per-call floor in method (b)
 * is the driver's launch cost or what we ask of it (events, profiling).
 *
 *   cc -O2 -o opencl_enqueue_probe bench/opencl_enqueue_probe.c -lOpenCL
 *   ./opencl_enqueue_probe [N=2000] [WORK_ITEMS=65536]
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(x) do { cl_int e_ = (x); if (e_ != CL_SUCCESS) { \
    fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static const char *SRC =
    "__kernel void touch(__global float *y) { y[get_global_id(0)] = 1.0f; }\n";

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    size_t gws = argc > 2 ? (size_t)atol(argv[2]) : 65536, lws = 256;
    cl_platform_id plats[8]; cl_uint np = 0;
    CHECK(clGetPlatformIDs(8, plats, &np));
    cl_device_id dev = 0;
    for (cl_uint i = 0; i < np && !dev; i++)
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_GPU, 1, &dev, NULL) != CL_SUCCESS) dev = 0;
    if (!dev) CHECK(clGetDeviceIDs(plats[0], CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
    char name[256]; CHECK(clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL));
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err); CHECK(err);
    cl_program prog = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &err); CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
    cl_kernel k = clCreateKernel(prog, "touch", &err); CHECK(err);
    cl_mem y = clCreateBuffer(ctx, CL_MEM_READ_WRITE, gws * sizeof(float), NULL, &err); CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof y, &y));
    printf("device: %s, %d enqueues of %zu work-items\n", name, n, gws);
    printf("%-12s %-8s %12s\n", "queue", "events", "us/enqueue");
    for (int prof = 0; prof < 2; prof++) {
        cl_command_queue q = clCreateCommandQueue(ctx, dev, prof ? CL_QUEUE_PROFILING_ENABLE : 0, &err);
        CHECK(err);
        for (int ev = 0; ev < 2; ev++) {
            cl_event *evs = ev ? malloc(sizeof(cl_event) * n) : NULL;
            for (int round = 0; round < 4; round++) { /* round 0 warms up */
                double t0 = now_us();
                for (int i = 0; i < n; i++)
                    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &gws, &lws, 0, NULL, ev ? &evs[i] : NULL));
                CHECK(clFinish(q));
                double per = (now_us() - t0) / n;
                if (ev) for (int i = 0; i < n; i++) clReleaseEvent(evs[i]);
                if (round) printf("%-12s %-8s %12.2f\n", prof ? "profiling" : "plain", ev ? "yes" : "no", per);
            }
            free(evs);
        }
        clReleaseCommandQueue(q);
    }
    return 0;
}
