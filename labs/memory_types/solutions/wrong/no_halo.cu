// Known wrong: the shared tile has no halo, so outputs near a tile's edge miss their neighbours.
#define TILE 256

__constant__ float mask_c[MAX_MASK_WIDTH];

__global__ void conv1d_tiled(const float* in, float* out, int n, int mask_width) {
    __shared__ float tile[TILE];
    int i = blockIdx.x * TILE + threadIdx.x;
    tile[threadIdx.x] = i < n ? in[i] : 0.0f;
    __syncthreads();
    if (i < n) {
        int r = mask_width / 2;
        float sum = 0.0f;
        for (int j = 0; j < mask_width; ++j) {
            int t = (int)threadIdx.x + j - r;
            if (t >= 0 && t < TILE) sum += mask_c[j] * tile[t];
        }
        out[i] = sum;
    }
}

extern "C" void conv1d(const float* in, float* out, int n, const float* mask, int mask_width) {
    if (n <= 0) return;
    cudaMemcpyToSymbol(mask_c, mask, mask_width * sizeof(float));
    conv1d_tiled<<<(n + TILE - 1) / TILE, TILE>>>(in, out, n, mask_width);
}
