// boundary_checks: compute P = M * N for matrices of any size, with shared-memory tiles and
// boundary checks.
//
// M is m x n, N is n x k and P is m x k, all row-major float in device memory; m, n and k are
// any sizes >= 1 and usually not multiples of TILE_WIDTH. The grader includes interface.h for
// you; keep the launcher's prototype exactly as it is.
//
// What earns the points (see the lab README for the full table):
//   * correct results for every shape, from 1 x 1 x 1 to thin and odd-sized matrices (compared
//     with a double-precision oracle; canaries around P catch writes outside it);
//   * no out-of-bounds access at all, checked with compute-sanitizer memcheck on a small shape;
//   * the kernel stages tiles of M and N in __shared__ memory (checked in the compiled code);
//   * global load requests drop by about TILE_WIDTH against a naive kernel (hardware counters);
//   * it runs faster than the naive kernel and about as fast as the reference.
//
// Steps:
//   1. Declare two __shared__ float arrays of TILE_WIDTH x TILE_WIDTH, one for a tile of M and
//      one for a tile of N.
//   2. Loop over ceil(n / TILE_WIDTH) phases. Each thread loads one element of each tile:
//      M[row][ph * TILE_WIDTH + tx] only if row < m and that column < n, and
//      N[ph * TILE_WIDTH + ty][col] only if that row < n and col < k; otherwise it stores 0.
//      Then __syncthreads().
//   3. Accumulate the partial dot product from the shared tiles in a register (the zeros make
//      a partial tile add nothing), then __syncthreads() before the next phase.
//   4. Write P[row][col] only if row < m and col < k. Launch a grid of
//      ceil(k / TILE_WIDTH) x ceil(m / TILE_WIDTH) blocks of TILE_WIDTH x TILE_WIDTH threads.

#define TILE_WIDTH 16

__global__ void matmul_rect_kernel(const float* M, const float* N, float* P, int m, int n, int k) {
    // TODO: your tiled kernel with boundary checks
}

extern "C" void matmul_rect(const float* M, const float* N, float* P, int m, int n, int k) {
    // TODO: set up the grid and the blocks, then launch matmul_rect_kernel
}
