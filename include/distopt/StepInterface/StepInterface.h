//===- StepInterface.h - what a compiled step takes and returns -*- C++ -*-===//
//
// The one definition of a compiled step's interface (docs/step-abi.md): the
// role of each argument and result, its element type, shape and flat layout,
// and the JSON that distopt-compile embeds in the library and that
// distopt-run, the host step library (runtime/, distopt_step.h) or any
// driver reads back. Standard C++ only, no LLVM: the runtime links it.
//
// The reader checks every field before anything is computed from it: a
// malformed or inconsistent interface (a missing dtype, a negative offset, a
// layout entry outside its buffer, a shard whose length does not match the
// world size) is an error naming the field by its JSON path.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_STEPINTERFACE_STEPINTERFACE_H
#define DISTOPT_STEPINTERFACE_STEPINTERFACE_H

#include "distopt/StepInterface/JSON.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distopt::step {

/// What an argument or result is to the driver (docs/step-abi.md).
enum class Role {
  None,           // no distopt.role: the driver cannot know what to pass
  Param,          // a model parameter
  Grad,           // this rank's local gradient
  MainParam,      // an fp32 main copy of a bf16/f16 parameter
  State,          // optimizer state
  LearningRate,   // the learning rate, a float scalar
  Step,           // the 1-based step number, i64
  Loss,           // a loss the step computes (results only)
  Skipped,        // i1: the step found an overflow and changed nothing
                  // (results only; the step counter does not advance)
  GradAccum,      // the gradient accumulated over this step's earlier
                  // micro-batches (the driver adds into it, the step reads
                  // it, the driver zeroes it after the step)
  Hyperparameter, // an f64 scalar the step reads (`group0.beta1`): the
                  // driver keeps it, starting from its value, and a program
                  // may change it between steps
  ReducedGrad,    // a gradient's shard as a split step's reduce entry
                  // leaves it for its update entry (a buffer of the
                  // driver's, not checkpointed)
  GatheredParam,  // a ZeRO-3 flat parameter gathered whole by a gather
                  // entry, for forward and backward (the driver's buffer,
                  // bound while it is needed; not checkpointed)
};

/// The spelling of `role` in IR attributes and the interface ("param", ...);
/// "" for Role::None.
std::string_view roleName(Role role);
/// The role spelled `name`, or std::nullopt.
std::optional<Role> parseRole(std::string_view name);
/// Every role's spelling, comma-separated, for messages.
std::string knownRoles();

/// An element type, spelled as MLIR prints it, with its size and the
/// runtime's code for it (distopt_rt_dtype; -1 where the runtime has none).
struct DType {
  std::string_view name;
  unsigned bytes;
  bool isFloat;
  int runtimeCode;
};
/// The element type spelled `name`, or null.
const DType *lookupDType(std::string_view name);

/// How the driver fills a state argument before the first step.
enum class Init {
  Zeros,
  Randn,         // a standard normal draw, the same on every rank
  RandnEachStep, // a fresh such draw before every step
};
std::string_view initName(Init init);
/// The init spelled `name` ("zeros", "randn", "randn_each_step"), or
/// std::nullopt.
std::optional<Init> parseInit(std::string_view name);

/// Where one tensor lies in a flat buffer (docs/step-abi.md).
struct LayoutEntry {
  std::string name;
  int64_t offset = 0;
  std::vector<int64_t> shape;
  std::optional<int64_t> owner; // greedy sharding: the rank holding it
  int64_t numel() const;
};

/// One argument or result.
struct Value {
  Role role = Role::None;
  std::string name;
  const DType *dtype = nullptr;
  /// Tensors have a shape ({} for 0-d); scalars have none.
  std::optional<std::vector<int64_t>> shape;
  Init init = Init::Zeros;
  /// State that differs per rank: each rank's copy its own (PowerSGD's
  /// error feedback; checkpoints keep every copy), or with rankMean the
  /// copies stand for their mean (the momentum of Dion's low-rank sync;
  /// checkpoints keep the mean, which every rank resumes from).
  bool perRank = false;
  bool rankMean = false;
  /// Whether a checkpoint keeps a copy per rank.
  bool savedPerRank() const { return perRank && !rankMean; }
  /// A flat ZeRO shard: the padded length of the whole flat buffer, cut
  /// into K = shardOf / numel() parts (K divides the world: K < world is
  /// hybrid sharding); rank r holds part r mod K, elements
  /// [(r mod K) * numel(), (r mod K + 1) * numel()). 0 otherwise.
  int64_t shardOf = 0;
  int64_t shardParts() const { return shardOf ? shardOf / numel() : 0; }
  /// Results: the argument whose buffer holds the result after the call.
  std::optional<int64_t> inPlaceArg;
  /// A scalar state argument (a loss scale, its growth tracker) or a
  /// hyperparameter: the value it starts from (0 when absent). The step's
  /// result of the same role and name is a state scalar's next value.
  std::optional<double> initialValue;
  std::vector<LayoutEntry> layout;

  bool isTensor() const { return shape.has_value(); }
  int64_t numel() const;
  uint64_t bytes() const;
};

/// A compiled step's interface.
/// A process group other than the world that the step communicates on
/// (a mesh axis, listed parts): split from the world when a session
/// starts, so that a bad layout or a missing rank fails there, not in the
/// middle of a step.
struct ProcessGroup {
  std::string name; // the group's symbol
  int64_t size = 1; // ranks in each part
  /// Indexed by world rank: the part it is in and its rank in that part.
  std::vector<int64_t> color, key;
};

/// An entry point of a split step (--distopt-split-step) besides the whole
/// step: the reduction of one gradient argument, or the update that reads
/// what the reductions left. Entries take the step's arguments.
struct Entry {
  enum class Kind { Reduce, Gather, Update };
  std::string name; // "reduce0", "update": the library exports
                    // distopt_step_packed_<name>
  Kind kind = Kind::Update;
  std::vector<int64_t> reduces; // Reduce: the gradient arguments it reduces
  std::vector<int64_t> gathers; // Gather: the parameter shard it gathers
  std::vector<Value> results;
};

/// An entry's kind as the interface spells it: "reduce", "gather", "update".
std::string_view entryKindName(Entry::Kind kind);

struct Interface {
  /// 2: the entry points return a status (docs/step-abi.md).
  static constexpr int64_t kVersion = 2;
  std::string device = "cpu"; // where its buffers live: cpu or cuda
  int64_t worldSize = 1;
  std::optional<double> lr; // the spec's learning rate
  /// The seed of the draws its interface asks for (PowerSGD's Q), when the
  /// step was compiled with one.
  std::optional<uint64_t> seed;
  /// Micro-batches per step: gradient accumulation (1: none).
  int64_t gradAccumulation = 1;
  std::string model;
  std::vector<Value> args, results;
  std::vector<ProcessGroup> groups;
  /// A split step's entry points: its reductions, then its update.
  std::vector<Entry> entries;
  /// Every rank compares these before the first step: ranks running
  /// different steps would issue different collectives.
  int64_t collectiveCount = 0;
  uint64_t collectiveFingerprint = 0;
};

/// Reads and validates an interface; errors ("step interface: PATH: what")
/// name the JSON path.
json::Expected<Interface> parseInterface(std::string_view text);

/// Whether each optimizer state argument says what it holds, so that
/// checkpoints keep it whole: one named `P.<torch state key>` (exp_avg,
/// momentum_buffer, ...) without a layout must have the shape of
/// parameter `P` (an argument of role param or main_param, or an entry of
/// one's layout). A ZeRO shard without its distopt.layout and
/// distopt.shard_of would otherwise be saved as if it were the whole
/// tensor. Returns "" or, for the first offender, its argument index in
/// `*arg` and what is wrong.
std::string checkStateArguments(const Interface &interface, size_t *arg);

/// Whether each result that replaces an argument (same role and name) has
/// that argument's type: it is written back into the argument's buffer.
/// Returns "" or, for the first offender, its result index in `*result`
/// and what is wrong.
std::string checkResults(const Interface &interface, size_t *result);
/// The same for the results of one of its entries.
std::string checkResults(const Interface &interface,
                         const std::vector<Value> &results, size_t *result);

/// The interface as JSON (what parseInterface reads).
json::Value toJSON(const Interface &interface);

} // namespace distopt::step

#endif // DISTOPT_STEPINTERFACE_STEPINTERFACE_H
