//===- Cuda.cpp - CUDA driver, device memory, MLIR's mgpu* ABI --*- C++ -*-===//
//
// Compiled GPU steps call MLIR's GPU runtime functions (mgpuModuleLoad,
// mgpuLaunchKernel, mgpuMemAlloc, ...), which upstream's wrappers implement
// by printing errors and carrying on. Here every failure is kept (sticky):
// the step's collectives fail with it, and drivers check it after a step.
// All kernels, copies and allocations run on one compute stream; device
// memory comes from the driver's stream-ordered pool, kept across steps.
//
//===----------------------------------------------------------------------===//

#include "Cuda.h"

#include "Comm.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>

#define DISTOPT_RT_EXPORT extern "C" __attribute__((visibility("default")))

namespace distopt::rt::cuda {
namespace {

std::mutex mutex;      // initialization
std::mutex errorMutex; // the sticky error's text
Driver loaded;
bool initialized = false;
bool ready = false;
// Read without a lock on every GPU call: set once initialized (and whether
// it worked is then fixed), and at the first failure.
std::atomic<bool> initializedFlag{false};
std::atomic<bool> failedFlag{false};
int deviceIndex = -1;
CUstream stream = nullptr;
CUcontext context = nullptr;
std::string sticky;
std::atomic<uint64_t> launchCount{0};

/// The device for this process: `requested`, else DISTOPT_RT_CUDA_DEVICE,
/// else the launcher's local rank modulo the device count.
int chooseDevice(int requested, int count) {
  if (requested >= 0)
    return requested;
  if (const char *env = std::getenv("DISTOPT_RT_CUDA_DEVICE"))
    return std::atoi(env);
  for (const char *var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                          "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char *env = std::getenv(var))
      return count > 0 ? std::atoi(env) % count : 0;
  return 0;
}

template <typename F> bool resolve(void *library, const char *name, F &fn) {
  fn = reinterpret_cast<F>(dlsym(library, name));
  if (!fn)
    setError(std::string("CUDA: the driver has no ") + name);
  return fn != nullptr;
}

/// Loads the driver and makes the device's primary context current. Called
/// with `mutex` held.
void initialize(int requested) {
  initialized = true;
  void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *why = dlerror();
    setError(std::string("CUDA: no driver (libcuda.so.1): ") +
             (why ? why : "not found"));
    return;
  }
  Driver &d = loaded;
  // The _v2 names are what cuda.h maps these calls to.
  if (!resolve(library, "cuInit", d.cuInit) ||
      !resolve(library, "cuGetErrorString", d.cuGetErrorString) ||
      !resolve(library, "cuDeviceGetCount", d.cuDeviceGetCount) ||
      !resolve(library, "cuDeviceGet", d.cuDeviceGet) ||
      !resolve(library, "cuDevicePrimaryCtxRetain",
               d.cuDevicePrimaryCtxRetain) ||
      !resolve(library, "cuCtxSetCurrent", d.cuCtxSetCurrent) ||
      !resolve(library, "cuModuleLoadData", d.cuModuleLoadData) ||
      !resolve(library, "cuModuleUnload", d.cuModuleUnload) ||
      !resolve(library, "cuModuleGetFunction", d.cuModuleGetFunction) ||
      !resolve(library, "cuLaunchKernel", d.cuLaunchKernel) ||
      !resolve(library, "cuStreamCreate", d.cuStreamCreate) ||
      !resolve(library, "cuStreamDestroy_v2", d.cuStreamDestroy) ||
      !resolve(library, "cuStreamSynchronize", d.cuStreamSynchronize) ||
      !resolve(library, "cuStreamQuery", d.cuStreamQuery) ||
      !resolve(library, "cuStreamWaitEvent", d.cuStreamWaitEvent) ||
      !resolve(library, "cuEventCreate", d.cuEventCreate) ||
      !resolve(library, "cuEventDestroy_v2", d.cuEventDestroy) ||
      !resolve(library, "cuEventRecord", d.cuEventRecord) ||
      !resolve(library, "cuEventQuery", d.cuEventQuery) ||
      !resolve(library, "cuEventSynchronize", d.cuEventSynchronize) ||
      !resolve(library, "cuMemAllocAsync", d.cuMemAllocAsync) ||
      !resolve(library, "cuMemFreeAsync", d.cuMemFreeAsync) ||
      !resolve(library, "cuMemcpyAsync", d.cuMemcpyAsync) ||
      !resolve(library, "cuMemsetD32Async", d.cuMemsetD32Async) ||
      !resolve(library, "cuMemsetD16Async", d.cuMemsetD16Async) ||
      !resolve(library, "cuDeviceGetDefaultMemPool",
               d.cuDeviceGetDefaultMemPool) ||
      !resolve(library, "cuMemPoolSetAttribute", d.cuMemPoolSetAttribute))
    return;
  int count = 0;
  if (!check(d.cuInit(0), "cuInit") ||
      !check(d.cuDeviceGetCount(&count), "cuDeviceGetCount"))
    return;
  if (count == 0) {
    setError("CUDA: the driver sees no device");
    return;
  }
  int index = chooseDevice(requested, count);
  if (index < 0 || index >= count) {
    setError("CUDA: device " + std::to_string(index) + " requested, " +
             std::to_string(count) + " present");
    return;
  }
  CUdevice device;
  CUmemoryPool pool;
  // Freed blocks stay in the pool for the next step (no release to the OS
  // at each synchronization).
  uint64_t keepAll = UINT64_MAX;
  if (!check(d.cuDeviceGet(&device, index), "cuDeviceGet") ||
      !check(d.cuDevicePrimaryCtxRetain(&context, device),
             "cuDevicePrimaryCtxRetain") ||
      !check(d.cuCtxSetCurrent(context), "cuCtxSetCurrent") ||
      !check(d.cuStreamCreate(&stream, kStreamNonBlocking), "cuStreamCreate") ||
      !check(d.cuDeviceGetDefaultMemPool(&pool, device),
             "cuDeviceGetDefaultMemPool") ||
      !check(d.cuMemPoolSetAttribute(pool, kMemPoolReleaseThreshold, &keepAll),
             "cuMemPoolSetAttribute"))
    return;
  deviceIndex = index;
  ready = true;
}

} // namespace

bool check(CUresult result, const char *call) {
  if (result == kSuccess)
    return true;
  const char *text = nullptr;
  if (loaded.cuGetErrorString)
    loaded.cuGetErrorString(result, &text);
  setError("CUDA device " + std::to_string(deviceIndex) + ": " + call +
           " failed: " + (text ? text : "error " + std::to_string(result)));
  return false;
}

void setError(const std::string &message) {
  std::lock_guard<std::mutex> lock(errorMutex);
  if (sticky.empty())
    sticky = message;
  failedFlag.store(true, std::memory_order_release);
}

/// Initializes once (with `mutex` held by the caller).
void initializeOnce(int requested) {
  if (initialized)
    return;
  initialize(requested);
  if (!ready)
    failedFlag.store(true, std::memory_order_release);
  initializedFlag.store(true, std::memory_order_release);
}

const Driver *driver() {
  if (!initializedFlag.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(mutex);
    initializeOnce(-1);
  }
  return failedFlag.load(std::memory_order_acquire) ? nullptr : &loaded;
}

CUstream computeStream() { return stream; }

bool bindContext() {
  const Driver *d = driver();
  return d && check(d->cuCtxSetCurrent(context), "cuCtxSetCurrent");
}
int device() { return deviceIndex; }
bool failed() { return failedFlag.load(std::memory_order_acquire); }
std::string stickyError() {
  std::lock_guard<std::mutex> lock(errorMutex);
  return sticky;
}

} // namespace distopt::rt::cuda

using namespace distopt::rt;
using namespace distopt::rt::cuda;

namespace {

distopt_rt_status gpuStatus(const char *call) {
  if (!failed())
    return DISTOPT_RT_OK;
  return fail(ready ? DISTOPT_RT_BACKEND_ERROR : DISTOPT_RT_UNAVAILABLE,
              std::string(call) + ": " + stickyError());
}

CUdeviceptr address(const void *ptr) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr));
}

/// A step's GPU module, as its library's constructor registers it: loaded
/// into the device's context at the first kernel lookup, so that opening a
/// step (to describe it, or before the program picks its device) does not
/// start CUDA.
struct LazyModule {
  explicit LazyModule(const void *image) : image(image) {}
  const void *image;
  std::once_flag once;
  CUmodule module = nullptr;
};

/// Streams other than the compute stream were created by mgpuStreamCreate's
/// callers only if they asked for more; compiled steps use one.
CUstream asStream(void *s) { return s ? static_cast<CUstream>(s) : stream; }

} // namespace

extern "C" {

distopt_rt_status distopt_rt_cuda_init(int64_t device) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!initialized)
      initializeOnce(static_cast<int>(device));
    else if (device >= 0 && ready && device != deviceIndex)
      return fail(DISTOPT_RT_INVALID_ARGUMENT,
                  "distopt_rt_cuda_init: device " + std::to_string(device) +
                      " requested after device " + std::to_string(deviceIndex) +
                      " was initialized");
  }
  return gpuStatus("distopt_rt_cuda_init");
}

distopt_rt_status distopt_rt_cuda_check(void) { return gpuStatus("CUDA"); }

distopt_rt_status distopt_rt_cuda_alloc(uint64_t bytes, void **ptr) {
  if (!ptr)
    return fail(DISTOPT_RT_INVALID_ARGUMENT,
                "distopt_rt_cuda_alloc: null output pointer");
  *ptr = nullptr;
  const Driver *d = driver();
  if (!d)
    return gpuStatus("distopt_rt_cuda_alloc");
  CUdeviceptr device = 0;
  if (bytes > 0 &&
      check(d->cuMemAllocAsync(&device, bytes, stream), "cuMemAllocAsync"))
    *ptr = reinterpret_cast<void *>(static_cast<uintptr_t>(device));
  return gpuStatus("distopt_rt_cuda_alloc");
}

distopt_rt_status distopt_rt_cuda_free(void *ptr) {
  const Driver *d = driver();
  if (d && ptr)
    check(d->cuMemFreeAsync(address(ptr), stream), "cuMemFreeAsync");
  return gpuStatus("distopt_rt_cuda_free");
}

distopt_rt_status distopt_rt_cuda_copy(void *dst, const void *src,
                                       uint64_t bytes) {
  const Driver *d = driver();
  if (d && bytes > 0 &&
      check(d->cuMemcpyAsync(address(dst), address(src), bytes, stream),
            "cuMemcpyAsync"))
    check(d->cuStreamSynchronize(stream), "cuStreamSynchronize");
  return gpuStatus("distopt_rt_cuda_copy");
}

distopt_rt_status distopt_rt_cuda_synchronize(void) {
  const Driver *d = driver();
  if (d)
    check(d->cuStreamSynchronize(stream), "cuStreamSynchronize");
  return gpuStatus("distopt_rt_cuda_synchronize");
}

uint64_t distopt_rt_cuda_launches(void) {
  return launchCount.load(std::memory_order_relaxed);
}

// MLIR's GPU runtime functions, as gpu-to-llvm and the gpu.binary
// translation call them.

DISTOPT_RT_EXPORT void *mgpuModuleLoad(void *data, size_t /*size*/) {
  return new LazyModule(data);
}

/// PTX: the driver compiles it for the device (with its own optimization).
DISTOPT_RT_EXPORT void *mgpuModuleLoadJIT(void *data, int /*optLevel*/) {
  return mgpuModuleLoad(data, 0);
}

DISTOPT_RT_EXPORT void mgpuModuleUnload(void *module) {
  auto *lazy = static_cast<LazyModule *>(module);
  if (!lazy)
    return;
  // Only a module that was loaded needs the driver.
  if (lazy->module)
    if (const Driver *d = driver())
      check(d->cuModuleUnload(lazy->module), "cuModuleUnload");
  delete lazy;
}

DISTOPT_RT_EXPORT void *mgpuModuleGetFunction(void *module, const char *name) {
  const Driver *d = driver();
  if (!d)
    return nullptr;
  // A step's module is registered by its library's constructor: without it
  // no kernel could run, and nothing else would say so.
  auto *lazy = static_cast<LazyModule *>(module);
  if (!lazy) {
    setError(std::string("CUDA: kernel ") + name +
             " requested before its module was loaded (the step library's "
             "constructors did not run)");
    return nullptr;
  }
  std::call_once(lazy->once, [&] {
    check(d->cuModuleLoadData(&lazy->module, lazy->image), "cuModuleLoadData");
  });
  CUfunction function = nullptr;
  if (lazy->module)
    check(d->cuModuleGetFunction(&function, lazy->module, name),
          ("cuModuleGetFunction(" + std::string(name) + ")").c_str());
  return function;
}

DISTOPT_RT_EXPORT void mgpuLaunchKernel(void *function, intptr_t gridX,
                                        intptr_t gridY, intptr_t gridZ,
                                        intptr_t blockX, intptr_t blockY,
                                        intptr_t blockZ, int32_t smem, void *s,
                                        void **params, void **extra,
                                        size_t /*paramsCount*/) {
  const Driver *d = driver();
  if (!d)
    return;
  if (!function) {
    setError("CUDA: a kernel launch without a kernel (its module or "
             "function failed to load)");
    return;
  }
  // An empty tensor's loop has no iterations.
  if (gridX == 0 || gridY == 0 || gridZ == 0)
    return;
  launchCount.fetch_add(1, std::memory_order_relaxed);
  check(d->cuLaunchKernel(static_cast<CUfunction>(function), gridX, gridY,
                          gridZ, blockX, blockY, blockZ, smem, asStream(s),
                          params, extra),
        "cuLaunchKernel");
}

DISTOPT_RT_EXPORT void *mgpuStreamCreate() {
  driver();
  return stream;
}

DISTOPT_RT_EXPORT void mgpuStreamDestroy(void *s) {
  const Driver *d = driver();
  if (d && s && s != stream)
    check(d->cuStreamDestroy(static_cast<CUstream>(s)), "cuStreamDestroy");
}

DISTOPT_RT_EXPORT void mgpuStreamSynchronize(void *s) {
  const Driver *d = driver();
  if (d)
    check(d->cuStreamSynchronize(asStream(s)), "cuStreamSynchronize");
}

DISTOPT_RT_EXPORT void mgpuStreamWaitEvent(void *s, void *event) {
  const Driver *d = driver();
  if (d)
    check(d->cuStreamWaitEvent(asStream(s), static_cast<CUevent>(event), 0),
          "cuStreamWaitEvent");
}

DISTOPT_RT_EXPORT void *mgpuEventCreate() {
  const Driver *d = driver();
  CUevent event = nullptr;
  if (d)
    check(d->cuEventCreate(&event, kEventDisableTiming), "cuEventCreate");
  return event;
}

DISTOPT_RT_EXPORT void mgpuEventDestroy(void *event) {
  const Driver *d = driver();
  if (d && event)
    check(d->cuEventDestroy(static_cast<CUevent>(event)), "cuEventDestroy");
}

DISTOPT_RT_EXPORT void mgpuEventSynchronize(void *event) {
  const Driver *d = driver();
  if (d && event)
    check(d->cuEventSynchronize(static_cast<CUevent>(event)),
          "cuEventSynchronize");
}

DISTOPT_RT_EXPORT void mgpuEventRecord(void *event, void *s) {
  const Driver *d = driver();
  if (d && event)
    check(d->cuEventRecord(static_cast<CUevent>(event), asStream(s)),
          "cuEventRecord");
}

DISTOPT_RT_EXPORT void *mgpuMemAlloc(uint64_t bytes, void *s, bool hostShared) {
  const Driver *d = driver();
  if (!d || bytes == 0)
    return nullptr;
  if (hostShared) {
    setError("CUDA: host-shared allocations (gpu.alloc host_shared) are not "
             "supported");
    return nullptr;
  }
  CUdeviceptr ptr = 0;
  check(d->cuMemAllocAsync(&ptr, bytes, asStream(s)), "cuMemAllocAsync");
  return reinterpret_cast<void *>(static_cast<uintptr_t>(ptr));
}

DISTOPT_RT_EXPORT void mgpuMemFree(void *ptr, void *s) {
  const Driver *d = driver();
  if (d && ptr)
    check(d->cuMemFreeAsync(address(ptr), asStream(s)), "cuMemFreeAsync");
}

DISTOPT_RT_EXPORT void mgpuMemcpy(void *dst, void *src, size_t bytes, void *s) {
  const Driver *d = driver();
  if (d && bytes > 0)
    check(d->cuMemcpyAsync(address(dst), address(src), bytes, asStream(s)),
          "cuMemcpyAsync");
}

DISTOPT_RT_EXPORT void mgpuMemset32(void *dst, unsigned value, size_t count,
                                    void *s) {
  const Driver *d = driver();
  if (d && count > 0)
    check(d->cuMemsetD32Async(address(dst), value, count, asStream(s)),
          "cuMemsetD32Async");
}

DISTOPT_RT_EXPORT void mgpuMemset16(void *dst, unsigned short value,
                                    size_t count, void *s) {
  const Driver *d = driver();
  if (d && count > 0)
    check(d->cuMemsetD16Async(address(dst), value, count, asStream(s)),
          "cuMemsetD16Async");
}

DISTOPT_RT_EXPORT void mgpuSetDefaultDevice(int32_t device) {
  distopt_rt_cuda_init(device);
}

} // extern "C"
