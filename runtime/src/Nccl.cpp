//===- Nccl.cpp - collectives on device buffers through NCCL ----*- C++ -*-===//
//
// libnccl.so.2 is opened at run time (the runtime builds without it). The
// communicator is non-blocking, so that no call can hang: every collective
// is enqueued on a communication stream that first waits for the compute
// stream, then polled until it completes, NCCL reports an error, or the
// timeout passes, when the communicator is aborted and the collective fails
// naming the rank and the operation.
//
//===----------------------------------------------------------------------===//

#include "Comm.h"
#include "Cuda.h"

#include <dlfcn.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace distopt::rt {
namespace {

using cuda::CUevent;
using cuda::CUstream;

// NCCL's ABI (nccl.h), declared here so that nccl.h is not needed to build.
using ncclResult_t = int;
using ncclComm_t = struct ncclComm *;
using ncclDataType_t = int;
using ncclRedOp_t = int;
struct ncclUniqueId {
  char internal[128];
};
/// The fields of ncclConfig_t up to NCCL 2.18; `size` and `version` tell a
/// newer NCCL which fields are present.
struct ncclConfig {
  size_t size = sizeof(ncclConfig);
  unsigned magic = 0xcafebeef;
  unsigned version = 21800;
  int blocking = INT_MIN;
  int cgaClusterSize = INT_MIN;
  int minCTAs = INT_MIN;
  int maxCTAs = INT_MIN;
  const char *netName = nullptr;
  int splitShare = INT_MIN;
};
constexpr ncclResult_t kNcclSuccess = 0;
constexpr ncclResult_t kNcclInProgress = 7;
constexpr int kScalarHostImmediate = 1;

struct Nccl {
  ncclResult_t (*getUniqueId)(ncclUniqueId *);
  ncclResult_t (*commInitRankConfig)(ncclComm_t *, int, ncclUniqueId, int,
                                     ncclConfig *);
  ncclResult_t (*commDestroy)(ncclComm_t);
  ncclResult_t (*commAbort)(ncclComm_t);
  ncclResult_t (*commGetAsyncError)(ncclComm_t, ncclResult_t *);
  const char *(*getErrorString)(ncclResult_t);
  ncclResult_t (*redOpCreatePreMulSum)(ncclRedOp_t *, void *, ncclDataType_t,
                                       int, ncclComm_t);
  ncclResult_t (*redOpDestroy)(ncclRedOp_t, ncclComm_t);
  ncclResult_t (*allReduce)(const void *, void *, size_t, ncclDataType_t,
                            ncclRedOp_t, ncclComm_t, CUstream);
  ncclResult_t (*reduceScatter)(const void *, void *, size_t, ncclDataType_t,
                                ncclRedOp_t, ncclComm_t, CUstream);
  ncclResult_t (*allGather)(const void *, void *, size_t, ncclDataType_t,
                            ncclComm_t, CUstream);
  ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int,
                            ncclComm_t, CUstream);
  ncclResult_t (*reduce)(const void *, void *, size_t, ncclDataType_t,
                         ncclRedOp_t, int, ncclComm_t, CUstream);
  ncclResult_t (*groupStart)();
  ncclResult_t (*groupEnd)();
};

/// Loads NCCL once; null with `why` set if it cannot.
const Nccl *loadNccl(std::string &why) {
  static Nccl nccl;
  static std::string error;
  static bool loaded = [] {
    // PyTorch's pip packages keep NCCL out of the library path: a path may
    // be given.
    const char *path = std::getenv("DISTOPT_RT_NCCL_LIBRARY");
    if (!path || !*path) // dlopen("") would open the program itself
      path = "libnccl.so.2";
    void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      const char *text = dlerror();
      error = std::string("NCCL (") + path +
              ") cannot be loaded: " + (text ? text : "not found") +
              " (set DISTOPT_RT_NCCL_LIBRARY to its path)";
      return false;
    }
    auto get = [&](const char *name, auto &fn) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
          dlsym(library, name));
      if (!fn && error.empty())
        error = std::string("NCCL has no ") + name +
                " (NCCL 2.18 or newer is needed)";
    };
    get("ncclGetUniqueId", nccl.getUniqueId);
    get("ncclCommInitRankConfig", nccl.commInitRankConfig);
    get("ncclCommDestroy", nccl.commDestroy);
    get("ncclCommAbort", nccl.commAbort);
    get("ncclCommGetAsyncError", nccl.commGetAsyncError);
    get("ncclGetErrorString", nccl.getErrorString);
    get("ncclRedOpCreatePreMulSum", nccl.redOpCreatePreMulSum);
    get("ncclRedOpDestroy", nccl.redOpDestroy);
    get("ncclAllReduce", nccl.allReduce);
    get("ncclReduceScatter", nccl.reduceScatter);
    get("ncclAllGather", nccl.allGather);
    get("ncclBroadcast", nccl.broadcast);
    get("ncclReduce", nccl.reduce);
    get("ncclGroupStart", nccl.groupStart);
    get("ncclGroupEnd", nccl.groupEnd);
    return error.empty();
  }();
  why = error;
  return loaded ? &nccl : nullptr;
}

ncclDataType_t ncclType(distopt_rt_dtype type) {
  switch (type) {
  case DISTOPT_RT_F32:
    return 7;
  case DISTOPT_RT_F64:
    return 8;
  case DISTOPT_RT_BF16:
    return 9;
  case DISTOPT_RT_F16:
    return 6;
  case DISTOPT_RT_I32:
    return 2;
  case DISTOPT_RT_I64:
    return 4;
  }
  return -1;
}

ncclRedOp_t ncclOp(distopt_rt_reduction op) {
  switch (op) {
  case DISTOPT_RT_SUM:
    return 0;
  case DISTOPT_RT_PROD:
    return 1;
  case DISTOPT_RT_MAX:
    return 2;
  case DISTOPT_RT_MIN:
    return 3;
  case DISTOPT_RT_AVG:
    return 4;
  case DISTOPT_RT_PREMUL_SUM:
    break;
  }
  return -1;
}

using Clock = std::chrono::steady_clock;

class NcclCollectives : public DeviceCollectives {
public:
  NcclCollectives(const Nccl &nccl, Transport &transport)
      : nccl(nccl), rank(transport.rank()), size(transport.size()),
        timeout(transport.timeout) {}
  ~NcclCollectives() override;

  distopt_rt_status init(Transport &transport);
  distopt_rt_status execute(const Collective &c, const What &what) override;
  std::unique_ptr<DeviceCollectives> over(Transport &part,
                                          distopt_rt_status *status) override {
    return createNcclCollectives(part, status);
  }

private:
  /// Fails with the NCCL error `result` of `call`.
  distopt_rt_status ncclFailure(ncclResult_t result, const What &what,
                                const char *call);
  /// Waits until the communicator is no longer in progress (after a
  /// non-blocking call) and `done` (if any) has completed.
  distopt_rt_status await(CUevent done, Clock::time_point deadline,
                          const What &what);
  ncclResult_t enqueue(const Collective &c, ncclRedOp_t op);
  Clock::time_point deadlineFromNow() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(timeout));
  }

  const Nccl &nccl;
  int64_t rank, size;
  double timeout;
  ncclComm_t comm = nullptr;
  CUstream stream = nullptr;
  CUevent computeDone = nullptr, commDone = nullptr;
  bool aborted = false;
};

NcclCollectives::~NcclCollectives() {
  const cuda::Driver *d = cuda::driver();
  if (comm)
    (aborted ? nccl.commAbort : nccl.commDestroy)(comm);
  if (d) {
    if (computeDone)
      d->cuEventDestroy(computeDone);
    if (commDone)
      d->cuEventDestroy(commDone);
    if (stream)
      d->cuStreamDestroy(stream);
  }
}

distopt_rt_status NcclCollectives::ncclFailure(ncclResult_t result,
                                               const What &what,
                                               const char *call) {
  return fail(DISTOPT_RT_BACKEND_ERROR, what.str() + ": " + call + " failed: " +
                                            nccl.getErrorString(result));
}

distopt_rt_status NcclCollectives::await(CUevent done,
                                         Clock::time_point deadline,
                                         const What &what) {
  const cuda::Driver *d = cuda::driver();
  for (int spins = 0;; ++spins) {
    ncclResult_t state = kNcclSuccess;
    ncclResult_t result = nccl.commGetAsyncError(comm, &state);
    if (result != kNcclSuccess)
      return ncclFailure(result, what, "ncclCommGetAsyncError");
    if (state != kNcclSuccess && state != kNcclInProgress)
      return ncclFailure(state, what, "NCCL");
    if (state == kNcclSuccess) {
      if (!done)
        return DISTOPT_RT_OK;
      cuda::CUresult query = d->cuEventQuery(done);
      if (query == cuda::kSuccess)
        return DISTOPT_RT_OK;
      if (query != cuda::kNotReady) {
        cuda::check(query, "cuEventQuery");
        return fail(DISTOPT_RT_BACKEND_ERROR,
                    what.str() + ": " + cuda::stickyError());
      }
    }
    if (Clock::now() > deadline) {
      nccl.commAbort(comm);
      comm = nullptr;
      aborted = true;
      return fail(DISTOPT_RT_TIMEOUT, what.str() + ": timed out after " +
                                          std::to_string(timeout) +
                                          " s (NCCL communicator aborted)");
    }
    // Spin briefly (small collectives finish in microseconds), then yield.
    if (spins > 1000)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

distopt_rt_status NcclCollectives::init(Transport &transport) {
  const cuda::Driver *d = cuda::driver();
  if (!d)
    return fail(DISTOPT_RT_UNAVAILABLE,
                "the nccl backend needs CUDA: " + cuda::stickyError());
  auto describe = [&] {
    return "rank " + std::to_string(rank) + " of " + std::to_string(size) +
           ": NCCL initialization";
  };
  What what(describe);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (rank == 0) {
    if (ncclResult_t r = nccl.getUniqueId(&id); r != kNcclSuccess)
      return ncclFailure(r, what, "ncclGetUniqueId");
    for (int64_t peer = 1; peer < size; ++peer)
      if (distopt_rt_status s = transport.exchange(&id, sizeof id, peer,
                                                   nullptr, 0, -1, describe);
          s != DISTOPT_RT_OK)
        return s;
  } else if (distopt_rt_status s = transport.exchange(nullptr, 0, -1, &id,
                                                      sizeof id, 0, describe);
             s != DISTOPT_RT_OK) {
    return s;
  }
  if (!cuda::check(d->cuStreamCreate(&stream, cuda::kStreamNonBlocking),
                   "cuStreamCreate") ||
      !cuda::check(d->cuEventCreate(&computeDone, cuda::kEventDisableTiming),
                   "cuEventCreate") ||
      !cuda::check(d->cuEventCreate(&commDone, cuda::kEventDisableTiming),
                   "cuEventCreate"))
    return fail(DISTOPT_RT_BACKEND_ERROR,
                what.str() + ": " + cuda::stickyError());
  ncclConfig config;
  config.blocking = 0;
  ncclResult_t r = nccl.commInitRankConfig(&comm, static_cast<int>(size), id,
                                           static_cast<int>(rank), &config);
  if (r != kNcclSuccess && r != kNcclInProgress)
    return ncclFailure(r, what, "ncclCommInitRankConfig");
  Clock::time_point deadline = deadlineFromNow();
  return await(nullptr, deadline, what);
}

ncclResult_t NcclCollectives::enqueue(const Collective &c, ncclRedOp_t op) {
  ncclDataType_t type = ncclType(c.type);
  size_t count = static_cast<size_t>(c.count);
  int root = static_cast<int>(c.root);
  switch (c.kind) {
  case Collective::AllReduce:
    return nccl.allReduce(c.send, c.recv, count, type, op, comm, stream);
  case Collective::ReduceScatter:
    return nccl.reduceScatter(c.send, c.recv, count, type, op, comm, stream);
  case Collective::AllGather:
    return nccl.allGather(c.send, c.recv, count, type, comm, stream);
  case Collective::Broadcast:
    return nccl.broadcast(c.send, c.recv, count, type, root, comm, stream);
  case Collective::Reduce:
    return nccl.reduce(c.send, c.recv, count, type, op, root, comm, stream);
  }
  return kNcclSuccess;
}

distopt_rt_status NcclCollectives::execute(const Collective &c,
                                           const What &what) {
  if (!comm)
    return fail(DISTOPT_RT_FAILED, what.str() +
                                       ": the NCCL communicator was "
                                       "aborted after an earlier timeout");
  if (c.wire != c.type)
    return fail(DISTOPT_RT_UNAVAILABLE,
                what.str() +
                    ": the nccl backend does not compress on the wire yet");
  if (!cuda::bindContext())
    return fail(DISTOPT_RT_BACKEND_ERROR,
                what.str() + ": " + cuda::stickyError());
  if (c.count == 0)
    return DISTOPT_RT_OK;
  const cuda::Driver *d = cuda::driver();
  Clock::time_point deadline = deadlineFromNow();

  // The communication stream starts after the compute stream's work so far
  // (the step's producers of the input).
  if (!cuda::check(d->cuEventRecord(computeDone, cuda::computeStream()),
                   "cuEventRecord") ||
      !cuda::check(d->cuStreamWaitEvent(stream, computeDone, 0),
                   "cuStreamWaitEvent"))
    return fail(DISTOPT_RT_BACKEND_ERROR,
                what.str() + ": " + cuda::stickyError());

  bool reduces = c.kind == Collective::AllReduce ||
                 c.kind == Collective::ReduceScatter ||
                 c.kind == Collective::Reduce;
  ncclRedOp_t op = reduces ? ncclOp(c.op) : 0;
  bool premul = reduces && c.op == DISTOPT_RT_PREMUL_SUM;
  if (premul) {
    // The factor in the data's own type.
    alignas(8) unsigned char scalar[8];
    convert(&c.scale, DISTOPT_RT_F64, scalar, c.type, 1);
    ncclResult_t r = nccl.redOpCreatePreMulSum(&op, scalar, ncclType(c.type),
                                               kScalarHostImmediate, comm);
    if (r != kNcclSuccess && r != kNcclInProgress)
      return ncclFailure(r, what, "ncclRedOpCreatePreMulSum");
  }
  // NCCL 2.28 (PyTorch 2.11's, on an H200 at one rank) leaves the last
  // count % 4 elements of a large f32 reduction that scales (avg,
  // premul_sum) unwritten; small counts are right. Those elements go in a
  // call of their own, in one group with the rest. A reduce-scatter's
  // chunks are not contiguous across ranks: at one rank only.
  int64_t tail = c.count % 4;
  bool scales = c.op == DISTOPT_RT_AVG || c.op == DISTOPT_RT_PREMUL_SUM;
  ncclResult_t r;
  if (reduces && scales && c.type == DISTOPT_RT_F32 && tail && c.count > 4 &&
      (c.kind != Collective::ReduceScatter || size == 1)) {
    Collective head = c, rest = c;
    head.count -= tail;
    rest.count = tail;
    rest.send = static_cast<const float *>(c.send) + head.count;
    rest.recv = static_cast<float *>(c.recv) + head.count;
    r = nccl.groupStart();
    if (r == kNcclSuccess)
      r = enqueue(head, op);
    if (r == kNcclSuccess || r == kNcclInProgress)
      r = enqueue(rest, op);
    ncclResult_t end = nccl.groupEnd();
    if (r == kNcclSuccess || r == kNcclInProgress)
      r = end;
  } else {
    r = enqueue(c, op);
  }
  if (r != kNcclSuccess && r != kNcclInProgress)
    return ncclFailure(r, what, name(c.kind));
  // The dialect's reduce leaves other ranks their own input.
  if (c.kind == Collective::Reduce && c.root != rank && c.recv != c.send)
    cuda::check(d->cuMemcpyAsync(
                    reinterpret_cast<uintptr_t>(c.recv),
                    reinterpret_cast<uintptr_t>(c.send),
                    static_cast<size_t>(c.count) * elementSize(c.type), stream),
                "cuMemcpyAsync");
  if (!cuda::check(d->cuEventRecord(commDone, stream), "cuEventRecord"))
    return fail(DISTOPT_RT_BACKEND_ERROR,
                what.str() + ": " + cuda::stickyError());
  distopt_rt_status status = await(commDone, deadline, what);
  if (premul && comm)
    nccl.redOpDestroy(op, comm);
  return status;
}

} // namespace

std::unique_ptr<DeviceCollectives>
createNcclCollectives(Transport &transport, distopt_rt_status *status) {
  std::string why;
  const Nccl *nccl = loadNccl(why);
  if (!nccl) {
    *status = fail(DISTOPT_RT_UNAVAILABLE,
                   "rank " + std::to_string(transport.rank()) + ": " + why);
    return nullptr;
  }
  auto collectives = std::make_unique<NcclCollectives>(*nccl, transport);
  *status = collectives->init(transport);
  if (*status != DISTOPT_RT_OK)
    return nullptr;
  return collectives;
}

} // namespace distopt::rt
