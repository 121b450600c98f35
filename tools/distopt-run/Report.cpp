//===- Report.cpp - the checks and prints after a run -----------*- C++ -*-===//
//
// Replicas that must agree, parameters that must be finite, the memory each
// rank held, and the parameters' bits for tests that compare runs.
//
//===----------------------------------------------------------------------===//

#include "Run.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>

namespace distopt::run {

static bool isParameter(const char *role) {
  return std::strcmp(role, "param") == 0;
}

std::pair<int64_t, int64_t> compareReplicas(Run &run, bool printHashes) {
  int64_t compared = 0, differing = 0;
  for (size_t i = 0; i < run.tensors.size(); ++i) {
    const distopt_step_tensor &t = run.tensors[i];
    if (!isParameter(t.role) || !t.whole || t.per_rank)
      continue;
    ++compared;
    // A copy on the host (a CUDA step's buffers are device memory); local,
    // as the tensor is whole here.
    std::vector<char> data(t.bytes);
    check(distopt_session_read_tensor(run.session, i, data.data(), t.bytes),
          "reading a parameter");
    int64_t hash = static_cast<int64_t>(hashBytes(data.data(), t.bytes));
    int64_t lowest = hash, highest = hash;
    check(distopt_rt_all_reduce(run.comm(), &hash, &lowest, 1, DISTOPT_RT_I64,
                                DISTOPT_RT_MIN, 1, DISTOPT_RT_I64),
          "comparing replicas");
    check(distopt_rt_all_reduce(run.comm(), &hash, &highest, 1, DISTOPT_RT_I64,
                                DISTOPT_RT_MAX, 1, DISTOPT_RT_I64),
          "comparing replicas");
    if (lowest != highest) {
      ++differing;
      if (run.rank == 0)
        llvm::errs() << "distopt-run: parameter '" << t.name
                     << "' differs between ranks\n";
    }
    if (printHashes && run.rank == 0)
      llvm::outs() << "param " << t.name << " "
                   << llvm::format_hex(static_cast<uint64_t>(hash), 18) << "\n";
  }
  return {compared, differing};
}

void printParameterBits(Run &run) {
  for (size_t i = 0; i < run.tensors.size(); ++i) {
    const distopt_step_tensor &t = run.tensors[i];
    if (!isParameter(t.role))
      continue;
    // Every rank takes part: a sharded parameter is gathered.
    std::vector<char> data(t.bytes);
    check(distopt_session_read_tensor(run.session, i, data.data(), t.bytes),
          "gathering a parameter");
    if (run.rank != 0)
      continue;
    size_t width = static_cast<size_t>(t.numel ? t.bytes / t.numel : 0);
    llvm::outs() << "param " << t.name << ":";
    for (size_t at = 0; at + width <= data.size(); at += width) {
      int64_t bits = 0;
      if (width == 2) {
        int16_t v;
        std::memcpy(&v, data.data() + at, 2);
        bits = v;
      } else if (width == 4) {
        int32_t v;
        std::memcpy(&v, data.data() + at, 4);
        bits = v;
      } else {
        std::memcpy(&bits, data.data() + at, 8);
      }
      llvm::outs() << " " << bits;
    }
    llvm::outs() << "\n";
  }
}

int64_t countNonFiniteParameters(Run &run) {
  // A NaN on every rank hashes the same, but the run has diverged. Every
  // parameter this rank holds is checked, its shards too.
  int64_t nonFinite = 0;
  for (size_t i = 0; i < run.args.size(); ++i) {
    const distopt_step_value &v = run.args[i];
    if (!v.is_tensor ||
        (std::strcmp(v.role, "param") && std::strcmp(v.role, "main_param")))
      continue;
    const void *data = distopt_session_arg_data(run.session, i);
    std::vector<char> host;
    if (std::strcmp(distopt_step_device(run.step), "cuda") == 0) {
      host.resize(v.bytes);
      check(distopt_rt_cuda_copy(host.data(), data, v.bytes),
            "copying from the device");
      data = host.data();
    }
    int64_t count = countNonFinite(v.dtype, data, v.numel);
    if (count && run.rank == 0 && v.layout_entries == 0)
      llvm::errs() << "distopt-run: parameter '" << v.name << "' has " << count
                   << " non-finite elements (inf or NaN)\n";
    nonFinite += count;
  }
  int64_t anywhere = 0;
  check(distopt_rt_all_reduce(run.comm(), &nonFinite, &anywhere, 1,
                              DISTOPT_RT_I64, DISTOPT_RT_SUM, 1,
                              DISTOPT_RT_I64),
        "checking the parameters are finite");
  return anywhere;
}

void printMemory(Run &run) {
  // Host memory: the argument buffers (what the step keeps between steps
  // and is handed each step) by role, and the peak of everything allocated
  // for or by the step at once (its temporaries included).
  const char *roles[] = {"param", "main_param", "state", "grad"};
  int64_t mine[6] = {0, 0, 0, 0, 0, 0};
  for (const distopt_step_value &arg : run.args) {
    if (!arg.is_tensor)
      continue;
    for (int r = 0; r < 4; ++r)
      if (std::strcmp(arg.role, roles[r]) == 0)
        mine[r] += arg.bytes;
    mine[4] += arg.bytes;
  }
  uint64_t inUse = 0, peakBytes = 0;
  distopt_rt_memory_stats(&inUse, &peakBytes);
  mine[5] = static_cast<int64_t>(peakBytes);
  int64_t most[6];
  check(distopt_rt_all_reduce(run.comm(), mine, most, 6, DISTOPT_RT_I64,
                              DISTOPT_RT_MAX, 1, DISTOPT_RT_I64),
        "comparing memory");
  if (run.rank != 0)
    return;
  llvm::outs() << "distopt-run: memory per rank (bytes, most on any rank):";
  for (int r = 0; r < 4; ++r)
    llvm::outs() << " " << roles[r] << " " << most[r];
  llvm::outs() << ", arguments " << most[4] << ", peak in use " << most[5]
               << "\n";
}

} // namespace distopt::run
