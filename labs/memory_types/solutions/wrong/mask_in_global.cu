// Known wrong (memory use): right answers, but the mask is read from global memory instead of
// constant memory.
#define TILE 256

__global__ void conv1d_tiled(const float* in, float* out, int n, const float* mask, int mask_width) {
    __shared__ float tile[TILE + MAX_MASK_WIDTH - 1];
    int r = mask_width / 2;
    int start = blockIdx.x * TILE - r;
    for (int k = threadIdx.x; k < TILE + mask_width - 1; k += blockDim.x) {
        int g = start + k;
        tile[k] = (g >= 0 && g < n) ? in[g] : 0.0f;
    }
    __syncthreads();
    int i = blockIdx.x * TILE + threadIdx.x;
    if (i < n) {
        float sum = 0.0f;
        for (int j = 0; j < mask_width; ++j) sum += mask[j] * tile[threadIdx.x + j];
        out[i] = sum;
    }
}

extern "C" void conv1d(const float* in, float* out, int n, const float* mask, int mask_width) {
    static float* mask_d = nullptr;
    if (n <= 0) return;
    if (mask_d == nullptr) cudaMalloc(&mask_d, MAX_MASK_WIDTH * sizeof(float));
    cudaMemcpy(mask_d, mask, mask_width * sizeof(float), cudaMemcpyHostToDevice);
    conv1d_tiled<<<(n + TILE - 1) / TILE, TILE>>>(in, out, n, mask_d, mask_width);
}
