// Baseline for tiled_matmul: one thread per output element, every operand read from global
// memory (accesses to N are coalesced; M is a broadcast within a warp). No tiling.
#define BLOCK 16

__global__ void matmul_naive(const float* M, const float* N, float* P, int width) {
    int row = blockIdx.y * BLOCK + threadIdx.y;
    int col = blockIdx.x * BLOCK + threadIdx.x;
    if (row < width && col < width) {
        float value = 0.0f;
        for (int k = 0; k < width; ++k) value += M[row * width + k] * N[k * width + col];
        P[row * width + col] = value;
    }
}

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    dim3 block(BLOCK, BLOCK);
    dim3 grid((width + BLOCK - 1) / BLOCK, (width + BLOCK - 1) / BLOCK);
    matmul_naive<<<grid, block>>>(M, N, P, width);
}
