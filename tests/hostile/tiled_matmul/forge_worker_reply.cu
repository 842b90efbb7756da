// Hostile: the reference kernel, with a constructor that runs Python inside the grader's worker as
// the library loads and makes the worker answer every call in a shape of its own (the kernels it
// launched as one text). The reply is judged against what the task asks for and is a verdict against the
// submission, not the grader's error.
#include <dlfcn.h>

#define TILE 16

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
    "    m.Library.launched = lambda self, reset=False: 'every kernel there is'\n";

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
    matmul_tiled<<<dim3(width / TILE, width / TILE), dim3(TILE, TILE)>>>(M, N, P, width);
}
