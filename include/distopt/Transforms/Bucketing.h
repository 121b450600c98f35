//===- Bucketing.h - pack all_reduces into buckets --------------*- C++ -*-===//
//
// The bucketing that --distopt-bucketize performs, for other passes too
// (PowerSGD batches the tensors it does not compress into one bucket), and
// the batches in which PowerSGD's factors are all-reduced.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TRANSFORMS_BUCKETING_H
#define DISTOPT_TRANSFORMS_BUCKETING_H

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <optional>
#include <tuple>

namespace mlir::distopt {

struct BucketingOptions {
  /// Capacity of each bucket after the first, and of the first, in bytes.
  /// A collective of at least `capBytes` is left unbucketed.
  double capBytes = 25.0 * (1 << 20);
  double firstCapBytes = 1.0 * (1 << 20);
  /// Visit collectives in reverse program order (DDP's order).
  bool reverse = true;
  /// Byte alignment of each tensor in a bucket.
  int64_t alignment = 64;
  /// The link's all_reduce latency and bandwidth (distopt-calibrate). Where
  /// both are set, each kind of bucket gets the cap of bucketCountForLink
  /// instead of the two caps above.
  double latencySeconds = 0;
  double bytesPerSecond = 0;
};

/// How many buckets `totalBytes` of gradients are best split into on a link
/// where an all_reduce of b bytes takes latency + b / bandwidth, while the
/// buckets overlap other work: n buckets pay n latencies, and the last one's
/// transfer cannot be hidden, so n = sqrt(totalBytes / (latency *
/// bandwidth)), at least 1.
int64_t bucketCountForLink(double totalBytes, double latencySeconds,
                           double bytesPerSecond);

struct BucketingResult {
  unsigned buckets = 0;
  unsigned bucketed = 0; // collectives merged into buckets
};

/// Packs the all_reduces of `block` for which `select` holds into buckets
/// (see --distopt-bucketize for the rules) and returns what it did.
BucketingResult bucketizeBlock(Block &block,
                               llvm::function_ref<bool(AllReduceOp)> select,
                               const BucketingOptions &options);

/// Ops that are lowered together, their factors all-reduced in a few
/// collectives (PowerSGD's, Dion's synced by its factors).
struct OpBatch {
  SmallVector<Operation *> members; // in program order
  Operation *insertBefore; // after every member's operands, before any use
};

/// What ops of one batch share: their `batch` number, their group and the
/// element type of the factors they all-reduce.
using BatchKey = std::tuple<int64_t, Attribute, Type>;

/// Groups the ops of `block` that `keyOf` gives a key (or nullopt: alone,
/// where it is) into batches: the same key, and a place in the block after
/// the definitions of all their operands and before the first use of any
/// of their results. In program order, a member with no such place in
/// common with the open batch starts a new one. Ops `isMember` refuses are
/// left out. The ops are not changed.
SmallVector<OpBatch>
batchOps(Block &block, llvm::function_ref<bool(Operation *)> isMember,
         llvm::function_ref<std::optional<BatchKey>(Operation *)> keyOf);

/// Numbers `ops` (in program order) into batches of up to `capBytes`
/// (`bytesOf` each) per group and factor type (`keyOf`): an op that would
/// fill the open batch of its key past the cap opens the next one (an op
/// larger than the cap is alone). Numbers are taken from `next` on, which
/// is left past the last one; `setBatch` gives each op its number.
void numberBatches(
    ArrayRef<Operation *> ops,
    llvm::function_ref<std::pair<Attribute, Type>(Operation *)> keyOf,
    llvm::function_ref<double(Operation *)> bytesOf, double capBytes,
    int64_t &next, llvm::function_ref<void(Operation *, int64_t)> setBatch);

/// PowerSGD ops that are lowered together: their P factors all-reduced in
/// one collective, their Q factors in another (as PyTorch's hook does for
/// the tensors of a bucket).
struct PowerSGDBatch {
  SmallVector<PowerSGDAllReduceOp> members; // in program order
  Operation *insertBefore; // after every member's operands, before any use
};

/// The powersgd_all_reduce ops of `block` in batches (batchOps): by their
/// `batch` number, group and element type.
SmallVector<PowerSGDBatch> batchPowerSGD(Block &block);

/// The distopt.dion_update ops of `block` with a group and a `batch`
/// number in batches (batchOps): by that number, the group and their
/// factors' element type.
SmallVector<OpBatch> batchDionSync(Block &block);

} // namespace mlir::distopt

#endif // DISTOPT_TRANSFORMS_BUCKETING_H
