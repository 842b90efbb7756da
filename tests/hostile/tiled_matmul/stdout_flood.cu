// Hostile: prints 100 MB to stdout, then leaves with exit(3).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    static char line[1 << 20];
    memset(line, 'x', sizeof line - 1);
    line[sizeof line - 2] = '\n';
    for (int i = 0; i < 100; ++i) fwrite(line, 1, sizeof line - 1, stdout);
    printf("last line of the flood\n");
    exit(3);
}
