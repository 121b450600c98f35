//===- Driver.h - distopt-run's view of a step's buffers --------*- C++ -*-===//
//
// What the parts of distopt-run share: the step's arguments and results as
// the driver sees them (Slot, from the validated interface), their host
// buffers, how they are filled and read (Buffers.cpp), and how they map to
// and from a checkpoint's logical tensors (CheckpointMapping.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TOOLS_DISTOPT_RUN_DRIVER_H
#define DISTOPT_TOOLS_DISTOPT_RUN_DRIVER_H

#include "distopt/Checkpoint/Checkpoint.h"
#include "distopt/StepInterface/StepInterface.h"
#include "distopt_rt.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <cstdint>
#include <string>
#include <vector>

namespace distopt::run {

/// This process's rank (-1 until the communicator exists) and the run's
/// world size.
extern int64_t myRank, worldSize;

/// Prints `message` naming this rank and ends every rank of the run.
[[noreturn]] void die(const std::string &message);
/// die() with the runtime's last error unless `status` is OK.
void check(distopt_rt_status status, const char *what);

struct Entry {
  std::string name;
  int64_t offset;
  int64_t owner = -1;
  std::vector<int64_t> shape;
};

/// One argument or result of the step, as distopt-compile described it.
struct Slot {
  std::string role, name, dtype, init;
  std::vector<int64_t> shape; // empty for scalars; {} rank-0 tensors too
  bool tensor = false;
  int64_t shardOf = 0;
  int64_t inPlaceArg = -1; // the result is left in this argument's buffer
  bool perRank = false;    // state that differs per rank (PowerSGD's error)
  std::vector<Entry> layout;
  const distopt::step::DType *type = nullptr; // the interface's dtype table

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  size_t elementBytes() const { return type->bytes; }
  size_t bytes() const { return numel() * elementBytes(); }
};

/// The driver's view of an argument or result, from the validated
/// interface (distopt/StepInterface).
Slot toSlot(const distopt::step::Value &value);
/// The runtime's code for a slot's element type.
distopt_rt_dtype rtDtype(const Slot &slot);

/// A host buffer handed to the step (allocated by the runtime's allocator,
/// 64-byte aligned, or returned by the step).
struct Buffer {
  void *allocated = nullptr;
  void *aligned = nullptr;
  bool owned = false;
};
/// A zeroed buffer of at least `bytes`.
Buffer allocate(size_t bytes);
int64_t numelOf(const std::vector<int64_t> &shape);

/// Whether every rank holds all of a laid-out slot's tensors (a gradient
/// bucket or flat parameter): neither a flat shard nor greedy ownership.
bool isReplicatedLayout(const Slot &slot);
/// The parts of a laid-out slot's tensors this rank holds: `fn(entry, first,
/// at, count)` for elements [first, first + count) of the entry's tensor at
/// [at, at + count) of this rank's buffer.
void forEachLocalRange(
    const Slot &slot,
    llvm::function_ref<void(const Entry &, int64_t, int64_t, int64_t)> fn);

/// Parameters: a pattern per tensor, the same on every rank.
void fillParameter(const Slot &slot, Buffer &buffer);
/// Gradients: a pattern per tensor and step, different per rank, averaging
/// to the same values at any world size.
void fillGradient(const Slot &slot, Buffer &buffer, int64_t step);
/// A seeded standard normal draw, the same on every rank.
void fillNormal(const Slot &slot, Buffer &buffer, uint64_t seed);
/// A memref descriptor as the compiled code reads it.
std::vector<int64_t> descriptor(const Slot &slot, const Buffer &buffer);
/// The elements of a floating-point slot that are inf or NaN.
int64_t countNonFinite(const Slot &slot, const void *data);
/// FNV-1a of `bytes` bytes.
uint64_t hashBytes(const void *data, size_t bytes);

/// Whether a slot is saved in checkpoints (parameters, main parameters,
/// state).
bool isCheckpointed(const Slot &slot);
/// Every rank takes part (shards are gathered); rank 0's result is written.
checkpoint::Checkpoint collectCheckpoint(distopt_rt_comm *comm,
                                         const std::vector<Slot> &args,
                                         const std::vector<Buffer> &buffers,
                                         int64_t stepsDone,
                                         const std::string &model);
/// Fills this rank's parameter, main parameter and state buffers from
/// `ckpt` (read from `path`), whatever world size and layout it was saved
/// with.
void restoreCheckpoint(const checkpoint::Checkpoint &ckpt,
                       const std::string &path, const std::vector<Slot> &args,
                       std::vector<Buffer> &buffers);

} // namespace distopt::run

#endif // DISTOPT_TOOLS_DISTOPT_RUN_DRIVER_H
