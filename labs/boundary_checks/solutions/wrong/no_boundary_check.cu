// Known wrong: no boundary checks at all. This is the tiled_matmul kernel with the grid and the
// phase count rounded up: partial tiles load elements from the next rows and from past the end
// of M and N, and threads outside P write past its rows and its end. Right only when m, n and k
// are all multiples of the tile width.
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
        Mds[ty][tx] = M[row * n + mc];  // no check: row < m, mc < n
        Nds[ty][tx] = N[nr * k + col];  // no check: nr < n, col < k
        __syncthreads();
        for (int i = 0; i < TILE_WIDTH; ++i) value += Mds[ty][i] * Nds[i][tx];
        __syncthreads();
    }
    P[row * k + col] = value;  // no guard: row < m, col < k
}

extern "C" void matmul_rect(const float* M, const float* N, float* P, int m, int n, int k) {
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid((k + TILE_WIDTH - 1) / TILE_WIDTH, (m + TILE_WIDTH - 1) / TILE_WIDTH);
    matmul_rect_tiled<<<grid, block>>>(M, N, P, m, n, k);
}
