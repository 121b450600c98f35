//===- Runtime.cpp - the C ABI ----------------------------------*- C++ -*-===//
//
// Validates every argument, names the failing call in the error message,
// and keeps C++ exceptions (allocation failures) from crossing the ABI.
//
//===----------------------------------------------------------------------===//

#include "Comm.h"
#include "Cuda.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <sstream>

using namespace distopt::rt;

double distopt::rt::defaultTimeout() {
  const char *text = std::getenv("DISTOPT_RT_TIMEOUT");
  return text ? std::atof(text) : 300.0;
}

namespace {

/// Runs `body`, turning an exception into a status.
template <typename F> distopt_rt_status guarded(const char *call, F body) {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(DISTOPT_RT_BACKEND_ERROR,
                std::string(call) + ": out of memory");
  } catch (const std::exception &e) {
    return fail(DISTOPT_RT_BACKEND_ERROR, std::string(call) + ": " + e.what());
  }
}

bool launchedByMpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
}

distopt_rt_status invalid(const char *call, const std::string &why) {
  return fail(DISTOPT_RT_INVALID_ARGUMENT, std::string(call) + ": " + why);
}

/// The checks every collective shares.
distopt_rt_status check(const char *call, const distopt_rt_comm *comm,
                        const Collective &c, bool reduces) {
  if (!comm || !comm->impl)
    return invalid(call, "the communicator is null");
  if (c.count < 0)
    return invalid(call, "negative count " + std::to_string(c.count));
  if (!isValid(c.type))
    return invalid(call, "unknown dtype " + std::to_string(c.type));
  if (!isValid(c.wire))
    return invalid(call, "unknown wire dtype " + std::to_string(c.wire));
  if (c.wire != c.type &&
      (!isFloat(c.type) ||
       (c.wire != DISTOPT_RT_BF16 && c.wire != DISTOPT_RT_F16) ||
       elementSize(c.wire) > elementSize(c.type)))
    return invalid(call, std::string("a ") + name(c.wire) +
                             " wire needs floating-point data at least as "
                             "wide, got " +
                             name(c.type));
  if (c.count > 0 && (!c.send || !c.recv))
    return invalid(call, "a null buffer for " + std::to_string(c.count) +
                             " elements");
  if (reduces) {
    if (!isValid(c.op))
      return invalid(call, "unknown reduction " + std::to_string(c.op));
    if (c.op == DISTOPT_RT_PREMUL_SUM &&
        (!isFloat(c.type) || !std::isfinite(c.scale)))
      return invalid(call, "premul_sum needs floating-point data and a "
                           "finite scale");
  }
  int64_t size = comm->impl->size();
  if ((c.kind == Collective::Broadcast || c.kind == Collective::Reduce) &&
      (c.root < 0 || c.root >= size))
    return invalid(call, "root " + std::to_string(c.root) +
                             " is out of range for " + std::to_string(size) +
                             " ranks");
  if (c.kind == Collective::AllReduce || c.kind == Collective::Broadcast ||
      c.kind == Collective::Reduce)
    return DISTOPT_RT_OK;
  // Per-rank counts times the size must not overflow.
  if (size > 0 && c.count > INT64_MAX / size)
    return invalid(call, "count " + std::to_string(c.count) + " overflows");
  // An all_gather may send from its own slot of the output (in place, as
  // NCCL and MPI_IN_PLACE allow); any other overlap would be overwritten
  // before it is sent.
  if (c.kind == Collective::AllGather && c.count > 0) {
    auto bytes = static_cast<uintptr_t>(c.count) * elementSize(c.type);
    auto send = reinterpret_cast<uintptr_t>(c.send);
    auto recv = reinterpret_cast<uintptr_t>(c.recv);
    uintptr_t slot = recv + comm->impl->rank() * bytes;
    if (send != slot && send < recv + size * bytes && recv < send + bytes)
      return invalid(call, "the send buffer overlaps the receive buffer "
                           "outside this rank's slot");
  }
  return DISTOPT_RT_OK;
}

distopt_rt_status runOrStart(const char *call, distopt_rt_comm *comm,
                             const Collective &c, bool reduces,
                             distopt_rt_request **request) {
  return guarded(call, [&] {
    distopt_rt_status status = check(call, comm, c, reduces);
    if (status != DISTOPT_RT_OK)
      return status;
    if (!request)
      return comm->impl->run(c);
    *request = new distopt_rt_request{comm->impl->start(c)};
    return DISTOPT_RT_OK;
  });
}

Collective make(Collective::Kind kind, const void *send, void *recv,
                int64_t count, distopt_rt_dtype type, distopt_rt_reduction op,
                double scale, int64_t root, distopt_rt_dtype wire) {
  return Collective{kind, send, recv, count, type, op, scale, root, wire};
}

/// What the host bound with distopt_rt_bind_world, on this thread.
thread_local distopt_rt_comm *boundWorld = nullptr;
/// distopt_rt_check_rate failed on this thread (before the step did
/// anything).
thread_local bool rateRefused = false;

/// The error for a step compiled for `expected` ranks on `actual`.
distopt_rt_status worldSizeMismatch(int64_t rank, int64_t expected,
                                    int64_t actual) {
  std::ostringstream message;
  message << "rank " << rank << ": the step was compiled for " << expected
          << " ranks but runs on " << actual;
  return fail(DISTOPT_RT_WORLD_SIZE_MISMATCH, message.str());
}

} // namespace

extern "C" {

const char *distopt_rt_last_error(void) { return lastError().c_str(); }

distopt_rt_status distopt_rt_comm_create(const char *backend,
                                         int64_t expectedSize,
                                         double timeoutSeconds,
                                         distopt_rt_comm **comm) {
  const char *call = "distopt_rt_comm_create";
  return guarded(call, [&] {
    if (!comm || !backend)
      return invalid(call, "null backend or output pointer");
    if (std::string bad = checkTimeout(timeoutSeconds, "the timeout");
        !bad.empty())
      return invalid(call, bad);
    if (expectedSize < 0)
      return invalid(call, "negative expected world size");
    std::unique_ptr<Transport> transport;
    distopt_rt_status status = DISTOPT_RT_OK;
    bool nccl = std::strcmp(backend, "nccl") == 0;
    bool staged = std::strcmp(backend, "host-staged") == 0;
    bool onDevice = nccl || staged;
    if (std::strcmp(backend, "single") == 0)
      transport = createSingleTransport();
    else if (std::strcmp(backend, "mpi") == 0 || (onDevice && launchedByMpi()))
      transport = createMpiTransport(&status);
    else if (onDevice)
      transport = createSingleTransport();
    else
      return invalid(call, std::string("unknown backend '") + backend +
                               "' (expected mpi, single, nccl or "
                               "host-staged)");
    if (!transport)
      return status;
    transport->timeout = timeoutSeconds;
    if (expectedSize != 0 && transport->size() != expectedSize)
      return worldSizeMismatch(transport->rank(), expectedSize,
                               transport->size());
    std::unique_ptr<DeviceCollectives> device;
    if (onDevice) {
      device = nccl ? createNcclCollectives(*transport, &status)
                    : createStagedCollectives(*transport, &status);
      if (!device)
        return status;
    }
    *comm = new distopt_rt_comm{std::make_unique<Communicator>(
        std::move(transport), std::move(device))};
    return DISTOPT_RT_OK;
  });
}

distopt_rt_status distopt_rt_comm_destroy(distopt_rt_comm *comm) {
  if (!comm)
    return invalid("distopt_rt_comm_destroy", "the communicator is null");
  delete comm;
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_rt_comm_rank(const distopt_rt_comm *comm,
                                       int64_t *rank) {
  if (!comm || !comm->impl || !rank)
    return invalid("distopt_rt_comm_rank", "null communicator or output");
  *rank = comm->impl->rank();
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_rt_comm_size(const distopt_rt_comm *comm,
                                       int64_t *size) {
  if (!comm || !comm->impl || !size)
    return invalid("distopt_rt_comm_size", "null communicator or output");
  *size = comm->impl->size();
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_rt_all_reduce(distopt_rt_comm *comm, const void *send,
                                        void *recv, int64_t count,
                                        distopt_rt_dtype dtype,
                                        distopt_rt_reduction op, double scale,
                                        distopt_rt_dtype wire) {
  return runOrStart(
      __func__, comm,
      make(Collective::AllReduce, send, recv, count, dtype, op, scale, 0, wire),
      true, nullptr);
}

distopt_rt_status distopt_rt_all_reduce_start(
    distopt_rt_comm *comm, const void *send, void *recv, int64_t count,
    distopt_rt_dtype dtype, distopt_rt_reduction op, double scale,
    distopt_rt_dtype wire, distopt_rt_request **request) {
  if (!request)
    return invalid(__func__, "null request pointer");
  return runOrStart(
      __func__, comm,
      make(Collective::AllReduce, send, recv, count, dtype, op, scale, 0, wire),
      true, request);
}

distopt_rt_status
distopt_rt_reduce_scatter(distopt_rt_comm *comm, const void *send, void *recv,
                          int64_t recvCount, distopt_rt_dtype dtype,
                          distopt_rt_reduction op, double scale,
                          distopt_rt_dtype wire) {
  return runOrStart(__func__, comm,
                    make(Collective::ReduceScatter, send, recv, recvCount,
                         dtype, op, scale, 0, wire),
                    true, nullptr);
}

distopt_rt_status distopt_rt_reduce_scatter_start(
    distopt_rt_comm *comm, const void *send, void *recv, int64_t recvCount,
    distopt_rt_dtype dtype, distopt_rt_reduction op, double scale,
    distopt_rt_dtype wire, distopt_rt_request **request) {
  if (!request)
    return invalid(__func__, "null request pointer");
  return runOrStart(__func__, comm,
                    make(Collective::ReduceScatter, send, recv, recvCount,
                         dtype, op, scale, 0, wire),
                    true, request);
}

distopt_rt_status distopt_rt_all_gather(distopt_rt_comm *comm, const void *send,
                                        void *recv, int64_t sendCount,
                                        distopt_rt_dtype dtype,
                                        distopt_rt_dtype wire) {
  return runOrStart(__func__, comm,
                    make(Collective::AllGather, send, recv, sendCount, dtype,
                         DISTOPT_RT_SUM, 1.0, 0, wire),
                    false, nullptr);
}

distopt_rt_status distopt_rt_all_gather_start(distopt_rt_comm *comm,
                                              const void *send, void *recv,
                                              int64_t sendCount,
                                              distopt_rt_dtype dtype,
                                              distopt_rt_dtype wire,
                                              distopt_rt_request **request) {
  if (!request)
    return invalid(__func__, "null request pointer");
  return runOrStart(__func__, comm,
                    make(Collective::AllGather, send, recv, sendCount, dtype,
                         DISTOPT_RT_SUM, 1.0, 0, wire),
                    false, request);
}

distopt_rt_status distopt_rt_broadcast(distopt_rt_comm *comm, const void *send,
                                       void *recv, int64_t count,
                                       distopt_rt_dtype dtype, int64_t root,
                                       distopt_rt_dtype wire) {
  return runOrStart(__func__, comm,
                    make(Collective::Broadcast, send, recv, count, dtype,
                         DISTOPT_RT_SUM, 1.0, root, wire),
                    false, nullptr);
}

distopt_rt_status
distopt_rt_broadcast_start(distopt_rt_comm *comm, const void *send, void *recv,
                           int64_t count, distopt_rt_dtype dtype, int64_t root,
                           distopt_rt_dtype wire,
                           distopt_rt_request **request) {
  if (!request)
    return invalid(__func__, "null request pointer");
  return runOrStart(__func__, comm,
                    make(Collective::Broadcast, send, recv, count, dtype,
                         DISTOPT_RT_SUM, 1.0, root, wire),
                    false, request);
}

distopt_rt_status distopt_rt_reduce(distopt_rt_comm *comm, const void *send,
                                    void *recv, int64_t count,
                                    distopt_rt_dtype dtype,
                                    distopt_rt_reduction op, double scale,
                                    int64_t root, distopt_rt_dtype wire) {
  return runOrStart(
      __func__, comm,
      make(Collective::Reduce, send, recv, count, dtype, op, scale, root, wire),
      true, nullptr);
}

distopt_rt_status distopt_rt_reduce_start(distopt_rt_comm *comm,
                                          const void *send, void *recv,
                                          int64_t count, distopt_rt_dtype dtype,
                                          distopt_rt_reduction op, double scale,
                                          int64_t root, distopt_rt_dtype wire,
                                          distopt_rt_request **request) {
  if (!request)
    return invalid(__func__, "null request pointer");
  return runOrStart(
      __func__, comm,
      make(Collective::Reduce, send, recv, count, dtype, op, scale, root, wire),
      true, request);
}

distopt_rt_status distopt_rt_comm_create_mpi(const void *mpiComm,
                                             int64_t expectedSize,
                                             double timeoutSeconds,
                                             distopt_rt_comm **comm) {
  const char *call = "distopt_rt_comm_create_mpi";
  return guarded(call, [&] {
    if (!comm || !mpiComm)
      return invalid(call, "null MPI communicator or output pointer");
    if (std::string bad = checkTimeout(timeoutSeconds, "the timeout");
        !bad.empty())
      return invalid(call, bad);
    if (expectedSize < 0)
      return invalid(call, "negative expected world size");
    distopt_rt_status status = DISTOPT_RT_OK;
    std::unique_ptr<Transport> transport = createMpiTransport(&status, mpiComm);
    if (!transport)
      return status;
    transport->timeout = timeoutSeconds;
    if (expectedSize != 0 && transport->size() != expectedSize)
      return worldSizeMismatch(transport->rank(), expectedSize,
                               transport->size());
    *comm = new distopt_rt_comm{
        std::make_unique<Communicator>(std::move(transport), nullptr)};
    return DISTOPT_RT_OK;
  });
}

distopt_rt_status distopt_rt_comm_split(distopt_rt_comm *comm, int64_t color,
                                        int64_t key, const char *name,
                                        distopt_rt_comm **group) {
  const char *call = "distopt_rt_comm_split";
  return guarded(call, [&] {
    if (!comm || !comm->impl || !group)
      return invalid(call, "null communicator or output pointer");
    // A bad color is agreed on by every rank (split), not returned here
    // while the others wait.
    std::string why =
        color < 0 ? "negative color " + std::to_string(color) : std::string();
    distopt_rt_status status = DISTOPT_RT_OK;
    std::unique_ptr<Communicator> part =
        comm->impl->split(color, key, name ? name : "", why, &status);
    if (!part)
      return status;
    *group = new distopt_rt_comm{std::move(part)};
    return DISTOPT_RT_OK;
  });
}

distopt_rt_status distopt_rt_group(int64_t worldSize, int64_t groupSize,
                                   const int64_t *layout, const char *name,
                                   distopt_rt_comm **comm) {
  const char *call = "distopt_rt_group";
  if (!comm || !layout || !name || worldSize < 1 || groupSize < 1)
    return invalid(call, "null layout, name or output, or a size below 1");
  distopt_rt_comm *world = nullptr;
  distopt_rt_status status = distopt_rt_world(worldSize, &world);
  if (status != DISTOPT_RT_OK)
    return status;
  return guarded(call, [&] {
    // Found by name and layout (two steps may reuse a name): compared, not
    // copied into a key, as this runs before every collective on the group.
    std::lock_guard<std::mutex> lock(world->groupsMutex);
    std::vector<distopt_rt_comm::Group> &named = world->groups[name];
    size_t layoutBytes = 2 * worldSize * sizeof(int64_t);
    for (distopt_rt_comm::Group &group : named)
      if (std::memcmp(group.layout.data(), layout, layoutBytes) == 0) {
        *comm = group.comm.get();
        return DISTOPT_RT_OK;
      }
    // The whole layout is checked (the same on every rank), and the ranks
    // agree on it in the split: a bad part fails everywhere, never a hang.
    int64_t rank = world->impl->rank();
    std::string why;
    std::map<int64_t, int64_t> parts;
    for (int64_t r = 0; r < worldSize && why.empty(); ++r) {
      if (layout[r] < 0 || layout[r] > INT32_MAX || layout[worldSize + r] < 0 ||
          layout[worldSize + r] >= groupSize)
        why = "world rank " + std::to_string(r) + " has color " +
              std::to_string(layout[r]) + " and key " +
              std::to_string(layout[worldSize + r]) + ", out of range";
      else
        ++parts[layout[r]];
    }
    for (auto [color, members] : parts)
      if (why.empty() && members != groupSize)
        why = "part " + std::to_string(color) + " has " +
              std::to_string(members) + " ranks, expected " +
              std::to_string(groupSize);
    std::unique_ptr<Communicator> part = world->impl->split(
        layout[rank], layout[worldSize + rank], name, why, &status);
    if (!part)
      return status;
    named.push_back({std::vector<int64_t>(layout, layout + 2 * worldSize),
                     std::unique_ptr<distopt_rt_comm>(
                         new distopt_rt_comm{std::move(part)})});
    *comm = named.back().comm.get();
    return DISTOPT_RT_OK;
  });
}

void distopt_rt_bind_world(distopt_rt_comm *comm) { boundWorld = comm; }

distopt_rt_status distopt_rt_world(int64_t expectedSize,
                                   distopt_rt_comm **comm) {
  static std::mutex mutex;
  static distopt_rt_comm *world = nullptr;
  const char *call = "distopt_rt_world";
  if (!comm)
    return invalid(call, "null output pointer");
  if (boundWorld) {
    if (expectedSize != 0 && boundWorld->impl->size() != expectedSize)
      return worldSizeMismatch(boundWorld->impl->rank(), expectedSize,
                               boundWorld->impl->size());
    *comm = boundWorld;
    return DISTOPT_RT_OK;
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (!world) {
    const char *backend = std::getenv("DISTOPT_RT_BACKEND");
    if (!backend)
      backend = cuda::device() >= 0 ? "nccl"
                : launchedByMpi()   ? "mpi"
                                    : "single";
    distopt_rt_status status =
        distopt_rt_comm_create(backend, expectedSize, defaultTimeout(), &world);
    if (status != DISTOPT_RT_OK)
      return status;
    std::atexit([] {
      distopt_rt_comm_destroy(world);
      world = nullptr;
    });
  } else if (expectedSize != 0 && world->impl->size() != expectedSize) {
    return worldSizeMismatch(world->impl->rank(), expectedSize,
                             world->impl->size());
  }
  *comm = world;
  return DISTOPT_RT_OK;
}

void distopt_rt_fatal(distopt_rt_status status) {
  std::fprintf(stderr, "distopt: fatal error (status %d): %s\n",
               static_cast<int>(status), lastError().c_str());
  std::fflush(stderr);
  abortRun();
}

void distopt_rt_abort(void) { abortRun(); }

distopt_rt_status distopt_rt_check_rate(double rate, int64_t group) {
  if (std::isfinite(rate) && rate >= 0)
    return DISTOPT_RT_OK;
  rateRefused = true;
  std::string which = group < 0
                          ? std::string("the optimizer's")
                          : "param_groups[" + std::to_string(group) + "]'s";
  return fail(DISTOPT_RT_INVALID_ARGUMENT,
              "the step's learning rate for " + which + " parameters is " +
                  formatNumber(rate) +
                  " (the rate times lr_scale times the schedule's factor "
                  "must be finite and non-negative): the step changed "
                  "nothing");
}

int distopt_rt_take_rate_refusal(void) {
  bool refused = rateRefused;
  rateRefused = false;
  return refused;
}

const char *distopt_rt_host_backend(void) {
  return launchedByMpi() ? "mpi" : "single";
}

distopt_rt_status distopt_rt_host_comm(int64_t expectedSize,
                                       distopt_rt_comm **comm) {
  return distopt_rt_comm_create(distopt_rt_host_backend(), expectedSize,
                                defaultTimeout(), comm);
}

distopt_rt_status distopt_rt_convert(const void *in, distopt_rt_dtype inType,
                                     void *out, distopt_rt_dtype outType,
                                     int64_t count) {
  if (!isValid(inType) || !isValid(outType) || count < 0 ||
      (count > 0 && (!in || !out)))
    return invalid("distopt_rt_convert", "bad types, count or buffers");
  convert(in, inType, out, outType, count);
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_rt_wait(distopt_rt_request *request) {
  if (!request || !request->impl)
    return invalid("distopt_rt_wait", "the request is null");
  distopt_rt_status status = Communicator::wait(request->impl);
  delete request;
  return status;
}

} // extern "C"
