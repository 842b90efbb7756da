// Known-wrong: the global-memory kernel does all the work; a second kernel that reads the mask
// from __constant__ memory and stages a shared tile is compiled but never launched. Placement
// checks judge only the kernels that ran.
#define BLOCK 256
#define DECOY_TILE 256

__constant__ float decoy_mask[MAX_MASK_WIDTH];

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

__global__ void conv1d_decoy(const float* in, float* out, int n, int mask_width) {
    __shared__ float tile[DECOY_TILE];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? in[i] : 0.0f;
    __syncthreads();
    float sum = 0.0f;
    for (int j = 0; j < mask_width; ++j) sum += decoy_mask[j] * tile[(threadIdx.x + j) % DECOY_TILE];
    if (i < n) out[i] = sum;
}

extern "C" void conv1d(const float* in, float* out, int n, const float* mask, int mask_width) {
    static float* mask_d = nullptr;
    if (n <= 0) return;
    if (mask_d == nullptr) cudaMalloc(&mask_d, MAX_MASK_WIDTH * sizeof(float));
    cudaMemcpy(mask_d, mask, mask_width * sizeof(float), cudaMemcpyHostToDevice);
    conv1d_global<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(in, out, n, mask_d, mask_width);
}
