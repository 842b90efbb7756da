// Baseline for corner_turning: one thread per output element, every operand read from global
// memory, no tiling. A warp is 32 consecutive columns of one row of P: M[row * width + k] is one
// address for the whole warp (a broadcast, 1 sector), but N[col * width + k] is 32 addresses
// `width` floats apart in the column-major N: 32 sectors per request, uncoalesced.
#define BLOCK_X 32
#define BLOCK_Y 8

__global__ void matmul_colmajor_naive(const float* M, const float* N, float* P, int width) {
    int row = blockIdx.y * BLOCK_Y + threadIdx.y;
    int col = blockIdx.x * BLOCK_X + threadIdx.x;
    if (row < width && col < width) {
        float value = 0.0f;
        for (int k = 0; k < width; ++k) value += M[row * width + k] * N[col * width + k];
        P[row * width + col] = value;
    }
}

extern "C" void matmul_colmajor(const float* M, const float* N, float* P, int width) {
    dim3 block(BLOCK_X, BLOCK_Y);
    dim3 grid((width + BLOCK_X - 1) / BLOCK_X, (width + BLOCK_Y - 1) / BLOCK_Y);
    matmul_colmajor_naive<<<grid, block>>>(M, N, P, width);
}
