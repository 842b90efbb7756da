// Hostile: a barrier in divergent code. The lower half of each block waits at __syncthreads()
// for the upper half, which waits for a flag the lower half sets only after the barrier: the
// kernel never ends.
#define TILE 16

__global__ void matmul_tiled(const float* M, const float* N, float* P, int width) {
    __shared__ float Ms[TILE][TILE], Ns[TILE][TILE];
    __shared__ volatile int ready;
    int tx = threadIdx.x, ty = threadIdx.y, row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float v = 0.0f;
    for (int ph = 0; ph < width / TILE; ++ph) {
        Ms[ty][tx] = M[row * width + ph * TILE + tx];
        Ns[ty][tx] = N[(ph * TILE + ty) * width + col];
        if (ty < TILE / 2) {
            __syncthreads();
            ready = 12345 + ph;
        } else {
            while (ready != 12345 + ph) {
            }
        }
        for (int k = 0; k < TILE; ++k) v += Ms[ty][k] * Ns[k][tx];
        __syncthreads();
    }
    P[row * width + col] = v;
}

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    matmul_tiled<<<dim3(width / TILE, width / TILE), dim3(TILE, TILE)>>>(M, N, P, width);
}
