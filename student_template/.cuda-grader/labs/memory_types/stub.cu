// memory_types: a 1D convolution that puts each kind of data in the right kind of memory.
//
// out[i] = sum_j mask[j] * in[i + j - mask_width / 2]; terms outside [0, n) count as 0.
// `in` and `out` are device pointers; `mask` is a HOST pointer (mask_width is odd and at most
// MAX_MASK_WIDTH, from the interface header the grader includes for you). Keep the launcher's
// prototype exactly as it is.
//
// What earns the points (see the lab README for the full table):
//   * correct results for every size and mask width, including n = 1 and sizes that are not a
//     multiple of your block size;
//   * the mask lives in __constant__ memory (checked in the compiled code);
//   * a tile of the input, with its halo, is staged in __shared__ memory;
//   * the accumulator stays in a register: no local memory and no spills;
//   * it runs about as fast as the reference.
//
// Steps:
//   1. Declare `__constant__ float mask_c[MAX_MASK_WIDTH];` and copy the mask into it with
//      cudaMemcpyToSymbol in the launcher.
//   2. In the kernel, load TILE + mask_width - 1 input elements (zero outside [0, n)) into a
//      __shared__ array, then __syncthreads().
//   3. Each thread sums mask_c[j] * tile[threadIdx.x + j] in a register and writes out[i].
//   4. Launch ceil(n / TILE) blocks of TILE threads; launch nothing when n is 0.

#define TILE 256

__global__ void conv1d_kernel(const float* in, float* out, int n, int mask_width) {
    // TODO
}

extern "C" void conv1d(const float* in, float* out, int n, const float* mask, int mask_width) {
    // TODO: copy the mask to constant memory, then launch conv1d_kernel
}
