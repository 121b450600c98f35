//===- collectives_digest.cpp - distopt-rt-test's digest mode ---*- C++ -*-===//
//
// Hashes of collectives over pseudo-random values: two runs that add every
// element in the same order print the same lines (collectives.test runs it
// with the ring and the chains in slices and unsliced).
//
//===----------------------------------------------------------------------===//

#include "collectives_test.h"
#include "device_staging.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

using namespace device_staging;

namespace collectives_test {

/// `digest`: all-reduce (in place and not), reduce-scatter, all-gather,
/// reduce (to rank 0) and broadcast (from the last rank) of pseudo-random
/// values (rounding in every sum, unlike check's exact inputs), printing a
/// hash of each result: two runs print the same lines only if they add
/// every element in the same order (collectives.test compares the ring and
/// the chains in slices with them unsliced).
void digestMode(distopt_rt_comm *comm) {
  auto hash = [](const std::vector<char> &bytes) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (char c : bytes)
      h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    return static_cast<unsigned long long>(h);
  };
  uint64_t state = 88172645463325252ull + static_cast<uint64_t>(myRank);
  auto draw = [&] { // xorshift: a double in (-1, 1) with 52 random bits
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return static_cast<double>(state >> 11) / 4503599627370496.0 - 1.0;
  };
  struct Case {
    distopt_rt_dtype type, wire;
    distopt_rt_reduction op;
  };
  const Case cases[] = {{DISTOPT_RT_F32, DISTOPT_RT_F32, DISTOPT_RT_SUM},
                        {DISTOPT_RT_F32, DISTOPT_RT_F32, DISTOPT_RT_AVG},
                        {DISTOPT_RT_F32, DISTOPT_RT_F32, DISTOPT_RT_PREMUL_SUM},
                        {DISTOPT_RT_F32, DISTOPT_RT_BF16, DISTOPT_RT_SUM},
                        {DISTOPT_RT_F64, DISTOPT_RT_F64, DISTOPT_RT_AVG},
                        {DISTOPT_RT_BF16, DISTOPT_RT_BF16, DISTOPT_RT_SUM},
                        {DISTOPT_RT_F16, DISTOPT_RT_F16, DISTOPT_RT_AVG}};
  for (const Case &c : cases)
    for (int64_t count : {int64_t(3), int64_t(1001), int64_t(50003)}) {
      std::vector<char> send = buffer(c.type, count),
                        recv = buffer(c.type, count),
                        full = buffer(c.type, count * worldSize),
                        part = buffer(c.type, count),
                        all = buffer(c.type, count * worldSize),
                        reduced = buffer(c.type, count),
                        broadcasted = buffer(c.type, count);
      for (int64_t i = 0; i < count; ++i)
        store(c.type, send.data(), i, draw());
      for (int64_t i = 0; i < count * worldSize; ++i)
        store(c.type, full.data(), i, draw());
      std::vector<char> inPlace = send;
      bool ok = allReduce(comm, send.data(), recv.data(), count, c.type, c.op,
                          0.3, c.wire, false) == DISTOPT_RT_OK &&
                allReduce(comm, inPlace.data(), inPlace.data(), count, c.type,
                          c.op, 0.3, c.wire, true) == DISTOPT_RT_OK &&
                reduceScatter(comm, full.data(), part.data(), count, c.type,
                              c.op, 0.3, c.wire, worldSize) == DISTOPT_RT_OK &&
                allGather(comm, send.data(), all.data(), count, c.type, c.wire,
                          false, worldSize) == DISTOPT_RT_OK &&
                reduce(comm, send.data(), reduced.data(), count, c.type, c.op,
                       0.3, 0, c.wire) == DISTOPT_RT_OK &&
                broadcast(comm, part.data(), broadcasted.data(), count, c.type,
                          worldSize - 1, c.wire) == DISTOPT_RT_OK;
      expect(ok, std::string("digest: ") + distopt_rt_last_error());
      std::printf("rank %lld dtype=%d wire=%d op=%d count=%lld: %016llx "
                  "%016llx %016llx %016llx %016llx %016llx\n",
                  (long long)myRank, c.type, c.wire, c.op, (long long)count,
                  hash(recv), hash(inPlace), hash(part), hash(all),
                  hash(reduced), hash(broadcasted));
    }
}

} // namespace collectives_test
