// Known wrong: corner turning right, 2x2 tiles, and no barrier at all: the four threads of a
// block are one warp and happen to run in step on an H100, so the numbers are right, but
// nothing orders the tile stores before the loads of the other threads (racecheck sees it).
#define TILE_WIDTH 2

__global__ void matmul_corner_turning(const float* M, const float* N, float* P, int width) {
    __shared__ float Mds[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Nds[TILE_WIDTH][TILE_WIDTH + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_WIDTH + ty;
    int col = blockIdx.x * TILE_WIDTH + tx;
    int col0 = blockIdx.x * TILE_WIDTH;
    float value = 0.0f;
    for (int ph = 0; ph < width / TILE_WIDTH; ++ph) {
        Mds[ty][tx] = M[row * width + ph * TILE_WIDTH + tx];
        // element (k = ph * TILE_WIDTH + tx, column col0 + ty) of N: consecutive tx, consecutive addresses
        Nds[ty][tx] = N[(col0 + ty) * width + ph * TILE_WIDTH + tx];
        for (int k = 0; k < TILE_WIDTH; ++k) value += Mds[ty][k] * Nds[tx][k];
    }
    P[row * width + col] = value;
}

extern "C" void matmul_colmajor(const float* M, const float* N, float* P, int width) {
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid(width / TILE_WIDTH, width / TILE_WIDTH);
    matmul_corner_turning<<<grid, block>>>(M, N, P, width);
}
