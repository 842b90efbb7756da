// Reference solution for corner_turning: 16x16 tiles of M and N in shared memory, the tile of the
// column-major N loaded with corner turning.
//
// Global loads: a warp is two rows (ty) of 16 threads (tx). The tile of M is loaded as in
// tiled_matmul (tx walks a row of M). For the tile of N, tx walks k, the contiguous dimension of
// the column-major N: each half-warp reads 16 consecutive floats of one column, so both tiles
// cost 4 sectors per request.
// Shared memory: Nds[c][k] holds column c of the tile and the inner product reads it transposed,
// Nds[tx][k]. Its rows are padded to TILE_WIDTH + 1 floats so that the 16 columns a warp reads
// lie in 16 different banks (unpadded, tx * 16 + k puts them in 2 banks: an 8-way conflict).
// The one store of the tile per phase keeps a single 2-way conflict (the warp's second column
// wraps around the 32 banks onto the first); the 16 loads per phase are conflict-free.
#define TILE_WIDTH 16

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
