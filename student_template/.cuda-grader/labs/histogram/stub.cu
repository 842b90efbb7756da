// histogram: count the lowercase letters of a text into 7 bins of 4 letters each.
//
// bins[0] counts a-d, bins[1] e-h, bins[2] i-l, bins[3] m-p, bins[4] q-t, bins[5] u-x,
// bins[6] y-z: byte c in 'a'..'z' goes to bins[(c - 'a') / 4]. Every other byte (uppercase,
// digits, punctuation, bytes >= 128) is ignored. `text` (n bytes; n may be 0) and `bins`
// (NUM_BINS unsigned ints, zeroed before the call) are device pointers: add your counts to bins.
// The grader includes interface.h for you; keep the launcher's prototype exactly as it is.
//
// What earns the points (see the lab README for the full table):
//   * exact counts on every input, including empty text, text of one repeated letter (every
//     thread hits the same bin), text without letters, uppercase text and random bytes;
//   * atomic operations in the compiled code, and no shared-memory races or barrier misuse
//     (compute-sanitizer);
//   * coalesced loads: consecutive threads read consecutive bytes (hardware counters);
//   * few global atomics: bins privatized in shared memory, merged once per block (counters);
//   * it runs many times faster than atomics straight into the global bins, and about as fast
//     as the reference.
//
// Steps:
//   1. In the kernel, declare `__shared__ unsigned int bins_s[NUM_BINS];`, zero it, __syncthreads().
//   2. Loop over the text with interleaved partitioning: i starts at the thread's global index
//      and advances by the total number of threads (blockDim.x * gridDim.x). For each letter,
//      atomicAdd(&bins_s[bin], 1). Read bytes as unsigned char and check both bounds.
//   3. __syncthreads(), then NUM_BINS threads each atomicAdd one shared bin into bins.
//   4. Launch a fixed number of blocks (a few per SM, fewer for short texts); launch nothing
//      when n is 0 (a grid of zero blocks is a launch error).

#define BLOCK_SIZE 256

__global__ void histogram_kernel(const unsigned char* text, long long n, unsigned int* bins) {
    // TODO: privatized, interleaved histogram
}

extern "C" void histogram(const unsigned char* text, long long n, unsigned int* bins) {
    // TODO: choose the grid, then launch histogram_kernel
}
