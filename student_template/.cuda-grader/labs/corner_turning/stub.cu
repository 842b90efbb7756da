// corner_turning: compute P = M * N with shared-memory tiles, where N is stored column-major.
//
// M and P are row-major width x width matrices of float (element (row, col) at [row * width + col]);
// N is COLUMN-major (element (row, col) at N[col * width + row]). All three are in device memory,
// and width is a multiple of 16 in every graded case. The grader includes interface.h for you;
// keep the launcher's prototype exactly as it is.
//
// What earns the points (see the lab README for the full table):
//   * correct results for every width (compared with a double-precision oracle);
//   * the kernel stages tiles of M and N in __shared__ memory (checked in the compiled code);
//   * global loads are coalesced: about 4 sectors per load request (hardware counters);
//   * few shared-memory bank conflicts per shared-memory instruction (hardware counters);
//   * it runs much faster than the naive kernel and about as fast as the reference.
//
// Steps:
//   1. Declare a __shared__ tile for M (TILE_WIDTH x TILE_WIDTH) and one for N, padded to
//      TILE_WIDTH x (TILE_WIDTH + 1).
//   2. Load the tile of M as in tiled_matmul. Load the tile of N with corner turning: let
//      threadIdx.x walk k, the dimension that is contiguous in the column-major N, so that
//      consecutive threads read consecutive addresses; then __syncthreads().
//   3. Accumulate the partial dot product from the shared tiles in a register, indexing the tile
//      of N transposed (or store it transposed), then __syncthreads() before the next phase.
//   4. Write the result to P; launch a grid of (width / TILE_WIDTH)^2 blocks of
//      TILE_WIDTH x TILE_WIDTH threads.

#define TILE_WIDTH 16

__global__ void matmul_colmajor_kernel(const float* M, const float* N, float* P, int width) {
    // TODO: your tiled kernel with corner turning
}

extern "C" void matmul_colmajor(const float* M, const float* N, float* P, int width) {
    // TODO: set up the grid and the blocks, then launch matmul_colmajor_kernel
}
