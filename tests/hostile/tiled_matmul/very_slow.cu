// Hostile in effect, if not in intent: the reference solution, with every thread spinning for
// about 20 ms first (as a kernel that prints from every thread would). Right answers; once one
// timed call is 50x slower than the slowest baseline, sampling stops and speed scores zero.
#define TILE 16
#define SPIN_CYCLES 40000000LL

__global__ void matmul_tiled(const float* M, const float* N, float* P, int width) {
    long long start = clock64();
    while (clock64() - start < SPIN_CYCLES) {
    }
    __shared__ float Ms[TILE][TILE], Ns[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y, row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float v = 0.0f;
    for (int ph = 0; ph < width / TILE; ++ph) {
        Ms[ty][tx] = M[row * width + ph * TILE + tx];
        Ns[ty][tx] = N[(ph * TILE + ty) * width + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) v += Ms[ty][k] * Ns[k][tx];
        __syncthreads();
    }
    P[row * width + col] = v;
}

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    matmul_tiled<<<dim3(width / TILE, width / TILE), dim3(TILE, TILE)>>>(M, N, P, width);
}
