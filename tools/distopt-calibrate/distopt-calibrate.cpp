//===- distopt-calibrate.cpp - measure links for buckets --------*- C++ -*-===//
//
// mpirun -np N distopt-calibrate [--device=cuda]
// distopt-calibrate --from-times=times.txt
//
// Times the runtime's all_reduce (f32, avg: what a bucket of gradients runs)
// on this machine's N ranks at sizes from --min-kb to --max-mb, fits
// t(bytes) = latency + bytes / bandwidth to the medians, and prints the fit
// as the options of --distopt-bucketize and distopt-pipeline that choose
// bucket sizes from it (docs/bucketing.md). With --from-times it fits
// measurements taken elsewhere (lines of "bytes microseconds") instead.
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
LinkFit fit(const std::vector<Sample> &samples) {
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
  // refuses a zero latency, so say what to measure instead.
  if (!(latency > 0))
    fail("the fit finds no latency (small sizes cost only their bytes); "
         "measure smaller sizes (--min-kb)");
  LinkFit result{latency, 1 / perByte, 0, 0};
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

/// Times all_reduce avg of f32 at each size; every rank returns the same
/// medians (each iteration counts as long as its slowest rank took).
std::vector<Sample> measure(int64_t *worldSize, std::string *backend) {
  bool onDevice = deviceOption == "cuda";
  if (!onDevice && deviceOption != "cpu")
    fail("--device must be cpu or cuda, not '" + deviceOption + "'");
  // Checked before any communicator starts; 64 GiB bounds the conversions.
  if (!(minKb > 0) || !(maxMb > 0) || !(poolMb >= 0) || !(secondsPerSize > 0) ||
      minKb > 65536.0 * 1024 || maxMb > 65536 || poolMb > 65536)
    fail("--min-kb, --max-mb and --seconds-per-size must be positive, "
         "--pool-mb not negative, and sizes at most 65536 MiB");
  std::vector<int64_t> sizes;
  int64_t top = static_cast<int64_t>(maxMb * (1 << 20));
  for (int64_t bytes =
           std::max<int64_t>(static_cast<int64_t>(minKb * 1024), 4) / 4 * 4;
       bytes <= top; bytes *= 2)
    sizes.push_back(bytes);
  if (sizes.size() < 2)
    fail("--min-kb to --max-mb must span at least two sizes");
  *backend = onDevice ? "nccl" : distopt_rt_host_backend();
  // The measured communicator is the one a compiled step gets: the
  // runtime's world (under mpirun MPI, or with --device=cuda NCCL on device
  // buffers; DISTOPT_RT_TIMEOUT bounds it). With NCCL the times are agreed
  // on a host communicator, as distopt-run does.
  distopt_rt_comm *measured = nullptr, *host = nullptr;
  if (onDevice)
    check(distopt_rt_cuda_init(-1), "starting CUDA");
  check(distopt_rt_world(0, &measured), "starting the communicator");
  if (onDevice) {
    check(distopt_rt_host_comm(0, &host), "starting the host communicator");
  } else {
    host = measured;
  }
  check(distopt_rt_comm_size(host, worldSize), "size");

  int64_t poolBytes =
      std::max<int64_t>(static_cast<int64_t>(poolMb * (1 << 20)), top);
  poolBytes = (poolBytes + 3) / 4 * 4;
  void *pool = nullptr;
  std::vector<float> hostPool;
  if (onDevice) {
    check(distopt_rt_cuda_alloc(poolBytes, &pool), "allocating");
  } else {
    hostPool.assign(poolBytes / 4, 1.0f);
    pool = hostPool.data();
  }
  int64_t offset = 0; // where the next all_reduce starts in the pool
  auto slowest = [&](double seconds) {
    check(distopt_rt_all_reduce(host, &seconds, &seconds, 1, DISTOPT_RT_F64,
                                DISTOPT_RT_MAX, 1.0, DISTOPT_RT_F64),
          "agreeing on a time");
    return seconds;
  };
  auto once = [&](int64_t bytes) {
    double ignored = 0;
    slowest(ignored); // lines the ranks up
    if (offset + bytes > poolBytes)
      offset = 0;
    void *buffer = static_cast<char *>(pool) + offset;
    offset += bytes;
    auto start = std::chrono::steady_clock::now();
    check(distopt_rt_all_reduce(measured, buffer, buffer, bytes / 4,
                                DISTOPT_RT_F32, DISTOPT_RT_AVG, 1.0,
                                DISTOPT_RT_F32),
          "all_reduce");
    if (onDevice)
      check(distopt_rt_cuda_synchronize(), "synchronizing");
    std::chrono::duration<double> elapsed =
        std::chrono::steady_clock::now() - start;
    return slowest(elapsed.count());
  };

  std::vector<Sample> samples;
  for (int64_t bytes : sizes) {
    // Warm up (first touch, connection setup), then as many iterations as
    // fit the time budget: all ranks use rank-agreed times, so they agree.
    once(bytes);
    double first = once(bytes);
    int iterations = static_cast<int>(
        std::clamp(secondsPerSize / std::max(first, 1e-7), 5.0, 1000.0));
    std::vector<double> times;
    for (int i = 0; i < iterations; ++i)
      times.push_back(once(bytes));
    samples.push_back({static_cast<double>(bytes), median(times)});
  }
  if (onDevice) {
    check(distopt_rt_cuda_free(pool), "freeing");
    check(distopt_rt_comm_destroy(host), "closing the host communicator");
  }
  // The world closes at exit (and finalises MPI).
  int64_t rank;
  check(distopt_rt_comm_rank(measured, &rank), "rank");
  if (rank != 0)
    std::exit(0);
  return samples;
}

} // namespace

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions(calibrateCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "distopt-calibrate: measure all_reduce latency and bandwidth for "
      "--distopt-bucketize\n");
  int64_t worldSize = 0;
  std::string backend = "given";
  std::vector<Sample> samples =
      fromTimes.empty() ? measure(&worldSize, &backend) : readTimes(fromTimes);
  LinkFit link = fit(samples);
  double latencyUs = link.latencySeconds * 1e6;
  double gbPerS = link.bytesPerSecond * 1e-9;
  char optionText[128];
  std::snprintf(optionText, sizeof(optionText),
                "latency-us=%.4g bandwidth-gb-per-s=%.4g", latencyUs, gbPerS);
  std::string options = optionText;
  if (jsonOutput) {
    llvm::json::Object out{{"backend", backend},
                           {"world_size", worldSize},
                           {"latency_us", latencyUs},
                           {"bandwidth_gb_per_s", gbPerS},
                           {"worst_relative_error", link.worstRelativeError},
                           {"bucketize_options", options}};
    llvm::json::Array rows;
    for (const Sample &s : samples)
      rows.push_back(
          llvm::json::Object{{"bytes", s.bytes},
                             {"us", s.seconds * 1e6},
                             {"fit_us", link.predict(s.bytes) * 1e6}});
    out["samples"] = std::move(rows);
    llvm::outs() << llvm::json::Value(std::move(out)) << "\n";
    return 0;
  }
  llvm::raw_ostream &os = llvm::outs();
  if (fromTimes.empty())
    os << "all_reduce avg, f32, " << worldSize << " ranks (" << backend
       << "), median of each size:\n";
  os << llvm::format("%14s %14s %14s %8s\n", "bytes", "measured us", "fit us",
                     "error");
  for (const Sample &s : samples) {
    double predicted = link.predict(s.bytes);
    os << llvm::format("%14.0f %14.2f %14.2f %7.1f%%\n", s.bytes,
                       s.seconds * 1e6, predicted * 1e6,
                       100 * (predicted - s.seconds) / s.seconds);
  }
  os << llvm::format("latency %.4g us, bandwidth %.4g GB/s (worst fit error "
                     "%.0f%%, at %.0f bytes)\n",
                     latencyUs, gbPerS, 100 * link.worstRelativeError,
                     link.worstAtBytes);
  os << "pass:     --distopt-bucketize=\"" << options << "\"\n";
  os << "pipeline: bucket-" << options.substr(0, options.find(' '))
     << " bucket-" << options.substr(options.find(' ') + 1) << "\n";
  return 0;
}
