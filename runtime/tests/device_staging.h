//===- device_staging.h - collectives on device copies, for tests -*- C++
//-*-===//
//
// collectives_test's --backend=nccl and --backend=host-staged take device
// memory: each call here copies its host buffers to the device, runs the
// collective there and copies them back, so the test's host references
// check the device backends as they check the host ones.
//
//===----------------------------------------------------------------------===//
#ifndef DISTOPT_RT_TESTS_DEVICE_STAGING_H
#define DISTOPT_RT_TESTS_DEVICE_STAGING_H

#include "distopt_rt.h"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace device_staging {

inline bool onDevice = false; // collectives take device memory

inline size_t elementBytes(distopt_rt_dtype t) {
  return t == DISTOPT_RT_F64 || t == DISTOPT_RT_I64    ? 8
         : t == DISTOPT_RT_BF16 || t == DISTOPT_RT_F16 ? 2
                                                       : 4;
}

/// Runs `call` on device copies of the host buffers `regions` (pointer and
/// bytes; a buffer inside another, as an in-place all-gather's slot, maps
/// into that one's copy), then copies every buffer back. On the host
/// backends, `call` takes the host buffers themselves.
template <typename Call>
distopt_rt_status staged(std::vector<std::pair<const void *, size_t>> regions,
                         Call call) {
  auto identity = [](const void *p) { return const_cast<void *>(p); };
  if (!onDevice)
    return call(identity);
  std::sort(regions.begin(), regions.end(),
            [](auto &a, auto &b) { return a.second > b.second; });
  struct Copy {
    char *host;
    size_t bytes;
    char *device;
  };
  std::vector<Copy> copies;
  auto containing = [&](const void *p) -> Copy * {
    for (Copy &c : copies)
      if (static_cast<const char *>(p) >= c.host &&
          static_cast<const char *>(p) < c.host + std::max<size_t>(c.bytes, 1))
        return &c;
    return nullptr;
  };
  distopt_rt_status status = DISTOPT_RT_OK;
  for (auto [host, bytes] : regions) {
    if (containing(host))
      continue;
    void *device = nullptr;
    status = distopt_rt_cuda_alloc(std::max<size_t>(bytes, 1), &device);
    copies.push_back({static_cast<char *>(const_cast<void *>(host)), bytes,
                      static_cast<char *>(device)});
    if (status == DISTOPT_RT_OK)
      status = distopt_rt_cuda_copy(device, host, bytes);
  }
  if (status == DISTOPT_RT_OK)
    status = call([&](const void *p) -> void * {
      Copy *c = containing(p);
      return c->device + (static_cast<const char *>(p) - c->host);
    });
  for (Copy &c : copies) {
    if (status == DISTOPT_RT_OK)
      status = distopt_rt_cuda_copy(c.host, c.device, c.bytes);
    distopt_rt_cuda_free(c.device);
  }
  return status;
}

inline distopt_rt_status allReduce(distopt_rt_comm *comm, const void *send,
                                   void *recv, int64_t count,
                                   distopt_rt_dtype t, distopt_rt_reduction op,
                                   double scale, distopt_rt_dtype wire,
                                   bool async) {
  size_t bytes = count * elementBytes(t);
  return staged({{send, bytes}, {recv, bytes}}, [&](auto at) {
    if (!async)
      return distopt_rt_all_reduce(comm, at(send), at(recv), count, t, op,
                                   scale, wire);
    distopt_rt_request *request = nullptr;
    distopt_rt_status status = distopt_rt_all_reduce_start(
        comm, at(send), at(recv), count, t, op, scale, wire, &request);
    return status == DISTOPT_RT_OK ? distopt_rt_wait(request) : status;
  });
}

inline distopt_rt_status
reduceScatter(distopt_rt_comm *comm, const void *send, void *recv,
              int64_t count, distopt_rt_dtype t, distopt_rt_reduction op,
              double scale, distopt_rt_dtype wire, int64_t worldSize) {
  size_t bytes = count * elementBytes(t);
  return staged({{send, bytes * worldSize}, {recv, bytes}}, [&](auto at) {
    return distopt_rt_reduce_scatter(comm, at(send), at(recv), count, t, op,
                                     scale, wire);
  });
}

inline distopt_rt_status reduce(distopt_rt_comm *comm, const void *send,
                                void *recv, int64_t count, distopt_rt_dtype t,
                                distopt_rt_reduction op, double scale,
                                int64_t root, distopt_rt_dtype wire) {
  size_t bytes = count * elementBytes(t);
  return staged({{send, bytes}, {recv, bytes}}, [&](auto at) {
    return distopt_rt_reduce(comm, at(send), at(recv), count, t, op, scale,
                             root, wire);
  });
}

inline distopt_rt_status allGather(distopt_rt_comm *comm, const void *send,
                                   void *recv, int64_t count,
                                   distopt_rt_dtype t, distopt_rt_dtype wire,
                                   bool async, int64_t worldSize) {
  size_t bytes = count * elementBytes(t);
  return staged({{send, bytes}, {recv, bytes * worldSize}}, [&](auto at) {
    if (!async)
      return distopt_rt_all_gather(comm, at(send), at(recv), count, t, wire);
    distopt_rt_request *request = nullptr;
    distopt_rt_status status = distopt_rt_all_gather_start(
        comm, at(send), at(recv), count, t, wire, &request);
    return status == DISTOPT_RT_OK ? distopt_rt_wait(request) : status;
  });
}

inline distopt_rt_status broadcast(distopt_rt_comm *comm, const void *send,
                                   void *recv, int64_t count,
                                   distopt_rt_dtype t, int64_t root,
                                   distopt_rt_dtype wire) {
  size_t bytes = count * elementBytes(t);
  return staged({{send, bytes}, {recv, bytes}}, [&](auto at) {
    return distopt_rt_broadcast(comm, at(send), at(recv), count, t, root, wire);
  });
}

} // namespace device_staging

#endif // DISTOPT_RT_TESTS_DEVICE_STAGING_H
