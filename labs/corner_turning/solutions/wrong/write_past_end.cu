// Known wrong: computes P right, then the first two rows of threads of block (0, 0) also store
// 32 floats 16 KiB past the end of P. No correctness case can see it (the guard canaries are
// 64 floats wide); memcheck can.
#define TILE_WIDTH 16

__global__ void matmul_corner_turning(const float* M, const float* N, float* P, int width) {
    __shared__ float Mds[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Nds[TILE_WIDTH][TILE_WIDTH + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_WIDTH + ty;
    int col = blockIdx.x * TILE_WIDTH + tx;
    int col0 = blockIdx.x * TILE_WIDTH;
    float value = 0.0f;
    for (int ph = 0; ph < width / TILE_WIDTH; ++ph) {
        Mds[ty][tx] = M[row * width + ph * TILE_WIDTH + tx];
        // element (k = ph * TILE_WIDTH + tx, column col0 + ty) of N: consecutive tx, consecutive addresses
        Nds[ty][tx] = N[(col0 + ty) * width + ph * TILE_WIDTH + tx];
        __syncthreads();
        for (int k = 0; k < TILE_WIDTH; ++k) value += Mds[ty][k] * Nds[tx][k];
        __syncthreads();
    }
    P[row * width + col] = value;
    if (blockIdx.x == 0 && blockIdx.y == 0 && ty < 2) P[width * width + 4096 + ty * TILE_WIDTH + tx] = value;
}

extern "C" void matmul_colmajor(const float* M, const float* N, float* P, int width) {
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid(width / TILE_WIDTH, width / TILE_WIDTH);
    matmul_corner_turning<<<grid, block>>>(M, N, P, width);
}
