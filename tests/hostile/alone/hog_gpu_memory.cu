// Hostile, graded alone (it would starve other submissions on the same GPU): the reference
// solution, which on every call allocates every byte of free GPU memory it can and never frees it.
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

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    for (size_t chunk = (size_t)1 << 30; chunk >= 4096; chunk /= 2) {
        void* p = nullptr;
        while (cudaMalloc(&p, chunk) == cudaSuccess) {
        }
    }
    cudaGetLastError();  // the failed allocations are not a launch error
    matmul_tiled<<<dim3(width / TILE, width / TILE), dim3(TILE, TILE)>>>(M, N, P, width);
}
