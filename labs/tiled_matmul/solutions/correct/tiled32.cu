// Known correct: 32x32 tiles (a different tile size from the reference).
#define TILE_WIDTH 32

__global__ void matmul_tiled(const float* __restrict__ M, const float* __restrict__ N, float* __restrict__ P, int width) {
    __shared__ float Mds[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Nds[TILE_WIDTH][TILE_WIDTH];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_WIDTH + ty;
    int col = blockIdx.x * TILE_WIDTH + tx;
    float value = 0.0f;
    for (int ph = 0; ph < (width + TILE_WIDTH - 1) / TILE_WIDTH; ++ph) {
        int mc = ph * TILE_WIDTH + tx, nr = ph * TILE_WIDTH + ty;
        Mds[ty][tx] = (row < width && mc < width) ? M[row * width + mc] : 0.0f;
        Nds[ty][tx] = (nr < width && col < width) ? N[nr * width + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE_WIDTH; ++k) value += Mds[ty][k] * Nds[k][tx];
        __syncthreads();
    }
    if (row < width && col < width) P[row * width + col] = value;
}

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid((width + TILE_WIDTH - 1) / TILE_WIDTH, (width + TILE_WIDTH - 1) / TILE_WIDTH);
    matmul_tiled<<<grid, block>>>(M, N, P, width);
}
