// Known wrong (memory use): mask in constant memory, but every input element is read straight
// from global memory: no shared-memory tile.
#define BLOCK 256

__constant__ float mask_c[MAX_MASK_WIDTH];

__global__ void conv1d_direct(const float* in, float* out, int n, int mask_width) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int r = mask_width / 2;
    float sum = 0.0f;
    for (int j = 0; j < mask_width; ++j) {
        int g = i + j - r;
        if (g >= 0 && g < n) sum += mask_c[j] * in[g];
    }
    out[i] = sum;
}

extern "C" void conv1d(const float* in, float* out, int n, const float* mask, int mask_width) {
    if (n <= 0) return;
    cudaMemcpyToSymbol(mask_c, mask, mask_width * sizeof(float));
    conv1d_direct<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(in, out, n, mask_width);
}
