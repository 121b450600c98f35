//===- Cuda.h - the CUDA driver, loaded at run time -------------*- C++ -*-===//
//
// The runtime builds and its CPU half runs without CUDA: the driver
// (libcuda.so.1) is opened on first use. GPU failures are sticky: the first
// one is kept with the call that failed, later GPU calls do nothing, and
// collectives and distopt_rt_cuda_check report it.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_RT_CUDA_H
#define DISTOPT_RT_CUDA_H

#include "distopt_rt.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace distopt::rt::cuda {

// The few driver API types the runtime uses (cuda.h is not needed to build).
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;
using CUmemoryPool = struct CUmemPoolHandle_st *;

// Driver API values used by the runtime (from cuda.h).
constexpr CUresult kSuccess = 0;
constexpr CUresult kNotReady = 600;         // CUDA_ERROR_NOT_READY
constexpr unsigned kStreamNonBlocking = 1;  // CU_STREAM_NON_BLOCKING
constexpr unsigned kEventDisableTiming = 2; // CU_EVENT_DISABLE_TIMING
constexpr int kMemPoolReleaseThreshold = 4; // CU_MEMPOOL_ATTR_RELEASE_...

/// The driver's entry points, null until loaded.
struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuModuleLoadData)(CUmodule *, const void *);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, CUstream, void **,
                             void **);
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamQuery)(CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
  CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
  CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*cuMemsetD16Async)(CUdeviceptr, unsigned short, size_t, CUstream);
  CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
  CUresult (*cuMemPoolSetAttribute)(CUmemoryPool, int, void *);
};

/// The loaded driver with a current context on the run's device, or null
/// with the sticky error set. Initializes on first use.
const Driver *driver();
/// The stream compiled kernels, copies and allocations run on.
CUstream computeStream();
/// Makes the run's context current on the calling thread (contexts are per
/// thread; the communicator's worker thread needs it too).
bool bindContext();
/// The device of this process (-1 before initialization).
int device();
/// Whether a GPU call failed; its message is kept in stickyError().
bool failed();
std::string stickyError();
/// Checks `result` of `call`; on failure records the sticky error.
bool check(CUresult result, const char *call);
/// Records a sticky error that is not a driver result.
void setError(const std::string &message);

} // namespace distopt::rt::cuda

#endif // DISTOPT_RT_CUDA_H
