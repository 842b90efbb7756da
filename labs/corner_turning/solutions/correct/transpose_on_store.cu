// Known correct: corner turning done on the store instead of on the read. The tile of N is loaded
// coalesced as in the reference (tx walks k) but stored transposed, Nds[k][c], so the inner
// product reads Nds[k][tx] exactly as in tiled_matmul. The padding now serves the store: thread
// (tx, ty) writes tx * 17 + ty, spread over the banks (one 2-way conflict per store, as the
// reference has); unpadded, tx * 16 + ty would be an 8-way conflict.
#define TILE_WIDTH 16

__global__ void matmul_corner_turning(const float* M, const float* N, float* P, int width) {
    __shared__ float Mds[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Nds[TILE_WIDTH][TILE_WIDTH + 1];  // Nds[k][c]
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_WIDTH + ty;
    int col = blockIdx.x * TILE_WIDTH + tx;
    int col0 = blockIdx.x * TILE_WIDTH;
    float value = 0.0f;
    for (int ph = 0; ph < width / TILE_WIDTH; ++ph) {
        Mds[ty][tx] = M[row * width + ph * TILE_WIDTH + tx];
        Nds[tx][ty] = N[(col0 + ty) * width + ph * TILE_WIDTH + tx];
        __syncthreads();
        for (int k = 0; k < TILE_WIDTH; ++k) value += Mds[ty][k] * Nds[k][tx];
        __syncthreads();
    }
    P[row * width + col] = value;
}

extern "C" void matmul_colmajor(const float* M, const float* N, float* P, int width) {
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid(width / TILE_WIDTH, width / TILE_WIDTH);
    matmul_corner_turning<<<grid, block>>>(M, N, P, width);
}
