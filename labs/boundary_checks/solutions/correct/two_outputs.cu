// Known correct: 16x16 tiles where each thread computes two elements of P, 16 columns apart
// (a block covers 16 rows x 32 columns and loads one tile of M and two tiles of N per phase).
// Each load has its own checks and each of the two writes its own guard.
#define TILE_WIDTH 16

__global__ void matmul_rect_two(const float* M, const float* N, float* P, int m, int n, int k) {
    __shared__ float Mds[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Nds[2][TILE_WIDTH][TILE_WIDTH];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_WIDTH + ty;
    int col0 = blockIdx.x * 2 * TILE_WIDTH + tx;
    int col1 = col0 + TILE_WIDTH;
    float v0 = 0.0f, v1 = 0.0f;
    for (int ph = 0; ph < (n + TILE_WIDTH - 1) / TILE_WIDTH; ++ph) {
        int mc = ph * TILE_WIDTH + tx, nr = ph * TILE_WIDTH + ty;
        Mds[ty][tx] = (row < m && mc < n) ? M[row * n + mc] : 0.0f;
        Nds[0][ty][tx] = (nr < n && col0 < k) ? N[nr * k + col0] : 0.0f;
        Nds[1][ty][tx] = (nr < n && col1 < k) ? N[nr * k + col1] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE_WIDTH; ++i) {
            float a = Mds[ty][i];
            v0 += a * Nds[0][i][tx];
            v1 += a * Nds[1][i][tx];
        }
        __syncthreads();
    }
    if (row < m && col0 < k) P[row * k + col0] = v0;
    if (row < m && col1 < k) P[row * k + col1] = v1;
}

extern "C" void matmul_rect(const float* M, const float* N, float* P, int m, int n, int k) {
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid((k + 2 * TILE_WIDTH - 1) / (2 * TILE_WIDTH), (m + TILE_WIDTH - 1) / TILE_WIDTH);
    matmul_rect_two<<<grid, block>>>(M, N, P, m, n, k);
}
