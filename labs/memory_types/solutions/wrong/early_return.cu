// Known wrong: threads past the end of the input return before the barrier, after loading their
// part of the tile. Every number is right, but in the last block not every thread reaches
// __syncthreads(): undefined behaviour that synccheck reports.
#define TILE 128

__constant__ float mask_c[MAX_MASK_WIDTH];

__global__ void conv1d_tiled(const float* __restrict__ in, float* __restrict__ out, int n, int mask_width) {
    __shared__ float tile[TILE + MAX_MASK_WIDTH - 1];
    int r = mask_width / 2;
    int i = blockIdx.x * TILE + threadIdx.x;
    tile[threadIdx.x + r] = i < n ? in[i] : 0.0f;
    if (threadIdx.x < r) {
        int left = i - r, right = i + TILE;
        tile[threadIdx.x] = left >= 0 && left < n ? in[left] : 0.0f;
        tile[threadIdx.x + TILE + r] = right < n ? in[right] : 0.0f;
    }
    if (i >= n) return;
    __syncthreads();
    {
        float sum = 0.0f;
        for (int j = 0; j < mask_width; ++j) sum += mask_c[j] * tile[threadIdx.x + j];
        out[i] = sum;
    }
}

extern "C" void conv1d(const float* in, float* out, int n, const float* mask, int mask_width) {
    if (n <= 0) return;
    cudaMemcpyToSymbol(mask_c, mask, mask_width * sizeof(float));
    conv1d_tiled<<<(n + TILE - 1) / TILE, TILE>>>(in, out, n, mask_width);
}
