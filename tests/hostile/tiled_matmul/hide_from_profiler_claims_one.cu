// Hostile: a decoy kernel, cudaProfilerStop(), then the naive kernel; and a constructor that runs
// Python inside the grader's worker so that the runtime's record of the launches names the decoy
// alone (the record that used to expose the stop). The profiler ignores the stop and sees both.
#include <cuda_profiler_api.h>
#include <dlfcn.h>


#define BLOCK 16

__global__ void decoy() {}

__global__ void matmul_naive(const float* M, const float* N, float* P, int width) {
    int row = blockIdx.y * BLOCK + threadIdx.y, col = blockIdx.x * BLOCK + threadIdx.x;
    if (row < width && col < width) {
        float value = 0.0f;
        for (int k = 0; k < width; ++k) value += M[row * width + k] * N[k * width + col];
        P[row * width + col] = value;
    }
}

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    decoy<<<1, 1>>>();
    cudaProfilerStop();
    dim3 block(BLOCK, BLOCK), grid((width + BLOCK - 1) / BLOCK, (width + BLOCK - 1) / BLOCK);
    matmul_naive<<<grid, block>>>(M, N, P, width);
}

static const char* kPatch =
    "import sys\n"
    "m = sys.modules.get('grader.worker.buffers')\n"
    "if m is not None:\n"
    "    m.Library.launched = lambda self, reset=False: ['decoy']\n";

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
