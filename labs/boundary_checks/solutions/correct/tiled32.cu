// Known correct: 32x32 tiles (a different tile size from the reference), with the same boundary
// checks: zero padding for tile elements outside M or N, and a guarded write.
#define TILE_WIDTH 32

__global__ void matmul_rect_tiled(const float* __restrict__ M, const float* __restrict__ N, float* __restrict__ P,
                                  int m, int n, int k) {
    __shared__ float Mds[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Nds[TILE_WIDTH][TILE_WIDTH];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_WIDTH + ty;
    int col = blockIdx.x * TILE_WIDTH + tx;
    float value = 0.0f;
    for (int ph = 0; ph < (n + TILE_WIDTH - 1) / TILE_WIDTH; ++ph) {
        int mc = ph * TILE_WIDTH + tx, nr = ph * TILE_WIDTH + ty;
        Mds[ty][tx] = (row < m && mc < n) ? M[row * n + mc] : 0.0f;
        Nds[ty][tx] = (nr < n && col < k) ? N[nr * k + col] : 0.0f;
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
