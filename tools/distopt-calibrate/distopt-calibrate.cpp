//===- distopt-calibrate.cpp - measure links for buckets --------*- C++ -*-===//
//
// mpirun -np N distopt-calibrate [--device=cuda] [--ranks-per-node=R]
//                                [--compute] [--json]
// distopt-calibrate --from-times=times.txt
//
// Times the runtime's all_reduce (f32, avg: what a bucket of gradients runs)
// on this machine's N ranks at sizes from --min-kb to --max-mb, fits
// t(bytes) = latency + bytes / bandwidth to the medians (the latency from
// a one-element all_reduce where the line finds none), and prints the fit
// as the options of --distopt-bucketize and distopt-pipeline that choose
// bucket sizes from it (docs/bucketing.md). With --from-times it fits
// measurements taken elsewhere (lines of "bytes microseconds") instead.
// For distopt-plan (--json): --ranks-per-node=R also fits the link inside
// each node (R consecutive ranks) and across nodes (one rank of each, R
// such groups at once), and --compute measures the rates updates run at
// (docs/choosing-a-pipeline.md).
//
//===----------------------------------------------------------------------===//

#include "distopt_rt.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace cl = llvm::cl;

static cl::OptionCategory calibrateCategory("distopt-calibrate options");

static cl::opt<std::string>
    deviceOption("device",
                 cl::desc("Where the buffers live: cpu (MPI) or cuda (NCCL)"),
                 cl::init("cpu"), cl::cat(calibrateCategory));
static cl::opt<double> minKb("min-kb", cl::desc("Smallest size in KiB"),
                             cl::init(4), cl::cat(calibrateCategory));
static cl::opt<double> maxMb("max-mb", cl::desc("Largest size in MiB"),
                             cl::init(64), cl::cat(calibrateCategory));
static cl::opt<double> poolMb(
    "pool-mb",
    cl::desc("Successive all_reduces walk through this much memory, as the "
             "buckets of a model's gradients do, rather than reducing one "
             "buffer that stays in cache"),
    cl::init(256), cl::cat(calibrateCategory));
static cl::opt<double>
    secondsPerSize("seconds-per-size",
                   cl::desc("About how long to spend timing each size"),
                   cl::init(0.25), cl::cat(calibrateCategory));
static cl::opt<std::string> fromTimes(
    "from-times",
    cl::desc("Fit these measurements instead (lines of: bytes microseconds)"),
    cl::init(""), cl::cat(calibrateCategory));
static cl::opt<int64_t> ranksPerNode(
    "ranks-per-node",
    cl::desc("Ranks per node (dividing the world): also fit the link inside "
             "each node, for distopt-plan (0: the world only)"),
    cl::init(0), cl::cat(calibrateCategory));
static cl::opt<bool> measureCompute(
    "compute",
    cl::desc("Also measure the rates updates run at (memory GB/s, matmul "
             "GFLOP/s), for distopt-plan"),
    cl::init(false), cl::cat(calibrateCategory));
static cl::opt<bool> jsonOutput("json",
                                cl::desc("Print the fit as one JSON object"),
                                cl::init(false), cl::cat(calibrateCategory));

namespace {

struct Sample {
  double bytes;
  double seconds;
};

/// t = latency + bytes / bandwidth.
struct LinkFit {
  double latencySeconds;
  double bytesPerSecond;
  double worstRelativeError;
  double worstAtBytes;
  /// The latency is a one-element all_reduce's time, not the fit's.
  bool latencyMeasuredAlone = false;

  double predict(double bytes) const {
    return latencySeconds + bytes / bytesPerSecond;
  }
};

[[noreturn]] void fail(const std::string &message) {
  llvm::errs() << "distopt-calibrate: " << message << "\n";
  std::exit(1);
}

/// Least squares on relative errors, so that the microsecond sizes weigh as
/// much as the millisecond ones: minimises sum(((a + b x - t) / t)^2).
/// `aloneSeconds`, where measured, is the time of a one-element all_reduce:
/// the latency when the line through the sizes finds none.
LinkFit fit(const std::vector<Sample> &samples, double aloneSeconds = 0) {
  if (samples.size() < 2)
    fail("a fit needs at least two sizes");
  double sw = 0, swx = 0, swxx = 0, swt = 0, swxt = 0;
  for (const Sample &s : samples) {
    if (!(s.seconds > 0) || !(s.bytes > 0))
      fail("sizes and times must be positive");
    double w = 1 / (s.seconds * s.seconds);
    sw += w;
    swx += w * s.bytes;
    swxx += w * s.bytes * s.bytes;
    swt += w * s.seconds;
    swxt += w * s.bytes * s.seconds;
  }
  double det = sw * swxx - swx * swx;
  if (!(det > 0))
    fail("a fit needs at least two different sizes");
  double latency = (swxx * swt - swx * swxt) / det;
  double perByte = (sw * swxt - swx * swt) / det;
  if (!(perByte > 0))
    fail("the times do not grow with the size; measure larger sizes "
         "(--max-mb)");
  // No latency to balance: the model would give no buckets, and the pass
  // refuses a zero latency. A shaped link lets small messages through
  // faster than its rate (its token bucket's burst), so the line through
  // the sizes can cross zero (2x2 nodes at 100 Mb/s): the latency is then
  // a one-element all_reduce's time, and the bandwidth is fitted with it
  // fixed, on absolute errors (the large sizes, past the burst, show the
  // rate). Times given (--from-times) have no such measurement.
  bool alone = !(latency > 0);
  if (alone) {
    if (!(aloneSeconds > 0))
      fail("the fit finds no latency (small sizes cost only their bytes); "
           "measure smaller sizes (--min-kb)");
    latency = aloneSeconds;
    double num = 0, den = 0;
    for (const Sample &s : samples) {
      num += s.bytes * (s.seconds - latency);
      den += s.bytes * s.bytes;
    }
    perByte = num / den;
    if (!(perByte > 0))
      fail("the times do not grow beyond a one-element all_reduce's; "
           "measure larger sizes (--max-mb)");
  }
  LinkFit result{latency, 1 / perByte, 0, 0, alone};
  for (const Sample &s : samples) {
    double error = std::abs(result.predict(s.bytes) - s.seconds) / s.seconds;
    if (error > result.worstRelativeError) {
      result.worstRelativeError = error;
      result.worstAtBytes = s.bytes;
    }
  }
  return result;
}

std::vector<Sample> readTimes(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFileOrSTDIN(path);
  if (!buffer)
    fail("cannot read " + path + ": " + buffer.getError().message());
  std::vector<Sample> samples;
  llvm::SmallVector<llvm::StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n');
  for (auto [index, raw] : llvm::enumerate(lines)) {
    llvm::StringRef line = raw.split('#').first.trim();
    if (line.empty())
      continue;
    llvm::SmallVector<llvm::StringRef> fields;
    llvm::SplitString(line, fields); // spaces or tabs
    double bytes, micros;
    if (fields.size() != 2 || fields[0].getAsDouble(bytes) ||
        fields[1].getAsDouble(micros))
      fail(path + ":" + std::to_string(index + 1) +
           ": expected 'bytes microseconds', got '" + line.str() + "'");
    samples.push_back({bytes, micros * 1e-6});
  }
  return samples;
}

void check(distopt_rt_status status, const char *what) {
  if (status != DISTOPT_RT_OK)
    fail(std::string(what) + ": " + distopt_rt_last_error());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The communicators a measurement runs on: `measured` is the one a
/// compiled step gets (under mpirun the runtime's world, or with
/// --device=cuda NCCL on device buffers; DISTOPT_RT_TIMEOUT bounds it);
/// times are agreed on `host` (the same with MPI).
struct Comms {
  distopt_rt_comm *measured = nullptr, *host = nullptr;
  bool onDevice = false;
  int64_t worldSize = 0, rank = 0;
};

Comms start(std::string *backend) {
  Comms comms;
  comms.onDevice = deviceOption == "cuda";
  if (!comms.onDevice && deviceOption != "cpu")
    fail("--device must be cpu or cuda, not '" + deviceOption + "'");
  // Checked before any communicator starts; 64 GiB bounds the conversions.
  if (!(minKb > 0) || !(maxMb > 0) || !(poolMb >= 0) || !(secondsPerSize > 0) ||
      minKb > 65536.0 * 1024 || maxMb > 65536 || poolMb > 65536)
    fail("--min-kb, --max-mb and --seconds-per-size must be positive, "
         "--pool-mb not negative, and sizes at most 65536 MiB");
  *backend = comms.onDevice ? "nccl" : distopt_rt_host_backend();
  if (comms.onDevice)
    check(distopt_rt_cuda_init(-1), "starting CUDA");
  check(distopt_rt_world(0, &comms.measured), "starting the communicator");
  if (comms.onDevice)
    check(distopt_rt_host_comm(0, &comms.host),
          "starting the host communicator");
  else
    comms.host = comms.measured;
  check(distopt_rt_comm_size(comms.host, &comms.worldSize), "size");
  check(distopt_rt_comm_rank(comms.host, &comms.rank), "rank");
  if (ranksPerNode < 0 ||
      (ranksPerNode > 0 && (comms.worldSize % ranksPerNode)))
    fail("--ranks-per-node must divide the world of " +
         std::to_string(comms.worldSize) + " ranks");
  return comms;
}

/// The slowest rank's `seconds` (every rank returns it).
double slowest(const Comms &comms, double seconds) {
  check(distopt_rt_all_reduce(comms.host, &seconds, &seconds, 1, DISTOPT_RT_F64,
                              DISTOPT_RT_MAX, 1.0, DISTOPT_RT_F64),
        "agreeing on a time");
  return seconds;
}

/// The medians of all_reduce avg of f32 at each size, and the time of one
/// element's alone.
struct Measured {
  std::vector<Sample> samples;
  double aloneSeconds = 0;
};

/// Times all_reduce avg of f32 on `comm` at each size and at one element;
/// every rank returns the same medians (each iteration counts as long as
/// its slowest rank took, on any of the groups `comm` is one of).
Measured measure(const Comms &comms, distopt_rt_comm *comm) {
  std::vector<int64_t> sizes;
  int64_t top = static_cast<int64_t>(maxMb * (1 << 20));
  for (int64_t bytes =
           std::max<int64_t>(static_cast<int64_t>(minKb * 1024), 4) / 4 * 4;
       bytes <= top; bytes *= 2)
    sizes.push_back(bytes);
  if (sizes.size() < 2)
    fail("--min-kb to --max-mb must span at least two sizes");
  int64_t poolBytes =
      std::max<int64_t>(static_cast<int64_t>(poolMb * (1 << 20)), top);
  poolBytes = (poolBytes + 3) / 4 * 4;
  void *pool = nullptr;
  std::vector<float> hostPool;
  if (comms.onDevice) {
    check(distopt_rt_cuda_alloc(poolBytes, &pool), "allocating");
  } else {
    hostPool.assign(poolBytes / 4, 1.0f);
    pool = hostPool.data();
  }
  int64_t offset = 0; // where the next all_reduce starts in the pool
  auto once = [&](int64_t bytes) {
    slowest(comms, 0); // lines the ranks up
    if (offset + bytes > poolBytes)
      offset = 0;
    void *buffer = static_cast<char *>(pool) + offset;
    offset += bytes;
    auto start = std::chrono::steady_clock::now();
    check(distopt_rt_all_reduce(comm, buffer, buffer, bytes / 4, DISTOPT_RT_F32,
                                DISTOPT_RT_AVG, 1.0, DISTOPT_RT_F32),
          "all_reduce");
    if (comms.onDevice)
      check(distopt_rt_cuda_synchronize(), "synchronizing");
    std::chrono::duration<double> elapsed =
        std::chrono::steady_clock::now() - start;
    return slowest(comms, elapsed.count());
  };

  auto timed = [&](int64_t bytes) {
    // Warm up (first touch, connection setup), then as many iterations as
    // fit the time budget: all ranks use rank-agreed times, so they agree.
    once(bytes);
    double first = once(bytes);
    int iterations = static_cast<int>(
        std::clamp(secondsPerSize / std::max(first, 1e-7), 5.0, 1000.0));
    std::vector<double> times;
    for (int i = 0; i < iterations; ++i)
      times.push_back(once(bytes));
    return median(times);
  };
  Measured result;
  for (int64_t bytes : sizes)
    result.samples.push_back({static_cast<double>(bytes), timed(bytes)});
  result.aloneSeconds = timed(4);
  if (comms.onDevice)
    check(distopt_rt_cuda_free(pool), "freeing");
  return result;
}

/// The rates updates run at on each rank while every rank runs them
/// (--compute; the slowest rank's): bytes per second of an update-like
/// loop over buffers far larger than caches, and FLOPs per second of the
/// runtime's f32 matmul at PowerSGD's shape (a matrix times r columns).
struct Rates {
  double memoryBytesPerSecond = 0, matmulFlopsPerSecond = 0;
};

Rates measureRates(const Comms &comms) {
  Rates rates;
  // p = p * a + g: reads two f32 streams, writes one.
  const int64_t count = 16 << 20; // 64 MiB per stream
  std::vector<float> p(count, 1.0f), g(count, 0.5f);
  volatile float scale = 0.999f;
  auto pass = [&] {
    float a = scale;
    float *pp = p.data();
    const float *gg = g.data();
    for (int64_t i = 0; i < count; ++i)
      pp[i] = pp[i] * a + gg[i];
  };
  std::vector<double> times;
  pass();
  for (int i = 0; i < 5; ++i) {
    slowest(comms, 0);
    auto start = std::chrono::steady_clock::now();
    pass();
    std::chrono::duration<double> elapsed =
        std::chrono::steady_clock::now() - start;
    times.push_back(slowest(comms, elapsed.count()));
  }
  rates.memoryBytesPerSecond = 3.0 * 4 * count / median(times);

  const int64_t m = 1024, k = 1024, r = 16;
  std::vector<float> a(m * k, 0.25f), b(k * r, 0.5f), c(m * r, 0.0f);
  times.clear();
  for (int i = 0; i < 6; ++i) {
    slowest(comms, 0);
    auto start = std::chrono::steady_clock::now();
    for (int repeat = 0; repeat < 8; ++repeat)
      check(distopt_rt_matmul_f32(0, 0, m, r, k, a.data(), k, b.data(), r,
                                  c.data(), r),
            "matmul");
    std::chrono::duration<double> elapsed =
        std::chrono::steady_clock::now() - start;
    if (i > 0) // (the first loads the BLAS)
      times.push_back(slowest(comms, elapsed.count()));
  }
  rates.matmulFlopsPerSecond = 8 * 2.0 * m * k * r / median(times);
  return rates;
}

} // namespace

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions(calibrateCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "distopt-calibrate: measure all_reduce latency and bandwidth for "
      "--distopt-bucketize, and links and rates for distopt-plan\n");
  if (!fromTimes.empty() && (ranksPerNode > 0 || measureCompute))
    fail("--ranks-per-node and --compute measure; --from-times does not");
  int64_t worldSize = 0;
  std::string backend = "given";
  std::vector<Sample> samples, nodeSamples, acrossSamples;
  // One element's all_reduce on each (0: not measured).
  double alone = 0, nodeAlone = 0, acrossAlone = 0;
  Rates rates;
  if (fromTimes.empty()) {
    Comms comms = start(&backend);
    worldSize = comms.worldSize;
    Measured world = measure(comms, comms.measured);
    samples = world.samples;
    alone = world.aloneSeconds;
    // The groups hybrid sharding and the hierarchical all-reduce run, all
    // at once: each node's ranks, and one rank of each node (the R groups
    // across nodes share each node's link).
    auto measureGroups = [&](int64_t color, const char *name) {
      distopt_rt_comm *group = nullptr;
      check(distopt_rt_comm_split(comms.measured, color, comms.rank, name,
                                  &group),
            "splitting the world");
      Measured result = measure(comms, group);
      check(distopt_rt_comm_destroy(group), "closing a group");
      return result;
    };
    if (ranksPerNode > 0 && ranksPerNode < worldSize) {
      Measured node = measureGroups(comms.rank / ranksPerNode, "node");
      nodeSamples = node.samples;
      nodeAlone = node.aloneSeconds;
      if (ranksPerNode > 1) {
        Measured across = measureGroups(comms.rank % ranksPerNode, "across");
        acrossSamples = across.samples;
        acrossAlone = across.aloneSeconds;
      }
    }
    if (measureCompute)
      rates = measureRates(comms);
    if (comms.onDevice)
      check(distopt_rt_comm_destroy(comms.host),
            "closing the host communicator");
    // The world closes at exit (and finalises MPI).
    if (comms.rank != 0)
      std::exit(0);
  } else {
    samples = readTimes(fromTimes);
  }
  LinkFit link = fit(samples, alone);
  double latencyUs = link.latencySeconds * 1e6;
  double gbPerS = link.bytesPerSecond * 1e-9;
  char optionText[128];
  std::snprintf(optionText, sizeof(optionText),
                "latency-us=%.4g bandwidth-gb-per-s=%.4g", latencyUs, gbPerS);
  std::string options = optionText;
  std::optional<LinkFit> nodeLink, acrossLink;
  if (!nodeSamples.empty())
    nodeLink = fit(nodeSamples, nodeAlone);
  if (!acrossSamples.empty())
    acrossLink = fit(acrossSamples, acrossAlone);
  auto samplesJSON = [](const std::vector<Sample> &list, const LinkFit &fit) {
    llvm::json::Array rows;
    for (const Sample &s : list)
      rows.push_back(
          llvm::json::Object{{"bytes", s.bytes},
                             {"us", s.seconds * 1e6},
                             {"fit_us", fit.predict(s.bytes) * 1e6}});
    return rows;
  };
  if (jsonOutput) {
    llvm::json::Object out{
        {"backend", backend},
        {"world_size", worldSize},
        {"latency_us", latencyUs},
        {"bandwidth_gb_per_s", gbPerS},
        {"worst_relative_error", link.worstRelativeError},
        {"latency_measured_alone", link.latencyMeasuredAlone},
        {"bucketize_options", options}};
    out["samples"] = samplesJSON(samples, link);
    auto linkJSON = [&](int64_t size, const LinkFit &fit,
                        const std::vector<Sample> &list) {
      return llvm::json::Object{
          {"world_size", size},
          {"latency_us", fit.latencySeconds * 1e6},
          {"bandwidth_gb_per_s", fit.bytesPerSecond * 1e-9},
          {"worst_relative_error", fit.worstRelativeError},
          {"latency_measured_alone", fit.latencyMeasuredAlone},
          {"samples", samplesJSON(list, fit)}};
    };
    if (nodeLink) {
      out["ranks_per_node"] = static_cast<int64_t>(ranksPerNode);
      out["intra_node"] = linkJSON(ranksPerNode, *nodeLink, nodeSamples);
    }
    if (acrossLink)
      out["across_nodes"] =
          linkJSON(worldSize / ranksPerNode, *acrossLink, acrossSamples);
    if (measureCompute) {
      out["memory_gb_per_s"] = rates.memoryBytesPerSecond * 1e-9;
      out["matmul_gflops"] = rates.matmulFlopsPerSecond * 1e-9;
    }
    llvm::outs() << llvm::json::Value(std::move(out)) << "\n";
    return 0;
  }
  llvm::raw_ostream &os = llvm::outs();
  auto printFit = [&](const std::vector<Sample> &list, const LinkFit &fit) {
    os << llvm::format("%14s %14s %14s %8s\n", "bytes", "measured us", "fit us",
                       "error");
    for (const Sample &s : list) {
      double predicted = fit.predict(s.bytes);
      os << llvm::format("%14.0f %14.2f %14.2f %7.1f%%\n", s.bytes,
                         s.seconds * 1e6, predicted * 1e6,
                         100 * (predicted - s.seconds) / s.seconds);
    }
    os << llvm::format("latency %.4g us, bandwidth %.4g GB/s (worst fit "
                       "error %.0f%%, at %.0f bytes)\n",
                       fit.latencySeconds * 1e6, fit.bytesPerSecond * 1e-9,
                       100 * fit.worstRelativeError, fit.worstAtBytes);
    if (fit.latencyMeasuredAlone)
      os << "(the sizes' line found no latency: it is a one-element "
            "all_reduce's time, and the bandwidth is fitted with it)\n";
  };
  if (fromTimes.empty())
    os << "all_reduce avg, f32, " << worldSize << " ranks (" << backend
       << "), median of each size:\n";
  printFit(samples, link);
  if (nodeLink) {
    os << "\nthe same inside each node of " << ranksPerNode
       << " ranks, all nodes at once:\n";
    printFit(nodeSamples, *nodeLink);
  }
  if (acrossLink) {
    os << "\nthe same over one rank of each node, all " << ranksPerNode
       << " such groups at once:\n";
    printFit(acrossSamples, *acrossLink);
  }
  if (measureCompute)
    os << llvm::format("\nupdates: %.3g GB/s of memory, %.3g GFLOP/s of f32 "
                       "matmul per rank (%s), every rank at once\n",
                       rates.memoryBytesPerSecond * 1e-9,
                       rates.matmulFlopsPerSecond * 1e-9, distopt_rt_blas());
  os << "pass:     --distopt-bucketize=\"" << options << "\"\n";
  os << "pipeline: bucket-" << options.substr(0, options.find(' '))
     << " bucket-" << options.substr(options.find(' ') + 1) << "\n";
  return 0;
}
