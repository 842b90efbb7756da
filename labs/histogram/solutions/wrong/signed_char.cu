// Wrong: reads the text as signed char and keeps the position in a signed int, so the single
// test pos < 26 bounds it only from above. Every byte below 'a' (spaces, punctuation, digits,
// uppercase) and, read as signed char, every byte >= 128 gives a negative position: (c - 'a') / 4
// is -56..-1 and the atomicAdd writes up to 224 bytes before bins (the guard words catch it),
// except '^', '_' and '`', whose (c - 'a') / 4 truncates to 0 and is counted in bin a-d.
// The seven bins themselves stay right on text without those three. Otherwise this is the
// global-atomics baseline: its stray writes land in the grader's guard words before bins (a
// shared-memory version's would land outside its shared array, with no predictable outcome).
#define BLOCK_SIZE 256
#define BLOCKS_PER_SM 8

__global__ void histogram_global(const unsigned char* text, long long n, unsigned int* bins) {
    const signed char* chars = (const signed char*)text;  // wrong: bytes >= 128 become negative
    long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int pos = chars[i] - 'a';  // wrong: negative below 'a', so pos < 26 is no lower bound
        if (pos < 26) atomicAdd(&bins[pos / 4], 1u);
    }
}

extern "C" void histogram(const unsigned char* text, long long n, unsigned int* bins) {
    if (n <= 0) return;
    static int max_blocks = 0;
    if (max_blocks == 0) {
        int device = 0, sms = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        max_blocks = BLOCKS_PER_SM * (sms > 0 ? sms : 1);
    }
    long long needed = (n + BLOCK_SIZE - 1) / BLOCK_SIZE;
    int blocks = needed < max_blocks ? (int)needed : max_blocks;
    histogram_global<<<blocks, BLOCK_SIZE>>>(text, n, bins);
}
