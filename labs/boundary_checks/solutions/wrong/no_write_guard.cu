// Known wrong: the loads are checked but the write to P is not. Threads of the last tile
// column (col >= k) store 0 over the first elements of the next row of P, and threads of the
// last tile row (row >= m) store 0 past the end of P. Right only when m and k are multiples of
// the tile width.
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
        Nds[ty][tx] = (nr < n && col < k) ? N[nr * k + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE_WIDTH; ++i) value += Mds[ty][i] * Nds[i][tx];
        __syncthreads();
    }
    P[row * k + col] = value;  // should be guarded by row < m && col < k
}

extern "C" void matmul_rect(const float* M, const float* N, float* P, int m, int n, int k) {
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid((k + TILE_WIDTH - 1) / TILE_WIDTH, (m + TILE_WIDTH - 1) / TILE_WIDTH);
    matmul_rect_tiled<<<grid, block>>>(M, N, P, m, n, k);
}
