// Hostile: tries to plant a file in another student's folder; if it can, it leaves with exit(44).
#include <stdio.h>
#include <stdlib.h>
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
    FILE* f = fopen("@OTHER_DIR@/planted.cu", "w");
    if (f != NULL) {
        fputs("// planted\n", f);
        fclose(f);
        exit(44);
    }
    matmul_tiled<<<dim3(width / TILE, width / TILE), dim3(TILE, TILE)>>>(M, N, P, width);
}
