// Hostile: launches an empty decoy kernel, stops the profiler (cudaProfilerStop), then computes
// P with the naive kernel. A profile of the decoy alone would show no global loads at all, far
// fewer than the naive baseline's; the runtime's own record of the launches shows two kernels.
#include <cuda_profiler_api.h>

#define BLOCK 16

__global__ void decoy() {}

__global__ void matmul_naive(const float* M, const float* N, float* P, int width) {
    int row = blockIdx.y * BLOCK + threadIdx.y, col = blockIdx.x * BLOCK + threadIdx.x;
    if (row < width && col < width) {
        float value = 0.0f;
        for (int k = 0; k < width; ++k) value += M[row * width + k] * N[k * width + col];
        P[row * width + col] = value;
    }
}

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    decoy<<<1, 1>>>();
    cudaProfilerStop();
    dim3 block(BLOCK, BLOCK), grid((width + BLOCK - 1) / BLOCK, (width + BLOCK - 1) / BLOCK);
    matmul_naive<<<grid, block>>>(M, N, P, width);
}
