//===- Collectives.cpp - the communicator's algorithms -----------*- C++
//-*-===//
//
// Ring reduce-scatter and all-gather over point-to-point exchanges, in
// slices of bounded size. Each ring step receives a slice (in the wire
// type) and combines it with the local contribution in one pass, scaling as
// it goes: premul_sum scales the local part, avg divides on the last step.
// All ranks end with identical bits. Recursive doubling for small
// all-reduces. Broadcast and reduce run as pipelined chains along the
// ranks (a binomial tree for small broadcasts). (Comm.cpp: requests, the
// worker, errors.)
//
//===----------------------------------------------------------------------===//

#include "Comm.h"
#include "Elements.h"

#include <algorithm>
#include <cmath>
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

/// What a link moves in one step's latency (latency x bandwidth), which a
/// chain's slices assume (chainSlice). 4 ranks on this machine's 2 cores
/// take 1-2 ms a step: 115-640 KB over the emulated 1-10 Gb/s links. There
/// 16 MiB broadcasts at 10 Gb/s took 56 ms in the slices this gives (12)
/// and 70 ms in 32 (1 Gb/s: 170 and 168 ms). A real link's is smaller
/// (20 us at 10 Gb/s: 25 KB), where more slices would gain (n - 2) / k.
constexpr double kChainLatencyBytes = 256 * 1024;

/// Broadcasts smaller than this use a binomial tree, log2(n) messages deep,
/// where a chain's n - 2 steps of fill cost about what its slices save: at
/// 1 MiB on 2 x 2 nodes the chain took 18 ms at 1 Gb/s where the tree took
/// 21, and 12 ms at 10 Gb/s where the tree took 8 (B2-cluster-rooted).
constexpr int64_t kSmallBroadcastBytes = 1024 * 1024;

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

/// What a step of a reduction (the ring's reduce-scatter, a reduce's chain)
/// sends of `len` elements: the partial result in `partial`, or for the
/// first sender its own `input`, which premul_sum scales into `partial`
/// first unless the receiver scales it; converted into `wireBuffer` where
/// the wire type differs.
const void *reductionPayload(const Collective &c, bool first,
                             bool receiverScales, const void *input,
                             void *partial, void *wireBuffer, int64_t len,
                             const Combine &step) {
  const void *payload = partial;
  if (first) {
    if (c.op == DISTOPT_RT_PREMUL_SUM && !receiverScales)
      combineChunk(nullptr, c.type, input, partial, len, c.type, step);
    else
      payload = input;
  }
  if (c.wire == c.type)
    return payload;
  convert(payload, c.type, wireBuffer, c.wire, len);
  return wireBuffer;
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
      const void *payload =
          reductionPayload(c, s == 0, receiverScales, input(sent), acc,
                           sendWire, sliceLen(sent), step);
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

/// The slice a chain (broadcast, reduce) moves per step, in elements of
/// `elementBytes`. A chain of k slices over n ranks takes k + n - 2 steps
/// of a latency and a slice each, least at k = sqrt((n - 2) x bytes /
/// kChainLatencyBytes); at most the ring's slice. Two ranks have no fill:
/// the ring's slice.
int64_t Communicator::chainSlice(int64_t count, size_t elementBytes) const {
  int64_t n = size();
  int64_t most = std::max<int64_t>(
      1, static_cast<int64_t>(ringSliceBytes() / elementBytes));
  if (n <= 2)
    return std::min(most, std::max<int64_t>(count, 1));
  double bytes = static_cast<double>(count) * static_cast<double>(elementBytes);
  int64_t slices = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(std::sqrt(
             static_cast<double>(n - 2) * bytes / kChainLatencyBytes))));
  return std::min(most, std::max<int64_t>(1, (count + slices - 1) / slices));
}

distopt_rt_status Communicator::broadcast(const Collective &c,
                                          const What &what) {
  int64_t n = size(), r = rank();
  size_t wireSize = elementSize(c.wire);
  bool convertWire = c.wire != c.type;
  // The root rounds its own copy too, so that every rank holds the same.
  std::vector<char> wireBuffer;
  char *data = static_cast<char *>(c.recv);
  if (convertWire) {
    wireBuffer.resize(c.count * wireSize);
    data = wireBuffer.data();
  }
  if (r == c.root && (convertWire || c.send != c.recv))
    convert(c.send, c.type, data, c.wire, c.count);
  int64_t bytes = c.count * static_cast<int64_t>(wireSize);
  distopt_rt_status status = DISTOPT_RT_OK;
  if (n <= 2 || bytes < kSmallBroadcastBytes) {
    // Binomial tree rooted at `root`: log2(n) messages deep.
    int64_t relative = (r - c.root + n) % n;
    for (int64_t mask = 1; mask < n && status == DISTOPT_RT_OK; mask <<= 1) {
      auto where = [&] {
        return what.str() + " (tree level " + std::to_string(mask) + ")";
      };
      if (relative < mask) {
        if (relative + mask < n)
          status =
              transport->exchange(data, bytes, (relative + mask + c.root) % n,
                                  nullptr, 0, -1, where);
      } else if (relative < 2 * mask) {
        status = transport->exchange(nullptr, 0, -1, data, bytes,
                                     (relative - mask + c.root) % n, where);
      }
    }
  } else {
    // A chain from the root along the ranks, pipelined in slices: each
    // rank forwards slice p while it receives slice p + 1, so the time is
    // about the payload's over one link, where a tree sends it log2(n)
    // times in a row and across nodes more than once.
    int64_t slice = chainSlice(c.count, wireSize);
    int64_t slices = (c.count + slice - 1) / slice;
    int64_t position = (r - c.root + n) % n; // 0: the root
    int64_t next = (r + 1) % n, prev = (r - 1 + n) % n;
    auto length = [&](int64_t p) {
      return (std::min(c.count, (p + 1) * slice) - p * slice) * wireSize;
    };
    int64_t steps = slices + n - 2;
    for (int64_t t = 0; t < steps && status == DISTOPT_RT_OK; ++t) {
      int64_t out = t - position, in = out + 1;
      bool sends = position < n - 1 && out >= 0 && out < slices;
      bool receives = position > 0 && in >= 0 && in < slices;
      if (!sends && !receives)
        continue;
      auto where = [&] {
        return what.str() + " (chain step " + std::to_string(t + 1) + " of " +
               std::to_string(steps) + ")";
      };
      status = transport->exchange(
          sends ? data + out * slice * wireSize : nullptr,
          sends ? length(out) : 0, sends ? next : -1,
          receives ? data + in * slice * wireSize : nullptr,
          receives ? length(in) : 0, receives ? prev : -1, where);
    }
  }
  if (status != DISTOPT_RT_OK)
    return status;
  if (convertWire)
    convert(data, c.wire, c.recv, c.type, c.count);
  return DISTOPT_RT_OK;
}

distopt_rt_status Communicator::reduce(const Collective &c, const What &what) {
  int64_t n = size(), r = rank();
  size_t typeSize = elementSize(c.type), wireSize = elementSize(c.wire);
  bool convertWire = c.wire != c.type;
  Combine step{c.op, c.op == DISTOPT_RT_PREMUL_SUM ? c.scale : 1.0, 1.0};
  int64_t slice = chainSlice(c.count, std::max(typeSize, wireSize));
  int64_t slices = std::max<int64_t>(1, (c.count + slice - 1) / slice);
  auto length = [&](int64_t p) {
    return std::min(c.count, (p + 1) * slice) - p * slice;
  };
  auto input = [&](int64_t p) {
    return static_cast<const char *>(c.send) + p * slice * typeSize;
  };
  auto output = [&](int64_t p) {
    return static_cast<char *>(c.recv) + p * slice * typeSize;
  };
  char *sendWire = convertWire ? scratch(2, slice * wireSize) : nullptr;
  // The root's result, rounded as it would travel: as an all_reduce's.
  auto roundAsWire = [&](int64_t p) {
    if (!convertWire)
      return;
    convert(output(p), c.type, sendWire, c.wire, length(p));
    convert(sendWire, c.wire, output(p), c.type, length(p));
  };
  if (n == 1) {
    for (int64_t p = 0; p < slices; ++p) {
      combineChunk(nullptr, c.type, input(p), output(p), length(p), c.type,
                   step);
      roundAsWire(p);
    }
    return DISTOPT_RT_OK;
  }
  // A chain from the rank after the root along the ranks to the root,
  // pipelined in slices: each rank adds its part of slice p to the partial
  // sum it received and passes it on while it receives slice p + 1. Every
  // element is summed in the order the ring reduce-scatter sums the root's
  // chunk (the same bits as an all_reduce there), each link carries the
  // payload once, and the time is about the payload's over one link.
  int64_t position = (r - c.root - 1 + 2 * n) % n; // n - 1: the root
  int64_t next = (r + 1) % n, prev = (r - 1 + n) % n;
  bool root = position == n - 1;
  // The partial sum in the data type (sent at a step, formed again after
  // the step's exchange completes) and the slice received.
  char *partial = scratch(0, slice * typeSize);
  char *recvWire = scratch(1, slice * wireSize);
  // premul_sum in f32/f64 without a wire type: the first rank sends its
  // input as it is and the next scales it in its combine (as in the ring).
  bool receiverScales = c.op == DISTOPT_RT_PREMUL_SUM && !convertWire &&
                        (c.type == DISTOPT_RT_F32 || c.type == DISTOPT_RT_F64);
  int64_t steps = slices + n - 2;
  for (int64_t t = 0; t < steps; ++t) {
    int64_t out = t - position, in = out + 1;
    bool sends = !root && out >= 0 && out < slices;
    bool receives = position > 0 && in >= 0 && in < slices;
    if (!sends && !receives)
      continue;
    const void *payload =
        sends ? reductionPayload(c, position == 0, receiverScales, input(out),
                                 partial, sendWire, length(out), step)
              : nullptr;
    auto where = [&] {
      return what.str() + " (chain step " + std::to_string(t + 1) + " of " +
             std::to_string(steps) + ")";
    };
    distopt_rt_status status = transport->exchange(
        payload, sends ? length(out) * wireSize : 0, sends ? next : -1,
        receives ? recvWire : nullptr, receives ? length(in) * wireSize : 0,
        receives ? prev : -1, where);
    if (status != DISTOPT_RT_OK)
      return status;
    if (!receives)
      continue;
    Combine combine = step;
    if (root && c.op == DISTOPT_RT_AVG)
      combine.resultDivisor = static_cast<double>(n);
    if (position == 1 && receiverScales)
      combine.wireScale = c.scale;
    combineChunk(recvWire, c.wire, input(in), root ? output(in) : partial,
                 length(in), c.type, combine);
    if (root)
      roundAsWire(in);
  }
  // Other ranks keep their own input (the dialect's semantics).
  if (!root && c.recv != c.send)
    std::memmove(c.recv, c.send, c.count * typeSize);
  return DISTOPT_RT_OK;
}

} // namespace distopt::rt
