// Baseline for boundary_checks: one thread per element of P, every operand read from global
// memory (accesses to N are coalesced; M is a broadcast within each half-warp), with the bounds
// checked. No tiling.
#define BLOCK 16

__global__ void matmul_rect_naive(const float* M, const float* N, float* P, int m, int n, int k) {
    int row = blockIdx.y * BLOCK + threadIdx.y;
    int col = blockIdx.x * BLOCK + threadIdx.x;
    if (row < m && col < k) {
        float value = 0.0f;
        for (int i = 0; i < n; ++i) value += M[row * n + i] * N[i * k + col];
        P[row * k + col] = value;
    }
}

extern "C" void matmul_rect(const float* M, const float* N, float* P, int m, int n, int k) {
    dim3 block(BLOCK, BLOCK);
    dim3 grid((k + BLOCK - 1) / BLOCK, (m + BLOCK - 1) / BLOCK);
    matmul_rect_naive<<<grid, block>>>(M, N, P, m, n, k);
}
