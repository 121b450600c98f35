//===- StepReport.h - what a transformed step sends and holds ---*- C++ -*-===//
//
// The analysis behind --distopt-report, for the report's tables and for the
// planner's cost model (include/distopt/Planner): per step function, its
// buckets, the bytes each rank sends per collective kind and per process
// group (ring algorithms), each communication in program order, the model
// state each rank holds, and the work of its updates.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TRANSFORMS_STEPREPORT_H
#define DISTOPT_TRANSFORMS_STEPREPORT_H

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/MapVector.h"

#include <map>
#include <string>

namespace mlir::distopt {

struct CollectiveRow {
  int64_t count = 0;
  int64_t payload = 0; // bytes of the data each rank contributes or receives
  double sent = 0;     // bytes each rank sends (ring model)
};

/// One communication of the step, in program order: `count` collectives
/// (each pays a latency) that together send `sent` bytes per rank over
/// `group`. PowerSGD's and Dion's batched factors are one event per member
/// for the bytes (count 0) and one per batch for the collectives.
struct CommEvent {
  ProcessGroupOp group; // null: undeclared
  int64_t count = 0;
  double sent = 0;
  /// Part of reducing gradients (any stage: a bucket's all-reduce, a
  /// reduce-scatter, a reduce to an owner, a compressed reduction), which a
  /// training loop can overlap with backward; the rest (parameter gathers,
  /// broadcasts, votes) follow the update or the reductions.
  bool reducesGradients = false;
  /// A broadcast's or a reduce's chain (getRootedCollectiveCost): its
  /// messages in a row and the bytes its busiest rank sends. 0: a ring's,
  /// whose ranks all send `sent`.
  int64_t steps = 0;
  double busiestSent = 0;
};

struct StepReport {
  int64_t worldSize = 0;
  int64_t parameters = 0;
  struct Bucket {
    size_t tensors;
    int64_t elements, bytes, padding;
  };
  SmallVector<Bucket> buckets;
  llvm::MapVector<StringRef, CollectiveRow> collectives;
  int64_t paramBytes = 0, gradBytes = 0, stateBytes = 0;
  int64_t uncompressed = 0, compressed = 0;
  /// Tensors PowerSGD compresses, and the batches their factors are
  /// all-reduced in (two all_reduces each: P, then Q).
  int64_t powerSGDTensors = 0, powerSGDBatches = 0;
  /// PowerSGD's products and orthogonalization, FLOPs per rank, and the
  /// bytes its error feedback and decompression touch.
  double powerSGDFlops = 0, powerSGDBytes = 0;
  /// Dion updates that all-reduce their factors instead of their gradient
  /// (the low-rank sync), and the batches they do it in (one per update
  /// without a batch number).
  int64_t dionSyncTensors = 0, dionSyncBatches = 0;
  /// Dion updates in blocks of rows (ZeRO's low-rank plan).
  int64_t dionRowTensors = 0;
  /// The collectives' traffic by process group (a group over a mesh's axes
  /// says which: inside a node or across nodes).
  std::map<std::string, CollectiveRow> byGroup;
  /// Every communication, in program order.
  SmallVector<CommEvent> events;
  /// Updates that run on one owner (ZeRO's greedy layout, and updates that
  /// read whole matrices under either): what each rank updates.
  struct OwnerLoad {
    int64_t tensors = 0, elements = 0;
    double flops = 0; // (sums may pass int64_t's range)
    /// Bytes the element-wise updates read and write (their tensor
    /// operands and results).
    double bytes = 0;
  };
  std::map<int64_t, OwnerLoad> owners;
  /// Updates that read whole matrices and run on every rank (no ZeRO, or
  /// ZeRO's gather plan).
  OwnerLoad everyRank;
  /// Element-wise updates every rank runs (on its shard, or whole without
  /// ZeRO): tensors, elements and bytes (their FLOPs are not counted).
  OwnerLoad elementwise;
  /// Bytes packed into buckets and unpacked from them (each copied once
  /// each way).
  double packedBytes = 0;
  /// matrix-plan=auto's predictions (abi::kMatrixPlans), when made.
  ArrayAttr matrixPlans;
};

/// Analyzes step function `func` of `module` (the IR is not changed).
StepReport analyzeStep(ModuleOp module, func::FuncOp func);

/// "@dp (8 ranks)", "@intra_node (2 ranks, axes [1] of @nodes [2, 2])".
std::string describeGroup(ProcessGroupOp group);

} // namespace mlir::distopt

#endif // DISTOPT_TRANSFORMS_STEPREPORT_H
