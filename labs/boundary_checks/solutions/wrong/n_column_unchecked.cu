// Known wrong: the load of N checks its row (nr < n) but not its column (col < k). In the last
// tile column, threads with col >= k load elements of the next row of N, and in the last row of
// N up to 15 elements past its end. Column tx of the N tile only reaches threads of that same
// column, which do not write, so every number is exactly right: only memcheck sees the
// out-of-bounds reads (whenever k is not a multiple of the tile width).
#define TILE_WIDTH 16

__global__ void matmul_rect_tiled(const float* M, const float* N, float* P, int m, int n, int k) {
    __shared__ float Mds[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Nds[TILE_WIDTH][TILE_WIDTH];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_WIDTH + ty;
    int col = blockIdx.x * TILE_WIDTH + tx;
    float value = 0.0f;
    for (int ph = 0; ph < (n + TILE_WIDTH - 1) / TILE_WIDTH; ++ph) {
        int mc = ph * TILE_WIDTH + tx;
        int nr = ph * TILE_WIDTH + ty;
        Mds[ty][tx] = (row < m && mc < n) ? M[row * n + mc] : 0.0f;
        Nds[ty][tx] = (nr < n) ? N[nr * k + col] : 0.0f;  // should also check col < k
        __syncthreads();
        for (int i = 0; i < TILE_WIDTH; ++i) value += Mds[ty][i] * Nds[i][tx];
        __syncthreads();
    }
    if (row < m && col < k) P[row * k + col] = value;
}

extern "C" void matmul_rect(const float* M, const float* N, float* P, int m, int n, int k) {
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid((k + TILE_WIDTH - 1) / TILE_WIDTH, (m + TILE_WIDTH - 1) / TILE_WIDTH);
    matmul_rect_tiled<<<grid, block>>>(M, N, P, m, n, k);
}
