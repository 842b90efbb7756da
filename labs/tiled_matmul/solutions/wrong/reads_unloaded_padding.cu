// Known wrong: the tiles are padded by one (against bank conflicts) and the inner loop runs one
// step too far, so every product also reads the padding column of Mds and the padding row of
// Nds, which no thread ever loads. Where shared memory happens to hold zeros (the first kernel
// of a fresh process) the extra term is 0 * 0 and the answer is right; the grader fills shared
// memory with a pattern before every correctness call, so the unloaded elements show.
#define TILE_WIDTH 16

__global__ void matmul_tiled(const float* M, const float* N, float* P, int width) {
    __shared__ float Mds[TILE_WIDTH][TILE_WIDTH + 1];
    __shared__ float Nds[TILE_WIDTH + 1][TILE_WIDTH];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_WIDTH + ty;
    int col = blockIdx.x * TILE_WIDTH + tx;
    float value = 0.0f;
    for (int ph = 0; ph < width / TILE_WIDTH; ++ph) {
        Mds[ty][tx] = M[row * width + ph * TILE_WIDTH + tx];
        Nds[ty][tx] = N[(ph * TILE_WIDTH + ty) * width + col];
        __syncthreads();
        for (int k = 0; k <= TILE_WIDTH; ++k) value += Mds[ty][k] * Nds[k][tx];  // one past the tile
        __syncthreads();
    }
    P[row * width + col] = value;
}

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid(width / TILE_WIDTH, width / TILE_WIDTH);
    matmul_tiled<<<grid, block>>>(M, N, P, width);
}
