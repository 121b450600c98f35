//===- Checkpoint.h - parameters and optimizer state on disk ----*- C++ -*-===//
//
// The checkpoint format (docs/checkpoint.md): a fixed preamble, a JSON header
// naming every tensor with its role, dtype, shape, place and CRC-32, then the
// raw data. Tensors are logical (a parameter, or a parameter's state), never
// shards, so a checkpoint resumes at any world size. Reading validates
// everything before any data is used; writing is atomic. Standard C++ only,
// no LLVM: the host step library in runtime/ compiles it.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_CHECKPOINT_CHECKPOINT_H
#define DISTOPT_CHECKPOINT_CHECKPOINT_H

#include "distopt/StepInterface/StepInterface.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace distopt::checkpoint {

struct Tensor {
  std::string role, name, dtype;
  std::vector<int64_t> shape;
  /// The rank whose copy this is, for state that differs per rank (PowerSGD's
  /// error feedback); -1 for everything else.
  int64_t rank = -1;
  std::vector<char> data;
};

struct Checkpoint {
  int64_t worldSize = 0; // of the run that saved it
  int64_t step = 0;      // steps completed
  std::string model;
  std::vector<Tensor> tensors;

  const Tensor *find(std::string_view role, std::string_view name,
                     int64_t rank = -1) const;
};

/// Bytes per element of `dtype`, or 0 when it is not one a checkpoint holds.
size_t elementBytes(std::string_view dtype);

/// The logical name under which a checkpoint holds the tensor a layout entry
/// `entry` of the argument (`role`, `argName`) describes: the parameter's
/// name, and for state the state key after it ("flat0.exp_avg" holds
/// "w.exp_avg").
std::string logicalName(std::string_view role, std::string_view argName,
                        std::string_view entry);

/// Whether `checkpoint` holds exactly what `step` restores when it runs on
/// its world size: every parameter, main parameter and state tensor, whole
/// (whatever the step's layout), with its dtype and shape; per-rank state
/// once per rank, saved at that world size; and nothing the step lacks.
/// Returns what is missing, different or extra; "" when it fits.
std::string checkFits(const Checkpoint &checkpoint,
                      const step::Interface &step);

/// Writes `checkpoint` to `path` atomically: a temporary file beside it,
/// fsync, rename, fsync of the directory. A crash leaves the previous file.
/// `failAfterBytes` (for tests) stops the process with SIGKILL once that many
/// bytes of the temporary file are written; negative: never. Returns the
/// error ("" on success), naming the file.
std::string write(const std::string &path, const Checkpoint &checkpoint,
                  int64_t failAfterBytes = -1);

/// Reads and validates `path`; every error names the file and what is wrong.
json::Expected<Checkpoint> read(const std::string &path);

/// Validates and decodes a checkpoint's bytes (as read() does a file's);
/// errors are prefixed with `name`.
json::Expected<Checkpoint> decode(std::string_view bytes,
                                  const std::string &name);

} // namespace distopt::checkpoint

#endif // DISTOPT_CHECKPOINT_CHECKPOINT_H
