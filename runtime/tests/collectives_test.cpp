//===- collectives_test.cpp - the runtime's collectives, checked -*- C++
//-*-===//
//
// Run under mpirun (or alone with --backend=single). --backend=nccl and
// --backend=host-staged run the collectives on device copies of the
// buffers (NCCL: one GPU per rank). Modes:
//   check     every collective x dtype x reduction x wire x size, in place
//             and not, sync and async, against a local simulation of all
//             ranks. Inputs are small half-integers, so every sum, product,
//             scaling and division by the world size is exact in every type:
//             results must match bit for bit, which also shows that all
//             ranks hold the same bits.
//   groups    `check` inside process groups split from the world (parts of
//             d consecutive ranks, parts of ranks n/d apart as on a mesh's
//             leading axis, the world in reverse order), each against a
//             simulation of its part; then collectives of several groups and
//             the world in flight at once.
//   group-timeout  as timeout, in a group that reverses the world's ranks:
//             the error names the group, the rank in it and the world rank.
//   split-timeout  rank 1 never splits: rank 0's split fails with a timeout.
//   invalid   every kind of bad argument gives DISTOPT_RT_INVALID_ARGUMENT.
//   timeout   rank 1 never joins; rank 0 must fail with DISTOPT_RT_TIMEOUT
//             naming itself, the operation and rank 1 within 2x the timeout.
//   mismatch  a communicator for one rank more than the run has.
//   kill      the last rank is SIGKILLed --kill-after-ms into a loop of
//             all-reduces; every survivor must fail naming itself and the
//             operation within 2x the timeout of its last collective.
// Prints "N passed, N failed" and exits non-zero on any failure.
//
//===----------------------------------------------------------------------===//

#include "collectives_test.h"
#include "device_staging.h"
#include "distopt_rt.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace device_staging;
using namespace collectives_test;

namespace {
int passed = 0, failed = 0;
std::string lastDifference; // where the last failed `same` found one

} // namespace

namespace collectives_test {
int64_t myRank = 0, worldSize = 1;

void expect(bool ok, const std::string &what) {
  if (ok) {
    ++passed;
    return;
  }
  ++failed;
  std::fprintf(stderr, "rank %lld: FAILED: %s%s\n", (long long)myRank,
               what.c_str(), lastDifference.c_str());
  lastDifference.clear();
}
// Element codecs for the test's reference computations (values are exact).
void store(distopt_rt_dtype t, void *base, int64_t i, double v) {
  char *p = static_cast<char *>(base) + i * elementBytes(t);
  switch (t) {
  case DISTOPT_RT_F32: {
    float f = static_cast<float>(v);
    std::memcpy(p, &f, 4);
    break;
  }
  case DISTOPT_RT_F64:
    std::memcpy(p, &v, 8);
    break;
  case DISTOPT_RT_BF16: {
    float f = static_cast<float>(v); // exact: the test's values fit bf16
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    uint16_t h = static_cast<uint16_t>(bits >> 16);
    std::memcpy(p, &h, 2);
    break;
  }
  case DISTOPT_RT_F16: {
    // Exact for the test's values: |v| < 2048, multiples of 2^-4.
    uint16_t h = 0;
    if (v != 0) {
      uint16_t sign = v < 0 ? 0x8000 : 0;
      int e;
      double m = std::frexp(std::fabs(v), &e); // v = m 2^e, m in [0.5,1)
      uint16_t exp = static_cast<uint16_t>(e + 14);
      uint16_t mant = static_cast<uint16_t>(std::ldexp(m, 11)) & 0x3FF;
      h = sign | static_cast<uint16_t>(exp << 10) | mant;
    }
    std::memcpy(p, &h, 2);
    break;
  }
  case DISTOPT_RT_I32: {
    int32_t x = static_cast<int32_t>(v);
    std::memcpy(p, &x, 4);
    break;
  }
  case DISTOPT_RT_I64: {
    int64_t x = static_cast<int64_t>(v);
    std::memcpy(p, &x, 8);
    break;
  }
  }
}

std::vector<char> buffer(distopt_rt_dtype t, int64_t count) {
  return std::vector<char>(std::max<int64_t>(count, 1) * elementBytes(t));
}

} // namespace collectives_test

namespace {

/// The test's input: small half-integers (integers for integer types).
double input(distopt_rt_dtype t, int64_t rank, int64_t i) {
  int64_t k = (rank * 7 + i * 3) % 7 - 3; // -3..3
  bool integer = t == DISTOPT_RT_I32 || t == DISTOPT_RT_I64;
  return integer ? static_cast<double>(k) : k * 0.5;
}

/// Inputs for prod: 1, 2, -1 or 0.5, so products of up to 4 stay exact.
double prodInput(distopt_rt_dtype t, int64_t rank, int64_t i) {
  static const double values[] = {1, 2, -1, 0.5};
  double v = values[(rank + i) % 4];
  bool integer = t == DISTOPT_RT_I32 || t == DISTOPT_RT_I64;
  return integer && v == 0.5 ? 3 : v;
}

double reduceAll(distopt_rt_dtype t, distopt_rt_reduction op, double scale,
                 int64_t i) {
  double acc = 0;
  for (int64_t r = 0; r < worldSize; ++r) {
    double x = op == DISTOPT_RT_PROD ? prodInput(t, r, i) : input(t, r, i);
    if (r == 0) {
      acc = op == DISTOPT_RT_PREMUL_SUM ? scale * x : x;
      continue;
    }
    switch (op) {
    case DISTOPT_RT_MIN:
      acc = std::min(acc, x);
      break;
    case DISTOPT_RT_MAX:
      acc = std::max(acc, x);
      break;
    case DISTOPT_RT_PROD:
      acc *= x;
      break;
    case DISTOPT_RT_PREMUL_SUM:
      acc += scale * x;
      break;
    default:
      acc += x;
    }
  }
  if (op == DISTOPT_RT_AVG) {
    bool integer = t == DISTOPT_RT_I32 || t == DISTOPT_RT_I64;
    // Division in the compute type: exact for the values when the world
    // size is a power of two; otherwise rounded like the runtime does.
    if (integer)
      return static_cast<double>(static_cast<int64_t>(acc) / worldSize);
    if (t == DISTOPT_RT_F64)
      return acc / worldSize;
    return static_cast<float>(acc) / static_cast<float>(worldSize);
  }
  return acc;
}

std::string describe(const char *what, distopt_rt_dtype t,
                     distopt_rt_reduction op, distopt_rt_dtype wire,
                     int64_t count, bool inPlace, bool async) {
  char text[200];
  std::snprintf(text, sizeof text, "%s dtype=%d op=%d wire=%d count=%lld%s%s",
                what, t, op, wire, (long long)count, inPlace ? " in-place" : "",
                async ? " async" : "");
  return text;
}

bool same(const std::vector<char> &a, const std::vector<char> &b,
          size_t bytes) {
  lastDifference.clear();
  if (std::memcmp(a.data(), b.data(), bytes) == 0)
    return true;
  size_t at = 0;
  while (a[at] == b[at])
    ++at;
  char text[160];
  std::snprintf(text, sizeof text, " (first difference at byte %zu of %zu:", at,
                bytes);
  lastDifference = text;
  for (const std::vector<char> *v : {&a, &b}) {
    lastDifference += v == &a ? " got" : ", want";
    for (size_t i = at & ~size_t(7); i < std::min(bytes, (at & ~size_t(7)) + 8);
         ++i) {
      std::snprintf(text, sizeof text, " %02x",
                    static_cast<unsigned char>((*v)[i]));
      lastDifference += text;
    }
  }
  lastDifference += ")";
  return false;
}

bool compresses = true; // the backend compresses on the wire

/// `brief`: fewer types and sizes (one of each kind of path), for the many
/// groups of `groups`, whose collectives run the same algorithms.
void checkMode(distopt_rt_comm *comm, bool brief = false) {
  std::vector<distopt_rt_dtype> types = {DISTOPT_RT_F32,  DISTOPT_RT_F64,
                                         DISTOPT_RT_BF16, DISTOPT_RT_F16,
                                         DISTOPT_RT_I32,  DISTOPT_RT_I64};
  const distopt_rt_reduction ops[] = {DISTOPT_RT_SUM,  DISTOPT_RT_AVG,
                                      DISTOPT_RT_MIN,  DISTOPT_RT_MAX,
                                      DISTOPT_RT_PROD, DISTOPT_RT_PREMUL_SUM};
  // 100003 elements: past the native small-message path, uneven chunks.
  std::vector<int64_t> counts = {0, 1, 5, 1000, 100003};
  if (brief) {
    types = {DISTOPT_RT_F32, DISTOPT_RT_BF16, DISTOPT_RT_I64};
    counts = {0, 5, 100003};
  }
  const double scale = 0.25;

  for (distopt_rt_dtype t : types) {
    bool isFloat = t != DISTOPT_RT_I32 && t != DISTOPT_RT_I64;
    std::vector<distopt_rt_dtype> wires = {t};
    if (compresses && (t == DISTOPT_RT_F32 || t == DISTOPT_RT_F64)) {
      wires.push_back(DISTOPT_RT_BF16);
      wires.push_back(DISTOPT_RT_F16);
    }
    for (distopt_rt_dtype wire : wires)
      for (int64_t count : counts)
        for (int variant = 0; variant < 4; ++variant) {
          bool inPlace = variant & 1, async = variant & 2;
          size_t bytes = count * elementBytes(t);
          for (distopt_rt_reduction op : ops) {
            if (op == DISTOPT_RT_PREMUL_SUM && !isFloat)
              continue;
            // all_reduce
            std::vector<char> send = buffer(t, count), recv = buffer(t, count),
                              want = buffer(t, count);
            for (int64_t i = 0; i < count; ++i) {
              store(t, send.data(), i,
                    op == DISTOPT_RT_PROD ? prodInput(t, myRank, i)
                                          : input(t, myRank, i));
              store(t, want.data(), i, reduceAll(t, op, scale, i));
            }
            void *out = inPlace ? send.data() : recv.data();
            distopt_rt_status status = allReduce(comm, send.data(), out, count,
                                                 t, op, scale, wire, async);
            expect(status == DISTOPT_RT_OK &&
                       same(inPlace ? send : recv, want, bytes),
                   describe("all_reduce", t, op, wire, count, inPlace, async) +
                       " " + distopt_rt_last_error());

            // reduce_scatter: `count` elements per rank.
            std::vector<char> full = buffer(t, count * worldSize),
                              part = buffer(t, count),
                              wantPart = buffer(t, count);
            for (int64_t i = 0; i < count * worldSize; ++i)
              store(t, full.data(), i,
                    op == DISTOPT_RT_PROD ? prodInput(t, myRank, i)
                                          : input(t, myRank, i));
            for (int64_t i = 0; i < count; ++i)
              store(t, wantPart.data(), i,
                    reduceAll(t, op, scale, myRank * count + i));
            status = reduceScatter(comm, full.data(), part.data(), count, t, op,
                                   scale, wire, worldSize);
            expect(
                status == DISTOPT_RT_OK && same(part, wantPart, bytes),
                describe("reduce_scatter", t, op, wire, count, false, false) +
                    " " + distopt_rt_last_error());

            // reduce to the last rank; the others keep their input.
            int64_t root = worldSize - 1;
            status = reduce(comm, send.data(), recv.data(), count, t, op, scale,
                            root, wire);
            std::vector<char> own = buffer(t, count);
            for (int64_t i = 0; i < count; ++i)
              store(t, own.data(), i,
                    op == DISTOPT_RT_PROD ? prodInput(t, myRank, i)
                                          : input(t, myRank, i));
            if (!inPlace)
              expect(status == DISTOPT_RT_OK &&
                         same(recv, myRank == root ? want : own, bytes),
                     describe("reduce", t, op, wire, count, false, false) +
                         " " + distopt_rt_last_error());
          }
          // all_gather and broadcast
          std::vector<char> mine = buffer(t, count),
                            all = buffer(t, count * worldSize),
                            wantAll = buffer(t, count * worldSize);
          for (int64_t i = 0; i < count; ++i)
            store(t, mine.data(), i, input(t, myRank, i));
          for (int64_t r = 0; r < worldSize; ++r)
            for (int64_t i = 0; i < count; ++i)
              store(t, wantAll.data(), r * count + i, input(t, r, i));
          // In place: this rank's part already in its slot of the output.
          char *slot = all.data() + myRank * bytes;
          if (inPlace)
            std::memcpy(slot, mine.data(), bytes);
          const void *sent = inPlace ? slot : mine.data();
          distopt_rt_status status = allGather(comm, sent, all.data(), count, t,
                                               wire, async, worldSize);
          expect(status == DISTOPT_RT_OK &&
                     same(all, wantAll, bytes * worldSize),
                 describe("all_gather", t, DISTOPT_RT_SUM, wire, count, inPlace,
                          async) +
                     " " + distopt_rt_last_error());
          int64_t root = worldSize > 1 ? 1 : 0;
          std::vector<char> got = buffer(t, count), wantRoot = buffer(t, count);
          for (int64_t i = 0; i < count; ++i)
            store(t, wantRoot.data(), i, input(t, root, i));
          status =
              broadcast(comm, mine.data(), inPlace ? mine.data() : got.data(),
                        count, t, root, wire);
          expect(status == DISTOPT_RT_OK &&
                     same(inPlace ? mine : got, wantRoot, bytes),
                 describe("broadcast", t, DISTOPT_RT_SUM, wire, count, inPlace,
                          false) +
                     " " + distopt_rt_last_error());
        }
  }

  // Broadcast and reduce past the tree's size (1 MiB, on the bf16 wire
  // too) run as chains in slices; every root, so that the chain starts and
  // ends everywhere, in place at the odd ones.
  const int64_t chainCount = 600011;
  for (distopt_rt_dtype t : {DISTOPT_RT_F32, DISTOPT_RT_F64})
    for (distopt_rt_dtype wire : {t, DISTOPT_RT_BF16})
      for (int64_t root = 0; root < worldSize; ++root) {
        if (wire != t && !compresses)
          continue;
        size_t bytes = chainCount * elementBytes(t);
        std::vector<char> mine = buffer(t, chainCount),
                          got = buffer(t, chainCount),
                          want = buffer(t, chainCount);
        for (int64_t i = 0; i < chainCount; ++i) {
          store(t, mine.data(), i, input(t, myRank, i));
          store(t, want.data(), i, input(t, root, i));
        }
        bool inPlace = root % 2 == 1;
        std::vector<char> &out = inPlace ? mine : got;
        distopt_rt_status status =
            broadcast(comm, mine.data(), out.data(), chainCount, t, root, wire);
        expect(status == DISTOPT_RT_OK && same(out, want, bytes),
               describe("chain broadcast", t, DISTOPT_RT_SUM, wire, chainCount,
                        inPlace, false) +
                   " root=" + std::to_string(root) + " " +
                   distopt_rt_last_error());
        for (distopt_rt_reduction op :
             {DISTOPT_RT_SUM, DISTOPT_RT_AVG, DISTOPT_RT_PREMUL_SUM}) {
          for (int64_t i = 0; i < chainCount; ++i) {
            store(t, mine.data(), i, input(t, myRank, i));
            store(t, want.data(), i,
                  myRank == root ? reduceAll(t, op, scale, i)
                                 : input(t, myRank, i));
          }
          status = reduce(comm, mine.data(), out.data(), chainCount, t, op,
                          scale, root, wire);
          expect(status == DISTOPT_RT_OK && same(out, want, bytes),
                 describe("chain reduce", t, op, wire, chainCount, inPlace,
                          false) +
                     " root=" + std::to_string(root) + " " +
                     distopt_rt_last_error());
        }
      }

  // Several requests in flight complete in order, with a sync call behind
  // (host buffers).
  if (onDevice)
    return;
  std::vector<std::vector<float>> data(4, std::vector<float>(70000));
  std::vector<distopt_rt_request *> requests(3);
  for (int k = 0; k < 4; ++k)
    for (size_t i = 0; i < data[k].size(); ++i)
      data[k][i] = static_cast<float>((k + 1) * (myRank + 1));
  bool ok = true;
  for (int k = 0; k < 3; ++k)
    ok &= distopt_rt_all_reduce_start(comm, data[k].data(), data[k].data(),
                                      70000, DISTOPT_RT_F32, DISTOPT_RT_SUM,
                                      1.0, DISTOPT_RT_F32,
                                      &requests[k]) == DISTOPT_RT_OK;
  ok &= distopt_rt_all_reduce(comm, data[3].data(), data[3].data(), 70000,
                              DISTOPT_RT_F32, DISTOPT_RT_SUM, 1.0,
                              DISTOPT_RT_F32) == DISTOPT_RT_OK;
  for (int k = 0; k < 3; ++k)
    ok &= distopt_rt_wait(requests[k]) == DISTOPT_RT_OK;
  float ranks = static_cast<float>(worldSize * (worldSize + 1) / 2);
  for (int k = 0; k < 4; ++k)
    ok &= data[k][12345] == (k + 1) * ranks;
  expect(ok, std::string("overlapping requests: ") + distopt_rt_last_error());
}

/// `check` inside every part of the world's groups. The simulation uses the
/// rank and size in the group, as a rank of a part sees it.
void groupsMode(distopt_rt_comm *world) {
  const int64_t worldRank = myRank, worldN = worldSize;
  struct Layout {
    std::string name;
    int64_t color, key, size;
  };
  std::vector<Layout> layouts;
  for (int64_t d = 1; d < worldN; ++d) {
    if (worldN % d != 0)
      continue;
    // d consecutive ranks, in reverse order within the part.
    layouts.push_back({"@blocks" + std::to_string(d), worldRank / d,
                       d - 1 - worldRank % d, d});
    // Ranks n/d apart: axis 0 of a [d, n/d] mesh.
    layouts.push_back({"@strided" + std::to_string(d), worldRank % (worldN / d),
                       worldRank / (worldN / d), d});
  }
  layouts.push_back({"@reversed", 0, worldN - 1 - worldRank, worldN});
  for (const Layout &layout : layouts) {
    distopt_rt_comm *group = nullptr;
    distopt_rt_status status = distopt_rt_comm_split(
        world, layout.color, layout.key, layout.name.c_str(), &group);
    int64_t rank = -1, size = -1;
    if (status == DISTOPT_RT_OK) {
      distopt_rt_comm_rank(group, &rank);
      distopt_rt_comm_size(group, &size);
    }
    expect(status == DISTOPT_RT_OK && rank == layout.key && size == layout.size,
           "split " + layout.name + ": rank " + std::to_string(rank) +
               " size " + std::to_string(size) + " " + distopt_rt_last_error());
    if (status != DISTOPT_RT_OK)
      continue;
    myRank = rank;
    worldSize = size;
    checkMode(group, /*brief=*/true);
    myRank = worldRank;
    worldSize = worldN;
    distopt_rt_comm_destroy(group);
  }

  // Two groups (a mesh's two axes) and the world with collectives in flight
  // at once, each on its own worker thread: the groups' traffic must not
  // mix, nor wait on the others'.
  int64_t d = 1;
  for (int64_t k = 2; k < worldN; ++k)
    if (worldN % k == 0) {
      d = k;
      break;
    }
  distopt_rt_comm *rows = nullptr, *cols = nullptr;
  bool ok = distopt_rt_comm_split(world, worldRank / d, worldRank % d, "@rows",
                                  &rows) == DISTOPT_RT_OK &&
            distopt_rt_comm_split(world, worldRank % d, worldRank / d, "@cols",
                                  &cols) == DISTOPT_RT_OK;
  const int64_t n = 300000;
  std::vector<float> a(n, float(worldRank + 1)), b(n, float(worldRank + 1)),
      c(n, float(worldRank + 1));
  distopt_rt_request *ra = nullptr, *rb = nullptr;
  ok = ok &&
       distopt_rt_all_reduce_start(world, a.data(), a.data(), n, DISTOPT_RT_F32,
                                   DISTOPT_RT_SUM, 1.0, DISTOPT_RT_F32,
                                   &ra) == DISTOPT_RT_OK &&
       distopt_rt_all_reduce_start(rows, b.data(), b.data(), n, DISTOPT_RT_F32,
                                   DISTOPT_RT_SUM, 1.0, DISTOPT_RT_F32,
                                   &rb) == DISTOPT_RT_OK &&
       distopt_rt_all_reduce(cols, c.data(), c.data(), n, DISTOPT_RT_F32,
                             DISTOPT_RT_SUM, 1.0,
                             DISTOPT_RT_F32) == DISTOPT_RT_OK &&
       distopt_rt_wait(rb) == DISTOPT_RT_OK &&
       distopt_rt_wait(ra) == DISTOPT_RT_OK;
  // Sums of (world rank + 1) over the world, this rank's row and column.
  float all = 0, row = 0, col = 0;
  for (int64_t r = 0; r < worldN; ++r) {
    all += r + 1;
    row += r / d == worldRank / d ? r + 1 : 0;
    col += r % d == worldRank % d ? r + 1 : 0;
  }
  ok = ok && a[0] == all && a[n - 1] == all && b[0] == row && b[n - 1] == row &&
       c[0] == col && c[n - 1] == col;
  expect(ok, std::string("world, rows and columns in flight together: ") +
                 distopt_rt_last_error());
  if (rows)
    distopt_rt_comm_destroy(rows);
  if (cols)
    distopt_rt_comm_destroy(cols);
}

void invalidMode(distopt_rt_comm *comm) {
  float x[4] = {0};
  auto invalid = [&](distopt_rt_status status, const char *what,
                     const char *needle) {
    std::string message = distopt_rt_last_error();
    expect(status == DISTOPT_RT_INVALID_ARGUMENT &&
               message.find(needle) != std::string::npos,
           std::string(what) + ": got status " + std::to_string(status) +
               ", message '" + message + "'");
  };
  invalid(distopt_rt_all_reduce(nullptr, x, x, 4, DISTOPT_RT_F32,
                                DISTOPT_RT_SUM, 1, DISTOPT_RT_F32),
          "null communicator",
          "distopt_rt_all_reduce: the communicator is null");
  distopt_rt_comm *group = nullptr;
  invalid(distopt_rt_comm_split(nullptr, 0, 0, "@g", &group),
          "split of a null communicator",
          "distopt_rt_comm_split: null communicator");
  invalid(distopt_rt_comm_split(comm, -1, 0, "@g", &group), "negative color",
          "negative color -1");
  int64_t layout[2] = {0, 0};
  invalid(distopt_rt_group(1, 1, nullptr, "@g", &group), "group, null layout",
          "null layout");
  invalid(distopt_rt_group(1, 0, layout, "@g", &group), "group of no ranks",
          "a size below 1");
  invalid(distopt_rt_all_reduce(comm, nullptr, x, 4, DISTOPT_RT_F32,
                                DISTOPT_RT_SUM, 1, DISTOPT_RT_F32),
          "null buffer", "a null buffer for 4 elements");
  invalid(distopt_rt_all_reduce(comm, x, x, -1, DISTOPT_RT_F32, DISTOPT_RT_SUM,
                                1, DISTOPT_RT_F32),
          "negative count", "negative count -1");
  invalid(distopt_rt_all_reduce(comm, x, x, 4, (distopt_rt_dtype)42,
                                DISTOPT_RT_SUM, 1, (distopt_rt_dtype)42),
          "bad dtype", "unknown dtype 42");
  invalid(distopt_rt_all_reduce(comm, x, x, 4, DISTOPT_RT_F32,
                                (distopt_rt_reduction)9, 1, DISTOPT_RT_F32),
          "bad reduction", "unknown reduction 9");
  invalid(distopt_rt_all_reduce(comm, x, x, 4, DISTOPT_RT_I32,
                                DISTOPT_RT_PREMUL_SUM, 0.5, DISTOPT_RT_I32),
          "premul on integers", "premul_sum needs floating-point data");
  invalid(distopt_rt_all_reduce(comm, x, x, 4, DISTOPT_RT_F32,
                                DISTOPT_RT_PREMUL_SUM, NAN, DISTOPT_RT_F32),
          "premul NaN scale", "a finite scale");
  invalid(distopt_rt_all_reduce(comm, x, x, 4, DISTOPT_RT_I32, DISTOPT_RT_SUM,
                                1, DISTOPT_RT_BF16),
          "wire on integers", "a bf16 wire needs floating-point data");
  invalid(distopt_rt_broadcast(comm, x, x, 4, DISTOPT_RT_F32, worldSize,
                               DISTOPT_RT_F32),
          "root out of range", "is out of range");
  invalid(distopt_rt_all_reduce_start(comm, x, x, 4, DISTOPT_RT_F32,
                                      DISTOPT_RT_SUM, 1, DISTOPT_RT_F32,
                                      nullptr),
          "null request", "null request pointer");
  // Sending from elsewhere in the output than this rank's slot.
  std::vector<float> all(2 * worldSize + 1);
  invalid(distopt_rt_all_gather(comm, all.data() + 2 * myRank + 1, all.data(),
                                2, DISTOPT_RT_F32, DISTOPT_RT_F32),
          "all_gather overlap", "overlaps the receive buffer");
  invalid(distopt_rt_wait(nullptr), "null wait", "the request is null");
  distopt_rt_comm *other = nullptr;
  invalid(distopt_rt_comm_create("tcp", 0, 1, &other), "unknown backend",
          "unknown backend 'tcp'");
  invalid(distopt_rt_comm_create("single", 0, 0, &other), "zero timeout",
          "the timeout must be a positive number of seconds, at most 1e9, "
          "not 0");
  invalid(distopt_rt_comm_create("single", 0, std::nan(""), &other),
          "NaN timeout", "not nan");
  invalid(distopt_rt_comm_create("single", 0, HUGE_VAL, &other),
          "infinite timeout", "not inf");
}

} // namespace

/// The last rank dies by SIGKILL `killAfterMs` into a loop of 4 MiB
/// all-reduces, so at a different point of a collective in every trial;
/// every survivor must fail with an error naming itself, the operation and
/// the dead rank, long before the timeout (a dead process on this machine
/// is noticed while waiting, not by the deadline).
void killMode(distopt_rt_comm *comm, double timeout, int killAfterMs) {
  std::vector<float> data(1 << 20, 0.0f);
  if (myRank == worldSize - 1)
    std::thread([killAfterMs] {
      std::this_thread::sleep_for(std::chrono::milliseconds(killAfterMs));
      std::raise(SIGKILL);
    }).detach();
  auto last = std::chrono::steady_clock::now();
  distopt_rt_status status = DISTOPT_RT_OK;
  int completed = 0;
  while ((status = distopt_rt_all_reduce(
              comm, data.data(), data.data(), data.size(), DISTOPT_RT_F32,
              DISTOPT_RT_SUM, 1, DISTOPT_RT_F32)) == DISTOPT_RT_OK) {
    last = std::chrono::steady_clock::now();
    ++completed;
  }
  double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - last)
          .count();
  std::string message = distopt_rt_last_error();
  std::printf("rank %lld error after %d all-reduces, %.2f s after the last: "
              "%s\n",
              (long long)myRank, completed, waited, message.c_str());
  std::string me = "rank " + std::to_string(myRank) + " of " +
                   std::to_string(worldSize) + ": all_reduce of 1048576 f32";
  expect(status == DISTOPT_RT_PEER_DIED, "the dead-peer status");
  expect(message.find(me) != std::string::npos,
         "the error names the rank and the operation");
  expect(message.find("rank " + std::to_string(worldSize - 1) + " (process") !=
             std::string::npos,
         "the error names the dead rank");
  expect(waited < timeout / 4, "failed long before the timeout");
}

int main(int argc, char **argv) {
  std::string mode = "check", backend = "mpi";
  double timeout = 60;
  int killAfterMs = 300;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--backend=", 0) == 0)
      backend = arg.substr(10);
    else if (arg.rfind("--timeout=", 0) == 0)
      timeout = std::atof(arg.c_str() + 10);
    else if (arg.rfind("--kill-after-ms=", 0) == 0)
      killAfterMs = std::atoi(arg.c_str() + 16);
    else
      mode = arg;
  }
  distopt_rt_comm *comm = nullptr;
  if (backend == "nccl" || backend == "host-staged") {
    onDevice = true;
    compresses = backend != "nccl"; // NCCL refuses to
    if (distopt_rt_cuda_init(-1) != DISTOPT_RT_OK) {
      std::fprintf(stderr, "no GPU: %s\n", distopt_rt_last_error());
      return 2;
    }
  }
  if (mode == "mismatch") {
    distopt_rt_status status =
        distopt_rt_comm_create(backend.c_str(), 0, 60, &comm);
    int64_t size = 0;
    distopt_rt_comm_size(comm, &size);
    distopt_rt_comm_rank(comm, &myRank);
    distopt_rt_comm *wrong = nullptr;
    status = distopt_rt_comm_create(backend.c_str(), size + 1, 60, &wrong);
    std::string message = distopt_rt_last_error();
    std::string want = "the step was compiled for " + std::to_string(size + 1) +
                       " ranks but runs on " + std::to_string(size);
    expect(status == DISTOPT_RT_WORLD_SIZE_MISMATCH &&
               message.find(want) != std::string::npos,
           "world size mismatch: '" + message + "'");
  } else {
    if (distopt_rt_comm_create(backend.c_str(), 0, timeout, &comm) !=
        DISTOPT_RT_OK) {
      std::fprintf(stderr, "cannot create a communicator: %s\n",
                   distopt_rt_last_error());
      return 2;
    }
    distopt_rt_comm_rank(comm, &myRank);
    distopt_rt_comm_size(comm, &worldSize);
  }

  if (mode == "digest") {
    digestMode(comm);
  } else if (mode == "check") {
    checkMode(comm);
  } else if (mode == "groups") {
    groupsMode(comm);
  } else if (mode == "group-timeout") {
    // World ranks in reverse: group rank 0 is the last world rank, which
    // waits for the other, which never joins.
    distopt_rt_comm *group = nullptr;
    if (distopt_rt_comm_split(comm, 0, worldSize - 1 - myRank, "@reversed",
                              &group) != DISTOPT_RT_OK) {
      std::fprintf(stderr, "split: %s\n", distopt_rt_last_error());
      return 2;
    }
    float x[1024] = {0};
    if (myRank == worldSize - 1) {
      distopt_rt_status status = distopt_rt_all_reduce(
          group, x, x, 1024, DISTOPT_RT_F32, DISTOPT_RT_SUM, 1, DISTOPT_RT_F32);
      std::string message = distopt_rt_last_error();
      std::printf("world rank %lld error: %s\n", (long long)myRank,
                  message.c_str());
      expect(status == DISTOPT_RT_TIMEOUT, "timeout status");
    } else {
      std::this_thread::sleep_for(std::chrono::duration<double>(timeout * 1.5));
    }
    distopt_rt_comm_destroy(group);
  } else if (mode == "split-timeout") {
    // Rank 1 never splits: rank 0 must fail within the timeout, not wait in
    // MPI_Comm_split forever.
    if (myRank == 0) {
      distopt_rt_comm *group = nullptr;
      distopt_rt_status status =
          distopt_rt_comm_split(comm, 0, 0, "@late", &group);
      std::printf("rank 0 split error: %s\n", distopt_rt_last_error());
      expect(status == DISTOPT_RT_TIMEOUT, "split timeout status");
    } else {
      std::this_thread::sleep_for(std::chrono::duration<double>(timeout * 1.5));
    }
  } else if (mode == "invalid") {
    invalidMode(comm);
  } else if (mode == "timeout") {
    float x[1024] = {0};
    if (myRank == 0) {
      auto begin = std::chrono::steady_clock::now();
      distopt_rt_status status = distopt_rt_all_reduce(
          comm, x, x, 1024, DISTOPT_RT_F32, DISTOPT_RT_SUM, 1, DISTOPT_RT_F32);
      double waited = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - begin)
                          .count();
      std::string message = distopt_rt_last_error();
      std::printf("rank 0 error after %.2f s: %s\n", waited, message.c_str());
      expect(status == DISTOPT_RT_TIMEOUT &&
                 message.find("rank 0 of 2: all_reduce of 1024 f32 (sum)") !=
                     std::string::npos &&
                 message.find("rank 1") != std::string::npos,
             "timeout status and message");
      expect(waited < 2 * timeout, "timed out within twice the timeout");
      // The failed communicator refuses further work instead of hanging.
      status = distopt_rt_all_reduce(comm, x, x, 4, DISTOPT_RT_F32,
                                     DISTOPT_RT_SUM, 1, DISTOPT_RT_F32);
      expect(status == DISTOPT_RT_FAILED, "a failed communicator stays failed");
    } else {
      // Never joins; outlives rank 0's timeout.
      std::this_thread::sleep_for(std::chrono::duration<double>(timeout * 1.5));
    }
  } else if (mode == "kill") {
    killMode(comm, timeout, killAfterMs);
    // With a peer gone, tearing the communicator down (MPI_Finalize) would
    // fail: report and leave, as a program that handles the error would.
    // mpirun ends the job when the victim dies (unless run with --mca
    // orte_abort_on_non_zero_status 0) and when the first survivor leaves
    // without MPI_Finalize: give every other survivor the time to report
    // first. Each must fail within a quarter of the timeout (killMode), in
    // practice well under a second; 5 s covers a loaded machine.
    std::printf("rank %lld: %d passed, %d failed\n", (long long)myRank, passed,
                failed);
    std::fflush(stdout);
    std::this_thread::sleep_for(
        std::chrono::duration<double>(std::min(timeout / 4, 5.0)));
    std::_Exit(failed ? 1 : 0);
  } else if (mode != "mismatch") {
    std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
    return 2;
  }
  if (comm)
    distopt_rt_comm_destroy(comm);
  std::printf("rank %lld: %d passed, %d failed\n", (long long)myRank, passed,
              failed);
  return failed ? 1 : 0;
}
