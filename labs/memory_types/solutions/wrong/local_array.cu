// Known wrong (memory use): right answers, but each thread copies its window into a local array
// indexed with a run-time bound, which the compiler must place in local memory.
#define TILE 256

__constant__ float mask_c[MAX_MASK_WIDTH];

__global__ void conv1d_tiled(const float* in, float* out, int n, int mask_width) {
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
        float window[MAX_MASK_WIDTH];
        for (int j = 0; j < mask_width; ++j) window[(j * 2) % mask_width] = tile[threadIdx.x + (j * 2) % mask_width];
        float sum = 0.0f;
        for (int j = 0; j < mask_width; ++j) sum += mask_c[j] * window[j];
        out[i] = sum;
    }
}

extern "C" void conv1d(const float* in, float* out, int n, const float* mask, int mask_width) {
    if (n <= 0) return;
    cudaMemcpyToSymbol(mask_c, mask, mask_width * sizeof(float));
    conv1d_tiled<<<(n + TILE - 1) / TILE, TILE>>>(in, out, n, mask_width);
}
