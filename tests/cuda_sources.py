"""CUDA sources shared by the CPU tests."""

# A dynamically indexed local array: it lives in local memory (stack frame, LDL/STL).
LOCAL_ARRAY = """\
__global__ void local_array(float* out, int n) {
    float a[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int j = 0; j < 256; ++j) a[(threadIdx.x + j) % 256] = out[j] * j;
    out[i] = a[(i * 7) % 256];
}

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    local_array<<<1, 32>>>(P, width);
}
"""
