// Compiled into every graded shared object, beside the student's file, so that it shares the
// student's statically linked CUDA runtime: launch errors are only visible from inside it.
#include <cuda.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern "C" int cudalab_grader_status(char* buf, int len) {
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err != cudaSuccess && buf != NULL && len > 0) {
        snprintf(buf, (size_t)len, "%s: %s", cudaGetErrorName(err), cudaGetErrorString(err));
    }
    return (int)err;
}

extern "C" int cudalab_grader_reset_l2(void) {
    return (int)cudaCtxResetPersistingL2Cache();
}

// While student code runs, exit() and fatal signals report to the grader at once and end the
// process without running CUDA's teardown (which can stall for many seconds after a fault).
static volatile sig_atomic_t g_fd = -1;

static void report(const char* line) {
    if (g_fd >= 0) {
        ssize_t ignored = write(g_fd, line, strlen(line));
        (void)ignored;
    }
}

static void on_exit_trap(int status, void*) {
    if (g_fd < 0) return;
    char line[96];
    snprintf(line, sizeof line, "{\"event\": \"result\", \"status\": \"exited\", \"code\": %d}\n", status);
    report(line);
    _exit(status);
}

static void on_fatal_signal(int sig) {
    if (g_fd >= 0) {
        char line[96] = "{\"event\": \"result\", \"status\": \"crashed\", \"signal\": ";
        size_t n = strlen(line);
        if (sig >= 10) line[n++] = (char)('0' + sig / 10);
        line[n++] = (char)('0' + sig % 10);
        line[n++] = '}';
        line[n++] = '\n';
        line[n] = 0;
        report(line);
        _exit(128 + sig);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

extern "C" void cudalab_grader_arm(int fd) {
    static int installed = 0;
    if (!installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal_signal;
        sigemptyset(&sa.sa_mask);
        const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
        for (int s : sigs) sigaction(s, &sa, NULL);
        installed = 1;
    }
    on_exit(on_exit_trap, NULL);  // registered last, so it runs before the runtime's handlers
    g_fd = fd;
}

extern "C" void cudalab_grader_disarm(void) { g_fd = -1; }

// Which kernels ran: every launch path of the runtime is wrapped at link time
// (-Xlinker --wrap=NAME), so the grader judges the kernels that actually ran, not every kernel
// the file defines. Names are the kernels' symbol names, each recorded once.
static char g_launched[1 << 15];
static size_t g_launched_len = 0;
static int g_unnamed = 0;

typedef CUresult (*kernel_get_name_fn)(const char**, CUkernel);
extern "C" cudaError_t __real_cudaGetDriverEntryPointByVersion(const char*, void**, unsigned int, unsigned long long,
                                                               cudaDriverEntryPointQueryResult*);

static const char* kernel_name(const void* fn) {
    const char* name = NULL;
    if (cudaFuncGetName(&name, fn) == cudaSuccess && name != NULL) return name;
    static kernel_get_name_fn get = NULL;
    static int looked = 0;
    if (!looked) {
        looked = 1;
        cudaDriverEntryPointQueryResult found;
        void* ptr = NULL;
        if (__real_cudaGetDriverEntryPointByVersion("cuKernelGetName", &ptr, 12030, cudaEnableDefault, &found) == cudaSuccess &&
            found == cudaDriverEntryPointSuccess)
            get = (kernel_get_name_fn)ptr;
    }
    name = NULL;
    if (get != NULL && get(&name, (CUkernel)fn) == CUDA_SUCCESS && name != NULL) return name;
    cudaGetLastError();  // a failed lookup must not look like the student's launch error
    return NULL;
}

static void record_launch(const void* fn) {
    const char* name = kernel_name(fn);
    if (name == NULL) {
        g_unnamed++;
        return;
    }
    size_t n = strlen(name);
    for (size_t at = 0; at < g_launched_len;) {  // already recorded?
        size_t len = strlen(g_launched + at);
        if (len == n && memcmp(g_launched + at, name, n) == 0) return;
        at += len + 1;
    }
    if (g_launched_len + n + 1 >= sizeof g_launched) return;
    memcpy(g_launched + g_launched_len, name, n + 1);
    g_launched_len += n + 1;
}

// Names launched since the last reset, separated by newlines, into buf; returns how many
// launches had no name (the grader then judges every kernel).
extern "C" int cudalab_grader_launched(char* buf, int len, int reset) {
    size_t out = 0;
    for (size_t at = 0; at < g_launched_len && buf != NULL && len > 0;) {
        size_t n = strlen(g_launched + at);
        if (out + n + 2 > (size_t)len) break;
        memcpy(buf + out, g_launched + at, n);
        out += n;
        buf[out++] = '\n';
        at += n + 1;
    }
    if (buf != NULL && len > 0) buf[out < (size_t)len ? out : (size_t)len - 1] = 0;
    int unnamed = g_unnamed;
    if (reset) {
        g_launched_len = 0;
        g_unnamed = 0;
    }
    return unnamed;
}

// ---- A record of one call, for the grader's replayer -------------------------------------------
// While the grader asks for it (cudalab_grader_record), every launch, allocation, copy and memset
// the launcher makes is written as one line of text (the format is in grader/checks/counters/replay/record.py),
// so that a process of the grader's can launch the same kernels of this file's device code on
// buffers of its own. What is written is the student's process's claim: the replay's output is
// checked against the oracle before its counters count.
static int g_rec_on = 0;
static char g_rec[1 << 18];
static size_t g_rec_len = 0;
static int g_rec_full = 0;
//: Host data of a copy is written out up to this many bytes (a mask, a table of constants).
#define REC_DATA_BYTES 4096
#define REC_PARAM_BYTES 4096

static void rec(const char* fmt, ...) {
    if (!g_rec_on || g_rec_full) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g_rec + g_rec_len, sizeof g_rec - g_rec_len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof g_rec - g_rec_len - 1) {
        g_rec_full = 1;
        g_rec[g_rec_len] = 0;
        return;
    }
    g_rec_len += (size_t)n;
}

static void rec_hex(const void* data, size_t n) {
    static const char digits[] = "0123456789abcdef";
    const unsigned char* p = (const unsigned char*)data;
    if (!g_rec_on || g_rec_full) return;
    if (n == 0) {
        rec("-");
        return;
    }
    if (g_rec_len + 2 * n + 2 >= sizeof g_rec) {
        g_rec_full = 1;
        return;
    }
    for (size_t i = 0; i < n; ++i) {
        g_rec[g_rec_len++] = digits[p[i] >> 4];
        g_rec[g_rec_len++] = digits[p[i] & 15];
    }
    g_rec[g_rec_len] = 0;
}

// Memory the launcher allocated in an earlier call and still holds (a buffer kept in a static
// pointer between calls, as the course's global-memory baseline keeps its mask). A record made
// after the process's first call would name memory the replay never saw allocated: it is written
// as allocated right before the record's first operation on it (``held_touch``), once per record.
#define HELD_MAX 256
static struct {
    uintptr_t at;
    size_t size;
    int written;  // its malloc line is in the record
} g_held[HELD_MAX];
static int g_nheld = 0;

// (A launcher that allocates from several threads at once may lose an entry: never write out of bounds.)
static void held_add(const void* p, size_t n) {
    int k = g_nheld;
    if (k < 0 || k >= HELD_MAX) return;
    g_held[k].at = (uintptr_t)p;
    g_held[k].size = n;
    g_held[k].written = g_rec_on;
    g_nheld = k + 1;
}

static void held_drop(const void* p) {
    int k = g_nheld;
    for (int i = 0; i < k && i < HELD_MAX; ++i)
        if (g_held[i].at == (uintptr_t)p) {
            g_held[i] = g_held[k - 1];
            g_nheld = k - 1;
            return;
        }
}

static void held_touch(const void* p) {
    uintptr_t a = (uintptr_t)p;
    if (!g_rec_on || a == 0) return;
    for (int i = 0; i < g_nheld && i < HELD_MAX; ++i)
        if (!g_held[i].written && g_held[i].at <= a && a - g_held[i].at < (g_held[i].size ? g_held[i].size : 1)) {
            g_held[i].written = 1;
            rec("malloc %llu %zu\n", (unsigned long long)g_held[i].at, g_held[i].size);
            return;
        }
}

// Turn recording on (and clear the record), or off.
extern "C" void cudalab_grader_record(int on) {
    g_rec_on = 0;
    if (on) {
        g_rec_len = 0;
        g_rec_full = 0;
        g_rec[0] = 0;
        for (int i = 0; i < g_nheld && i < HELD_MAX; ++i) g_held[i].written = 0;
    }
    g_rec_on = on;
}

// The record so far into buf (cut at len - 1); returns its full length, or -1 if it outgrew its
// buffer (the grader then falls back on the profiler).
extern "C" long cudalab_grader_recorded(char* buf, long len) {
    if (buf != NULL && len > 0) {
        size_t n = g_rec_len < (size_t)len - 1 ? g_rec_len : (size_t)len - 1;
        memcpy(buf, g_rec, n);
        buf[n] = 0;
    }
    return g_rec_full ? -1 : (long)g_rec_len;
}

// The runtime's own streams (legacy and per-thread default) are "the default stream".
static int other_stream(cudaStream_t s) {
    return !(s == 0 || s == cudaStreamLegacy || s == cudaStreamPerThread);
}

// __constant__ and __device__ variables by their host shadow, as this file's module registers
// them at load: cudaMemcpyToSymbol is recorded by the device symbol's name.
#define MAX_VARS 256
static struct {
    const void* host;
    const char* name;
    size_t size;
} g_vars[MAX_VARS];
static int g_nvars = 0;

extern "C" void __real___cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int);
extern "C" void __wrap___cudaRegisterVar(void** handle, char* host, char* dev, const char* name, int ext, size_t size,
                                         int constant, int global) {
    if (g_nvars < MAX_VARS) {
        g_vars[g_nvars].host = host;
        g_vars[g_nvars].name = name;
        g_vars[g_nvars].size = size;
        g_nvars++;
    }
    __real___cudaRegisterVar(handle, host, dev, name, ext, size, constant, global);
}

static int is_device(const void* p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static const char* copy_kind(cudaMemcpyKind kind, const void* dst, const void* src) {
    int from_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    int to_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    if (kind == cudaMemcpyDefault) {
        from_dev = is_device(src);
        to_dev = is_device(dst);
    }
    return from_dev ? (to_dev ? "d2d" : "d2h") : (to_dev ? "h2d" : "h2h");
}

static void record_launch_line(const char* how, const void* fn, dim3 g, dim3 b, void** args, size_t shared,
                               cudaStream_t st) {
    if (!g_rec_on) return;
    for (size_t i = 0; args != NULL && i < 1024; ++i) {  // memory held from earlier calls, first
        size_t offset = 0, size = 0;
        if (cudaFuncGetParamInfo(fn, i, &offset, &size) != cudaSuccess) {
            cudaGetLastError();
            break;
        }
        for (size_t at = 0; at + 8 <= size && offset + at < REC_PARAM_BYTES; at += 8) {
            unsigned long long word;
            memcpy(&word, (const char*)args[i] + at, 8);
            held_touch((const void*)(uintptr_t)word);
        }
    }
    const char* name = kernel_name(fn);
    rec("launch %s %s %u %u %u %u %u %u %zu %d", how, name != NULL ? name : "?", g.x, g.y, g.z, b.x, b.y, b.z, shared,
        other_stream(st));
    size_t total = 0;
    for (size_t i = 0; i < 1024; ++i) {
        size_t offset = 0, size = 0;
        if (cudaFuncGetParamInfo(fn, i, &offset, &size) != cudaSuccess) {
            cudaGetLastError();  // past the last parameter
            break;
        }
        total += size;
        if (args == NULL || total > REC_PARAM_BYTES) {
            rec(" ?");
            break;
        }
        rec(" %zu:", size);
        rec_hex(args[i], size);
    }
    rec("\n");
}

// Shared memory filled with a pattern right before each of the student's launches, on the launch's
// own stream (grader/worker/poison.py arms it for a correctness case): a kernel that reads shared
// memory it never wrote finds the pattern, not what ran before. Filled from here, the fill and the
// kernel are queued back to back: filled once before the whole call, another context's kernels
// could run in between, and the GPU clears shared memory when it switches contexts (a histogram
// that never zeroed its bins passed so while Nsight Compute profiled beside it). The fill kernel
// is the worker's own (its CUfunction), launched through the driver: none of it is compiled into
// the student's library, whose code the static checks read.
typedef CUresult (*launch_kernel_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                                     void**, void**);
static launch_kernel_fn g_fill_launch = NULL;
static CUfunction g_fill_fn = NULL;
static unsigned g_fill_blocks = 0, g_fill_threads = 0, g_fill_bytes = 0, g_fill_pattern = 0;

extern "C" int cudalab_grader_fill_shared(void* fn, unsigned blocks, unsigned threads, unsigned bytes, unsigned pattern) {
    if (fn != NULL && g_fill_launch == NULL) {
        cudaDriverEntryPointQueryResult found;
        void* ptr = NULL;
        if (__real_cudaGetDriverEntryPointByVersion("cuLaunchKernel", &ptr, 12000, cudaEnableDefault, &found) != cudaSuccess ||
            found != cudaDriverEntryPointSuccess) {
            cudaGetLastError();
            return -1;
        }
        g_fill_launch = (launch_kernel_fn)ptr;
    }
    g_fill_fn = (CUfunction)fn;  // (NULL: no more fills)
    g_fill_blocks = blocks, g_fill_threads = threads, g_fill_bytes = bytes, g_fill_pattern = pattern;
    return 0;
}

static CUstream stream_of(cudaStream_t st, int per_thread) {
    return st == 0 && per_thread ? CU_STREAM_PER_THREAD : (CUstream)st;
}

static void fill_shared(cudaStream_t st, int per_thread) {
    if (g_fill_fn == NULL) return;
    unsigned pattern = g_fill_pattern, words = g_fill_bytes / 4;
    g_fill_pattern = pattern * 2654435761u + 0x9E3779B9u;  // each launch of the call another pattern
    void* params[] = {&pattern, &words};
    g_fill_launch(g_fill_fn, g_fill_blocks, 1, 1, g_fill_threads, 1, 1, g_fill_bytes, stream_of(st, per_thread), params, NULL);
}

// Did the fill reach the kernel? A context switch between the fill and the kernel (another
// process's kernels running between them) leaves shared memory cleared, and the kernel would read
// zeros again. Right after each launch of a kernel that uses shared memory, the worker's check
// kernel (same grid and size as the fill) counts, into the launch's slot, the words that still
// hold a fill pattern: where the kernel ran after a switch, next to none do, and the worker has
// the grader run the call again (poison.py reads the slots).
static CUfunction g_check_fn = NULL;
static unsigned* g_check_slots = NULL;
static unsigned g_check_count = 0, g_check_used = 0;

extern "C" int cudalab_grader_check_shared(void* fn, void* slots, unsigned count) {
    g_check_fn = (CUfunction)fn;  // (NULL: no more checks)
    g_check_slots = (unsigned*)slots;
    g_check_count = count, g_check_used = 0;
    return 0;
}

extern "C" unsigned cudalab_grader_shared_checks(void) { return g_check_used; }

// Whether kernel `k` reads shared memory at all (static or dynamic): without it there is nothing
// to check. Asked only where no error is pending, so that the question leaves none behind.
static int uses_shared(const void* k, size_t dynamic) {
    if (dynamic > 0) return 1;
    if (cudaPeekAtLastError() != cudaSuccess) return 0;
    struct cudaFuncAttributes attr;
    if (cudaFuncGetAttributes(&attr, k) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return attr.sharedSizeBytes > 0;
}

static void check_shared(const void* k, size_t dynamic, cudaStream_t st, int per_thread) {
    if (g_check_fn == NULL || g_fill_fn == NULL || g_check_used >= g_check_count || !uses_shared(k, dynamic)) return;
    unsigned words = g_fill_bytes / 4;
    unsigned* slot = g_check_slots + g_check_used++;
    void* params[] = {&words, &slot};
    g_fill_launch(g_check_fn, g_fill_blocks, 1, 1, g_fill_threads, 1, 1, g_fill_bytes, stream_of(st, per_thread), params, NULL);
}

// A launch the replayer can repeat: recorded with its grid, block, shared memory and arguments.
#define GRADER_WRAP_REPLAYED(name, kt, per_thread)                                                          \
    extern "C" cudaError_t __real_##name(kt k, dim3 g, dim3 b, void** a, size_t s, cudaStream_t st);       \
    extern "C" cudaError_t __wrap_##name(kt k, dim3 g, dim3 b, void** a, size_t s, cudaStream_t st) {      \
        record_launch((const void*)k);                                                                     \
        record_launch_line("plain", (const void*)k, g, b, a, s, st);                                       \
        fill_shared(st, per_thread);                                                                       \
        cudaError_t e = __real_##name(k, g, b, a, s, st);                                                  \
        if (e == cudaSuccess) check_shared((const void*)k, s, st, per_thread);                             \
        return e;                                                                                          \
    }

GRADER_WRAP_REPLAYED(__cudaLaunchKernel, cudaKernel_t, 0)
GRADER_WRAP_REPLAYED(__cudaLaunchKernel_ptsz, cudaKernel_t, 1)
GRADER_WRAP_REPLAYED(cudaLaunchKernel, const void*, 0)
GRADER_WRAP_REPLAYED(cudaLaunchKernel_ptsz, const void*, 1)

// Launches the replayer does not repeat: recorded, then marked as such.
#define GRADER_WRAP_UNREPLAYED(ret, name, params, args, fn, what) \
    extern "C" ret __real_##name params;                          \
    extern "C" ret __wrap_##name params {                         \
        record_launch((const void*)(fn));                         \
        rec("unsupported %s\n", what);                            \
        return __real_##name args;                                \
    }

GRADER_WRAP_UNREPLAYED(cudaError_t, cudaLaunchCooperativeKernel,
                       (const void* f, dim3 g, dim3 b, void** a, size_t s, cudaStream_t st), (f, g, b, a, s, st), f,
                       "cooperative-launch")
GRADER_WRAP_UNREPLAYED(cudaError_t, cudaLaunchCooperativeKernel_ptsz,
                       (const void* f, dim3 g, dim3 b, void** a, size_t s, cudaStream_t st), (f, g, b, a, s, st), f,
                       "cooperative-launch")
GRADER_WRAP_UNREPLAYED(cudaError_t, cudaLaunchKernelExC, (const cudaLaunchConfig_t* c, const void* f, void** a),
                       (c, f, a), f, "launch-with-attributes")
GRADER_WRAP_UNREPLAYED(cudaError_t, cudaLaunchKernelExC_ptsz, (const cudaLaunchConfig_t* c, const void* f, void** a),
                       (c, f, a), f, "launch-with-attributes")

// Calls that make the recorded sequence incomplete: only marked (no kernel name to record).
#define GRADER_WRAP_UNSUPPORTED(ret, name, params, args, what) \
    extern "C" ret __real_##name params;                       \
    extern "C" ret __wrap_##name params {                      \
        rec("unsupported %s\n", what);                         \
        return __real_##name args;                             \
    }

GRADER_WRAP_UNSUPPORTED(cudaError_t, cudaGraphLaunch, (cudaGraphExec_t g, cudaStream_t s), (g, s), "graph")
GRADER_WRAP_UNSUPPORTED(cudaError_t, cudaGraphLaunch_ptsz, (cudaGraphExec_t g, cudaStream_t s), (g, s), "graph")
GRADER_WRAP_UNSUPPORTED(cudaError_t, cudaStreamBeginCapture, (cudaStream_t s, cudaStreamCaptureMode m), (s, m), "graph")
GRADER_WRAP_UNSUPPORTED(cudaError_t, cudaStreamBeginCapture_ptsz, (cudaStream_t s, cudaStreamCaptureMode m), (s, m),
                        "graph")
GRADER_WRAP_UNSUPPORTED(cudaError_t, cudaMallocManaged, (void** p, size_t n, unsigned int f), (p, n, f),
                        "managed-memory")
GRADER_WRAP_UNSUPPORTED(cudaError_t, cudaMallocAsync, (void** p, size_t n, cudaStream_t s), (p, n, s),
                        "stream-ordered-allocation")
GRADER_WRAP_UNSUPPORTED(cudaError_t, cudaMallocAsync_ptsz, (void** p, size_t n, cudaStream_t s), (p, n, s),
                        "stream-ordered-allocation")
GRADER_WRAP_UNSUPPORTED(cudaError_t, cudaGetDriverEntryPoint,
                        (const char* n, void** f, unsigned long long fl, cudaDriverEntryPointQueryResult* r),
                        (n, f, fl, r), "driver-api")
GRADER_WRAP_UNSUPPORTED(cudaError_t, cudaGetDriverEntryPointByVersion,
                        (const char* n, void** f, unsigned int v, unsigned long long fl,
                         cudaDriverEntryPointQueryResult* r),
                        (n, f, v, fl, r), "driver-api")

// Memory the launcher allocates, fills and copies: recorded in order.
extern "C" cudaError_t __real_cudaMalloc(void** p, size_t n);
extern "C" cudaError_t __wrap_cudaMalloc(void** p, size_t n) {
    cudaError_t e = __real_cudaMalloc(p, n);
    if (e == cudaSuccess && p != NULL) {
        held_add(*p, n);
        rec("malloc %llu %zu\n", (unsigned long long)(uintptr_t)*p, n);
    }
    return e;
}

extern "C" cudaError_t __real_cudaFree(void* p);
extern "C" cudaError_t __wrap_cudaFree(void* p) {
    held_touch(p);
    rec("free %llu\n", (unsigned long long)(uintptr_t)p);
    held_drop(p);
    return __real_cudaFree(p);
}

static void record_memset(void* p, int value, size_t n, cudaStream_t st) {
    held_touch(p);
    rec("memset %llu %d %zu %d\n", (unsigned long long)(uintptr_t)p, value & 0xff, n, other_stream(st));
}

static void record_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t st) {
    if (!g_rec_on) return;
    const char* how = copy_kind(kind, dst, src);
    held_touch(dst);
    held_touch(src);
    rec("copy %s %llu %llu %zu %d ", how, (unsigned long long)(uintptr_t)dst, (unsigned long long)(uintptr_t)src, n,
        other_stream(st));
    if (how[0] == 'h' && n <= REC_DATA_BYTES) rec_hex(src, n);
    else rec("-");
    rec("\n");
}

static void record_symbol(const void* symbol, const void* src, size_t n, size_t offset, cudaMemcpyKind kind,
                          cudaStream_t st) {
    if (!g_rec_on) return;
    const char* name = NULL;
    for (int i = 0; i < g_nvars; ++i)
        if (g_vars[i].host == symbol) name = g_vars[i].name;
    int from_dev = kind == cudaMemcpyDeviceToDevice || (kind == cudaMemcpyDefault && is_device(src));
    if (from_dev) held_touch(src);
    rec("symbol %s %zu %zu %s %llu %d ", name != NULL ? name : "?", offset, n, from_dev ? "d2d" : "h2d",
        (unsigned long long)(uintptr_t)src, other_stream(st));
    if (!from_dev && n <= REC_DATA_BYTES) rec_hex(src, n);
    else rec("-");
    rec("\n");
}

#define GRADER_WRAP_MEMORY(name, params, args, record)   \
    extern "C" cudaError_t __real_##name params;        \
    extern "C" cudaError_t __wrap_##name params {       \
        record;                                         \
        return __real_##name args;                      \
    }

GRADER_WRAP_MEMORY(cudaMemset, (void* p, int v, size_t n), (p, v, n), record_memset(p, v, n, 0))
GRADER_WRAP_MEMORY(cudaMemset_ptds, (void* p, int v, size_t n), (p, v, n), record_memset(p, v, n, 0))
GRADER_WRAP_MEMORY(cudaMemsetAsync, (void* p, int v, size_t n, cudaStream_t s), (p, v, n, s), record_memset(p, v, n, s))
GRADER_WRAP_MEMORY(cudaMemsetAsync_ptsz, (void* p, int v, size_t n, cudaStream_t s), (p, v, n, s),
                   record_memset(p, v, n, s))
GRADER_WRAP_MEMORY(cudaMemcpy, (void* d, const void* s, size_t n, cudaMemcpyKind k), (d, s, n, k),
                   record_copy(d, s, n, k, 0))
GRADER_WRAP_MEMORY(cudaMemcpy_ptds, (void* d, const void* s, size_t n, cudaMemcpyKind k), (d, s, n, k),
                   record_copy(d, s, n, k, 0))
GRADER_WRAP_MEMORY(cudaMemcpyAsync, (void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st),
                   (d, s, n, k, st), record_copy(d, s, n, k, st))
GRADER_WRAP_MEMORY(cudaMemcpyAsync_ptsz, (void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st),
                   (d, s, n, k, st), record_copy(d, s, n, k, st))
GRADER_WRAP_MEMORY(cudaMemcpyToSymbol, (const void* y, const void* s, size_t n, size_t o, cudaMemcpyKind k),
                   (y, s, n, o, k), record_symbol(y, s, n, o, k, 0))
GRADER_WRAP_MEMORY(cudaMemcpyToSymbol_ptds, (const void* y, const void* s, size_t n, size_t o, cudaMemcpyKind k),
                   (y, s, n, o, k), record_symbol(y, s, n, o, k, 0))
GRADER_WRAP_MEMORY(cudaMemcpyToSymbolAsync,
                   (const void* y, const void* s, size_t n, size_t o, cudaMemcpyKind k, cudaStream_t st),
                   (y, s, n, o, k, st), record_symbol(y, s, n, o, k, st))
GRADER_WRAP_MEMORY(cudaMemcpyToSymbolAsync_ptsz,
                   (const void* y, const void* s, size_t n, size_t o, cudaMemcpyKind k, cudaStream_t st),
                   (y, s, n, o, k, st), record_symbol(y, s, n, o, k, st))
