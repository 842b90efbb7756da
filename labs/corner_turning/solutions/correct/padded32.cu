// Known correct: 32x32 tiles with bounds checks (a different tile size from the reference). A
// warp is one row of 32 threads: each tile load is 128 contiguous bytes (4 sectors per request),
// and with rows of TILE_WIDTH + 1 floats the transposed read Nds[tx][j] and the store Nds[ty][tx]
// are both conflict-free.
#define TILE_WIDTH 32

__global__ void matmul_corner_turning(const float* __restrict__ M, const float* __restrict__ N, float* __restrict__ P, int width) {
    __shared__ float Mds[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Nds[TILE_WIDTH][TILE_WIDTH + 1];  // Nds[c][k]: column c of the tile of N
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_WIDTH + ty;
    int col = blockIdx.x * TILE_WIDTH + tx;
    int ncol = blockIdx.x * TILE_WIDTH + ty;  // the column of N this thread loads
    float value = 0.0f;
    for (int ph = 0; ph < (width + TILE_WIDTH - 1) / TILE_WIDTH; ++ph) {
        int k = ph * TILE_WIDTH + tx;
        Mds[ty][tx] = (row < width && k < width) ? M[row * width + k] : 0.0f;
        Nds[ty][tx] = (ncol < width && k < width) ? N[ncol * width + k] : 0.0f;
        __syncthreads();
        for (int j = 0; j < TILE_WIDTH; ++j) value += Mds[ty][j] * Nds[tx][j];
        __syncthreads();
    }
    if (row < width && col < width) P[row * width + col] = value;
}

extern "C" void matmul_colmajor(const float* M, const float* N, float* P, int width) {
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid((width + TILE_WIDTH - 1) / TILE_WIDTH, (width + TILE_WIDTH - 1) / TILE_WIDTH);
    matmul_corner_turning<<<grid, block>>>(M, N, P, width);
}
