// Baseline for memory_types: input and mask both read from global memory, no tiling.
#define BLOCK 256

__global__ void conv1d_global(const float* in, float* out, int n, const float* mask, int mask_width) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int r = mask_width / 2;
    float sum = 0.0f;
    for (int j = 0; j < mask_width; ++j) {
        int g = i + j - r;
        if (g >= 0 && g < n) sum += mask[j] * in[g];
    }
    out[i] = sum;
}

extern "C" void conv1d(const float* in, float* out, int n, const float* mask, int mask_width) {
    static float* mask_d = nullptr;  // allocated once: no cudaMalloc inside timed calls
    if (n <= 0) return;
    if (mask_d == nullptr) cudaMalloc(&mask_d, MAX_MASK_WIDTH * sizeof(float));
    cudaMemcpy(mask_d, mask, mask_width * sizeof(float), cudaMemcpyHostToDevice);
    conv1d_global<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(in, out, n, mask_d, mask_width);
}
