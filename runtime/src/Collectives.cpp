//===- Collectives.cpp - the communicator's algorithms -----------*- C++
//-*-===//
//
// Ring reduce-scatter and all-gather over point-to-point exchanges, in
// slices of bounded size. Each ring step receives a slice (in the wire
// type) and combines it with the local contribution in one pass, scaling as
// it goes: premul_sum scales the local part, avg divides on the last step.
// All ranks end with identical bits. Recursive doubling for small
// all-reduces, a binomial tree for broadcast, reduce as reduce-scatter and
// a gather to the root. (Comm.cpp: requests, the worker, errors.)
//
//===----------------------------------------------------------------------===//

#include "Comm.h"
#include "Elements.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace distopt::rt {

namespace {
/// All-reduces at most this large use recursive doubling: log2(n) exchanges
/// of the whole buffer instead of the ring's 2(n-1) of a chunk.
constexpr int64_t kSmallAllReduceBytes = 64 * 1024;

/// The ring's collectives move a chunk in slices of at most this many bytes
/// (counted in the wider of the data and wire types): what their buffers
/// hold, whatever the message's size. 4 MiB, or DISTOPT_RT_RING_SLICE_KB
/// KiB (a positive number; anything else is ignored).
size_t ringSliceBytes() {
  static const size_t bytes = [] {
    size_t chosen = size_t(4) << 20;
    if (const char *env = std::getenv("DISTOPT_RT_RING_SLICE_KB")) {
      char *end = nullptr;
      double kb = std::strtod(env, &end);
      if (end != env && *end == '\0' && kb > 0 && kb < 1e9)
        chosen = std::max<size_t>(1, size_t(kb * 1024));
    }
    return chosen;
  }();
  return bytes;
}
} // namespace

distopt_rt_status Communicator::allReduce(const Collective &c,
                                          const What &what) {
  int64_t n = size();
  Combine local{c.op, c.op == DISTOPT_RT_PREMUL_SUM ? c.scale : 1.0, 1.0};
  if (n == 1) {
    combineChunk(nullptr, c.type, c.send, c.recv, c.count, c.type, local);
    return DISTOPT_RT_OK;
  }
  int64_t bytes = c.count * static_cast<int64_t>(elementSize(c.type));
  if ((n & (n - 1)) == 0 && bytes <= kSmallAllReduceBytes)
    return recursiveDoublingAllReduce(c, what);
  distopt_rt_status status = ringReduceScatter(c, c.count, nullptr, what);
  if (status != DISTOPT_RT_OK)
    return status;
  return ringAllGather(c.recv, c.count, c.type, c.wire, what);
}

distopt_rt_status Communicator::recursiveDoublingAllReduce(const Collective &c,
                                                           const What &what) {
  int64_t n = size(), r = rank();
  size_t wireSize = elementSize(c.wire);
  bool convertWire = c.wire != c.type;
  // Partial results meet in pairs. Both partners add the same two values,
  // so every rank ends with the same bits. Latency is what matters at these
  // sizes: without a wire type or a scale, the own contribution goes out
  // from the input and the partial result from the output, with no pass to
  // copy either (premul_sum scales it first, a wire type rounds it).
  bool direct = !convertWire && c.op != DISTOPT_RT_PREMUL_SUM;
  if (!direct)
    combineChunk(nullptr, c.type, c.send, c.recv, c.count, c.type,
                 Combine{c.op, c.op == DISTOPT_RT_PREMUL_SUM ? c.scale : 1.0});
  distopt_rt_reduction merge =
      c.op == DISTOPT_RT_AVG || c.op == DISTOPT_RT_PREMUL_SUM ? DISTOPT_RT_SUM
                                                              : c.op;
  char *sendWire = direct ? nullptr : scratch(0, c.count * wireSize);
  char *recvWire = scratch(1, c.count * wireSize);
  int64_t steps = 0;
  for (int64_t mask = 1; mask < n; mask <<= 1)
    ++steps;
  int64_t step = 0;
  for (int64_t mask = 1; mask < n; mask <<= 1, ++step) {
    int64_t partner = r ^ mask;
    // The partial result so far: the input itself before the first step.
    const void *partial = direct && step == 0 ? c.send : c.recv;
    const void *payload = partial;
    if (!direct) {
      convert(c.recv, c.type, sendWire, c.wire, c.count);
      if (convertWire) // round the own half as the partner receives it
        convert(sendWire, c.wire, c.recv, c.type, c.count);
      payload = sendWire;
    }
    auto where = [&] {
      return what.str() + " (exchange " + std::to_string(step + 1) + " of " +
             std::to_string(steps) + ")";
    };
    distopt_rt_status status =
        transport->exchange(payload, c.count * wireSize, partner, recvWire,
                            c.count * wireSize, partner, where);
    if (status != DISTOPT_RT_OK)
      return status;
    bool last = step == steps - 1;
    combineChunk(
        recvWire, c.wire, partial, c.recv, c.count, c.type,
        Combine{merge, 1.0, last && c.op == DISTOPT_RT_AVG ? double(n) : 1.0});
  }
  if (convertWire) { // the result, as every rank rounds it
    convert(c.recv, c.type, sendWire, c.wire, c.count);
    convert(sendWire, c.wire, c.recv, c.type, c.count);
  }
  return DISTOPT_RT_OK;
}

distopt_rt_status Communicator::ringReduceScatter(const Collective &c,
                                                  int64_t count, void *out,
                                                  const What &what) {
  // `out` null: all-reduce, the reduced chunk r goes to c.recv at chunk r's
  // offset; otherwise (reduce-scatter) to `out`.
  int64_t n = size(), r = rank();
  size_t typeSize = elementSize(c.type), wireSize = elementSize(c.wire);
  Combine step{c.op, c.op == DISTOPT_RT_PREMUL_SUM ? c.scale : 1.0, 1.0};
  if (n == 1) {
    void *finalOut = out ? out : c.recv;
    combineChunk(nullptr, c.type, c.send, finalOut, count, c.type, step);
    return DISTOPT_RT_OK;
  }
  int64_t maxChunk = 0;
  for (int64_t k = 0; k < n; ++k)
    maxChunk =
        std::max(maxChunk, chunkBegin(count, k + 1) - chunkBegin(count, k));
  // The ring runs on slices of the chunks, slice p of every chunk at once:
  // its buffers are a slice long, not a chunk (a 155 MB bucket over 4 ranks
  // kept 78 MB of them from one step to the next). Each element is summed
  // in the same order either way.
  int64_t slice = std::max<int64_t>(
      1, static_cast<int64_t>(ringSliceBytes() / std::max(typeSize, wireSize)));
  slice = std::min(slice, std::max<int64_t>(maxChunk, 1));
  int64_t slices = std::max<int64_t>(1, (maxChunk + slice - 1) / slice);
  bool convertWire = c.wire != c.type;
  // acc: the partial result to send next (in the data type); wire buffers.
  char *acc = scratch(0, slice * typeSize);
  char *recvWire = scratch(1, slice * wireSize);
  char *sendWire = convertWire ? scratch(2, slice * wireSize) : nullptr;
  auto mod = [&](int64_t x) { return ((x % n) + n) % n; };
  int64_t left = mod(r - 1), right = mod(r + 1);

  // premul_sum in f32/f64 without a wire type: step 0 sends the input as
  // it is and the receiver scales it in its combine, the same product with
  // the same rounding, and no pass to scale into a buffer first. Narrower
  // types must round the scaled value to their own type before it travels.
  bool receiverScales = c.op == DISTOPT_RT_PREMUL_SUM && !convertWire &&
                        (c.type == DISTOPT_RT_F32 || c.type == DISTOPT_RT_F64);
  for (int64_t p = 0; p < slices; ++p) {
    // Slice p of chunk k: its first element and its length.
    auto sliceBegin = [&](int64_t chunk) {
      return std::min(chunkBegin(count, chunk) + p * slice,
                      chunkBegin(count, chunk + 1));
    };
    auto sliceLen = [&](int64_t chunk) {
      return std::min(sliceBegin(chunk) + slice, chunkBegin(count, chunk + 1)) -
             sliceBegin(chunk);
    };
    auto input = [&](int64_t chunk) {
      return static_cast<const char *>(c.send) + sliceBegin(chunk) * typeSize;
    };
    char *finalOut =
        out ? static_cast<char *>(out) +
                  (sliceBegin(r) - chunkBegin(count, r)) * typeSize
            : static_cast<char *>(c.recv) + sliceBegin(r) * typeSize;
    for (int64_t s = 0; s < n - 1; ++s) {
      int64_t sent = mod(r - s - 1), received = mod(r - s - 2);
      // Step 0 sends this rank's own contribution to chunk r - 1: straight
      // from the input unless it must be scaled or converted first.
      const void *payload = acc;
      if (s == 0) {
        if (c.op == DISTOPT_RT_PREMUL_SUM && !receiverScales)
          combineChunk(nullptr, c.type, input(sent), acc, sliceLen(sent),
                       c.type, step);
        else
          payload = input(sent);
      }
      if (convertWire) {
        convert(payload, c.type, sendWire, c.wire, sliceLen(sent));
        payload = sendWire;
      }
      auto where = [&] {
        std::string at = what.str() + " (ring step " + std::to_string(s + 1) +
                         " of " + std::to_string(2 * (n - 1));
        if (slices > 1)
          at += ", slice " + std::to_string(p + 1) + " of " +
                std::to_string(slices);
        return at + ")";
      };
      distopt_rt_status status = transport->exchange(
          payload, sliceLen(sent) * wireSize, right, recvWire,
          sliceLen(received) * wireSize, left, where);
      if (status != DISTOPT_RT_OK)
        return status;
      bool last = s == n - 2;
      Combine combine = step;
      if (last && c.op == DISTOPT_RT_AVG)
        combine.resultDivisor = static_cast<double>(n);
      if (s == 0 && receiverScales)
        combine.wireScale = c.scale;
      void *dest = last ? finalOut : acc;
      combineChunk(recvWire, c.wire, input(received), dest, sliceLen(received),
                   c.type, combine);
    }
    // Every rank must hold the same bits: round the own chunk as the others
    // will receive it.
    if (convertWire) {
      convert(finalOut, c.type, sendWire, c.wire, sliceLen(r));
      convert(sendWire, c.wire, finalOut, c.type, sliceLen(r));
    }
  }
  return DISTOPT_RT_OK;
}

distopt_rt_status Communicator::ringAllGather(void *buffer, int64_t count,
                                              distopt_rt_dtype type,
                                              distopt_rt_dtype wire,
                                              const What &what) {
  int64_t n = size(), r = rank();
  if (n == 1)
    return DISTOPT_RT_OK;
  size_t typeSize = elementSize(type), wireSize = elementSize(wire);
  auto chunkPtr = [&](int64_t chunk) {
    return static_cast<char *>(buffer) + chunkBegin(count, chunk) * typeSize;
  };
  auto chunkLen = [&](int64_t chunk) {
    return chunkBegin(count, chunk + 1) - chunkBegin(count, chunk);
  };
  auto mod = [&](int64_t x) { return ((x % n) + n) % n; };
  int64_t left = mod(r - 1), right = mod(r + 1);
  bool convertWire = wire != type;
  int64_t maxChunk = 0;
  for (int64_t k = 0; k < n; ++k)
    maxChunk = std::max(maxChunk, chunkLen(k));
  // Converted for the wire, a chunk travels in slices (as in the
  // reduce-scatter): the wire buffers are a slice long. Otherwise it goes
  // whole, from the buffer into the buffer.
  int64_t slice = std::max<int64_t>(maxChunk, 1);
  if (convertWire)
    slice = std::min<int64_t>(
        slice,
        std::max<size_t>(1, ringSliceBytes() / std::max(typeSize, wireSize)));
  int64_t slices = std::max<int64_t>(1, (maxChunk + slice - 1) / slice);
  char *sendWire = convertWire ? scratch(1, slice * wireSize) : nullptr;
  char *recvWire = convertWire ? scratch(2, slice * wireSize) : nullptr;
  for (int64_t s = 0; s < n - 1; ++s) {
    int64_t sent = mod(r - s), received = mod(r - s - 1);
    for (int64_t p = 0; p < slices; ++p) {
      auto from = [&](int64_t chunk) {
        return std::min(p * slice, chunkLen(chunk));
      };
      auto len = [&](int64_t chunk) {
        return std::min((p + 1) * slice, chunkLen(chunk)) - from(chunk);
      };
      const void *payload = chunkPtr(sent) + from(sent) * typeSize;
      void *landing = chunkPtr(received) + from(received) * typeSize;
      if (convertWire) {
        convert(payload, type, sendWire, wire, len(sent));
        payload = sendWire;
        landing = recvWire;
      }
      auto where = [&] {
        std::string at = what.str() + " (ring step " + std::to_string(n + s) +
                         " of " + std::to_string(2 * (n - 1));
        if (slices > 1)
          at += ", slice " + std::to_string(p + 1) + " of " +
                std::to_string(slices);
        return at + ")";
      };
      distopt_rt_status status =
          transport->exchange(payload, len(sent) * wireSize, right, landing,
                              len(received) * wireSize, left, where);
      if (status != DISTOPT_RT_OK)
        return status;
      if (convertWire)
        convert(recvWire, wire, chunkPtr(received) + from(received) * typeSize,
                type, len(received));
    }
  }
  return DISTOPT_RT_OK;
}

distopt_rt_status Communicator::broadcast(const Collective &c,
                                          const What &what) {
  int64_t n = size(), r = rank();
  size_t wireSize = elementSize(c.wire);
  bool convertWire = c.wire != c.type;
  // The root rounds its own copy too, so that every rank holds the same.
  std::vector<char> wireBuffer;
  void *data = c.recv;
  if (convertWire) {
    wireBuffer.resize(c.count * wireSize);
    data = wireBuffer.data();
  }
  if (r == c.root)
    convert(c.send, c.type, data, c.wire, c.count);
  // Binomial tree rooted at `root`.
  int64_t relative = (r - c.root + n) % n;
  for (int64_t mask = 1; mask < n; mask <<= 1) {
    distopt_rt_status status = DISTOPT_RT_OK;
    auto where = [&] {
      return what.str() + " (tree level " + std::to_string(mask) + ")";
    };
    if (relative < mask) {
      if (relative + mask < n)
        status = transport->exchange(data, c.count * wireSize,
                                     (relative + mask + c.root) % n, nullptr, 0,
                                     -1, where);
    } else if (relative < 2 * mask) {
      status = transport->exchange(nullptr, 0, -1, data, c.count * wireSize,
                                   (relative - mask + c.root) % n, where);
    }
    if (status != DISTOPT_RT_OK)
      return status;
  }
  if (convertWire)
    convert(data, c.wire, c.recv, c.type, c.count);
  return DISTOPT_RT_OK;
}

distopt_rt_status Communicator::reduce(const Collective &c, const What &what) {
  int64_t n = size(), r = rank();
  size_t typeSize = elementSize(c.type), wireSize = elementSize(c.wire);
  // Reduce-scatter, then every rank sends its reduced chunk to the root.
  int64_t mine = chunkBegin(c.count, r + 1) - chunkBegin(c.count, r);
  std::vector<char> chunk(std::max<int64_t>(mine, 1) * typeSize);
  distopt_rt_status status = ringReduceScatter(c, c.count, chunk.data(), what);
  if (status != DISTOPT_RT_OK)
    return status;
  auto toRoot = [&] { return what.str() + " (gather to root)"; };
  if (r == c.root) {
    std::vector<char> landing;
    for (int64_t k = 0; k < n; ++k) {
      int64_t len = chunkBegin(c.count, k + 1) - chunkBegin(c.count, k);
      char *dest =
          static_cast<char *>(c.recv) + chunkBegin(c.count, k) * typeSize;
      if (k == r) {
        if (c.wire != c.type) { // the same rounding as the others' chunks
          landing.resize(len * wireSize);
          convert(chunk.data(), c.type, landing.data(), c.wire, len);
          convert(landing.data(), c.wire, dest, c.type, len);
        } else {
          std::memcpy(dest, chunk.data(), len * typeSize);
        }
        continue;
      }
      landing.resize(len * wireSize);
      status = transport->exchange(nullptr, 0, -1, landing.data(),
                                   len * wireSize, k, toRoot);
      if (status != DISTOPT_RT_OK)
        return status;
      convert(landing.data(), c.wire, dest, c.type, len);
    }
    return DISTOPT_RT_OK;
  }
  std::vector<char> wireChunk(mine * wireSize);
  convert(chunk.data(), c.type, wireChunk.data(), c.wire, mine);
  status = transport->exchange(wireChunk.data(), mine * wireSize, c.root,
                               nullptr, 0, -1, toRoot);
  if (status != DISTOPT_RT_OK)
    return status;
  // Other ranks keep their own input (the dialect's semantics).
  if (c.recv != c.send)
    std::memmove(c.recv, c.send, c.count * typeSize);
  return DISTOPT_RT_OK;
}

} // namespace distopt::rt
