// Known wrong: the tiled_matmul reference unchanged (only the launcher renamed): it reads N as if
// it were row-major, so it computes M * N^T and every case is wrong.
#define TILE_WIDTH 16

__global__ void matmul_tiled(const float* M, const float* N, float* P, int width) {
    __shared__ float Mds[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Nds[TILE_WIDTH][TILE_WIDTH];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_WIDTH + ty;
    int col = blockIdx.x * TILE_WIDTH + tx;
    float value = 0.0f;
    for (int ph = 0; ph < width / TILE_WIDTH; ++ph) {
        Mds[ty][tx] = M[row * width + ph * TILE_WIDTH + tx];
        Nds[ty][tx] = N[(ph * TILE_WIDTH + ty) * width + col];  // N is column-major: N[col * width + row]
        __syncthreads();
        for (int k = 0; k < TILE_WIDTH; ++k) value += Mds[ty][k] * Nds[k][tx];
        __syncthreads();
    }
    P[row * width + col] = value;
}

extern "C" void matmul_colmajor(const float* M, const float* N, float* P, int width) {
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid(width / TILE_WIDTH, width / TILE_WIDTH);
    matmul_tiled<<<grid, block>>>(M, N, P, width);
}
