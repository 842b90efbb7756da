// Known wrong: the launcher writes to a device pointer from the host, which crashes the process.
#define TILE_WIDTH 16

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    for (int i = 0; i < width * width; ++i) P[i] = 0.0f;  // P is device memory: segfault
}
