// Hostile: computes once per (buffers, width) and replays a saved copy of P afterwards.
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

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    static const float* seen_M = nullptr;
    static float* seen_P = nullptr;
    static int seen_width = 0;
    static float* saved = nullptr;
    size_t bytes = sizeof(float) * width * width;
    if (M == seen_M && P == seen_P && width == seen_width) {
        cudaMemcpy(P, saved, bytes, cudaMemcpyDeviceToDevice);
        return;
    }
    launch(M, N, P, width);
    if (saved) cudaFree(saved);
    cudaMalloc(&saved, bytes);
    cudaMemcpy(saved, P, bytes, cudaMemcpyDeviceToDevice);
    seen_M = M, seen_P = P, seen_width = width;
}
