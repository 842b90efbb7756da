// Known wrong: 2x2 tiles, four threads a block, and the tile of N loaded with threadIdx.x walking the
// columns: neighbouring threads read addresses `width` floats apart. With so few threads a warp
// issues tiny requests, so sectors per request look fine (about 2) while most of each sector
// fetched is wasted: coalescing is judged by sectors per requested byte. Right answers, slow.
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
        Nds[tx][ty] = N[(col0 + tx) * width + ph * TILE_WIDTH + ty];  // should be Nds[ty][tx] = N[(col0 + ty) * width + ... + tx]
        __syncthreads();
        for (int k = 0; k < TILE_WIDTH; ++k) value += Mds[ty][k] * Nds[tx][k];
        __syncthreads();
    }
    P[row * width + col] = value;
}

extern "C" void matmul_colmajor(const float* M, const float* N, float* P, int width) {
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid(width / TILE_WIDTH, width / TILE_WIDTH);
    matmul_corner_turning<<<grid, block>>>(M, N, P, width);
}
