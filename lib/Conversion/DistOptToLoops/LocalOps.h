//===- LocalOps.h - the lowering of local ops, by family ---------*- C++
//-*-===//
//
// Private to DistOptToLoops: what LowerLocalOps.cpp calls for each op, and
// the helpers the families share. Each lowerX rewrites `op` in place (on
// tensors) and erases it.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_CONVERSION_DISTOPTTOLOOPS_LOCALOPS_H
#define DISTOPT_LIB_CONVERSION_DISTOPTTOLOOPS_LOCALOPS_H

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Transforms/Bucketing.h"

#include "mlir/IR/Builders.h"

namespace mlir::distopt {

// Shared helpers.
/// `value` as a 1-D tensor of its elements, row-major.
Value flatten(OpBuilder &b, Location loc, Value value);
/// The 1-D `value` in `type`'s shape.
Value unflatten(OpBuilder &b, Location loc, Value value, RankedTensorType type);
/// This process's rank in `group`, as an index (a runtime call at `at`).
Value rankOf(OpBuilder &b, Location loc, Operation *at,
             FlatSymbolRefAttr group);
/// Reduces every element of `tensor` into one scalar: acc = combine(acc,
/// element) from `init`.
Value reduceAll(
    OpBuilder &b, Location loc, Value tensor, Value init,
    function_ref<Value(OpBuilder &, Location, Value, Value)> combine);
/// `x` extended to the wider float type `to` (itself if already `to`).
Value widen(OpBuilder &b, Location loc, Value x, Type to);

// Buckets and shards (LowerBuckets.cpp).
void lowerPack(BucketPackOp op);
SmallVector<Value> lowerUnpack(BucketUnpackOp op);
void lowerShardSlice(ShardSliceOp op);
/// A shard of a pack, built directly; beyond `maxCases` ranks its bounds
/// are computed at run time.
void lowerShardOfPack(ShardSliceOp op, BucketPackOp pack, int64_t maxCases);
void lowerOwnedBy(OwnedByOp op);

// Mixed precision, finite checks, clipping (LowerMixedPrecision.cpp).
void lowerUnscale(UnscaleOp op);
void lowerAllFinite(AllFiniteOp op);
void lowerLossScaleUpdate(LossScaleUpdateOp op);
void lowerClipGradNorm(ClipGradNormOp op);

// Compression (LowerCompression.cpp).
void lowerOrthogonalize(OrthogonalizeOp op);
/// A batch of PowerSGD all-reduces; the caller erases its members.
void lowerPowerSGD(PowerSGDBatch &batch);
void lowerTopK(TopKAllReduceOp op);

} // namespace mlir::distopt

#endif // DISTOPT_LIB_CONVERSION_DISTOPTTOLOOPS_LOCALOPS_H
