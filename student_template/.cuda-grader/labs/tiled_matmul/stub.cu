// tiled_matmul: compute P = M * N with shared-memory tiling.
//
// M, N and P are square, row-major width x width matrices of float in device memory, and width
// is a multiple of TILE_WIDTH in every graded case. The grader includes interface.h for you; keep
// the launcher's prototype exactly as it is.
//
// What earns the points (see the lab README for the full table):
//   * correct results for every width (compared with a double-precision oracle);
//   * the kernel stages tiles of M and N in __shared__ memory (checked in the compiled code);
//   * global load requests drop by about TILE_WIDTH against a naive kernel (hardware counters);
//   * it runs faster than the naive kernel and about as fast as the reference.
//
// Steps:
//   1. Declare two __shared__ float arrays of TILE_WIDTH x TILE_WIDTH, one for a tile of M and
//      one for a tile of N.
//   2. Loop over the width / TILE_WIDTH phases: each thread loads one element of each tile,
//      then __syncthreads() so the whole tile is loaded before anyone reads it.
//   3. Accumulate the partial dot product from the shared tiles in a register, then
//      __syncthreads() again before the next phase overwrites the tiles.
//   4. Write the result to P; launch a grid of (width / TILE_WIDTH)^2 blocks of
//      TILE_WIDTH x TILE_WIDTH threads.

#define TILE_WIDTH 16

__global__ void matmul_kernel(const float* M, const float* N, float* P, int width) {
    // TODO: your tiled kernel
}

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    // TODO: set up the grid and the blocks, then launch matmul_kernel
}
