// Known wrong: the launcher's parameters are not const as the interface header says.
#define TILE_WIDTH 16

__global__ void matmul_tiled(float* M, float* N, float* P, int width) {}

extern "C" void matmul(float* M, float* N, float* P, int width) {
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid(width / TILE_WIDTH, width / TILE_WIDTH);
    matmul_tiled<<<grid, block>>>(M, N, P, width);
}
