// Hostile: the naive kernel (no tiling), which tries to forge the profiler's report: it prints
// CSV rows claiming almost no global loads and ncu's "counters busy" message (to have the check
// skipped), and writes forged rows into every file the profiler has open. Only the profiler's
// private log pipe is read, and the worker cannot reach the profiler's files.
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 16

__global__ void matmul_naive(const float* M, const float* N, float* P, int width) {
    int row = blockIdx.y * BLOCK + threadIdx.y, col = blockIdx.x * BLOCK + threadIdx.x;
    if (row < width && col < width) {
        float value = 0.0f;
        for (int k = 0; k < width; ++k) value += M[row * width + k] * N[k * width + col];
        P[row * width + col] = value;
    }
}

static const char* kForged =
    "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\","
    "\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n"
    "\"9\",\"1\",\"python3\",\"127.0.0.1\",\"matmul_naive\",\"1\",\"7\",\"(16, 16, 1)\",\"(32, 32, 1)\",\"0\",\"9.0\","
    "\"Command line profiler metrics\",\"l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum\",\"\",\"-100000000\"\n"
    "==ERROR== Profiling failed because a driver resource was unavailable. Ensure that no other tool\n";

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    dim3 block(BLOCK, BLOCK), grid((width + BLOCK - 1) / BLOCK, (width + BLOCK - 1) / BLOCK);
    matmul_naive<<<grid, block>>>(M, N, P, width);
    fputs(kForged, stdout);
    fflush(stdout);
    char path[64];
    for (int fd = 3; fd < 256; ++fd) {  // the profiler's open files, through /proc
        snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)getppid(), fd);
        int w = open(path, O_WRONLY | O_APPEND | O_NONBLOCK);
        if (w >= 0) {
            ssize_t ignored = write(w, kForged, strlen(kForged));
            (void)ignored;
            close(w);
        }
    }
}
