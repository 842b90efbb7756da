// Known wrong: a 64x64 block has 4096 threads, more than the 1024 a block may have; the launch
// fails and nothing runs. The grader reports the launch error by name.
#define TILE_WIDTH 64

__global__ void matmul_tiled(const float* M, const float* N, float* P, int width) {
    int row = blockIdx.y * TILE_WIDTH + threadIdx.y;
    int col = blockIdx.x * TILE_WIDTH + threadIdx.x;
    float value = 0.0f;
    for (int k = 0; k < width; ++k) value += M[row * width + k] * N[k * width + col];
    P[row * width + col] = value;
}

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid((width + TILE_WIDTH - 1) / TILE_WIDTH, (width + TILE_WIDTH - 1) / TILE_WIDTH);
    matmul_tiled<<<grid, block>>>(M, N, P, width);
}
