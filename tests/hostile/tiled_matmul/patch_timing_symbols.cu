// Hostile: defines the CUDA driver's event-timing entry points, hoping the grader's timing
// calls land here and report a tiny time. Otherwise the reference solution.
#include <cuda_runtime.h>

#define TILE 16

__global__ void matmul_tiled(const float* M, const float* N, float* P, int width) {
    __shared__ float Ms[TILE][TILE], Ns[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y, row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float v = 0.0f;
    for (int ph = 0; ph < width / TILE; ++ph) {
        Ms[ty][tx] = M[row * width + ph * TILE + tx];
        Ns[ty][tx] = N[(ph * TILE + ty) * width + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) v += Ms[ty][k] * Ns[k][tx];
        __syncthreads();
    }
    P[row * width + col] = v;
}

static void launch(const float* M, const float* N, float* P, int width, cudaStream_t stream = 0) {
    matmul_tiled<<<dim3(width / TILE, width / TILE), dim3(TILE, TILE), 0, stream>>>(M, N, P, width);
}

extern "C" int cuEventElapsedTime(float* ms, void*, void*) {
    *ms = 1e-6f;
    return 0;
}
extern "C" int cuEventElapsedTime_v2(float* ms, void*, void*) {
    *ms = 1e-6f;
    return 0;
}

extern "C" void matmul(const float* M, const float* N, float* P, int width) { launch(M, N, P, width); }
