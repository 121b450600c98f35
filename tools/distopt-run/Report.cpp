//===- Report.cpp - the checks and prints after a run -----------*- C++ -*-===//
//
// Replicas that must agree, parameters that must be finite, the memory each
// rank held, and the parameters' bits for tests that compare runs.
//
//===----------------------------------------------------------------------===//

#include "Session.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>

namespace distopt::run {

std::pair<int64_t, int64_t> compareReplicas(const Session &session,
                                            bool printHashes) {
  // Each replicated parameter tensor: its name, data and size (a flat
  // parameter, --distopt-param-as-bucket-view, holds several).
  struct Replica {
    std::string name;
    const char *data;
    size_t bytes;
  };
  std::vector<Replica> replicas;
  for (auto [r, arg] : llvm::zip_equal(session.results, session.resultArg)) {
    if (r.role != "param" || arg == SIZE_MAX)
      continue;
    const char *data = static_cast<const char *>(session.buffers[arg].aligned);
    if (r.layout.empty())
      replicas.push_back({r.name, data, r.bytes()});
    else if (isReplicatedLayout(r))
      for (const Entry &e : r.layout)
        replicas.push_back({e.name, data + e.offset * r.elementBytes(),
                            numelOf(e.shape) * r.elementBytes()});
  }
  int64_t differing = 0;
  for (const Replica &r : replicas) {
    int64_t hash = static_cast<int64_t>(hashBytes(r.data, r.bytes));
    int64_t lowest = hash, highest = hash;
    check(distopt_rt_all_reduce(session.comm, &hash, &lowest, 1, DISTOPT_RT_I64,
                                DISTOPT_RT_MIN, 1, DISTOPT_RT_I64),
          "comparing replicas");
    check(distopt_rt_all_reduce(session.comm, &hash, &highest, 1,
                                DISTOPT_RT_I64, DISTOPT_RT_MAX, 1,
                                DISTOPT_RT_I64),
          "comparing replicas");
    if (lowest != highest) {
      ++differing;
      if (myRank == 0)
        llvm::errs() << "distopt-run: parameter '" << r.name
                     << "' differs between ranks\n";
    }
    if (printHashes && myRank == 0)
      llvm::outs() << "param " << r.name << " "
                   << llvm::format_hex(static_cast<uint64_t>(hash), 18) << "\n";
  }
  return {static_cast<int64_t>(replicas.size()), differing};
}

void printParameterBits(const Session &session) {
  // The checkpoint's logical tensors: sharded parameters gathered whole.
  checkpoint::Checkpoint all =
      collectCheckpoint(session.comm, session.args, session.buffers, 0, "");
  if (myRank != 0)
    return;
  for (const checkpoint::Tensor &t : all.tensors) {
    if (t.role != "param")
      continue;
    size_t width = checkpoint::elementBytes(t.dtype);
    llvm::outs() << "param " << t.name << ":";
    if (width != 2 && width != 4 && width != 8) {
      llvm::outs() << " (" << t.dtype << ": no bits to print)\n";
      continue;
    }
    for (size_t at = 0; at + width <= t.data.size(); at += width) {
      int64_t bits = 0;
      if (width == 2) {
        int16_t v;
        std::memcpy(&v, t.data.data() + at, 2);
        bits = v;
      } else if (width == 4) {
        int32_t v;
        std::memcpy(&v, t.data.data() + at, 4);
        bits = v;
      } else {
        std::memcpy(&bits, t.data.data() + at, 8);
      }
      llvm::outs() << " " << bits;
    }
    llvm::outs() << "\n";
  }
}

int64_t countNonFiniteParameters(const Session &session) {
  // A NaN on every rank hashes the same, but the run has diverged. Every
  // parameter this rank holds is checked, its shards too.
  int64_t nonFinite = 0;
  for (auto [slot, buffer] : llvm::zip_equal(session.args, session.buffers)) {
    if (!slot.tensor || (slot.role != "param" && slot.role != "main_param"))
      continue;
    int64_t count = countNonFinite(slot, buffer.aligned);
    if (count && myRank == 0 && slot.layout.empty())
      llvm::errs() << "distopt-run: parameter '" << slot.name << "' has "
                   << count << " non-finite elements (inf or NaN)\n";
    nonFinite += count;
  }
  int64_t anywhere = 0;
  check(distopt_rt_all_reduce(session.comm, &nonFinite, &anywhere, 1,
                              DISTOPT_RT_I64, DISTOPT_RT_SUM, 1,
                              DISTOPT_RT_I64),
        "checking the parameters are finite");
  return anywhere;
}

void printMemory(const Session &session) {
  // Host memory: the argument buffers (what the step keeps between steps
  // and is handed each step) by role, and the peak of everything allocated
  // for or by the step at once (its temporaries included).
  const char *roles[] = {"param", "main_param", "state", "grad"};
  int64_t mine[6] = {0, 0, 0, 0, 0, 0};
  for (const Slot &arg : session.args) {
    if (!arg.tensor)
      continue;
    for (int r = 0; r < 4; ++r)
      if (arg.role == roles[r])
        mine[r] += arg.bytes();
    mine[4] += arg.bytes();
  }
  uint64_t inUse = 0, peakBytes = 0;
  distopt_rt_memory_stats(&inUse, &peakBytes);
  mine[5] = static_cast<int64_t>(peakBytes);
  int64_t most[6];
  check(distopt_rt_all_reduce(session.comm, mine, most, 6, DISTOPT_RT_I64,
                              DISTOPT_RT_MAX, 1, DISTOPT_RT_I64),
        "comparing memory");
  if (myRank != 0)
    return;
  llvm::outs() << "distopt-run: memory per rank (bytes, most on any rank):";
  for (int r = 0; r < 4; ++r)
    llvm::outs() << " " << roles[r] << " " << most[r];
  llvm::outs() << ", arguments " << most[4] << ", peak in use " << most[5]
               << "\n";
}

} // namespace distopt::run
