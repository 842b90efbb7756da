// Known wrong: every check right, but the first two rows of threads of block (0, 0) also store
// 32 floats 16 KiB past the end of P. No correctness case can see it (the guard canaries are
// 64 floats wide); memcheck can.
#define TILE_WIDTH 16

__global__ void matmul_rect_tiled(const float* M, const float* N, float* P, int m, int n, int k) {
    __shared__ float Mds[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Nds[TILE_WIDTH][TILE_WIDTH];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_WIDTH + ty;  // row of P and of M
    int col = blockIdx.x * TILE_WIDTH + tx;  // column of P and of N
    float value = 0.0f;
    for (int ph = 0; ph < (n + TILE_WIDTH - 1) / TILE_WIDTH; ++ph) {
        int mc = ph * TILE_WIDTH + tx;  // column of M this thread loads
        int nr = ph * TILE_WIDTH + ty;  // row of N this thread loads
        Mds[ty][tx] = (row < m && mc < n) ? M[row * n + mc] : 0.0f;
        Nds[ty][tx] = (nr < n && col < k) ? N[nr * k + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE_WIDTH; ++i) value += Mds[ty][i] * Nds[i][tx];
        __syncthreads();
    }
    if (row < m && col < k) P[row * k + col] = value;
    if (blockIdx.x == 0 && blockIdx.y == 0 && ty < 2) P[m * k + 4096 + ty * TILE_WIDTH + tx] = value;
}

extern "C" void matmul_rect(const float* M, const float* N, float* P, int m, int n, int k) {
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid((k + TILE_WIDTH - 1) / TILE_WIDTH, (m + TILE_WIDTH - 1) / TILE_WIDTH);
    matmul_rect_tiled<<<grid, block>>>(M, N, P, m, n, k);
}
