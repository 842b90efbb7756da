// Known wrong: 32-element tiles in 32-thread blocks and no barrier between loading the tile and
// reading it, on the belief that one warp runs in step. The numbers come out right on an H100,
// but since Volta the threads of a warp are not guaranteed to: racecheck reports the hazards.
#define TILE 32

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
    // no __syncthreads(): a block is one warp, so its threads are taken to run in step
    if (i < n) {
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
