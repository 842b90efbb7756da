// The grader's counter replayer: a trusted process with no student host code in it. It loads the
// device code taken out of a student's library (a cubin), launches the recorded kernels itself on
// buffers it owns, and reads the hardware counters with CUPTI's Range Profiler (user ranges, one
// per launch, user replay: every case of a task in one session with the union of their metrics;
// each pass runs each case's sequence, its buffers refilled before it and L2 flushed before each
// launch, as Nsight Compute's --cache-control all). Built by the grader with the toolkit's nvcc
// (grader/checks/counters/replay/service.py); the task format is in grader/checks/counters/replay/task.py.
//
//   replay --answers FD serve: a line {"status": "ready", ...} (or "unavailable") on FD, then tasks on stdin
//   replay --plan CHIP  no GPU needed: for each line of metric names on stdin, "passes N" or "error WHY"
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

static double now_s() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

static std::string quoted(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += (char)c;
        } else if (c < 0x20 || c >= 0x7f) {
            char hex[8];
            snprintf(hex, sizeof hex, "\\u%04x", c);
            out += hex;
        } else {
            out += (char)c;
        }
    }
    return out + "\"";
}

// The answers go to a pipe of their own (--answers FD), never to standard output: a student's kernel
// can printf, and what it prints reaches this process's standard output.
static FILE* g_answers = nullptr;

static void emit(const std::string& line) {
    fputs(line.c_str(), g_answers);
    fputc('\n', g_answers);
    fflush(g_answers);
}

static std::string cupti_error(CUptiResult r) {
    const char* s = "?";
    cuptiGetResultString(r, &s);
    return std::string(s ? s : "?");
}

// ---- metric sets: config images from the Profiler Host API (no GPU needed) --------------------

struct HostSet {
    CUpti_Profiler_Host_Object* host = nullptr;
    std::vector<uint8_t> config;
    size_t passes = 0;
};

#define CP(x, what)                                          \
    do {                                                     \
        CUptiResult r_ = (x);                                \
        if (r_ != CUPTI_SUCCESS) return what + cupti_error(r_); \
    } while (0)

static std::string make_set(const char* chip, const uint8_t* avail, const std::vector<std::string>& names, HostSet& out) {
    std::vector<const char*> metrics;
    for (auto& n : names) metrics.push_back(n.c_str());
    CUpti_Profiler_Host_Initialize_Params ip = {CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
    ip.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    ip.pChipName = chip;
    ip.pCounterAvailabilityImage = avail;
    CP(cuptiProfilerHostInitialize(&ip), "host initialise: ");
    out.host = ip.pHostObject;
    CUpti_Profiler_Host_ConfigAddMetrics_Params ap = {CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
    ap.pHostObject = out.host;
    ap.ppMetricNames = metrics.data();
    ap.numMetrics = metrics.size();
    CP(cuptiProfilerHostConfigAddMetrics(&ap), "metrics not available: ");
    CUpti_Profiler_Host_GetConfigImageSize_Params sp = {CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE};
    sp.pHostObject = out.host;
    CP(cuptiProfilerHostGetConfigImageSize(&sp), "config size: ");
    out.config.assign(sp.configImageSize, 0);
    CUpti_Profiler_Host_GetConfigImage_Params gp = {CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
    gp.pHostObject = out.host;
    gp.configImageSize = out.config.size();
    gp.pConfigImage = out.config.data();
    CP(cuptiProfilerHostGetConfigImage(&gp), "config image: ");
    CUpti_Profiler_Host_GetNumOfPasses_Params np = {CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE};
    np.configImageSize = out.config.size();
    np.pConfigImage = out.config.data();
    CP(cuptiProfilerHostGetNumOfPasses(&np), "passes: ");
    out.passes = np.numOfPasses;
    return "";
}

static void drop_set(HostSet& set) {
    if (set.host == nullptr) return;
    CUpti_Profiler_Host_Deinitialize_Params dp = {CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE};
    dp.pHostObject = set.host;
    cuptiProfilerHostDeinitialize(&dp);
    set.host = nullptr;
}

static int plan_mode(const char* chip) {
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::vector<std::string> names;
        for (std::string m; in >> m;) names.push_back(m);
        HostSet set;
        std::string why = names.empty() ? "no metrics" : make_set(chip, nullptr, names, set);
        drop_set(set);
        if (why.empty()) printf("passes %zu\n", set.passes);
        else printf("error %s\n", why.c_str());
        fflush(stdout);
    }
    return 0;
}

// ---- a task: the module, and cases of buffers and steps ---------------------------------------

// Device memory after each of the replay's own buffers (see allocate()).
static const size_t SLACK_BYTES = size_t(2) << 20;

struct Buf {
    size_t size = 0;
    bool host = false;
    std::string kind;               // input, output, scratch or data
    std::vector<uint8_t> contents;  // what it holds before each pass (empty for scratch)
    void* live = nullptr;           // the kernels' copy (host memory for a host buffer)
    void* pristine = nullptr;       // device buffers: its contents, to refill from
    std::vector<uint8_t> host_copy;
};

struct Patch {
    size_t param, at, buffer, offset;
};

struct Step {
    std::string op, name;
    size_t a = 0, b = 0, c = 0, d = 0, e = 0;
    cudaKernel_t kernel = nullptr;
    dim3 grid, block;
    std::vector<std::vector<uint8_t>> params;
    std::vector<Patch> patches;
};

struct Case {
    std::string id;
    std::vector<std::string> metrics;
    std::vector<Buf> bufs;
    std::vector<Step> steps;
    std::vector<std::pair<size_t, std::string>> outputs;
    std::string bad;  // the first thing wrong with the case's lines
};

struct Global {
    std::string name;
    void* ptr = nullptr;
    std::vector<uint8_t> initial;
};

struct Gpu {
    CUcontext ctx = nullptr;
    std::string chip;
    std::vector<uint8_t> avail;
    std::map<std::string, HostSet> sets;
    void* flush = nullptr;
    size_t flush_bytes = 0;
    int sms = 1;
};

__global__ void grader_l2_flush(const int4* p, size_t n, int* sink) {
    int acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) {
        int4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x7fffffff) *sink = acc;
}

// A read of a buffer four times the L2's size: the next kernel starts with a cold L2 and no dirty
// lines to write back (what the refill left there is written back now, outside any range).
static void flush_l2(Gpu& g) {
    size_t n = g.flush_bytes / sizeof(int4);
    grader_l2_flush<<<4 * g.sms, 512>>>((const int4*)g.flush, n, (int*)g.flush);
}

static bool read_file(const std::string& path, size_t size, std::vector<uint8_t>& out) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return false;
    out.assign(size, 0);
    f.read((char*)out.data(), (std::streamsize)size);
    return (size_t)f.gcount() == size && f.peek() == EOF;
}

// `out` as `size` bytes of `pat` repeated from its start (by doubling copies: a timed case's
// output is hundreds of MB, which a byte at a time took seconds to fill).
static void tile(const std::vector<uint8_t>& pat, size_t size, std::vector<uint8_t>& out) {
    out.resize(size);
    size_t done = std::min(pat.size(), size);
    memcpy(out.data(), pat.data(), done);
    while (done < size) {
        size_t n = std::min(done, size - done);
        memcpy(out.data() + done, out.data(), n);
        done += n;
    }
}

static bool hex_bytes(const std::string& hex, std::vector<uint8_t>& out) {
    if (hex.size() % 2) return false;
    out.clear();
    for (size_t i = 0; i < hex.size(); i += 2) {
        unsigned v;
        if (sscanf(hex.c_str() + i, "%2x", &v) != 1) return false;
        out.push_back((uint8_t)v);
    }
    return true;
}

// One line of a case into `c` (its first problem in c.bad).
static void case_line(Case& c, const std::string& op, std::istringstream& in, cudaLibrary_t lib) {
    auto buffer_ok = [&](size_t k, size_t off, size_t n) { return k < c.bufs.size() && off + n <= c.bufs[k].size && off + n >= off; };
    Step s;
    s.op = op;
    if (op == "metrics") {
        size_t n = 0;
        in >> n;
        for (std::string m; c.metrics.size() < n && in >> m;) c.metrics.push_back(m);
        if (c.metrics.size() != n || n == 0) c.bad = "metrics";
        return;
    }
    if (op == "buffer") {
        Buf b;
        size_t k;
        std::string where, fill, value;
        in >> k >> b.size >> where >> b.kind >> fill >> value;
        b.host = where == "host";
        if (k != c.bufs.size() || !in) c.bad = "buffer";
        else if (fill == "file" && !read_file(value, b.size, b.contents)) c.bad = "input file " + value;
        else if (fill == "pattern") {
            std::vector<uint8_t> pat;
            if (!hex_bytes(value, pat) || pat.empty()) c.bad = "pattern";
            else tile(pat, b.size, b.contents);
        }
        c.bufs.push_back(b);
        return;
    }
    if (op == "output") {
        size_t k;
        std::string path;
        in >> k >> path;
        if (!in || k >= c.bufs.size()) c.bad = "output";
        c.outputs.push_back({k, path});
        return;
    }
    if (op == "alloc" || op == "free") {
        in >> s.a;
        if (!in || s.a >= c.bufs.size() || c.bufs[s.a].kind != "scratch") c.bad = op;
    } else if (op == "memset") {
        in >> s.a >> s.b >> s.c >> s.d;
        if (!in || !buffer_ok(s.a, s.b, s.d) || c.bufs[s.a].host) c.bad = op;
    } else if (op == "copy") {
        in >> s.a >> s.b >> s.c >> s.d >> s.e;
        if (!in || !buffer_ok(s.a, s.b, s.e) || !buffer_ok(s.c, s.d, s.e) || c.bufs[s.a].host) c.bad = op;
    } else if (op == "symbol") {
        in >> s.name >> s.a >> s.c >> s.d >> s.e;
        void* ptr = nullptr;
        size_t bytes = 0;
        if (!in || !buffer_ok(s.c, s.d, s.e) || cudaLibraryGetGlobal(&ptr, &bytes, lib, s.name.c_str()) != cudaSuccess ||
            s.a + s.e > bytes)
            c.bad = "symbol " + s.name;
    } else if (op == "launch") {
        size_t n;
        in >> s.name >> s.grid.x >> s.grid.y >> s.grid.z >> s.block.x >> s.block.y >> s.block.z >> s.a >> n;
        if (!in || cudaLibraryGetKernel(&s.kernel, lib, s.name.c_str()) != cudaSuccess) {
            cudaGetLastError();
            c.bad = "kernel " + s.name;
            return;
        }
        for (size_t i = 0; i < n; ++i) {
            std::string hex;
            std::vector<uint8_t> bytes;
            size_t offset, size;
            in >> hex;
            if (!hex_bytes(hex, bytes) || cudaFuncGetParamInfo((const void*)s.kernel, i, &offset, &size) != cudaSuccess ||
                size != bytes.size()) {
                cudaGetLastError();
                c.bad = "parameters of " + s.name;
                return;
            }
            s.params.push_back(bytes);
        }
        size_t offset, size;
        if (cudaFuncGetParamInfo((const void*)s.kernel, n, &offset, &size) == cudaSuccess) c.bad = "parameters of " + s.name;
        cudaGetLastError();  // (past the last parameter)
        cudaFuncAttributes attr;  // loads the kernel now, not inside the first pass's range
        if (cudaFuncGetAttributes(&attr, (const void*)s.kernel) != cudaSuccess) c.bad = "loading " + s.name;
    } else if (op == "patch") {
        Patch p;
        in >> p.param >> p.at >> p.buffer >> p.offset;
        if (!in || c.steps.empty() || c.steps.back().op != "launch" || p.param >= c.steps.back().params.size() ||
            p.at + 8 > c.steps.back().params[p.param].size() || !buffer_ok(p.buffer, p.offset, 0) || c.bufs[p.buffer].host)
            c.bad = "patch";
        else c.steps.back().patches.push_back(p);
        return;
    } else {
        c.bad = "unknown line " + op;
        return;
    }
    c.steps.push_back(s);
}

static uint8_t* ptr(Case& c, size_t k) { return (uint8_t*)c.bufs[k].live; }

// Everything the sequence may have written, as before the first pass; scratch freed.
static std::string refill(Gpu& g, Case& c, std::vector<Global>& globals) {
    for (auto& v : globals)
        if (cudaMemcpy(v.ptr, v.initial.data(), v.initial.size(), cudaMemcpyHostToDevice) != cudaSuccess) return "restoring " + v.name;
    for (auto& b : c.bufs) {
        if (b.kind == "scratch") {
            if (b.live) cudaFree(b.live);
            b.live = nullptr;
        } else if (b.host) {
            memcpy(b.live, b.contents.data(), b.size);
        } else if (b.size && cudaMemcpy(b.live, b.pristine, b.size, cudaMemcpyDeviceToDevice) != cudaSuccess) {
            return "refilling a buffer";
        }
    }
    return cudaDeviceSynchronize() == cudaSuccess ? "" : "refilling";
}

// Steps [from, to) of one pass: each launch in a range of its own, L2 flushed before it (the first
// launch's flush is the caller's, before the profiler starts: nothing but launches runs in a pass
// of a case whose steps before its first launch run before it).
static std::string run_steps(Gpu& g, Case& c, CUpti_RangeProfiler_Object* obj, cudaLibrary_t lib, size_t from, size_t to,
                             const std::string& prefix = "") {
    size_t launch = 0;
    for (size_t i = from; i < to; ++i) {
        Step& s = c.steps[i];
        cudaError_t err = cudaSuccess;
        if (s.op == "alloc") {
            err = cudaMalloc(&c.bufs[s.a].live, c.bufs[s.a].size ? c.bufs[s.a].size : 1);
        } else if (s.op == "free") {
            err = cudaFree(c.bufs[s.a].live);
            c.bufs[s.a].live = nullptr;
        } else if (s.op == "memset") {
            if (!ptr(c, s.a)) return "memset of memory not allocated";
            err = cudaMemset(ptr(c, s.a) + s.b, (int)s.c, s.d);
        } else if (s.op == "copy") {
            if (!ptr(c, s.a) || !ptr(c, s.c)) return "copy of memory not allocated";
            err = cudaMemcpy(ptr(c, s.a) + s.b, ptr(c, s.c) + s.d, s.e, cudaMemcpyDefault);
        } else if (s.op == "symbol") {
            if (!ptr(c, s.c)) return "a copy to " + s.name + " from memory not allocated";
            void* dst = nullptr;
            size_t bytes = 0;
            err = cudaLibraryGetGlobal(&dst, &bytes, lib, s.name.c_str());
            if (err == cudaSuccess) err = cudaMemcpy((uint8_t*)dst + s.a, ptr(c, s.c) + s.d, s.e, cudaMemcpyDefault);
        } else if (s.op == "launch") {
            std::vector<std::vector<uint8_t>> params = s.params;
            for (auto& p : s.patches) {
                if (!ptr(c, p.buffer)) return "an argument of memory not allocated";
                uint64_t address = (uint64_t)(uintptr_t)(ptr(c, p.buffer) + p.offset);
                memcpy(params[p.param].data() + p.at, &address, 8);
            }
            std::vector<void*> args;
            for (auto& p : params) args.push_back(p.data());
            if (launch > 0) flush_l2(g);
            if (cudaDeviceSynchronize() != cudaSuccess) return "flushing L2";
            std::string range = prefix + std::to_string(launch++);
            CUpti_RangeProfiler_PushRange_Params pu = {CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE};
            pu.pRangeProfilerObject = obj;
            pu.pRangeName = range.c_str();
            CP(cuptiRangeProfilerPushRange(&pu), "push range: ");
            err = cudaLaunchKernel((const void*)s.kernel, s.grid, s.block, args.data(), s.a, 0);
            if (err == cudaSuccess) err = cudaDeviceSynchronize();
            else cudaGetLastError();  // (a launch refused: not the context's loss)
            CUpti_RangeProfiler_PopRange_Params po = {CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE};
            po.pRangeProfilerObject = obj;
            CUptiResult popped = cuptiRangeProfilerPopRange(&po);
            if (err == cudaSuccess && popped != CUPTI_SUCCESS) return "pop range: " + cupti_error(popped);
        }
        if (err != cudaSuccess) return std::string(s.op) + " " + s.name + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
    }
    return "";
}

// The ranges of a session: one per launch, named "CASE-LAUNCH" (CASE: the case's index in the task).
struct Session {
    size_t passes = 0, ranges = 0;
    std::vector<std::vector<double>> values;  // per case, its metrics summed over its launches
};

static size_t launches_of(const Case& c) {
    size_t n = 0;
    for (auto& s : c.steps) n += s.op == "launch";
    return n;
}

// Every case of a task in one profiling session with the union of their metrics (`metrics`, the set
// `set`): each pass runs each case in turn, its buffers and the module's variables refilled, the
// steps before its first launch run, L2 flushed, then its launches, each in a range of its own.
// What runs between ranges (refills, flushes, copies) is in no range and counts for nothing.
static std::string profile(Gpu& g, std::vector<Case*>& cases, std::vector<Global>& globals, cudaLibrary_t lib, HostSet& set,
                           const std::vector<std::string>& metrics, Session& out) {
    size_t launches = 0;
    for (auto* c : cases) launches += launches_of(*c);
    std::vector<const char*> names;
    for (auto& m : metrics) names.push_back(m.c_str());
    CUpti_RangeProfiler_Enable_Params en = {CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE};
    en.ctx = g.ctx;
    CP(cuptiRangeProfilerEnable(&en), "enable: ");
    CUpti_RangeProfiler_Object* obj = en.pRangeProfilerObject;
    std::unique_ptr<CUpti_RangeProfiler_Object, void (*)(CUpti_RangeProfiler_Object*)> enabled(obj, [](CUpti_RangeProfiler_Object* o) {
        CUpti_RangeProfiler_Disable_Params di = {CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE};
        di.pRangeProfilerObject = o;
        cuptiRangeProfilerDisable(&di);
    });
    CUpti_RangeProfiler_GetCounterDataSize_Params gs = {CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE};
    gs.pRangeProfilerObject = obj;
    gs.pMetricNames = names.data();
    gs.numMetrics = names.size();
    gs.maxNumOfRanges = launches;
    gs.maxNumRangeTreeNodes = (uint32_t)launches;
    CP(cuptiRangeProfilerGetCounterDataSize(&gs), "counter data size: ");
    std::vector<uint8_t> data(gs.counterDataSize, 0);
    CUpti_RangeProfiler_CounterDataImage_Initialize_Params ci = {CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE};
    ci.pRangeProfilerObject = obj;
    ci.counterDataSize = data.size();
    ci.pCounterData = data.data();
    CP(cuptiRangeProfilerCounterDataImageInitialize(&ci), "counter data: ");
    CUpti_RangeProfiler_SetConfig_Params sc = {CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE};
    sc.pRangeProfilerObject = obj;
    sc.configSize = set.config.size();
    sc.pConfig = set.config.data();
    sc.counterDataImageSize = data.size();
    sc.pCounterDataImage = data.data();
    sc.range = CUPTI_UserRange;
    sc.replayMode = CUPTI_UserReplay;
    sc.maxRangesPerPass = launches;
    sc.numNestingLevels = 1;
    sc.minNestingLevel = 1;
    sc.passIndex = 0;
    sc.targetNestingLevel = 1;
    CP(cuptiRangeProfilerSetConfig(&sc), "set config: ");
    bool done = false;
    while (!done && out.passes < 64) {
        CUpti_RangeProfiler_Start_Params st = {CUpti_RangeProfiler_Start_Params_STRUCT_SIZE};
        st.pRangeProfilerObject = obj;
        CP(cuptiRangeProfilerStart(&st), "start: ");
        std::string why;
        for (size_t k = 0; k < cases.size() && why.empty(); ++k) {
            Case& c = *cases[k];
            size_t first = 0;
            while (first < c.steps.size() && c.steps[first].op != "launch") ++first;
            why = refill(g, c, globals);
            if (why.empty()) why = run_steps(g, c, obj, lib, 0, first);
            if (why.empty()) {
                flush_l2(g);
                if (cudaDeviceSynchronize() != cudaSuccess) why = "flushing L2";
            }
            if (why.empty()) why = run_steps(g, c, obj, lib, first, c.steps.size(), std::to_string(k) + "-");
        }
        CUpti_RangeProfiler_Stop_Params sp = {CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
        sp.pRangeProfilerObject = obj;
        CUptiResult stopped = cuptiRangeProfilerStop(&sp);
        if (!why.empty()) return why;
        if (stopped != CUPTI_SUCCESS) return "stop: " + cupti_error(stopped);
        out.passes++;
        done = sp.isAllPassSubmitted;
    }
    if (!done) return "not every pass was submitted after 64 passes";
    CUpti_RangeProfiler_DecodeData_Params dd = {CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE};
    dd.pRangeProfilerObject = obj;
    CP(cuptiRangeProfilerDecodeData(&dd), "decode: ");
    CUpti_RangeProfiler_GetCounterDataInfo_Params gi = {CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE};
    gi.pCounterDataImage = data.data();
    gi.counterDataImageSize = data.size();
    CP(cuptiRangeProfilerGetCounterDataInfo(&gi), "counter data info: ");
    out.ranges = gi.numTotalRanges;
    if (out.ranges != launches) return "the profiler kept " + std::to_string(out.ranges) + " ranges of " + std::to_string(launches);
    out.values.assign(cases.size(), std::vector<double>(metrics.size(), 0.0));
    std::vector<size_t> seen(cases.size(), 0);
    for (size_t i = 0; i < out.ranges; ++i) {  // each range's values go to the case its name gives
        CUpti_RangeProfiler_CounterData_GetRangeInfo_Params ri = {CUpti_RangeProfiler_CounterData_GetRangeInfo_Params_STRUCT_SIZE};
        ri.pCounterDataImage = data.data();
        ri.counterDataImageSize = data.size();
        ri.rangeIndex = i;
        ri.rangeDelimiter = "/";
        CP(cuptiRangeProfilerCounterDataGetRangeInfo(&ri), "range info: ");
        char* end = nullptr;
        unsigned long k = ri.rangeName ? strtoul(ri.rangeName, &end, 10) : 0;
        if (!ri.rangeName || end == ri.rangeName || *end != '-' || k >= cases.size()) return "a range the replay did not name";
        seen[k]++;
        std::vector<double> v(metrics.size(), 0.0);
        CUpti_Profiler_Host_EvaluateToGpuValues_Params ep = {CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE};
        ep.pHostObject = set.host;
        ep.pCounterDataImage = data.data();
        ep.counterDataImageSize = data.size();
        ep.rangeIndex = i;
        ep.ppMetricNames = names.data();
        ep.numMetrics = names.size();
        ep.pMetricValues = v.data();
        CP(cuptiProfilerHostEvaluateToGpuValues(&ep), "evaluate: ");
        for (size_t j = 0; j < v.size(); ++j) out.values[k][j] += v[j];
    }
    for (size_t k = 0; k < cases.size(); ++k)
        if (seen[k] != launches_of(*cases[k])) return "the profiler kept other ranges than the replay's launches";
    return "";
}

static std::string allocate(Case& c) {
    for (auto& b : c.bufs) {
        if (b.kind == "scratch") continue;
        if (b.host) {
            b.host_copy = b.contents;
            b.live = b.host_copy.data();
            continue;
        }
        if (!b.size) continue;
        // The worker's buffers (2 MiB granules, guard words after the outputs) take a store a little past an
        // array's end; the replay's must too, or such a kernel faults here and ends the replayer for its lab
        // (the store itself is the sanitizer's and the guard words' to report). The slack is never copied.
        if (cudaMalloc(&b.live, b.size + SLACK_BYTES) != cudaSuccess || cudaMalloc(&b.pristine, b.size) != cudaSuccess)
            return "out of memory";
        if (b.contents.size() == b.size && cudaMemcpy(b.pristine, b.contents.data(), b.size, cudaMemcpyHostToDevice) != cudaSuccess)
            return "filling a buffer";
        std::vector<uint8_t>().swap(b.contents);  // (the device copy is what each pass refills from)
    }
    return "";
}

static void release(Case& c) {
    for (auto& b : c.bufs)
        if (!b.host) {
            if (b.live) cudaFree(b.live);
            if (b.pristine) cudaFree(b.pristine);
            b.live = b.pristine = nullptr;
        }
}

static std::string write_outputs(Case& c) {
    for (auto& [k, path] : c.outputs) {
        Buf& b = c.bufs[k];
        std::vector<uint8_t> out(b.size);
        if (b.size && cudaMemcpy(out.data(), b.live, b.size, cudaMemcpyDefault) != cudaSuccess) return "reading an output";
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f.write((const char*)out.data(), (std::streamsize)out.size());
        if (!f) return "writing " + path;
    }
    return "";
}

// The context is lost after a fault: say so and end (the grader starts a fresh replayer).
static void end_if_lost() {
    cudaGetLastError();  // (an error of a call that failed alone; a lost context fails every call after)
    cudaError_t err = cudaDeviceSynchronize();
    if (err == cudaSuccess) return;
    emit(std::string("{\"status\": \"fatal\", \"reason\": ") + quoted(std::string("the CUDA context is lost: ") + cudaGetErrorName(err)) + "}");
    exit(3);
}

static void case_failed(const Case& c, const std::string& why) {
    emit("{\"case\": " + quoted(c.id) + ", \"status\": \"failed\", \"reason\": " + quoted(why) + "}");
}

static std::string timed_tail(const char* key, double seconds) {
    char tail[64];
    snprintf(tail, sizeof tail, ", \"%s\": %.6f}", key, seconds);
    return tail;
}

// One task: "task ID CUBIN", "global NAME", then cases ("case ID" ... "run"), then "end". Prepared
// (module loaded, inputs read, buffers filled: {"task": ID, "status": "prepared"}), it waits for a
// line "go" (the grader holds the GPU's profiling lock by then), profiles every case in one session
// ({"task": ID, "status": "profiled"}), then writes the outputs and answers each case.
static void run_task(Gpu& g, const std::string& id, const std::string& cubin) {
    double t0 = now_s();
    cudaLibrary_t lib = nullptr;
    cudaError_t loaded = cudaLibraryLoadFromFile(&lib, cubin.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0);
    std::vector<Global> globals;
    std::vector<std::unique_ptr<Case>> cases;
    std::unique_ptr<Case> c;
    std::string line, failed = loaded == cudaSuccess ? "" : std::string("loading the cubin: ") + cudaGetErrorName(loaded);
    cudaGetLastError();
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string op;
        in >> op;
        if (op == "end") break;
        if (!failed.empty()) continue;
        if (op == "global") {
            Global v;
            size_t bytes = 0;
            in >> v.name;
            if (cudaLibraryGetGlobal(&v.ptr, &bytes, lib, v.name.c_str()) != cudaSuccess) {
                cudaGetLastError();
                continue;  // (a variable the code never uses may be gone from the loaded module)
            }
            v.initial.resize(bytes);
            if (cudaMemcpy(v.initial.data(), v.ptr, bytes, cudaMemcpyDeviceToHost) == cudaSuccess) globals.push_back(v);
        } else if (op == "case") {
            c.reset(new Case());
            in >> c->id;
        } else if (op == "run" && c) {
            cases.push_back(std::move(c));
        } else if (c) {
            case_line(*c, op, in, lib);
        }
    }
    if (!failed.empty()) {
        if (lib) cudaLibraryUnload(lib);
        end_if_lost();
        emit("{\"task\": " + quoted(id) + ", \"status\": \"failed\", \"reason\": " + quoted(failed) + "}");
        return;
    }
    std::vector<Case*> good;
    std::vector<std::string> metrics;  // the union of the prepared cases' metrics, in their order
    for (auto& k : cases) {
        if (k->bad.empty() && launches_of(*k) == 0) k->bad = "no launch";
        if (k->bad.empty()) k->bad = allocate(*k);
        if (!k->bad.empty()) {
            case_failed(*k, k->bad);
            release(*k);
            continue;
        }
        good.push_back(k.get());
        for (auto& m : k->metrics)
            if (std::find(metrics.begin(), metrics.end(), m) == metrics.end()) metrics.push_back(m);
    }
    std::string key, why;
    for (auto& m : metrics) key += m + " ";
    if (!good.empty() && !g.sets.count(key)) {
        why = make_set(g.chip.c_str(), g.avail.data(), metrics, g.sets[key]);
        if (!why.empty()) g.sets.erase(key);
    }
    end_if_lost();
    emit("{\"task\": " + quoted(id) + ", \"status\": \"prepared\"" + timed_tail("seconds", now_s() - t0));
    std::string go;
    if (!std::getline(std::cin, go) || go != "go") why = "the grader did not start the profiling";
    double t1 = now_s();
    Session session;
    if (why.empty() && !good.empty()) why = profile(g, good, globals, lib, g.sets[key], metrics, session);
    emit("{\"task\": " + quoted(id) + ", \"status\": \"profiled\"" + timed_tail("seconds", now_s() - t1));
    double profiled = now_s() - t1;
    for (size_t k = 0; k < good.size(); ++k) {
        Case& one = *good[k];
        std::string wrong = why.empty() ? write_outputs(one) : why;
        if (wrong.empty())
            for (double v : session.values[k])
                if (!std::isfinite(v)) wrong = "a metric value that is not finite";
        if (!wrong.empty()) {
            case_failed(one, wrong);
            continue;
        }
        std::string values;
        for (size_t j = 0; j < metrics.size(); ++j) {
            if (std::find(one.metrics.begin(), one.metrics.end(), metrics[j]) == one.metrics.end()) continue;
            char num[64];
            snprintf(num, sizeof num, "%.17g", session.values[k][j]);
            values += (values.empty() ? "" : ", ") + quoted(metrics[j]) + ": " + num;
        }
        char tail[160];  // a case's seconds: its share of the session
        snprintf(tail, sizeof tail, ", \"passes\": %zu, \"planned\": %zu, \"ranges\": %zu, \"seconds\": %.6f}", session.passes,
                 g.sets[key].passes, launches_of(one), profiled / good.size());
        emit("{\"case\": " + quoted(one.id) + ", \"status\": \"ok\", \"values\": {" + values + "}" + tail);
    }
    for (auto& k : cases) release(*k);
    cudaLibraryUnload(lib);
    end_if_lost();
    emit("{\"task\": " + quoted(id) + ", \"status\": \"done\"" + timed_tail("seconds", now_s() - t0));
}

static int unavailable(const std::string& why) {
    emit("{\"status\": \"unavailable\", \"reason\": " + quoted(why) + "}");
    return 0;
}

static int serve() {
    Gpu g;
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(0) != cudaSuccess) return unavailable("no CUDA device");
    typedef CUresult (*get_current_fn)(CUcontext*);
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess || ((get_current_fn)fn)(&g.ctx) != CUDA_SUCCESS)
        return unavailable("no CUDA context");
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    g.sms = prop.multiProcessorCount;
    g.flush_bytes = std::max((size_t)prop.l2CacheSize * 4, (size_t)64 << 20);
    if (cudaMalloc(&g.flush, g.flush_bytes) != cudaSuccess || cudaMemset(g.flush, 1, g.flush_bytes) != cudaSuccess)
        return unavailable("no memory for the L2 flush");
    CUpti_Profiler_Initialize_Params pi = {CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
    CUptiResult r = cuptiProfilerInitialize(&pi);
    if (r != CUPTI_SUCCESS) return unavailable("CUPTI's profiler did not initialise: " + cupti_error(r));
    CUpti_Device_GetChipName_Params cn = {CUpti_Device_GetChipName_Params_STRUCT_SIZE};
    cn.deviceIndex = 0;
    if ((r = cuptiDeviceGetChipName(&cn)) != CUPTI_SUCCESS) return unavailable("no chip name: " + cupti_error(r));
    g.chip = cn.pChipName;
    CUpti_Profiler_GetCounterAvailability_Params ca = {CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE};
    ca.ctx = g.ctx;
    if ((r = cuptiProfilerGetCounterAvailability(&ca)) != CUPTI_SUCCESS)
        return unavailable("the GPU's counters are not available: " + cupti_error(r));
    g.avail.resize(ca.counterAvailabilityImageSize);
    ca.pCounterAvailabilityImage = g.avail.data();
    if ((r = cuptiProfilerGetCounterAvailability(&ca)) != CUPTI_SUCCESS)
        return unavailable("the GPU's counters are not available: " + cupti_error(r));
    emit("{\"status\": \"ready\", \"chip\": " + quoted(g.chip) + ", \"device\": " + quoted(prop.name) + "}");
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string op, id, cubin;
        in >> op >> id >> cubin;
        if (op == "quit") break;
        if (op == "task" && in) run_task(g, id, cubin);
    }
    for (auto& [key, set] : g.sets) drop_set(set);
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 3 && !strcmp(argv[1], "--plan")) return plan_mode(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--answers") && (g_answers = fdopen(atoi(argv[2]), "w")) != nullptr) return serve();
    fprintf(stderr, "usage: %s --answers FD | --plan CHIP\n", argv[0]);
    return 2;
}
